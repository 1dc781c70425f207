"""Replay results side by side, and the simulator's prediction of each. Pure (but for the simulation it runs).

Sits after `replay.run`: `predict` plays the replayed jobs (their measured
submission times) in the simulator under the policy that models the arm,
cut where the replay stopped sampling; `build_comparison` puts arms (and
predictions) into the simulator's `Comparison`, so the replay's tables,
JSON and HTML page are the simulator's own renderers; `render_calibration`
sets each measured figure beside its prediction. Names in a result file
(arms, accounts, notes) are shown as the simulator shows them, control
characters escaped (`model.escape.terminal_text`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from slurm_drf.config.settings import Config
from slurm_drf.model.escape import terminal_text
from slurm_drf.replay.arms import (
    ARMS,
    SLURM_CALC_PERIOD_WALL,
    SLURM_HALF_LIFE,
    TRACE_INTERVAL,
    WEIGHT_AGE,
    WEIGHT_FAIRSHARE,
    parse_arm,
)
from slurm_drf.replay.result import ReplayResult, to_sim_result
from slurm_drf.sim.compare import Comparison, choose_engine
from slurm_drf.sim.daemon_loop import SlurmSide
from slurm_drf.sim.engine import simulate
from slurm_drf.sim.options import SimOptions, SimResult
from slurm_drf.sim.policies import MultifactorPolicy, Policy, build_policy
from slurm_drf.sim.render import (
    SAMPLE_INTERVAL,
    html_table,
    html_text,
    render_aligned,
    render_html,
    render_table,
)
from slurm_drf.sim.run_metrics import PolicyMetrics, compute_metrics
from slurm_drf.sim.workload import Workload, format_duration

PREDICTED_PREFIX = "sim:"
# What the simulator misses on a live Slurm, measured on the sandbox (docs/evaluation.md, *On a real
# Slurm*): slurmctld starts a job about a wall second after the resources it takes were freed (the
# scheduler's pass after the job's end, the launch), so in trace time every job holds its resources
# that much longer; Slurm's backfill reserves for every job it tests, as the simulator's
# `--backfill slurm` does, to bf_max_job_test's default depth; and Slurm's fair share is
# recalculated every PriorityCalcPeriod, a wall minute however compressed the trace.
START_LATENCY_WALL = 1.0
PREDICTION_OPTIONS = SimOptions(interval=TRACE_INTERVAL, backfill="slurm", backfill_depth=500)
# The site model of the Slurm every arm runs against (`arms.build_slurm_lines`): fair share and age
# weighted as there, no QOS factor and no urgent jobs (a replay submits every job in the default QOS).
REPLAY_SITE = SlurmSide(weight_age=WEIGHT_AGE, weight_qos=0, urgent=0.0, weight_fairshare=WEIGHT_FAIRSHARE)


def cut_result(result: SimResult, until: float) -> SimResult:
    """`result` as if it had stopped at `until` seconds: its samples, policy cycles and requeues before,
    its jobs' times clipped there (a cycle is planned at each sample's tick, so writes follow the samples)."""
    keep = result.sample_time <= until
    writes = result.writes
    if writes is not None and len(writes) == len(keep):
        writes = writes[keep]
    return replace(
        result,
        start=np.minimum(result.start, until),
        end=np.minimum(result.end, until),
        sample_time=result.sample_time[keep],
        sample_share=result.sample_share[keep],
        sample_pending=result.sample_pending[keep],
        sample_used=result.sample_used[keep],
        writes=writes,
        plans=min(result.plans, int(keep.sum())),
        requeued=tuple(r for r in result.requeued if r[1] <= until),
    )


def replay_workload(result: ReplayResult) -> Workload:
    """The replayed jobs on the cluster that ran them: as many nodes as its measured capacity holds.

    A result of this version already describes the cluster (`trace.on_cluster`); one saved before
    carries the trace's node count, which the capacity corrects.
    """
    workload = result.workload
    shape = (workload.node_type.cpu, workload.node_type.mem, workload.node_type.gpu)
    counts = {have // each for have, each in zip(result.capacity, shape, strict=True) if each > 0}
    if len(counts) == 1:
        (nodes,) = counts
        if nodes >= 1 and nodes != workload.node_count:
            return replace(workload, node_count=nodes)
    return workload


def predict(result: ReplayResult, config: Config | None) -> SimResult:
    """The simulator's run of the replayed jobs under the arm's model, over the replay's span.

    It runs on the replay's cluster (the result's workload is the cluster's, `trace.on_cluster`) under
    the replay's Slurm (`REPLAY_SITE`), and stops where the replay stopped sampling.

    Each job holds its resources `START_LATENCY_WALL` wall seconds longer than it runs (module
    constants say why); the prediction's job times are the simulator's.
    """
    arm = parse_arm(result.arm)
    if arm.predicted_by == "multifactor":
        # PriorityCalcPeriod is one wall minute whatever the compression (arms.build_slurm_lines).
        calc_period = SLURM_CALC_PERIOD_WALL * result.compression
        policy: Policy = MultifactorPolicy(SLURM_HALF_LIFE, calc_period, REPLAY_SITE)
    else:
        engine = choose_engine("auto")
        policy = build_policy(arm.predicted_by, config, SLURM_HALF_LIFE, engine, REPLAY_SITE)
    latency = START_LATENCY_WALL * result.compression
    workload = replay_workload(result)
    held = tuple(
        replace(job, duration=job.duration + latency, limit=max(job.limit, job.duration) + latency)
        for job in workload.jobs
    )
    simulated = simulate(replace(workload, jobs=held), policy, PREDICTION_OPTIONS)
    span = result.sample_time[-1] if result.sample_time else 0.0
    return replace(cut_result(simulated, span), policy=PREDICTED_PREFIX + result.arm)


def build_comparison(results: Sequence[ReplayResult], predictions: Sequence[SimResult] = ()) -> Comparison:
    """Arms (then predictions) as one comparison the simulator's renderers show."""
    runs = [to_sim_result(r) for r in results] + list(predictions)
    first = results[0]
    return Comparison(
        workload=first.workload,
        options=SimOptions(interval=first.interval),
        results=tuple(runs),
        metrics=tuple(compute_metrics(r) for r in runs),
        seconds=tuple([r.wall_seconds for r in results] + [0.0] * len(predictions)),
    )


