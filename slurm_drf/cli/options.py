"""Options more than one verb takes, defined once (cli.main and cli.trail add them)."""

from __future__ import annotations

import argparse

from slurm_drf.model.snapshot_file import DEFAULT_MAX_SNAPSHOT_BYTES

_MIB = 1024 * 1024


def _positive_mib(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of MiB, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1 MiB, got {value}")
    return value


def add_snapshot_limit(parser: argparse.ArgumentParser) -> None:
    """`--max-snapshot-mb N`: the largest snapshot file read (a guard against /dev/zero and the like)."""
    parser.add_argument(
        "--max-snapshot-mb",
        type=_positive_mib,
        default=DEFAULT_MAX_SNAPSHOT_BYTES // _MIB,
        metavar="N",
        help=f"refuse a snapshot file larger than N MiB (default {DEFAULT_MAX_SNAPSHOT_BYTES // _MIB}; "
        "100,000 jobs are about 40 MiB)",
    )


def snapshot_limit(args: argparse.Namespace) -> int:
    """The byte limit `--max-snapshot-mb` asks for."""
    mib: int = args.max_snapshot_mb
    return mib * _MIB
