"""Guarantees and limits in the order (docs/rule.md §9): guaranteed jobs first, jobs over a limit last.

Pure. A guarantee or a limit covers the account its key names and, where
Slurm's tree is read, every account under it (a *group*). Walking a pool's
DRF order, a job is

- **within its guarantee** when some group covering its account has a
  guarantee and, for every such group, the group's running usage plus the
  demand of the group's jobs already found within, plus this job's, is at
  most the guarantee in every resource it names (a resource it does not
  name neither limits nor counts); once one job of a group is not, none
  after it is, so an account's own order is kept;
- **over its limit** when, likewise, some group covering it has a limit
  and the group's running usage plus the demand of its jobs before it
  would pass the limit in a resource it names (and none after it is not).

`arrange` puts the jobs within their guarantees first, in the DRF loop
over shares relative to the guarantees (the account whose group is
furthest below its guarantee first: usage over guarantee, the largest
named resource, exactly; equal ones in the DRF order), then the ordinary
DRF order, then the jobs over a limit in the DRF order. Without a
guarantee or a limit the order is untouched. `policy/reclaim.py` frees
room for the first part when nothing ends in time.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

import numpy as np
import numpy.typing as npt

from slurm_drf.config.settings import Amounts
from slurm_drf.model.account_tree import AccountTree
from slurm_drf.model.types import IntArray
from slurm_drf.policy.engine.order import Ordering
from slurm_drf.policy.tree_weights import resolve_key

# A guarantee by the pool's resources: a whole amount, or UNNAMED where it does not name the resource.
UNNAMED: Final = -1
# The parts of an arranged order.
WITHIN: Final = 0
ORDINARY: Final = 1
OVER: Final = 2
# The plan's `reason` column of an ordered job, by part.
PART_REASONS: Final = ("within guarantee", None, "over limit")


@dataclass(frozen=True, slots=True)
class Group:
    """One guarantee or limit key resolved against a plan's accounts: the account codes it covers."""

    key: str
    members: tuple[int, ...]
    guarantee: Amounts | None
    limit: Amounts | None


def resolve_groups(
    guarantees: Mapping[str, Amounts],
    limits: Mapping[str, Amounts],
    accounts: Sequence[str],
    tree: AccountTree | None,
) -> list[Group]:
    """Each key's group among `accounts` (the plan's account names): the account it names
    (policy.tree_weights.resolve_key) with, over a tree, every account under it."""
    code = {name: a for a, name in enumerate(accounts)}
    groups: list[Group] = []
    for key in sorted(set(guarantees) | set(limits)):
        named = resolve_key(key, tree)
        if named is None:
            continue
        path = None if tree is None else tree.path(named)
        members: tuple[int, ...]
        if path is None:
            members = (code[named],) if named in code else ()
        else:
            members = tuple(
                a
                for a, name in enumerate(accounts)
                if (found := tree.path(name) if tree is not None else None) is not None and found[: len(path)] == path
            )
        if members:
            groups.append(Group(key, members, guarantees.get(key), limits.get(key)))
    return groups


def bound_row(bound: Amounts | None, capacity: Sequence[int], resources: Sequence[str]) -> list[int] | None:
    """A guarantee or limit by the pool's resources (UNNAMED where it names none); None where it
    names no resource the pool has (a share of a pool: every resource it has)."""
    if bound is None:
        return None
    if bound.fraction is not None:
        row = [int(bound.fraction * c) if c else UNNAMED for c in capacity]
    else:
        row = [bound.amounts[r] if r in bound.amounts and capacity[i] else UNNAMED for i, r in enumerate(resources)]
    return row if any(x != UNNAMED for x in row) else None


@dataclass(frozen=True, slots=True)
class PoolBounds:
    """A pool's groups: members as an (G, A) mask, guarantees and limits as (G, R) rows (UNNAMED: none)."""

    keys: tuple[str, ...]
    members: npt.NDArray[np.bool_]
    guarantee: IntArray
    limit: IntArray

    @property
    def active(self) -> bool:
        return bool(len(self.keys))


