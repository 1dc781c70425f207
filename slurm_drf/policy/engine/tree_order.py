"""One pool's pending jobs ordered over Slurm's account tree (H-DRF, docs/rule.md §7): the join.

Pure, under `policy.plan`: builds the tree of a pool from the snapshot's
association tree (`model.account_tree.AccountTree`), the jobs and the tree's
weights (`policy.tree_weights.compute_tree_weights`), lays it out for the engine
straight from the join (`_compile`: the `hierarchy.CompiledTree` that
`hierarchy.compile_tree` would make of the same tree as `TreeNode`s, without
re-checking what the join made), orders it with
`merge_engine.order_compiled`, and hands `policy.plan` the same
`Ordering` the flat engine gives, so that labels, the plan and explain read
it alike.

The pool's tree holds the accounts with a running or pending job in the
pool and their ancestors. Under an account hang its child accounts and,
as leaves:

- `fairness_within_account: user`: one leaf per user with a job in the
  account (`user=NAME`), weighted by `accounts.KEY.users` or RawShares;
- `slurm`: one leaf (`jobs=`) holding all the account's jobs in Slurm's
  order, so inside an account Slurm's order stands;
- when the decayed past adds to the account (docs/rule.md §6), a leaf
  `past=` holding it, with no jobs: it counts in the account's consumption
  as it is and never takes a turn.

Account and user names are %-escaped in node names (`node_name`: `%`, `/`
and `=`), so these leaves never meet a child account's name, even an
account named `user=alice` or `jobs=`. A chain of single children is its bottom node
(`hierarchy.compile_tree`): an account with one leaf is that leaf, so a
tree whose accounts hang under the root with one user each orders as §2.
An account the tree does not know hangs under the root.

What the plan shows of the tree (`TreeRow`, `tree_rows`): every node of
the pool's tree, chains not contracted, in preorder, with its running and
pending jobs, its usage, its dominant share and its weighted share as
H-DRF sees it at the start of the order (before any pending job is
placed): a leaf's is §2's, an internal node's is `rule.inner_share`
over its children (rescaled to the least non-blocked one), blocked and
saturated as the engine was given them (docs/rule.md §7; the plan's
online rule: nothing saturated, a node blocked when nothing below it waits). The nodes of a chain of
single children are one node (§7): each shows the chain's share. The rows
are kept as columns and made into `TreeRow`s the first time they are read
(`TreeRows`, a `model.types.LazyRows` that also lends the columns, from
which the plan and report JSON are written): a cycle that shows the tree
to no one pays for its sums only.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import chain, starmap
from types import MappingProxyType
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

from slurm_drf.config.settings import WithinAccount
from slurm_drf.model.account_tree import PATH_SEPARATOR, AccountTree
from slurm_drf.model.types import FloatArray, IntArray, LazyRows
from slurm_drf.policy.engine.fixed_point import share_vectors
from slurm_drf.policy.engine.hierarchy import SEPARATOR, CompiledTree, HierarchyOrdering, TreeLayout
from slurm_drf.policy.engine.merge_engine import order_compiled
from slurm_drf.policy.engine.order import Ordering, compute_before
from slurm_drf.policy.pools import weighted_shares
from slurm_drf.policy.rule import SHARE_ONE, NodeShare, inner_share, leaf_share
from slurm_drf.policy.state import TieBook
from slurm_drf.policy.tree_weights import ONE, TreeWeights

USER_LEAF: Final = "user="
JOBS_LEAF: Final = "jobs="
PAST_LEAF: Final = "past="
# The node name of an empty Slurm name (`node_name`): `%` alone never starts anything else but an escape.
EMPTY_NAME: Final = "%00"


NodeKind = Literal["account", "user", "jobs", "past"]


@dataclass(slots=True)
class _Branch:
    """A node being built: child accounts and leaves by name."""

    weight: Fraction
    children: dict[str, _Branch]
    usage: list[int] | None = None  # a leaf's
    rows: list[int] | None = None  # a leaf's jobs: positions into the pool's job list, in Slurm's order
    running: int = 0  # a leaf's running jobs
    node: int = -1  # the compiled node it is part of (`_compile`)
    path: str = ""  # its key, names joined by "/" from the root's child down (`_compile`)


@dataclass(frozen=True, slots=True)
class TreeRow:
    """One node of a pool's tree as the plan shows it (module docstring: what each number is).

    `path` is the node's key, names joined by "/" from the root's child
    down (`physics/theory/user=alice`, `physics/jobs=`, `physics/past=`);
    `name` is its last part as people read it (`alice` for a user). `depth`
    is 1 for the root's children. `usage` is the subtree's leaves' usage
    summed: the running allocation, and what the decayed past adds (the
    `past=` row) where history counts. `dominant_share` is usage over the
    pool's capacity (resources of capacity 0 left out); `weighted_share`
    is H-DRF's share of the node at the start of the order; `blocked`: no
    pending job in the subtree can take a turn then (§7; online: none waits).
    """

    path: str
    name: str
    depth: int
    kind: NodeKind
    weight: Fraction
    usage: Mapping[str, int]
    running_jobs: int
    pending_jobs: int
    dominant_resource: str | None
    dominant_share: float
    weighted_share: float
    blocked: bool


def node_name(name: str) -> str:
    """A Slurm name as a tree node's name: %-escaped where it could be read as structure; never empty.

    `/` separates a path, and `=` marks the tree's own leaves (`user=`,
    `jobs=`, `past=`): an account or user named `user=alice` or `jobs=`
    must not become one of them. `%` is escaped first, so every node name
    reads back as one Slurm name (`shown_name`).
    """
    return name.replace("%", "%25").replace(PATH_SEPARATOR, "%2F").replace("=", "%3D") or EMPTY_NAME


def shown_name(node: str) -> str:
    """The Slurm name a node's name (`node_name`) stands for, as people read it."""
    if "%" not in node:
        return node
    if node == EMPTY_NAME:
        return ""
    return node.replace("%3D", "=").replace("%2F", PATH_SEPARATOR).replace("%25", "%")


