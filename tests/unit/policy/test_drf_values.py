"""The engine's value mapping, skip reasons, warnings and job memory (docs/rule.md §2, §5)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from fractions import Fraction
from types import MappingProxyType

import numpy as np
import pytest

from slurm_drf.config.settings import NICE_LIMIT, Config, PoolConfig
from slurm_drf.policy.ownership import JobMemory
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.policy.plan_columns import JobPlan
from slurm_drf.policy.state import PolicyState
from tests.unit.builders import job, node, snapshot

RESOURCES = ("cpu", "mem", "gres/gpu")


def ordered(plan: Plan) -> list[JobPlan]:
    return sorted((j for j in plan.jobs if j.order is not None), key=lambda j: (j.pool, j.order))


def test_one_cpu_on_a_million_cpu_pool_gets_its_own_value() -> None:
    nodes = [node(f"n{i}", cpu=1000, mem=10**6) for i in range(1000)]
    jobs = [job("a", "RUNNING", cpu=500_000), job("b", "RUNNING", cpu=500_001), job("a", cpu=1), job("b", cpu=1)]
    plan = compute_plan(snapshot(nodes, jobs), Config(resources=("cpu", "mem")))
    a, b = ordered(plan)
    assert (a.account, b.account) == ("a", "b")
    assert a.level == 0.5 and b.level == 0.500001
    assert a.value is not None and b.value is not None and a.value < b.value
    assert not plan.warnings


def test_neighbours_are_kept_one_more_than_slurms_other_weights_apart() -> None:
    snap = snapshot(
        [node(cpu=100)],
        [job(name, cpu=1) for name in "abcdef"],
        priority_weights=MappingProxyType({"PriorityWeightFairshare": 100_000, "PriorityWeightAge": 20_000}),
    )
    plan = compute_plan(snap, Config(resources=("cpu",)))
    values = [j.value or 0 for j in ordered(plan)]
    assert all(later - earlier >= 120_001 for earlier, later in itertools.pairwise(values))
    assert plan.pools[0].gap == 120_001 and plan.pools[0].exact == 6
    assert {j.band for j in plan.jobs} == {"exact"}


def test_a_range_too_small_for_the_horizon_says_how_many_it_holds() -> None:
    snap = snapshot([node(cpu=100)], [job("a", cpu=1) for _ in range(8)])
    plan = compute_plan(snap, Config(resources=("cpu",), offset=31, horizon=8))
    # labels 0 .. 30: room for 30 jobs one apart.
    assert plan.pools[0].exact == 8
    weights = MappingProxyType({"PriorityWeightAge": 2**30})
    tight = compute_plan(
        snapshot([node(cpu=100)], [job("a", cpu=1) for _ in range(8)], priority_weights=weights),
        Config(resources=("cpu",), horizon=8),
    )
    # (2147483644) // (2**30 + 1) = 1 job a gap apart, one gap left for the rest.
    assert tight.pools[0].separable == 1 and tight.pools[0].exact == 1
    assert [j.band for j in ordered(tight)] == ["exact"] + ["coarse"] * 7
    assert any(
        "only the first 1 of horizon 8 jobs have exact values" in w and "weighting: factor" in w for w in tight.warnings
    )


def test_the_horizon_follows_slurms_look_ahead() -> None:
    jobs = [job("a", cpu=1) for _ in range(5)]
    plan = compute_plan(snapshot([node(cpu=10)], jobs), Config(resources=("cpu",)))
    assert plan.pools[0].horizon == 1000  # 2 x bf_max_job_test's default 500
    deeper = snapshot([node(cpu=10)], jobs, scheduler_parameters=MappingProxyType({"bf_max_job_test": 3000}))
    assert compute_plan(deeper, Config(resources=("cpu",))).pools[0].horizon == 6000
    assert compute_plan(deeper, Config(resources=("cpu",), horizon=7)).pools[0].horizon == 7


@pytest.mark.parametrize("weight_sum", [0, 1_000, 100_000, 10**7])
@pytest.mark.parametrize("mode", ["nice", "site_factor", "priority"])
def test_values_survive_slurms_clamp(mode: str, weight_sum: int) -> None:
    """Effective priority = factors - nice (+ site factor), clamped to [1, 2^32-1]:
    the plan's order stays strict for any factors in [0, W] inside the exact band."""
    weights = MappingProxyType({"PriorityWeightAge": weight_sum} if weight_sum else {})
    snap = snapshot([node(cpu=100)], [job(name, cpu=1) for name in "abcdefgh"], priority_weights=weights)
    plan = compute_plan(snap, Config(resources=("cpu",), mode=mode))  # type: ignore[arg-type]
    written = np.array([j.value for j in ordered(plan)], dtype=np.int64)
    spread = 0 if mode == "priority" else weight_sum
    for factors in (0, spread):
        if mode == "nice":
            priority = factors - written
        elif mode == "site_factor":
            priority = factors + written
        else:
            priority = written
        clamped = np.clip(priority, 1, 2**32 - 1)
        assert (clamped == priority).all(), "no value may reach the clamp"
    if mode == "nice":
        best, worst = spread - written, -written
    elif mode == "site_factor":
        best, worst = spread + written, written
    else:
        best, worst = written, written
    assert (best[1:] < worst[:-1]).all(), "a later job can never outrank an earlier one"
    assert written.min() >= -NICE_LIMIT and written.max() <= NICE_LIMIT
    if mode != "nice":
        assert written.min() >= 1


