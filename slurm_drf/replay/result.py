"""One arm's result: what was measured on Slurm, its file, and the simulator's view of it. Pure.

Sits after `replay.run`: `ReplayResult` holds the replayed jobs (with the
submit, start and end times sacct recorded, in trace seconds), the
samples of the cluster, the daemon's writes per cycle, slurmctld's RPCs
and the settings both ran with. `to_sim_result` turns it into the
simulator's `SimResult`, so that `sim.run_metrics` computes every figure of a
replay exactly as it does for a simulation. `render_result` and
`parse_result` are the result file (docs/formats.md, *Replay result*).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Final

import numpy as np

from slurm_drf.replay.trace import ReplayInputError
from slurm_drf.sim.gaming import Piece
from slurm_drf.sim.options import SimResult
from slurm_drf.sim.workload import RESOURCES, AccountTree, NodeType, Workload, WorkloadJob

RESULT_FORMAT: Final = "slurm-drf-replay/1"


@dataclass(frozen=True, slots=True)
class ReplayGame:
    """What one account played (`replay --game`, `sim.gaming`): the strategy, and for every replayed job of
    the account the original job it does part of and its share of that job's work (`sim.gaming.Piece`),
    with the account's original jobs as the honest workload has them. The other accounts' jobs are their
    own originals."""

    strategy: str  # a `sim.gaming.STRATEGIES` name, or "honest"
    account: str
    pieces: Mapping[str, Piece]  # replayed job id -> its original and fraction, the account's jobs only
    originals: tuple[WorkloadJob, ...]  # the account's original jobs the pieces refer to


@dataclass(frozen=True, slots=True)
class ReplayReclaim:
    """One job the daemon's reclaim took (a row of its history's `reclaims`), in trace time."""

    job_id: str  # Slurm's, of the victim
    account: str
    claim_job: str  # the waiting job it was for
    claim_account: str
    at: float  # trace seconds from the replay's start
    lost: Mapping[str, float]  # trace resource-hours of the run it lost, by resource (cpu, mem, gres/gpu)
    outcome: str  # requeued, cancelled, gone, failed


@dataclass(frozen=True, slots=True)
class ReplayResult:
    arm: str
    summary: str
    compression: float
    sample_interval: float  # wall seconds between samples
    workload: Workload  # the jobs submitted, their `submit` as sacct recorded it (trace seconds)
    job_ids: tuple[str, ...]  # Slurm's, one per workload job
    start: tuple[float, ...]  # trace seconds
    end: tuple[float, ...]
    capacity: tuple[int, int, int]  # cpu, mem, gres/gpu of the pool
    # Per sample: when it was taken (trace seconds from the start), each account's running cpu, mem,
    # gres/gpu and its pending jobs (accounts as workload.accounts).
    sample_time: tuple[float, ...]
    sample_used: tuple[tuple[tuple[int, int, int], ...], ...]
    sample_pending: tuple[tuple[int, ...], ...]
    writes_per_cycle: tuple[int, ...] | None  # None: no daemon (the slurm arm)
    rpcs: Mapping[str, int]  # slurmctld's RPCs during the arm, by message type (sdiag)
    slurm_settings: tuple[str, ...]  # as slurmctld ran them
    slurm_version: str | None
    daemon_config: Mapping[str, Any] | None
    backend: str
    notes: tuple[str, ...] = ()
    wall_seconds: float = 0.0
    # The Unix user each job was submitted as (one per workload job; empty in files of before), and how
    # they were chosen (`--users`: trace, invoking, pool; "" in files of before).
    submitted_as: tuple[str, ...] = ()
    users: str = ""
    # What the daemon's reclaim took (drf-reclaim; empty for the other arms and in files of before).
    reclaims: tuple[ReplayReclaim, ...] = ()
    # What one account played (`--game`); None: the workload as it is (and in files of before).
    game: ReplayGame | None = None
    # The nodes each job ran on, Slurm's host list ("" never started; empty in files of before).
    node_lists: tuple[str, ...] = ()

    @property
    def interval(self) -> float:
        """Trace seconds between samples."""
        return self.sample_interval * self.compression

    @property
    def rpcs_total(self) -> int:
        return sum(self.rpcs.values())

    def rpcs_per_cycle(self) -> float:
        """slurmctld's RPCs per daemon cycle (per sample for the slurm arm), the replay's own reads included."""
        cycles = len(self.writes_per_cycle) if self.writes_per_cycle else len(self.sample_pending)
        return self.rpcs_total / cycles if cycles else math.nan


def requeued_runs(result: ReplayResult) -> tuple[tuple[int, float, float], ...]:
    """The requeues as the simulator records them: (job, when, how long it had run), trace seconds.

    The run is the victim's lost CPU-hours over its CPUs; a victim not among the replay's jobs is left out.
    """
    index = {job_id: i for i, job_id in enumerate(result.job_ids)}
    out = []
    for reclaim in result.reclaims:
        job = index.get(reclaim.job_id)
        if reclaim.outcome != "requeued" or job is None:
            continue
        cpus = result.workload.jobs[job].cpu * result.workload.jobs[job].nodes
        ran = reclaim.lost.get("cpu", 0.0) * 3600.0 / cpus if cpus else 0.0
        out.append((job, reclaim.at, ran))
    return tuple(out)


def to_sim_result(result: ReplayResult) -> SimResult:
    """The replay as the simulator's result of one policy (named as the arm)."""
    workload = result.workload
    accounts = workload.accounts
    weights = np.array([float(workload.weight(a)) for a in accounts], dtype=np.float64)
    index = {a: i for i, a in enumerate(accounts)}
    samples = len(result.sample_pending)
    used = np.array(result.sample_used, dtype=np.int64).reshape(samples, len(accounts), len(RESOURCES))
    caps = np.maximum(np.array(result.capacity, dtype=np.float64), 1.0)
    share = (used / caps).max(axis=2) / weights if samples else np.zeros((0, len(accounts)))
    jobs = len(workload.jobs)
    return SimResult(
        policy=result.arm,
        workload=workload,
        interval=result.interval,
        accounts=accounts,
        weights=tuple(float(w) for w in weights),
        capacity=result.capacity,
        job_account=np.array([index[j.account] for j in workload.jobs], dtype=np.int64),
        submit=np.array([j.submit for j in workload.jobs], dtype=np.float64),
        start=np.array(result.start, dtype=np.float64),
        end=np.array(result.end, dtype=np.float64),
        backfilled=np.zeros(jobs, dtype=np.bool_),
        job_nodes=tuple(() for _ in range(jobs)),
        sample_time=np.array(result.sample_time, dtype=np.float64),
        sample_share=np.asarray(share, dtype=np.float64),
        sample_pending=np.array(result.sample_pending, dtype=np.int64).reshape(samples, len(accounts)),
        sample_used=used.sum(axis=1) if samples else np.zeros((0, len(RESOURCES)), dtype=np.int64),
        event_times=None,
        plans=len(result.writes_per_cycle or ()),
        passes=0,
        writes=None if result.writes_per_cycle is None else np.array(result.writes_per_cycle, dtype=np.int64),
        requeued=requeued_runs(result),
    )


