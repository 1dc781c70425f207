"""Named points where the fault tier kills the process (tests/integration/test_live_faults.py).

`SLURM_DRF_FAILPOINT=NAME` in the environment makes the process SIGKILL
itself when it reaches the point NAME, so a test can stop a cycle exactly
between two of its side effects, as a power cut or an OOM kill would, and
check that the next start needs no manual step. Unset (always, outside
tests) every point is one dictionary look-up. The points, in cycle order:

- `read`: the cluster has been read, nothing decided yet;
- `saved`: the new memory is saved, nothing written to Slurm yet;
- `mid_writes`: half of the cycle's writes sent to Slurm, the rest not;
- `history_commit`: the cycle's history rows inserted, not committed;
- `compaction_commit`: an hour's compacted rows inserted, not committed.
"""

from __future__ import annotations

import os
import signal
from typing import Final

VARIABLE: Final = "SLURM_DRF_FAILPOINT"
POINTS: Final = ("read", "saved", "mid_writes", "history_commit", "compaction_commit")


def armed(point: str) -> bool:
    """Whether the process is to die at `point`."""
    return os.environ.get(VARIABLE) == point


def reached(point: str) -> None:
    """Die here, by SIGKILL (no handler, no clean-up), when `point` is armed."""
    if armed(point):
        os.kill(os.getpid(), signal.SIGKILL)
