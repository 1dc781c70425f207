"""Prometheus metrics, the report files and the observers the config enables."""

from __future__ import annotations

import json
import os
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurm_drf.config.settings import Config
from slurm_drf.cycle.run import CycleReport
from slurm_drf.errors import ConfigError, SlurmReadError, SlurmWriteError
from slurm_drf.model.types import Snapshot
from slurm_drf.policy.plan import Plan
from slurm_drf.trail.compaction import HistoryUpkeep
from slurm_drf.trail.history_db import AuditRecorder
from slurm_drf.trail.observers import LATEST_HTML, LATEST_JSON, ReportWriter, build_observers, close_observers
from slurm_drf.trail.placement import PlacementWriter
from slurm_drf.trail.plan_output import render_plan_json
from slurm_drf.trail.prometheus import MetricsRecorder, parse_address
from slurm_drf.trail.share_report import build_report, render_report_html
from tests.helpers import SampleKey, build_cycle_report, parse_samples
from tests.paths import REPO

BOUNDED_LABELS = {"pool", "account", "resource", "outcome", "kind", "le"}


def _report(plan: Plan, snapshot: Snapshot, *, dry_run: bool = False, seconds: float = 0.5) -> CycleReport:
    return build_cycle_report(
        plan, snapshot, refusal="denied", read_seconds=0.2, seconds=seconds, deferred=3, dry_run=dry_run
    )


