"""The merge engine (`policy.engine.merge_engine.order_online`), the plan's H-DRF, against the rule and the
nested heaps.

The online rule is the paper's with the pool full from the start
(occupied = capacity): the rule (`policy.rule.hdrf_order`) and the nested heaps run it with
`occupied=capacity`. The merge engine must give the very same order, tie
wins, tied flags and path shares, in int64 and on Python integers (the
path for amounts beyond 2**52), and its exact int64 arithmetic must equal
Python's.
"""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_drf.policy.engine import merge_engine
from slurm_drf.policy.engine.fixed_point import mul_shift, shift_div
from slurm_drf.policy.engine.hierarchy import TreeNode, compile_tree
from slurm_drf.policy.engine.merge_engine import _lexicographic, order_online
from slurm_drf.policy.engine.tree_order import start_shares
from slurm_drf.policy.rule import hdrf_order
from slurm_drf.policy.state import TieBook
from tests.reference.nested_heaps import order_hierarchy
from tests.unit.policy.test_hierarchy import SETTINGS, Vector, all_keys, seeded_node, trees


def _same(root: TreeNode, capacity: Vector, epoch: int, wins: dict[str, float]) -> tuple[int, int]:
    """Asserts the merge engine equals the nested heaps and the rule; returns (jobs, tied jobs)."""
    nested_wins, merged_wins = dict(wins), dict(wins)
    nested_plan: dict[str, float] = {}
    merged_plan: dict[str, float] = {}
    nested = order_hierarchy(root, capacity, TieBook(epoch, nested_wins, nested_plan), occupied=capacity)
    merged = order_online(root, capacity, TieBook(epoch, merged_wins, merged_plan))
    assert merged.pairs() == nested.pairs() == hdrf_order(root, capacity, epoch, wins, occupied=capacity).jobs
    assert merged_wins == nested_wins and merged_plan == nested_plan
    assert merged.tied.tolist() == nested.tied.tolist()
    assert merged.path_share.tolist() == nested.path_share.tolist()
    # The shares the plan shows at the start of the order are the rule's, node for node.
    if not merged.tree.flat:  # (a flat tree is §2's engine's, which gives no start)
        assert merged.start is not None
        assert merged.start.tolist()[1:] == start_shares(merged.tree)[0][1:]
    return len(merged.leaf), int(merged.tied.sum())