def render_workload_jobs(workload: Workload) -> dict[str, Any]:
    tree = workload.tree
    return {
        "name": workload.name,
        "description": workload.description,
        "seed": workload.seed,
        "nodes": workload.node_count,
        "node_tres": workload.node_type.tres(),
        "weights": {a: str(w) for a, w in workload.weights.items()},
        "tree": None
        if tree is None
        else {"parents": dict(tree.parents), "weights": {p: str(w) for p, w in tree.weights.items()}},
        "notes": list(workload.notes),
    }


def _render_job(job: WorkloadJob) -> dict[str, Any]:
    """A job's trace fields as a result file has them (a `jobs` row adds what Slurm did with it)."""
    return {
        "trace_id": job.job_id,
        "account": job.account,
        "user": job.user,
        "submit_s": round(job.submit, 3),
        "duration_s": job.duration,
        "limit_s": job.limit,
        "cpu": job.cpu,
        "mem": job.mem,
        "gpu": job.gpu,
        "nodes": job.nodes,
    }


def _parse_job(j: Mapping[str, Any]) -> WorkloadJob:
    return WorkloadJob(
        job_id=str(j["trace_id"]),
        account=str(j["account"]),
        user=str(j["user"]),
        submit=float(j["submit_s"]),
        duration=float(j["duration_s"]),
        limit=float(j["limit_s"]),
        cpu=int(j["cpu"]),
        mem=int(j["mem"]),
        gpu=int(j["gpu"]),
        nodes=int(j["nodes"]),
    )


