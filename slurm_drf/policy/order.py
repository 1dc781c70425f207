"""The DRF order of the pending jobs: levels, one sort, exact re-sorting near ties, the tie rule."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

import numpy as np
import numpy.typing as npt

from slurm_drf.model.types import FloatArray, IntArray
from slurm_drf.policy.pools import share_vector
from slurm_drf.policy.state import rotation_key

# Relative distance under which two float levels are compared exactly.
TIE_RTOL: Final = 1e-9


def compute_before(demand: IntArray, account_of: IntArray, usage: IntArray) -> IntArray:
    """Each job's account usage before it: running usage plus the demand of
    the account's earlier pending jobs.

    Rows are grouped by account, in Slurm's order within each; `demand` is
    (J, R) whole records (an array record's TRES times its tasks); `usage`
    is (A, R) running usage indexed by account.
    """
    count = len(account_of)
    if not count:
        return np.zeros_like(demand)
    exclusive = np.cumsum(demand, axis=0) - demand
    starts = np.flatnonzero(np.r_[True, account_of[1:] != account_of[:-1]])
    exclusive -= np.repeat(exclusive[starts], np.diff(np.r_[starts, count]), axis=0)
    before: IntArray = exclusive + usage[account_of]
    return before


@dataclass(frozen=True, slots=True)
class Ordering:
    """The DRF order of one pool's pending jobs.

    `order` indexes the jobs as given; `level` is each job's weighted
    dominant share (float, for display and values); `tied` marks jobs whose
    place a tie decided (equal level and share vector as another account's).
    """

    order: IntArray
    level: FloatArray
    tied: npt.NDArray[np.bool_]


def order_pending(
    before: IntArray,
    account_of: IntArray,
    capacity: IntArray,
    weights: Sequence[Fraction],
    account_names: Sequence[str],
    epoch: int,
    wins: dict[str, float],
    plan_wins: dict[str, float],
) -> Ordering:
    """Sort jobs by (level, share vector), exactly; break full ties by wins, rotation.

    Floats (one correctly rounded division u*q / (c*p) per share, w = p/q)
    sort everything; adjacent rows whose deciding components are within
    TIE_RTOL of each other without being the very same (usage, resource,
    weight) are re-sorted with exact fractions. `wins` (committed plus this
    plan's) and `plan_wins` are updated in place.
    """
    count = len(account_of)
    usable = np.flatnonzero(capacity > 0)
    numerators = np.array([w.numerator for w in weights], dtype=np.float64)
    denominators = np.array([w.denominator for w in weights], dtype=np.float64)
    if len(usable) == 0:
        usable_before = np.zeros((count, 1), dtype=np.int64)
        shares = np.zeros((count, 1), dtype=np.float64)
    else:
        usable_before = before[:, usable]
        shares = (usable_before * denominators[account_of, None]) / (
            capacity[usable].astype(np.float64)[None, :] * numerators[account_of, None]
        )
    columns = np.argsort(-shares, axis=1, kind="stable")
    vector = np.take_along_axis(shares, columns, axis=1)  # largest first
    amounts = np.take_along_axis(usable_before, columns, axis=1)
    width = vector.shape[1]
    index = np.arange(count, dtype=np.int64)
    order = np.lexsort([index, *(vector[:, k] for k in reversed(range(width)))]) if count else index
    tied = np.zeros(count, dtype=np.bool_)
    if count < 2:
        return Ordering(order, vector[:, 0].copy(), tied)

    # Compare each row of the order with the one before it.
    weight_id = _weight_ids(weights)[account_of[order]]
    v, a, c = vector[order], amounts[order], columns[order]
    near = np.abs(v[1:] - v[:-1]) <= TIE_RTOL * np.maximum(np.abs(v[1:]), 1e-300)
    same = (a[1:] == a[:-1]) & (c[1:] == c[:-1]) & (weight_id[1:] == weight_id[:-1])[:, None]
    # Close components that are not the very same (usage, resource, weight)
    # are most often exactly equal rationals (8 of 64,000 CPUs is 1 of 8,000
    # GPUs): u1*q1*c2*p2 == u2*q2*c1*p1 in Python integers settles them, and
    # only pairs that really differ go to the exact re-sort below.
    pairs = np.flatnonzero((near & ~same).any(axis=1))
    if len(pairs) and len(usable):
        caps = capacity[usable].astype(object)
        p = np.array([w.numerator for w in weights], dtype=object)[account_of[order]]
        q = np.array([w.denominator for w in weights], dtype=object)[account_of[order]]
        current, previous = pairs + 1, pairs
        exactly = (
            a[current].astype(object) * q[current, None] * caps[c[previous]] * p[previous, None]
            == a[previous].astype(object) * q[previous, None] * caps[c[current]] * p[current, None]
        )
        same[pairs] |= exactly.astype(np.bool_) & near[pairs]
    far = ~near
    first_far = np.where(far.any(axis=1), far.argmax(axis=1), width)
    in_prefix = np.arange(width)[None, :] < first_far[:, None]
    suspicious = (in_prefix & ~same).any(axis=1)
    equal_prev = np.r_[False, (first_far == width) & same.all(axis=1)]

    if suspicious.any():
        exact = _ExactShares(before, account_of, capacity, weights)
        for start, stop in _runs_around(np.flatnonzero(suspicious) + 1, near[:, 0]):
            rows = sorted(order[start:stop].tolist(), key=lambda i: (exact.vector(i), i))
            order[start:stop] = rows
            equal_prev[start] = False
            for position in range(start + 1, stop):
                equal_prev[position] = exact.vector(rows[position - start]) == exact.vector(rows[position - start - 1])

    group_starts = np.flatnonzero(~equal_prev)
    group_stops = np.r_[group_starts[1:], count]
    multi = np.flatnonzero(group_stops - group_starts > 1)
    for g in multi.tolist():
        start, stop = int(group_starts[g]), int(group_stops[g])
        rows = order[start:stop].tolist()
        if len({int(account_of[i]) for i in rows}) < 2:
            continue
        order[start:stop] = _break_ties(rows, account_of, account_names, epoch, wins, plan_wins)
        tied[rows] = True
    return Ordering(order, vector[:, 0].copy(), tied)


def _weight_ids(weights: Sequence[Fraction]) -> IntArray:
    ids: dict[Fraction, int] = {}
    return np.array([ids.setdefault(w, len(ids)) for w in weights], dtype=np.int64)


def _runs_around(positions: IntArray, near_level: npt.NDArray[np.bool_]) -> list[tuple[int, int]]:
    """Maximal [start, stop) ranges of rows chained by near levels that hold `positions`."""
    runs: list[tuple[int, int]] = []
    for position in positions.tolist():
        if runs and position < runs[-1][1]:
            continue
        start = position - 1
        while start > 0 and near_level[start - 1]:
            start -= 1
        stop = position + 1
        while stop - 1 < len(near_level) and near_level[stop - 1]:
            stop += 1
        runs.append((start, stop))
    return runs


class _ExactShares:
    """Exact sorted share vectors of single rows, computed on demand."""

    def __init__(self, before: IntArray, account_of: IntArray, capacity: IntArray, weights: Sequence[Fraction]) -> None:
        self._before = before
        self._account_of = account_of
        self._capacity = [int(x) for x in capacity]
        self._weights = weights
        self._cache: dict[int, tuple[Fraction, ...]] = {}

    def vector(self, row: int) -> tuple[Fraction, ...]:
        if row not in self._cache:
            self._cache[row] = share_vector(
                [int(x) for x in self._before[row]], self._capacity, self._weights[int(self._account_of[row])]
            ) or (Fraction(0),)
        return self._cache[row]


def _break_ties(
    rows: list[int],
    account_of: IntArray,
    account_names: Sequence[str],
    epoch: int,
    wins: dict[str, float],
    plan_wins: dict[str, float],
) -> list[int]:
    """Order rows of equal level and share vector: fewer tie wins first, then rotation.

    Rows come in index order, so each account's rows are in Slurm's order.
    An account wins a tie when it is placed while another account waits.
    """
    queues: dict[int, list[int]] = {}
    for row in rows:
        queues.setdefault(int(account_of[row]), []).append(row)
    for queue in queues.values():
        queue.reverse()  # pop() takes the next row

    def entry(account: int) -> tuple[float, int, str, int]:
        name = account_names[account]
        return (wins.get(name, 0.0), rotation_key(epoch, name), name, account)

    heap = [entry(account) for account in queues]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        *_, account = heapq.heappop(heap)
        if heap:
            name = account_names[account]
            wins[name] = wins.get(name, 0.0) + 1.0
            plan_wins[name] = plan_wins.get(name, 0.0) + 1.0
        queue = queues[account]
        out.append(queue.pop())
        if queue:
            heapq.heappush(heap, entry(account))
    return out
