"""The cycle's reclaim step (cycle/reclaim.py, docs/rule.md §9): claims, victims, outcomes, the record.

Slurm's side (what runs where, the requeue) is a test double here: the
reader and the requeue against a real slurmctld are tested live
(tests/integration/test_live_requeue.py).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

import pytest

from slurm_drf.config.settings import Amounts, Config, ReclaimConfig
from slurm_drf.cycle.reclaim import ReclaimView, node_partitions, run_reclaim
from slurm_drf.model.types import Snapshot
from slurm_drf.policy.plan import compute_plan
from slurm_drf.slurm.parse.running import RunningJob
from slurm_drf.slurm.running import Outcome, Way
from slurm_drf.trail.audit_query import AuditQuery, query_history
from slurm_drf.trail.history_db import moved_since, open_history, record_cycle
from tests.unit.builders import job, node, snapshot

RESOURCES = ("cpu", "mem", "gres/gpu")
NOW = time.time()
HOUR = 3600.0


class FakeSlurm:
    """What runs where, as slurm.running would read it, and a requeue that records what it was asked."""

    def __init__(self, running: Sequence[RunningJob], free: Mapping[str, tuple[int, ...]], shot: Snapshot) -> None:
        self.running = list(running)
        self.free = dict(free)
        self.snapshot = shot
        self.asked: list[tuple[tuple[str, ...], str]] = []
        self.moved: dict[str, float] = {}

    def view(self, partitions: Sequence[str], shot: Snapshot) -> ReclaimView:
        return ReclaimView(self.free, node_partitions(shot), tuple(self.running))

    def apply(self, victims: Sequence[RunningJob], way: Way) -> Sequence[Outcome]:
        self.asked.append((tuple(v.job_id for v in victims), way))
        return [Outcome(v.job_id, "done") for v in victims]

    def moved_since(self, since: float) -> Mapping[str, float]:
        return {j: t for j, t in self.moved.items() if t >= since}


def _hog(job_id: str, node_name: str, started_hours_ago: float, **kwargs: object) -> RunningJob:
    values: dict[str, object] = {"qos": "normal", "requeueable": True, "partition": "gpu"}
    values.update(kwargs)
    return RunningJob(
        job_id,
        "hog",
        "hogger",
        str(values["partition"]),
        str(values["qos"]),
        NOW - started_hours_ago * HOUR,
        bool(values["requeueable"]),
        MappingProxyType({node_name: (16, 64_000, 4)}),
        job_id,
    )


def _cluster(newcomer_waited: float = 20 * 60, **reclaim: object) -> tuple[Config, Snapshot, FakeSlurm]:
    """Two nodes of 8 GPUs, each full with two of hog's 4-GPU jobs; newcomer (guaranteed 8 GPUs) waits."""
    nodes = [node(f"g{i}", partitions=("gpu",), cpu=64, mem=512_000, gpu=8) for i in (1, 2)]
    started = {"r1": 30.0, "r2": 20.0, "r3": 10.0, "r4": 5.0}  # hours ago: r4 is the newest
    where = {"r1": "g1", "r2": "g2", "r3": "g1", "r4": "g2"}
    jobs = [job("hog", state="RUNNING", partition="gpu", job_id=j, cpu=16, mem=64_000, gpu=4, node=1) for j in started]
    jobs += [job("hog", partition="gpu", job_id="h1", cpu=16, gpu=4, node=1, submit_time=NOW - 5 * HOUR)]
    jobs += [
        job("newcomer", partition="gpu", job_id=f"n{i}", cpu=16, gpu=4, node=1, submit_time=NOW - newcomer_waited)
        for i in (1, 2, 3)
    ]
    shot = snapshot(nodes, jobs)
    settings = {"pools": ("default",), "after": 600.0, "min_runtime": 600.0, "max_per_cycle": 4}
    settings.update(reclaim)
    config = Config(
        resources=RESOURCES,
        guarantees=MappingProxyType({"newcomer": Amounts(amounts=MappingProxyType({"gres/gpu": 8}))}),
        reclaim=ReclaimConfig(**settings),  # type: ignore[arg-type]
    )
    running = [_hog(j, where[j], started[j]) for j in started]
    free = {"g1": (32, 384_000, 0), "g2": (32, 384_000, 0)}
    return config, shot, FakeSlurm(running, free, shot)


def _run(config: Config, shot: Snapshot, slurm: FakeSlurm, dry_run: bool = False):  # type: ignore[no-untyped-def]
    return run_reclaim(compute_plan(shot, config), shot, config, slurm, dry_run, now=NOW)


