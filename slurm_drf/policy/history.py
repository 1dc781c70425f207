"""Memory of past use: the decayed average allocation of each account (docs/rule.md §6).

Pure: the cycle layer reads the records (trail.past from history.sqlite)
and hands them here; `compute_plan` takes the result as `past`.

Each record is what one cycle saw running: per pool, per account, the
allocation of each resource. A record holds from its time until the next
record's; a gap longer than `max_gap` is unknown and counts in neither the
sum nor its weight (not as zero use). The last record holds until `now`
when `now` is within `max_gap` of it. A record built from Slurm's
accounting (`build_usage_records`) says how long it is known to hold
(`until`): it holds until the next record when that comes within
`max_gap` of `until`, and otherwise until `until` only. With decay 2^(-age/half_life), the
weight of an interval [a, b) at time `now` is its integral

    D(a, b) = half_life / ln 2 x (2^(-(now-b)/half_life) - 2^(-(now-a)/half_life))

and an account's decayed average allocation of r is

    past_r = sum allocation_r x D  /  sum D        (over the known intervals)

in units of allocation (CPUs, MiB, GPUs). The integral rather than one age
per interval makes the total independent of where the records fall: an
interval split in two weighs what it weighed whole, so replaying the same
records after a restart gives the same totals.

`DecayedUsage` keeps the two sums decayed to its last record's time, so
adding a cycle costs one pass over the accounts; `past_at(now)` adds the
open interval to now.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from slurm_drf.config.settings import Config
from slurm_drf.policy.pools import DEFAULT_POOL

# pool -> account -> resource -> amount
UsageByPool = Mapping[str, Mapping[str, Mapping[str, float]]]

EMPTY_PAST: Final[UsageByPool] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """What one cycle saw: the running allocation per pool, account and resource, at `time` (seconds)."""

    time: float
    usage: UsageByPool
    # Known to hold at least until then whatever the next record's time (a span filled from sacct).
    until: float | None = None


@dataclass(frozen=True, slots=True)
class Allocation:
    """What one job held from `start` to `end` (None: still running), TRES by Slurm's name; absolute seconds."""

    account: str
    partition: str  # where it ran; of a comma list the first managed one decides, as for a live job
    start: float
    end: float | None
    tres: Mapping[str, int]


def decay_weight(start: float, stop: float, now: float, half_life: float) -> float:
    """The integral of 2^(-(now-t)/half_life) over t in [start, stop)."""
    if stop <= start:
        return 0.0
    rate = math.log(2.0) / half_life
    return (math.exp(-rate * (now - stop)) - math.exp(-rate * (now - start))) / rate


class DecayedUsage:
    """Running sums of allocation x decay weight, and of the weight, per (pool, account, resource).

    Both sums are kept decayed to the time of the last record; the ratio
    does not depend on that reference. No I/O and no clock: times come in
    with the records and with `past_at(now)`.
    """

    def __init__(self, half_life: float, max_gap: float) -> None:
        if half_life <= 0 or max_gap <= 0:
            raise ValueError("half_life and max_gap must be > 0")
        self.half_life = half_life
        self.max_gap = max_gap
        self.last_time: float | None = None
        self._last: UsageByPool = EMPTY_PAST
        self._last_until: float | None = None
        self._sums: dict[str, dict[str, dict[str, float]]] = {}
        self._weight = 0.0  # sum D over the known intervals, decayed to last_time

    def add(self, record: UsageRecord) -> None:
        """The interval from the last record to this one (unless it is a gap), then this record."""
        if self.last_time is not None:
            elapsed = max(0.0, record.time - self.last_time)
            factor = 2.0 ** (-elapsed / self.half_life)
            self._decay(factor)
            weight = self._known_weight(elapsed)
            if weight:
                self._accumulate(self._last, weight)
        if self.last_time is None or record.time >= self.last_time:
            self.last_time = record.time
        self._last = record.usage
        self._last_until = record.until

    def _known_weight(self, elapsed: float) -> float:
        """The weight, decayed to its end, of the known part of the `elapsed` seconds after the last record."""
        if elapsed <= self.max_gap:
            return decay_weight(0.0, elapsed, elapsed, self.half_life)
        if self.last_time is None or self._last_until is None:
            return 0.0
        known = self._last_until - self.last_time  # the last record vouches for this long
        if elapsed - known <= self.max_gap:
            return decay_weight(0.0, elapsed, elapsed, self.half_life)
        return decay_weight(0.0, min(known, elapsed), elapsed, self.half_life)

    def extend(self, records: Iterable[UsageRecord]) -> None:
        for record in records:
            self.add(record)

    def past_at(self, now: float) -> UsageByPool:
        """Each account's decayed average allocation at `now`, per pool and resource."""
        if self.last_time is None:
            return EMPTY_PAST
        elapsed = max(0.0, now - self.last_time)
        factor = 2.0 ** (-elapsed / self.half_life)
        open_weight = self._known_weight(elapsed)
        total = self._weight * factor + open_weight
        if total <= 0.0:
            return EMPTY_PAST
        out: dict[str, dict[str, dict[str, float]]] = {}
        for pool in set(self._sums) | set(self._last if open_weight else ()):
            sums = self._sums.get(pool, {})
            current = self._last.get(pool, {}) if open_weight else {}
            accounts: dict[str, dict[str, float]] = {}
            for account in set(sums) | set(current):
                old = sums.get(account, {})
                now_use = current.get(account, {})
                accounts[account] = {
                    r: (old.get(r, 0.0) * factor + now_use.get(r, 0.0) * open_weight) / total
                    for r in set(old) | set(now_use)
                }
            out[pool] = accounts
        return MappingProxyType(out)

    def _decay(self, factor: float) -> None:
        self._weight *= factor
        for accounts in self._sums.values():
            for resources in accounts.values():
                for resource in resources:
                    resources[resource] *= factor

    def _accumulate(self, usage: UsageByPool, weight: float) -> None:
        self._weight += weight
        for pool, accounts in usage.items():
            pool_sums = self._sums.setdefault(pool, {})
            for account, resources in accounts.items():
                sums = pool_sums.setdefault(account, {})
                for resource, amount in resources.items():
                    sums[resource] = sums.get(resource, 0.0) + amount * weight


