"""Options more than one verb takes, defined once (cli.main and cli.trail add them)."""

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
