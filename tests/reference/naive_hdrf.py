"""The naive hierarchical DRFs of the H-DRF paper (Bhattacharya et al., SoCC 2013), kept for its counterexamples.

Not the rule: `policy.rule.hdrf_order(..., inner=...)` walks the tree with
one of these in place of H-DRF's `inner_share`. Neither blocks a child nor
leaves a saturated resource out.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from slurm_drf.policy.rule import NodeShare, inner_share, node_share


def rescaled_share(
    children: Sequence[tuple[NodeShare, bool]], counted: Sequence[int], weight: Fraction, rescale: bool = True
) -> NodeShare:
    """Dynamic rescaling alone: every child scaled to the least share, none blocked, every resource counted,
    at every node (`rescale` is not read: an account over its users is rescaled too)."""
    every = range(len(children[0][0].units)) if children else range(0)
    return inner_share([(share, False) for share, _ in children], every, weight)


def rolled_up_share(
    children: Sequence[tuple[NodeShare, bool]], counted: Sequence[int], weight: Fraction, rescale: bool = True
) -> NodeShare:
    """The plain roll-up: the children's consumption summed as it is, every resource counted, at every node."""
    width = len(children[0][0].units) if children else 0
    total = [sum(column) for column in zip(*(share.units for share, _ in children), strict=True)] or [0] * width
    return node_share(total, range(width), weight)
