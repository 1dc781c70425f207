"""The simulator: invariants of the event loop and scheduler, reproducibility,
the fairness claims of docs/evaluation.md, and the trace importers."""

from __future__ import annotations

import argparse
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from slurm_drf.cli.simulate import add_simulate_parser
from slurm_drf.sim.compare import run_comparison
from slurm_drf.sim.engine import simulate
from slurm_drf.sim.importers import (
    build_trace_workload,
    load_workload,
    parse_sacct_json,
    parse_sacct_pipe,
    parse_swf,
)
from slurm_drf.sim.naive import naive_order, naive_share
from slurm_drf.sim.options import SimOptions, SimResult
from slurm_drf.sim.policies import DEFAULT_POLICIES, POLICIES, DrfPolicy, build_policy
from slurm_drf.sim.render import render_json, render_table
from slurm_drf.sim.run_metrics import compute_metrics, jain_index
from slurm_drf.sim.scenarios import SCENARIOS, build_scenario
from slurm_drf.sim.workload import NodeType, Workload, WorkloadError, WorkloadJob, parse_duration, parse_mem
from slurm_drf.slurm.sacct import parse_elapsed, parse_sacct_table
from tests.paths import FIXTURES

FIXTURES = FIXTURES / "sim"


def check_invariants(result: SimResult) -> None:
    """Every job ran once, to completion, never before its submission; no node
    was ever over-allocated; time never went back."""
    workload = result.workload
    jobs = workload.jobs
    assert np.all(np.isfinite(result.start)) and np.all(np.isfinite(result.end))
    assert np.all(result.start >= result.submit)
    durations = np.array([j.duration for j in jobs])
    assert np.allclose(result.end - result.start, durations)
    for job, nodes in zip(jobs, result.job_nodes, strict=True):
        assert len(nodes) == job.nodes == len(set(nodes))
    # Sweep every node's allocations in time; at equal times ends come first.
    node = workload.node_type
    capacity = np.array([node.cpu, node.mem, node.gpu])
    events: list[tuple[float, int, int, tuple[int, int, int]]] = []
    for index, (job, nodes) in enumerate(zip(jobs, result.job_nodes, strict=True)):
        for n in nodes:
            events.append((float(result.start[index]), 1, n, (job.cpu, job.mem, job.gpu)))
            events.append((float(result.end[index]), 0, n, (-job.cpu, -job.mem, -job.gpu)))
    events.sort()
    used = np.zeros((workload.node_count, 3), dtype=np.int64)
    for _, _, n, delta in events:
        used[n] += delta
        assert np.all(used[n] <= capacity), f"node {n} over-allocated"
        assert np.all(used[n] >= 0)
    assert np.all(used == 0)
    if result.event_times is not None:
        assert len(result.event_times) > 0
        assert np.all(np.diff(result.event_times) >= 0)
    assert np.all(np.diff(result.sample_time) > 0)


def small(name: str = "mixed", seed: int = 7, nodes: int = 6, jobs: int = 300) -> Workload:
    return build_scenario(name, seed, nodes=nodes, jobs=jobs)


# --------------------------------------------------------------------------
# Invariants


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("scenario", ["mixed", "bursty"])
def test_invariants_hold_for_every_policy(policy: str, scenario: str) -> None:
    result = simulate(small(scenario), build_policy(policy), SimOptions(interval=300, record_events=True))
    check_invariants(result)
    assert len(result.start) == len(result.workload.jobs)


@pytest.mark.parametrize("backfill", ["easy", "slurm"])
def test_invariants_with_multi_node_jobs_and_early_ends(backfill: str) -> None:
    jobs = tuple(
        WorkloadJob(
            f"j{i}",
            f"a{i % 3}",
            "u",
            submit=float(i * 30),
            duration=float(600 + 97 * (i % 5)),
            limit=float(600 + 97 * (i % 5)) * (1.5 if i % 2 else 1.0),
            cpu=16 * (1 + i % 4),
            mem=64_000,
            gpu=i % 3,
            nodes=1 + i % 3,
        )
        for i in range(60)
    )
    workload = Workload(
        "multi", "multi-node jobs, time limits above run times", jobs, 4, NodeType(cpu=64, mem=256_000, gpu=4)
    )
    for policy in POLICIES:
        check_invariants(
            simulate(workload, build_policy(policy), SimOptions(interval=120, record_events=True, backfill=backfill))
        )


