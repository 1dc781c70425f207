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

A pool ordered over an account tree (H-DRF, §7) is placed by a walk up
the tree (`TreeTable`): the job's leaf's level, then at each node above
it the node's share at the turn of a child of that level (`steps`,
sampled from the plan's order), up to the root's child, whose share is the
level the pool's points are sampled by. Nothing is placed in priority
mode: the script leaves such jobs to the next cycle.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final

import numpy as np
import numpy.typing as npt

from slurm_drf.config.settings import DEFAULT_STALE_INTERVALS, NICE_LIMIT, Config
from slurm_drf.model.types import FloatArray, IntArray
from slurm_drf.policy.engine.hierarchy import SEPARATOR, CompiledTree
from slurm_drf.policy.engine.tree_order import JOBS_LEAF, USER_LEAF, shown_name
from slurm_drf.policy.ownership import LABEL_NICE_BELOW
from slurm_drf.policy.plan import Plan, PoolPlan
from slurm_drf.policy.plan_columns import PoolOrder
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
# A tree pool's steps: at most this many per node of the tree, and about
# STEP_BUDGET over all its nodes (at least 2 each): a node's share between
# two steps is read off the line between them, and the next cycle corrects
# what that misses.
NODE_STEPS: Final = 32
STEP_BUDGET: Final = 2000
# The user of a leaf that holds all of an account's jobs (`fairness_within_account: slurm`).
ANY_USER: Final = "*"
# Modes whose value a job_submit script may set (never priority: a set priority stops later nice updates).
PLACED_MODES: Final = ("nice", "site_factor")


@dataclass(frozen=True, slots=True)
class AccountEntry:
    weight: Fraction
    usage: tuple[int, ...]  # before the account's next job, by the table's resources


@dataclass(frozen=True, slots=True)
class NodeEntry:
    """A node of a tree pool (docs/formats.md `node`, `step`): its parent (0: the root), its weight,
    its share once all its jobs are placed (`done`), and its share at the turn of a child whose level
    is `keys[i]`, `shares[i]` (both non-decreasing; the first key 0: every child that waits held at 0)."""

    parent: int
    weight: Fraction
    done: float
    keys: tuple[float, ...] = ()
    shares: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class TreeTable:
    """How a tree pool places a job: its nodes by number, the leaves of (account, user) with their
    usage before their next job, and the node a new user (or a new child account) of an account joins."""

    nodes: Mapping[int, NodeEntry]
    leaves: Mapping[tuple[str, str], tuple[int, tuple[int, ...]]]
    homes: Mapping[str, int]
    by_user: bool  # leaves are users (`fairness_within_account: user`); else one leaf an account, user `*`


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
    tree: TreeTable | None = None  # a pool ordered over an account tree: `levels` are the root's child's share


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
                (record.next_usage is not None or record.tree is not None)
                and record.parts is None  # guarantees move jobs the table cannot place (docs/rule.md §9)
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
    best, worst = value_range(plan.mode, value_offset(config))
    accounts: dict[str, AccountEntry] = {}
    tree: TreeTable | None = None
    levels: FloatArray | None = None
    if record.next_usage is None:
        tree, levels = _tree_table(record, config.fairness_within_account == "user")
    for code, name in enumerate(record.accounts if tree is None else ()):
        assert record.next_usage is not None
        usage, weight = record.next_usage[code], record.weights[code]
        if (
            name not in config.exclude_accounts
            and NAME.match(name)
            and (usage.any() or weight != config.default_weight)
        ):
            accounts[name] = AccountEntry(weight, tuple(int(u) for u in usage))
    zeros = (0,) * len(plan.resources)
    for name, weight in config.weights.items() if tree is None else ():
        if name not in accounts and name not in config.exclude_accounts and NAME.match(name):
            accounts[name] = AccountEntry(weight, zeros)
    points = _points(plan, record, levels)
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
        *points,
        tree,
    )


