"""The history database: schema and migrations, recording, retention, queries, the verb."""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import sqlite3
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict, Unpack

import pytest

from slurm_drf.config.settings import Config, HistoryConfig
from slurm_drf.cycle.run import CycleReport
from slurm_drf.errors import ConfigError, InputError, SlurmReadError, StateError
from slurm_drf.model.types import Snapshot
from slurm_drf.policy.plan import Plan
from slurm_drf.trail.audit_query import AuditQuery, parse_since, query_history, render_audit
from slurm_drf.trail.history_db import (
    HISTORY_FILE,
    MIGRATIONS,
    SCHEMA_VERSION,
    AuditRecorder,
    error_kind,
    migrate,
    open_history,
    open_history_readonly,
    prune,
    record_cycle,
)
from tests.helpers import build_cycle_report, run_observe_verb
from tests.unit.builders import job, node, snapshot

DAY = 86400.0
NOW = 1_796_000_000.0  # 2026-11-30T...


def _report(plan: Plan, snapshot: Snapshot, *, dry_run: bool = False) -> CycleReport:
    return build_cycle_report(
        plan, snapshot, refusal="Access/permission denied", read_seconds=0.25, seconds=0.5, deferred=0, dry_run=dry_run
    )


# --- schema ---------------------------------------------------------------------------------


def test_new_database_is_migrated_wal_and_private(tmp_path: Path) -> None:
    path = tmp_path / HISTORY_FILE
    connection = open_history(path)
    try:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == len(MIGRATIONS)
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"cycles", "shares", "writes", "errors"} <= tables
    finally:
        connection.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    # Opening again migrates nothing and keeps the data.
    connection = open_history(path)
    assert migrate(connection) == SCHEMA_VERSION
    connection.close()


def _version_2_history(path: Path, planned: tuple[Plan, Snapshot]) -> None:
    """A history as slurm-drf wrote it at schema 2: the first two migrations, then a recorded cycle."""
    connection = sqlite3.connect(path, isolation_level=None)
    for step in MIGRATIONS[:2]:
        for statement in step:
            connection.execute(statement)
    connection.execute("PRAGMA user_version = 2")
    record_cycle(connection, _report(*planned), NOW)
    connection.close()


def test_a_version_2_history_is_read_before_and_after_its_migration(
    tmp_path: Path, planned: tuple[Plan, Snapshot]
) -> None:
    from slurm_drf.trail.history_db import HistoryLedger
    from slurm_drf.trail.past import HistoryPast

    path = tmp_path / HISTORY_FILE
    _version_2_history(path, planned)
    config = Config(history=HistoryConfig(half_life_s=DAY, weight=1.0))
    # Version 3 only adds an index, 4 the compacted hours, 5 the reclaims: audit, the past and the ledger read
    # version 2 alike.
    before = open_history_readonly(path)
    writes = query_history(before, AuditQuery("writes"))
    before.close()
    past = HistoryPast(tmp_path, clock=lambda: NOW + 60.0).past(config)
    ledger = HistoryLedger(tmp_path).writes_of([w["job"] for w in writes])
    assert writes and past and ledger
    connection = open_history(path)  # what the daemon's next cycle does
    try:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
        indexes = {r[1] for r in connection.execute("PRAGMA index_list(writes)")}
        assert "writes_cycle" in indexes
        assert connection.execute("SELECT count(*) FROM hours").fetchone()[0] == 0
        assert query_history(connection, AuditQuery("writes")) == writes
    finally:
        connection.close()
    assert HistoryPast(tmp_path, clock=lambda: NOW + 60.0).past(config) == past
    assert HistoryLedger(tmp_path).writes_of([w["job"] for w in writes]) == ledger


def test_pruning_finds_the_writes_of_a_cycle_by_index(tmp_path: Path) -> None:
    """ON DELETE CASCADE looks up writes.cycle_id for every deleted cycle: without an index, a scan of all writes."""
    connection = open_history(tmp_path / HISTORY_FILE)
    try:
        plan = connection.execute("EXPLAIN QUERY PLAN SELECT 1 FROM writes WHERE cycle_id = ?", (1,)).fetchall()
    finally:
        connection.close()
    assert any("USING COVERING INDEX writes_cycle" in str(row[-1]) for row in plan)


