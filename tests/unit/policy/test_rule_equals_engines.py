"""The fast engines equal the rule (`policy.rule`), position by position, tie wins included.

Flat: `policy.engine.order.order_pending` (after `compute_before`), the engine of a
flat pool, against `rule.flat_order`, the greedy loop on the rule's fixed point.
Tree: `policy.engine.merge_engine.order_online`, the engine of a pool with Slurm's
account tree (a flat tree goes through `hierarchy.order_flat` to
`order_pending`), against `rule.hdrf_order` with occupied = capacity, the
walk on the rule's fixed point; and `compute_plan`'s own tree orders
(`tree_order.order_tree` on Slurm's associations, users, pools, the past)
against the walk on the very tree the plan built. Random pools heavy on ties: cloned accounts
and subtrees, zero usage, zero demands, equal weights, users in accounts,
remembered (decayed) tie wins, resources of capacity 0, and amounts near
each other at large capacities (shares closer than 2**-30, the rule's one
notion of equality, and just that far apart).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import slurm_drf.policy.engine.tree_order as tree_order
from slurm_drf.policy.engine.hierarchy import TreeNode
from slurm_drf.policy.engine.merge_engine import order_online
from slurm_drf.policy.engine.order import compute_before, order_pending
from slurm_drf.policy.engine.tree_order import TreeOrdering, TreeRequest, _TreeBuilder
from slurm_drf.policy.plan import compute_plan
from slurm_drf.policy.rule import Order, flat_order, hdrf_order
from slurm_drf.policy.state import TieBook
from tests.unit.policy.test_tree_join_fast import _tree_node, random_case

Vector = tuple[int, ...]
Placed = list[tuple[str, int]]

FLAT_EXAMPLES = 400
TREE_EXAMPLES = 300
WEIGHTS = (Fraction(1), Fraction(1), Fraction(1), Fraction(2), Fraction(1, 2), Fraction(3, 10))
WINS = (0.0, 0.0, 0.0, 1.0, 2.0, 0.5, 0.25)


def assert_same_order(engine: Placed, rule: Placed) -> None:
    """Every position alike; the first one that differs is named."""
    differ = next((p for p, (e, r) in enumerate(zip(engine, rule, strict=False)) if e != r), None)
    assert differ is None, f"position {differ}: engine {engine[differ]}, rule {rule[differ]}"
    assert len(engine) == len(rule)


def assert_same_wins(book: TieBook, start: dict[str, float], rule: Order) -> None:
    """The engine's wins after the plan are the rule's; the plan's own are what it added."""
    assert {k: Fraction(v) for k, v in book.wins.items() if v} == {k: v for k, v in rule.wins.items() if v}
    assert all(book.wins[k] == start.get(k, 0.0) + v for k, v in book.plan_wins.items())


# --------------------------------------------------------------------------
# Random pools


@st.composite
def capacities(draw: st.DrawFn) -> tuple[Vector, int]:
    """(capacity, scale): small pools, or large ones whose amounts are `scale` times the small ones
    plus a little (shares a hair apart)."""
    width = draw(st.integers(1, 3))
    if draw(st.booleans()):
        return tuple(draw(st.sampled_from([0, 1, 2, 3, 4, 6, 10])) for _ in range(width)), 1
    big = (1 << 40) + draw(st.integers(0, 3))
    return tuple(draw(st.sampled_from([0, big, big + 7, 3 * big])) for _ in range(width)), 1 << 38


def amounts(draw: st.DrawFn, width: int, scale: int, choices: Sequence[int]) -> Vector:
    """A vector of small amounts (zero often), times `scale` plus a nudge of 0 or 1 where scaled."""
    return tuple(
        draw(st.sampled_from(choices)) * scale + (draw(st.sampled_from([0, 0, 1])) if scale > 1 else 0)
        for _ in range(width)
    )


