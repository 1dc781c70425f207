"""slurm-drf: dominant resource fairness for Slurm clusters."""

__version__ = "0.1.0"
