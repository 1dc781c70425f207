"""Memory of past use: the decayed average allocation of each account (docs/rule.md §6).

Pure: the cycle layer reads the records (trail.past from history.sqlite)
and hands them here; `compute_plan` takes the result as `past`.

Each record is what one cycle saw running: per pool, per account, the
allocation of each resource. A record holds from its time until the next
record's; a gap longer than `max_gap` is unknown and counts in neither the
sum nor its weight (not as zero use). The last record holds until `now`
when `now` is within `max_gap` of it. With decay 2^(-age/half_life_s), the
weight of an interval [a, b) at time `now` is its integral

    D(a, b) = half_life_s / ln 2 x (2^(-(now-b)/half_life_s) - 2^(-(now-a)/half_life_s))

and an account's decayed average allocation of r is

    past_r = sum allocation_r x D  /  sum D        (over the known intervals)

in units of allocation (CPUs, MiB, GPUs). The integral rather than one age
per interval makes the total independent of where the records fall: an
interval split in two weighs what it weighed whole, so replaying the same
records after a restart gives the same totals.

`DecayedUsage` keeps the two sums decayed to its last record's time, so
adding a cycle costs one pass over the accounts; `past_at(now)` adds the
open interval to now. A span known from Slurm's accounting
(`build_usage_span`, filled in by trail.past where the records are
unknown) adds in one step the exact integral of its step function of
usage: the sum over its jobs of allocation x D over their part of the span.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, TypeGuard

import numpy as np
import numpy.typing as npt

from slurm_drf.config.settings import Config
from slurm_drf.policy.decay import decay_factor, decay_factors, decay_weight
from slurm_drf.policy.pools import DEFAULT_POOL

# pool -> account -> resource -> amount
UsageByPool = Mapping[str, Mapping[str, Mapping[str, float]]]

EMPTY_PAST: Final[UsageByPool] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """What one cycle saw: the running allocation per pool, account and resource, at `time` (seconds)."""

    time: float
    usage: UsageByPool


@dataclass(frozen=True, slots=True)
class Allocation:
    """What one job held from `start` to `end` (None: still running), TRES by Slurm's name; absolute seconds."""

    account: str
    partition: str  # where it ran; of a comma list the first managed one decides, as for a live job
    start: float
    end: float | None
    tres: Mapping[str, int]


