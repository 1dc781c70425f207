"""The plan over a tree made fast for huge inputs (issue 40) is the plan it was, on random trees.

Each part of the join that was rewritten is held against the way it was
written before, kept here as the reference (or against the production
reference it must equal): the pool's tree of branches (accounts made on
their paths, leaves per (account, user)), its layout (`hierarchy.compile_tree`
of the same tree), the rows' paths, the leaves' shares at the start of a
flat tree (`rule.leaf_share` leaf by leaf), the tie ranking
(`TieBook.rank` by sorting), and the plan and report JSON written from
columns (`render_plan_json`, `render_report_json`: one dict each).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator
from fractions import Fraction
from types import MappingProxyType
from typing import Any

import numpy as np
import orjson
import pytest

import slurm_drf.policy.engine.tree_order as tree_order
from slurm_drf.config.settings import Config, HistoryConfig, PoolConfig
from slurm_drf.model.codec import parse_snapshot
from slurm_drf.model.types import Snapshot
from slurm_drf.policy.engine.fixed_point import share_vectors
from slurm_drf.policy.engine.hierarchy import CompiledTree, TreeNode, compile_tree
from slurm_drf.policy.engine.tree_order import (
    JOBS_LEAF,
    PAST_LEAF,
    USER_LEAF,
    TreeRequest,
    _Branch,
    _compile,
    _kinds,
    _preorder,
    _TreeBuilder,
    node_name,
    start_shares,
)
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.policy.rule import leaf_share
from slurm_drf.policy.state import TieBook
from slurm_drf.policy.tree_weights import ONE
from slurm_drf.trail.plan_output import render_plan_json, render_plan_json_bytes
from slurm_drf.trail.share_report import build_report, render_report_json, render_report_json_bytes

_NAMES = ["a", "phys", "x/y", "user=z", "jobs=", "past=", "p%2F", "%", "=", "ü", "root2"]
_USERS = ["alice", "bob", "u/x", "u=v", "", "%41", "eve"]


def random_case(seed: int) -> tuple[Snapshot, Config, dict[str, Any] | None]:
    """A snapshot with an association tree (chains, accounts the tree lacks, the root's own jobs,
    hostile names), a config (weights by name and path, users' weights, exclusions, pools, a
    past), as a site could hand them to `plan`."""
    rng = random.Random(seed)
    names = [rng.choice(_NAMES) + str(i) if rng.random() < 0.3 else f"acct{i}" for i in range(rng.randint(1, 25))]
    associations: list[dict[str, Any]] = [{"account": "root", "parent": None, "user": None, "shares": 1}]
    placed, parent_of, users_of = ["root"], {}, {}
    for name in names:
        parent = placed[-1] if rng.random() < 0.3 else rng.choice(placed)
        parent_of[name] = parent
        associations.append({"account": name, "parent": parent, "user": None, "shares": rng.choice([1, 3, 0, None])})
        placed.append(name)
        users_of[name] = list(dict.fromkeys(rng.choice(_USERS) for _ in range(rng.choice([0, 1, 1, 2, 5]))))
        associations += [
            {"account": name, "parent": name, "user": user, "shares": rng.choice([1, 2, None])}
            for user in users_of[name]
            if user
        ]
    owners = names + (["outsider", "root"] if rng.random() < 0.4 else [])
    jobs = []
    for number, account in enumerate(rng.choice(owners) for _ in range(rng.randint(0, 60))):
        same = rng.random() < 0.5
        jobs.append(
            {
                "job_id": str(number + 1),
                "account": account,
                "user": rng.choice(users_of.get(account) or ["ext", "ext2"]),
                "partition": rng.choice(["p1", "p2", "p1,p2"]),
                "state": rng.choice(["PENDING", "PENDING", "RUNNING", "COMPLETING"]),
                "priority": rng.choice([1000, 1000, 5000]),
                "submit_time": f"2026-11-30T01:{rng.randint(0, 59):02d}:00Z",
                "tres": {
                    "cpu": 1 if same else rng.randint(0, 16),
                    "mem": 1000 if same else rng.choice([0, 500, 64000]),
                    "gres/gpu": 0 if same else rng.choice([0, 1, 2]),
                },
            }
        )
    nodes = [
        {"name": f"n{i}", "partitions": ["p1", "p2"][: rng.randint(1, 2)], "state": "idle",
         "tres": {"cpu": rng.choice([0, 64]), "mem": rng.choice([0, 256000]), "gres/gpu": rng.choice([0, 8])}}
        for i in range(rng.randint(1, 3))
    ]  # fmt: skip
    data = {"format": "slurm-drf-snapshot/1", "nodes": nodes, "jobs": jobs, "associations": associations}
    weights = {
        (name if rng.random() < 0.5 or parent_of[name] == "root" else f"{parent_of[name]}/{name}"): Fraction(
            rng.choice(["0.5", "2", "1.25", "7"])
        )
        for name in names
        if rng.random() < 0.3
    }
    config = Config(
        weights=MappingProxyType(weights),
        user_weights=MappingProxyType(
            {name: MappingProxyType({u: Fraction(2) for u in users_of[name][:1]}) for name in names[::4]}
        ),
        weight_source=rng.choice(["config", "slurm"]),
        fairness_within_account=rng.choice(["user", "user", "slurm"]),
        exclude_accounts=frozenset(names[3:4]) if rng.random() < 0.2 else frozenset(),
        pools=(PoolConfig("one", ("p1",)), PoolConfig("two", ("p2",))) if rng.random() < 0.3 else (),
        history=HistoryConfig(weight=1.0) if rng.random() < 0.3 else None,
    )
    past = {
        pool: {name: {"cpu": 8.0 * k, "mem": 100.0} for k, name in enumerate(names[::3])}
        for pool in ("default", "one", "two")
    }
    return parse_snapshot(data), config, past if config.history else None


def _requests(monkeypatch: pytest.MonkeyPatch) -> list[TreeRequest]:
    """Every TreeRequest `compute_plan` orders from now on."""
    seen: list[TreeRequest] = []
    order_tree = tree_order.order_tree

    def recorded(request: TreeRequest) -> tree_order.TreeOrdering:
        seen.append(request)
        return order_tree(request)

    monkeypatch.setattr(tree_order, "order_tree", recorded)
    return seen


def _cases() -> Iterator[tuple[int, Snapshot, Config, dict[str, Any] | None]]:
    for seed in range(120):
        yield (seed, *random_case(seed))


# --- the reference: the join as it was written before ----------------------------------------


def reference_tree(request: TreeRequest) -> _Branch:
    """The pool's tree as `_TreeBuilder` made it before issue 40: every account walked from the root,
    one leaf per (account, user) pair in the order of the pairs' codes."""
    root = _Branch(ONE, {})
    branches: dict[int, _Branch] = {}

    def account(code: int) -> _Branch:
        if code not in branches:
            name = request.account_names[code]
            node = root
            for step in request.tree.path(name) or (name,):
                key = node_name(step)
                if key not in node.children:
                    node.children[key] = _Branch(request.weights.accounts.get(step, request.account_weights[code]), {})
                node = node.children[key]
            branches[code] = node
        return branches[code]

    _reference_leaves(request, account)
    if request.past is not None:
        for code in np.flatnonzero(request.past.any(axis=1)).tolist():
            if code in branches:
                branches[code].children[PAST_LEAF] = _Branch(ONE, {}, request.past[code].tolist(), [])
    return root