def pool_bounds(
    groups: Sequence[Group], account_count: int, capacity: Sequence[int], resources: Sequence[str]
) -> tuple[PoolBounds, list[str]]:
    """The pool's bounds, and warnings; guarantees that add up to more than the pool in a
    resource are all ignored there (the plan says which), as `check-config` refuses shares over 100%."""
    width = len(capacity)
    keys: list[str] = []
    masks: list[npt.NDArray[np.bool_]] = []
    guarantee_rows: list[list[int]] = []
    limit_rows: list[list[int]] = []
    for group in groups:
        guarantee_row = bound_row(group.guarantee, capacity, resources)
        limit_row = bound_row(group.limit, capacity, resources)
        if guarantee_row is None and limit_row is None:
            continue
        mask = np.zeros(account_count, dtype=np.bool_)
        mask[list(group.members)] = True
        keys.append(group.key)
        masks.append(mask)
        guarantee_rows.append(guarantee_row or [UNNAMED] * width)
        limit_rows.append(limit_row or [UNNAMED] * width)
    members = np.array(masks, dtype=np.bool_).reshape(len(keys), account_count)
    guarantee = np.array(guarantee_rows, dtype=np.int64).reshape(len(keys), width)
    limit = np.array(limit_rows, dtype=np.int64).reshape(len(keys), width)
    warnings: list[str] = []
    # Groups inside another guaranteed group count within it.
    guaranteed = (guarantee != UNNAMED).any(axis=1)
    top = [
        g
        for g in np.flatnonzero(guaranteed).tolist()
        if not any(
            h != g and guaranteed[h] and (members[g] <= members[h]).all() and members[h].sum() > members[g].sum()
            for h in range(len(keys))
        )
    ]
    total = np.where(guarantee[top] == UNNAMED, 0, guarantee[top]).sum(axis=0) if top else np.zeros(width)
    over = [r for r in range(width) if total[r] > capacity[r]]
    if over:
        warnings.append(
            "guarantees add up to more than the pool in "
            + ", ".join(f"{resources[r]} ({int(total[r])} of {capacity[r]})" for r in over)
            + f" ({', '.join(keys[g] for g in top)}); they are ignored in this pool until they fit"
        )
        guarantee[:] = UNNAMED
    return PoolBounds(tuple(keys), members, guarantee, limit), warnings


def arrange(
    order: IntArray, account_of: IntArray, demand: IntArray, usage: IntArray, bounds: PoolBounds
) -> tuple[IntArray, npt.NDArray[np.int8]]:
    """`order` (jobs by position, DRF) arranged by the bounds (module docstring), and each
    job's part (WITHIN, ORDINARY or OVER) by job; `usage` (A, R) is each account's running usage."""
    part = np.full(len(order), ORDINARY, dtype=np.int8)
    if not bounds.active or not len(order):
        return order, part
    groups_of = [np.flatnonzero(bounds.members[:, a]) for a in range(bounds.members.shape[1])]
    running = bounds.members.astype(np.int64) @ usage  # (G, R)
    has_guarantee = (bounds.guarantee != UNNAMED).any(axis=1)
    has_limit = (bounds.limit != UNNAMED).any(axis=1)
    big = np.iinfo(np.int64).max
    guarantee = np.where(bounds.guarantee == UNNAMED, big, bounds.guarantee)
    limit = np.where(bounds.limit == UNNAMED, big, bounds.limit)
    taken, taken_open = running.copy(), has_guarantee.copy()
    held, held_open = running.copy(), has_limit.copy()
    for j in order.tolist():
        covering = groups_of[int(account_of[j])]
        if not len(covering):
            continue
        need = demand[j]
        guaranteed = covering[has_guarantee[covering]]
        if len(guaranteed) and taken_open[guaranteed].all():
            fits = (taken[guaranteed] + need <= guarantee[guaranteed]).all(axis=1)
            if fits.all():
                part[j] = WITHIN
                taken[guaranteed] += need
            else:
                taken_open[guaranteed[~fits]] = False
        elif len(guaranteed):
            taken_open[guaranteed] = False
        limited = covering[has_limit[covering]]
        if part[j] != WITHIN and len(limited):
            fits = held_open[limited] & (held[limited] + need <= limit[limited]).all(axis=1)
            if not fits.all():
                part[j] = OVER
                held_open[limited[~fits]] = False
        held[limited] += need
    first = _guarantee_loop(order, part, account_of, demand, running, bounds, groups_of)
    arranged: IntArray = np.concatenate([first, order[part[order] == ORDINARY], order[part[order] == OVER]])
    return arranged, part