def test_easy_backfill_protects_the_top_job() -> None:
    """One node of 64 CPUs. A holds 48 until t=100; B (64 CPUs) is the top job and
    gets a reservation at t=100; C (16 CPUs, ends by t=52) backfills at once; D
    (16 CPUs for 200 s) would delay B, so it waits until B is done."""

    def job(name: str, submit: float, cpu: int, duration: float) -> WorkloadJob:
        return WorkloadJob(name, "acct", "u", submit, duration, duration, cpu, 1000, 0)

    workload = Workload(
        "easy",
        "EASY backfill",
        (job("A", 0, 48, 100), job("B", 1, 64, 100), job("C", 2, 16, 50), job("D", 3, 16, 200)),
        1,
        NodeType(cpu=64, mem=64_000, gpu=0),
    )
    result = simulate(workload, build_policy("fifo"), SimOptions(interval=60))
    starts = dict(zip([j.job_id for j in result.workload.jobs], result.start.tolist(), strict=True))
    assert starts == {"A": 0.0, "B": 100.0, "C": 2.0, "D": 200.0}
    assert result.backfilled.tolist() == [False, False, True, False]


def test_a_job_that_can_never_fit_is_refused() -> None:
    job = WorkloadJob("big", "a", "u", 0.0, 10.0, 10.0, cpu=128, mem=1, gpu=0)
    with pytest.raises(WorkloadError, match="big"):
        simulate(Workload("w", "", (job,), 2, NodeType(cpu=64, mem=1000, gpu=0)), build_policy("fifo"))


# --------------------------------------------------------------------------
# Reproducibility and the engine paths


def test_same_seed_gives_identical_json() -> None:
    def run(seed: int) -> bytes:
        comparison = run_comparison(small(seed=seed), POLICIES, SimOptions(interval=120))
        return json.dumps(render_json(comparison), sort_keys=True).encode()

    first = run(11)
    assert first == run(11)
    assert first != run(12)


@pytest.mark.parametrize("scenario", ["mixed", "tie", "bursty", "weighted"])
def test_fast_engine_orders_exactly_as_compute_plan(scenario: str) -> None:
    """The fast drf path calls compute_plan's own lower-level functions on the
    simulator's arrays: every tick's order and every start must be the same."""
    workload = build_scenario(scenario, 5, nodes=6, jobs=700 if scenario == "tie" else 300)
    runs = []
    for engine in ("plan", "fast"):
        policy = DrfPolicy(engine=engine)
        policy.history = []
        result = simulate(workload, policy, SimOptions(interval=120))
        runs.append((policy.history, result.start))
    assert runs[0][0] == runs[1][0]
    assert len(runs[0][0]) > 10
    assert np.array_equal(runs[0][1], runs[1][1])


# --------------------------------------------------------------------------
# Fairness: what docs/evaluation.md claims


def test_drf_keeps_jain_above_095_on_mixed() -> None:
    """The default scenario, as `slurm-drf simulate` runs it."""
    workload = build_scenario("mixed", 1)
    metrics = {p: compute_metrics(simulate(workload, build_policy(p, engine="fast"))) for p in ("fifo", "drf")}
    assert metrics["drf"].jain >= 0.95
    assert metrics["drf"].fairness_samples > 100
    assert metrics["fifo"].jain < metrics["drf"].jain - 0.1


def test_drf_naive_starves_the_last_account_of_tie_and_drf_does_not() -> None:
    workload = build_scenario("tie", 1, nodes=16, jobs=3000)
    last = workload.accounts[-1]
    metrics = {p: compute_metrics(simulate(workload, build_policy(p, engine="fast"))) for p in ("drf", "drf-naive")}

    def account(policy: str, name: str) -> tuple[float, float]:
        row = next(a for a in metrics[policy].accounts if a.account == name)
        return row.wait_p50, row.mean_share

    naive_wait, naive_share_ = account("drf-naive", last)
    drf_wait, drf_share = account("drf", last)
    naive_median_wait = float(np.median([a.wait_p50 for a in metrics["drf-naive"].accounts]))
    naive_median_share = float(np.median([a.mean_share for a in metrics["drf-naive"].accounts]))
    drf_median_share = float(np.median([a.mean_share for a in metrics["drf"].accounts]))
    # drf-naive: the last account by name waits far longer and gets far less.
    assert naive_wait > 3 * naive_median_wait
    assert naive_share_ < 0.5 * naive_median_share
    first_wait, _ = account("drf-naive", workload.accounts[0])
    assert first_wait < naive_wait / 10
    # drf: the same account is served like the others.
    assert drf_wait < naive_wait / 3
    assert drf_share > 0.8 * drf_median_share
    assert metrics["drf"].jain > metrics["drf-naive"].jain + 0.15


def test_naive_loop_uses_whole_percents_and_names() -> None:
    capacity = [1000, 1000, 0]
    # 0.5% and 0.9% are both 0 whole percents: the name decides, again and again.
    assert naive_share([5, 0, 0], capacity, Fraction(1)) == 0
    assert naive_share([9, 0, 0], capacity, Fraction(1)) == 0
    assert naive_share([19, 0, 0], capacity, Fraction(1, 2)) == 3
    order = naive_order(
        [[0, 1], [2, 3]],
        [[9, 0, 0], [5, 0, 0]],
        [[1, 0, 0]] * 4,
        [1, 1, 1, 1],
        capacity,
        [Fraction(1), Fraction(1)],
        ["b-first-by-usage", "a-first-by-name"],
    )
    assert order == [2, 3, 0, 1]


