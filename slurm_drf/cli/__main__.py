"""`python -m slurm_drf.cli`: the same as the `slurm-drf` command."""

import sys

from slurm_drf.cli.main import main

sys.exit(main(sys.argv[1:]))