def build_partition_pools(config: Config) -> Callable[[str], str | None]:
    """The pool a job on `partitions` (a comma list) counts in, as compute_plan maps a live job.

    Without `pools:` or `partitions:` every partition is in the default pool
    (policy.pools.build_pools reads the snapshot's only to list them); None
    for a partition no pool manages.
    """
    if not config.pools and config.partitions is None:
        return lambda _partitions: DEFAULT_POOL
    index: dict[str, str] = {}
    pools = [(p.name, p.partitions) for p in config.pools] or [(DEFAULT_POOL, config.partitions or ())]
    for name, partitions in pools:
        for partition in partitions:
            index.setdefault(partition, name)
    return lambda partitions: next((index[p] for p in partitions.split(",") if p in index), None)


def build_usage_records(
    allocations: Iterable[Allocation],
    start: float,
    stop: float,
    pool_of: Callable[[str], str | None],
    resources: Sequence[str],
    exclude: frozenset[str] = frozenset(),
) -> list[UsageRecord]:
    """The usage step function of `allocations` over [start, stop), as records known until `stop`.

    One record at `start` and one at every start or end of an allocation
    inside the span, each holding what ran from then on: exact, whatever
    the span's length (no sampling). Allocations on unmanaged partitions and
    of excluded accounts count nowhere, as in a cycle's record.
    """
    changes: dict[float, list[tuple[str, str, Mapping[str, int], int]]] = {start: []}
    for allocation in allocations:
        pool = pool_of(allocation.partition)
        if pool is None or allocation.account in exclude:
            continue
        begin = max(allocation.start, start)
        end = stop if allocation.end is None else min(allocation.end, stop)
        if end <= begin:
            continue
        changes.setdefault(begin, []).append((pool, allocation.account, allocation.tres, 1))
        if end < stop:
            changes.setdefault(end, []).append((pool, allocation.account, allocation.tres, -1))
    running: dict[str, dict[str, dict[str, int]]] = {}
    records: list[UsageRecord] = []
    for moment in sorted(changes):
        for pool, account, tres, sign in changes[moment]:
            amounts = running.setdefault(pool, {}).setdefault(account, dict.fromkeys(resources, 0))
            for resource in resources:
                amounts[resource] += sign * tres.get(resource, 0)
        usage = {
            pool: {
                a: {r: float(n) for r, n in amounts.items()} for a, amounts in accounts.items() if any(amounts.values())
            }
            for pool, accounts in running.items()
        }
        records.append(UsageRecord(moment, usage, until=stop))
    return records


def decayed_past(records: Iterable[UsageRecord], now: float, half_life: float, max_gap: float) -> UsageByPool:
    """The decayed average allocation at `now` over `records` (oldest first)."""
    usage = DecayedUsage(half_life, max_gap)
    usage.extend(records)
    return usage.past_at(now)


def past_term(
    past: Mapping[str, Mapping[str, float]], weight: float, resources: Iterable[str]
) -> dict[str, dict[str, int]]:
    """What the past adds to each account's usage: round(weight x past_r), to the resource's unit.

    Rounded half to even, to whole units of the resource as Slurm counts it
    (a CPU, a MiB, a GPU), so the order keeps comparing integers exactly.
    Accounts and resources that add nothing are left out.
    """
    wanted = tuple(resources)
    out: dict[str, dict[str, int]] = {}
    for account, amounts in past.items():
        added = {r: round(weight * amounts.get(r, 0.0)) for r in wanted}
        added = {r: a for r, a in added.items() if a}
        if added:
            out[account] = added
    return out
