"""The daemon's loop in the simulator (sim/daemon_loop.py, drf-labels and drf-spread):
writes per cycle, the write cap, Slurm's priority order against the plan's, the
main scheduler's depth."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import numpy as np
import pytest

from slurm_drf.cli.simulate import add_simulate_parser
from slurm_drf.config.settings import Config
from slurm_drf.model.types import FloatArray, IntArray
from slurm_drf.sim.daemon_loop import (
    SlurmSide,
    build_space,
    compute_values,
    select_writes,
    slurm_priority,
    strict_gap,
)
from slurm_drf.sim.engine import simulate
from slurm_drf.sim.options import SimOptions
from slurm_drf.sim.policies import LOOP_POLICIES, FifoPolicy, LoopDrfPolicy, build_policy
from slurm_drf.sim.run_metrics import compute_metrics
from slurm_drf.sim.scenarios import build_scenario
from slurm_drf.sim.view import SimulatorView
from slurm_drf.sim.workload import NodeType, Workload, WorkloadJob
from tests.unit.sim.test_sim import check_invariants


def still_queue(pending: int = 40) -> Workload:
    """One node held for 10 hours by one job; `pending` jobs of three accounts wait behind it from t=0."""
    blocker = WorkloadJob("0", "a0", "u", 0.0, 36_000.0, 36_000.0, cpu=64, mem=1000, gpu=0)
    jobs = [blocker] + [
        WorkloadJob(str(i), f"a{i % 3}", "u", 1.0, 600.0, 600.0, cpu=8 * (1 + i % 3), mem=1000, gpu=0)
        for i in range(1, pending + 1)
    ]
    return Workload("still", "nothing ends for 10 hours", tuple(jobs), 1, NodeType(cpu=64, mem=64_000, gpu=0), seed=3)


def churn(seed: int = 5) -> Workload:
    return build_scenario("mixed", seed, nodes=4, jobs=400)


class Recording(LoopDrfPolicy):
    """A loop policy that keeps, per cycle, the plan's order and Slurm's queue of records."""

    def bind(self, sim: SimulatorView) -> None:
        super().bind(sim)
        self.plans_seen: list[list[int]] = []
        self.slurm_seen: list[list[int]] = []
        self.last_plan: list[int] = []

    def _ordering(self, index: IntArray) -> tuple[IntArray, FloatArray]:
        ordered, levels = super()._ordering(index)
        self.last_plan = ordered.tolist()
        return ordered, levels

    def reorder(self, now: float) -> list[int] | None:
        queue = super().reorder(now)
        assert queue is not None
        records: list[int] = []
        for job in queue:
            record = self.table.job_record[job]
            if not records or records[-1] != record:
                records.append(record)
        self.plans_seen.append(self.last_plan)
        self.slurm_seen.append(records)
        return queue


@pytest.mark.parametrize("mapping", ["labels", "spread"])
def test_a_still_queue_is_written_once_then_never(mapping: str) -> None:
    workload = still_queue()
    policy = LoopDrfPolicy(mapping)
    result = simulate(workload, policy, SimOptions(interval=60))
    assert result.writes is not None
    # Nothing starts or ends before the blocker's end at 10 h: 600 cycles.
    quiet = result.writes[: 36_000 // 60]
    assert quiet[0] == 1  # t=0: the blocker, written before the scheduler starts it
    assert quiet[1] == 40  # every job gets its first value
    assert not quiet[2:].any()
    check_invariants(result)


def test_labels_write_fewer_than_spread_under_churn() -> None:
    workload = churn()
    totals = {}
    for name in LOOP_POLICIES:
        result = simulate(workload, build_policy(name), SimOptions(interval=120))
        metrics = compute_metrics(result)
        assert metrics.writes is not None
        totals[name] = metrics.writes.total
        check_invariants(result)
    assert SlurmSide().weight_age and SlurmSide().weight_qos  # nonzero weights: the spread values step by 11001
    assert totals["drf-labels"] < totals["drf-spread"] / 2


@pytest.mark.parametrize("horizon", [None, 15])
def test_slurm_orders_the_horizon_as_the_plan_in_strict_weighting(horizon: int | None) -> None:
    policy = Recording("labels", Config(horizon=horizon))
    simulate(churn(), policy, SimOptions(interval=120))
    band = horizon or policy.space.horizon
    compared = 0
    for plan, queue in zip(policy.plans_seen, policy.slurm_seen, strict=True):
        head = min(band, len(plan))
        assert queue[:head] == plan[:head]
        compared += head > 1
    assert compared > 50


def test_factor_weighting_lets_an_urgent_qos_jump_the_plan() -> None:
    slurm = SlurmSide(urgent=0.2)
    policy = Recording("labels", Config(weighting="factor", factor_weight=1000), slurm)
    simulate(churn(), policy, SimOptions(interval=120))
    jumped = 0
    for plan, queue in zip(policy.plans_seen, policy.slurm_seen, strict=True):
        urgent = [r for r in plan if policy.urgent[r]]
        if urgent and plan[: len(urgent)] != urgent:
            # QOS (10000) outweighs the whole DRF factor (at most 1000) and age: urgent jobs lead
            # Slurm's queue, in the order of DRF plus age among themselves.
            assert set(queue[: len(urgent)]) == set(urgent)
            jumped += 1
    assert jumped > 0


@pytest.mark.parametrize("mapping", ["labels", "spread"])
def test_the_write_cap_holds(mapping: str) -> None:
    policy = LoopDrfPolicy(mapping, Config(max_writes_per_cycle=7))
    result = simulate(churn(), policy, SimOptions(interval=120))
    assert result.writes is not None
    assert result.writes.max() == 7
    check_invariants(result)


def test_writes_go_to_the_head_of_the_order_first() -> None:
    values = np.array([-9, -8, -7, -6, -5], dtype=np.int64)
    current = np.array([-9, 0, -3, -6, 0], dtype=np.int64)
    known = np.array([True, False, True, True, False])
    assert select_writes(values, current, known, 2).tolist() == [1, 2]
    assert select_writes(values, current, known, 10).tolist() == [1, 2, 4]
    assert select_writes(values, values, np.ones(5, dtype=np.bool_), 10).tolist() == []


def test_slurm_priority_is_the_factors_minus_nice_clamped() -> None:
    slurm = SlurmSide(weight_age=1000, weight_qos=10_000, max_age=1000.0)
    factors = slurm.factors(np.array([0.0, 500.0, 2000.0, 999.0]), np.array([False, True, False, False]))
    assert factors.tolist() == [0, 10_500, 1000, 999]
    nice = np.array([0, -5, 2000, 0], dtype=np.int64)
    assert slurm_priority(factors, nice).tolist() == [1, 10_505, 1, 999]
    assert strict_gap(slurm) == 11_001


def test_spread_values_step_by_the_strict_gap_in_either_weighting() -> None:
    levels = np.array([0.1, 0.1, 0.2], dtype=np.float64)
    zeros = np.zeros(3, dtype=np.int64)
    known = np.zeros(3, dtype=np.bool_)
    for config in (Config(), Config(weighting="factor")):
        space = build_space(config, SlurmSide(), 500)
        values = compute_values("spread", levels, zeros, known, config, space, 11_001)
        assert np.diff(values).min() >= 11_001


def test_the_main_pass_stops_at_the_queue_depth() -> None:
    jobs = tuple(WorkloadJob(str(i), "a", "u", 0.0, 500.0, 500.0, cpu=1, mem=10, gpu=0) for i in range(20))
    workload = Workload("wide", "room for every job at once", jobs, 1, NodeType(cpu=64, mem=64_000, gpu=0))
    shallow = simulate(workload, FifoPolicy(SlurmSide(queue_depth=3)), SimOptions(interval=60))
    deep = simulate(workload, FifoPolicy(), SimOptions(interval=60))
    assert int((deep.start == 0).sum()) == 20
    assert int((shallow.start == 0).sum()) == 3
    # Each later pass (every tick here: nothing else happens) starts three more.
    assert int((shallow.start == 60).sum()) == 3
    check_invariants(shallow)


def test_the_reference_writes_nothing_and_the_loop_reports_writes() -> None:
    workload = churn()
    reference = compute_metrics(simulate(workload, build_policy("drf", engine="fast"), SimOptions(interval=300)))
    loop = compute_metrics(simulate(workload, build_policy("drf-labels"), SimOptions(interval=300)))
    assert reference.writes is None
    assert loop.writes is not None
    assert loop.writes.cycles == loop.plans
    assert 0 < loop.writes.median <= loop.writes.max <= Config().max_writes_per_cycle
    assert loop.writes.total >= len({j.array_id or j.job_id for j in workload.jobs})


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="slurm-drf")
    add_simulate_parser(parser.add_subparsers(dest="verb"))
    args = parser.parse_args(["simulate", *argv])
    code: int = args.func(args)
    return code


def test_cli_reports_writes_beside_jain(capsys: pytest.CaptureFixture[str]) -> None:
    common = ("--nodes", "4", "--jobs", "150", "--policies", "drf,drf-labels,drf-spread")
    assert run_cli(*common, "--priority-weight-qos", "0", "--urgent", "0.1", "--queue-depth", "50") == 0
    out = capsys.readouterr().out
    assert "writes/cycle" in out and "drf-spread" in out
    assert "PriorityWeightQOS 0 for 10% urgent jobs" in out and "stops after 50 jobs" in out
    assert run_cli(*common, "--format", "json", "--no-series") == 0
    data = json.loads(capsys.readouterr().out)
    writes = {p["policy"]: p["writes_per_cycle"] for p in data["policies"]}
    assert writes["drf"] is None
    assert writes["drf-labels"]["total"] < writes["drf-spread"]["total"]
    assert data["slurm"]["gap"] == 11_001 and data["slurm"]["horizon"] == 1000


@pytest.mark.parametrize("bad", [("--urgent", "1.5"), ("--priority-weight-age", "-1"), ("--queue-depth", "0")])
def test_cli_refuses_bad_loop_options(bad: tuple[str, str]) -> None:
    with pytest.raises(SystemExit):
        run_cli(*bad)


def test_urgent_jobs_are_the_same_under_both_mappings() -> None:
    workload = churn()
    drawn = []
    for name in LOOP_POLICIES:
        policy = build_policy(name)
        simulate(replace(workload), policy, SimOptions(interval=600))
        assert isinstance(policy, LoopDrfPolicy)
        drawn.append(policy.urgent)
    assert np.array_equal(drawn[0], drawn[1])
    assert 0 < drawn[0].mean() < 0.2