def _reference_leaves(request: TreeRequest, account: Callable[[int], _Branch]) -> None:
    """The leaves, made in the order of (account code, user's first appearance), then every job to its leaf."""
    running = request.running
    codes = np.r_[running.account, request.account_of].astype(np.int64).tolist()
    people = [*running.user, *request.user_of]
    by_user = request.within == "user"
    leaves: dict[tuple[int, str], _Branch] = {}
    for code, user in sorted(set(zip(codes, people, strict=True)), key=lambda pair: (pair[0], people.index(pair[1]))):
        key = (code, user if by_user else "")
        if key in leaves:
            continue
        name = USER_LEAF + node_name(user) if by_user else JOBS_LEAF
        weight = request.weights.users.get((request.account_names[code], user), ONE) if by_user else ONE
        leaves[key] = account(code).children[name] = _Branch(weight, {}, [0] * len(request.resources), [])
    held = len(running.account)
    for k, (code, user) in enumerate(zip(codes, people, strict=True)):
        leaf = leaves[(code, user if by_user else "")]
        if k < held:
            leaf.usage = [u + a for u, a in zip(leaf.usage or [], running.allocation[k].tolist(), strict=True)]
            leaf.running += 1
        else:
            assert leaf.rows is not None
            leaf.rows.append(k - held)


def _shape(branch: _Branch) -> Any:
    """A branch tree as nested data, children in their order."""
    return (
        branch.weight,
        branch.usage,
        branch.rows,
        branch.running,
        [(name, _shape(child)) for name, child in branch.children.items()],
    )


def _tree_node(name: str, branch: _Branch, demand: Any) -> TreeNode:
    """The same tree as `TreeNode`s, for `compile_tree`."""
    if branch.rows is not None or branch.usage is not None:
        return TreeNode(name, branch.weight, usage=tuple(branch.usage or ()), jobs=demand[branch.rows or []])
    kids = tuple(_tree_node(n, b, demand) for n, b in branch.children.items())
    # An account over its users sums them as they are (docs/rule.md §7).
    return TreeNode(name, branch.weight, kids, rescale=not any(n.startswith(USER_LEAF) for n in branch.children))


