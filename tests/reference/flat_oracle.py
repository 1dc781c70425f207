"""The textbook DRF loop on exact fractions: the oracle the tests and benchmarks compare the engine with."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from fractions import Fraction

from slurm_drf.policy.pools import share_vector, weighted_share
from slurm_drf.policy.state import rotation_key


def reference_order(
    pending_by_account: Mapping[str, Sequence[Sequence[int]]],
    usage: Mapping[str, Sequence[int]],
    capacity: Sequence[int],
    weights: Mapping[str, Fraction],
    epoch: int = 1,
    wins: Mapping[str, float] | None = None,
) -> list[tuple[str, int]]:
    """The DRF order by the greedy loop: always serve the lowest current share.

    `pending_by_account[a]` lists the demand vectors of a's pending jobs in
    Slurm's order (an array record's demand already multiplied by its
    tasks). Returns (account, index in its list) in order. Exact fractions,
    same tie rule as `order_pending`. O(J log A).
    """
    tie_wins = dict(wins or {})
    current = {a: [int(x) for x in usage.get(a, [0] * len(capacity))] for a in pending_by_account}
    taken = dict.fromkeys(pending_by_account, 0)

    def entry(account: str) -> tuple[Fraction, tuple[Fraction, ...], float, int, str]:
        weight = weights.get(account, Fraction(1))
        return (
            weighted_share(current[account], capacity, weight),
            share_vector(current[account], capacity, weight),
            tie_wins.get(account, 0.0),
            rotation_key(epoch, account),
            account,
        )

    heap = [entry(a) for a, jobs in pending_by_account.items() if jobs]
    heapq.heapify(heap)
    out: list[tuple[str, int]] = []
    while heap:
        level, vector, *_, account = heapq.heappop(heap)
        if heap and heap[0][:2] == (level, vector):
            tie_wins[account] = tie_wins.get(account, 0.0) + 1.0
        index = taken[account]
        out.append((account, index))
        demand = pending_by_account[account][index]
        current[account] = [c + int(d) for c, d in zip(current[account], demand, strict=True)]
        taken[account] = index + 1
        if taken[account] < len(pending_by_account[account]):
            heapq.heappush(heap, entry(account))
    return out
