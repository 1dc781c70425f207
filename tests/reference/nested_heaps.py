"""The nested heaps: H-DRF with the paper's saturation (docs/rule.md §7), a reference engine for the tests.

Not shipped: the plan runs the merge engine (`policy.engine.merge_engine`),
which counts the pool as full from the start. This engine keeps the
paper's rule (a resource saturates once its occupied amount reaches its
capacity), so the property tests check the paper's guarantees on it and
compare it, with occupied = capacity, with the merge engine; the
benchmarks time it beside the merge engine (`bench_hierarchy.py --paper`).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from slurm_drf.policy.engine.hierarchy import CompiledTree, HierarchyOrdering, TreeNode, compile_tree, order_flat
from slurm_drf.policy.rule import DIRECTION_BITS, SHARE_ONE, NodeShare, leaf_share
from slurm_drf.policy.state import TieBook


def order_hierarchy(
    root: TreeNode,
    capacity: Sequence[int],
    ties: TieBook,
    occupied: Sequence[int] | None = None,
) -> HierarchyOrdering:
    """Order every pending job of the tree by H-DRF (docs/rule.md §7).

    `ties` (keyed by node key) counts the tie wins, as `order_pending`'s. A flat tree is ordered
    by `order_pending` itself; a deeper one by nested heaps on the rule's
    fixed point: O(J·d·(R + log b)) for J jobs, depth d,
    fanout b and R resources, plus an O(N·R) rebuild each time a resource
    saturates (at most R + 1 times).
    """
    tree = compile_tree(root, capacity, occupied)
    if tree.flat:
        return order_flat(tree, ties)
    return NestedHeaps(tree, ties).run()


class NestedHeaps:
    """Nested heaps over a compiled tree, on the rule's exact fixed point; see `order_hierarchy`.

    Per internal node n: `direction[n]` sums the directions of its
    non-blocked children of share > 0, `rest[n]` the consumption of the
    others, so n's consumption is (M · direction >> DIRECTION_BITS) + rest
    with M the least share of the non-blocked children (the `active[n]`
    heap); `select[n]` holds the children with pending jobs by (share,
    vector). Heap entries carry the child's version and are dropped when
    stale. Everything is a whole number: equal keys are ties, no re-check.
    """

    def __init__(self, tree: CompiledTree, ties: TieBook) -> None:
        self.tree = tree
        self.ties = ties
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
        into_direction = active and bool(state.share) and self.tree.rescale[n]
        if into_direction:
            vector = [(u << DIRECTION_BITS) // state.share for u in state.units]
            self.direction[n] = [y + v for y, v in zip(self.direction[n], vector, strict=True)]
        else:
            vector = list(state.units)
            self.rest[n] = [b + v for b, v in zip(self.rest[n], vector, strict=True)]
        if active:
            self.active_count[n] += 1
            heapq.heappush(self.active[n], (state.share, self.version[child], child))
        self.part[child] = (into_direction, vector, active)
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
        chosen = min(tied, key=lambda c: self.ties.rank(keys[c]))
        self.ties.win(keys[chosen])
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