def _compile(root: _Branch, demand: IntArray, capacity: Sequence[int]) -> tuple[CompiledTree, IntArray, list[str]]:
    """The built tree laid out for the engine, the rows of its leaves' jobs in the pool's job list, leaf
    after leaf, and each compiled node's path to the bottom of its chain (a leaf's: its whole key).

    The layout `hierarchy.compile_tree` gives the same tree as `TreeNode`s
    (preorder, chains of single children contracted, keys by the chain's
    top), made straight from the join without its checks: the join makes
    every name (escaped, never empty, siblings by dict key), weight (> 0)
    and amount (whole, >= 0) itself. Every branch learns its node and its
    path. Explicit stack: a tree may be deep.
    """
    zeros = (0,) * len(capacity)
    layout = TreeLayout()
    add = layout.add
    bottoms: list[str] = []  # per compiled node, the path of its chain's bottom
    leaves: list[tuple[int, list[int]]] = []  # each leaf and its rows, in preorder
    todo: list[tuple[str, _Branch, int, str]] = [("", root, -1, "")]  # (name, branch, parent's index, path)
    while todo:
        name, bottom, up, path = todo.pop()
        bottom.path = label = path
        if up >= 0 and len(bottom.children) == 1:
            contracted, members = [name], [bottom]
            while len(bottom.children) == 1:
                ((name, bottom),) = bottom.children.items()
                contracted.append(name)
                members.append(bottom)
                bottom.path = label = f"{label}{SEPARATOR}{name}"
            index = add(up, members[0].weight, path, tuple(contracted), zeros)
            for member in members:
                member.node = index
        else:
            index = add(up, bottom.weight if up >= 0 else ONE, path, (name,), zeros)
            bottom.node = index
        bottoms.append(label)
        if bottom.rows is not None or bottom.usage is not None:  # a leaf
            if bottom.usage:
                layout.usage[index] = tuple(bottom.usage)
            leaves.append((index, bottom.rows or []))  # its jobs: a slice of `placed`, below
        else:
            # An account over its users sums them as they are (docs/rule.md §7, "The users of an account").
            layout.rescale[index] = not any(child.startswith(USER_LEAF) for child in bottom.children)
            todo.extend(
                (child, branch, index, f"{label}{SEPARATOR}{child}" if label else child)
                for child, branch in reversed(bottom.children.items())
            )
    lengths = [len(rows) for _, rows in leaves]
    rows_of = np.fromiter(chain.from_iterable(rows for _, rows in leaves), dtype=np.int64, count=sum(lengths))
    placed = demand[rows_of]  # one gather; each leaf's jobs a slice of it
    stops = np.cumsum(lengths, dtype=np.int64).tolist()
    for (n, _), stop, length in zip(leaves, stops, lengths, strict=True):
        layout.jobs[n] = placed[stop - length : stop]
    caps = tuple(int(c) for c in capacity)
    return layout.compiled(caps, caps, placed), rows_of, bottoms


