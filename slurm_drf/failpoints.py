"""Named points where the fault tier kills the process (tests/integration/test_live_faults.py).

`SLURM_DRF_FAILPOINT=NAME` in the environment makes the process SIGKILL
itself when it reaches the point NAME, so a test can stop a cycle exactly
between two of its side effects, as a power cut or an OOM kill would, and
check that the next start needs no manual step. Unset (always, outside
tests) every point is one dictionary look-up. The points, in cycle order,
are `WHERE`'s keys (docs/operations.md lists them; a unit test keeps the
two and the calls in the code the same).

The first look at the variable in a process that has it set logs one
warning naming the point and where it is (or that no point has that
name): a failpoint left armed on a head node would kill the daemon in the
middle of every cycle, and must not do so silently.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

logger = logging.getLogger(__name__)

VARIABLE: Final = "SLURM_DRF_FAILPOINT"
# Each point, in cycle order, and where a process armed with it dies.
WHERE: Final[Mapping[str, str]] = MappingProxyType(
    {
        "read": "the cluster has been read, nothing decided yet",
        "saved": "the new memory is saved, nothing written to Slurm yet",
        "mid_writes": "half of the cycle's writes sent to Slurm, the rest not",
        "history_commit": "the cycle's history rows inserted, not committed",
        "compaction_commit": "an hour's compacted rows inserted, not committed",
    }
)
POINTS: Final = tuple(WHERE)

# Whether this process has said that a failpoint is armed (once per process).
_announced = False


def armed(point: str) -> bool:
    """Whether the process is to die at `point`."""
    chosen = os.environ.get(VARIABLE)
    if chosen is None:
        return False
    _announce(chosen)
    return chosen == point


def reached(point: str) -> None:
    """Die here, by SIGKILL (no handler, no clean-up), when `point` is armed."""
    if armed(point):
        os.kill(os.getpid(), signal.SIGKILL)


def describe_armed(chosen: str) -> str:
    """The warning for `SLURM_DRF_FAILPOINT=chosen`: which point, and where the process will die."""
    if chosen in WHERE:
        return (
            f"{VARIABLE}={chosen} is set: this process (pid {os.getpid()}) kills itself with SIGKILL "
            f"at the failpoint {chosen!r} ({WHERE[chosen]}); it is for the fault tier only, never a head node"
        )
    return (
        f"{VARIABLE}={chosen!r} is set but names no failpoint (they are {', '.join(POINTS)}); "
        "it does nothing, and is for the fault tier only"
    )


def _announce(chosen: str) -> None:
    global _announced  # noqa: PLW0603 - once per process, whichever point is looked at first
    if not _announced:
        _announced = True
        logger.warning("%s", describe_armed(chosen))