def _tree_table(record: PoolOrder, by_user: bool) -> tuple[TreeTable, FloatArray]:
    """A tree pool's walk (`TreeTable`), and each position's level: its root's child's share, running max.

    A node's steps come from the plan's order: at each turn of a job below
    it, the share of its child on the job's path (the key) and its own, each
    the running maximum over its turns so far (the merge engine serves a
    child by the running maximum of its share, §7), after a first step at
    key 0: the node's share while a child that waits is held at 0 (a new
    user's first job rescales its waiting siblings to 0), from its children
    with nothing waiting; an account over its users, which sums them as they
    are, is at its running holdings there. A leaf that is an account's home
    (a chain of the account and its one user) gets the steps the same rule
    gives it as that user's parent (held at its running holdings until the
    key reaches them, then the user's own share); other leaves need none (no
    walk goes through them).
    """
    assert record.tree is not None
    hierarchy = record.tree.hierarchy
    tree = hierarchy.tree
    width = len(tree.capacity)
    capacity = np.array(tree.capacity, dtype=np.float64)
    usable = capacity > 0

    def share(amounts: IntArray, weight: Fraction) -> float:
        shares = amounts[usable] / capacity[usable]
        return float(shares.max(initial=0.0)) / float(weight)

    own, subtree, waits = _tree_amounts(tree)
    running = np.array(tree.usage, dtype=np.int64).reshape(len(tree.parent), width)
    for n in range(len(tree.parent) - 1, 0, -1):  # preorder: children after their parent
        running[tree.parent[n]] += running[n]
    homes, named = _tree_names(tree)
    leaves = {who: (n, tuple(own[n].tolist())) for who, n in named.items()}
    inner = {n for n in range(1, len(tree.parent)) if tree.children[n]}
    steps = _node_steps(hierarchy.leaf, hierarchy.path_share, tree, inner)
    zeros = np.zeros(width, dtype=np.int64)
    nodes: dict[int, NodeEntry] = {}
    for n in range(1, len(tree.parent)):
        weight = tree.weight[n]
        done = share(subtree[n], weight)
        if n in inner:
            if tree.rescale[n]:
                held = share(sum((subtree[c] for c in tree.children[n] if not waits[c]), zeros), weight)
            else:  # an account over its users: what they hold, whoever waits (docs/rule.md §7)
                held = share(running[n], weight)
            keys, shares = steps.get(n, ((), ()))
            nodes[n] = NodeEntry(tree.parent[n], weight, done, (0.0, *keys), (held, *(max(s, held) for s in shares)))
        elif n in homes.values():
            # The account's one user as its child: the account sums it as it is, so a new user's job finds
            # it at its running holdings until the user's own level passes them, then at that level.
            start = share(running[n], weight)
            keys, shares = ((0.0, start, done), (start, start, done)) if waits[n] else ((0.0,), (done,))
            nodes[n] = NodeEntry(tree.parent[n], weight, done, keys, shares)
        else:
            nodes[n] = NodeEntry(tree.parent[n], weight, done)
    column = hierarchy.path_share[:, 0] if hierarchy.path_share.shape[1] else np.zeros(len(hierarchy.leaf))
    levels: FloatArray = np.maximum.accumulate(column) if len(column) else np.zeros(0)
    return TreeTable(nodes, leaves, homes, by_user), levels


def _tree_amounts(tree: CompiledTree) -> tuple[IntArray, IntArray, npt.NDArray[np.bool_]]:
    """Per node: its own usage with all its pending jobs placed (a leaf's), its subtree's, and whether
    a job waits below it."""
    count, width = len(tree.parent), len(tree.capacity)
    own = np.array(tree.usage, dtype=np.int64).reshape(count, width)
    for n in tree.leaves:
        own[n] += np.asarray(tree.jobs[n], dtype=np.int64).reshape(-1, width).sum(axis=0)
    waits = np.array([len(jobs) > 0 for jobs in tree.jobs], dtype=np.bool_)
    subtree = own.copy()
    for n in range(count - 1, 0, -1):  # preorder: children after their parent
        subtree[tree.parent[n]] += subtree[n]
        waits[tree.parent[n]] |= waits[n]
    return own, subtree, waits


def _tree_names(tree: CompiledTree) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """Each account's node (its home), and each leaf's node by (account, user; `*` for a `jobs=` leaf)."""
    homes: dict[str, int] = {}
    leaves: dict[tuple[str, str], int] = {}
    for n in range(1, len(tree.parent)):
        for name in tree.names[n]:
            if "=" not in name and NAME.match(shown_name(name)):
                homes[shown_name(name)] = n
        path = [*tree.key[n].split(SEPARATOR), *tree.names[n][1:]]
        if tree.children[n] or len(path) < 2 or not path[-1].startswith((USER_LEAF, JOBS_LEAF)):
            continue
        account = shown_name(path[-2])
        user = shown_name(path[-1][len(USER_LEAF) :]) if path[-1].startswith(USER_LEAF) else ANY_USER
        if NAME.match(account) and (user == ANY_USER or NAME.match(user)):
            leaves[(account, user)] = n
    return homes, leaves