@dataclass(frozen=True, slots=True)
class RunningJobs:
    """The pool's running jobs: each one's account code, user and allocation (a row of the pool's resources)."""

    account: IntArray
    user: Sequence[str]
    allocation: IntArray


@dataclass(frozen=True, slots=True)
class TreeOrdering:
    """The flat engine's `Ordering` of the pool's jobs by H-DRF, with each job's usage before it."""

    ordering: Ordering
    before: IntArray
    hierarchy: HierarchyOrdering
    # Each position's leaf key (`physics/theory/user=alice`).
    leaf_keys: tuple[str, ...]
    # The pool's tree as the plan shows it, in preorder.
    rows: Sequence[TreeRow] = ()

    def all_path_shares(self) -> list[tuple[float, ...]]:
        """Per position, the weighted share, when its job was placed, of each node of its leaf key's path.

        One share per name of `leaf_keys[position]`, root's child first; the
        names of a chain of single children share its one share (§7). Read
        one shape of path at a time (the columns of its nodes' depths, a
        chain's repeated): the leaves of a tree have only a few.
        """
        hierarchy = self.hierarchy
        tree = hierarchy.tree
        columns: list[tuple[int, ...]] = [()] * len(tree.parent)
        for n in range(1, len(tree.parent)):  # preorder: every parent before its children
            columns[n] = columns[tree.parent[n]] + (tree.depth[n] - 1,) * len(tree.names[n])
        shapes: dict[tuple[int, ...], int] = {}
        shape_of = np.array([shapes.setdefault(c, len(shapes)) for c in columns], dtype=np.int64)
        by_shape = shape_of[hierarchy.leaf]
        out: list[tuple[float, ...]] = [()] * len(hierarchy.leaf)
        for shape, number in shapes.items():
            positions = np.flatnonzero(by_shape == number)
            if len(positions):
                shares = hierarchy.path_share[positions][:, list(shape)].tolist()
                for position, row in zip(positions.tolist(), shares, strict=True):
                    out[position] = tuple(row)
        return out


@dataclass(frozen=True, slots=True)
class TreeRequest:
    """One pool's pending jobs to order over Slurm's tree: everything `order_tree` reads.

    Rows (`account_of`, `user_of`, `demand`) are grouped by account, in
    Slurm's order within; `running` holds the pool's running jobs, `usage`
    (A, R) their sum per account; `past` is (A, R) what the decayed past
    adds to each account, or None. `ties` counts the tie wins, keyed by
    tree key (as the flat engine keys them by account name). `resources`
    names the columns (the rows' usage keys).
    """

    tree: AccountTree
    weights: TreeWeights
    within: WithinAccount
    account_names: Sequence[str]
    account_weights: Sequence[Fraction]
    account_of: IntArray
    user_of: Sequence[str]
    demand: IntArray
    running: RunningJobs
    usage: IntArray
    past: IntArray | None
    capacity: IntArray
    ties: TieBook
    resources: Sequence[str]


