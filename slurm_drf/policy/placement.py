"""A job's place at submission (docs/rule.md §8): the table, and placing one job with it.

Pure, like the rest of the policy. `build_table` takes from a plan what a
job_submit script needs to place a new job where the next cycle would put
it: per pool the capacity, each account's weight and its usage before its
next job, and the pool's DRF order sampled as (level, value) points.
`Placer` places jobs with a table the way the Lua script does
(`slurm_drf/data/slurm_drf_submit.lua`): the job's level over its
account's usage plus what the account had placed since the table, then the
value between the points around that level. The simulator runs it; the
tests hold the Lua side to it. docs/formats.md (`slurm-drf-placement/1`)
writes the table as text (`trail.placement`).

Pools ordered over a tree (H-DRF, §7) are not in the table, and neither
is anything in priority mode: the script leaves such jobs to the next cycle.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final

import numpy as np

from slurm_drf.config.settings import DEFAULT_STALE_INTERVALS, NICE_LIMIT, Config
from slurm_drf.policy.plan import Plan, PoolPlan
from slurm_drf.policy.plan_columns import PoolOrder
from slurm_drf.policy.state import LABEL_NICE_BELOW
from slurm_drf.policy.values import value_offset

# Every job of the exact band is a point, up to this many; then at most
# COARSE_POINTS more spread over the rest of the order. The table is
# bounded whatever the queue (about 2,500 points a pool); the exact band
# is the part of the order Slurm's schedulers look at (docs/rule.md §5),
# and a job placed beyond it lands between two points 1/500 of the rest
# apart, which the next cycle corrects where it matters.
MAX_BAND_POINTS: Final = 2000
COARSE_POINTS: Final = 500
# Names the script reads as one field; an account, partition or pool with
# anything else is left out (its jobs wait for the next cycle).
NAME: Final = re.compile(r"[A-Za-z0-9._-]+\Z")
# A resource: Slurm's TRES names (`cpu`, `gres/gpu`, `gres/gpu:a100`, `license/matlab`).
RESOURCE: Final = re.compile(r"[A-Za-z0-9._/:-]+\Z")
# Modes whose value a job_submit script may set (never priority: a set priority stops later nice updates).
PLACED_MODES: Final = ("nice", "site_factor")


@dataclass(frozen=True, slots=True)
class AccountEntry:
    weight: Fraction
    usage: tuple[int, ...]  # before the account's next job, by the table's resources


@dataclass(frozen=True, slots=True)
class PoolTable:
    """One pool of the table: what placing a job there takes."""

    name: str
    partitions: tuple[str, ...]
    capacity: tuple[int, ...]
    default_weight: Fraction
    best: int  # the value of the best place in the order (a virtual point before the first)
    worst: int  # the value of the worst place (a virtual point after the last)
    gap: int  # how far apart the exact band keeps neighbours (docs/rule.md §5)
    accounts: Mapping[str, AccountEntry]
    excluded: frozenset[str]
    levels: tuple[float, ...]  # non-decreasing
    values: tuple[int, ...]  # from best towards worst


@dataclass(frozen=True, slots=True)
class PlacementTable:
    written: float
    stale_after: float
    mode: str
    resources: tuple[str, ...]
    pools: tuple[PoolTable, ...] = ()


def value_range(mode: str, offset: int) -> tuple[int, int]:
    """(BEST, WORST): the values a placed job may take in `mode` with labels below `offset`.

    A placed nice must be a label (below LABEL_NICE_BELOW): the next cycle recognises it by that alone.
    """
    return (-offset, LABEL_NICE_BELOW - 1) if mode == "nice" else (offset, 1)


def build_table(plan: Plan, config: Config, written: float) -> PlacementTable:
    """The table for `plan`, written at `written` (Unix seconds)."""
    stale = config.placement.stale_intervals if config.placement is not None else DEFAULT_STALE_INTERVALS
    pools: list[PoolTable] = []
    if plan.mode in PLACED_MODES and all(RESOURCE.match(r) for r in plan.resources):
        for pool, record in zip(plan.pools, plan.orders, strict=True):
            named = [p for p in pool.partitions if NAME.match(p)]
            if (
                record.next_usage is not None
                and NAME.match(pool.name)
                and named
                and any(pool.capacity.values())
                and _placeable(plan.mode, *value_range(plan.mode, value_offset(config)))
            ):
                pools.append(_pool_table(plan, config, pool, record))
    return PlacementTable(written, stale * config.interval, plan.mode, plan.resources, tuple(pools))


def _placeable(mode: str, best: int, worst: int) -> bool:
    """Whether some value is left for a placed job: BEST at or before WORST (nice values rise towards
    it, site factors fall). Not so in nice mode with a small offset or factor weighting, whose labels
    all lie above LABEL_NICE_BELOW."""
    return best <= worst if mode == "nice" else best >= worst


def _pool_table(plan: Plan, config: Config, pool: PoolPlan, record: PoolOrder) -> PoolTable:
    assert record.next_usage is not None
    best, worst = value_range(plan.mode, value_offset(config))
    accounts: dict[str, AccountEntry] = {}
    for code, name in enumerate(record.accounts):
        usage, weight = record.next_usage[code], record.weights[code]
        if (
            name not in config.exclude_accounts
            and NAME.match(name)
            and (usage.any() or weight != config.default_weight)
        ):
            accounts[name] = AccountEntry(weight, tuple(int(u) for u in usage))
    zeros = (0,) * len(plan.resources)
    for name, weight in config.weights.items():
        if name not in accounts and name not in config.exclude_accounts and NAME.match(name):
            accounts[name] = AccountEntry(weight, zeros)
    levels, values = _points(plan, record)
    return PoolTable(
        pool.name,
        tuple(p for p in pool.partitions if NAME.match(p)),
        tuple(int(pool.capacity.get(r, 0)) for r in plan.resources),
        config.default_weight,
        best,
        worst,
        pool.gap,
        dict(sorted(accounts.items())),
        frozenset(a for a in config.exclude_accounts if NAME.match(a)),
        levels,
        values,
    )


def _points(plan: Plan, record: PoolOrder) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """The pool's order sampled: every job of the exact band, then at most COARSE_POINTS more.

    A level goes with the value of the same rank in the pool (the k-th best
    value with the k-th job): the exact band's values already rise with the
    order; the coarse band's keep their labels while their rank is near
    their place, and Slurm orders by the values, so the rank is what counts.
    """
    size = record.size
    if not size:
        return (), ()
    span = slice(record.offset, record.offset + size)
    levels = np.asarray(plan.column("level")[span], dtype=np.float64)
    values = np.asarray(plan.column("value")[span], dtype=np.int64)
    if plan.mode == "nice":
        # A job's own nice is in its value; a new job has none (the script leaves jobs with one alone).
        ours = values - np.asarray(plan.column("user_nice")[span], dtype=np.int64)
        values = np.sort(np.clip(ours, -NICE_LIMIT, -1))
    else:
        values = np.sort(values)[::-1]
    band = min(record.exact, MAX_BAND_POINTS, size)
    picked = np.arange(band)
    if size > band:
        coarse = np.linspace(band, size - 1, num=min(size - band, COARSE_POINTS)).round().astype(np.int64)
        picked = np.concatenate([picked, np.unique(coarse)])
    return tuple(levels[picked].tolist()), tuple(values[picked].tolist())


def level_of(usage: Sequence[int], capacity: Sequence[int], weight: Fraction) -> float:
    """§2's level over `usage`: the largest share of a resource of capacity > 0, over the weight."""
    shares = [u / c for u, c in zip(usage, capacity, strict=True) if c > 0]
    return (max(shares) if shares else 0.0) / float(weight)


