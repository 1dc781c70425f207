"""drf-history in the simulator: the daemon's memory of past use (docs/rule.md §6) against drf,
on the burst and steady scenarios, and the metrics of fairness over time."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from slurm_drf.config.settings import Config, HistoryConfig
from slurm_drf.policy.decayed_usage import UsageRecord, decayed_past
from slurm_drf.policy.pools import DEFAULT_POOL
from slurm_drf.sim.compare import run_comparison
from slurm_drf.sim.daemon_loop import SlurmSide
from slurm_drf.sim.engine import simulate
from slurm_drf.sim.options import SimOptions, SimResult
from slurm_drf.sim.policies import DrfPolicy, HistoryDrfPolicy, build_policy
from slurm_drf.sim.render import render_json, render_table
from slurm_drf.sim.run_metrics import compute_metrics, shares_to_date
from slurm_drf.sim.scenarios import HISTORY_SCENARIOS, SCENARIOS, build_scenario
from slurm_drf.sim.table import build_workload_table
from slurm_drf.sim.workload import NodeType, Workload, WorkloadError, WorkloadJob, validate_workload
from tests.unit.sim.test_sim import check_invariants, run_cli


def small_burst(seed: int = 1) -> Workload:
    return build_scenario("burst", seed, nodes=3, jobs=240)


def day_two(workload: Workload) -> float:
    return max(j.submit for j in workload.jobs)


def first_day_two_order(workload: Workload, policy: DrfPolicy) -> tuple[list[str], SimResult]:
    """Accounts of the records in the first plan that holds day 2's queue, in plan order; and the run."""
    policy.history = []
    result = simulate(workload, policy, SimOptions())
    table = build_workload_table(validate_workload(workload))
    day = day_two(workload)
    first = next(order for order in policy.history if any(table.record_submit[n - 1] == day for n in order))
    return [table.accounts[table.record_account[n - 1]] for n in first], result


def test_history_scenarios_are_listed_and_build() -> None:
    assert set(HISTORY_SCENARIOS) <= set(SCENARIOS)
    burst = small_burst()
    day = day_two(burst)
    physics = [j for j in burst.jobs if j.account == "physics"]
    chemistry = [j for j in burst.jobs if j.account == "chemistry"]
    # Day 1: physics alone; day 2: both submit the same queue at the same moment.
    assert all(j.submit == day for j in chemistry) and day > 0
    assert {j.submit for j in physics} == {0.0, day}
    queue = [(j.cpu, j.mem, j.gpu, j.duration) for j in physics if j.submit == day]
    assert queue == [(j.cpu, j.mem, j.gpu, j.duration) for j in chemistry]
    with pytest.raises(WorkloadError, match="burst"):
        build_scenario("burst", 1, nodes=2, jobs=3)


@pytest.mark.parametrize("engine", ["plan", "fast"])
def test_weight_zero_gives_exactly_drfs_schedule(engine: str) -> None:
    workload = build_scenario("mixed", 7, nodes=6, jobs=300)
    runs = []
    for policy in (DrfPolicy(engine=engine), HistoryDrfPolicy(Config(history=HistoryConfig(weight=0.0)), engine)):
        policy.history = []
        result = simulate(workload, policy, SimOptions(interval=120))
        runs.append((policy.history, result.start))
    assert len(runs[0][0]) > 10
    assert runs[0][0] == runs[1][0]
    assert np.array_equal(runs[0][1], runs[1][1])


@pytest.mark.parametrize("scenario", ["burst", "mixed"])
def test_fast_engine_blends_the_past_exactly_as_compute_plan(scenario: str) -> None:
    workload = small_burst() if scenario == "burst" else build_scenario("mixed", 5, nodes=6, jobs=300)
    runs = []
    for engine in ("plan", "fast"):
        policy = HistoryDrfPolicy(engine=engine)
        policy.history = []
        result = simulate(workload, policy, SimOptions(interval=120, record_events=True))
        check_invariants(result)
        runs.append((policy.history, result.start))
    assert runs[0][0] == runs[1][0]
    assert np.array_equal(runs[0][1], runs[1][1])


def test_on_burst_history_starts_the_idle_account_first_and_drf_alternates() -> None:
    workload = small_burst()
    # Without urgent jobs, which would go first within each account whatever the history.
    plain = SlurmSide(urgent=0.0)
    drf, drf_run = first_day_two_order(workload, DrfPolicy(engine="fast", site=plain))
    history, history_run = first_day_two_order(workload, HistoryDrfPolicy(engine="fast", site=plain))
    assert drf[:6].count("chemistry") == 3
    assert history[:6] == ["chemistry"] * 6
    # Over the run: chemistry waits less on day 2, and the shares to date are more even.
    day = day_two(workload)
    metrics = {}
    waits = {}
    for name, result in (("drf", drf_run), ("drf-history", history_run)):
        metrics[name] = compute_metrics(result)
        chemistry = result.accounts.index("chemistry")
        mine = (result.job_account == chemistry) & (result.submit == day)
        waits[name] = float(np.median(result.start[mine] - result.submit[mine]))
    assert waits["drf-history"] < waits["drf"]
    assert metrics["drf-history"].jain_over_time > metrics["drf"].jain_over_time
    assert metrics["drf"].jain > metrics["drf-history"].jain  # instant shares: drf is the even one