def order_tree(request: TreeRequest) -> TreeOrdering:
    """Order the pool's pending jobs by H-DRF over the pool's tree (docs/rule.md §7, "In the plan")."""
    root = _TreeBuilder(request).build()
    demand = request.demand.astype(np.int64, copy=False)
    compiled, rows_of, bottoms = _compile(root, demand, request.capacity.tolist())
    hierarchy = order_compiled(compiled, request.ties)
    # Each compiled leaf's first job in `rows_of`.
    leaves = list(compiled.leaves)
    own = [len(compiled.jobs[n]) for n in leaves]
    first = np.zeros(len(compiled.parent), dtype=np.int64)
    first[leaves] = np.cumsum(own) - own
    order = rows_of[first[hierarchy.leaf] + hierarchy.job]
    return TreeOrdering(
        *_flat_ordering(request, order, hierarchy.tied),
        hierarchy,
        tuple(map(bottoms.__getitem__, hierarchy.leaf.tolist())),  # a leaf's path is its whole key
        tree_rows(root, compiled, request.resources, hierarchy.start),
    )


def _flat_ordering(
    request: TreeRequest, order: IntArray, tied_in_order: npt.NDArray[np.bool_]
) -> tuple[Ordering, IntArray]:
    """The tree's order as the flat engine's `Ordering`, and each job's usage before it in that order."""
    count = len(order)
    tied = np.zeros(count, dtype=np.bool_)
    if count:
        tied[order] = tied_in_order
    usage = request.usage if request.past is None else request.usage + request.past
    before = _before_in_order(order, request.account_of, request.demand, usage)
    # A job's level is §2's: its account's weighted dominant share before it, in the plan's order.
    level = weighted_shares(before, request.capacity, request.account_weights, request.account_of)
    placed = level[order]
    new_level = np.r_[True, placed[1:] != placed[:-1]] if count else np.zeros(0, dtype=np.bool_)
    return Ordering(order, level, tied, new_level, new_level.copy()), before