def value_between(low: int, high: int, gap: int) -> int:
    """A value just after `low` towards `high`: one gap on (so that a burst placed there one after
    another stays a gap apart, as the exact band keeps it), the middle where two gaps do not fit,
    `low` itself where nothing fits between (the next cycle separates them)."""
    room = abs(high - low)
    step = 1 if high >= low else -1
    if room >= 2 * gap:
        return low + step * gap
    return low + step * (room // 2)


@dataclass
class _PoolPoints:
    """A pool's points, with the jobs placed since the table among them."""

    levels: list[float]
    values: list[int]


@dataclass
class Placer:
    """Places jobs with one table as the script does.

    Each placed job adds its demand to its account's usage and becomes a
    point itself, so a burst from one account interleaves with the others'
    work as the greedy loop would order it, each job a gap after the last.
    """

    table: PlacementTable
    since: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    points: dict[str, _PoolPoints] = field(default_factory=dict)

    def pool_of(self, partitions: Sequence[str]) -> PoolTable | None:
        """The pool holding every one of `partitions`; None when none does, or they span pools."""
        found = {pool.name: pool for pool in self.table.pools for p in partitions if p in pool.partitions}
        if len(found) != 1:
            return None
        pool = next(iter(found.values()))
        return pool if all(p in pool.partitions for p in partitions) else None

    def place(self, partitions: Sequence[str], account: str, demand: Sequence[int], tasks: int = 1) -> int | None:
        """The value for a new job (its first task's, for an array of `tasks`), or None: left unchanged."""
        pool = self.pool_of(partitions)
        if pool is None or account in pool.excluded:
            return None
        entry = pool.accounts.get(account, AccountEntry(pool.default_weight, (0,) * len(pool.capacity)))
        added = self.since.setdefault((pool.name, account), [0] * len(pool.capacity))
        level = level_of([u + a for u, a in zip(entry.usage, added, strict=True)], pool.capacity, entry.weight)
        points = self.points.setdefault(pool.name, _PoolPoints(list(pool.levels), list(pool.values)))
        after = bisect.bisect_right(points.levels, level)
        low = points.values[after - 1] if after else pool.best
        high = points.values[after] if after < len(points.values) else pool.worst
        value = value_between(low, high, pool.gap)
        if value != pool.worst and (value - pool.worst) * (pool.worst - pool.best) > 0:
            return None  # past WORST: the next cycle could not tell it from a nice of the user's own
        points.levels.insert(after, level)
        points.values.insert(after, value)
        for r, amount in enumerate(demand):
            added[r] += amount * tasks
        return value