def test_a_job_within_its_guarantee_that_waited_gets_the_newest_job_on_one_node_requeued_for_it() -> None:
    config, shot, slurm = _cluster()
    done = _run(config, shot, slurm)
    # n1 and n2 fit in newcomer's 8 GPUs; each needs one 4-GPU job gone, the newest first: r4, then r3.
    assert [(r.victim, r.claim, r.outcome) for r in done] == [("r4", "n1", "requeued"), ("r3", "n2", "requeued")]
    assert slurm.asked == [(("r4", "r3"), "requeue")]
    first = done[0]
    assert (first.victim_account, first.victim_user, first.claim_account, first.nodes) == (
        "hog",
        "hogger",
        "newcomer",
        ("g2",),
    )
    assert first.lost_hours["gres/gpu"] == pytest.approx(4 * 5.0, rel=1e-3)
    assert first.victim_share > first.claim_share


def test_nothing_before_after_nor_below_min_runtime_nor_exempt_nor_within_cooldown() -> None:
    config, shot, slurm = _cluster(newcomer_waited=60)
    assert _run(config, shot, slurm) == ()
    config, shot, slurm = _cluster(min_runtime=20 * HOUR)
    # Only r1 (30 h) and r2 (20 h) may go; one of them frees a node for n1, the other for n2.
    assert sorted(r.victim for r in _run(config, shot, slurm)) == ["r1", "r2"]
    config, shot, slurm = _cluster(exempt_qos=frozenset({"vip"}))
    slurm.running = [_hog(r.job_id, next(iter(r.allocation)), (NOW - r.start) / HOUR, qos="vip") for r in slurm.running]
    assert _run(config, shot, slurm) == ()
    config, shot, slurm = _cluster()
    slurm.moved = {"r4": NOW - 60, "r3": NOW - 60}
    assert sorted(r.victim for r in _run(config, shot, slurm)) == ["r1", "r2"]
    assert slurm.asked == [(("r2", "r1"), "requeue")]


def test_at_most_max_per_cycle_and_a_dry_run_requeues_nothing() -> None:
    config, shot, slurm = _cluster(max_per_cycle=1)
    assert [r.victim for r in _run(config, shot, slurm)] == ["r4"]
    config, shot, slurm = _cluster()
    would = _run(config, shot, slurm, dry_run=True)
    assert [(r.victim, r.outcome) for r in would] == [("r4", "would"), ("r3", "would")]
    assert slurm.asked == []


def test_a_job_that_cannot_be_requeued_is_spared_unless_cancel_is_the_way() -> None:
    config, shot, slurm = _cluster()
    slurm.running = [
        _hog(r.job_id, next(iter(r.allocation)), (NOW - r.start) / HOUR, requeueable=False) for r in slurm.running
    ]
    assert _run(config, shot, slurm) == ()
    config, shot, slurm = _cluster(way="cancel")
    slurm.running = [
        _hog(r.job_id, next(iter(r.allocation)), (NOW - r.start) / HOUR, requeueable=r.job_id != "r4")
        for r in slurm.running
    ]
    done = _run(config, shot, slurm)
    assert [(r.victim, r.outcome) for r in done] == [("r4", "cancelled"), ("r3", "requeued")]
    assert slurm.asked == [(("r3",), "requeue"), (("r4",), "cancel")]


def test_the_step_says_when_no_running_job_may_be_a_victim(caplog: pytest.LogCaptureFixture) -> None:
    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]

    config, shot, slurm = _cluster(exempt_qos=frozenset({"vip"}), exempt_partitions=frozenset({"gpu"}))
    slurm.running = [
        _hog("r1", "g1", 30.0, qos="vip", partition="cpu"),
        _hog("r2", "g2", 20.0, requeueable=False, partition="cpu"),
        _hog("r3", "g1", 10.0),
        _hog("r4", "g2", 5.0, qos="vip"),
    ]
    with caplog.at_level("WARNING"):
        assert _run(config, shot, slurm) == ()
    assert warnings() == [
        "reclaim: pool default: no running job there may be a victim: 3 of 4 are exempt (2 by their QOS, "
        "reclaim.exempt_qos; 1 by their partition, reclaim.exempt_partitions), any other cannot be "
        "requeued: reclaim frees nothing there"
    ]
    caplog.clear()
    # One that may go: no warning (and it goes).
    slurm.running[2] = _hog("r3", "g1", 10.0, partition="cpu")
    with caplog.at_level("WARNING"):
        assert [r.victim for r in _run(config, shot, slurm)] == ["r3"]
    assert warnings() == []
    config, shot, slurm = _cluster()
    slurm.running = [_hog(r.job_id, next(iter(r.allocation)), 1.0, requeueable=False) for r in slurm.running]
    with caplog.at_level("WARNING"):
        assert _run(config, shot, slurm) == ()
    assert [w.split(":")[1] for w in warnings()] == [" pool default"]
    assert "none of its 4 running jobs can be requeued" in warnings()[0]