class _TreeBuilder:
    """The pool's tree of `_Branch`es from a request: accounts on their paths, their leaves, their past."""

    def __init__(self, request: TreeRequest) -> None:
        self.request = request
        self.width = int(request.capacity.shape[0])
        self.root = _Branch(ONE, {})
        self.branches: dict[int, _Branch] = {}  # by account code
        self.in_tree: dict[str, _Branch] = {}  # the accounts of Slurm's tree made so far, by name
        self.paths = request.tree.paths
        self.weights = request.weights.accounts

    def build(self) -> _Branch:
        self._add_jobs()
        past = self.request.past
        if past is not None:
            for code in np.flatnonzero(past.any(axis=1)).tolist():
                if code in self.branches:
                    self.branches[code].children[PAST_LEAF] = _Branch(ONE, {}, past[code].tolist(), [])
        return self.root

    def _account(self, code: int) -> _Branch:
        """The branch of an account, made the first time: where its path in Slurm's tree leads (its
        ancestors made on the way), or, for the root account's own jobs and an account the tree lacks,
        under the root."""
        found = self.branches.get(code)
        if found is not None:
            return found
        name = self.request.account_names[code]
        path = self.paths.get(name)
        default = self.request.account_weights[code]
        if not path:
            key = node_name(name)
            node = self.root.children.get(key)
            if node is None:
                # An account the tree lacks weighs what the config gives it, as without a tree.
                node = self.root.children[key] = _Branch(self.weights.get(name, default), {})
        elif name in self.in_tree:
            node = self.in_tree[name]
        else:
            # From the deepest ancestor made already (every ancestor of a made account is made).
            made = len(path) - 1
            while made > 0 and path[made - 1] not in self.in_tree:
                made -= 1
            node = self.in_tree[path[made - 1]] if made else self.root
            for step in path[made:]:
                key = node_name(step)
                child = node.children.get(key)
                if child is None:
                    child = node.children[key] = _Branch(self.weights.get(step, default), {})
                self.in_tree[step] = node = child
        self.branches[code] = node
        return node

    def _add_jobs(self) -> None:
        """Every running and pending job to its leaf (one per (account, user) pair with a job, or one per
        account with `slurm` within accounts): the leaves' usage, running count and rows."""
        request = self.request
        running, width = request.running, self.width
        # Each job's (account, user) as one number, so that a leaf is made once, not once per job.
        codes = np.r_[running.account, request.account_of].astype(np.int64)
        people = [*running.user, *request.user_of]
        if request.within == "user":
            user_code = {u: i for i, u in enumerate(dict.fromkeys(people))}
            names = [USER_LEAF + node_name(user) for user in user_code]  # escaped: no account's name
            users = list(user_code)
            pairs = codes * len(names) + np.array(list(map(user_code.__getitem__, people)), dtype=np.int64)
        else:
            names, users, pairs = [JOBS_LEAF], [""], codes
        distinct, inverse = np.unique(pairs, return_inverse=True)
        span = max(len(names), 1)
        per_job = inverse.reshape(-1).astype(np.int64, copy=False)
        held, waiting = per_job[: len(running.account)], per_job[len(running.account) :]
        leaves = len(distinct)
        allocation = np.zeros((leaves, width), dtype=np.int64)
        np.add.at(allocation, held, running.allocation.reshape(len(held), width))
        counts = np.bincount(held, minlength=leaves).tolist()
        by_leaf = np.argsort(waiting, kind="stable")  # positions of each leaf's jobs, in Slurm's order
        bounds = np.r_[0, np.cumsum(np.bincount(waiting, minlength=leaves))].tolist()
        grouped = by_leaf.tolist()
        user_weights = dict(request.weights.users) if request.within == "user" else {}
        account_names = request.account_names
        made = zip(distinct.tolist(), allocation.tolist(), counts, bounds[:-1], bounds[1:], strict=True)
        for pair, usage_row, count, start, stop in made:
            code, user = divmod(pair, span)
            weight = user_weights.get((account_names[code], users[user]), ONE) if user_weights else ONE
            leaf = _Branch(weight, {}, usage_row, grouped[start:stop], count)
            self._account(code).children[names[user]] = leaf


def _kinds(names: Sequence[str]) -> tuple[list[NodeKind], list[str]]:
    """Each node's kind and the name people read, from its name in the tree, as two columns.

    `user=NAME` is a user (NAME), `jobs=` an account's jobs in Slurm's
    order, `past=` its past; anything else an account. The names are read
    back from their escapes (`shown_name`). Comprehensions: a tree may
    have 200,000 nodes.
    """
    kinds: list[NodeKind] = [
        "user" if n.startswith(USER_LEAF) else "jobs" if n == JOBS_LEAF else "past" if n == PAST_LEAF else "account"
        for n in names
    ]
    cut = len(USER_LEAF)
    shown = [
        n[cut:] if kind == "user" else "(jobs)" if kind == "jobs" else "(past)" if kind == "past" else n
        for n, kind in zip(names, kinds, strict=True)
    ]
    labels = [text if "%" not in text else shown_name(text) for text in shown]
    return kinds, labels


# Siblings in the rows: a node's own leaves (users or its jobs), then its child accounts, then its past.
_KIND_PLACE: Final = {"user": 0, "jobs": 0, "account": 1, "past": 2}


