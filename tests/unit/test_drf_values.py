"""The engine's value mapping, skip reasons, warnings and job memory (docs/rule.md §2, §5)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from types import MappingProxyType

import numpy as np
import pytest
from builders import job, node, snapshot

from slurm_drf.config.settings import NICE_LIMIT, Config, PoolConfig
from slurm_drf.policy.plan import JobPlan, Plan, compute_plan
from slurm_drf.policy.state import JobMemory, PolicyState
from slurm_drf.policy.values import map_values, mode_values

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
    assert a.value is not None and b.value is not None and b.value - a.value == 1
    assert not plan.warnings


def test_scale_too_small_says_so_and_keeps_order_strict() -> None:
    nodes = [node(cpu=1000, mem=10**6)]
    jobs = [job("a", "RUNNING", cpu=100), job("b", "RUNNING", cpu=101), job("a", cpu=1), job("b", cpu=1)]
    plan = compute_plan(snapshot(nodes, jobs), Config(resources=("cpu",), scale=100))
    a, b = ordered(plan)
    assert a.level is not None and b.level is not None and a.level < b.level
    assert a.value is not None and b.value is not None and a.value < b.value  # spread apart, still strict
    assert any("cannot separate 1 pair(s) of distinct levels" in w for w in plan.warnings)


def test_levels_beyond_the_range_saturate_with_a_warning() -> None:
    plan = compute_plan(
        snapshot([node(cpu=1)], [job("a", cpu=1) for _ in range(5)]), Config(resources=("cpu",), scale=10, offset=25)
    )
    values = [j.value for j in ordered(plan)]
    # levels 0..4 -> 0, 10, 20, 30, 40; ours = value - 25 capped at -1
    assert values == [-25, -15, -5, -1, -1]
    assert any("2 job(s) have levels beyond" in w for w in plan.warnings)


@pytest.mark.parametrize("weight_sum", [0, 1_000, 100_000, 10**7])
@pytest.mark.parametrize("mode", ["nice", "site_factor", "priority"])
def test_values_survive_slurms_clamp(mode: str, weight_sum: int) -> None:
    """Effective priority = factors - nice (+ site factor), clamped to [1, 2^32-1]:
    distinct levels stay strictly ordered for any factors in [0, W]."""
    levels = np.array([0.0, 1e-6, 0.25, 0.5, 1.0, 7.5, 100.0, 2000.0])
    values, _ = map_values(levels, 1_000_000)
    written = mode_values(mode, values, NICE_LIMIT, np.zeros(len(levels), dtype=np.int64))
    for factors in (0, weight_sum):
        if mode == "nice":
            priority = factors - written
        elif mode == "site_factor":
            priority = factors + written
        else:
            priority = written
        clamped = np.clip(priority, 1, 2**32 - 1)
        assert (clamped == priority).all(), "no value may reach the clamp"
        assert (np.diff(clamped) < 0).all(), "a higher level must get a strictly lower priority"
    assert written.min() >= -NICE_LIMIT and written.max() <= NICE_LIMIT
    if mode != "nice":
        assert written.min() >= 1


def test_priority_weights_that_outweigh_the_scale_warn() -> None:
    snap = snapshot(
        [node(cpu=10)],
        [job("a", cpu=1)],
        priority_weights=MappingProxyType({"PriorityWeightFairshare": 100_000, "PriorityWeightAge": 20_000}),
    )
    plan = compute_plan(snap, Config(resources=("cpu",)))
    assert any("PriorityWeight* sum to 120000" in w and "raise scale to 12000000" in w for w in plan.warnings)
    quiet = compute_plan(snap, Config(resources=("cpu",), scale=12_000_000))
    assert not any("PriorityWeight" in w for w in quiet.warnings)


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
    assert by_id["10"].value == 50 + (round(0.4 * 1_000_000) - NICE_LIMIT)
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
    assert value == NICE_LIMIT  # level 0: the strongest boost
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
