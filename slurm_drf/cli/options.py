"""Options more than one verb takes, defined once (cli.main and cli.trail add them);
and what the verbs leave to a process that ends without teardown (`leave_to_exit`)."""

from __future__ import annotations

import argparse

from slurm_drf.model.snapshot_file import DEFAULT_MAX_SNAPSHOT_BYTES

_MIB = 1024 * 1024


def whole_number(text: str) -> int:
    """A whole number for argparse, or its one-line error."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def at_least(minimum: int, text: str) -> int:
    """An argparse type body: a whole number, at least `minimum`."""
    value = whole_number(text)
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected a number >= {minimum}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number, at least 1 (the `--jobs`, `--nodes`, `--max-snapshot-mb` kind)."""
    return at_least(1, text)


def add_snapshot_limit(parser: argparse.ArgumentParser) -> None:
    """`--max-snapshot-mb N`: the largest snapshot file read (a guard against /dev/zero and the like)."""
    parser.add_argument(
        "--max-snapshot-mb",
        type=positive_int,
        default=DEFAULT_MAX_SNAPSHOT_BYTES // _MIB,
        metavar="N",
        help=f"refuse a snapshot file larger than N MiB (default {DEFAULT_MAX_SNAPSHOT_BYTES // _MIB}; "
        "100,000 jobs are about 40 MiB)",
    )


def snapshot_limit(args: argparse.Namespace) -> int:
    """The byte limit `--max-snapshot-mb` asks for."""
    mib: int = args.max_snapshot_mb
    return mib * _MIB


# The objects the verbs leave to the exit of a process that `cli.main.run`
# ends with os._exit (`plan`, `report`, `explain`); None while no such process
# runs (tests call `main`).
_left_to_exit: list[object] | None = None


def exit_without_teardown() -> None:
    """From now on this process ends with os._exit: `leave_to_exit` keeps what it is handed."""
    global _left_to_exit  # noqa: PLW0603  (one switch for the whole process)
    _left_to_exit = []


def exits_without_teardown() -> bool:
    """Whether this process ends with os._exit (so a verb need free nothing)."""
    return _left_to_exit is not None


def leave_to_exit(*objects: object) -> None:
    """Keep `objects` alive to the os._exit, which never frees them one by one (nothing in a normal exit)."""
    if _left_to_exit is not None:
        _left_to_exit.extend(objects)


def left_to_exit() -> list[object] | None:
    """What the verbs left to the exit (None: the process exits normally)."""
    return _left_to_exit
