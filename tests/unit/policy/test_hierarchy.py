"""Property tests of the H-DRF order (docs/rule.md §7, docs/properties.md).

The nested heaps (`tests.reference.nested_heaps.order_hierarchy`) are compared with the
rule's walk on its exact fixed point (`policy.rule.hdrf_order`) on random trees
heavy on exact ties (cloned siblings, equal weights, zero demands,
capacity-0 resources, remembered tie wins); a flat tree is today's flat
order; a chain of single children is its leaf; the SoCC 2013 / Volcano
examples give the paper's answers and the naive variants their
counterexamples; every backlogged leaf gets its hierarchical share; weight 0
is refused and capacity 0 ignored; names and sibling order never decide.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_drf.policy.engine.hierarchy import HierarchyError, TreeNode, compile_tree
from slurm_drf.policy.rule import SHARE_ONE, NodeShare, flat_order, hdrf_order, inner_share, leaf_share, rotation_key
from slurm_drf.policy.state import TieBook
from tests.reference.naive_hdrf import rescaled_share, rolled_up_share
from tests.reference.nested_heaps import order_hierarchy
from tests.unit.policy.allocation import Placement, dominant_share, place

Vector = tuple[int, ...]

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WEIGHTS = (Fraction(1), Fraction(1), Fraction(1), Fraction(2), Fraction(1, 2), Fraction(3, 10))
CPU, GPU = (1, 0), (0, 1)


# --------------------------------------------------------------------------
# Random trees


@st.composite
def trees(draw: st.DrawFn, max_depth: int = 4) -> tuple[TreeNode, Vector]:
    """A root, a capacity; subtrees cloned often (exact ties), capacity 0 sometimes."""
    width = draw(st.integers(1, 3))
    capacity = tuple(draw(st.sampled_from([0, 1, 2, 3, 4, 6, 10])) for _ in range(width))
    demand = st.tuples(*[st.sampled_from([0, 0, 1, 1, 2, 3]) for _ in range(width)])
    usage = st.tuples(*[st.sampled_from([0, 0, 0, 1, 2, 5]) for _ in range(width)])

    def node(name: str, depth: int) -> TreeNode:
        weight = draw(st.sampled_from(WEIGHTS))
        if depth >= max_depth or draw(st.integers(0, 2)) == 0:
            jobs = tuple(draw(st.lists(demand, max_size=6)))
            return TreeNode(name, weight, usage=draw(usage), jobs=jobs)
        count = draw(st.integers(1, 3))
        first = node("c0", depth + 1)
        kids = [first]
        for i in range(1, count):
            kids.append(dataclasses.replace(first, name=f"c{i}") if draw(st.booleans()) else node(f"c{i}", depth + 1))
        # Some nodes sum their children as they are (an account over its users, docs/rule.md §7).
        return TreeNode(name, weight, children=tuple(kids), rescale=draw(st.sampled_from([True, True, False])))

    count = draw(st.integers(1, 4))
    kids = [node(f"a{i}", 1) for i in range(count)]
    if count > 1 and draw(st.booleans()):
        kids[1] = dataclasses.replace(kids[0], name="a1")
    return TreeNode("root", children=tuple(kids)), capacity


def all_keys(root: TreeNode, capacity: Sequence[int]) -> tuple[str, ...]:
    return compile_tree(root, capacity).key[1:]


def engine_pairs(
    root: TreeNode, capacity: Sequence[int], epoch: int = 1, wins: dict[str, float] | None = None
) -> list[tuple[str, int]]:
    ordering = order_hierarchy(root, capacity, TieBook(epoch, dict(wins or {})))
    assert np.isfinite(ordering.path_share).all()
    return ordering.pairs()


# --------------------------------------------------------------------------
# 1. The engine equals the rule


@SETTINGS
@given(trees(), st.integers(0, 40), st.data())
def test_engine_equals_rule(case: tuple[TreeNode, Vector], epoch: int, data: st.DataObject) -> None:
    root, capacity = case
    keys = all_keys(root, capacity)
    wins = {k: float(data.draw(st.sampled_from([0, 0, 1, 2]))) for k in keys}
    expected = hdrf_order(root, capacity, epoch, wins).jobs
    engine_wins = dict(wins)
    plan_wins: dict[str, float] = {}
    ordering = order_hierarchy(root, capacity, TieBook(epoch, engine_wins, plan_wins))
    assert ordering.pairs() == expected
    tree = compile_tree(root, capacity)
    assert sorted(expected) == sorted((tree.key[n], i) for n in tree.leaves for i in range(len(tree.jobs[n])))
    assert np.isfinite(ordering.path_share).all()
    # wins counted this plan are the wins added to the committed ones
    assert all(engine_wins[k] == wins.get(k, 0.0) + v for k, v in plan_wins.items())


def test_engine_equals_rule_on_seeded_deep_trees() -> None:
    """Deeper and wider than Hypothesis draws, with saturation reached mid-order."""
    rng = random.Random(12)
    tied = saturated = 0
    for _ in range(60):
        width = rng.randint(1, 3)
        capacity = tuple(rng.choice([4, 6, 10, 20]) for _ in range(width))
        root = seeded_node(rng, "root", 0, width)
        ordering = order_hierarchy(root, capacity, TieBook(3))
        assert ordering.pairs() == hdrf_order(root, capacity, 3).jobs
        tree = ordering.tree
        tied += bool(ordering.tied[np.array(tree.depth)[ordering.leaf] > 1].any())
        wanted = np.array([d for n in tree.leaves for d in tree.jobs[n]], dtype=np.int64).reshape(-1, width).sum(axis=0)
        saturated += bool((np.array(tree.occupied) + wanted >= np.array(capacity)).any())
    assert tied > 10 and saturated > 30  # the tie rule decides for jobs of deep leaves; resources saturate


def seeded_node(rng: random.Random, name: str, depth: int, width: int) -> TreeNode:
    weight = rng.choice(WEIGHTS)
    if depth >= 4 or (depth and rng.random() < 0.3):
        jobs = tuple(tuple(rng.choice([0, 1, 1, 2]) for _ in range(width)) for _ in range(rng.randint(0, 8)))
        return TreeNode(name, weight, usage=tuple(rng.choice([0, 1]) for _ in range(width)), jobs=jobs)
    kids = tuple(seeded_node(rng, f"n{i}", depth + 1, width) for i in range(rng.randint(2, 4)))
    return TreeNode(name, weight, kids, rescale=rng.random() < 0.7)


# --------------------------------------------------------------------------
# 2. A flat tree is today's flat order; a chain of single children is its leaf


@SETTINGS
@given(trees(max_depth=1), st.integers(0, 40))
def test_flat_tree_is_the_flat_order(case: tuple[TreeNode, Vector], epoch: int) -> None:
    root, capacity = case
    pending = {c.name: list(c.jobs) for c in root.children}
    usage = {c.name: list(c.usage) for c in root.children}
    weights = {c.name: c.weight for c in root.children}
    flat = flat_order(pending, usage, capacity, weights, epoch=epoch).jobs
    assert hdrf_order(root, capacity, epoch).jobs == flat
    assert engine_pairs(root, capacity, epoch) == flat


@SETTINGS
@given(trees(max_depth=1), st.data())
def test_accounts_of_one_user_are_flat(case: tuple[TreeNode, Vector], data: st.DataObject) -> None:
    """Each account holding its jobs in a single user: the same order as the accounts as leaves."""
    root, capacity = case
    nested = TreeNode(
        "root",
        children=tuple(
            TreeNode(
                c.name,
                c.weight,
                children=(dataclasses.replace(c, name="user", weight=data.draw(st.sampled_from(WEIGHTS))),),
            )
            for c in root.children
        ),
    )
    assert compile_tree(nested, capacity).flat
    assert engine_pairs(nested, capacity) == engine_pairs(root, capacity)
    assert hdrf_order(nested, capacity).jobs == hdrf_order(root, capacity).jobs


@SETTINGS
@given(trees(max_depth=3), st.integers(1, 3), st.data())
def test_chain_of_single_children_is_its_leaf(case: tuple[TreeNode, Vector], length: int, data: st.DataObject) -> None:
    root, capacity = case
    target = data.draw(st.sampled_from(leaf_paths(root, "")))

    def chained(node: TreeNode, path: list[str]) -> TreeNode:
        if not path:
            inner: TreeNode = dataclasses.replace(node, name="bottom", weight=Fraction(7))
            for level in range(length - 1):
                inner = TreeNode(f"link{level}", Fraction(5), children=(inner,))
            return dataclasses.replace(node, usage=(), jobs=(), children=(inner,))
        return dataclasses.replace(
            node, children=tuple(chained(c, path[1:]) if c.name == path[0] else c for c in node.children)
        )

    deep = chained(root, target.split("/"))
    expected = hdrf_order(root, capacity).jobs
    assert hdrf_order(deep, capacity).jobs == expected
    assert engine_pairs(deep, capacity) == expected


def leaf_paths(node: TreeNode, path: str) -> list[str]:
    """The paths of the tree's leaves (names joined by "/", the root's left out)."""
    if not node.children:
        return [path]
    return [p for c in node.children for p in leaf_paths(c, f"{path}/{c.name}" if path else c.name)]


def test_a_whole_tree_that_is_a_chain_is_its_leaf_in_slurms_order() -> None:
    leaf = TreeNode("alice", jobs=((1, 0), (0, 2), (3, 3)), usage=(1, 1))
    root = TreeNode("root", children=(TreeNode("physics", children=(TreeNode("theory", children=(leaf,)),)),))
    assert engine_pairs(root, (10, 10)) == [("physics", 0), ("physics", 1), ("physics", 2)]
    assert hdrf_order(root, (10, 10)).jobs == [("physics", 0), ("physics", 1), ("physics", 2)]


# --------------------------------------------------------------------------
# 3. The SoCC 2013 / Volcano examples, and the naive counterexamples


def test_rescaling_the_cpu_child_to_the_minimum() -> None:
    """Volcano's hdrf notes: n2,1 at (10 CPUs, 0) of 10 is scaled by 0.5/1 to (5, 0), n2 has share 0.5."""
    caps = [10, 10]
    cpu_child = leaf_share([10, 0], caps, Fraction(1))
    gpu_child = leaf_share([0, 5], caps, Fraction(1))
    parent = inner_share([(cpu_child, False), (gpu_child, False)], [0, 1], Fraction(1))
    assert parent.units == (SHARE_ONE // 2, SHARE_ONE // 2)  # (5, 5) of (10, 10)
    assert Fraction(parent.share, SHARE_ONE) == Fraction(1, 2)
    rolled = rolled_up_share([(cpu_child, False), (gpu_child, False)], [0, 1], Fraction(1))
    assert Fraction(rolled.share, SHARE_ONE) == 1


def _started(order: list[tuple[str, int]], demand: Mapping[str, Vector], free: Sequence[int]) -> Counter[str]:
    got = place([Placement(k, demand[k]) for k, _ in order], free)
    return Counter({k: v for k, v in got.tasks.items() if v})


def test_starvation_under_naive_rollup_and_not_under_hdrf() -> None:
    """n1 (GPU) beside n2 = {n2,1 (CPU), n2,2 (GPU)}, 10 CPUs and 10 GPUs. n2,1 holds every CPU, n1 5
    GPUs, n2,2 4 (one of its jobs just ended). Roll-up puts n2 at share 1 (its CPUs), so the free GPU
    and every later one go to n1; H-DRF rescales n2,1 to n2,2's 0.4 and hands the GPU to n2,2."""
    tree = TreeNode(
        "root",
        children=(
            TreeNode("n1", usage=(0, 5), jobs=(GPU,) * 8),
            TreeNode(
                "n2",
                children=(
                    TreeNode("cpu", usage=(10, 0), jobs=(CPU,) * 3),
                    TreeNode("gpu", usage=(0, 4), jobs=(GPU,) * 8),
                ),
            ),
        ),
    )
    rolled = hdrf_order(tree, (10, 10), inner=rolled_up_share).jobs
    gpu_jobs = [k for k, _ in rolled if k != "n2/cpu"]
    assert gpu_jobs[:5] == ["n1"] * 5  # n1 up to 10 GPUs of share before n2,2 is served
    assert hdrf_order(tree, (10, 10)).jobs[0] == ("n2/gpu", 0)
    assert engine_pairs(tree, (10, 10))[0] == ("n2/gpu", 0)


def test_blocked_nodes_give_n32_and_n4_half_the_gpus_each() -> None:
    """n1, n2 and n3,1 want CPUs, n3,2 and n4 GPUs; n3,1 has 10 jobs. H-DRF: n3,2 and n4 get half the
    GPUs each; rescaling without blocking keeps n3 at n3,1's 1/3 and gives n3,2 about 2/3."""
    demand = {"n1": CPU, "n2": CPU, "n3/a": CPU, "n3/b": GPU, "n4": GPU}
    tree = TreeNode(
        "root",
        children=(
            TreeNode("n1", jobs=(CPU,) * 20),
            TreeNode("n2", jobs=(CPU,) * 20),
            TreeNode("n3", children=(TreeNode("a", jobs=(CPU,) * 10), TreeNode("b", jobs=(GPU,) * 40))),
            TreeNode("n4", jobs=(GPU,) * 40),
        ),
    )
    order = hdrf_order(tree, (30, 30)).jobs
    assert engine_pairs(tree, (30, 30)) == order
    got = _started(order, demand, (30, 30))
    assert got["n3/b"] == got["n4"] == 15
    assert got["n1"] == got["n2"] == got["n3/a"] == 10
    naive = _started(hdrf_order(tree, (30, 30), inner=rescaled_share).jobs, demand, (30, 30))
    assert naive["n3/b"] >= 19 and naive["n4"] <= 11


# --------------------------------------------------------------------------
# 4. The hierarchical share guarantee for backlogged leaves


@SETTINGS
@given(trees(max_depth=3), st.data())
def test_backlogged_leaves_get_their_hierarchical_share(case: tuple[TreeNode, Vector], data: st.DataObject) -> None:
    """Every leaf backlogged with one kind of job and nothing running; the order placed into the pool.

    Each leaf's guarantee is the product, down its path, of its weight over
    its siblings' (all demand: every leaf is backlogged). Its dominant share
    of what it started is at least that, less one of its jobs' dominant
    share and one job of every other leaf of the tree (whole jobs overshoot
    the fair share; the flat sharing incentive carries the same slack).
    """
    root, capacity = case
    capacity = tuple(max(c, 1) for c in capacity)
    width = len(capacity)
    jobs_of: dict[str, Vector] = {}

    def backlogged(node: TreeNode, path: str) -> TreeNode:
        key = f"{path}/{node.name}" if path else node.name
        if node.children:
            return dataclasses.replace(
                node, children=tuple(backlogged(c, key if node is not root else "") for c in node.children)
            )
        job = data.draw(st.tuples(*[st.integers(0, 3) for _ in range(width)]).filter(any))
        jobs_of[key] = job
        count = min(c // d for c, d in zip(capacity, job, strict=True) if d) + 1
        return dataclasses.replace(node, usage=(0,) * width, jobs=(job,) * count)

    full = backlogged(root, "")
    tree = compile_tree(full, capacity)
    order = engine_pairs(full, capacity)
    got = place([Placement(k, jobs_of_leaf(tree, k, jobs_of)) for k, _ in order], capacity)
    slack_all = sum(dominant_share(jobs_of_leaf(tree, tree.key[n], jobs_of), capacity) for n in tree.leaves)
    for n in tree.leaves:
        key = tree.key[n]
        guarantee = Fraction(1)
        node = n
        while node:
            up = tree.parent[node]
            guarantee *= tree.weight[node] / sum(tree.weight[c] for c in tree.children[up])
            node = up
        share = dominant_share(got.vector(key), capacity)
        assert share >= guarantee - slack_all, (key, share, guarantee)


def jobs_of_leaf(tree: object, key: str, jobs_of: dict[str, Vector]) -> Vector:
    """The job kind of a leaf key; a contracted chain's key is its top's, so look the chain up."""
    if key in jobs_of:
        return jobs_of[key]
    return next(v for k, v in jobs_of.items() if k.startswith(key + "/"))


# --------------------------------------------------------------------------
# 5. Weight 0 is refused, capacity 0 is ignored


@pytest.mark.parametrize("weight", [Fraction(0), 0, Fraction(-1, 2)])
def test_weight_zero_is_refused_naming_the_node(weight: Fraction) -> None:
    tree = TreeNode(
        "root", children=(TreeNode("physics", children=(TreeNode("alice", weight, jobs=((1,),)), TreeNode("bob"))),)
    )
    with pytest.raises(HierarchyError, match=r"^tree node physics/alice: weight -?\d+(/\d+)? is not > 0$"):
        order_hierarchy(tree, (4,), TieBook(1))


@pytest.mark.parametrize(
    ("tree", "message"),
    [
        (
            TreeNode("root", children=(TreeNode("a", jobs=((1, 2, 3),)),)),
            r"tree node a job 0: 3 amounts for 2 resources",
        ),
        (TreeNode("root", children=(TreeNode("a", usage=(-1, 0)),)), r"tree node a usage: -1 is not a whole number"),
        (TreeNode("root", children=(TreeNode("a/b"),)), r"tree node 'a/b': a name is"),
        (TreeNode("root", children=(TreeNode("a"), TreeNode("a"))), r"tree node : two children named 'a'"),
        (
            TreeNode("root", children=(TreeNode("a", jobs=((1, 1),), children=(TreeNode("x"), TreeNode("y"))),)),
            r"tree node a: an internal node holds no usage or jobs",
        ),
        (
            TreeNode("root", children=(TreeNode("a", jobs=np.array([[1, 2, 3]])),)),
            r"tree node a job 0: 3 amounts for 2 resources",
        ),
        (
            TreeNode("root", children=(TreeNode("a", jobs=np.array([[1, -2]])),)),
            r"tree node a job 0: -2 is not a whole number",
        ),
        (
            TreeNode("root", children=(TreeNode("a", jobs=np.array([1, 2])),)),
            r"tree node a jobs: an array of shape \(2,\), not \(jobs, 2\)",
        ),
    ],
)
def test_bad_trees_are_refused_in_one_line(tree: TreeNode, message: str) -> None:
    with pytest.raises(HierarchyError, match=message):
        compile_tree(tree, (4, 4))


@SETTINGS
@given(trees(), st.integers(0, 2))
def test_a_resource_of_capacity_zero_is_ignored(case: tuple[TreeNode, Vector], where: int) -> None:
    """Adding a capacity-0 resource (any demand on it) leaves the order as it was, with finite shares."""
    root, capacity = case
    where = min(where, len(capacity))

    def widen(node: TreeNode) -> TreeNode:
        def put(v: Vector, amount: int) -> Vector:
            return (*v[:where], amount, *v[where:])

        if node.children:
            return dataclasses.replace(node, children=tuple(widen(c) for c in node.children))
        return dataclasses.replace(node, usage=put(node.usage, 7), jobs=tuple(put(j, 5) for j in node.jobs))

    wide = widen(root)
    wide_capacity = (*capacity[:where], 0, *capacity[where:])
    assert engine_pairs(wide, wide_capacity) == engine_pairs(root, capacity)
    assert hdrf_order(wide, wide_capacity).jobs == hdrf_order(root, capacity).jobs


def test_all_capacity_zero_still_orders_everything_finitely() -> None:
    tree = TreeNode(
        "root",
        children=(
            TreeNode("a", children=(TreeNode("x", jobs=((1,),) * 3), TreeNode("y", jobs=((2,),)))),
            TreeNode("b", jobs=((1,),)),
        ),
    )
    ordering = order_hierarchy(tree, (0,), TieBook(1))
    assert sorted(ordering.pairs()) == sorted(hdrf_order(tree, (0,)).jobs)
    assert ordering.pairs() == hdrf_order(tree, (0,)).jobs
    assert np.isfinite(ordering.path_share).all() and (ordering.path_share == 0).all()


# --------------------------------------------------------------------------
# 6. Never by name, never by sibling order


@SETTINGS
@given(trees(), st.integers(0, 40), st.randoms(use_true_random=False))
def test_never_by_name_or_sibling_order(case: tuple[TreeNode, Vector], epoch: int, rng: random.Random) -> None:
    """Rename every node and shuffle siblings, keeping each node's rotation key and tie wins: the same
    jobs in the same order at every level."""
    root, capacity = case
    renamed: dict[str, str] = {}

    def rename(node: TreeNode, old: str, new: str) -> TreeNode:
        kids = list(node.children)
        rng.shuffle(kids)
        out = []
        for child in kids:
            fresh = f"x{len(renamed)}"
            old_key, new_key = f"{old}/{child.name}" if old else child.name, f"{new}/{fresh}" if new else fresh
            renamed[new_key] = old_key
            out.append(rename(dataclasses.replace(child, name=fresh), old_key, new_key))
        rng.shuffle(out)
        return dataclasses.replace(node, children=tuple(out))

    other = rename(root, "", "")
    wins = {k: float(rng.choice([0, 1])) for k in all_keys(root, capacity)}
    expected = engine_pairs(root, capacity, epoch, wins)

    def same_rotation(e: int, key: str) -> int:
        return rotation_key(e, renamed.get(key, key))

    def same_rotations(e: int, keys: Sequence[str]) -> list[int]:
        return [same_rotation(e, key) for key in keys]

    with (
        mock.patch("slurm_drf.policy.state.rotation_key", same_rotation),
        mock.patch("slurm_drf.policy.state.rotation_key_list", same_rotations),
    ):
        got = engine_pairs(other, capacity, epoch, {new: wins[old] for new, old in renamed.items() if old in wins})
    assert [(renamed[k], i) for k, i in got] == expected


# --------------------------------------------------------------------------
# 7. What explain gets


def test_path_shares_are_each_levels_share_at_placement() -> None:
    tree = TreeNode(
        "root",
        children=(
            TreeNode("a", children=(TreeNode("x", usage=(2, 0), jobs=((2, 0),)), TreeNode("y", jobs=((0, 2),)))),
            TreeNode("b", usage=(1, 0), jobs=((1, 0),)),
        ),
    )
    ordering = order_hierarchy(tree, (10, 10), TieBook(1))
    assert ordering.pairs() == hdrf_order(tree, (10, 10)).jobs
    first = ordering.pairs()[0]
    assert first == ("a/y", 0)  # a is at y's 0 (x rescaled to 0); b at 0.1
    assert ordering.path_share[0].tolist() == [0.0, 0.0]
    names = [ordering.tree.key[n] for n in ordering.path(0)]
    assert names == ["a", "a/y"]


def iter_leaves(node: TreeNode) -> Iterator[TreeNode]:
    if not node.children:
        yield node
    for child in node.children:
        yield from iter_leaves(child)


def test_shares_are_exact_node_shares() -> None:
    """NodeShare of a leaf is the flat weighted share and vector, in units of 2**-30, rounded down."""
    share = leaf_share([3, 1], [6, 4], Fraction(1, 2))
    assert share == NodeShare((SHARE_ONE // 2, SHARE_ONE // 4), SHARE_ONE, (SHARE_ONE, SHARE_ONE // 2))
    third = leaf_share([1], [3], Fraction(3, 2))
    assert third.units == (SHARE_ONE // 3,) and third.share == SHARE_ONE * 2 // 9