def _same_layout(made: CompiledTree, expected: CompiledTree) -> None:
    fields = ("capacity", "usable", "parent", "children", "weight", "key", "names", "depth", "usage", "occupied")
    for field in (*fields, "rescale"):
        assert getattr(made, field) == getattr(expected, field), field
    assert [np.asarray(j).tolist() for j in made.jobs] == [np.asarray(j).tolist() for j in expected.jobs]


# --- the tests -----------------------------------------------------------------------------------


def test_the_pool_tree_its_layout_and_its_paths_are_what_they_were(monkeypatch: pytest.MonkeyPatch) -> None:
    requests = _requests(monkeypatch)
    checked = 0
    for _seed, snap, config, past in _cases():
        compute_plan(snap, config, past=past)
        for request in requests:
            built = _TreeBuilder(request).build()
            assert _shape(built) == _shape(reference_tree(request))
            demand = request.demand.astype(np.int64)
            compiled, rows_of, bottoms = _compile(built, demand, request.capacity.tolist())
            caps = tuple(request.capacity.tolist())
            _same_layout(compiled, compile_tree(_tree_node("", built, demand), caps, occupied=caps))
            assert rows_of.tolist() == [r for n in compiled.leaves for r in _rows(built, n)]
            assert [bottoms[n] for n in compiled.leaves] == [
                "/".join((compiled.key[n], *compiled.names[n][1:])) for n in compiled.leaves
            ]
            paths, names, _, branches, ups = _preorder(built)
            assert paths == [names[i] if ups[i] < 0 else f"{paths[ups[i]]}/{names[i]}" for i in range(len(paths))]
            assert all(b.path == p for b, p in zip(branches, paths, strict=True))
            checked += 1
        requests.clear()
    assert checked > 100


def _rows(root: _Branch, node: int) -> list[int]:
    """The rows of the leaf branch laid out as compiled node `node`."""
    stack = [root]
    while stack:
        branch = stack.pop()
        if branch.node == node and branch.rows is not None:
            return branch.rows
        stack.extend(branch.children.values())
    return []


def test_plan_and_report_json_written_from_columns_are_the_dicts_orjson_writes() -> None:
    trees = 0
    for _seed, snap, config, past in _cases():
        plan: Plan = compute_plan(snap, config, past=past)
        trees += plan.has_tree
        for indent in (True, False):
            expected = orjson.dumps(
                render_plan_json(plan), option=(orjson.OPT_INDENT_2 if indent else 0) | orjson.OPT_APPEND_NEWLINE
            )
            assert render_plan_json_bytes(plan, indent=indent) == expected
        report = build_report(plan)
        option = orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE
        assert render_report_json_bytes(report) == orjson.dumps(render_report_json(report), option=option)
    assert trees > 80


def test_a_flat_trees_start_shares_are_each_leafs_share() -> None:
    rng = random.Random(3)
    for _ in range(200):
        width = rng.randint(0, 3)
        caps = tuple(rng.choice([0, 7, 64, 10**6]) for _ in range(width))
        big = rng.random() < 0.2  # amounts past int64's room: leaf by leaf
        leaves = tuple(
            TreeNode(
                f"l{k}",
                Fraction(rng.randint(1, 9), rng.choice([1, 3, 10**7 if big else 4])),
                usage=tuple(rng.choice([0, 1, 5, 10**12 if big else 30]) for _ in range(width)),
                jobs=((1,) * width,) * rng.randint(0, 2),
            )
            for k in range(rng.randint(1, 6))
        )
        tree = compile_tree(TreeNode("root", children=leaves), caps, occupied=caps)
        if not tree.flat:
            continue
        shares, blocked = start_shares(tree)
        usable = tree.usable
        expected = [0.0] + [
            leaf_share([tree.usage[n][r] for r in usable], [caps[r] for r in usable], tree.weight[n]).share / (1 << 30)
            for n in range(1, len(tree.parent))
        ]
        assert shares == expected
        assert blocked == [True] + [not len(tree.jobs[n]) for n in range(1, len(tree.parent))]


