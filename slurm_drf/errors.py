"""The project's exceptions; `cli.main` maps them to exit codes in one place.

Exit 2 for bad input (`InputError` and its subclasses), 1 for the rest.
"""

from __future__ import annotations

from typing import Final

# The longest line of an error message shown; a value echoed from the input
# (a 5 MB string where a number belongs) must not become a 5 MB line.
MAX_MESSAGE_LINE: Final = 500


def shorten(text: str, limit: int = MAX_MESSAGE_LINE) -> str:
    """`text`, or its start and end around `… (N characters left out) …` when longer than `limit`."""
    if len(text) <= limit:
        return text
    tail = limit // 5
    head = limit - tail
    return f"{text[:head]}… ({len(text) - head - tail} characters left out) …{text[-tail:]}"


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


class HistoryError(InputError):
    """A history.sqlite whose content no slurm-drf wrote (a version below 0, tables missing): exit 2.

    Where the file itself is missing or cannot be opened, that is a StateError.
    """

    category = "history"


class StateError(DrfError):
    """The state directory cannot be used (locked, unsafe permissions)."""

    category = "state"
