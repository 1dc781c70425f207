"""The DRF order of the pending jobs: levels in whole numbers of 2**-SHARE_BITS, one sort, the tie rule.

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
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from slurm_drf.model.types import FloatArray, IntArray
from slurm_drf.policy.engine.fixed_point import share_vectors
from slurm_drf.policy.pools import weighted_shares
from slurm_drf.policy.state import TieBook

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
    """How the tie rule ordered one group of equal (level, share vector).

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
    indexed by position: True where the level, or the (level, share
    vector), in whole numbers of 2**-SHARE_BITS, is greater than at the
    position before (and at 0).
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
    """Sort jobs by (level, share vector); break full ties by wins, rotation.

    Every share is `policy.rule`'s whole number of 2**-SHARE_BITS (u·q / (c·p),
    w = p/q, rounded down once), as the tree's: one sort of whole numbers,
    and equal means equal. Full ties go to the rule of `ties`, which counts
    the wins.
    """
    count = len(account_of)
    usable = np.flatnonzero(capacity > 0)
    caps = capacity[usable].tolist()
    vector = share_vectors(before[:, usable], caps, weights, account_of)
    width = vector.shape[1]
    index = np.arange(count, dtype=np.int64)
    if vector.dtype == object:  # beyond int64: Python integers, which numpy's lexsort does not take
        order = np.array(sorted(range(count), key=lambda i: (vector[i].tolist(), i)), dtype=np.int64)
    else:
        order = np.lexsort([index, *(vector[:, k] for k in reversed(range(width)))]) if count else index
    level = weighted_shares(before, capacity, weights, account_of)  # shown: the nearest float to the exact share
    tied = np.zeros(count, dtype=np.bool_)
    if count < 2:
        return Ordering(order, level, tied, np.ones(count, np.bool_), np.ones(count, np.bool_))
    ordered = vector[order]
    same = ordered[1:] == ordered[:-1]
    new_level = np.r_[True, ~same[:, 0]]
    new_vector = np.r_[True, ~same.all(axis=1)]
    records = _break_groups(order, account_of, ~new_vector, account_names, ties, tied)
    return Ordering(order, level, tied, new_level, new_vector, records)


def _break_groups(
    order: IntArray,
    account_of: IntArray,
    equal_prev: npt.NDArray[np.bool_],
    account_names: Sequence[str],
    ties: TieBook,
    tied: npt.NDArray[np.bool_],
) -> tuple[TieRecord, ...]:
    """Each group of equal (level, share vector) of two accounts or more, by the tie rule, in place.

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