def test_jain_index() -> None:
    assert jain_index(np.array([0.3, 0.3, 0.3])) == pytest.approx(1.0)
    assert jain_index(np.array([1.0, 0.0, 0.0, 0.0])) == pytest.approx(0.25)
    assert math.isnan(jain_index(np.array([0.0, 0.0])))


def test_every_scenario_builds_reproducibly() -> None:
    for name in SCENARIOS:
        first = build_scenario(name, 3, nodes=4, jobs=250)
        assert first.jobs == build_scenario(name, 3, nodes=4, jobs=250).jobs
        assert len(first.jobs) == 250
    weighted = build_scenario("weighted", 1, nodes=4, jobs=100)
    assert weighted.weight("alpha") == 2 and weighted.weight("beta") == 1
    assert any(j.array_id for j in build_scenario("bursty", 1, nodes=4, jobs=100).jobs)


# --------------------------------------------------------------------------
# Importers


def test_sacct_parsable() -> None:
    trace = parse_sacct_pipe((FIXTURES / "sacct-parsable.txt").read_text(), "sacct-parsable.txt")
    jobs = {j.job_id: j for j in trace.jobs}
    assert sorted(jobs) == ["1001", "1002", "1003_0", "1003_1", "1005", "1007"]
    assert trace.skipped == {"job steps": 6, "never started": 2}
    gpu = jobs["1001"]
    assert (gpu.account, gpu.user, gpu.cpu, gpu.mem, gpu.gpu, gpu.nodes) == ("gputeam", "alice", 8, 65536, 2, 1)
    assert (gpu.duration, gpu.limit) == (3600, 7200)
    wide = jobs["1005"]
    assert (wide.nodes, wide.cpu, wide.mem, wide.duration) == (2, 64, 128_000, 7200)
    array = jobs["1003_0"]
    assert (array.array_id, array.array_index, array.mem) == ("1003", 0, 32000)
    assert jobs["1007"].limit == jobs["1007"].duration == 1800  # UNLIMITED: plan with the run time
    workload = build_trace_workload(trace, "sacct-parsable.txt")
    assert workload.jobs[0].submit == 0 and workload.node_count >= 2
    check_invariants(simulate(workload, build_policy("drf"), SimOptions(interval=60)))


@pytest.mark.parametrize("name", ["sacct-22.05.json", "sacct-23.11.json"])
def test_sacct_json(name: str) -> None:
    trace = parse_sacct_json((FIXTURES / name).read_text(), name)
    jobs = {j.job_id: j for j in trace.jobs}
    assert trace.skipped == {"never started": 2 if name.startswith("sacct-22") else 1}
    if name.startswith("sacct-22"):
        assert sorted(jobs) == ["11", "12", "13_0", "13_1", "15"]
        assert (jobs["11"].gpu, jobs["11"].mem, jobs["11"].limit) == (2, 65536, 7200)
        assert (jobs["15"].nodes, jobs["15"].cpu) == (2, 64)
        assert jobs["13_1"].array_id == "13"
    else:
        assert sorted(jobs) == ["21", "22_3", "23"]
        assert jobs["21"].gpu == 4  # gres/gpu and gres/gpu:a100 are the same GPUs
        assert jobs["21"].limit == 7200 and jobs["23"].mem == 262144
    workload = load_workload(str(FIXTURES / name))
    check_invariants(simulate(workload, build_policy("multifactor"), SimOptions(interval=60)))


def test_swf() -> None:
    trace = parse_swf((FIXTURES / "sample.swf").read_text(), "sample.swf")
    assert trace.node_count == 4 and trace.node_type is not None and trace.node_type.cpu == 64
    jobs = {j.job_id: j for j in trace.jobs}
    assert sorted(jobs) == ["1", "2", "3", "5", "6"]
    assert trace.skipped == {"no run time": 1}
    assert (jobs["1"].account, jobs["1"].user, jobs["1"].cpu, jobs["1"].mem) == ("g1", "u101", 64, 131072)
    assert (jobs["3"].nodes, jobs["3"].cpu, jobs["3"].limit) == (2, 64, 14400)
    assert jobs["5"].cpu == 8  # allocated processors unknown: the requested ones
    assert jobs["6"].limit == jobs["6"].duration == 2700  # ran past its request
    workload = load_workload(str(FIXTURES / "sample.swf"))
    assert workload.node_count == 4
    check_invariants(simulate(workload, build_policy("fifo"), SimOptions(interval=60)))