def _figure(value: float, seconds: bool = False) -> str:
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return "never"
    return format_duration(value) if seconds else f"{value:.3f}"


def calibration_rows(measured: PolicyMetrics, predicted: PolicyMetrics) -> list[list[str]]:
    """[figure, measured, predicted] for every figure both have."""
    rows = [
        ["Jain", _figure(measured.jain), _figure(predicted.jain)],
        ["fairness error", _figure(measured.fairness_error), _figure(predicted.fairness_error)],
        [
            "time to fair share",
            _figure(measured.time_to_fair_share, True),
            _figure(predicted.time_to_fair_share, True),
        ],
    ]
    rows.append(["finish-time fairness rho max", _figure(measured.rho_max), _figure(predicted.rho_max)])
    theirs = {a.account: a for a in predicted.accounts}
    for account in measured.accounts:
        other = theirs.get(account.account)
        if other is not None:
            rows.append([f"wait p50 {account.account}", _figure(account.wait_p50, True), _figure(other.wait_p50, True)])
            rows.append([f"rho {account.account}", _figure(account.rho), _figure(other.rho)])
    for resource, value in measured.utilisation.items():
        rows.append([f"util {resource} while waiting", _figure(value), _figure(predicted.utilisation[resource])])
    return rows


def summary_rows(comparison: Comparison, results: Sequence[ReplayResult]) -> tuple[list[str], list[list[str]]]:
    """Fairness error, time to fair share, writes and RPCs per cycle of every arm (and prediction)."""
    header = ["arm", "fairness error", "time to fair share", "rho max", "writes/cycle", "RPCs/cycle", "wall"]
    by_arm = {r.arm: r for r in results}
    rows = []
    for metrics in comparison.metrics:
        result = by_arm.get(metrics.policy)
        rpcs = math.nan if result is None else result.rpcs_per_cycle()
        rows.append(
            [
                metrics.policy,
                _figure(metrics.fairness_error),
                _figure(metrics.time_to_fair_share, True),
                _figure(metrics.rho_max),
                "-" if metrics.writes is None else f"{metrics.writes.mean:.1f}",
                "-" if math.isnan(rpcs) else f"{rpcs:.1f}",
                "-" if result is None else format_duration(result.wall_seconds),
            ]
        )
    return header, rows