def test_migrations_run_in_order_from_any_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import slurm_drf.trail.history_db as audit

    path = tmp_path / HISTORY_FILE
    open_history(path).close()
    # A release adds version 2: an existing version-1 file is taken to it, once.
    monkeypatch.setattr(audit, "MIGRATIONS", (*MIGRATIONS, ("ALTER TABLE cycles ADD COLUMN host TEXT",)))
    monkeypatch.setattr(audit, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    connection = open_history(path)
    columns = [r[1] for r in connection.execute("PRAGMA table_info(cycles)")]
    assert columns[-1] == "host"
    assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    connection.close()
    open_history(path).close()  # not applied twice (ALTER would fail)


def test_failed_migration_leaves_the_old_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import slurm_drf.trail.history_db as audit

    path = tmp_path / HISTORY_FILE
    open_history(path).close()
    monkeypatch.setattr(audit, "MIGRATIONS", (*MIGRATIONS, ("CREATE TABLE extra (x)", "NOT SQL")))
    monkeypatch.setattr(audit, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises(sqlite3.Error):
        open_history(path)
    connection = sqlite3.connect(path)
    assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert not connection.execute("SELECT name FROM sqlite_master WHERE name = 'extra'").fetchall()
    connection.close()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / HISTORY_FILE
    connection = sqlite3.connect(path)
    connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    connection.close()
    with pytest.raises(StateError, match="newer than this slurm-drf"):
        open_history(path)
    with pytest.raises(StateError, match="upgrade slurm-drf"):
        open_history_readonly(path)


def test_missing_history_is_a_state_error(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="no history yet"):
        open_history_readonly(tmp_path / HISTORY_FILE)


# --- recording ------------------------------------------------------------------------------


def test_cycle_records_shares_and_every_write_with_its_outcome(tmp_path: Path, planned: tuple[Plan, Snapshot]) -> None:
    plan, snapshot = planned
    report = _report(plan, snapshot)
    connection = open_history(tmp_path / HISTORY_FILE)
    cycle = record_cycle(connection, report, NOW)
    writes = query_history(connection, AuditQuery("writes"))
    jobs = {j.job_id: j for j in plan.jobs}
    assert [w["job"] for w in writes] == [w.job_id for w in report.writes]
    outcomes = {w["job"]: w["outcome"] for w in writes}
    assert outcomes == {
        "203": "applied",
        "201": "applied",
        "207": "applied",
        "205": "applied",
        "204": "gone",
        "202": "failed",
    }
    for row in writes:
        job = jobs[row["job"]]
        assert (row["cycle"], row["account"], row["user"], row["pool"], row["mode"]) == (
            cycle,
            job.account,
            job.user,
            job.pool,
            "nice",
        )
        assert (row["old"], row["new"], row["level"], row["order"], row["tie"]) == (
            job.current,
            job.value,
            job.level,
            job.order,
            job.tie,
        )
        assert row["time"] == "2026-11-30T00:53:20Z"
        assert row["message"] == ("Access/permission denied" if row["job"] == "202" else None)
    shares = query_history(connection, AuditQuery("shares"))
    # By pool name, then rank.
    accounts = sorted(plan.accounts, key=lambda a: (a.pool, a.rank))
    assert [(s["pool"], s["account"]) for s in shares] == [(a.pool, a.account) for a in accounts]
    for row, account in zip(shares, accounts, strict=True):
        assert (row["rank"], row["weight"], row["running"], row["pending"]) == (
            account.rank,
            float(account.weight),
            account.running_jobs,
            account.pending_jobs,
        )
        assert (row["dominant_share"], row["weighted_share"]) == (account.dominant_share, account.weighted_share)
        assert row["shares"] == dict(account.shares) and row["usage"] == dict(account.usage)
        assert row["dominant"] == (account.dominant_resource if account.dominant_share else None)
    (cycle_row,) = query_history(connection, AuditQuery("cycles"))
    assert (cycle_row["cycle"], cycle_row["pending"], cycle_row["writes_planned"], cycle_row["dry_run"]) == (
        cycle,
        6,
        6,
        False,
    )
    assert (cycle_row["read_seconds"], cycle_row["seconds"], cycle_row["cluster"]) == (0.25, 0.5, "drftest")
    connection.close()


def test_dry_run_records_shares_but_no_writes(tmp_path: Path, planned: tuple[Plan, Snapshot]) -> None:
    plan, snapshot = planned
    connection = open_history(tmp_path / HISTORY_FILE)
    record_cycle(connection, _report(plan, snapshot, dry_run=True), NOW)
    assert query_history(connection, AuditQuery("writes")) == []
    assert len(query_history(connection, AuditQuery("shares"))) == len(plan.accounts)
    assert query_history(connection, AuditQuery("cycles"))[0]["dry_run"] is True
    connection.close()


def test_retention_deletes_only_old_rows(tmp_path: Path, planned: tuple[Plan, Snapshot]) -> None:
    plan, snapshot = planned
    connection = open_history(tmp_path / HISTORY_FILE)
    record_error_at = [NOW - 100 * DAY, NOW - DAY]
    for moment in record_error_at:
        record_cycle(connection, _report(plan, snapshot), moment)
        connection.execute("INSERT INTO errors (time, kind, message) VALUES (?, 'slurm_read', 'x')", (moment,))
    deleted = prune(connection, NOW - 90 * DAY)
    assert deleted == 6 + len(plan.accounts) + 1 + 1
    for table in ("writes", "shares", "cycles", "errors"):
        times = {r["time"] for r in query_history(connection, AuditQuery(table))}
        assert times == {"2026-11-29T00:53:20Z"}, table
    connection.close()


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_recorder_records_prunes_and_logs_errors(tmp_path: Path, planned: tuple[Plan, Snapshot]) -> None:
    plan, snapshot = planned
    clock = _Clock(NOW - 100 * DAY)
    recorder = AuditRecorder(tmp_path / "state", 90, clock=clock)
    recorder.on_cycle(_report(plan, snapshot))
    clock.now = NOW
    recorder.on_error(SlurmReadError("squeue: timed out"))
    recorder.on_error(RuntimeError("boom"))
    recorder.on_cycle(_report(plan, snapshot))  # prunes the cycle of 100 days ago
    connection = open_history_readonly(tmp_path / "state" / HISTORY_FILE)
    cycles = query_history(connection, AuditQuery("cycles"))
    assert [c["time"] for c in cycles] == ["2026-11-30T00:53:20Z"]
    errors = query_history(connection, AuditQuery("errors"))
    assert [(e["kind"], e["message"]) for e in errors] == [("slurm_read", "squeue: timed out"), ("internal", "boom")]
    connection.close()
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o750


def test_retention_days_none_keeps_everything(tmp_path: Path, planned: tuple[Plan, Snapshot]) -> None:
    plan, snapshot = planned
    clock = _Clock(NOW - 1000 * DAY)
    recorder = AuditRecorder(tmp_path, None, clock=clock)
    recorder.on_cycle(_report(plan, snapshot))
    clock.now = NOW
    recorder.on_cycle(_report(plan, snapshot))
    connection = open_history_readonly(tmp_path / HISTORY_FILE)
    assert len(query_history(connection, AuditQuery("cycles"))) == 2
    connection.close()


def test_recorder_never_raises_for_its_own_trouble(
    tmp_path: Path, planned: tuple[Plan, Snapshot], caplog: pytest.LogCaptureFixture
) -> None:
    plan, snapshot = planned
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    recorder = AuditRecorder(blocked, 90)
    with caplog.at_level(logging.WARNING):
        recorder.on_cycle(_report(plan, snapshot))
        recorder.on_error(SlurmReadError("x"))
    assert sum("cannot record" in r.message for r in caplog.records) == 2


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (SlurmReadError("x"), "slurm_read"),
        (ConfigError("x"), "config"),
        (StateError("x"), "state"),
        (InputError("x"), "input"),
        (ValueError("x"), "internal"),
    ],
)
def test_error_kinds_are_bounded_labels(error: Exception, kind: str) -> None:
    assert error_kind(error) == kind