def test_importers_name_what_is_wrong() -> None:
    with pytest.raises(WorkloadError, match="header lacks"):
        parse_sacct_pipe("JobID|User\n1|bob\n", "x")
    with pytest.raises(WorkloadError, match=r"x:2: 3 fields"):
        parse_sacct_pipe("JobID|Account|Submit|Elapsed|AllocTRES\n1|a|2026-01-01T00:00:00\n", "x")
    with pytest.raises(WorkloadError, match="18"):
        parse_swf("1 2 3\n", "t.swf")
    with pytest.raises(WorkloadError, match="jobs"):
        parse_sacct_json("{}", "j.json")
    with pytest.raises(WorkloadError, match="no job to simulate"):
        build_trace_workload(parse_sacct_pipe("JobID|Account|Submit|Elapsed|AllocTRES\n", "e"), "e")


def test_small_parsers() -> None:
    assert parse_elapsed("1-02:03:04") == 93784
    assert parse_elapsed("05:06") == 306
    assert parse_elapsed("UNLIMITED") is None
    assert parse_mem("64G") == 65536 and parse_mem("4000M") == 4000 and parse_mem("512") == 512
    assert parse_duration("15m") == 900 and parse_duration("2d") == 172800


SACCT_HEADER = "JobID|Account|Submit|Start|Elapsed|AllocTRES\n"


def test_sacct_tres_is_read_by_the_daemons_reader() -> None:
    row = "7|a|2026-01-01T00:00:00|1767225601|01:00:00|billing=4,cpu=4,gres/gpu:a100=1,gres/gpu:v100=1,mem=1T,node=1\n"
    [record] = parse_sacct_table(SACCT_HEADER + row, "t")
    assert record.allocated == {
        "billing": 4,
        "cpu": 4,
        "mem": 1024**2,
        "node": 1,
        "gres/gpu": 2,
        "gres/gpu:a100": 1,
        "gres/gpu:v100": 1,
    }
    assert (record.job_id, record.account, record.start, record.elapsed) == ("7", "a", 1767225601, 3600)
    assert (record.end, record.limit, record.nodes, record.requested) == (None, None, None, {})
    [job] = parse_sacct_pipe(SACCT_HEADER + row, "t").jobs
    assert (job.cpu, job.gpu, job.mem) == (4, 2, 1024**2)


SUBMITTED = "2026-01-01T00:00:00|1767225601"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("7|a|yesterday|1767225601|01:00|cpu=1", "x:2: job 7: expected a time such as 2026-11-30T01:00:00"),
        (f"7|a|{SUBMITTED}|01:00|cpu=lots", "x:2: job 7: AllocTRES: cpu=lots is not an amount from 0 to"),
        (f"7|a|{SUBMITTED}|01:00|cpu=-1", "x:2: job 7: AllocTRES: cpu=-1 is not an amount from 0 to"),
    ],
)
def test_sacct_rows_that_cannot_be_read_name_the_line_and_job(row: str, message: str) -> None:
    with pytest.raises(WorkloadError) as caught:
        parse_sacct_pipe(SACCT_HEADER + row + "\n", "x")
    assert str(caught.value).startswith(message)


# --------------------------------------------------------------------------
# The verb


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="slurm-drf")
    add_simulate_parser(parser.add_subparsers(dest="verb"))
    args = parser.parse_args(["simulate", *argv])
    code: int = args.func(args)
    return code


def test_cli_json_table_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("--nodes", "4", "--jobs", "150", "--format", "json", "--no-series") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == "slurm-drf-simulation/1"
    assert [p["policy"] for p in data["policies"]] == list(DEFAULT_POLICIES)
    assert run_cli("--workload", str(FIXTURES / "sample.swf"), "--policies", "drf,fifo") == 0
    out = capsys.readouterr().out
    assert "sample.swf" in out and "drf" in out and "Jain" in out
    pytest.importorskip("matplotlib")
    png, page = tmp_path / "s.png", tmp_path / "s.html"
    assert (
        run_cli("--scenario", "weighted", "--nodes", "4", "--jobs", "120", "--plot", str(png), "--html", str(page)) == 0
    )
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "data:image/png;base64," in page.read_text()


def test_cli_refuses_bad_options() -> None:
    with pytest.raises(WorkloadError, match="unknown nope"):
        run_cli("--policies", "drf,nope")
    with pytest.raises(WorkloadError, match="leave out --scenario"):
        run_cli("--workload", str(FIXTURES / "sample.swf"), "--scenario", "tie")
    with pytest.raises(WorkloadError, match="duration"):
        run_cli("--interval", "soon")


def test_table_lists_first_and_last_accounts_of_many() -> None:
    comparison = run_comparison(build_scenario("tie", 2, nodes=4, jobs=400), ["drf"], SimOptions(interval=300))
    table = render_table(comparison)
    assert "acct000" in table and "acct199" in table and "more" in table