def _value(samples: dict[SampleKey, float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_metrics_agree_with_the_plan(planned: tuple[Plan, Snapshot]) -> None:
    plan, snapshot = planned
    recorder = MetricsRecorder(clock=lambda: 1_796_000_000.0)
    recorder.on_cycle(_report(plan, snapshot))
    samples = parse_samples(recorder.render().decode())
    for a in plan.accounts:
        key = {"pool": a.pool, "account": a.account}
        assert _value(samples, "slurm_drf_dominant_share", **key) == a.dominant_share
        assert _value(samples, "slurm_drf_weighted_share", **key) == a.weighted_share
        assert _value(samples, "slurm_drf_running_jobs", **key) == a.running_jobs
        assert _value(samples, "slurm_drf_pending_jobs", **key) == a.pending_jobs
        assert _value(samples, "slurm_drf_account_rank", **key) == a.rank
        for resource in plan.resources:
            assert _value(samples, "slurm_drf_resource_share", resource=resource, **key) == a.shares[resource]
    per_account = [k for k in samples if k[0] == "slurm_drf_weighted_share"]
    assert len(per_account) == len(plan.accounts)
    assert _value(samples, "slurm_drf_pool_capacity", pool="gpu", resource="gres/gpu") == 16
    assert _value(samples, "slurm_drf_writes_total", outcome="applied") == 4
    assert _value(samples, "slurm_drf_writes_total", outcome="gone") == 1
    assert _value(samples, "slurm_drf_writes_total", outcome="failed") == 1
    assert _value(samples, "slurm_drf_cycle_duration_seconds_count") == 1
    assert _value(samples, "slurm_drf_cycle_duration_seconds_sum") == 0.5
    assert _value(samples, "slurm_drf_cycle_duration_seconds_bucket", le="0.5") == 1
    assert _value(samples, "slurm_drf_cycle_duration_seconds_bucket", le="0.25") == 0
    assert _value(samples, "slurm_drf_slurm_read_seconds_sum") == 0.2
    assert _value(samples, "slurm_drf_last_success_timestamp_seconds") == 1_796_000_000.0
    assert _value(samples, "slurm_drf_deferred_writes") == 3
    assert _value(samples, "slurm_drf_ordered_jobs") == 6
    assert _value(samples, "slurm_drf_cycles_total") == 1
    assert _value(samples, "slurm_drf_errors_total", kind="slurm_read") == 0


def test_labels_stay_bounded(planned: tuple[Plan, Snapshot]) -> None:
    plan, snapshot = planned
    recorder = MetricsRecorder()
    recorder.on_cycle(_report(plan, snapshot))
    recorder.on_error(SlurmWriteError("x"))
    text = recorder.render().decode()
    users = {j.user for j in snapshot.jobs}
    jobs = {j.job_id for j in snapshot.jobs}
    for family in text_string_to_metric_families(text):
        assert family.name.startswith("slurm_drf_")
        for sample in family.samples:
            assert set(sample.labels) <= BOUNDED_LABELS, sample
            assert not (set(sample.labels.values()) & (users | jobs)), sample


def test_gone_accounts_leave_the_gauges(planned: tuple[Plan, Snapshot]) -> None:
    plan, snapshot = planned
    recorder = MetricsRecorder()
    recorder.on_cycle(_report(plan, snapshot))
    fewer = replace(plan, accounts=tuple(a for a in plan.accounts if a.account != "chemistry"))
    recorder.on_cycle(_report(fewer, snapshot))
    samples = parse_samples(recorder.render().decode())
    accounts = {dict(labels).get("account") for name, labels in samples if name.startswith("slurm_drf_")}
    assert "chemistry" not in accounts
    assert {"physics", "newteam", "biology", "r&d"} <= accounts
    # Counters keep counting across cycles.
    assert _value(samples, "slurm_drf_writes_total", outcome="applied") == 8
    assert _value(samples, "slurm_drf_cycles_total") == 2


def test_dry_run_counts_no_writes_and_errors_count_by_kind(planned: tuple[Plan, Snapshot]) -> None:
    plan, snapshot = planned
    recorder = MetricsRecorder()
    recorder.on_cycle(_report(plan, snapshot, dry_run=True))
    recorder.on_error(SlurmReadError("squeue: timed out"))
    recorder.on_error(SlurmReadError("squeue: timed out"))
    recorder.on_error(KeyError("x"))
    samples = parse_samples(recorder.render().decode())
    assert _value(samples, "slurm_drf_writes_total", outcome="applied") == 0
    assert _value(samples, "slurm_drf_dry_run") == 1
    assert _value(samples, "slurm_drf_errors_total", kind="slurm_read") == 2
    assert _value(samples, "slurm_drf_errors_total", kind="internal") == 1
    assert _value(samples, "slurm_drf_errors_total", kind="slurm_write") == 0


def test_metrics_over_http(planned: tuple[Plan, Snapshot]) -> None:
    plan, snapshot = planned
    recorder = MetricsRecorder(address="127.0.0.1:0")
    recorder.start()
    try:
        assert recorder.port
        recorder.on_cycle(_report(plan, snapshot))
        with urllib.request.urlopen(f"http://127.0.0.1:{recorder.port}/metrics", timeout=10) as response:
            text = response.read().decode()
        samples = parse_samples(text)
        for a in plan.accounts:
            assert _value(samples, "slurm_drf_weighted_share", pool=a.pool, account=a.account) == a.weighted_share
        # Only our registry: no process or platform collectors of other code.
        assert all(name.startswith("slurm_drf_") for name, _ in samples)
    finally:
        recorder.close()
    assert recorder.port is None


def test_port_in_use_is_a_config_error() -> None:
    first = MetricsRecorder(address="127.0.0.1:0")
    first.start()
    try:
        second = MetricsRecorder(address=f"127.0.0.1:{first.port}")
        with pytest.raises(ConfigError, match="cannot listen"):
            second.start()
    finally:
        first.close()


def test_textfile_is_written_atomically(tmp_path: Path, planned: tuple[Plan, Snapshot]) -> None:
    plan, snapshot = planned
    target = tmp_path / "slurm_drf.prom"
    recorder = MetricsRecorder(textfile=str(target))
    recorder.on_cycle(_report(plan, snapshot))
    assert os.listdir(tmp_path) == ["slurm_drf.prom"]
    samples = parse_samples(target.read_text())
    assert _value(samples, "slurm_drf_cycles_total") == 1
    recorder.on_error(SlurmReadError("x"))
    assert _value(parse_samples(target.read_text()), "slurm_drf_errors_total", kind="slurm_read") == 1
    assert oct(target.stat().st_mode & 0o777) == "0o644"


def test_unwritable_textfile_only_warns(
    tmp_path: Path, planned: tuple[Plan, Snapshot], caplog: pytest.LogCaptureFixture
) -> None:
    plan, snapshot = planned
    recorder = MetricsRecorder(textfile=str(tmp_path / "missing" / "x.prom"))
    recorder.on_cycle(_report(plan, snapshot))
    assert "cannot write the metrics textfile" in caplog.text


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:9102", ("127.0.0.1", 9102)),
        ("[::1]:9102", ("::1", 9102)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),
        ("localhost:9", ("localhost", 9)),
        (":9102", ("127.0.0.1", 9102)),
    ],
)
def test_parse_address(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["9102", "host", "a:b", "[::1:9102", "h:99999"])
def test_parse_address_refuses(address: str) -> None:
    with pytest.raises(ConfigError, match="metrics_address"):
        parse_address(address)


# --- report files and the observers of a config --------------------------------------------------


def test_report_writer_writes_both_files(tmp_path: Path, planned: tuple[Plan, Snapshot]) -> None:
    plan, snapshot = planned
    directory = tmp_path / "www" / "drf"
    writer = ReportWriter(directory)
    writer.on_cycle(_report(plan, snapshot))
    assert sorted(os.listdir(directory)) == [LATEST_HTML, LATEST_JSON]
    assert json.loads((directory / LATEST_JSON).read_text()) == json.loads(json.dumps(render_plan_json(plan)))
    assert (directory / LATEST_HTML).read_text() == render_report_html(build_report(plan))
    for name in (LATEST_HTML, LATEST_JSON):
        assert oct((directory / name).stat().st_mode & 0o777) == "0o644"
    writer.on_error(SlurmReadError("x"))  # keeps the last good report
    assert sorted(os.listdir(directory)) == [LATEST_HTML, LATEST_JSON]