@st.composite
def flat_pools(draw: st.DrawFn) -> tuple[dict[str, list[Vector]], dict[str, Vector], Vector, dict[str, Fraction]]:
    """Accounts' pending demands (Slurm's order), running usage, capacity, weights; clones make exact ties."""
    capacity, scale = draw(capacities())
    width = len(capacity)
    pending: dict[str, list[Vector]] = {}
    usage: dict[str, Vector] = {}
    weights: dict[str, Fraction] = {}
    for i in range(draw(st.integers(1, 8))):
        name = f"a{i}"
        if i and draw(st.integers(0, 2)) == 0:  # a clone of an earlier account: the very same state
            model = f"a{draw(st.integers(0, i - 1))}"
            pending[name], usage[name], weights[name] = list(pending[model]), usage[model], weights[model]
            continue
        jobs = draw(st.lists(st.just(None), max_size=6))
        pending[name] = [amounts(draw, width, scale, [0, 0, 1, 1, 2, 3]) for _ in jobs]
        usage[name] = amounts(draw, width, scale, [0, 0, 0, 1, 2, 5]) if draw(st.booleans()) else (0,) * width
        weights[name] = draw(st.sampled_from(WEIGHTS))
    return pending, usage, capacity, weights


def engine_flat_order(
    pending: dict[str, list[Vector]],
    usage: dict[str, Vector],
    capacity: Vector,
    weights: dict[str, Fraction],
    book: TieBook,
) -> Placed:
    """`order_pending` as the plan calls it: jobs grouped by account in Slurm's order, usage before each."""
    names = list(pending)
    width = len(capacity)
    counts = [len(pending[a]) for a in names]
    account_of = np.repeat(np.arange(len(names), dtype=np.int64), counts)
    demand = np.array([d for a in names for d in pending[a]], dtype=np.int64).reshape(-1, width)
    running = np.array([usage[a] for a in names], dtype=np.int64).reshape(len(names), width)
    before = compute_before(demand, account_of, running)
    ordering = order_pending(
        before, account_of, np.array(capacity, dtype=np.int64), [weights[a] for a in names], names, book
    )
    first = np.cumsum(counts) - counts
    return [(names[account_of[j]], int(j - first[account_of[j]])) for j in ordering.order.tolist()]


@settings(max_examples=FLAT_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flat_pools(), st.integers(0, 40), st.data())
def test_flat_engine_equals_the_greedy_loop(
    pool: tuple[dict[str, list[Vector]], dict[str, Vector], Vector, dict[str, Fraction]],
    epoch: int,
    data: st.DataObject,
) -> None:
    pending, usage, capacity, weights = pool
    start = {a: data.draw(st.sampled_from(WINS)) for a in pending}
    rule = flat_order(pending, usage, capacity, weights, epoch, start)
    book = TieBook(epoch, dict(start))
    assert_same_order(engine_flat_order(pending, usage, capacity, weights, book), rule.jobs)
    assert_same_wins(book, start, rule)


# --------------------------------------------------------------------------
# Random trees: accounts, sub-accounts, users


@st.composite
def account_trees(draw: st.DrawFn) -> tuple[TreeNode, Vector]:
    """A root over accounts; an account holds sub-accounts or users (leaves, `user=NAME`) or its own jobs.
    Subtrees are cloned often (exact ties at every level)."""
    capacity, scale = draw(capacities())
    width = len(capacity)

    def leaf(name: str) -> TreeNode:
        jobs = tuple(amounts(draw, width, scale, [0, 0, 1, 1, 2, 3]) for _ in draw(st.lists(st.just(None), max_size=5)))
        usage = amounts(draw, width, scale, [0, 0, 0, 1, 2, 5]) if draw(st.booleans()) else ()
        return TreeNode(name, draw(st.sampled_from(WEIGHTS)), usage=usage, jobs=jobs)

    def account(name: str, depth: int) -> TreeNode:
        kind = draw(st.sampled_from(["jobs", "users", "users", "accounts"] if depth < 3 else ["jobs", "users"]))
        if kind == "jobs":
            return leaf(name)
        kids: list[TreeNode] = []
        for i in range(draw(st.integers(1, 4))):
            child = f"user=u{i}" if kind == "users" else f"{name}{i}"
            if i and draw(st.booleans()):
                kids.append(dataclasses.replace(kids[0], name=child))
            else:
                kids.append(leaf(child) if kind == "users" else account(child, depth + 1))
        # An account over its users sums them as they are, as the plan builds it (docs/rule.md §7).
        return TreeNode(name, draw(st.sampled_from(WEIGHTS)), children=tuple(kids), rescale=kind != "users")

    accounts: list[TreeNode] = []
    for i in range(draw(st.integers(1, 5))):
        if accounts and draw(st.integers(0, 2)) == 0:
            accounts.append(dataclasses.replace(draw(st.sampled_from(accounts)), name=f"a{i}"))
        else:
            accounts.append(account(f"a{i}", 1))
    return TreeNode("root", children=tuple(accounts)), capacity


