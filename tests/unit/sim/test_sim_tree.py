"""The simulator over an account tree: hdrf, hdrf-rollup, the tree scenario, per-level Jain (sim.tree_layout)."""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import replace
from fractions import Fraction
from types import MappingProxyType

import numpy as np
import pytest

from slurm_drf.cli.simulate import add_simulate_parser
from slurm_drf.config.settings import Config
from slurm_drf.policy.engine.hierarchy import TreeNode
from slurm_drf.policy.rule import hdrf_order
from slurm_drf.policy.state import TieBook
from slurm_drf.sim.engine import simulate
from slurm_drf.sim.gaming import build_gamed, measure
from slurm_drf.sim.options import SimOptions
from slurm_drf.sim.policies import ALL_POLICIES, DEFAULT_POLICIES, TREE_POLICIES, DrfPolicy, build_policy
from slurm_drf.sim.run_metrics import compute_metrics
from slurm_drf.sim.scenarios import GAMING_ACCOUNT, GAMING_DAY, TREE_PARENTS, build_scenario
from slurm_drf.sim.table import build_workload_table
from slurm_drf.sim.tree_layout import build_layout, build_tree, node_shares, rollup_order
from slurm_drf.sim.workload import (
    AccountTree,
    NodeType,
    Workload,
    WorkloadError,
    WorkloadJob,
    validate_workload,
)
from tests.reference.naive_hdrf import rolled_up_share
from tests.reference.nested_heaps import order_hierarchy

# --------------------------------------------------------------------------
# The naive roll-up against the rule's walk with the roll-up


def _random_tree(rng: random.Random, depth: int, width: int) -> TreeNode:
    def node(name: str, level: int) -> TreeNode:
        weight = Fraction(rng.choice((1, 1, 2, 3)), rng.choice((1, 2)))
        if level == depth or rng.random() < 0.3:
            usage = tuple(rng.choice((0, 0, 1, 3)) for _ in range(3))
            jobs = tuple((rng.choice((0, 1, 2)), rng.choice((0, 1, 2)), rng.choice((0, 1))) for _ in range(3))
            jobs = tuple(j if any(j) else (1, 0, 0) for j in jobs)
            return TreeNode(name, weight, usage=usage, jobs=jobs[: rng.randint(0, 3)])
        kids = tuple(node(f"{name}{i}", level + 1) for i in range(rng.randint(1, width)))
        return TreeNode(name, weight, kids)

    return TreeNode("root", Fraction(1), tuple(node(f"n{i}", 1) for i in range(rng.randint(1, width))))


@pytest.mark.parametrize("seed", range(40))
def test_rollup_order_is_the_rules_walk_with_rollup(seed: int) -> None:
    rng = random.Random(seed)
    root = _random_tree(rng, 3, 3)
    capacity = [rng.choice((4, 6, 0)), 8, rng.choice((2, 3))]
    wins: dict[str, float] = {}
    expected = hdrf_order(root, capacity, epoch=seed, wins={}, inner=rolled_up_share).jobs
    assert rollup_order(root, capacity, TieBook(seed, wins, {})) == expected


def test_rollup_lets_a_cpu_child_starve_its_gpu_sibling() -> None:
    # cs = {systems: CPU held, ml: GPU}, physics = {lab: GPU}: the plain sum counts systems' CPUs in cs.
    capacity = [10, 10]
    gpu_jobs = tuple((0, 1) for _ in range(10))
    root = TreeNode(
        "root",
        children=(
            TreeNode(
                "cs",
                children=(TreeNode("systems", usage=(8, 0), jobs=((1, 0),) * 2), TreeNode("ml", jobs=gpu_jobs)),
            ),
            TreeNode("physics", children=(TreeNode("lab", jobs=gpu_jobs), TreeNode("astro", jobs=gpu_jobs))),
        ),
    )
    order = rollup_order(root, capacity, TieBook(1))
    # physics takes the first 8 GPU jobs: until its share reaches cs's 0.8 from systems' CPUs.
    assert [key for key, _ in order[:8]].count("cs/ml") == 0
    assert order == hdrf_order(root, capacity, 1, {}, inner=rolled_up_share).jobs
    # H-DRF scales systems (backlogged) down to ml's share: ml gets about half of the first ten.
    hdrf = order_hierarchy(root, capacity, TieBook(1)).pairs()
    assert [key for key, _ in hdrf[:10]].count("cs/ml") >= 4


# --------------------------------------------------------------------------
# Layout and tree input


def _job(number: int, account: str, user: str, submit: float, gpu: int = 0, cpu: int = 4) -> WorkloadJob:
    return WorkloadJob(f"{account}-{number}", account, user, submit, 600.0, 600.0, cpu, 8000, gpu)