def start_shares(tree: CompiledTree, start: FloatArray | None = None) -> tuple[list[float], list[bool]]:
    """Each compiled node's weighted share and blocked flag at the start of the order (docs/rule.md §7).

    The shares are `start`'s where it is given (an engine's own, the same numbers).
    """
    usable = tree.usable
    caps = [tree.capacity[r] for r in usable]
    saturated = {k for k, r in enumerate(usable) if tree.occupied[r] >= tree.capacity[r]}
    if len(saturated) == len(usable):
        saturated = set()  # the pool is full: no resource counts as saturated
    counted = [k for k in range(len(usable)) if k not in saturated]
    count = len(tree.parent)
    if start is None and not saturated and tree.flat:
        # Every node but the root a leaf, none blocked but for want of jobs: the leaves' shares at once.
        leaves = tree.children[0]
        usage = np.array([tree.usage[n] for n in leaves], dtype=np.int64).reshape(len(leaves), len(tree.capacity))
        weights, of = [tree.weight[n] for n in leaves], np.arange(len(leaves), dtype=np.int64)
        found = share_vectors(usage[:, list(usable)], caps, weights, of)[:, 0].tolist()
        flat_shares, flat_blocked = [0.0] * count, [True] * count
        for n, share in zip(leaves, found, strict=True):
            flat_shares[n] = share / SHARE_ONE
            flat_blocked[n] = not len(tree.jobs[n])
        return flat_shares, flat_blocked
    exact = [NodeShare((), 0, ())] * count
    blocked = [True] * count
    for n in range(count - 1, 0, -1):  # preorder: every child after its parent
        kids = tree.children[n]
        if kids:
            blocked[n] = all(blocked[c] for c in kids)
            if start is None:
                exact[n] = inner_share([(exact[c], blocked[c]) for c in kids], counted, tree.weight[n], tree.rescale[n])
        else:
            jobs = tree.jobs[n]
            blocked[n] = not len(jobs) or (
                bool(saturated) and all(any(d[usable[k]] > 0 for k in saturated) for d in jobs)
            )
            if start is None:
                exact[n] = leaf_share([tree.usage[n][r] for r in usable], caps, tree.weight[n])
    if start is not None:
        return start.tolist(), blocked
    return [s.share / SHARE_ONE for s in exact], blocked


def _by_kind(children: Mapping[str, _Branch]) -> list[tuple[str, _Branch]]:
    if len(children) == 1:
        return list(children.items())
    return sorted(children.items(), key=lambda item: (_place(item[0]), item[0]))


def _place(name: str) -> int:
    """A sibling's place among its kind in the rows (`_KIND_PLACE`), from its name, as `_kinds` reads it."""
    if name.startswith(USER_LEAF) or name == JOBS_LEAF:
        return 0
    return 2 if name == PAST_LEAF else 1


def _preorder(root: _Branch) -> tuple[list[str], list[str], list[int], list[_Branch], list[int]]:
    """The nodes of the tree in the rows' preorder (a node's own leaves, then its child accounts, then its past).

    Per node: its path (as `_compile` noted it), its name, its depth (1
    below the root), its branch and its parent's place in the lists (-1 for
    the root's children).
    """
    paths: list[str] = []
    names: list[str] = []
    depths: list[int] = []
    branches: list[_Branch] = []
    ups: list[int] = []
    stack = [(name, child, 1, -1) for name, child in reversed(_by_kind(root.children))]
    while stack:
        name, branch, depth, up = stack.pop()
        here = len(paths)
        paths.append(branch.path)  # `_compile` made it
        names.append(name)
        depths.append(depth)
        branches.append(branch)
        ups.append(up)
        if branch.children:
            stack.extend(
                (child_name, child, depth + 1, here) for child_name, child in reversed(_by_kind(branch.children))
            )
    return paths, names, depths, branches, ups


def _subtree_sums(branches: Sequence[_Branch], ups: Sequence[int], depths: Sequence[int], width: int) -> IntArray:
    """Per node its subtree's leaves' usage (`width` columns), running and pending jobs, summed a depth at a time."""
    leaves = [i for i, b in enumerate(branches) if b.rows is not None or b.usage is not None]
    sums = np.zeros((len(branches), width + 2), dtype=np.int64)
    if leaves:
        own = [branches[i] for i in leaves]
        sums[leaves] = [[*(b.usage or [0] * width), b.running, len(b.rows or ())] for b in own]
    depth, up = np.array(depths, dtype=np.int64), np.array(ups, dtype=np.int64)
    for level in range(int(depth.max(initial=0)), 1, -1):  # the deepest first: a node's children are summed
        at = np.flatnonzero(depth == level)
        np.add.at(sums, up[at], sums[at])
    return sums


