"""Hierarchical DRF (H-DRF) over a tree of accounts and users: the input types, the tree's layout, the flat engine.

Pure, in the policy layer, with its own input types (no snapshot, no config):
for `compute_plan`, `policy.engine.tree_order.order_tree` builds a `TreeNode` tree
from Slurm's associations and orders it with
`policy.engine.merge_engine.order_online`, the merge engine. The rule is
docs/rule.md §7: dynamic H-DRF of Bhattacharya et al. (SoCC 2013),
rescaling and blocked nodes, saturated resources ignored at internal nodes,
the flat tie rule at every level. The rule itself (the walk the engines
must equal, the share of one node) is `policy.rule`; the nested
heaps with the paper's saturation are in tests/reference/.

A flat tree (every child of the root a leaf, after single-child chains are
contracted) is the flat rule, and goes to `policy.engine.order.order_pending`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import chain
from typing import Final

import numpy as np
import numpy.typing as npt

from slurm_drf.errors import InputError
from slurm_drf.model.types import FloatArray, IntArray
from slurm_drf.policy.engine.order import compute_before, order_pending
from slurm_drf.policy.state import TieBook

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
    weight are not used. `rescale=False` (an account whose children are its
    users): its consumption is its children's summed as they are, none
    rescaled (docs/rule.md §7, "The users of an account").
    """

    name: str
    weight: Fraction = Fraction(1)
    children: tuple[TreeNode, ...] = ()
    usage: tuple[int, ...] = ()
    jobs: Jobs = ()
    rescale: bool = True