# --- queries --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7d", NOW - 7 * DAY),
        ("12h", NOW - 12 * 3600),
        ("30m", NOW - 1800),
        ("2w", NOW - 14 * DAY),
        ("90s", NOW - 90),
        ("1.5d", NOW - 1.5 * DAY),
        ("2026-11-30", 1_796_083_200.0 - DAY),
        ("2026-12-01T00:00:00Z", 1_796_083_200.0),
        ("2026-12-01T01:00:00+01:00", 1_796_083_200.0),
        ("2026-12-01 00:00", 1_796_083_200.0),
    ],
)
def test_parse_since(text: str, expected: float) -> None:
    assert parse_since(text, NOW) == expected


@pytest.mark.parametrize("text", ["yesterday", "7x", "-3d", "2026-13-01", ""])
def test_parse_since_refuses_nonsense(text: str) -> None:
    with pytest.raises(InputError, match="--since"):
        parse_since(text, NOW)


@pytest.fixture
def history(tmp_path: Path, planned: tuple[Plan, Snapshot]) -> sqlite3.Connection:
    plan, snapshot = planned
    connection = open_history(tmp_path / HISTORY_FILE)
    for moment in (NOW - 10 * DAY, NOW - 2 * DAY, NOW):
        record_cycle(connection, _report(plan, snapshot), moment)
    return connection


