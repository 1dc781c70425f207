"""The textbook hierarchical progressive-filling walk on the rule's exact fixed point: the H-DRF oracle.

Every step recomputes every node from the leaves (docs/rule.md §7), walks
from the root to a leaf taking at each internal node the child of least
weighted share (the flat tie rule at every level), and gives that leaf its
next job. Slow on purpose: O(J·N·R) integer arithmetic. The `rescale` and
`rollup` variants are the naive H-DRFs of the paper, kept for the
counterexamples in tests/unit/test_hierarchy.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Literal

from slurm_drf.policy.hierarchy import (
    CompiledTree,
    NodeShare,
    TreeNode,
    compile_tree,
    inner_share,
    leaf_share,
    node_share,
)
from slurm_drf.policy.state import rotation_key

Variant = Literal["hdrf", "rescale", "rollup"]


def variant_share(
    children: Sequence[tuple[NodeShare, bool]],
    counted: Sequence[int],
    weight: Fraction,
    variant: Variant = "hdrf",
    rescale: bool = True,
) -> NodeShare:
    """An internal node's share under a variant: hdrf is the rule (`hierarchy.inner_share`; `rescale=False`:
    an account over its users, its children summed as they are).

    rescale: the rule with no child blocked (every child scaled to the least
    share); rollup: the plain sum of the children's consumption.
    """
    if variant == "hdrf":
        return inner_share(children, counted, weight, rescale)
    if variant == "rescale":
        return inner_share([(share, False) for share, _ in children], counted, weight, rescale)
    width = len(children[0][0].units) if children else 0
    total = [sum(column) for column in zip(*(share.units for share, _ in children), strict=True)] or [0] * width
    return node_share(total, counted, weight)


def reference_hierarchy_order(
    root: TreeNode,
    capacity: Sequence[int],
    epoch: int = 1,
    wins: Mapping[str, float] | None = None,
    variant: Variant = "hdrf",
    occupied: Sequence[int] | None = None,
) -> list[tuple[str, int]]:
    """The H-DRF order by the greedy walk: (leaf key, index in its jobs) in order.

    hdrf is the rule; `rescale` scales every child (none is blocked, no
    resource is saturated) and `rollup` sums children as they are.
    """
    tree = compile_tree(root, capacity, occupied)
    tie_wins = dict(wins or {})
    caps = [tree.capacity[r] for r in tree.usable]
    width = len(caps)
    consumed = [[u[r] for r in tree.usable] for u in tree.usage]
    demand = [[[int(d[r]) for r in tree.usable] for d in jobs] for jobs in tree.jobs]
    taken = [0] * len(consumed)
    total = [tree.occupied[r] for r in tree.usable]
    out: list[tuple[str, int]] = []

    while remaining(tree, taken, 0):
        saturated = {k for k in range(width) if total[k] >= caps[k]}
        if variant != "hdrf" or len(saturated) == width:
            saturated = set()
        state = node_states(
            tree, consumed, [demand[n][taken[n] :] for n in range(len(taken))], caps, saturated, variant
        )
        n = 0
        while tree.children[n]:
            ranked = sorted(
                (
                    state[c][0].share,
                    state[c][0].vector,
                    tie_wins.get(tree.key[c], 0.0),
                    rotation_key(epoch, tree.key[c]),
                    tree.key[c],
                    c,
                )
                for c in tree.children[n]
                if remaining(tree, taken, c)
            )
            chosen = ranked[0]
            if len(ranked) > 1 and ranked[1][:2] == chosen[:2]:
                tie_wins[chosen[4]] = tie_wins.get(chosen[4], 0.0) + 1.0
            n = chosen[5]
        index = taken[n]
        out.append((tree.key[n], index))
        consumed[n] = [c + d for c, d in zip(consumed[n], demand[n][index], strict=True)]
        total = [t + d for t, d in zip(total, demand[n][index], strict=True)]
        taken[n] = index + 1
    return out


def remaining(tree: CompiledTree, taken: Sequence[int], n: int) -> bool:
    """Whether the subtree of n still has a pending job."""
    return taken[n] < len(tree.jobs[n]) or any(remaining(tree, taken, c) for c in tree.children[n])


def node_states(
    tree: CompiledTree,
    consumed: Sequence[Sequence[int]],
    rest: Sequence[Sequence[Sequence[int]]],
    caps: Sequence[int],
    saturated: set[int],
    variant: Variant,
) -> dict[int, tuple[NodeShare, bool]]:
    """Every node's exact share and whether it is blocked, from the leaves up (children follow parents in preorder).

    `rest[n]` are leaf n's jobs not yet ordered, over the usable resources;
    a leaf is blocked when every one of them (vacuously: none left) wants a
    saturated resource.
    """
    counted = [k for k in range(len(caps)) if k not in saturated]
    state: dict[int, tuple[NodeShare, bool]] = {}
    for n in range(len(tree.parent) - 1, -1, -1):
        kids = tree.children[n]
        if kids:
            parts = [state[c] for c in kids]
            share = variant_share(parts, counted, tree.weight[n], variant, tree.rescale[n])
            state[n] = (share, all(blocked for _, blocked in parts))
        else:
            blocked = all(any(d[k] > 0 for k in saturated) for d in rest[n])
            state[n] = (leaf_share(consumed[n], caps, tree.weight[n]), blocked)
    return state
