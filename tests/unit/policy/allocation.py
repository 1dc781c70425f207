"""The allocation a DRF order induces, for the property tests.

The engine only orders pending jobs; the guarantees of DRF (sharing
incentive, envy-freeness, Pareto efficiency, ...) are statements about
the allocation that Slurm reaches by starting jobs in that order. This
module plays the scheduler in the simplest way that is still faithful: it
walks the order once and starts each job whose demand fits into what is
left of the pool, skipping (not stopping at) a job that does not fit. An
array record with k tasks starts up to k tasks, one at a time. Integers
only, so every comparison is exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from slurm_drf.model.types import Job
from slurm_drf.policy.plan import Plan

Vector = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Placement:
    """One entry of an order to place: an account's record and its tasks."""

    account: str
    demand: Vector  # one task
    tasks: int = 1


@dataclass(slots=True)
class Allocation:
    """What the walk started: tasks and resources per account, and what is left."""

    tasks: dict[str, int] = field(default_factory=dict)
    held: dict[str, list[int]] = field(default_factory=dict)
    free: list[int] = field(default_factory=list)
    started: list[int] = field(default_factory=list)  # tasks started per entry of the order

    def vector(self, account: str) -> Vector:
        return tuple(self.held.get(account, [0] * len(self.free)))


def fits(demand: Sequence[int], free: Sequence[int]) -> bool:
    return all(d <= f for d, f in zip(demand, free, strict=True))


def place(order: Sequence[Placement], free: Sequence[int]) -> Allocation:
    """Start the order's jobs greedily into `free` (capacity less running usage)."""
    out = Allocation(free=[int(f) for f in free])
    for entry in order:
        out.tasks.setdefault(entry.account, 0)
        held = out.held.setdefault(entry.account, [0] * len(out.free))
        started = 0
        while started < entry.tasks and fits(entry.demand, out.free):
            for r, amount in enumerate(entry.demand):
                out.free[r] -= amount
                held[r] += amount
            started += 1
        out.tasks[entry.account] += started
        out.started.append(started)
    return out


def demand_vector(job: Job, resources: Sequence[str]) -> Vector:
    return tuple(job.tres.get(r, 0) for r in resources)


def plan_placements(plan: Plan, pool: str, jobs: Sequence[Job]) -> list[Placement]:
    """A pool's ordered jobs as placements, in the plan's order."""
    by_id = {j.job_id: j for j in jobs}
    ordered = sorted(
        (j for j in plan.jobs if j.pool == pool and j.order is not None),
        key=lambda j: j.order if j.order is not None else -1,
    )
    return [
        Placement(j.account, demand_vector(by_id[j.job_id], plan.resources), by_id[j.job_id].array_tasks)
        for j in ordered
    ]


def free_capacity(capacity: Sequence[int], running: Mapping[str, Sequence[int]]) -> list[int]:
    """Capacity less every account's running usage."""
    free = [int(c) for c in capacity]
    for usage in running.values():
        for r, amount in enumerate(usage):
            free[r] -= int(amount)
    return free


def tasks_in(bundle: Sequence[int], demand: Sequence[int]) -> int | None:
    """How many tasks of `demand` fit into `bundle`; None if unbounded (all-zero demand)."""
    counts = [b // d for b, d in zip(bundle, demand, strict=True) if d > 0]
    return min(counts) if counts else None


def dominant_share(usage: Sequence[int], capacity: Sequence[int], weight: Fraction = Fraction(1)) -> Fraction:
    """Exact max_r usage_r / capacity_r over capacity > 0, divided by the weight."""
    shares = [Fraction(u, c) for u, c in zip(usage, capacity, strict=True) if c > 0]
    return max(shares, default=Fraction(0)) / weight