def _guarantee_loop(
    order: IntArray,
    part: npt.NDArray[np.int8],
    account_of: IntArray,
    demand: IntArray,
    running: IntArray,
    bounds: PoolBounds,
    groups_of: Sequence[IntArray],
) -> IntArray:
    """The jobs within their guarantees, the account furthest below its guarantee first (exactly;
    equal ones by DRF position): a heap of each account's next job, its level checked when popped."""
    used = running.copy()
    queues: dict[int, list[int]] = {}
    first_position: dict[int, int] = {}
    for position, j in enumerate(order.tolist()):
        if part[j] == WITHIN:
            a = int(account_of[j])
            queues.setdefault(a, []).append(j)
            first_position.setdefault(a, position)
    position_of = {j: p for p, j in enumerate(order.tolist())}

    def level(a: int) -> Fraction:
        worst = Fraction(0)
        for g in groups_of[a].tolist():
            for r in np.flatnonzero(bounds.guarantee[g] != UNNAMED).tolist():
                amount = int(bounds.guarantee[g, r])
                if amount:
                    worst = max(worst, Fraction(int(used[g, r]), amount))
        return worst

    heap = [(level(a), position_of[jobs[0]], a) for a, jobs in queues.items()]
    heapq.heapify(heap)
    taken: list[int] = []
    next_job = dict.fromkeys(queues, 0)
    while heap:
        stored, position, a = heapq.heappop(heap)
        now = level(a)
        if now > stored:  # levels only grow: a stale entry goes back with its level now
            heapq.heappush(heap, (now, position, a))
            continue
        j = queues[a][next_job[a]]
        taken.append(j)
        used[groups_of[a]] += demand[j]
        next_job[a] += 1
        if next_job[a] < len(queues[a]):
            heapq.heappush(heap, (level(a), position_of[queues[a][next_job[a]]], a))
    return np.array(taken, dtype=np.int64)


def account_bounds(rows: Sequence[Sequence[int] | None], width: int) -> PoolBounds:
    """Bounds of one guarantee per account (`rows[a]` by resource, UNNAMED where it names none;
    None: no guarantee), as the simulator's policies give them."""
    listed = [a for a, row in enumerate(rows) if row is not None]
    members = np.zeros((len(listed), len(rows)), dtype=np.bool_)
    members[np.arange(len(listed)), listed] = True
    guarantee = np.array([rows[a] for a in listed], dtype=np.int64).reshape(len(listed), width)
    limit = np.full((len(listed), width), UNNAMED, dtype=np.int64)
    return PoolBounds(tuple(str(a) for a in listed), members, guarantee, limit)


def arranged_ordering(ordering: Ordering, arranged: IntArray, part: npt.NDArray[np.int8]) -> Ordering:
    """`ordering` with its order `arranged`: a level group never spans two parts, a guaranteed or
    over-limit job is a group of its own, and only the ties wholly kept in place in the ordinary
    part are kept (shifted by the guaranteed jobs ahead of them)."""
    if arranged is ordering.order:
        return ordering
    count = len(arranged)
    parts = part[arranged]
    level = ordering.level[arranged]
    new_level = np.ones(count, dtype=np.bool_)
    if count:
        same = (parts[1:] == ORDINARY) & (parts[:-1] == ORDINARY) & (level[1:] == level[:-1])
        new_level[1:] = ~same
    shift = int(np.count_nonzero(parts == WITHIN))
    moved_before = np.cumsum(part[ordering.order] != ORDINARY)
    ties = []
    for tie in ordering.ties:
        if (part[ordering.order[tie.start : tie.stop]] == ORDINARY).all():
            ahead = int(moved_before[tie.start - 1]) if tie.start else 0
            delta = shift - ahead
            ties.append(dataclasses.replace(tie, start=tie.start + delta, stop=tie.stop + delta))
    return Ordering(arranged, ordering.level, ordering.tied, new_level, new_level.copy(), tuple(ties))


def floor_groups(
    groups: Sequence[Group], present: Sequence[int], weights: Sequence[Fraction], floor: Fraction
) -> list[Group]:
    """`reclaim.share_floor`: each present account (by code) that no guarantee covers is guaranteed
    `floor` of its weighted fair share (its weight over the present accounts' weights) of the pool."""
    if not floor or not present:
        return list(groups)
    covered = {a for group in groups if group.guarantee is not None for a in group.members}
    total = sum((weights[a] for a in present), Fraction(0))
    added = [
        Group(f"share_floor:{a}", (a,), Amounts(fraction=floor * weights[a] / total), None)
        for a in present
        if a not in covered and total
    ]
    return [*groups, *added]
