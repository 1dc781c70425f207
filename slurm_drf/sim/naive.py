"""`drf-naive`: the textbook loop with the two bugs fair-share code is known for, as a baseline.

Shares are rounded down to whole percents and equal shares go by account
name, so one account can win every tie (docs/evaluation.md): what slurm-drf
must never do, measured beside it. Builds on `policies.DrfPolicy` for
everything but the order.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from slurm_drf.config.settings import Config
from slurm_drf.sim.daemon_loop import SlurmSide
from slurm_drf.sim.policies import DrfPolicy


class NaiveDrfPolicy(DrfPolicy):
    """The textbook loop with whole-percent shares and ties broken by account name."""

    name = "drf-naive"

    def __init__(self, config: Config | None = None, site: SlurmSide | None = None) -> None:
        super().__init__(config, engine="fast", site=site)

    def on_start(self, job: int, now: float) -> None:
        """Nothing to remember: the naive loop looks at usage only."""

    def on_end(self, job: int, now: float) -> None:
        """Nothing to forget."""

    def reorder(self, now: float) -> list[int] | None:
        self.plans += 1
        sim = self.sim
        table = self.table
        # Each account's records in Slurm's order, as drf takes them: its bug is the rounding and the names.
        index = self._slurm_grouped(self.age(now))
        by_account: list[list[int]] = [[] for _ in table.accounts]
        for record, account in zip(index.tolist(), table.record_account_array[index].tolist(), strict=True):
            by_account[account].append(record)
        order = naive_order(
            by_account,
            sim.usage.tolist(),
            table.record_total,
            sim.record_pending,
            sim.capacity,
            self.fractions,
            table.accounts,
        )
        return self._planned(np.array(order, dtype=np.int64))


def naive_share(usage: Sequence[int], capacity: Sequence[int], weight: Fraction) -> int:
    """max_r floor(100 x usage_r / capacity_r / weight): whole percents, as the naive code does."""
    best = 0
    for used, cap in zip(usage, capacity, strict=True):
        if cap > 0:
            best = max(best, (100 * used * weight.denominator) // (cap * weight.numerator))
    return best


def naive_order(
    records_by_account: Sequence[Sequence[int]],
    usage: Sequence[Sequence[int]],
    record_demand: Sequence[Sequence[int]],
    record_tasks: Sequence[int],
    capacity: Sequence[int],
    weights: Sequence[Fraction],
    names: Sequence[str],
) -> list[int]:
    """Progressive filling: serve the lowest whole-percent share; equal shares go by account name."""
    current = [list(row) for row in usage]
    taken = [0] * len(records_by_account)
    heap = [
        (naive_share(current[a], capacity, weights[a]), names[a], a)
        for a, records in enumerate(records_by_account)
        if records
    ]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, name, account = heapq.heappop(heap)
        record = records_by_account[account][taken[account]]
        order.append(record)
        tasks = record_tasks[record]
        current[account] = [c + d * tasks for c, d in zip(current[account], record_demand[record], strict=True)]
        taken[account] += 1
        if taken[account] < len(records_by_account[account]):
            heapq.heappush(heap, (naive_share(current[account], capacity, weights[account]), name, account))
    return order
