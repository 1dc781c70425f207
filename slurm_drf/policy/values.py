"""From the order to the values written to Slurm: strictly increasing, within Slurm's clamps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from slurm_drf.config.settings import NICE_LIMIT
from slurm_drf.model.types import FloatArray, IntArray
from slurm_drf.policy.state import JobMemory


def adjust_for_memory(  # noqa: C901
    job_ids: Sequence[str],
    priority: IntArray,
    nice: IntArray,
    site_factor: Sequence[int | None],
    mode: str,
    memory: Mapping[str, JobMemory],
) -> tuple[IntArray, IntArray, list[int | None]]:
    """Per job: base priority, the user's own nice, and the value Slurm has now.

    Base priority is Slurm's with this daemon's adjustment removed. The
    user's nice is what the job had before we first wrote it; if the job's
    nice is no longer what we wrote, somebody changed it since, and that is
    the user's (or an admin's) new choice. site_factor cannot be read back
    from squeue, so its current value is the one we remember writing.
    """
    # In priority mode the daemon owns the order: Slurm's own priority is
    # gone once written, so within an account submit order decides, for
    # touched and untouched jobs alike (else the first write would reorder).
    base = priority.copy() if mode != "priority" else np.zeros_like(priority)
    own = nice.copy()
    if mode == "nice":
        current: list[int | None] = nice.tolist()
    elif mode == "priority":
        current = priority.tolist()
    else:
        current = list(site_factor)
    if not memory:
        return base, own, current
    for k, job_id in enumerate(job_ids):
        remembered = memory.get(job_id)
        if remembered is None:
            continue
        # The user's nice, whatever mode wrote last: nice mode's value is ours
        # while Slurm still shows it; priority mode made Slurm zero the nice.
        if (remembered.mode == "nice" and int(nice[k]) == remembered.written) or remembered.mode == "priority":
            own[k] = remembered.user_nice
        if remembered.mode != mode:
            continue  # another mode wrote it; that is undone before this mode writes
        if mode == "nice":
            base[k] = priority[k] + (nice[k] - own[k])
        elif mode == "site_factor":
            if current[k] is None:
                current[k] = remembered.written
            base[k] = priority[k] - remembered.written
    return base, own, current


def map_values(level_sorted: FloatArray, scale: int, step: int = 1) -> tuple[IntArray, int]:
    """Increasing values along the order, and how many pairs of distinct levels collided.

    raw = round(scale x level); each value is at least its predecessor +
    `step`. With step = 1 + the sum of Slurm's other priority weights, those
    factors (each between 0 and its weight) can never swap two neighbours.
    """
    raw = np.floor(level_sorted * scale + 0.5)
    raw = np.minimum(raw, float(2**62)).astype(np.int64)
    index = np.arange(len(raw), dtype=np.int64) * step
    values: IntArray = np.maximum.accumulate(raw - index) + index
    collisions = 0
    if len(raw) > 1:
        distinct = level_sorted[1:] != level_sorted[:-1]
        collisions = int(np.count_nonzero(distinct & (raw[1:] <= raw[:-1])))
    return values, collisions


def priority_weight_sum(weights: Mapping[str, int]) -> int:
    """The most Slurm's other factors can add to a job's priority (PriorityWeight*).

    PriorityWeightTRES is counted through its per-TRES entries
    (`PriorityWeightTRES/CPU`), each factor being at most its weight.
    """
    return sum(v for k, v in weights.items() if k.startswith("PriorityWeight") and k != "PriorityWeightTRES")


def mode_values(mode: str, values: IntArray, offset: int, user_nice: IntArray) -> IntArray:
    """The numbers written to Slurm in `mode` (docs/rule.md §5), vectorised.

    nice: the user's nice plus ours, ours at most -1 so that Slurm's clamp
    of priority to >= 1 never merges two jobs; site_factor and priority:
    offset - value, at least 1 (priority 0 would hold the job).
    """
    if mode == "nice":
        ours = np.minimum(values - offset, -1)
        return np.clip(user_nice + ours, -NICE_LIMIT, NICE_LIMIT)
    return np.clip(offset - values, 1, NICE_LIMIT)