def records_from_result(result: SimResult, resources: tuple[str, ...]) -> list[UsageRecord]:
    """The running allocation at every instant a job started or ended, rebuilt from the run's outcome."""
    totals = np.array([j.total() for j in result.workload.jobs], dtype=np.int64)
    times = sorted({0.0, *result.start.tolist(), *result.end.tolist()})
    records = []
    for time in times:
        running = (result.start <= time) & (result.end > time)
        usage: dict[str, dict[str, float]] = {}
        for index, account in enumerate(result.accounts):
            held = totals[running & (result.job_account == index)].sum(axis=0).tolist()
            if any(held):
                usage[account] = dict(zip(resources, map(float, held), strict=True))
        records.append(UsageRecord(time, {DEFAULT_POOL: usage}))
    return records


def test_the_decayed_past_is_decayed_past_over_the_runs_records() -> None:
    workload = small_burst()
    history = HistoryConfig(half_life_s=6 * 3600.0, weight=0.5)
    policy = HistoryDrfPolicy(Config(history=history), keep_records=True)
    result = simulate(workload, policy, SimOptions(interval=300))
    assert policy.pasts is not None and len(policy.pasts) > 20
    records = records_from_result(result, ("cpu", "mem", "gres/gpu"))
    checked = 0
    for now, past in policy.pasts[:: max(1, len(policy.pasts) // 25)]:
        expected = decayed_past([r for r in records if r.time <= now], now, history.half_life_s, math.inf)
        assert set(past) == set(expected)
        for pool, accounts in expected.items():
            assert set(past[pool]) == set(accounts)
            for account, amounts in accounts.items():
                for resource, amount in amounts.items():
                    assert past[pool][account].get(resource, 0.0) == pytest.approx(amount, rel=1e-9, abs=1e-9)
                    checked += amount > 0
    assert checked > 10
    # On day 2 physics carries its burst: far more past GPUs than chemistry.
    day_two_past = next(p for t, p in policy.pasts if t >= day_two(workload))[DEFAULT_POOL]
    assert day_two_past["physics"]["gres/gpu"] > 5 * day_two_past.get("chemistry", {}).get("gres/gpu", 0.0)


def test_shares_to_date_average_from_the_start() -> None:
    """One node: a holds it for 600 s, then a and b each queue two whole-node jobs.
    With history b goes first at 600; shares to date are what each account held on average."""

    def job(name: str, account: str, submit: float) -> WorkloadJob:
        return WorkloadJob(name, account, "u", submit, 600.0, 600.0, cpu=64, mem=1000, gpu=0)

    jobs = (job("a0", "a", 0), job("a1", "a", 600), job("a2", "a", 600), job("b1", "b", 600), job("b2", "b", 600))
    workload = Workload("one", "one node", jobs, 1, NodeType(cpu=64, mem=64_000, gpu=0))
    result = simulate(workload, build_policy("drf-history"), SimOptions(interval=60))
    starts = dict(zip([j.job_id for j in result.workload.jobs], result.start.tolist(), strict=True))
    assert starts == {"a0": 0.0, "b1": 600.0, "a1": 1200.0, "b2": 1800.0, "a2": 2400.0}
    to_date = shares_to_date(result)
    a, b = result.accounts.index("a"), result.accounts.index("b")
    at = {round(t): i for i, t in enumerate(result.sample_time.tolist())}
    assert to_date[at[540], a] == 1.0 and to_date[at[540], b] == 0.0
    # At 1140 (tick 19, 20 ticks so far): a held the node for 10 ticks, b for 10.
    assert to_date[at[1140], a] == pytest.approx(0.5) and to_date[at[1140], b] == pytest.approx(0.5)
    metrics = compute_metrics(result)
    assert 0.5 < metrics.jain_over_time < 1.0
    row = {r.account: r for r in metrics.accounts}
    assert row["a"].run_share == pytest.approx(3 / 5) and row["b"].run_share == pytest.approx(2 / 5)


def test_cli_burst_shows_fairness_over_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--scenario", "burst", "--nodes", "3", "--jobs", "120", "--policies", "drf,drf-history,multifactor")
    assert run_cli(*args) == 0
    out = capsys.readouterr().out
    assert "Jain over time" in out and "to date physics" in out and "drf-history" in out
    config = tmp_path / "config.yaml"
    config.write_text("history: {half_life: 1d, weight: 0}\n")
    assert run_cli(*args, "--config", str(config), "--format", "json", "--no-series") == 0
    data = json.loads(capsys.readouterr().out)
    by_policy = {p["policy"]: p for p in data["policies"]}
    # Weight 0: drf-history is drf, figure for figure.
    assert by_policy["drf-history"]["jain"] == by_policy["drf"]["jain"]
    assert by_policy["drf-history"]["jain_over_time"] == by_policy["drf"]["jain_over_time"]
    assert by_policy["drf"]["accounts"][0]["weighted_share_to_date_at_contention_end"] is not None


def test_table_without_drf_history_has_no_history_table() -> None:
    comparison = run_comparison(small_burst(), ["drf", "multifactor"], SimOptions(interval=300))
    assert "Jain over time" not in render_table(comparison)
    assert render_json(comparison, series=False)["policies"][0]["jain_over_time"] is not None