def render_game(game: ReplayGame | None) -> dict[str, Any] | None:
    """The `game` block of a result file (None: no account played a strategy)."""
    if game is None:
        return None
    return {
        "strategy": game.strategy,
        "account": game.account,
        "pieces": {job_id: {"original": p.original, "fraction": p.fraction} for job_id, p in game.pieces.items()},
        "originals": [_render_job(job) for job in game.originals],
    }


def parse_game(data: Any) -> ReplayGame | None:
    """A result file's `game` block back (None when absent, as in files of before)."""
    if data is None:
        return None
    return ReplayGame(
        strategy=str(data["strategy"]),
        account=str(data["account"]),
        pieces=MappingProxyType(
            {str(k): Piece(str(v["original"]), float(v["fraction"])) for k, v in data["pieces"].items()}
        ),
        originals=tuple(_parse_job(j) for j in data["originals"]),
    )


def render_result(
    result: ReplayResult, metrics: Mapping[str, Any], predicted: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The result file's data: everything measured, the figures, and the simulator's prediction."""
    submitted_as = result.submitted_as
    jobs = [
        {
            **_render_job(job),
            "job_id": job_id,
            **({"submitted_as": submitted_as[index]} if index < len(submitted_as) else {}),
            "start_s": None if not math.isfinite(start) else round(start, 3),
            "end_s": None if not math.isfinite(end) else round(end, 3),
            **({"node_list": result.node_lists[index]} if index < len(result.node_lists) else {}),
        }
        for index, (job, job_id, start, end) in enumerate(
            zip(result.workload.jobs, result.job_ids, result.start, result.end, strict=True)
        )
    ]
    return {
        "format": RESULT_FORMAT,
        "arm": result.arm,
        "summary": result.summary,
        "compression": result.compression,
        "sample_interval_s": result.sample_interval,
        "interval_trace_s": result.interval,
        "wall_seconds": round(result.wall_seconds, 1),
        "backend": result.backend,
        "slurm_version": result.slurm_version,
        "slurm_settings": list(result.slurm_settings),
        "daemon_config": None if result.daemon_config is None else dict(result.daemon_config),
        "notes": list(result.notes),
        "users": result.users,
        "workload": render_workload_jobs(result.workload),
        "capacity": dict(zip(RESOURCES, result.capacity, strict=True)),
        "accounts": list(result.workload.accounts),
        "jobs": jobs,
        "samples": {
            "time_s": [round(t, 3) for t in result.sample_time],
            "used": [[list(u) for u in sample] for sample in result.sample_used],
            "pending": [list(p) for p in result.sample_pending],
        },
        "writes_per_cycle": None if result.writes_per_cycle is None else list(result.writes_per_cycle),
        "rpcs": dict(result.rpcs),
        "rpcs_total": result.rpcs_total,
        "rpcs_per_cycle": None if math.isnan(result.rpcs_per_cycle()) else round(result.rpcs_per_cycle(), 1),
        "reclaims": [
            {
                "job_id": r.job_id,
                "account": r.account,
                "claim_job": r.claim_job,
                "claim_account": r.claim_account,
                "at_s": round(r.at, 3),
                "lost_hours": dict(r.lost),
                "outcome": r.outcome,
            }
            for r in result.reclaims
        ],
        "game": render_game(result.game),
        "metrics": dict(metrics),
        "predicted": None if predicted is None else dict(predicted),
    }


def _time(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan


def parse_result(data: Any, source: str) -> ReplayResult:
    """A result file's data back (for `replay --report`); one line naming the file when it is not one."""
    try:
        if not isinstance(data, dict) or data.get("format") != RESULT_FORMAT:
            raise ValueError(f"not a replay result (format {RESULT_FORMAT})")
        w = data["workload"]
        tree = w.get("tree")
        jobs = tuple(_parse_job(j) for j in data["jobs"])
        node = w["node_tres"]
        workload = Workload(
            name=str(w["name"]),
            description=str(w["description"]),
            jobs=jobs,
            node_count=int(w["nodes"]),
            node_type=NodeType(int(node["cpu"]), int(node["mem"]), int(node["gres/gpu"])),
            weights=MappingProxyType({str(a): Fraction(v) for a, v in w["weights"].items()}),
            seed=w.get("seed"),
            notes=tuple(str(n) for n in w.get("notes", ())),
            tree=None
            if tree is None
            else AccountTree(
                MappingProxyType(dict(tree["parents"])),
                MappingProxyType({str(p): Fraction(v) for p, v in tree["weights"].items()}),
            ),
        )
        capacity = data["capacity"]
        samples = data["samples"]
        writes = data["writes_per_cycle"]
        return ReplayResult(
            arm=str(data["arm"]),
            summary=str(data["summary"]),
            compression=float(data["compression"]),
            sample_interval=float(data["sample_interval_s"]),
            workload=workload,
            job_ids=tuple(str(j["job_id"]) for j in data["jobs"]),
            start=tuple(_time(j["start_s"]) for j in data["jobs"]),
            end=tuple(_time(j["end_s"]) for j in data["jobs"]),
            capacity=(int(capacity["cpu"]), int(capacity["mem"]), int(capacity["gres/gpu"])),
            sample_time=tuple(float(t) for t in samples["time_s"]),
            sample_used=tuple(tuple((int(c), int(m), int(g)) for c, m, g in s) for s in samples["used"]),
            sample_pending=tuple(tuple(int(p) for p in s) for s in samples["pending"]),
            writes_per_cycle=None if writes is None else tuple(int(x) for x in writes),
            rpcs=MappingProxyType({str(k): int(v) for k, v in data["rpcs"].items()}),
            slurm_settings=tuple(str(s) for s in data["slurm_settings"]),
            slurm_version=data.get("slurm_version"),
            daemon_config=data.get("daemon_config"),
            backend=str(data.get("backend", "")),
            notes=tuple(str(n) for n in data.get("notes", ())),
            wall_seconds=float(data.get("wall_seconds", 0.0)),
            submitted_as=tuple(str(j["submitted_as"]) for j in data["jobs"])
            if data["jobs"] and "submitted_as" in data["jobs"][0]
            else (),
            users=str(data.get("users", "")),
            node_lists=tuple(str(j["node_list"]) for j in data["jobs"])
            if data["jobs"] and "node_list" in data["jobs"][0]
            else (),
            reclaims=tuple(
                ReplayReclaim(
                    job_id=str(r["job_id"]),
                    account=str(r["account"]),
                    claim_job=str(r["claim_job"]),
                    claim_account=str(r["claim_account"]),
                    at=float(r["at_s"]),
                    lost=MappingProxyType({str(k): float(v) for k, v in r["lost_hours"].items()}),
                    outcome=str(r["outcome"]),
                )
                for r in data.get("reclaims", ())
            ),
            game=parse_game(data.get("game")),
        )
    except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as error:
        raise ReplayInputError(f"{source}: {error}") from None
