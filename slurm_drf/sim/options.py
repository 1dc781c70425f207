"""What a simulator run is asked (`SimOptions`) and what it returns (`SimResult`).

Beside `engine`, which plays a workload with these; `run_metrics`,
`compare`, the replay and the CLI read the results.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from slurm_drf.model.types import BoolArray, FloatArray, IntArray
from slurm_drf.sim.workload import Workload

DEFAULT_INTERVAL: Final = 60.0
DEFAULT_BACKFILL_DEPTH: Final = 500
# `--backfill slurm` gives every job it tests a reservation, so its cost grows
# with the depth: the bursty scenario took 741 s at 500 (Slurm's
# bf_max_job_test) and about 80 s of CPU at 20, the depth docs/evaluation.md uses.
DEFAULT_SLURM_BACKFILL_DEPTH: Final = 20
BACKFILL_MODES: Final = ("easy", "slurm")
DEFAULT_BACKFILL: Final = "easy"


def default_backfill_depth(backfill: str) -> int:
    """The depth a backfill mode runs at unless told: 500 for easy, 20 for slurm."""
    return DEFAULT_SLURM_BACKFILL_DEPTH if backfill == "slurm" else DEFAULT_BACKFILL_DEPTH


@dataclass(frozen=True, slots=True)
class SimOptions:
    """How to run: policy interval (also the sampling period), backfill mode and depth."""

    interval: float = DEFAULT_INTERVAL
    backfill_depth: int = DEFAULT_BACKFILL_DEPTH
    backfill: str = DEFAULT_BACKFILL  # one of BACKFILL_MODES
    # Keep every processed event time (for the tests of monotonic time).
    record_events: bool = False
    # Seconds a requeued job waits before it may start again (Slurm's requeue delay, SPEC §9).
    requeue_delay: float = 120.0


@dataclass(frozen=True, slots=True)
class SimResult:
    """Everything one run produced; `run_metrics` turns it into numbers."""

    policy: str
    workload: Workload
    interval: float
    accounts: tuple[str, ...]
    weights: tuple[float, ...]
    capacity: tuple[int, int, int]
    job_account: IntArray  # (J,) index into accounts
    submit: FloatArray  # (J,)
    start: FloatArray  # (J,)
    end: FloatArray  # (J,)
    backfilled: BoolArray  # (J,) started by the backfill pass
    job_nodes: tuple[tuple[int, ...], ...]
    sample_time: FloatArray  # (S,)
    sample_share: FloatArray  # (S, A) weighted dominant share
    sample_pending: IntArray  # (S, A) pending jobs (tasks)
    sample_used: IntArray  # (S, 3) allocated cpu, mem, gres/gpu
    event_times: FloatArray | None
    plans: int
    passes: int
    # slurm backfill: when each job was first given a reservation (NaN: never).
    reserved_at: FloatArray | None = None
    # Values the policy wrote to Slurm at each plan (policies that model writing).
    writes: IntArray | None = None
    # Ticks skipped while nothing ran and nothing waited (all but the first of
    # such a stretch): each would have been a sample of zeros (no share,
    # nothing pending, nothing used) and a plan of an empty queue from an
    # unchanged state. Not in the sample arrays or `plans`; averages over
    # time count them.
    idle_ticks: int = 0
    # Each requeue (a policy's reclaim): (job, when, how long it had run).
    requeued: tuple[tuple[int, float, float], ...] = ()
