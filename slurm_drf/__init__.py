"""slurm-drf: dominant resource fairness for Slurm clusters."""

__version__ = "1.0.0"
