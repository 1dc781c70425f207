"""The only code that talks to Slurm: JSON parsers, the runner, the CLI and pyslurm sources, the writers."""