def tree_keys(node: TreeNode, path: str = "") -> list[str]:
    """Every node's path below the root (a superset of the keys: chains are not contracted)."""
    out: list[str] = []
    for child in node.children:
        key = f"{path}/{child.name}" if path else child.name
        out += [key, *tree_keys(child, key)]
    return out


@settings(max_examples=TREE_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(account_trees(), st.integers(0, 40), st.data())
def test_tree_engine_equals_the_hdrf_walk(case: tuple[TreeNode, Vector], epoch: int, data: st.DataObject) -> None:
    root, capacity = case
    start = {k: data.draw(st.sampled_from(WINS)) for k in tree_keys(root)}
    rule = hdrf_order(root, capacity, epoch, start, occupied=capacity)
    book = TieBook(epoch, dict(start))
    assert_same_order(order_online(root, capacity, book).pairs(), rule.jobs)
    assert_same_wins(book, start, rule)


# --------------------------------------------------------------------------
# The comparison is strict, and ties are what the cases are made of


def test_one_position_apart_fails() -> None:
    """Two clones tie; the engine's order with two neighbours swapped is not the rule's."""
    pending: dict[str, list[Vector]] = {"a0": [(1, 0), (0, 1)], "a1": [(1, 0), (0, 1)]}
    usage: dict[str, Vector] = {"a0": (0, 0), "a1": (0, 0)}
    weights = {"a0": Fraction(1), "a1": Fraction(1)}
    rule = flat_order(pending, usage, (4, 4), weights, 3)
    engine = engine_flat_order(pending, usage, (4, 4), weights, TieBook(3))
    assert_same_order(engine, rule.jobs)
    swapped = [engine[1], engine[0], *engine[2:]]
    with pytest.raises(AssertionError, match="position 0"):
        assert_same_order(swapped, rule.jobs)
    assert sum(rule.wins.values()) >= 1  # the tie rule decided


def test_users_of_cloned_accounts_tie_at_every_level() -> None:
    """Two equal accounts of two equal users each: every position is a tie at some level, and the
    merge engine counts the same wins as the walk."""
    users = tuple(TreeNode(f"user=u{i}", jobs=((1, 0),) * 3) for i in range(2))
    accounts = tuple(TreeNode(name, children=users, rescale=False) for name in ("a0", "a1"))
    root = TreeNode("root", children=accounts)
    rule = hdrf_order(root, (12, 12), 5, occupied=(12, 12))
    book = TieBook(5)
    assert_same_order(order_online(root, (12, 12), book).pairs(), rule.jobs)
    assert_same_wins(book, {}, rule)
    assert len(rule.jobs) == 12 and sum(rule.wins.values()) >= 6
    assert {key for key, _ in rule.jobs[:4]} == {"a0/user=u0", "a0/user=u1", "a1/user=u0", "a1/user=u1"}


# --------------------------------------------------------------------------
# One notion of equality, flat and tree: whole numbers of 2**-30 of share

HALF = 1 << 39  # half of a capacity of 2**40
APART = {"a hair": 1, "2**-30": 1 << 10}  # how much more b holds than a, in units of 2**-40 of the pool


def firsts(orders: list[Placed], of: set[str]) -> set[str]:
    """The key among `of` that each order places first."""
    return {next(key for key, _ in jobs if key in of) for jobs in orders}


@pytest.mark.parametrize("apart", APART)
def test_shares_a_hair_apart_are_one_tie_in_a_flat_pool_and_in_a_tree(apart: str) -> None:
    """b holds 2**-40 of the pool more than a: less than 2**-30, a tie in both, which the rotation
    settles both ways over the epochs (and every engine the same way as the rule). 2**-30 more: a
    first, always, in both."""
    capacity: Vector = (1 << 40,)
    usage: dict[str, Vector] = {"a": (HALF,), "b": (HALF + APART[apart],)}
    pending: dict[str, list[Vector]] = {"a": [(1,)], "b": [(1,)]}
    weights = {"a": Fraction(1), "b": Fraction(1)}
    flat, tree = [], []
    for epoch in range(16):
        rule = flat_order(pending, usage, capacity, weights, epoch)
        assert_same_order(engine_flat_order(pending, usage, capacity, weights, TieBook(epoch)), rule.jobs)
        flat.append(rule.jobs)
        # The same two as the users of one account, beside another account: compared at that account.
        users = tuple(TreeNode(f"user={k}", usage=usage[k], jobs=tuple(pending[k])) for k in ("a", "b"))
        root = TreeNode("root", children=(TreeNode("g", children=users), TreeNode("h", jobs=((1,),))))
        walk = hdrf_order(root, capacity, epoch, occupied=capacity)
        assert_same_order(order_online(root, capacity, TieBook(epoch)).pairs(), walk.jobs)
        tree.append(walk.jobs)
    expected = {"a", "b"} if apart == "a hair" else {"a"}
    assert firsts(flat, {"a", "b"}) == expected
    assert firsts(tree, {"g/user=a", "g/user=b"}) == {f"g/user={k}" for k in expected}


def test_a_flat_pool_beyond_int64_is_ordered_on_python_integers_as_the_rule() -> None:
    """Capacities of 2**62 (shares past int64's checked bounds): the engine's Python-integer path gives
    the rule's order and wins, a tie of clones and a near tie included."""
    big = 1 << 62
    capacity: Vector = (big, 7)
    usage: dict[str, Vector] = {"a": (big // 3, 0), "b": (big // 3, 0), "c": (big // 3 + 1, 1), "d": (0, 0)}
    pending: dict[str, list[Vector]] = {k: [(big // 5, 1), (big // 7, 0)] for k in usage}
    weights = {"a": Fraction(1), "b": Fraction(1), "c": Fraction(3, 10), "d": Fraction(2)}
    for epoch in range(8):
        rule = flat_order(pending, usage, capacity, weights, epoch)
        book = TieBook(epoch)
        assert_same_order(engine_flat_order(pending, usage, capacity, weights, book), rule.jobs)
        assert_same_wins(book, {}, rule)
        assert sum(rule.wins.values()) >= 1


@pytest.mark.parametrize("seed", range(60))
def test_the_plans_tree_order_is_the_hdrf_walk(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`compute_plan` over Slurm's tree: each pool's order is the walk's on the tree the plan built
    (its accounts, users, `jobs=` and `past=` leaves, weights), from the wins the plan started with."""
    seen: list[tuple[TreeRequest, int, dict[str, float], TreeOrdering, dict[str, float]]] = []
    order_tree = tree_order.order_tree

    def recorded(request: TreeRequest) -> TreeOrdering:
        epoch, start = request.ties.epoch, dict(request.ties.wins)
        result = order_tree(request)
        seen.append((request, epoch, start, result, dict(request.ties.wins)))  # the book goes on to the next pool
        return result

    monkeypatch.setattr(tree_order, "order_tree", recorded)
    snap, config, past = random_case(seed)
    compute_plan(snap, config, past=past)
    for request, epoch, start, result, after in seen:
        demand = request.demand.astype(np.int64)
        root = _tree_node("", _TreeBuilder(request).build(), demand)
        capacity = tuple(request.capacity.tolist())
        rule = hdrf_order(root, capacity, epoch, start, occupied=capacity)
        assert_same_order(result.hierarchy.pairs(), rule.jobs)
        assert {k: Fraction(v) for k, v in after.items() if v} == {k: v for k, v in rule.wins.items() if v}
    assert seen