def _node_steps(
    leaf: IntArray, path_share: FloatArray, tree: CompiledTree, inner: set[int]
) -> dict[int, tuple[tuple[float, ...], tuple[float, ...]]]:
    """Each inner node's sampled (keys, shares) over its turns in the order (`_tree_table`)."""
    count = len(tree.parent)
    depth_of = max(tree.depth, default=0)
    ancestors = np.full((count, depth_of + 1), -1, dtype=np.int64)
    for n in range(1, count):
        ancestors[n] = ancestors[tree.parent[n]]
        ancestors[n, tree.depth[n]] = n
    per_node = max(2, min(NODE_STEPS, STEP_BUDGET // max(len(inner), 1)))
    out: dict[int, tuple[tuple[float, ...], tuple[float, ...]]] = {}
    on_path = ancestors[leaf] if len(leaf) else np.zeros((0, depth_of + 1), dtype=np.int64)
    for depth in range(1, depth_of):
        nodes = on_path[:, depth]
        chosen = np.flatnonzero((nodes >= 0) & (nodes != leaf))
        if not len(chosen):
            continue
        by_node = chosen[np.argsort(nodes[chosen], kind="stable")]
        names, starts = np.unique(nodes[by_node], return_index=True)
        for n, begin, end in zip(names.tolist(), starts.tolist(), [*starts[1:].tolist(), len(by_node)], strict=True):
            turns = by_node[begin:end]
            keys = np.maximum.accumulate(path_share[turns, depth])
            shares = np.maximum.accumulate(path_share[turns, depth - 1])
            picked = np.unique(np.linspace(0, len(turns) - 1, num=min(len(turns), per_node)).round().astype(np.int64))
            out[n] = (tuple(keys[picked].tolist()), tuple(shares[picked].tolist()))
    return out


def _points(plan: Plan, record: PoolOrder, tree_levels: FloatArray | None) -> tuple[tuple[float, ...], tuple[int, ...]]:
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
    levels = tree_levels if tree_levels is not None else np.asarray(plan.column("level")[span], dtype=np.float64)
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

    def place(
        self, partitions: Sequence[str], account: str, demand: Sequence[int], tasks: int = 1, user: str = ""
    ) -> int | None:
        """The value for a new job (its first task's, for an array of `tasks`), or None: left unchanged."""
        pool = self.pool_of(partitions)
        if pool is None or account in pool.excluded:
            return None
        if pool.tree is None:
            who = account
            entry = pool.accounts.get(account, AccountEntry(pool.default_weight, (0,) * len(pool.capacity)))
        else:
            who = f"{account} {user if pool.tree.by_user else ANY_USER}"
        added = self.since.setdefault((pool.name, who), [0] * len(pool.capacity))
        if pool.tree is None:
            level = level_of([u + a for u, a in zip(entry.usage, added, strict=True)], pool.capacity, entry.weight)
        else:
            level = tree_level(pool, account, user, added)
        points = self.points.setdefault(pool.name, _PoolPoints(list(pool.levels), list(pool.values)))
        # A user holding nothing in an account takes the account's next turn before its waiting users (its
        # share in the account is 0, docs/rule.md §7): before the jobs at its level, not after them.
        first = pool.tree is not None and holds_nothing(pool.tree, account, user, added)
        after = (bisect.bisect_left if first else bisect.bisect_right)(points.levels, level)
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


def share_at(node: NodeEntry, key: float, child_done: float, child_weight: Fraction) -> float:
    """`node`'s share at the turn of a child of level `key`: on the line between the steps around it,
    `done` past the last; plus what the child adds where the order without the new job had it done
    (a new child: `child_done` 0), held at `key` rather than at `child_done`."""
    after = bisect.bisect_right(node.keys, key) - 1
    if after < 0:
        base = node.shares[0] if node.shares else 0.0
    elif after + 1 >= len(node.keys):
        base = node.done
    else:
        low_key, low = node.keys[after], node.shares[after]
        high_key, high = node.keys[after + 1], node.shares[after + 1]
        base = low if high_key == low_key else low + (key - low_key) * (high - low) / (high_key - low_key)
    return base + max(0.0, key - child_done) * float(child_weight) / float(node.weight)


def holds_nothing(tree: TreeTable, account: str, user: str, added: Sequence[int]) -> bool:
    """A user of a known account (users as leaves) with nothing running and nothing placed since the table."""
    if not tree.by_user:
        return False
    found = tree.leaves.get((account, user))
    if found is None:
        return account in tree.homes and not any(added)
    return not any(u + a for u, a in zip(found[1], added, strict=True))


def tree_level(pool: PoolTable, account: str, user: str, added: Sequence[int]) -> float:
    """A new job's level in a tree pool: its root's child's share at its turn (docs/rule.md §8).

    From its leaf's level over the leaf's usage plus `added` (what the same
    leaf had placed since the table), or, for a user (or account) the pool
    has no leaf of yet, from the account's home at the share a new child of
    weight 1 holding `added` gives it; then up: each parent's share at the
    turn of that child (`share_at`). An account the pool does not know at
    all is a new child of the root, of the default weight.
    """
    tree = pool.tree
    assert tree is not None
    found = tree.leaves.get((account, user if tree.by_user else ANY_USER))
    if found is not None:
        node, usage = found
        entry = tree.nodes[node]
        level = level_of([u + a for u, a in zip(usage, added, strict=True)], pool.capacity, entry.weight)
    else:
        home = tree.homes.get(account)
        if home is None:
            return level_of(added, pool.capacity, pool.default_weight)
        entry = tree.nodes[home]
        level = share_at(entry, level_of(added, pool.capacity, Fraction(1)), 0.0, Fraction(1))
    while entry.parent:
        parent = tree.nodes[entry.parent]
        level = share_at(parent, level, entry.done, entry.weight)
        entry = parent
    return level