class _Filters(TypedDict, total=False):
    table: str
    since: float
    account: str
    job: str
    pool: str


def test_query_filters(history: sqlite3.Connection) -> None:
    def count(**kw: Unpack[_Filters]) -> int:
        return len(query_history(history, AuditQuery(**kw)))

    assert count() == 18
    assert count(since=NOW - 3 * DAY) == 12
    assert count(account="physics") == 6
    assert count(job="202") == 3
    assert count(job="202", since=NOW - DAY) == 1
    assert count(pool="cpu") == 6
    assert count(table="shares", account="chemistry") == 6
    assert count(table="shares", pool="gpu", since=NOW) == 4
    rows = query_history(history, AuditQuery(limit=2))
    assert [(r["time"], r["job"]) for r in rows] == [("2026-11-30T00:53:20Z", "207"), ("2026-11-30T00:53:20Z", "205")]
    assert count(table="cycles", since=NOW - 5 * DAY) == 2


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (AuditQuery("shares", job="1"), "--job selects writes"),
        (AuditQuery("cycles", account="a"), "--account selects"),
        (AuditQuery("errors", pool="p"), "--pool selects"),
        (AuditQuery("nothing"), "unknown history table"),
    ],
)
def test_query_refuses_filters_that_do_not_apply(history: sqlite3.Connection, query: AuditQuery, message: str) -> None:
    with pytest.raises(InputError, match=message):
        query_history(history, query)


def test_renderings_agree(history: sqlite3.Connection) -> None:
    records = query_history(history, AuditQuery("writes", job="202"))
    assert json.loads(render_audit(records, "json")) == records
    rows = list(csv.DictReader(io.StringIO(render_audit(records, "csv"))))
    assert [r["job"] for r in rows] == ["202"] * 3
    assert [int(r["new"]) for r in rows] == [r["new"] for r in records]
    assert [float(r["level"]) for r in rows] == [r["level"] for r in records]
    table = render_audit(records, "table")
    assert table.splitlines()[0].split() == [
        "time",
        "cycle",
        "job",
        "account",
        "user",
        "pool",
        "mode",
        "old",
        "new",
        "level",
        "order",
        "tie",
        "outcome",
        "message",
        "own_nice",
    ]
    assert len(table.splitlines()) == 2 + 3
    shares = query_history(history, AuditQuery("shares", account="physics"))
    flat = list(csv.DictReader(io.StringIO(render_audit(shares, "csv"))))
    assert float(flat[0]["share:gres/gpu"]) == 0.375 and flat[0]["usage:cpu"] == "24"
    assert "share:gres/gpu" in render_audit(shares, "table") and "usage:cpu" not in render_audit(shares, "table")
    assert render_audit([], "table", "errors") == "no errors recorded for this query\n"