class DecayedUsage:
    """Running sums of allocation x decay weight, and of the weight, per (pool, account, resource).

    Both sums are kept decayed to the time of the last record; the ratio
    does not depend on that reference. No I/O and no clock: times come in
    with the records and with `past_at(now)`.
    """

    def __init__(self, half_life_s: float, max_gap: float) -> None:
        if half_life_s <= 0 or max_gap <= 0:
            raise ValueError("half_life and max_gap must be > 0")
        self.half_life_s = half_life_s
        self.max_gap = max_gap
        self.last_time: float | None = None
        self._last: UsageByPool = EMPTY_PAST
        self._sums: dict[str, dict[str, dict[str, float]]] = {}
        self._weight = 0.0  # sum D over the known intervals, decayed to last_time

    def add(self, record: UsageRecord) -> None:
        """The interval from the last record to this one (unless it is a gap), then this record."""
        if self.last_time is not None:
            elapsed = max(0.0, record.time - self.last_time)
            factor = decay_factor(elapsed, self.half_life_s)
            self._decay(factor)
            if elapsed <= self.max_gap:
                weight = decay_weight(0.0, elapsed, elapsed, self.half_life_s)
                self._accumulate(self._last, weight)
        if self.last_time is None or record.time >= self.last_time:
            self.last_time = record.time
        self._last = record.usage

    def add_span(self, span: UsageSpan) -> None:
        """A known span from Slurm's accounting (not before the last record), then what ran at its end.

        The interval from the last record to the span's start closes as
        `add` would close it; the span adds its integrals and its whole
        weight, and `span.running` then holds from its end like a record's
        usage.
        """
        if span.half_life_s != self.half_life_s:
            raise ValueError("the span was integrated with another half-life")
        self.add(UsageRecord(span.start, EMPTY_PAST))
        length = max(0.0, span.stop - span.start)
        self._decay(decay_factor(length, self.half_life_s))
        self._weight += decay_weight(0.0, length, length, self.half_life_s)
        self._add_sums(span.integrals, 1.0)
        self.last_time = span.start + length
        self._last = span.running

    def add_stretch(self, stretch: UsageStretch) -> None:
        """A known stretch integrated elsewhere (compacted hours of the record), not before the last record.

        The interval from the last record to the stretch's start closes as
        `add` would close it; the stretch adds its weight and integrals
        (decayed to its stop). Nothing is known to hold after it: what
        follows is a record at its stop, or a gap.
        """
        self.add(UsageRecord(stretch.start, EMPTY_PAST))
        length = max(0.0, stretch.stop - stretch.start)
        self._decay(decay_factor(length, self.half_life_s))
        self._weight += stretch.weight
        self._add_sums(stretch.integrals, 1.0)
        self.last_time = stretch.start + length
        self._last = EMPTY_PAST

    def extend(self, records: Iterable[UsageRecord]) -> None:
        for record in records:
            self.add(record)

    def past_at(self, now: float) -> UsageByPool:
        """Each account's decayed average allocation at `now`, per pool and resource."""
        if self.last_time is None:
            return EMPTY_PAST
        elapsed = max(0.0, now - self.last_time)
        factor = decay_factor(elapsed, self.half_life_s)
        open_weight = decay_weight(0.0, elapsed, elapsed, self.half_life_s) if elapsed <= self.max_gap else 0.0
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

    def render_state(self) -> dict[str, object]:
        """What `from_state` needs to go on exactly from here: both sums, the last record's usage and time."""
        return {
            "half_life": self.half_life_s,
            "max_gap": self.max_gap,
            "last_time": self.last_time,
            "weight": self._weight,
            "sums": self._sums,
            "last": {pool: dict(accounts) for pool, accounts in self._last.items()},
        }

    @classmethod
    def from_state(cls, data: object) -> DecayedUsage:
        """The DecayedUsage `render_state` described; ValueError for anything else.

        The sums and amounts must be finite and >= 0 (no state can lower a
        past or make it NaN), the times finite.
        """
        if not isinstance(data, Mapping):
            raise ValueError("not an object")
        half_life_s, max_gap, last_time, weight = (data.get(k) for k in ("half_life", "max_gap", "last_time", "weight"))
        if not (_is_amount(half_life_s) and _is_amount(max_gap) and _is_amount(weight)):
            raise ValueError("half_life, max_gap or weight is not a number >= 0")
        if last_time is not None and not (_is_number(last_time) and math.isfinite(last_time)):
            raise ValueError("last_time is not a time")
        usage = cls(float(half_life_s), float(max_gap))
        usage.last_time = None if last_time is None else float(last_time)
        usage._weight = float(weight)
        usage._sums = _parse_amounts(data.get("sums"), "sums")
        usage._last = MappingProxyType(_parse_amounts(data.get("last"), "last"))
        return usage

    def _decay(self, factor: float) -> None:
        self._weight *= factor
        for accounts in self._sums.values():
            for resources in accounts.values():
                for resource in resources:
                    resources[resource] *= factor

    def _accumulate(self, usage: UsageByPool, weight: float) -> None:
        self._weight += weight
        self._add_sums(usage, weight)

    def _add_sums(self, usage: UsageByPool, weight: float) -> None:
        for pool, accounts in usage.items():
            pool_sums = self._sums.setdefault(pool, {})
            for account, resources in accounts.items():
                sums = pool_sums.setdefault(account, {})
                for resource, amount in resources.items():
                    sums[resource] = sums.get(resource, 0.0) + amount * weight


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_amount(value: object) -> TypeGuard[int | float]:
    return _is_number(value) and math.isfinite(value) and value >= 0


