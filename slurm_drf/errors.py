"""The project's exceptions; cli.py maps them to exit codes in one place.

Exit 2 for bad input (`InputError` and its subclasses), 1 for the rest.
"""

from __future__ import annotations


class DrfError(Exception):
    """Base of every error slurm-drf raises on purpose."""

    category = "error"


class InputError(DrfError):
    """Bad input from the person running us: exit code 2."""

    category = "input"


class ConfigError(InputError):
    """A config file that does not validate; the message holds file:line: key."""

    category = "config"

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


class SnapshotError(InputError):
    """A snapshot that breaks the contract of docs/formats.md."""

    category = "snapshot"


class SlurmError(DrfError):
    """Slurm could not be read or written; transient for the daemon."""

    category = "slurm"


class SlurmReadError(SlurmError):
    category = "slurm read"


class SlurmWriteError(SlurmError):
    category = "slurm write"


class StateError(DrfError):
    """The state directory cannot be used (locked, unsafe permissions)."""

    category = "state"