def _small_tree_workload() -> Workload:
    jobs = [
        _job(0, "ml", "alice", 0.0, gpu=1),
        _job(1, "ml", "bob", 5.0, gpu=1),
        _job(2, "systems", "sam", 0.0),
        _job(3, "lab", "carol", 1.0, gpu=2),
    ]
    tree = AccountTree(
        parents=MappingProxyType({"ml": "cs", "systems": "cs", "lab": "physics"}),
        weights=MappingProxyType({"physics": Fraction(2)}),
    )
    return validate_workload(Workload("t", "t", tuple(jobs), 1, NodeType(), tree=tree))


def test_layout_paths_depths_and_weights() -> None:
    workload = _small_tree_workload()
    layout = build_layout(workload, build_workload_table(workload))
    by_path = dict(zip(layout.path, range(layout.size), strict=True))
    assert set(by_path) == {
        "",
        "cs",
        "cs/ml",
        "cs/ml/alice",
        "cs/ml/bob",
        "cs/systems",
        "cs/systems/sam",
        "physics",
        "physics/lab",
        "physics/lab/carol",
    }
    assert layout.depth[by_path["cs/ml/bob"]] == 3
    assert layout.weight[by_path["physics"]] == 2
    assert layout.parent[by_path["cs/ml"]] == by_path["cs"]
    # Preorder: every parent before its children.
    assert all(layout.parent[n] < n for n in range(1, layout.size))
    table = build_workload_table(workload)
    users = [layout.path[int(leaf)] for leaf in layout.leaf_of_job]
    assert users == [f"{workload.tree.path(j.account)}/{j.user}" for j in workload.jobs]  # type: ignore[union-attr]
    assert len(layout.leaf_of_record) == len(table.record_tasks)


def test_build_tree_keys_chains_by_their_top() -> None:
    workload = _small_tree_workload()
    layout = build_layout(workload, build_workload_table(workload))
    usage = [[0, 0, 0] for _ in range(layout.size)]
    records = [0, 1, 2, 3]
    demand = [[1, 1, 1]] * 4
    built = build_tree(layout, usage, records, demand)
    # physics has one account of one user: one node keyed "physics"; systems one user: "cs/systems".
    assert set(built.records) == {"cs/ml/alice", "cs/ml/bob", "cs/systems", "physics"}
    assert sum(len(v) for v in built.records.values()) == 4


def test_an_account_over_its_users_sums_them_and_the_rest_rescale() -> None:
    """docs/rule.md §7, *The users of an account*: ml (two users) sums them as they are; the root and the
    division cs (accounts below it) rescale. With `fairness_within_account: slurm` an account is one leaf."""
    workload = _small_tree_workload()
    layout = build_layout(workload, build_workload_table(workload))
    built = build_tree(layout, [[0, 0, 0] for _ in range(layout.size)], [0, 1, 2, 3], [[1, 1, 1]] * 4)
    nodes = {built.root.name: built.root}
    todo = list(built.root.children)
    while todo:
        node = todo.pop()
        nodes[node.name] = node
        todo.extend(node.children)
    assert not nodes["ml"].rescale
    assert nodes["root"].rescale and nodes["cs"].rescale
    merged = build_layout(workload, build_workload_table(workload), users=False)
    assert {merged.path[int(leaf)] for leaf in merged.leaf_of_job} == {
        "cs/ml/jobs=",
        "cs/systems/jobs=",
        "physics/lab/jobs=",
    }


def test_hdrf_gives_many_users_of_an_account_nothing_more() -> None:
    """Issue 35's many-users strategy under hdrf: the gamed account's work by the day is within 2% of its
    honest play (it was 34% more when an account counted as its least user rescaled); with
    `fairness_within_account: slurm` the very same jobs start at the very same times."""
    honest = build_scenario("gaming", 1)  # its full size: at a quarter of it g's work is all done by the day
    gamed = build_gamed(honest, "many-users")
    for config, exact in ((None, False), (Config(fairness_within_account="slurm"), True)):
        base = simulate(honest, build_policy("hdrf", config), SimOptions())
        played = simulate(gamed.workload, build_policy("hdrf", config), SimOptions())
        if exact:
            assert np.array_equal(base.start, played.start)
        mine = measure(honest, build_gamed(honest, "honest"), base, GAMING_ACCOUNT, GAMING_DAY).useful
        theirs = measure(honest, gamed, played, GAMING_ACCOUNT, GAMING_DAY).useful
        assert abs(theirs / mine - 1) <= 0.02


def test_a_tree_is_checked() -> None:
    workload = _small_tree_workload()
    bad = replace(workload, tree=AccountTree(parents=MappingProxyType({"ml": "cs//x"})))
    with pytest.raises(WorkloadError, match="non-empty names"):
        validate_workload(bad)
    parent_with_jobs = replace(workload, tree=AccountTree(parents=MappingProxyType({"ml": "lab"})))
    with pytest.raises(WorkloadError, match="account lab has jobs and is also a parent"):
        validate_workload(parent_with_jobs)
    zero = replace(
        workload,
        tree=AccountTree(parents=MappingProxyType({"ml": "cs"}), weights=MappingProxyType({"cs": Fraction(0)})),
    )
    with pytest.raises(WorkloadError, match="cs: weight must be > 0"):
        validate_workload(zero)