def _parse_amounts(data: object, key: str) -> dict[str, dict[str, dict[str, float]]]:
    """pool -> account -> resource -> amount (finite, >= 0) from JSON; ValueError naming `key` otherwise."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{key} is not an object")
    out: dict[str, dict[str, dict[str, float]]] = {}
    for pool, accounts in data.items():
        if not isinstance(accounts, Mapping):
            raise ValueError(f"{key}.{pool} is not an object")
        for account, amounts in accounts.items():
            if not isinstance(amounts, Mapping) or not all(_is_amount(a) for a in amounts.values()):
                raise ValueError(f"{key}.{pool}.{account} is not an object of amounts >= 0")
            out.setdefault(str(pool), {})[str(account)] = {str(r): float(a) for r, a in amounts.items()}
    return out


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


@dataclass(frozen=True, slots=True)
class UsageSpan:
    """A span [start, stop) known from Slurm's accounting, integrated against the decay.

    `integrals` is, per pool, account and resource, the sum over the
    allocations of amount x D over their part of the span, decayed to
    `stop` (with `half_life_s`): exactly what the span's step function of
    usage adds, however many jobs started and ended in it. `running` is
    what still ran at `stop`.
    """

    start: float
    stop: float
    half_life_s: float
    integrals: UsageByPool
    running: UsageByPool


@dataclass(frozen=True, slots=True)
class UsageStretch:
    """A known stretch [start, stop) of the record, integrated against the decay from its compacted hours.

    `weight` is its sum of D and `integrals`, per pool, account and
    resource, its sum of usage x D, both decayed to `stop`
    (`StretchSum` builds them from the hours trail.past.read_stretches reads;
    docs/rule.md §6 bounds the error of the compaction).
    """

    start: float
    stop: float
    weight: float
    integrals: UsageByPool


# Contributions are kept scaled up from the stretch's reference time, 2^((t - reference)/H);
# past this exponent the reference moves up (float64 holds 2^1023).
_RESCALE_EXPONENT: Final = 200.0


@dataclass(frozen=True, slots=True, eq=False)
class StretchGroup:
    """Compacted hours of the same accounts and resources, summed in place: `key` names the group
    (the reader's own ids of its lists), `keys` are its rows (pool, account), `resources` its columns."""

    key: Hashable
    keys: Sequence[tuple[str, str]]
    resources: Sequence[str]


class StretchSum:
    """The half-life walk over the record's compacted hours: sums them into stretches (`UsageStretch`),
    per group of keys one matrix in the hours' own order, merged at the end.

    Each hour adds its whole decay weight and, per account and resource, its
    usage integral placed at its centre of mass (docs/rule.md §6 bounds the
    error); hours within `max_gap` of each other make one stretch. Hours of
    the same accounts add up in place (no per-hour decay of the sums, no
    gathering by index): 2,000 hours of 2,000 accounts in a fraction of a
    second. trail.past reads the hours from history.sqlite.
    """

    def __init__(self, half_life_s: float, max_gap: float) -> None:
        self.half_life_s = half_life_s
        self.max_gap = max_gap
        self._groups: dict[Hashable, tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_], StretchGroup]] = {}
        self.done: list[UsageStretch] = []
        self._start = 0.0
        self._stop: float | None = None
        self._reference = 0.0
        self._weight = 0.0

    def add(
        self,
        start: float,
        stop: float,
        group: StretchGroup,
        usage: npt.NDArray[np.float64],
        centre: npt.NDArray[np.float64],
    ) -> None:
        """One hour [start, stop): per key and resource its usage integral (NaN: not held) and the
        centre of mass of that usage, in seconds from `start`."""
        if self._stop is not None and start - self._stop > self.max_gap:
            self._flush()
        if self._stop is None:
            self._start = self._stop = self._reference = start
        if (stop - self._reference) / self.half_life_s > _RESCALE_EXPONENT:
            self._rescale(stop)
        # The pause before this row (none between hours of a running daemon) held no
        # record: known idle time when it is short, as `DecayedUsage.add` counts it.
        self._weight += decay_weight(min(self._stop, start), stop, self._reference, self.half_life_s)
        present = ~np.isnan(usage)
        held = self._groups.get(group.key)
        if held is None:
            held = self._groups[group.key] = (np.zeros(usage.shape), np.zeros(usage.shape, dtype=bool), group)
        sums, seen, _ = held
        # Decayed back to the reference: a row later than it grows (elapsed below zero).
        sums += np.where(present, usage, 0.0) * decay_factors(self._reference - (start + centre), self.half_life_s)
        seen |= present
        self._stop = max(self._stop, stop)

    def _rescale(self, reference: float) -> None:
        factor = decay_factor(reference - self._reference, self.half_life_s)
        for sums, _, _ in self._groups.values():
            np.multiply(sums, factor, out=sums)
        self._weight *= factor
        self._reference = reference

    def _flush(self) -> None:
        if self._stop is None:
            return
        self._rescale(self._stop)  # decayed to the stretch's stop
        integrals: dict[str, dict[str, dict[str, float]]] = {}
        for sums, seen, group in self._groups.values():
            for (pool, account), row, known in zip(group.keys, sums.tolist(), seen.tolist(), strict=True):
                if not any(known):
                    continue
                amounts = integrals.setdefault(pool, {}).setdefault(account, {})
                for name, amount, there in zip(group.resources, row, known, strict=True):
                    if there:
                        amounts[name] = amounts.get(name, 0.0) + amount
        self.done.append(UsageStretch(self._start, self._stop, self._weight, integrals))
        self._stop, self._weight = None, 0.0
        self._groups = {}

    def finish(self) -> list[UsageStretch]:
        """The stretches, oldest first (the last one closed)."""
        self._flush()
        return self.done


