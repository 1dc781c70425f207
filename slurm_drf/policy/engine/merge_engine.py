"""H-DRF as the plan applies it (docs/rule.md §7, "In the plan"): the merge engine, level by level in numpy.

Pure, under `policy.engine.tree_order` and the simulator. The online rule counts
the pool as full from the start (occupied = capacity): no resource is
saturated, and a node is blocked only when nothing below it waits (the
paper's saturation is a one-shot fill; a queue is ordered while the
cluster is full in some resource most of the time, and blocking every job
that wants it would drop the contended resource from every division's
share). Then a node's order depends on its subtree alone, and it is its
children's orders merged: the walk at a node serves the child of least (share, vector); a
child whose key falls after its turn is served again at once, so the node
takes its children's jobs in the order of each child's running maximum of
its key, one stable sort. Where two children's running maxima are the very
same key, the tie rule decides between the turns (runs of one child's jobs
that begin at the maximum), in Python. M, the least share of the waiting
children, is the share of the child served next, so the node's state after
each of its jobs is M times a cumulative sum of its children's directions
plus the cumulative sum of the rest: whole numbers, exactly the rule's
fixed point (`rule.inner_share`), in int64 where the pool's numbers stay
below 2**52 (checked before; otherwise the same code on Python integers).

The internal nodes of one height (no one below another) are merged in
one pass. Cost: per height a sort of all the jobs; O(J·d·(R + log J)) for
J jobs and depth d, in numpy, plus a Python step per turn that a tie
decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

import numpy as np
import numpy.typing as npt

from slurm_drf.model.types import IntArray
from slurm_drf.policy.engine.fixed_point import (
    SAFE,
    Amounts,
    descending,
    fits_int64,
    mul_shift,
    share_vectors,
    shift_div,
)
from slurm_drf.policy.engine.hierarchy import CompiledTree, HierarchyOrdering, TreeNode, compile_tree, order_flat
from slurm_drf.policy.rule import DIRECTION_BITS, SHARE_BITS, SHARE_ONE
from slurm_drf.policy.state import TieBook

ONE: Final = Fraction(1)


def order_online(root: TreeNode, capacity: Sequence[int], ties: TieBook) -> HierarchyOrdering:
    """Order every pending job of the tree by the online H-DRF rule; `ties` counts the tie wins.

    The same order, shares and tie wins as the nested heaps (tests/reference) `order_hierarchy(...,
    occupied=capacity)`, faster. A flat tree is `order_pending`'s order.
    """
    return order_compiled(compile_tree(root, capacity, occupied=capacity), ties)


def order_compiled(tree: CompiledTree, ties: TieBook) -> HierarchyOrdering:
    """`order_online` on a tree already laid out, its occupied amount its capacity
    (`policy.engine.tree_order`'s join)."""
    if tree.flat:
        return order_flat(tree, ties)
    return _Merge(tree, ties).run()


@dataclass(slots=True)
class _Sequence:
    """A node's order, `jobs` (K job ids), and its states 0..K: `units` and `vector` (largest first), (K+1, W) each."""

    jobs: IntArray
    units: Amounts
    vector: Amounts


@dataclass(frozen=True, slots=True)
class _Joined:
    """The sequences of a batch's children, child after child: their jobs, their states but each
    child's last (the keys its turns are taken by), all their states (`units`) and each state's
    share; `lengths` holds each child's job count."""

    jobs: IntArray
    keys: Amounts
    units: Amounts
    shares: Amounts
    lengths: IntArray


@dataclass(frozen=True, slots=True)
class _Leaves:
    """Every leaf's sequence in one block, leaf after leaf (preorder): job ids, states (`units`,
    `vector`), each leaf's first state (`bounds`, one more at the end) and its place (`place`)."""

    ids: IntArray
    units: Amounts
    vector: Amounts
    bounds: list[int]
    place: dict[int, int]

    def sequence(self, node: int) -> _Sequence:
        """One leaf's sequence. (Each leaf has one state more than jobs: the k-th leaf's first job is
        its first state less k.)"""
        i = self.place[node]
        lo, hi = self.bounds[i], self.bounds[i + 1]
        return _Sequence(self.ids[lo - i : hi - i - 1], self.units[lo:hi], self.vector[lo:hi])

    def joined(self, children: list[int]) -> _Joined | None:
        """The children's sequences joined, straight from the block where they are leaves that follow
        each other in it (the usual batch of the lowest internal nodes); None otherwise."""
        place = self.place
        if not all(map(place.__contains__, children)):
            return None
        at = [place[c] for c in children]
        if at != list(range(at[0], at[0] + len(at))):
            return None
        lo, hi = self.bounds[at[0]], self.bounds[at[-1] + 1]
        states = np.array(self.bounds[at[0] : at[-1] + 2], dtype=np.int64)
        last = np.ones(hi - lo, dtype=np.bool_)
        last[states[1:] - 1 - lo] = False
        lengths = np.diff(states) - 1
        vector = self.vector[lo:hi]
        jobs = self.ids[lo - at[0] : hi - at[-1] - 1]  # as in `sequence`, from the first leaf's first job
        return _Joined(jobs, vector[last], self.units[lo:hi], vector[:, 0], lengths)


@dataclass(frozen=True, slots=True)
class _Turns:
    """The merged turns of one height's nodes: each turn's child (an index of the batch's children),
    its index among that child's turns, and the job it places."""

    child: IntArray
    index: IntArray
    jobs: IntArray


def _lexicographic(keys: Amounts) -> tuple[IntArray, npt.NDArray[np.bool_]]:
    """The stable lexicographic order of int64 rows of two or three columns below 2**53, and where a new key begins.

    numpy sorts complex numbers by their real part, then their imaginary
    part, and a float64 holds such a whole number exactly: one stable sort
    of the first two columns as complex numbers (runs in the data make it
    fast); rows equal in both are then ordered by the third.
    """
    pair = keys[:, 0].astype(np.float64) + 1j * keys[:, 1].astype(np.float64)
    order: IntArray = np.argsort(pair, kind="stable")
    first = pair[order]
    equal = np.r_[False, first[1:] == first[:-1]]
    if keys.shape[1] == 2:
        new = ~equal
        new[:1] = False
        return order, new
    third = keys[order, 2]
    differ = np.flatnonzero(equal[1:] & (third[1:] != third[:-1])) + 1
    if len(differ):
        run = np.cumsum(~equal)  # each sorted row's run of equal first two columns
        marked = np.zeros(int(run[-1]) + 1, dtype=np.bool_)
        marked[run[differ]] = True
        inside = marked[run]
        order[inside] = order[inside][np.lexsort((third[inside], run[inside]))]
        third = keys[order, 2]
    new = ~equal | np.r_[False, third[1:] != third[:-1]]
    new[:1] = False
    return order, new


def _interleave(usage: Amounts, jobs: list[Amounts] | Amounts, width: int, dtype: type, counts: IntArray) -> Amounts:
    """Each leaf's usage row (a row of `usage`) followed by its jobs' rows (`counts[k]` rows of leaf k),
    leaf after leaf; `jobs` is each leaf's array, or all of them joined."""
    lengths = counts + 1
    starts = np.cumsum(lengths) - lengths
    joined: Amounts = np.zeros((int(lengths.sum()), width), dtype=dtype)
    joined[starts] = usage
    if len(jobs):
        demand = np.ones(len(joined), dtype=np.bool_)
        demand[starts] = False
        joined[demand] = jobs if isinstance(jobs, np.ndarray) else np.concatenate(jobs)
    return joined


def _weight_sum(weights: list[Fraction]) -> Fraction:
    """The exact sum of sibling weights; whole ones (the usual case) summed as integers."""
    if all(w.denominator == 1 for w in weights):
        return Fraction(sum(w.numerator for w in weights))
    return sum(weights, Fraction(0))


def _leaf_block(
    tree: CompiledTree, leaves: list[int], raw: Amounts, usable: list[int], merges: type, jobs: int
) -> tuple[_Leaves, npt.NDArray[np.float64]]:
    """Every leaf's sequence in one block (`_Leaves`) from `raw` (per leaf its usage row, then its
    jobs' demands), all at once, in the merges' integers (`merges`); and each leaf's share at its
    state 0."""
    dtype = raw.dtype.type
    steps = raw[:, usable] if usable else np.zeros((len(raw), 1), dtype=dtype)
    lengths = np.array([len(tree.jobs[n]) + 1 for n in leaves], dtype=np.int64)
    segment = np.repeat(np.arange(len(leaves), dtype=np.int64), lengths)
    starts = np.cumsum(lengths) - lengths
    sums = np.cumsum(steps, axis=0)
    amounts = sums - np.repeat(sums[starts] - steps[starts], lengths, axis=0)
    caps: Amounts = np.array([tree.capacity[r] for r in usable] or [1], dtype=dtype)
    units = shift_div(amounts, SHARE_BITS, np.broadcast_to(caps, amounts.shape))
    if all(tree.weight[n] == 1 for n in leaves):
        vector = descending(units)  # weight 1: the shares are the units
    else:  # the engines' one weighted share; int64 where `_leaves_fit` said so (its bound is the larger)
        vector = share_vectors(amounts, caps.tolist(), [tree.weight[n] for n in leaves], segment)
    if not usable:
        units, vector = units * 0, vector * 0
    if dtype is not merges:  # the same whole numbers, as the merges' Python integers
        units, vector = units.astype(object), vector.astype(object)
    start = vector[starts, 0].astype(np.float64) / SHARE_ONE
    bounds = np.r_[starts, len(segment)].tolist()
    ids = np.arange(jobs, dtype=np.int64)  # leaf after leaf, each leaf's jobs in its order
    return _Leaves(ids, units, vector, bounds, {n: i for i, n in enumerate(leaves)}), start


class _Merge:
    """The merge engine over one compiled tree (module docstring)."""

    def __init__(self, tree: CompiledTree, ties: TieBook) -> None:
        self.tree = tree
        self.ties = ties
        self.usable = list(tree.usable)
        count = len(tree.parent)
        self.leaves = [n for n, kids in enumerate(tree.children) if not kids and n]
        width = len(tree.capacity)
        counts = np.array([len(tree.jobs[n]) for n in self.leaves], dtype=np.int64)
        # Job ids run leaf after leaf, each leaf's jobs in its order.
        self.jobs = jobs = int(counts.sum())
        # The largest numerator and denominator of the weights (a few objects, shared by many nodes).
        weights = {id(w): w for w in tree.weight}.values()
        self._weight_parts = (max(w.numerator for w in weights), max(w.denominator for w in weights))
        try:
            # Per leaf its usage row, then its jobs' demands (summed into its states by `_leaves`).
            usage = np.array([tree.usage[n] for n in self.leaves], dtype=np.int64).reshape(-1, width)
            pieces = (
                [np.asarray(tree.jobs[n], dtype=np.int64).reshape(len(tree.jobs[n]), width) for n in self.leaves]
                if tree.demand is None
                else tree.demand
            )
            self.raw: Amounts = _interleave(usage, pieces, width, np.int64, counts)
            leaves_fit, fits = self._leaves_fit(), self._fits()
        except OverflowError:  # an amount beyond int64
            usage = np.array([tree.usage[n] for n in self.leaves], dtype=object).reshape(-1, width)
            pieces = [np.array(tree.jobs[n], dtype=object).reshape(len(tree.jobs[n]), width) for n in self.leaves]
            self.raw, leaves_fit, fits = _interleave(usage, pieces, width, object, counts), False, False
        # The leaves' states in int64 where their amounts fit, even when the merges' do not (many siblings).
        self.leaf_raw: Amounts | None = self.raw if leaves_fit and not fits else None
        if not fits:
            self.raw = self.raw.astype(object)
        self.dtype: type = self.raw.dtype.type
        self.path_share = np.zeros((jobs, max(max(tree.depth, default=0), 1)), dtype=np.float64)
        self.start = np.zeros(count, dtype=np.float64)  # each node's share at state 0
        self.tied = np.zeros(jobs, dtype=np.bool_)

    def _fits(self) -> bool:
        """Whether every amount of the rule stays below 2**52 (module docstring), from bounds in Python integers."""
        tree = self.tree
        if not self.usable or not len(self.raw):
            return True
        q = self._weight_parts[1]
        siblings = max((_weight_sum([tree.weight[c] for c in kids]) for kids in tree.children if kids), default=ONE)
        directions = (2 << DIRECTION_BITS) * (int(siblings * q) + 1)
        return self._leaves_fit() and directions < SAFE

    def _leaves_fit(self) -> bool:
        """Whether the leaves' amounts, consumption and shares (`_leaves`) stay below 2**52, as `_fits`."""
        tree = self.tree
        caps = [tree.capacity[r] for r in self.usable]
        if not caps or not len(self.raw):
            return True
        sums = self.raw[:, self.usable].sum(axis=0, dtype=np.float64)
        most = [int(v) * 2 + 1 for v in sums.tolist()]  # a float sum, with room for its rounding
        return fits_int64(most, caps, *self._weight_parts)

    # ---- the internal nodes of one height, all at once

    def _batch(self, nodes: list[int], sequences: dict[int, _Sequence]) -> IntArray:
        """Merge the children of `nodes` (no node below another) and put the nodes' sequences in `sequences`.

        Returns the merged job ids, node after node (the root's order when
        `nodes` is the root alone, whose states nobody reads).
        """
        tree = self.tree
        pairs = [(g, c) for g, n in enumerate(nodes) for c in tree.children[n]]
        joined = self._joined([c for _, c in pairs], sequences)
        node_of = np.array([g for g, _ in pairs], dtype=np.int64)  # per child: its parent, as an index of `nodes`
        local_of = np.array([i for n in nodes for i in range(len(tree.children[n]))], dtype=np.int64)
        lengths = joined.lengths
        size = int(lengths.sum())
        segment = np.repeat(np.arange(len(pairs), dtype=np.int64), lengths)  # each job's child
        index = np.arange(size, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        jobs = joined.jobs
        order = np.zeros(0, dtype=np.int64)
        if size:
            order = self._merged_order(nodes, pairs, joined.keys, (node_of, local_of, segment), jobs)
        merged = jobs[order]
        if nodes == [0]:
            return merged
        turns = _Turns(segment[order], index[order], merged)
        # Per child state its units and its share; then nothing else of the children is kept: the
        # states are the batch's peak of memory.
        states = (joined.units, joined.shares)
        del jobs, segment, index, order, joined
        made, self.start[nodes] = _states(self.tree, nodes, states, node_of, lengths, turns)
        sequences.update(made)
        return merged

    def _joined(self, children: list[int], sequences: dict[int, _Sequence]) -> _Joined:
        """The children's sequences joined (`_Joined`): leaves read from the block, the others made by
        the batches below (and let go of)."""
        leaves = self.leaf_block
        straight = leaves.joined(children)
        if straight is not None:
            return straight
        parts = [sequences.pop(c) if c in sequences else leaves.sequence(c) for c in children]
        return _Joined(
            np.concatenate([s.jobs for s in parts]),
            np.concatenate([s.vector[:-1] for s in parts]),
            np.concatenate([s.units for s in parts]),
            np.concatenate([s.vector[:, 0] for s in parts]),
            np.array([len(s.jobs) for s in parts], dtype=np.int64),
        )

    def _merged_order(
        self,
        nodes: list[int],
        pairs: list[tuple[int, int]],
        keys: Amounts,
        places: tuple[IntArray, IntArray, IntArray],
        jobs: IntArray,
    ) -> IntArray:
        """The order of the children's jobs, node after node (`_batch`), by their `keys` (each child's
        states but its last); each job's share on its path noted. What it works with is gone once it
        returns, before the states are made."""
        tree = self.tree
        node_of, local_of, segment = places  # per child its node and its index there; per job its child
        rank = _rank(keys)
        top = int(rank.max()) + 1
        running = np.maximum.accumulate(rank + segment * top) - segment * top
        combined = node_of[segment] * top + running  # by node, then by the child's running maximum
        order: IntArray = np.argsort(combined, kind="stable")
        ordered = combined[order]
        same = ordered[1:] == ordered[:-1]
        mixed = same & (segment[order][1:] != segment[order][:-1])
        if mixed.any():
            starts = np.r_[0, np.flatnonzero(~same) + 1]
            stops = np.r_[starts[1:], len(order)]
            group = np.cumsum(np.r_[False, ~same])  # each position's run of equal maxima
            hit = group[np.flatnonzero(mixed) + 1]
            local = local_of[segment]
            for g in hit[np.r_[True, hit[1:] != hit[:-1]]].tolist():
                start, stop = int(starts[g]), int(stops[g])
                kids = tree.children[nodes[int(node_of[segment[order[start]]])]]
                order[start:stop] = _turns(
                    self.ties, (tree.key, kids), self.tied, order[start:stop], (local, rank, running), jobs
                )
        depth = np.array([tree.depth[c] - 1 for _, c in pairs], dtype=np.int64)
        self.path_share[jobs[order], depth[segment[order]]] = keys[order, 0].astype(np.float64) / SHARE_ONE
        return order

    # ---- the tree, from the leaves up

    def run(self) -> HierarchyOrdering:
        tree = self.tree
        raw = self.raw if self.leaf_raw is None else self.leaf_raw
        self.leaf_raw = None  # read once
        self.leaf_block, self.start[self.leaves] = _leaf_block(
            tree, self.leaves, raw, self.usable, self.dtype, self.jobs
        )
        sequences: dict[int, _Sequence] = {}
        count = len(tree.parent)
        height = [0] * count
        for n in range(count - 1, -1, -1):  # preorder: every child after its parent
            if tree.children[n]:
                height[n] = 1 + max(height[c] for c in tree.children[n])
        batches: dict[int, list[int]] = {}
        for n in range(count):
            if tree.children[n]:
                batches.setdefault(height[n], []).append(n)
        order = np.zeros(0, dtype=np.int64)
        for h in sorted(batches):  # the root, the highest, comes alone and last
            order = self._batch(batches[h], sequences)
        # Each job id's leaf and its index in the leaf's jobs (ids run leaf after leaf).
        counts = np.array([len(tree.jobs[n]) for n in self.leaves], dtype=np.int64)
        owner = np.repeat(np.array(self.leaves, dtype=np.int64), counts)
        position = np.arange(self.jobs, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        return HierarchyOrdering(
            tree, owner[order], position[order], self.path_share[order], self.tied[order], self.start
        )


def _rank(keys: Amounts) -> IntArray:
    """Each key's place among the distinct keys (lexicographic, largest share first in each)."""
    count = len(keys)
    if keys.dtype == object and count and int(keys.max()) < SAFE:
        keys = keys.astype(np.int64)  # shares (>= 0) that int64 holds: ranked the same, faster
    if keys.dtype != object and keys.shape[1] in (2, 3):
        by_key, new = _lexicographic(keys)
    else:
        if keys.dtype == object:
            by_key = np.array(sorted(range(count), key=lambda i: tuple(keys[i])), dtype=np.int64)
        else:
            by_key = np.lexsort(keys.T[::-1])
        ordered = keys[by_key]
        new = np.r_[False, (ordered[1:] != ordered[:-1]).any(axis=1)]
    rank = np.empty(count, dtype=np.int64)
    rank[by_key] = np.cumsum(new)
    return rank


def _turns(
    ties: TieBook,
    names: tuple[Sequence[str], Sequence[int]],
    tied: npt.NDArray[np.bool_],
    rows: IntArray,
    places: tuple[IntArray, IntArray, IntArray],
    jobs: IntArray,
) -> IntArray:
    """One run of equal running maxima of several children, turn by turn with the tie rule.

    The tie book `ties` knows each child by its name: `names` is the tree's
    keys and the node's children. `places` holds, per row, its child's
    index among those children, its key's rank and its running maximum. A
    turn taken while another child waits is a tie won, marked in `tied`.

    Each child's rows are runs that begin at the maximum (its key equals
    it) and go on below it; every waiting child's next run begins at the
    maximum, so the turns tie, and the tie rule picks each one.
    """
    key, kids = names
    local, rank, running = places
    children = local[rows].tolist()
    if len(set(children)) == len(children):  # the usual run: one job of each child, turn after turn
        placed, _ = ties.take_one_each([key[kids[c]] for c in children])
        tied[jobs[rows[placed[:-1]]]] = True  # each taken while another waits: a tie won
        taken: IntArray = rows[placed]
        return taken
    queues: dict[int, list[list[int]]] = {}
    begins = (rank[rows] == running[rows]).tolist()
    for r, c, begin in zip(rows.tolist(), children, begins, strict=True):
        turns = queues.setdefault(c, [])
        if not turns or begin:
            turns.append([r])
        else:
            turns[-1].append(r)
    taken_turns, _, won = ties.take_turns(queues, {c: key[kids[c]] for c in queues})
    tied[jobs[[turn[0] for turn in taken_turns[:won]]]] = True
    return np.array([r for turn in taken_turns for r in turn], dtype=np.int64)


def _states(
    tree: CompiledTree,
    nodes: list[int],
    states: tuple[Amounts, Amounts],
    node_of: IntArray,
    lengths: IntArray,
    turns_made: _Turns,
) -> tuple[dict[int, _Sequence], npt.NDArray[np.float64]]:
    """Each node's states after each of its turns (turns node after node, in each node's order),
    from its children's `states` (their units and shares, child after child); and each node's
    share at its state 0."""
    turn_child, turn_index, merged = turns_made.child, turns_made.index, turns_made.jobs
    units, share = states
    del states  # each array is let go as soon as it has served
    width, dtype = units.shape[1], units.dtype
    state_start = np.cumsum(lengths + 1) - (lengths + 1)  # per child: its first state
    offset = np.arange(len(units), dtype=np.int64) - np.repeat(state_start, lengths + 1)
    waiting = (offset < np.repeat(lengths, lengths + 1)) & (share > 0)
    summed = [not tree.rescale[n] for n in nodes]
    if any(summed):  # an account over its users: every child of it counts as it is
        waiting &= ~np.repeat(np.array(summed)[node_of], lengths + 1)
    # Per child state: its direction where it waits with a share > 0, else its consumption as it is
    # (`rest`). Where it does not wait, a divisor of 2**52 keeps the unused quotient small.
    direction = shift_div(units, DIRECTION_BITS, np.where(waiting, share, SAFE)[:, None])
    idle = np.flatnonzero(~waiting)  # few: each child's last state, and states of share 0
    direction[idle] = 0
    rest = np.zeros_like(units)
    rest[idle] = units[idle]
    del units
    # Per node its states 0..K: state 0 sums its children's first states, each turn adds what it changes.
    turns = np.bincount(node_of, weights=lengths, minlength=len(nodes)).astype(np.int64)
    node_start = np.cumsum(turns + 1) - (turns + 1)
    first_child = np.cumsum([0, *(len(tree.children[n]) for n in nodes[:-1])])
    row = state_start[turn_child] + turn_index  # each turn's child state before it
    position = np.arange(len(row), dtype=np.int64) + node_of[turn_child] + 1  # its node's state after it
    count = int(node_start[-1] + turns[-1] + 1)
    sums: list[Amounts] = []
    for part, changing in ((direction, slice(None)), (rest, np.flatnonzero(~waiting[row] | ~waiting[row + 1]))):
        steps = np.zeros((count, width), dtype=dtype)
        steps[node_start] = np.add.reduceat(part[state_start], first_child, axis=0)
        at = row[changing]
        steps[position[changing]] = part[at + 1] - part[at]
        total = np.cumsum(steps, axis=0)
        total -= np.repeat(total[node_start] - steps[node_start], turns + 1, axis=0)
        sums.append(total)
    del direction, rest, part, steps
    least = np.zeros((count, 1), dtype=dtype)  # M before each turn; 0 once nothing waits
    least[position - 1, 0] = share[row]
    del share
    total = mul_shift(least, sums[0], DIRECTION_BITS)
    total += sums[1]
    del sums, least
    q = [tree.weight[n].denominator for n in nodes]
    p = [tree.weight[n].numerator for n in nodes]
    scaled = total if max(q) == 1 else total * np.repeat(np.array(q, dtype=dtype), turns + 1)[:, None]
    if max(p) != 1:
        scaled = scaled // np.repeat(np.array(p, dtype=dtype), turns + 1)[:, None]
    vector = descending(scaled)
    start = vector[node_start, 0].astype(np.float64) / SHARE_ONE
    bounds = np.r_[node_start, count].tolist()
    done = np.r_[0, np.cumsum(turns)].tolist()
    sequences = {
        n: _Sequence(merged[done[g] : done[g + 1]], total[bounds[g] : bounds[g + 1]], vector[bounds[g] : bounds[g + 1]])
        for g, n in enumerate(nodes)
    }
    return sequences, start
