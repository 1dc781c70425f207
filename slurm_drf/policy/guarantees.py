"""Guarantees in the order (docs/rule.md §9): the jobs within their account's guarantee go first.

Pure. A job is *within its account's guarantee* when the account's usage
before it (running, plus its earlier pending jobs in Slurm's order) plus
its own demand is at most the guarantee in every resource the guarantee
names; once one of an account's jobs is not, none after it is (its usage
before the next job holds this one's demand). `guaranteed_first` moves those jobs ahead of the
rest, keeping the DRF order within each part: the DRF loop serves the
accounts below their guarantees first, then the ordinary loop everyone.
`policy/reclaim.py` frees room for them when nothing ends in time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from slurm_drf.model.types import IntArray

# A guarantee by the pool's resources: a whole amount, or UNNAMED where it does not name the resource.
UNNAMED = -1


def within_guarantee(
    account_of: IntArray, before: IntArray, demand: IntArray, guarantees: Sequence[Sequence[int] | None]
) -> npt.NDArray[np.bool_]:
    """(J,) whether each job is within its account's guarantee (rows grouped by account, Slurm's order
    within each; `guarantees[a]` by resource, UNNAMED where it names none, None: no guarantee)."""
    count, width = demand.shape if demand.ndim == 2 else (len(account_of), 0)
    limit = np.full((len(guarantees), width), np.iinfo(np.int64).max, dtype=np.int64)
    has = np.zeros(len(guarantees), dtype=np.bool_)
    for a, guarantee in enumerate(guarantees):
        if guarantee is not None:
            has[a] = True
            row = np.asarray(guarantee, dtype=np.int64)
            limit[a] = np.where(row == UNNAMED, np.iinfo(np.int64).max, row)
    if not count:
        return np.zeros(0, dtype=np.bool_)
    fits: npt.NDArray[np.bool_] = has[account_of] & (before + demand <= limit[account_of]).all(axis=1)
    return fits


def guaranteed_first(order: IntArray, within: npt.NDArray[np.bool_]) -> IntArray:
    """`order` (jobs by position) with the jobs `within` their guarantee first, each part in its order."""
    first = within[order]
    moved: IntArray = np.concatenate([order[first], order[~first]])
    return moved