def test_factor_weighting_stays_within_its_weight() -> None:
    weights = MappingProxyType({"PriorityWeightQOS": 1_000_000})
    snap = snapshot([node(cpu=100)], [job(name, cpu=1) for name in "abcdef"], priority_weights=weights)
    plan = compute_plan(snap, Config(resources=("cpu",), mode="site_factor", weighting="factor", factor_weight=50_000))
    values = [j.value or 0 for j in ordered(plan)]
    assert all(1 <= v <= 50_000 for v in values)
    assert values == sorted(values, reverse=True) and len(set(values)) == len(values)
    assert plan.pools[0].gap == 1


def test_skip_reasons() -> None:
    jobs = [
        job("a", job_id="1", held=True, cpu=1),
        job("a", job_id="2", priority=0, cpu=1),
        job("x", job_id="3", cpu=1),
        job("a", job_id="4", partition="debug", cpu=1),
        job("a", job_id="5", cpu=1),
        job("a", job_id="6", state="COMPLETED", cpu=1),
    ]
    config = Config(resources=("cpu",), partitions=("main",), exclude_accounts=frozenset({"x"}))
    plan = compute_plan(snapshot([node(cpu=10)], jobs), config)
    reasons = {j.job_id: (j.action, j.reason) for j in plan.jobs}
    assert reasons == {
        "1": ("skip", "held"),
        "2": ("skip", "held"),
        "3": ("skip", "account excluded"),
        "4": ("skip", "partition not managed"),
        "5": ("set", None),
    }


def test_excluded_accounts_still_occupy_capacity_but_are_not_ranked() -> None:
    jobs = [job("x", "RUNNING", cpu=8), job("a", cpu=1)]
    plan = compute_plan(snapshot([node(cpu=10)], jobs), Config(resources=("cpu",), exclude_accounts=frozenset({"x"})))
    assert [a.account for a in plan.accounts] == ["a"]


def test_comma_listed_partitions_join_the_first_managed_pool() -> None:
    pools = (PoolConfig("gpu", ("gpu",)), PoolConfig("cpu", ("cpu",)))
    nodes = [node("g", ("gpu",), cpu=8, gpu=4), node("c", ("cpu",), cpu=64)]
    jobs = [job("a", partition="debug,cpu,gpu", cpu=1), job("b", partition="gpu", gpu=1)]
    plan = compute_plan(snapshot(nodes, jobs), Config(resources=RESOURCES, pools=pools))
    assert {j.job_id: (j.pool, j.order) for j in plan.jobs} == {jobs[0].job_id: ("cpu", 0), jobs[1].job_id: ("gpu", 0)}
    assert {p.name: dict(p.capacity) for p in plan.pools} == {
        "gpu": {"cpu": 8, "mem": 0, "gres/gpu": 4},
        "cpu": {"cpu": 64, "mem": 0, "gres/gpu": 0},
    }