def build_usage_span(
    allocations: Iterable[Allocation],
    start: float,
    stop: float,
    half_life_s: float,
    pool_of: Callable[[str], str | None],
    resources: Sequence[str],
    exclude: frozenset[str] = frozenset(),
) -> UsageSpan:
    """What `allocations` add over [start, stop): one pass over them, two exponentials each.

    Allocations on unmanaged partitions and of excluded accounts count
    nowhere, as in a cycle's record; an account that ran nothing in the
    span is absent (it used nothing then).
    """
    integrals: dict[str, dict[str, dict[str, float]]] = {}
    running: dict[str, dict[str, dict[str, float]]] = {}
    for allocation in allocations:
        pool = pool_of(allocation.partition)
        if pool is None or allocation.account in exclude:
            continue
        begin = max(allocation.start, start)
        still_running = allocation.end is None or allocation.end > stop
        end = stop if allocation.end is None else min(allocation.end, stop)
        if end <= begin:
            continue
        weight = decay_weight(begin, end, stop, half_life_s)
        sums = integrals.setdefault(pool, {}).setdefault(allocation.account, dict.fromkeys(resources, 0.0))
        held = running.setdefault(pool, {}).setdefault(allocation.account, dict.fromkeys(resources, 0.0))
        for resource in resources:
            amount = allocation.tres.get(resource, 0)
            sums[resource] += amount * weight
            if still_running:
                held[resource] += amount
    running = {p: {a: h for a, h in accounts.items() if any(h.values())} for p, accounts in running.items()}
    return UsageSpan(start, stop, half_life_s, integrals, running)


def decayed_past(records: Iterable[UsageRecord], now: float, half_life_s: float, max_gap: float) -> UsageByPool:
    """The decayed average allocation at `now` over `records` (oldest first)."""
    usage = DecayedUsage(half_life_s, max_gap)
    usage.extend(records)
    return usage.past_at(now)


def past_term(
    past: Mapping[str, Mapping[str, float]], weight: float, resources: Iterable[str]
) -> dict[str, dict[str, int]]:
    """What the past adds to each account's usage: round(weight x past_r), to the resource's unit.

    Rounded half to even, to whole units of the resource as Slurm counts it
    (a CPU, a MiB, a GPU), so the order keeps comparing integers exactly.
    Accounts and resources that add nothing are left out, and so is an
    amount that is not a finite number > 0: a past never lowers an
    account's usage (which would let it jump the queue).
    """
    wanted = tuple(resources)
    out: dict[str, dict[str, int]] = {}
    for account, amounts in past.items():
        added = {r: _whole_amount(weight * amounts.get(r, 0.0)) for r in wanted}
        added = {r: a for r, a in added.items() if a}
        if added:
            out[account] = added
    return out


def _whole_amount(amount: float) -> int:
    """round(amount) half to even; 0 for what is not a finite number > 0 (NaN, negative, infinite)."""
    return round(amount) if 0.0 < amount < math.inf else 0
