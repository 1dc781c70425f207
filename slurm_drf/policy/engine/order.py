"""The DRF order of the pending jobs: levels, one sort, exact re-sorting near ties, the tie rule.

Pure, under `policy.plan`. Besides the order, `order_pending` records why
each job got its place (where its level and its share vector start to
differ from the job before it, and how each tie was broken), so that
`trail.explain` reads the engine's decision instead of recomputing it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Final, TypeVar

import numpy as np
import numpy.typing as npt

from slurm_drf.model.types import FloatArray, IntArray
from slurm_drf.policy.pools import fraction_parts
from slurm_drf.policy.rule import share_vector
from slurm_drf.policy.state import TieBook

# Relative distance under which two float levels are compared exactly.
TIE_RTOL: Final = 1e-9

_V = TypeVar("_V")


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
class TieRecord:
    """How the tie rule ordered one group of exactly equal (level, share vector).

    The group holds positions [start, stop) of the order and at least two
    accounts. `wins` and `rotation` are each account's tie wins when the
    group was broken and its rotation key; `placed_wins[k]` is the tie wins
    the account of position start + k had when that job was placed (its
    key in the rule's heap), which says, for every job placed while another
    account waited, whether it won by fewer wins or by the rotation.
    """

    start: int
    stop: int
    wins: Mapping[str, float]
    rotation: Mapping[str, int]
    placed_wins: tuple[float, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Ordering:
    """The DRF order of one pool's pending jobs, and why each job has its place.

    `order` maps positions to the jobs as given; `level` (each job's
    weighted dominant share, float, for display and values) and `tied`
    (jobs whose place a tie decided: equal level and share vector as
    another account's) are indexed by job. `new_level` and `new_vector` are
    indexed by position: True where the exact level, or the exact (level,
    share vector), is greater than at the position before (and at 0).
    `ties` are the groups the tie rule broke, in order.
    """

    order: IntArray
    level: FloatArray
    tied: npt.NDArray[np.bool_]
    new_level: npt.NDArray[np.bool_]
    new_vector: npt.NDArray[np.bool_]
    ties: tuple[TieRecord, ...] = ()


def order_pending(
    before: IntArray,
    account_of: IntArray,
    capacity: IntArray,
    weights: Sequence[Fraction],
    account_names: Sequence[str],
    ties: TieBook,
) -> Ordering:
    """Sort jobs by (level, share vector), exactly; break full ties by wins, rotation.

    Floats (one correctly rounded division u*q / (c*p) per share, w = p/q)
    sort everything; adjacent rows whose deciding components are within
    TIE_RTOL of each other without being the very same (usage, resource,
    weight) are re-sorted with exact fractions. Full ties go to the rule of
    `ties`, which counts the wins.
    """
    count = len(account_of)
    usable = np.flatnonzero(capacity > 0)
    numerators, denominators = fraction_parts(weights)
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
        return Ordering(order, vector[:, 0].copy(), tied, np.ones(count, np.bool_), np.ones(count, np.bool_))

    # In the order: each row's share vector (largest first), the usage behind each
    # component, and which resource each component is; each against the row before.
    shares_at, usage_at, resource_at = vector[order], amounts[order], columns[order]
    near, same = _compare_with_previous(
        shares_at, usage_at, resource_at, account_of[order], _weight_ids(weights), capacity[usable], weights
    )
    # Per row: the first component that settles it against the row before (width: none does);
    # a row is suspicious when a component before that is near but not the same, so only an
    # exact comparison can say which comes first; it equals the row before when every
    # component is the same.
    far = ~near
    first_far = np.where(far.any(axis=1), far.argmax(axis=1), width)
    before_first_far = np.arange(width)[None, :] < first_far[:, None]
    suspicious = (before_first_far & ~same).any(axis=1)
    equal_prev = np.r_[False, (first_far == width) & same.all(axis=1)]
    # A near level that is not the same is suspicious, so outside the exact
    # runs below near and same levels are exactly equal ones.
    equal_level = np.r_[False, near[:, 0] & same[:, 0]]

    if suspicious.any():
        exact = _ExactShares(before, account_of, capacity, weights)
        for start, stop in _runs_around(np.flatnonzero(suspicious) + 1, near[:, 0]):
            rows = sorted(order[start:stop].tolist(), key=lambda i: (exact.vector(i), i))
            order[start:stop] = rows
            equal_prev[start] = equal_level[start] = False
            for position in range(start + 1, stop):
                here, there = exact.vector(rows[position - start]), exact.vector(rows[position - start - 1])
                equal_prev[position] = here == there
                equal_level[position] = here[0] == there[0]

    records = _break_groups(order, account_of, equal_prev, account_names, ties, tied)
    return Ordering(order, vector[:, 0].copy(), tied, ~equal_level, ~equal_prev, records)


def _compare_with_previous(
    shares_at: FloatArray,
    usage_at: IntArray,
    resource_at: IntArray,
    account_at: IntArray,
    weight_ids: IntArray,
    usable_capacity: IntArray,
    weights: Sequence[Fraction],
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Each row of the order against the one before it, component by component: `near`, within
    TIE_RTOL as floats, and `same`, the very same rational (the same usage of the same resource
    under the same weight, or products of Python integers that say so exactly)."""
    weight_id = weight_ids[account_at]
    near = np.abs(shares_at[1:] - shares_at[:-1]) <= TIE_RTOL * np.maximum(np.abs(shares_at[1:]), 1e-300)
    same = (
        (usage_at[1:] == usage_at[:-1])
        & (resource_at[1:] == resource_at[:-1])
        & (weight_id[1:] == weight_id[:-1])[:, None]
    )
    # Close components that are not the very same (usage, resource, weight)
    # are most often exactly equal rationals (8 of 64,000 CPUs is 1 of 8,000
    # GPUs): u1*q1*c2*p2 == u2*q2*c1*p1 in Python integers settles them, and
    # only pairs that really differ go to the exact re-sort.
    pairs = np.flatnonzero((near & ~same).any(axis=1))
    if len(pairs) and len(usable_capacity):
        # Each row's weight p / q, and the capacities, as Python integers (exact products).
        p, q = (np.array(parts, dtype=object)[account_at] for parts in _weight_parts(weights))
        caps = usable_capacity.astype(object)
        current, previous = pairs + 1, pairs
        exactly = (
            usage_at[current].astype(object) * q[current, None] * caps[resource_at[previous]] * p[previous, None]
            == usage_at[previous].astype(object) * q[previous, None] * caps[resource_at[current]] * p[current, None]
        )
        same[pairs] |= exactly.astype(np.bool_) & near[pairs]
    return near, same


def _weight_parts(weights: Sequence[Fraction]) -> tuple[list[int], list[int]]:
    """Each weight's numerator and denominator, as Python integers."""
    return [w.numerator for w in weights], [w.denominator for w in weights]


def _break_groups(
    order: IntArray,
    account_of: IntArray,
    equal_prev: npt.NDArray[np.bool_],
    account_names: Sequence[str],
    ties: TieBook,
    tied: npt.NDArray[np.bool_],
) -> tuple[TieRecord, ...]:
    """Each group of exactly equal (level, share vector) of two accounts or more, by the tie rule, in place.

    `order` is rearranged within each group, `tied` set for its rows; the records of the ties, in order.
    """
    group_starts = np.flatnonzero(~equal_prev)
    group_stops = np.r_[group_starts[1:], len(order)]
    multi = np.flatnonzero(group_stops - group_starts > 1)
    records: list[TieRecord] = []
    for g in multi.tolist():
        start, stop = int(group_starts[g]), int(group_stops[g])
        group = order[start:stop]
        accounts = account_of[group].tolist()
        distinct = len(set(accounts))
        if distinct < 2:
            continue
        tied[group] = True
        placed, record = _break_ties(group.tolist(), accounts, distinct == len(accounts), account_names, ties, start)
        order[start:stop] = placed
        records.append(record)
    return tuple(records)


def _weight_ids(weights: Sequence[Fraction]) -> IntArray:
    """A code per distinct weight value. Accounts share a few weight objects, and a
    Fraction's hash is slow: each object is hashed once (by identity, then by value)."""
    by_object = dict(zip(map(id, weights), weights, strict=True))
    ids: dict[Fraction, int] = {}
    codes = {key: ids.setdefault(w, len(ids)) for key, w in by_object.items()}
    return np.fromiter(map(codes.__getitem__, map(id, weights)), dtype=np.int64, count=len(weights))


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
    accounts: list[int],
    one_each: bool,
    account_names: Sequence[str],
    ties: TieBook,
    start: int,
) -> tuple[list[int], TieRecord]:
    """Order rows of equal level and share vector: fewer tie wins first, then rotation.

    Rows come in index order, so each account's rows are in Slurm's order;
    `accounts` holds the account of each (`one_each`: every one a different
    account). An account wins a tie when it is placed while another account
    waits. Returns the rows in their new order and the record of the tie,
    whose group starts at position `start`. (The book makes each account's
    rotation key once however many ties it is in.)
    """
    queues: dict[int, list[int]] = {}
    if not one_each:
        for row, account in zip(rows, accounts, strict=True):
            queues.setdefault(account, []).append(row)
    # Loops over the accounts of the tie in C (map): a tie may hold 100,000 of them, and each
    # pass that looks their names up costs (the record's mappings are made when read).
    names = list(map(account_names.__getitem__, accounts if one_each else queues))
    held = list(map(ties.wins.get, names, itertools.repeat(0.0)))
    turns = ties.rotations(names)
    record_wins, rotation = _ZippedMapping(names, held), _ZippedMapping(names, turns)
    if one_each:
        placed, placed_wins = ties.take_one_each(names)
        out = list(map(rows.__getitem__, placed))
    else:
        out, placed_wins, _ = ties.take_turns(queues, dict(zip(queues, names, strict=True)))
    return out, TieRecord(start, start + len(out), record_wins, rotation, tuple(placed_wins))


class _ZippedMapping(Mapping[str, _V]):
    """`keys[k]` to `values[k]` (keys distinct), read-only, its dict made when first read: a
    tie's record keeps every account's wins and rotation key, which only `explain` looks up."""

    __slots__ = ("_keys", "_made", "_values")

    def __init__(self, keys: list[str], values: list[_V]) -> None:
        self._keys = keys
        self._values = values
        self._made: dict[str, _V] | None = None

    def _mapping(self) -> dict[str, _V]:
        if self._made is None:
            self._made = dict(zip(self._keys, self._values, strict=True))
        return self._made

    def __getitem__(self, key: str) -> _V:
        return self._mapping()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._mapping())

    def __len__(self) -> int:
        return len(self._mapping())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._mapping()!r})"