def test_unavailable_nodes_are_not_capacity() -> None:
    nodes = [node("a", cpu=10), node("b", state="down+drain", cpu=10), node("c", state="mixed", cpu=10)]
    plan = compute_plan(snapshot(nodes, [job("a", cpu=1)]), Config(resources=("cpu",)))
    assert plan.pools[0].capacity["cpu"] == 20 and plan.pools[0].nodes == 2
    everything = compute_plan(
        snapshot(nodes, [job("a", cpu=1)]), Config(resources=("cpu",), include_unavailable_nodes=True)
    )
    assert everything.pools[0].capacity["cpu"] == 30


def test_user_nice_is_kept_and_a_second_plan_writes_nothing() -> None:
    jobs = [job("a", "RUNNING", cpu=4), job("a", job_id="10", nice=50, cpu=1), job("b", job_id="11", cpu=1)]
    snap = snapshot([node(cpu=10)], jobs)
    config = Config(resources=("cpu",))
    first = compute_plan(snap, config)
    by_id = {j.job_id: j for j in first.jobs}
    assert by_id["10"].user_nice == 50
    value, other = by_id["10"].value, by_id["11"].value
    assert value is not None and other is not None
    assert value - 50 < 0 and other < value - 50  # ours negative, plus the user's own 50
    # Slurm now shows our values; the daemon remembers the users' own nice.
    memory = {j.job_id: JobMemory(j.user_nice, j.value, "nice") for j in first.jobs if j.value is not None}
    applied = snapshot(
        [node(cpu=10)], [replace(j, nice=memory[j.job_id].written) if j.job_id in memory else j for j in jobs]
    )
    second = compute_plan(applied, config, replace(first.state, jobs=MappingProxyType(memory)))
    assert [(j.job_id, j.action, j.user_nice) for j in ordered(second)] == [("11", "keep", 0), ("10", "keep", 50)]


def test_a_nice_changed_by_the_user_after_our_write_becomes_their_own() -> None:
    memory = MappingProxyType({"10": JobMemory(user_nice=0, written=-2_000_000_000, mode="nice")})
    snap = snapshot([node(cpu=10)], [job("a", job_id="10", nice=300, cpu=1)])
    plan = compute_plan(snap, Config(resources=("cpu",)), PolicyState(jobs=memory))
    assert plan.jobs[0].user_nice == 300


def test_site_factor_current_value_comes_from_memory() -> None:
    snap = snapshot([node(cpu=10)], [job("a", job_id="10", cpu=1)])
    config = Config(resources=("cpu",), mode="site_factor")
    first = compute_plan(snap, config)
    assert first.jobs[0].current is None and first.jobs[0].action == "set"
    value = first.jobs[0].value
    assert value is not None and NICE_LIMIT // 2 < value <= NICE_LIMIT  # near the strongest boost
    memory = MappingProxyType({"10": JobMemory(0, value, "site_factor")})
    second = compute_plan(snap, config, replace(first.state, jobs=memory))
    assert second.jobs[0].action == "keep"


def test_base_priority_removes_our_own_nice() -> None:
    """Within an account Slurm's order decides; our earlier nice must not flip it."""
    memory = MappingProxyType({"1": JobMemory(0, -1000, "nice"), "2": JobMemory(0, -5000, "nice")})
    # Slurm priority = factors - nice: job 1 has factors 100, job 2 has 50.
    jobs = [
        job("a", job_id="1", priority=1100, nice=-1000, cpu=1),
        job("a", job_id="2", priority=5050, nice=-5000, cpu=1),
    ]
    plan = compute_plan(snapshot([node(cpu=10)], jobs), Config(resources=("cpu",)), PolicyState(jobs=memory))
    assert [j.job_id for j in ordered(plan)] == ["1", "2"]


def test_weights_are_exact_fractions() -> None:
    """0.7 / 7 and 0.1 are one number: accounts at these shares tie exactly."""
    jobs = [job("a", "RUNNING", cpu=7), job("b", "RUNNING", cpu=1), job("a", cpu=1), job("b", cpu=1)]
    config = Config(resources=("cpu",), weights=MappingProxyType({"a": Fraction(7)}))
    plan = compute_plan(snapshot([node(cpu=10)], jobs), config)
    assert all(j.tie for j in ordered(plan))