@dataclass(frozen=True, slots=True)
class CompiledTree:
    """A validated tree in preorder (the root is 0), single-child chains contracted.

    A chain of single children is one node: the top's key and weight, the
    bottom's children or jobs. `key` is the path of names from the root's
    child down to the chain's top ("physics/theory"): the identity the tie
    wins and the rotation use, never compared as a name. `names` is the
    whole contracted chain. Vectors (`usage`, `jobs`) are over all the
    pool's resources; `usable` lists the resources of capacity > 0.
    `rescale[n]` is False where node n sums its children as they are (the
    chain's bottom's `TreeNode.rescale`).
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
    rescale: tuple[bool, ...]
    # Every leaf's jobs in one (jobs, resources) int64 array, leaf after leaf in preorder, where the
    # layout made them so (each leaf's `jobs` a slice of it): the engines read it instead of joining them.
    demand: IntArray | None = None

    @property
    def leaves(self) -> tuple[int, ...]:
        return tuple(n for n, kids in enumerate(self.children) if not kids and n)

    @property
    def flat(self) -> bool:
        """Every child of the root is a leaf: the flat rule of docs/rule.md §2."""
        return all(not self.children[c] for c in self.children[0])


@dataclass(slots=True)
class TreeLayout:
    """A tree being laid out in preorder, node by node: `CompiledTree`'s columns as lists.

    `compile_tree` fills it from `TreeNode`s, `policy.engine.tree_order` straight
    from its join.
    """

    parent: list[int] = field(default_factory=list)
    children: list[list[int]] = field(default_factory=list)
    weight: list[Fraction] = field(default_factory=list)
    key: list[str] = field(default_factory=list)
    names: list[tuple[str, ...]] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    usage: list[tuple[int, ...]] = field(default_factory=list)
    jobs: list[Jobs] = field(default_factory=list)
    rescale: list[bool] = field(default_factory=list)

    def add(self, up: int, weight: Fraction, key: str, names: tuple[str, ...], usage: tuple[int, ...]) -> int:
        """One node under node `up` (-1: the root), with no jobs yet (`jobs[index]` is set after) and its
        children rescaled (`rescale[index]` is set after where they are summed); its index."""
        index = len(self.parent)
        self.rescale.append(True)
        self.parent.append(up)
        self.children.append([])
        self.weight.append(weight)
        self.key.append(key)
        self.names.append(names)
        self.depth.append(self.depth[up] + 1 if up >= 0 else 0)
        self.usage.append(usage)
        self.jobs.append(())
        if up >= 0:
            self.children[up].append(index)
        return index

    def compiled(
        self, capacity: tuple[int, ...], occupied: Sequence[int], demand: IntArray | None = None
    ) -> CompiledTree:
        return CompiledTree(
            capacity,
            tuple(r for r, c in enumerate(capacity) if c > 0),
            tuple(self.parent),
            tuple(map(tuple, self.children)),
            tuple(self.weight),
            tuple(self.key),
            tuple(self.names),
            tuple(self.depth),
            tuple(self.usage),
            tuple(self.jobs),
            tuple(occupied),
            tuple(self.rescale),
            demand,
        )


def compile_tree(root: TreeNode, capacity: Sequence[int], occupied: Sequence[int] | None = None) -> CompiledTree:
    """Validate the tree and lay it out; `occupied` (default: the leaves' usage summed) is the pool's allocation.

    Raises HierarchyError naming the node for a weight that is not > 0, a
    vector of the wrong length or with a negative or non-integer amount,
    usage or jobs on an internal node, an empty name or one holding "/",
    and two siblings of one name.
    """
    width = len(capacity)
    caps = tuple(_amounts(capacity, width, "capacity"))
    layout = TreeLayout()

    def add(node: TreeNode, up: int, path: str) -> None:
        """Lay out one node (its chain contracted); its children go on `todo`, the first on top."""
        chain = [node]
        if up >= 0:
            _check_node(node, path, width)
            while len(chain[-1].children) == 1:
                child = chain[-1].children[0]
                _check_node(child, f"{path}{SEPARATOR}{child.name}", width)
                chain.append(child)
        bottom = chain[-1]
        label = _label(path, chain)
        own_usage, own_jobs = _leaf_data(bottom, label, width)
        weight = Fraction(node.weight) if up >= 0 else Fraction(1)
        index = layout.add(up, weight, path, tuple(n.name for n in chain), own_usage)
        layout.jobs[index] = own_jobs
        layout.rescale[index] = bottom.rescale
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
    usage = layout.usage
    if occupied is None:
        total = [sum(col) for col in zip(*usage, strict=True)] if usage else [0] * width
    else:
        total = _amounts(occupied, width, "occupied")
    return layout.compiled(caps, total)


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


def order_flat(tree: CompiledTree, ties: TieBook) -> HierarchyOrdering:
    """A flat tree (every child of the root a leaf) by §2's engine, `order_pending`."""
    leaves = list(tree.children[0])
    width = len(tree.capacity)
    counts = np.array([len(tree.jobs[n]) for n in leaves], dtype=np.int64)
    account_of = np.repeat(np.arange(len(leaves), dtype=np.int64), counts)
    demand = tree.demand
    if demand is None:
        pieces = [np.asarray(tree.jobs[n], dtype=np.int64).reshape(len(tree.jobs[n]), width) for n in leaves]
        demand = np.concatenate(pieces) if pieces else np.zeros((0, width), dtype=np.int64)
    rows = len(account_of)
    usage = np.array([tree.usage[n] for n in leaves], dtype=np.int64).reshape(len(leaves), width)
    before = compute_before(demand, account_of, usage)
    capacity = np.array(tree.capacity, dtype=np.int64)
    weights = [tree.weight[n] for n in leaves]
    names = [tree.key[n] for n in leaves]
    ordering = order_pending(before, account_of, capacity, weights, names, ties)
    order = ordering.order
    leaf = np.array(leaves, dtype=np.int64)[account_of[order]] if rows else np.zeros(0, np.int64)
    job = (np.arange(rows, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts))[order]
    return HierarchyOrdering(tree, leaf, job, ordering.level[order].reshape(-1, 1), ordering.tied[order])