# --------------------------------------------------------------------------
# Policies on whole runs


def _one_user_per_account(workload: Workload) -> Workload:
    return replace(workload, jobs=tuple(replace(j, user=j.account) for j in workload.jobs))


def test_hdrf_is_drf_on_a_flat_workload_of_one_user_per_account() -> None:
    workload = _one_user_per_account(build_scenario("mixed", seed=3, nodes=4, jobs=200))
    drf = DrfPolicy(engine="fast")
    hdrf = build_policy("hdrf")
    assert isinstance(hdrf, DrfPolicy)
    drf.history, hdrf.history = [], []
    first = simulate(workload, drf, SimOptions())
    second = simulate(workload, hdrf, SimOptions())
    assert drf.history == hdrf.history
    assert len(drf.history) > 10 and any(len(order) > 5 for order in drf.history)
    assert np.array_equal(first.start, second.start)


def test_hdrf_splits_an_account_between_its_users() -> None:
    # One account, two users: alice floods at 0, bob submits a little later. drf keeps submit order.
    jobs = [_job(i, "ml", "alice", 0.0, gpu=8, cpu=8) for i in range(6)]
    jobs += [_job(10 + i, "ml", "bob", 30.0, gpu=8, cpu=8) for i in range(3)]
    workload = Workload("users", "users", tuple(jobs), 1, NodeType())
    drf = simulate(workload, build_policy("drf", engine="fast"), SimOptions())
    hdrf = simulate(workload, build_policy("hdrf"), SimOptions())
    bob = np.array([j.user == "bob" for j in drf.workload.jobs])
    # Under drf bob's first job waits for all of alice's; under hdrf it comes second.
    assert drf.start[bob].min() > hdrf.start[bob].min()
    assert hdrf.start[bob].min() == pytest.approx(2 * 600.0)


def test_tree_policies_are_not_in_the_default_list() -> None:
    assert set(TREE_POLICIES) <= set(ALL_POLICIES)
    assert not set(TREE_POLICIES) & set(DEFAULT_POLICIES)


# --------------------------------------------------------------------------
# Per-level Jain


def test_node_shares_sum_the_subtree() -> None:
    workload = _small_tree_workload()
    layout = build_layout(workload, build_workload_table(workload))
    usage = np.zeros((1, layout.size, 3))
    index = {p: n for n, p in enumerate(layout.path)}
    usage[0, index["cs/ml/alice"]] = (4, 0, 2)
    usage[0, index["cs/ml/bob"]] = (4, 0, 2)
    usage[0, index["physics/lab/carol"]] = (0, 0, 4)
    shares = node_shares(layout, usage, (64, 512_000, 8))
    assert shares[0, index["cs"]] == pytest.approx(0.5)
    assert shares[0, index["cs/ml/alice"]] == pytest.approx(0.25)
    assert shares[0, index["physics"]] == pytest.approx(0.25)  # 0.5 of the GPUs over weight 2


def test_levels_only_for_a_tree_and_in_json() -> None:
    flat = build_scenario("mixed", seed=1, nodes=2, jobs=60)
    assert compute_metrics(simulate(flat, build_policy("drf"), SimOptions())).levels == ()
    tree = build_scenario("tree", seed=1, nodes=2, jobs=120)
    metrics = compute_metrics(simulate(tree, build_policy("drf", engine="fast"), SimOptions()))
    assert [(lv.depth, lv.nodes) for lv in metrics.levels] == [(1, "parents"), (2, "accounts"), (3, "users")]
    assert all(0 < lv.jain <= 1 and lv.samples > 0 for lv in metrics.levels)


def test_the_tree_scenario_is_a_tree() -> None:
    workload = build_scenario("tree", seed=1, nodes=2, jobs=120)
    assert workload.tree is not None
    assert {workload.tree.path(a) for a in workload.accounts} == {f"{p}/{a}" for a, p in TREE_PARENTS.items()}
    users = {(j.account, j.user) for j in workload.jobs}
    assert ("ml", "ml-alice") in users and ("ml", "ml-bob") in users
    assert build_scenario("tree", seed=1, nodes=2, jobs=120) == workload


# --------------------------------------------------------------------------
# The verb


def test_cli_runs_the_tree_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="slurm-drf")
    add_simulate_parser(parser.add_subparsers(dest="verb"))
    argv = ["simulate", "--scenario", "tree", "--policies", "drf,hdrf,hdrf-rollup", "--jobs", "100", "--nodes", "2"]
    args = parser.parse_args([*argv, "--format", "json", "--no-series"])
    assert args.func(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["policy"] for p in data["policies"]] == ["drf", "hdrf", "hdrf-rollup"]
    assert all(len(p["jain_by_level"]) == 3 for p in data["policies"])
    assert data["workload"]["tree"]["paths"]["ml"] == "cs/ml"
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    assert "Jain depth 3 (users)" in capsys.readouterr().out