def gpu_hours(run: SimResult) -> tuple[float, float, float]:
    """Trace GPU-hours in `run`: its requeues lost, its jobs were served in its span, and its jobs ask for
    (each job's whole run time: what scripts/render-evaluation's reclaim table sets the loss against)."""
    jobs = run.workload.jobs
    lost = sum(ran * jobs[j].gpu * jobs[j].nodes for j, _, ran in run.requeued) / 3600.0
    ran = np.nan_to_num(run.end - run.start, nan=0.0, posinf=0.0, neginf=0.0)
    served = float(sum(r * job.gpu * job.nodes for r, job in zip(ran.tolist(), jobs, strict=True))) / 3600.0
    asked = sum(job.duration * job.gpu * job.nodes for job in jobs) / 3600.0
    return lost, served, asked


def shows_reclaim(results: Sequence[ReplayResult]) -> bool:
    """Whether any arm reclaims (then the reports show what reclaim took, for every arm)."""
    return any(r.reclaims or (r.arm in ARMS and ARMS[r.arm].reclaim) for r in results)


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def reclaim_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """What reclaim took in every arm (and prediction): requeues, jobs requeued more than once, GPU-hours
    lost against those served in the span and against the replayed jobs' whole run times."""
    header = [
        "arm",
        "requeues",
        "jobs requeued",
        "requeued twice",
        "GPU-h lost",
        "served in span",
        "lost/served",
        "lost/jobs' GPU-h",
    ]
    rows = []
    for run in comparison.results:
        moved = [j for j, _, _ in run.requeued]
        counts = {j: moved.count(j) for j in set(moved)}
        lost, served, asked = gpu_hours(run)
        rows.append(
            [
                run.policy,
                str(len(moved)),
                str(len(counts)),
                str(sum(1 for n in counts.values() if n > 1)),
                f"{lost:.1f}",
                f"{served:.1f}",
                _percent(lost, served),
                _percent(lost, asked),
            ]
        )
    return header, rows


def render_text(comparison: Comparison, results: Sequence[ReplayResult]) -> str:
    """The replay for a terminal: the simulator's tables, the replay's figures, calibration, notes."""
    out = [
        render_table(comparison, timings=False, loop=False, interval_label=SAMPLE_INTERVAL, site=False),
        render_aligned(*summary_rows(comparison, results)),
    ]
    if shows_reclaim(results):
        out.append("Reclaim: requeues of the daemon's reclaim (its history) and the GPU-hours they lost")
        out.append(render_aligned(*reclaim_rows(comparison)))
    for index, result in enumerate(results):
        arm = terminal_text(result.arm)
        if len(comparison.metrics) > len(results):
            out.append(f"{arm}: measured against the simulator's prediction")
            predicted = comparison.metrics[len(results) + index]
            out.append(render_aligned(*calibration_table(comparison.metrics[index], predicted)))
        out.extend(f"note ({arm}): {terminal_text(note)}" for note in result.notes)
    return "\n".join(out) + "\n"


def calibration_table(measured: PolicyMetrics, predicted: PolicyMetrics) -> tuple[list[str], list[list[str]]]:
    return ["figure", "measured", "predicted"], calibration_rows(measured, predicted)


def render_replay_html(comparison: Comparison, results: Sequence[ReplayResult], png: bytes) -> str:
    """The simulator's page of the arms, with the replay's figures, calibration and notes before the plot."""
    parts = ["<h2>On the live Slurm</h2>", html_table(*summary_rows(comparison, results))]
    if shows_reclaim(results):
        parts.extend(["<h3>Reclaim</h3>", html_table(*reclaim_rows(comparison))])
    for index, result in enumerate(results):
        if len(comparison.metrics) > len(results):
            parts.append(f"<h3>{html_text(result.arm)}: measured against the simulator's prediction</h3>")
            parts.append(
                html_table(*calibration_table(comparison.metrics[index], comparison.metrics[len(results) + index]))
            )
        parts.extend(f"<p>note ({html_text(result.arm)}): {html_text(note)}</p>" for note in result.notes)
    return render_html(
        comparison,
        png,
        title="slurm-drf replay",
        loop=False,
        extra="\n".join(parts) + "\n",
        interval_label=SAMPLE_INTERVAL,
    )