@pytest.fixture(params=["int64", "python", "python-leaves"])
def numbers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test on each of the merge engine's number paths: int64; the merges on Python integers
    (the leaves in int64, as where many siblings outgrow int64 but their amounts do not); Python
    integers from the leaves up."""
    if request.param != "int64":
        monkeypatch.setattr(merge_engine._Merge, "_fits", lambda self: False)
    if request.param == "python-leaves":
        monkeypatch.setattr(merge_engine._Merge, "_leaves_fit", lambda self: False)
    return str(request.param)


@SETTINGS
@given(trees(), st.integers(0, 40), st.data())
def test_merge_engine_equals_nested_heaps_and_rule(
    case: tuple[TreeNode, Vector], epoch: int, data: st.DataObject
) -> None:
    root, capacity = case
    wins = {k: float(data.draw(st.sampled_from([0, 0, 1, 2]))) for k in all_keys(root, capacity)}
    _same(root, capacity, epoch, wins)


@pytest.mark.usefixtures("numbers")
def test_merge_engine_on_seeded_deep_trees_on_both_number_paths() -> None:
    """Deeper and wider trees than Hypothesis draws; the tie rule decides at deep levels."""
    rng = random.Random(7)
    jobs = tied = 0
    for _ in range(80):
        width = rng.randint(1, 3)
        capacity = tuple(rng.choice([0, 4, 6, 10, 20]) for _ in range(width))
        root = seeded_node(rng, "root", 0, width)
        placed, ties = _same(root, capacity, rng.randint(0, 9), {})
        jobs, tied = jobs + placed, tied + ties
    assert jobs > 500 and tied > 50


def test_amounts_beyond_int64_take_the_python_path() -> None:
    """A pool of 2**70 of a resource: no int64 overflow, the order is the nested heaps'."""
    big = 1 << 70
    leaf = TreeNode("u", usage=(big // 3,), jobs=((big // 5,), (1,)))
    other = TreeNode("v", usage=(big // 4,), jobs=((big // 7,),))
    root = TreeNode("root", children=(TreeNode("a", children=(leaf, other)), TreeNode("b", usage=(5,), jobs=((3,),))))
    engine = merge_engine._Merge(compile_tree(root, (big,), occupied=(big,)), TieBook(1))
    assert engine.dtype is np.object_
    _same(root, (big,), 1, {})


def test_a_queue_far_beyond_capacity_stays_exact() -> None:
    """2,400 GPUs asked of 24, a hundred times the pool: still int64, still the nested heaps' order."""
    rng = random.Random(3)
    users = [
        TreeNode(f"u{i}", Fraction(rng.choice([1, 3])), usage=(0, i), jobs=tuple((1, 8) for _ in range(60)))
        for i in range(5)
    ]
    root = TreeNode(
        "root", children=(TreeNode("a", children=tuple(users[:3])), TreeNode("b", children=tuple(users[3:])))
    )
    engine = merge_engine._Merge(compile_tree(root, (64, 24), occupied=(64, 24)), TieBook(1))
    assert engine.dtype is np.int64
    _same(root, (64, 24), 1, {})


TOP = (1 << 52) - 1  # the engine keeps every amount below 2**52


@st.composite
def quotients(draw: st.DrawFn) -> tuple[int, int, int]:
    """(a, shift, b) with floor(a · 2**shift / b) below 2**52, as the engine calls `shift_div`."""
    b = draw(st.integers(1, TOP))
    shift = draw(st.integers(0, 40))
    return draw(st.integers(0, min(TOP, (TOP * b) >> shift))), shift, b


@st.composite
def products(draw: st.DrawFn) -> tuple[int, int, int]:
    """(m, y, shift) with floor(m · y / 2**shift) below 2**52, as the engine calls `mul_shift`."""
    m = draw(st.integers(0, TOP))
    shift = draw(st.integers(0, 52))
    return m, draw(st.integers(0, min(TOP, (TOP << shift) // max(m, 1)))), shift


@settings(max_examples=500, deadline=None)
@given(st.lists(quotients(), min_size=1, max_size=20))
def test_shift_div_is_exact_in_int64(cases: list[tuple[int, int, int]]) -> None:
    for shift in {s for _, s, _ in cases}:
        rows = [(a, b) for a, s, b in cases if s == shift]
        a = np.array([x for x, _ in rows], dtype=np.int64)
        b = np.array([y for _, y in rows], dtype=np.int64)
        assert shift_div(a, shift, b).tolist() == [(x << shift) // y for x, y in rows]


@settings(max_examples=500, deadline=None)
@given(st.lists(products(), min_size=1, max_size=20))
def test_mul_shift_is_exact_in_int64(cases: list[tuple[int, int, int]]) -> None:
    for shift in {s for *_, s in cases}:
        rows = [(m, y) for m, y, s in cases if s == shift]
        m = np.array([x for x, _ in rows], dtype=np.int64)
        y = np.array([v for _, v in rows], dtype=np.int64)
        assert mul_shift(m, y, shift).tolist() == [(x * v) >> shift for x, v in rows]


@settings(max_examples=300, deadline=None)
@given(
    st.integers(2, 3).flatmap(
        lambda width: st.lists(
            st.tuples(*[st.one_of(st.integers(0, 3), st.integers(0, TOP)) for _ in range(width)]), min_size=1
        )
    )
)
def test_lexicographic_order_is_lexsorts(rows: list[tuple[int, ...]]) -> None:
    """The complex-number sort of the engine's keys is numpy's stable lexsort, and says where keys change."""
    keys = np.array(rows, dtype=np.int64)
    order, new = _lexicographic(keys)
    expected = np.lexsort(keys.T[::-1])
    assert order.tolist() == expected.tolist()
    ordered = keys[expected]
    assert new.tolist() == [False, *(ordered[1:] != ordered[:-1]).any(axis=1).tolist()]
