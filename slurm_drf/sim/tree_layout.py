"""The account tree of a simulated run: its layout, the per-tick H-DRF input, and the naive roll-up order.

Sits between `workload`/`table` and the tree policies (`policies.HdrfPolicy`,
`policies.RollupPolicy`) and `run_metrics`: `build_layout` numbers the nodes of
a workload's tree once per run (the root, the accounts along their
paths, and the users of each account as leaves); `build_tree` turns the
leaves' running usage and pending records at one tick into the
`policy.engine.hierarchy.TreeNode` tree the merge engine orders; `rollup_order`
is the naive roll-up of the paper (a parent's consumption is the plain sum
of its children's), cheap enough to run every tick; `node_shares` gives
every node's weighted dominant share at every sample for the per-level
Jain of `run_metrics`. Pure.

Keys follow docs/rule.md §7: a node's key is its path below the root, and
a chain of single children is one node keyed by its top. The order comes
back as (leaf key, index among the leaf's jobs) pairs, as
`HierarchyOrdering.pairs()` gives them; `TreeInput.records` maps them
back to the simulator's records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

import numpy as np

from slurm_drf.model.types import FloatArray, IntArray
from slurm_drf.policy.engine.hierarchy import TreeNode
from slurm_drf.policy.rule import SHARE_BITS
from slurm_drf.policy.state import TieBook
from slurm_drf.sim.table import WorkloadTable
from slurm_drf.sim.workload import TREE_SEPARATOR, Workload

# The one leaf of an account whose users are not told apart (`fairness_within_account: slurm`).
ACCOUNT_LEAF: Final = "jobs="


@dataclass(frozen=True, slots=True)
class TreeLayout:
    """The nodes of one run's tree in preorder (the root is 0, children after their parent).

    Depth 0 is the root; accounts sit at the depth of their path; the
    users of an account one below it (every user is a leaf, and only
    leaves hold jobs). `account_node` is each account's node (by the
    table's account index); `leaf_of_job` each job's leaf.
    """

    name: tuple[str, ...]
    path: tuple[str, ...]
    parent: tuple[int, ...]
    depth: tuple[int, ...]
    weight: tuple[Fraction, ...]
    children: tuple[tuple[int, ...], ...]
    account_node: tuple[int, ...]
    leaf_of_job: IntArray
    leaf_of_record: IntArray

    @property
    def size(self) -> int:
        return len(self.parent)

    @property
    def max_depth(self) -> int:
        return max(self.depth)

    def is_user(self, node: int) -> bool:
        return not self.children[node] and node > 0


def build_layout(
    workload: Workload,
    table: WorkloadTable,
    account_weights: Sequence[Fraction] | None = None,
    users: bool = True,
) -> TreeLayout:
    """Number the tree of `workload` (flat: every account under the root) with its users as leaves.

    An account weighs `account_weights[i]` (by the table's account index;
    default: the workload's weight) against its siblings. `users=False`
    (`fairness_within_account: slurm`): each account is one leaf holding
    all its users' jobs in Slurm's order, as the plan's `jobs=` leaf.
    """
    tree = workload.tree
    weights = account_weights or [workload.weight(a) for a in table.accounts]
    # Each account's path of names (flat: the account alone); users hang below their account.
    account_path = {a: tuple(tree.path(a).split(TREE_SEPARATOR)) if tree is not None else (a,) for a in table.accounts}
    paths: dict[tuple[str, ...], Fraction] = {}
    for account, own in zip(table.accounts, weights, strict=True):
        path = account_path[account]
        for end in range(1, len(path)):
            prefix = path[:end]
            paths.setdefault(prefix, tree.weight(TREE_SEPARATOR.join(prefix)) if tree is not None else Fraction(1))
        paths[path] = own
    leaves: dict[tuple[str, ...], set[str]] = {}
    job_user = table.job_user if users else [ACCOUNT_LEAF] * len(table.job_user)
    for number, user in zip(table.job_account, job_user, strict=True):
        leaves.setdefault(account_path[table.accounts[number]], set()).add(user)
    for path, names in leaves.items():
        for user in names:
            paths[(*path, user)] = Fraction(1)

    name: list[str] = [""]
    full: list[str] = [""]
    parent: list[int] = [-1]
    depth: list[int] = [0]
    weight: list[Fraction] = [Fraction(1)]
    children: list[list[int]] = [[]]
    index: dict[tuple[str, ...], int] = {(): 0}
    # Sorted, so a parent comes before its children (a prefix sorts first).
    for path in sorted(paths):
        node = len(parent)
        index[path] = node
        up = index[path[:-1]]
        name.append(path[-1])
        full.append(TREE_SEPARATOR.join(path))
        parent.append(up)
        depth.append(len(path))
        weight.append(paths[path])
        children.append([])
        children[up].append(node)
    account_node = tuple(index[account_path[a]] for a in table.accounts)
    leaf_of_job = np.array(
        [index[(*account_path[table.accounts[a]], u)] for a, u in zip(table.job_account, job_user, strict=True)],
        dtype=np.int64,
    )
    first = [tasks[0] for tasks in table.record_tasks]
    return TreeLayout(
        name=tuple(name),
        path=tuple(full),
        parent=tuple(parent),
        depth=tuple(depth),
        weight=tuple(weight),
        children=tuple(tuple(c) for c in children),
        account_node=account_node,
        leaf_of_job=leaf_of_job,
        leaf_of_record=leaf_of_job[np.array(first, dtype=np.int64)] if first else np.zeros(0, np.int64),
    )


@dataclass(frozen=True, slots=True)
class TreeInput:
    """One tick's tree for the H-DRF engines, and how their pairs map back to records."""

    root: TreeNode
    records: Mapping[str, Sequence[int]]  # leaf key -> its pending records, in the leaf's job order


def build_tree(
    layout: TreeLayout,
    leaf_usage: Sequence[Sequence[int]],
    records: Sequence[int],
    demand: Sequence[Sequence[int]],
) -> TreeInput:
    """The tree of the nodes with running usage or pending jobs below them.

    `leaf_usage[n]` is node n's running allocation (zeros but at leaves);
    `records` the pending records in Slurm's order within each account
    (submit order), `demand[i]` record i's whole pending demand (its TRES
    times its pending tasks). Nodes with nothing below them are left out:
    they would neither hold a share nor take a job.
    """
    jobs: dict[int, list[tuple[int, ...]]] = {}
    owned: dict[int, list[int]] = {}
    for record, vector in zip(records, demand, strict=True):
        leaf = int(layout.leaf_of_record[record])
        jobs.setdefault(leaf, []).append(tuple(vector))
        owned.setdefault(leaf, []).append(record)
    live = [False] * layout.size
    for node in range(layout.size - 1, 0, -1):
        if node in jobs or any(leaf_usage[node]):
            live[node] = True
        if live[node]:
            live[layout.parent[node]] = True
    mapping: dict[str, Sequence[int]] = {}

    def make(node: int, key: str) -> TreeNode:
        kids = [c for c in layout.children[node] if live[c]]
        if not kids and node > 0:
            mapping[key] = owned.get(node, [])
            return TreeNode(
                layout.name[node], layout.weight[node], (), tuple(leaf_usage[node]), tuple(jobs.get(node, ()))
            )
        # A chain of single children is one node keyed by its top (docs/rule.md §7); the root is no chain.
        chained = len(kids) == 1 and node > 0
        built = tuple(make(c, key if chained else layout.path[c]) for c in kids)
        # An account over its users sums them as they are (docs/rule.md §7, "The users of an account").
        rescale = not any(layout.is_user(c) for c in kids)
        return TreeNode(layout.name[node] or "root", layout.weight[node], built, rescale=rescale)

    return TreeInput(make(0, ""), mapping)


# --------------------------------------------------------------------------
# The naive roll-up (the paper's first counterexample), exact and cheap


def rollup_order(root: TreeNode, capacity: Sequence[int], ties: TieBook) -> list[tuple[str, int]]:
    """The naive roll-up H-DRF order: (leaf key, job index) pairs, as `rule.hdrf_order` with the roll-up gives them.

    A parent's consumption is the plain sum of its children's (no
    rescaling, nothing blocked, no resource ignored): a child that took
    much of a resource no sibling wants pushes its parent's share up. The
    walk and the tie rule are docs/rule.md §7's. Consumption is the rule's
    fixed point (`policy.engine.hierarchy`: a leaf's usage in 2**-30 of each
    capacity, rounded down once, summed up the tree), so shares compare
    exactly as integers; placing a job updates its path:
    O(J·d·(b + R log R)). `ties` counts the tie wins, as the H-DRF engines do.
    """
    return _Rollup(root, capacity, ties).run()


class _Rollup:
    """The state of `rollup_order`: the tree in preorder, each node's consumption and share vector."""

    def __init__(self, root: TreeNode, capacity: Sequence[int], ties: TieBook) -> None:
        self.ties = ties
        self.usable = [r for r, c in enumerate(capacity) if c > 0]
        self.caps = [capacity[r] for r in self.usable]
        self.nodes: list[TreeNode] = []
        self.parent: list[int] = []
        self.key: list[str] = []
        self.children: list[list[int]] = []
        self._lay_out(root)
        count = len(self.nodes)
        width = len(self.caps)
        self.weights = [Fraction(n.weight) for n in self.nodes]
        self.consumed = [[0] * width for _ in range(count)]  # a leaf's usage
        self.units = [[0] * width for _ in range(count)]  # the rule's fixed point: a leaf's, or the sum
        self.demand = [[[d[r] for r in self.usable] for d in n.jobs] for n in self.nodes]
        for n in range(count - 1, -1, -1):
            if not self.children[n]:
                usage = self.nodes[n].usage or (0,) * len(capacity)
                self.consumed[n] = [usage[r] for r in self.usable]
                self.units[n] = self._leaf_units(n)
            if n:
                up = self.parent[n]
                self.units[up] = [a + b for a, b in zip(self.units[up], self.units[n], strict=True)]
        self.remaining = [len(d) for d in self.demand]
        for n in range(count - 1, 0, -1):
            self.remaining[self.parent[n]] += self.remaining[n]
        self.shares = [self._vector(n) for n in range(count)]
        self.taken = [0] * count

    def _lay_out(self, root: TreeNode) -> None:
        """Preorder, without recursion; a single child is keyed by its parent's key (a chain is one node)."""
        todo: list[tuple[TreeNode, int, str, bool]] = [(root, -1, "", False)]
        while todo:
            node, up, path, chained = todo.pop()
            index = len(self.nodes)
            self.nodes.append(node)
            self.parent.append(up)
            self.key.append(self.key[up] if chained else path)
            self.children.append([])
            if up >= 0:
                self.children[up].append(index)
            single = len(node.children) == 1 and up >= 0
            todo.extend(
                (child, index, f"{path}{TREE_SEPARATOR}{child.name}" if path else child.name, single)
                for child in reversed(node.children)
            )

    def _leaf_units(self, n: int) -> list[int]:
        return [(u << SHARE_BITS) // c for u, c in zip(self.consumed[n], self.caps, strict=True)]

    def _vector(self, n: int) -> tuple[int, ...]:
        p, q = self.weights[n].numerator, self.weights[n].denominator
        if self.children[n]:
            return tuple(sorted((x * q // p for x in self.units[n]), reverse=True))
        pairs = zip(self.consumed[n], self.caps, strict=True)
        return tuple(sorted(((u * q << SHARE_BITS) // (c * p) for u, c in pairs), reverse=True))

    def _choose(self, n: int) -> int:
        """The child of least (share, vector) with a job left below it; the tie rule between equals."""
        ranked = sorted(
            ((self.shares[c][:1], self.shares[c]), *self.ties.rank(self.key[c]), c)
            for c in self.children[n]
            if self.remaining[c]
        )
        chosen = ranked[0]
        if len(ranked) > 1 and ranked[1][0] == chosen[0]:
            self.ties.win(self.key[chosen[-1]])
        return chosen[-1]

    def run(self) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        while self.remaining[0]:
            n = 0
            path = [0]
            while self.children[n]:
                n = self._choose(n)
                path.append(n)
            job = self.demand[n][self.taken[n]]
            out.append((self.key[n], self.taken[n]))
            self.taken[n] += 1
            before = self.units[n]
            self.consumed[n] = [a + b for a, b in zip(self.consumed[n], job, strict=True)]
            added = [a - b for a, b in zip(self._leaf_units(n), before, strict=True)]
            for node in path:
                self.remaining[node] -= 1
                self.units[node] = [a + b for a, b in zip(self.units[node], added, strict=True)]
                self.shares[node] = self._vector(node)
        return out


# --------------------------------------------------------------------------
# Shares of every node, for the per-level Jain


def node_shares(layout: TreeLayout, leaf_usage: FloatArray, capacity: Sequence[int]) -> FloatArray:
    """(S, N) every node's weighted dominant share at every sample: of its subtree's running allocation.

    `leaf_usage` is (S, N, R) running allocation (zeros but at leaves). A
    node's consumption is the sum of its leaves'; its share is the dominant
    share of that over its own weight (§2's rule, one node at a time).
    """
    caps = np.array(capacity, dtype=np.float64)
    counted = caps > 0
    inverse = np.where(counted, 1.0 / np.where(counted, caps, 1.0), 0.0)
    consumption = np.array(leaf_usage, dtype=np.float64)
    for n in range(layout.size - 1, 0, -1):
        consumption[:, layout.parent[n]] += consumption[:, n]
    weight = np.array([float(w) for w in layout.weight], dtype=np.float64)
    shares: FloatArray = (consumption * inverse).max(axis=2) / weight
    return shares