def test_report_writer_only_warns(
    tmp_path: Path, planned: tuple[Plan, Snapshot], caplog: pytest.LogCaptureFixture
) -> None:
    plan, snapshot = planned
    blocked = tmp_path / "file"
    blocked.write_text("")
    ReportWriter(blocked / "sub").on_cycle(_report(plan, snapshot))
    assert "cannot write the report files" in caplog.text


def test_build_observers_follows_the_config(tmp_path: Path) -> None:
    observers = build_observers(Config(state_dir=str(tmp_path)))
    assert [type(o) for o in observers] == [AuditRecorder, HistoryUpkeep, PlacementWriter]
    assert [type(o) for o in build_observers(Config(state_dir=str(tmp_path), placement=None))] == [
        AuditRecorder,
        HistoryUpkeep,
    ]
    config = Config(
        state_dir=str(tmp_path),
        report_dir=str(tmp_path / "www"),
        metrics_textfile=str(tmp_path / "m.prom"),
        retention_days=30,
        history_max_mb=2048,
        interval=30.0,
    )
    observers = build_observers(config)
    assert [type(o) for o in observers] == [
        AuditRecorder,
        HistoryUpkeep,
        PlacementWriter,
        ReportWriter,
        MetricsRecorder,
    ]
    audit, upkeep = observers[0], observers[1]
    assert isinstance(audit, AuditRecorder) and audit.retention_days == 30
    assert isinstance(upkeep, HistoryUpkeep) and (upkeep.max_mb, upkeep.max_gap) == (2048, 60.0)
    metrics = observers[4]
    assert isinstance(metrics, MetricsRecorder) and metrics.port is None  # no address: no server


def test_build_observers_starts_and_closes_the_server(tmp_path: Path) -> None:
    observers = build_observers(Config(state_dir=str(tmp_path), metrics_address="127.0.0.1:0"))
    metrics = observers[-1]
    assert isinstance(metrics, MetricsRecorder)
    try:
        assert metrics.port
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics.port}/metrics", timeout=10) as response:
            assert b"slurm_drf_cycles_total 0.0" in response.read()
    finally:
        close_observers(observers)
    assert metrics.port is None


class _Closing:
    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.closed = False

    def on_cycle(self, report: CycleReport) -> None:
        del report

    def on_error(self, error: Exception) -> None:
        del error

    def close(self) -> None:
        self.closed = True
        if self.fail:
            raise OSError("cannot close")


def test_close_observers_closes_the_rest_when_one_fails() -> None:
    observers = [_Closing(fail=True), _Closing(fail=False)]
    failures: list[tuple[object, Exception]] = []
    close_observers(observers, lambda observer, error: failures.append((observer, error)))
    assert [o.closed for o in observers] == [True, True]
    assert [(o, str(e)) for o, e in failures] == [(observers[0], "cannot close")]


# --- the Grafana dashboard is built on these metrics ------------------------------------------------

DASHBOARD = REPO / "etc" / "grafana" / "slurm-drf.json"


def test_dashboard_queries_only_metrics_and_labels_we_export(planned: tuple[Plan, Snapshot]) -> None:
    import re

    plan, snapshot = planned
    recorder = MetricsRecorder()
    recorder.on_cycle(_report(plan, snapshot))
    recorder.on_error(SlurmReadError("x"))
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(recorder.render().decode()):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "slurm-drf"
    expressions = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    expressions += [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    used: set[str] = set()
    for expr in expressions:
        for name, selector in re.findall(r"(slurm_drf_[a-z_]+)(\{[^}]*\})?", expr):
            assert name in labels, f"{name} is not exported"
            used.add(name)
            for label in re.findall(r"([a-z_]+)\s*=~?", selector):
                # `instance` is Prometheus' own target label.
                assert label in labels[name] | {"instance"}, f"{name} has no label {label}"
        for group in re.findall(r"by \(([^)]*)\)", expr):
            assert {g.strip() for g in group.split(",")} <= set().union(*labels.values()) | {"instance"}
    # Every metric the issue names is on the dashboard.
    for name in (
        "slurm_drf_weighted_share",
        "slurm_drf_dominant_share",
        "slurm_drf_pending_jobs",
        "slurm_drf_running_jobs",
        "slurm_drf_cycle_duration_seconds_bucket",
        "slurm_drf_writes_total",
        "slurm_drf_errors_total",
        "slurm_drf_last_success_timestamp_seconds",
        "slurm_drf_slurm_read_seconds_bucket",
    ):
        assert name in used, name
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
