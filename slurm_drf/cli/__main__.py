"""`python -m slurm_drf.cli`: the same as the `slurm-drf` command."""

from slurm_drf.cli.main import run

run()
