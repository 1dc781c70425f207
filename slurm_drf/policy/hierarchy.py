"""Hierarchical DRF (H-DRF) over a tree of accounts and users: the input types, the rule at one node, the engine.

Pure, in the policy layer, with its own input types (no snapshot, no config):
for `compute_plan`, `policy.tree_order.order_tree` builds a `TreeNode` tree
from Slurm's associations and orders it with
`policy.hierarchy_online.order_online`, which gives the order of
`order_hierarchy` here. The rule is docs/rule.md §7: dynamic H-DRF of
Bhattacharya et al. (SoCC 2013), rescaling and blocked nodes, saturated
resources ignored at internal nodes, the flat tie rule at every level. The
textbook loop the tests compare the engine with is `policy.hierarchy_oracle`.

A flat tree (every child of the root a leaf, after single-child chains are
contracted) is the flat rule, and goes to `policy.order.order_pending`.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import chain
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from slurm_drf.errors import InputError
from slurm_drf.model.types import FloatArray, IntArray
from slurm_drf.policy.order import compute_before, order_pending
from slurm_drf.policy.state import rotation_key

Variant = Literal["hdrf", "rescale", "rollup"]
# A leaf's pending jobs: demand vectors as tuples of ints, or one (jobs, resources) integer array.
Jobs = tuple[tuple[int, ...], ...] | IntArray
SEPARATOR: Final = "/"


class HierarchyError(InputError):
    """A tree that breaks docs/rule.md §7's input rules; the message names the node's path."""

    category = "hierarchy"


@dataclass(frozen=True, slots=True)
class TreeNode:
    """One node of the tree: the root, an account, or a leaf (a user of an account, or an account without users).

    `weight` is relative to the node's siblings and must be > 0 (0 is refused,
    never turned into an infinite share). Only leaves hold `usage` (running
    allocation per resource of the pool) and `jobs` (each pending job's whole
    demand vector, an array record's TRES times its tasks, in Slurm's order:
    tuples of ints, or one (jobs, resources) integer array, which the plan
    passes as it is); an empty `usage` means zeros. The root's name and
    weight are not used.
    """

    name: str
    weight: Fraction = Fraction(1)
    children: tuple[TreeNode, ...] = ()
    usage: tuple[int, ...] = ()
    jobs: Jobs = ()


@dataclass(frozen=True, slots=True)
class CompiledTree:
    """A validated tree in preorder (the root is 0), single-child chains contracted.

    A chain of single children is one node: the top's key and weight, the
    bottom's children or jobs. `key` is the path of names from the root's
    child down to the chain's top ("physics/theory"): the identity the tie
    wins and the rotation use, never compared as a name. `names` is the
    whole contracted chain. Vectors (`usage`, `jobs`) are over all the
    pool's resources; `usable` lists the resources of capacity > 0.
    """

    capacity: tuple[int, ...]
    usable: tuple[int, ...]
    parent: tuple[int, ...]
    children: tuple[tuple[int, ...], ...]
    weight: tuple[Fraction, ...]
    key: tuple[str, ...]
    names: tuple[tuple[str, ...], ...]
    depth: tuple[int, ...]
    usage: tuple[tuple[int, ...], ...]
    jobs: tuple[Jobs, ...]
    occupied: tuple[int, ...]

    @property
    def leaves(self) -> tuple[int, ...]:
        return tuple(n for n, kids in enumerate(self.children) if not kids and n)

    @property
    def flat(self) -> bool:
        """Every child of the root is a leaf: the flat rule of docs/rule.md §2."""
        return all(not self.children[c] for c in self.children[0])


def compile_tree(root: TreeNode, capacity: Sequence[int], occupied: Sequence[int] | None = None) -> CompiledTree:
    """Validate the tree and lay it out; `occupied` (default: the leaves' usage summed) is the pool's allocation.

    Raises HierarchyError naming the node for a weight that is not > 0, a
    vector of the wrong length or with a negative or non-integer amount,
    usage or jobs on an internal node, an empty name or one holding "/",
    and two siblings of one name.
    """
    width = len(capacity)
    caps = tuple(_amounts(capacity, width, "capacity"))
    parent: list[int] = []
    children: list[list[int]] = []
    weight: list[Fraction] = []
    key: list[str] = []
    names: list[tuple[str, ...]] = []
    depth: list[int] = []
    usage: list[tuple[int, ...]] = []
    jobs: list[Jobs] = []

    def add(node: TreeNode, up: int, path: str) -> None:
        """Lay out one node (its chain contracted); its children go on `todo`, the first on top."""
        index = len(parent)
        chain = [node]
        if up >= 0:
            _check_node(node, path, width)
            while len(chain[-1].children) == 1:
                child = chain[-1].children[0]
                _check_node(child, f"{path}{SEPARATOR}{child.name}", width)
                chain.append(child)
        bottom = chain[-1]
        label = _label(path, chain)
        parent.append(up)
        children.append([])
        weight.append(Fraction(node.weight) if up >= 0 else Fraction(1))
        key.append(path)
        names.append(tuple(n.name for n in chain))
        depth.append(depth[up] + 1 if up >= 0 else 0)
        own_usage, own_jobs = _leaf_data(bottom, label, width)
        usage.append(own_usage)
        jobs.append(own_jobs)
        if up >= 0:
            children[up].append(index)
        seen: set[str] = set()
        for child in bottom.children:
            if child.name in seen:
                raise HierarchyError(f"tree node {label}: two children named {child.name!r}")
            seen.add(child.name)
        todo.extend(
            (child, index, f"{label}{SEPARATOR}{child.name}" if label else child.name)
            for child in reversed(bottom.children)
        )

    if root.usage or len(root.jobs):
        raise HierarchyError("tree root: the root holds no usage or jobs (give them to a leaf)")
    # Preorder without recursion (a tree may be deep): a stack of (node, parent's index, path).
    todo: list[tuple[TreeNode, int, str]] = [(root, -1, "")]
    while todo:
        add(*todo.pop())
    if occupied is None:
        total = [sum(col) for col in zip(*usage, strict=True)] if usage else [0] * width
    else:
        total = _amounts(occupied, width, "occupied")
    return CompiledTree(
        caps,
        tuple(r for r, c in enumerate(caps) if c > 0),
        tuple(parent),
        tuple(tuple(kids) for kids in children),
        tuple(weight),
        tuple(key),
        tuple(names),
        tuple(depth),
        tuple(usage),
        tuple(jobs),
        tuple(total),
    )


def _leaf_data(node: TreeNode, label: str, width: int) -> tuple[tuple[int, ...], Jobs]:
    """A node's usage and jobs, checked; an internal node holds neither."""
    if node.children:
        if node.usage or len(node.jobs):
            raise HierarchyError(f"tree node {label}: an internal node holds no usage or jobs")
        return (0,) * width, ()
    usage = tuple(_amounts(node.usage or (0,) * width, width, f"tree node {label} usage"))
    if isinstance(node.jobs, np.ndarray):
        if _plain_array(node.jobs, width):
            return usage, node.jobs.astype(np.int64, copy=False)
        if node.jobs.size and node.jobs.ndim != 2:
            raise HierarchyError(f"tree node {label} jobs: an array of shape {node.jobs.shape}, not (jobs, {width})")
    elif _plain(node.jobs, width):
        return usage, tuple(map(tuple, node.jobs))
    jobs = tuple(tuple(_amounts(d, width, f"tree node {label} job {i}")) for i, d in enumerate(node.jobs))
    return usage, jobs


def _plain_array(jobs: npt.NDArray[np.generic], width: int) -> bool:
    """Whether an array of jobs is (jobs, `width`) whole numbers >= 0 that int64 holds (int64 itself: one reduction)."""
    if jobs.ndim != 2 or jobs.shape[1] != width or jobs.dtype.kind not in "iu":
        return False
    fits = jobs.dtype == np.int64 or not jobs.size or int(jobs.max()) < 1 << 63
    return fits and (not jobs.size or int(jobs.min()) >= 0)


def _plain(jobs: Sequence[Sequence[int]], width: int) -> bool:
    """Whether every job is `width` Python ints >= 0 (checked in C loops; anything else goes through `_amounts`)."""
    values = list(chain.from_iterable(jobs))
    return set(map(len, jobs)) <= {width} and set(map(type, values)) <= {int} and (not values or min(values) >= 0)


def _label(path: str, chain: Sequence[TreeNode]) -> str:
    """The path of the bottom of a contracted chain (its children hang below it)."""
    tail = SEPARATOR.join(n.name for n in chain[1:])
    return f"{path}{SEPARATOR}{tail}" if path and tail else path or tail


def _check_node(node: TreeNode, path: str, width: int) -> None:
    if not isinstance(node.name, str) or not node.name or SEPARATOR in node.name:
        raise HierarchyError(f"tree node {path!r}: a name is a non-empty string without {SEPARATOR!r}")
    if isinstance(node.weight, bool) or not isinstance(node.weight, (Fraction, int)):
        raise HierarchyError(f"tree node {path}: weight {node.weight!r} is not an exact number (int or Fraction)")
    if node.weight <= 0:
        raise HierarchyError(f"tree node {path}: weight {node.weight} is not > 0")


def _amounts(values: Sequence[int], width: int, what: str) -> list[int]:
    if len(values) != width:
        raise HierarchyError(f"{what}: {len(values)} amounts for {width} resources")
    out: list[int] = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            shown = int(value) if isinstance(value, np.integer) else repr(value)
            raise HierarchyError(f"{what}: {shown} is not a whole number >= 0")
        out.append(int(value))
    return out


# --------------------------------------------------------------------------
# The rule at one node (docs/rule.md §7), exact


@dataclass(frozen=True, slots=True)
class NodeShare:
    """A node's consumption, its weighted dominant share and its sorted share vector, in fixed point.

    `units` is the consumption of each usable resource in units of
    2**-SHARE_BITS of its capacity; `share` and `vector` (largest first,
    one entry per usable resource) are whole numbers of 2**-SHARE_BITS of
    share, rounded down: a leaf's from its exact flat shares (§2), an
    internal node's from its units over its weight.
    """

    units: tuple[int, ...]
    share: int
    vector: tuple[int, ...]


# The rule's fixed point (docs/rule.md §7). Consumption and shares are whole
# numbers of 2**-SHARE_BITS of the pool (a leaf's usage rounded down once);
# a child's direction (its consumption over its share, what rescaling
# multiplies by the least share) is a whole number of 2**-DIRECTION_BITS.
# Every amount is rounded down where it is made and exact after, so equal
# states give equal shares and the tie rule sees every tie; the rounding is
# a billionth of the pool. The sizes keep a busy pool's numbers below 2**52,
# where the merge engine computes them in int64 (policy.hierarchy_online).
SHARE_BITS: Final = 30
DIRECTION_BITS: Final = 36
SHARE_ONE: Final = 1 << SHARE_BITS


def leaf_share(usage: Sequence[int], caps: Sequence[int], weight: Fraction) -> NodeShare:
    """A leaf: §2's rule over every usable resource (`usage` and `caps` over the usable ones), in fixed point."""
    p, q = weight.numerator, weight.denominator
    units = tuple((u << SHARE_BITS) // c for u, c in zip(usage, caps, strict=True))
    # Each share rounded once from the exact u·q / (c·p): equal flat shares stay equal.
    shares = sorted(((u * q << SHARE_BITS) // (c * p) for u, c in zip(usage, caps, strict=True)), reverse=True)
    return NodeShare(units, shares[0] if shares else 0, tuple(shares))


def inner_share(
    children: Sequence[tuple[NodeShare, bool]],
    counted: Sequence[int],
    weight: Fraction,
    variant: Variant = "hdrf",
) -> NodeShare:
    """An internal node from its children's (share, blocked); its share counts the `counted` resources.

    hdrf: M is the least weighted share of the non-blocked children; each
    of them of share S > 0 counts as its consumption x M / S (its weighted
    share becomes M): M times the sum of their directions, x · 2**DIRECTION_BITS / S
    rounded down, shifted back down. Blocked children, and children of
    share 0, count as they are. rescale: the same with no child blocked.
    rollup: the plain sum. hdrf's caller leaves the saturated resources out
    of `counted`; they count as shares of 0.
    """
    width = len(children[0][0].units) if children else 0
    rescaled = [variant == "rescale" or (variant == "hdrf" and not blocked) for _, blocked in children]
    least = min((s.share for (s, _), on in zip(children, rescaled, strict=True) if on), default=0)
    direction = [0] * width
    rest = [0] * width
    for (child, _), on in zip(children, rescaled, strict=True):
        if on and child.share > 0:
            direction = [y + (u << DIRECTION_BITS) // child.share for y, u in zip(direction, child.units, strict=True)]
        else:
            rest = [b + u for b, u in zip(rest, child.units, strict=True)]
    total = [(least * y >> DIRECTION_BITS) + b for y, b in zip(direction, rest, strict=True)]
    p, q = weight.numerator, weight.denominator
    # A left-out resource counts as a share of 0, so every vector has one entry per usable resource.
    shares = sorted((total[k] * q // p for k in counted), reverse=True) + [0] * (width - len(counted))
    return NodeShare(tuple(total), shares[0] if shares else 0, tuple(shares))


# --------------------------------------------------------------------------
# The engine


@dataclass(frozen=True, slots=True)
class HierarchyOrdering:
    """The H-DRF order of one pool's pending jobs, and what explain needs.

    Position p places job `job[p]` (its index in the leaf's `jobs`) of leaf
    `leaf[p]` (a node of `tree`). `path_share[p, k]` is the weighted
    dominant share, when the job was placed, of the node at depth k + 1 on
    the leaf's path (the root's child first, the leaf at its depth), 0
    beyond the leaf's depth; `tied[p]` is True where the tie rule chose at
    some level. `start[n]`, when the engine gives it, is node n's weighted
    share before any pending job is placed (the merge engine's state 0).
    """

    tree: CompiledTree
    leaf: IntArray
    job: IntArray
    path_share: FloatArray
    tied: npt.NDArray[np.bool_]
    start: FloatArray | None = None

    def pairs(self) -> list[tuple[str, int]]:
        """(leaf key, job index) in order, as the oracle returns them."""
        keys = self.tree.key
        return [(keys[n], j) for n, j in zip(self.leaf.tolist(), self.job.tolist(), strict=True)]

    def path(self, position: int) -> tuple[int, ...]:
        """The nodes from the root's child down to the leaf of a position."""
        node = int(self.leaf[position])
        out: list[int] = []
        while node > 0:
            out.append(node)
            node = self.tree.parent[node]
        return tuple(reversed(out))


def order_hierarchy(
    root: TreeNode,
    capacity: Sequence[int],
    epoch: int,
    wins: dict[str, float],
    plan_wins: dict[str, float],
    occupied: Sequence[int] | None = None,
) -> HierarchyOrdering:
    """Order every pending job of the tree by H-DRF (docs/rule.md §7).

    `wins` (committed plus this plan's, keyed by node key) and `plan_wins`
    are updated in place, as `order_pending` does. A flat tree is ordered
    by `order_pending` itself; a deeper one by nested heaps on the rule's
    fixed point: O(J·d·(R + log b)) for J jobs, depth d,
    fanout b and R resources, plus an O(N·R) rebuild each time a resource
    saturates (at most R + 1 times).
    """
    tree = compile_tree(root, capacity, occupied)
    if tree.flat:
        return order_flat(tree, epoch, wins, plan_wins)
    return _Engine(tree, epoch, wins, plan_wins).run()


def order_flat(
    tree: CompiledTree, epoch: int, wins: dict[str, float], plan_wins: dict[str, float]
) -> HierarchyOrdering:
    leaves = list(tree.children[0])
    width = len(tree.capacity)
    counts = np.array([len(tree.jobs[n]) for n in leaves], dtype=np.int64)
    account_of = np.repeat(np.arange(len(leaves), dtype=np.int64), counts)
    pieces = [np.asarray(tree.jobs[n], dtype=np.int64).reshape(len(tree.jobs[n]), width) for n in leaves]
    demand = np.concatenate(pieces) if pieces else np.zeros((0, width), dtype=np.int64)
    rows = len(account_of)
    usage = np.array([tree.usage[n] for n in leaves], dtype=np.int64).reshape(len(leaves), width)
    before = compute_before(demand, account_of, usage)
    capacity = np.array(tree.capacity, dtype=np.int64)
    weights = [tree.weight[n] for n in leaves]
    names = [tree.key[n] for n in leaves]
    ordering = order_pending(before, account_of, capacity, weights, names, epoch, wins, plan_wins)
    order = ordering.order
    leaf = np.array(leaves, dtype=np.int64)[account_of[order]] if rows else np.zeros(0, np.int64)
    job = (np.arange(rows, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts))[order]
    return HierarchyOrdering(tree, leaf, job, ordering.level[order].reshape(-1, 1), ordering.tied[order])


class _Engine:
    """Nested heaps over a compiled tree, on the rule's exact fixed point; see `order_hierarchy`.

    Per internal node n: `direction[n]` sums the directions of its
    non-blocked children of share > 0, `rest[n]` the consumption of the
    others, so n's consumption is (M · direction >> DIRECTION_BITS) + rest
    with M the least share of the non-blocked children (the `active[n]`
    heap); `select[n]` holds the children with pending jobs by (share,
    vector). Heap entries carry the child's version and are dropped when
    stale. Everything is a whole number: equal keys are ties, no re-check.
    """

    def __init__(self, tree: CompiledTree, epoch: int, wins: dict[str, float], plan_wins: dict[str, float]) -> None:
        self.tree = tree
        self.epoch = epoch
        self.wins = wins
        self.plan_wins = plan_wins
        usable = tree.usable
        self.caps = [tree.capacity[r] for r in usable]
        self.width = len(usable)
        count = len(tree.parent)
        self.leaf = [not kids and n > 0 for n, kids in enumerate(tree.children)]
        self.consumed = [[tree.usage[n][r] for r in usable] for n in range(count)]
        self.demand = [[[int(d[r]) for r in usable] for d in tree.jobs[n]] for n in range(count)]
        self.masks = [[sum(1 << k for k, v in enumerate(d) if v > 0) for d in jobs] for jobs in self.demand]
        self.mask_count: list[dict[int, int]] = [{} for _ in range(count)]
        for n, masks in enumerate(self.masks):
            for m in masks:
                self.mask_count[n][m] = self.mask_count[n].get(m, 0) + 1
        self.taken = [0] * count
        self.remaining = [len(j) for j in self.demand]
        for n in range(count - 1, 0, -1):
            self.remaining[tree.parent[n]] += self.remaining[n]
        self.total = [tree.occupied[r] for r in usable]
        self.full = (1 << self.width) - 1
        self.raw_saturated = sum(1 << k for k in range(self.width) if self.total[k] >= self.caps[k])
        self.saturated = 0
        self.state = [NodeShare((0,) * self.width, 0, (0,) * self.width)] * count
        self.blocked = [False] * count
        self.version = [0] * count
        self.active_count = [0] * count
        self.direction = [[0] * self.width for _ in range(count)]
        self.rest = [[0] * self.width for _ in range(count)]
        self.part: list[tuple[bool, list[int], bool] | None] = [None] * count  # (a direction?, vector, active?)
        self.select: list[list[tuple[int, tuple[int, ...], int, int]]] = [[] for _ in range(count)]
        self.active: list[list[tuple[int, int, int]]] = [[] for _ in range(count)]
        self.max_depth = max(tree.depth, default=0)

    # ---- state of one node

    def _effective(self) -> int:
        return 0 if self.raw_saturated == self.full else self.raw_saturated

    def _leaf_blocked(self, n: int) -> bool:
        if not self.remaining[n]:
            return True
        saturated = self.saturated
        return bool(saturated) and all(m & saturated for m, k in self.mask_count[n].items() if k)

    def _refresh(self, n: int) -> None:
        """Recompute n's state from its children's parts (a leaf's from its usage)."""
        weight = self.tree.weight[n]
        if self.leaf[n]:
            self.state[n] = leaf_share(self.consumed[n], self.caps, weight)
            self.blocked[n] = self._leaf_blocked(n)
            return
        heap = self.active[n]
        while heap and (heap[0][1] != self.version[heap[0][2]] or self.blocked[heap[0][2]]):
            heapq.heappop(heap)
        least = heap[0][0] if heap else 0
        total = [(least * y >> DIRECTION_BITS) + b for y, b in zip(self.direction[n], self.rest[n], strict=True)]
        p, q = weight.numerator, weight.denominator
        counted = [total[k] * q // p for k in range(self.width) if not self.saturated >> k & 1]
        shares = sorted(counted, reverse=True) + [0] * (self.width - len(counted))
        self.state[n] = NodeShare(tuple(total), shares[0] if shares else 0, tuple(shares))
        self.blocked[n] = self.active_count[n] == 0

    def _attach(self, child: int) -> None:
        """Put the child's current state into its parent's sums and heaps."""
        n = self.tree.parent[child]
        self._detach(child)
        state = self.state[child]
        active = not self.blocked[child]
        if active and state.share:
            vector = [(u << DIRECTION_BITS) // state.share for u in state.units]
            self.direction[n] = [y + v for y, v in zip(self.direction[n], vector, strict=True)]
        else:
            vector = list(state.units)
            self.rest[n] = [b + v for b, v in zip(self.rest[n], vector, strict=True)]
        if active:
            self.active_count[n] += 1
            heapq.heappush(self.active[n], (state.share, self.version[child], child))
        self.part[child] = (active and bool(state.share), vector, active)
        if self.remaining[child]:
            heapq.heappush(self.select[n], (state.share, state.vector, self.version[child], child))
        limit = 2 * len(self.tree.children[n]) + 8
        if len(self.select[n]) > limit:  # drop what went stale, so the tie scan stays short
            self.select[n] = [e for e in self.select[n] if e[2] == self.version[e[3]] and self.remaining[e[3]]]
            heapq.heapify(self.select[n])
        if len(self.active[n]) > limit:
            self.active[n] = [e for e in self.active[n] if e[1] == self.version[e[2]] and not self.blocked[e[2]]]
            heapq.heapify(self.active[n])

    def _detach(self, child: int) -> None:
        part = self.part[child]
        if part is None:
            return
        n = self.tree.parent[child]
        into_direction, vector, active = part
        if into_direction:
            self.direction[n] = [y - v for y, v in zip(self.direction[n], vector, strict=True)]
        else:
            self.rest[n] = [b - v for b, v in zip(self.rest[n], vector, strict=True)]
        if active:
            self.active_count[n] -= 1
        self.part[child] = None
        self.version[child] += 1

    def _rebuild(self) -> None:
        self.saturated = self._effective()
        count = len(self.tree.parent)
        for n in range(count):
            self.direction[n] = [0] * self.width
            self.rest[n] = [0] * self.width
            self.select[n] = []
            self.active[n] = []
            self.active_count[n] = 0
            self.part[n] = None
        for n in range(count - 1, -1, -1):
            self._refresh(n)
            if n:
                self._attach(n)

    def _choose(self, n: int) -> tuple[int, bool]:
        heap = self.select[n]
        while heap[0][2] != self.version[heap[0][3]] or not self.remaining[heap[0][3]]:
            heapq.heappop(heap)
        key = heap[0][:2]
        size = len(heap)
        if (size < 2 or heap[1][:2] != key) and (size < 3 or heap[2][:2] != key):
            return heap[0][3], False  # the most common case: no sibling of the very same key
        tied: list[int] = []
        stack = [0]
        while stack:  # the entries of the least key are a subtree at the heap's top
            i = stack.pop()
            if i >= size or heap[i][:2] != key:
                continue
            entry = heap[i]
            if entry[2] == self.version[entry[3]] and self.remaining[entry[3]]:
                tied.append(entry[3])
            stack.extend((2 * i + 1, 2 * i + 2))
        if len(tied) == 1:
            return tied[0], False
        keys = self.tree.key
        chosen = min(tied, key=lambda c: (self.wins.get(keys[c], 0.0), rotation_key(self.epoch, keys[c]), keys[c]))
        name = keys[chosen]
        self.wins[name] = self.wins.get(name, 0.0) + 1.0
        self.plan_wins[name] = self.plan_wins.get(name, 0.0) + 1.0
        return chosen, True

    # ---- the loop

    def run(self) -> HierarchyOrdering:
        self._rebuild()
        jobs = self.remaining[0]
        leaf_out = np.zeros(jobs, dtype=np.int64)
        job_out = np.zeros(jobs, dtype=np.int64)
        shares = np.zeros((jobs, max(self.max_depth, 1)), dtype=np.float64)
        tied_out = np.zeros(jobs, dtype=np.bool_)
        for position in range(jobs):
            n = 0
            path = [0]
            while not self.leaf[n]:
                n, tie = self._choose(n)
                tied_out[position] |= tie
                shares[position, len(path) - 1] = self.state[n].share / SHARE_ONE
                path.append(n)
            index = self.taken[n]
            leaf_out[position], job_out[position] = n, index
            demand = self.demand[n][index]
            self.taken[n] = index + 1
            self.consumed[n] = [c + d for c, d in zip(self.consumed[n], demand, strict=True)]
            mask = self.masks[n][index]
            self.mask_count[n][mask] -= 1
            for node in path:
                self.remaining[node] -= 1
            for k, d in enumerate(demand):
                if d:
                    self.total[k] += d
                    if self.total[k] >= self.caps[k]:
                        self.raw_saturated |= 1 << k
            if self._effective() != self.saturated:
                self._rebuild()
                continue
            for node in reversed(path):
                self._refresh(node)
                if node:
                    self._attach(node)
        return HierarchyOrdering(self.tree, leaf_out, job_out, shares, tied_out)