_TREE_ROW_FIELDS: Final = tuple(field.name for field in dataclasses.fields(TreeRow))


@dataclass(frozen=True, slots=True)
class TreeColumns:
    """A pool's tree rows as columns: every field of `TreeRow` but `usage` by name (`of`), and
    `usage` as one (nodes, resources) array."""

    of: Callable[[], Mapping[str, Sequence[Any]]]
    usage: IntArray
    resources: tuple[str, ...]


class TreeRows(LazyRows[TreeRow]):
    """The rows of `tree_rows`, which also lend their columns (`columns`), for output written from them."""

    __slots__ = ("columns",)

    def __init__(
        self,
        size: int,
        make_row: Callable[[int], TreeRow],
        make_all: Callable[[], Iterable[TreeRow]],
        columns: TreeColumns,
    ) -> None:
        super().__init__(size, make_row, make_all)
        self.columns = columns


def tree_rows(
    root: _Branch, tree: CompiledTree, resources: Sequence[str], start: FloatArray | None = None
) -> Sequence[TreeRow]:
    """The pool's tree in preorder, one row per node (chains not contracted); see `TreeRow`.

    `start` is each compiled node's share at the start of the order where
    the engine gave it. The numbers are columns; each `TreeRow` is made
    when it is read (the daemon's cycle shows the tree only to the metrics
    and the report).
    """
    shares, blocked = start_shares(tree, start)
    paths, names, depths, branches, ups = _preorder(root)
    width = len(resources)
    sums = _subtree_sums(branches, ups, depths, width)
    usage = sums[:, :width]
    capacity = np.array(tree.capacity, dtype=np.float64)
    fractions = np.where(capacity > 0, usage / np.where(capacity > 0, capacity, 1.0), -1.0)
    top = fractions.argmax(axis=1) if width else np.zeros(len(paths), dtype=np.int64)
    best = fractions[np.arange(len(paths)), top] if width else np.zeros(len(paths))
    dominant = best > 0
    resource = np.array([*resources, None], dtype=object)[np.where(dominant, top, width)]
    nodes = [branch.node for branch in branches]

    @functools.cache
    def columns() -> dict[str, list[Any]]:
        """The rows' fields but `usage` as columns, made once when first read."""
        kinds, labels = _kinds(names)
        running, pending = sums[:, width:].T.tolist()
        return {
            "path": paths,
            "name": labels,
            "depth": depths,
            "kind": kinds,
            "weight": [branch.weight for branch in branches],
            "running_jobs": running,
            "pending_jobs": pending,
            "dominant_resource": resource.tolist(),
            "dominant_share": np.where(dominant, best, 0.0).tolist(),
            "weighted_share": np.array(shares, dtype=np.float64)[nodes].tolist(),
            "blocked": np.array(blocked, dtype=np.bool_)[nodes].tolist(),
        }

    @functools.cache
    def fields() -> list[list[Any]]:
        """The rows' fields in `TreeRow`'s order, `usage` as mappings."""
        made = columns()
        made_usage = [MappingProxyType(dict(zip(resources, row, strict=True))) for row in usage.tolist()]
        return [made_usage if name == "usage" else made[name] for name in _TREE_ROW_FIELDS]

    return TreeRows(
        len(paths),
        lambda index: TreeRow(*(column[index] for column in fields())),
        lambda: starmap(TreeRow, zip(*fields(), strict=True)),
        TreeColumns(columns, usage, tuple(resources)),
    )


def _before_in_order(order: IntArray, account_of: IntArray, demand: IntArray, usage: IntArray) -> IntArray:
    """Each job's account usage (`usage`: running plus the past) plus its account's jobs placed earlier."""
    before = np.zeros_like(demand)
    if len(order):
        grouped = order[np.argsort(account_of[order], kind="stable")]
        before[grouped] = compute_before(demand[grouped], account_of[grouped], usage)
    return before