def test_every_reclaim_is_a_history_row_found_by_either_job_and_read_back_as_the_cooldown(tmp_path: Path) -> None:
    from dataclasses import replace

    from tests.helpers import build_cycle_report

    config, shot, slurm = _cluster()
    plan = compute_plan(shot, config)
    done = run_reclaim(plan, shot, config, slurm, False, now=NOW)
    report = build_cycle_report(plan, shot, refusal="denied", read_seconds=0.1, seconds=0.2, deferred=0)
    connection = open_history(tmp_path / "history.sqlite")
    try:
        record_cycle(connection, replace(report, reclaimed=done), NOW)
        record_cycle(connection, replace(report, reclaimed=done, dry_run=True), NOW + 1)  # a dry run records none
        by_claim = query_history(connection, AuditQuery(table="reclaims", job="n1"))
        by_victim = query_history(connection, AuditQuery(table="reclaims", job="r4"))
        assert by_claim == by_victim
        (row,) = by_claim
        assert (row["job"], row["for_job"], row["outcome"], row["nodes"]) == ("r4", "n1", "requeued", "g2")
        assert (row["account"], row["user"], row["for_account"]) == ("hog", "hogger", "newcomer")
        assert row["lost"]["gres/gpu"] == pytest.approx(20.0, rel=1e-3)
        assert len(query_history(connection, AuditQuery(table="reclaims", account="hog"))) == 2
        assert moved_since(connection, NOW - 1) == {"r4": NOW, "r3": NOW}
        assert moved_since(connection, NOW + 0.5) == {}
    finally:
        connection.close()


def test_once_says_each_victim_in_one_line_and_the_metrics_count_them_and_the_work_lost() -> None:
    from dataclasses import replace

    from slurm_drf.trail.plan_output import reclaim_lines
    from slurm_drf.trail.prometheus import MetricsRecorder
    from tests.helpers import build_cycle_report, parse_samples

    config, shot, slurm = _cluster()
    plan = compute_plan(shot, config)
    done = run_reclaim(plan, shot, config, slurm, False, now=NOW)
    first = reclaim_lines(done)[0]
    assert first.startswith(
        "reclaim: requeued job r4 (hog, hogger, on g2, weighted share 1.0000) for job n1 (newcomer,"
    )
    assert "(newcomer, 0.0000), within its guarantee; lost 80.0 cpu-hours, 3200" in first
    assert first.endswith(" mem-hours, 20.0 gres/gpu-hours")
    assert reclaim_lines([replace(done[0], outcome="would")])[0].startswith("reclaim: would requeue job r4 ")
    recorder = MetricsRecorder(clock=lambda: NOW)
    report = build_cycle_report(plan, shot, refusal="denied", read_seconds=0.1, seconds=0.2, deferred=0)
    recorder.on_cycle(replace(report, reclaimed=done))
    samples = parse_samples(recorder.render().decode())
    assert samples[("slurm_drf_reclaims_total", (("outcome", "requeued"), ("pool", "default")))] == 2
    lost = samples[("slurm_drf_reclaim_lost_hours_total", (("pool", "default"), ("resource", "gres/gpu")))]
    assert lost == pytest.approx(4 * 5.0 + 4 * 10.0, rel=1e-3)


def test_a_history_from_before_reclaims_has_none_and_no_cooldown(tmp_path: Path) -> None:
    from slurm_drf.trail.history_db import MIGRATIONS, RECLAIMS_VERSION

    connection = sqlite3.connect(tmp_path / "history.sqlite")
    try:
        for step in MIGRATIONS[: RECLAIMS_VERSION - 1]:
            for statement in step:
                connection.execute(statement)
        connection.execute(f"PRAGMA user_version = {RECLAIMS_VERSION - 1}")
        assert query_history(connection, AuditQuery(table="reclaims")) == []
        assert moved_since(connection, 0.0) == {}
    finally:
        connection.close()


def test_a_claim_that_fits_in_what_is_free_holds_that_room_for_the_claims_after_it() -> None:
    # g1 has room for one 4-GPU job: n1 takes it without a victim, so n2 needs one (the newest, r4 on g2).
    config, shot, slurm = _cluster()
    slurm.free = {"g1": (32, 384_000, 4), "g2": (32, 384_000, 0)}
    slurm.running = [r for r in slurm.running if r.job_id != "r3"]
    done = _run(config, shot, slurm)
    assert [(r.victim, r.claim) for r in done] == [("r4", "n2")]