def test_share_vectors_are_leaf_share_in_int64_and_beyond() -> None:
    """Both engines' shares (`fixed_point.share_vectors`) are the rule's `leaf_share` vectors, whole
    number for whole number, where int64 holds them and where Python integers must."""
    rng = random.Random(5)
    for _ in range(300):
        width = rng.randint(1, 3)
        caps = [rng.choice([1, 7, 64, 2**40, 2**62]) for _ in range(width)]
        usage = [[rng.choice([0, 1, 5, 2**31, 2**40]) for _ in range(width)] for _ in range(rng.randint(1, 5))]
        weights = [Fraction(rng.randint(1, 9), rng.choice([1, 3, 2**20])) for _ in range(3)]
        of = [rng.randrange(3) for _ in usage]
        found = share_vectors(np.array(usage, dtype=np.int64), caps, weights, np.array(of, dtype=np.int64))
        assert found.tolist() == [list(leaf_share(u, caps, weights[k]).vector) for u, k in zip(usage, of, strict=True)]
    none = np.zeros((0, 2), dtype=np.int64)
    assert share_vectors(none, [4, 4], [ONE], np.zeros(0, dtype=np.int64)).shape == (0, 2)
    assert share_vectors(np.zeros((1, 0), dtype=np.int64), [], [ONE], np.zeros(1, dtype=np.int64)).tolist() == [[0]]


@pytest.mark.parametrize("size", [3, 63, 64, 500])
def test_a_tie_of_one_turn_each_is_taken_in_rank_order(size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(size)
    keys = [f"k{i}/{rng.random()}" for i in range(size)]
    wins = {key: float(rng.choice([0, 0, 1, 2.5])) for key in keys if rng.random() < 0.5}
    book = TieBook(7, dict(wins))
    expected = sorted(range(size), key=lambda i: book.rank(keys[i]))
    placed, held = book.take_one_each(keys)
    assert placed == expected and held == [wins.get(keys[i], 0.0) for i in expected]
    # Each placed while another waits won one tie; the last did not.
    assert book.wins == {**wins, **{keys[i]: wins.get(keys[i], 0.0) + 1.0 for i in expected[:-1]}}
    # Two rotation keys alike (a 2**-64 event): the key decides, as `rank` says.
    monkeypatch.setattr("slurm_drf.policy.state.rotation_key_list", lambda epoch, names: [1] * len(names))
    monkeypatch.setattr("slurm_drf.policy.state.rotation_key", lambda epoch, name: 1)
    alike = TieBook(8, dict(wins))
    by_rank = sorted(range(size), key=lambda i: alike.rank(keys[i]))  # before the tie is taken: it counts wins
    assert alike.take_one_each(keys)[0] == by_rank


def test_taking_one_each_at_once_is_taking_turns_one_by_one() -> None:
    keys = ["b", "a", "c", "d"]
    one, each = TieBook(1, {"a": 2.0, "d": 1.0}, {"a": 1.0}), TieBook(1, {"a": 2.0, "d": 1.0}, {"a": 1.0})
    placed, held = one.take_one_each(keys)
    turns, turn_held, won = each.take_turns({k: [i] for i, k in enumerate(keys)}, {k: k for k in keys})
    assert [keys[i] for i in placed] == [keys[t] for t in turns] and held == turn_held and won == len(keys) - 1
    assert one.wins == each.wins and list(one.plan_wins.items()) == list(each.plan_wins.items())


def test_taking_turns_serves_the_fewest_wins_and_counts_each_tie_won() -> None:
    book = TieBook(3, {"x": 1.0})
    turns, held, won = book.take_turns({"x": ["x1", "x2"], "y": ["y1", "y2", "y3"]}, {"x": "x", "y": "y"})
    # y (no wins) goes first; both at one win, the rotation key decides; the last left takes the rest.
    assert turns[0] == "y1" and held[0] == 0.0 and sorted(turns) == ["x1", "x2", "y1", "y2", "y3"]
    assert [t for t in turns if t[0] == "x"] == ["x1", "x2"] and [t for t in turns if t[0] == "y"] == ["y1", "y2", "y3"]
    # A tie is won by each turn taken while the other queue still waited.
    last_other = max(i for i, t in enumerate(turns) if t[0] != turns[-1][0])
    assert won == last_other + 1 and book.wins["x"] + book.wins["y"] == 1.0 + won


def test_kinds_read_every_node_name_back() -> None:
    names = ["user=alice", "user=%25x", "user=", "jobs=", "past=", "a%2Fb", "%00", "plain", "user%3Dz"]
    assert _kinds(names) == (
        ["user", "user", "user", "jobs", "past", "account", "account", "account", "account"],
        ["alice", "%x", "", "(jobs)", "(past)", "a/b", "", "plain", "user=z"],
    )


def test_the_snapshot_keeps_the_tree_it_was_checked_with() -> None:
    snap, _, _ = random_case(11)
    tree = snap.account_tree
    assert snap.account_tree is tree and tree.paths  # built once, by the parser
    again = dataclasses.replace(snap)
    assert again.account_tree is not tree and again.account_tree == tree
    assert snap.columns_only().account_tree is tree