# --- the verb -------------------------------------------------------------------------------


def test_audit_verb_reads_a_closed_database(
    tmp_path: Path, planned: tuple[Plan, Snapshot], capsys: pytest.CaptureFixture[str]
) -> None:
    plan, snapshot = planned
    AuditRecorder(tmp_path, 90).on_cycle(_report(plan, snapshot))
    # Closed cleanly: no -wal / -shm files; a read-only open must still work.
    assert sorted(p.name for p in tmp_path.iterdir()) == [HISTORY_FILE]
    assert run_observe_verb(["audit", "--state-dir", str(tmp_path), "--account", "physics", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["job"] for r in rows} == {"201", "204"}
    assert (
        run_observe_verb(
            ["audit", "shares", "--state-dir", str(tmp_path), "--pool", "cpu", "--format", "csv", "--since", "1d"]
        )
        == 0
    )
    assert [r["account"] for r in csv.DictReader(io.StringIO(capsys.readouterr().out))] == [
        "newteam",
        "biology",
        "chemistry",
    ]
    # SQLite gives the WAL index files a reader may create the database file's mode.
    for name in os.listdir(tmp_path):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o640, name


def test_audit_verb_errors(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="no history yet"):
        run_observe_verb(["audit", "--state-dir", str(tmp_path)])
    with pytest.raises(InputError, match="--since"):
        run_observe_verb(["audit", "--state-dir", str(tmp_path), "--since", "soon"])


def _within(seconds: float, call: Callable[[], object]) -> object:
    """call() in a thread that must end within `seconds`: a FIFO would block it for ever."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as error:
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked on a file that is not a file"
    return outcome[0]


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm", "-journal"])
def test_a_fifo_at_the_history_is_refused_without_hanging(
    tmp_path: Path,
    suffix: str,
    planned: tuple[Plan, Snapshot],
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 22, item 6: a FIFO (or a device) where SQLite opens a file by name is refused, never waited on."""
    from slurm_drf.cli.main import main
    from slurm_drf.cycle.recall import Recall
    from slurm_drf.policy.state import PolicyState
    from slurm_drf.trail.history_db import HistoryLedger, open_history_readonly
    from slurm_drf.trail.past import HistoryPast

    path = tmp_path / HISTORY_FILE
    if suffix:
        AuditRecorder(tmp_path, None).on_cycle(_report(*planned))
    os.mkfifo(f"{path}{suffix}", 0o600)
    shown = "the history database" + (f" ({suffix[1:]})" if suffix else "")
    expected = f"{path}{suffix}: {shown} is not a regular file (prw-------)"
    error = _within(20, lambda: open_history_readonly(path))
    assert isinstance(error, StateError) and str(error) == expected
    recorder = AuditRecorder(tmp_path, None)
    _within(20, lambda: recorder.on_cycle(_report(*planned)))
    assert expected in caplog.text
    assert isinstance(_within(20, lambda: HistoryLedger(tmp_path).writes_of(["1"])), StateError)
    lone = snapshot([node(cpu=4)], [job("a", job_id="1", nice=-2_000_000_000, cpu=1)])
    result = _within(20, lambda: Recall(HistoryLedger(tmp_path)).reconcile(lone, PolicyState()))
    assert isinstance(result, tuple)
    state, found = result
    assert found.ledger_error == expected and not state.jobs["1"].own_known
    _within(20, lambda: HistoryPast(tmp_path).past(Config(history=HistoryConfig(86400.0, 1.0))))
    code = _within(20, lambda: main(["audit", "--state-dir", str(tmp_path)]))
    assert code == 1 and capsys.readouterr().err.strip() == f"slurm-drf: state: {expected}"
