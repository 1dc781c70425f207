"""Reclaims shown (docs/rule.md §9): `explain` of a victim and of a claim from the history, the share
report's section (the last cycle's in report_dir, the history's for `report`), and nothing without them."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import orjson
import pytest

from slurm_drf.cycle.reclaim import Reclaimed
from slurm_drf.trail.history_db import MIGRATIONS, RECLAIMS_VERSION, history_path, open_history, record_cycle
from slurm_drf.trail.observers import LATEST_HTML, ReportWriter
from slurm_drf.trail.reclaim_shown import ReclaimSection, from_reclaimed
from slurm_drf.trail.share_report import build_report, render_report_json, render_report_table
from tests.helpers import REPORT_FIXTURES, build_cycle_report, load_report_plan, run_observe_verb

SNAPSHOT = str(REPORT_FIXTURES / "snapshot.json")
CONFIG = str(REPORT_FIXTURES / "config.yaml")
LOST = MappingProxyType({"cpu": 80.0, "mem": 320_000.0, "gres/gpu": 20.0})


def _victim(victim: str, account: str, user: str, claim: str = "203", outcome: str = "requeued") -> Reclaimed:
    return Reclaimed("gpu", victim, account, user, claim, "newteam", 0.5, 0.0, ("g2",), LOST, True, outcome, "")


# 103 (chemistry, running now) and 104 (r&d) were requeued for 203 (newteam, pending);
# 109 was cancelled and has left the queue; 105's requeue failed.
RECLAIMED = (
    _victim("103", "chemistry", "bob"),
    _victim("104", "r&d", "carol", outcome="cancelled"),
    _victim("109", "chemistry", "bob", claim="207"),
    replace(_victim("105", "biology", "dave", claim="207", outcome="failed"), message="Job is not requeueable"),
)


def _history(directory: Path) -> None:
    plan, snapshot = load_report_plan()
    report = build_cycle_report(plan, snapshot, refusal="denied", read_seconds=0.1, seconds=0.2, deferred=0)
    connection = open_history(history_path(directory))
    try:
        record_cycle(connection, replace(report, reclaimed=RECLAIMED), 1_760_000_000.0)
    finally:
        connection.close()


def _explain(directory: Path | None, job: str, capsys: pytest.CaptureFixture[str], fmt: str = "json") -> Any:
    where = [] if directory is None else ["--state-dir", str(directory)]
    code = run_observe_verb(["explain", job, "--snapshot", SNAPSHOT, "--config", CONFIG, "--format", fmt, *where])
    assert code == 0
    out = capsys.readouterr().out
    return orjson.loads(out) if fmt == "json" else out


def test_explain_of_a_victim_says_whom_it_was_requeued_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _history(tmp_path)
    data = _explain(tmp_path, "103", capsys)
    assert data["status"] == "running"
    (event,) = data["reclaims"]
    assert event["role"] == "victim"
    assert (event["job"], event["account"], event["for_job"], event["for_account"]) == (
        "103",
        "chemistry",
        "203",
        "newteam",
    )
    assert (event["share"], event["for_share"], event["outcome"], event["time"]) == (
        0.5,
        0.0,
        "requeued",
        "2025-10-09T08:53:20Z",
    )
    assert event["lost"] == dict(LOST)
    text = _explain(tmp_path, "103", capsys, "text")
    assert "2025-10-09T08:53:20Z: requeued on g2 to make room for job 203 of account newteam" in text
    assert "weighted shares before: chemistry 0.5000, newteam 0.0000" in text
    assert "work lost: 80.0 cpu-hours, 20.0 gres/gpu-hours, 312.5 mem GiB-hours" in text


def test_explain_of_a_claim_lists_the_jobs_moved_for_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _history(tmp_path)
    data = _explain(tmp_path, "203", capsys)
    assert data["status"] == "ordered"
    assert [(e["role"], e["job"], e["outcome"]) for e in data["reclaims"]] == [
        ("claim", "103", "requeued"),
        ("claim", "104", "cancelled"),
    ]
    text = _explain(tmp_path, "203", capsys, "text")
    assert "job 103 of account chemistry (user bob) requeued on g2 to make room for this job" in text
    assert "job 104 of account r&d (user carol) cancelled on g2" in text
    assert (
        "in all 2 job(s) moved for this job; work lost: 160.0 cpu-hours, 40.0 gres/gpu-hours, 625.0 mem GiB-hours"
        in text
    )
    # A failed requeue lost nothing, and says Slurm's words.
    text = _explain(tmp_path, "207", capsys, "text")
    assert "chosen, but Slurm refused, (Job is not requeueable)" in text
    assert "in all" not in text


def test_a_job_gone_from_the_queue_is_told_from_its_reclaims(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _history(tmp_path)
    data = _explain(tmp_path, "109", capsys)
    assert (data["status"], data["account"], data["user"], data["pool"]) == ("gone", "chemistry", "bob", "gpu")
    assert [(e["role"], e["for_job"]) for e in data["reclaims"]] == [("victim", "207")]
    text = _explain(tmp_path, "109", capsys, "text")
    assert text.startswith("job 109: account chemistry, user bob, pool gpu; no longer in the queue")
    # A job neither in the queue nor in the history stays an error (exit 2 through main).
    with pytest.raises(Exception, match="not in the queue"):
        _explain(tmp_path, "110", capsys)


def test_no_history_no_old_schema_no_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    assert _explain(None, "103", capsys)["reclaims"] == []
    assert _explain(tmp_path, "203", capsys)["reclaims"] == []  # a state directory without a history
    assert "reclaim" not in _explain(tmp_path, "203", capsys, "text")
    old = sqlite3.connect(history_path(tmp_path))
    for step in MIGRATIONS[: RECLAIMS_VERSION - 1]:  # a history the daemon has not migrated to reclaims yet
        for statement in step:
            old.execute(statement)
    old.execute(f"PRAGMA user_version = {RECLAIMS_VERSION - 1}")
    old.close()
    with pytest.raises(Exception, match="not in the queue"):
        _explain(tmp_path, "109", capsys)
    assert "reclaim" not in _explain(tmp_path, "103", capsys, "text")
    assert "history schema" not in caplog.text  # read as holding none, without a word
    history_path(tmp_path).write_bytes(b"not a database")
    assert _explain(tmp_path, "103", capsys)["reclaims"] == []  # a damaged one: said, and explain goes on
    assert "its reclaims are not shown" in caplog.text


def test_the_report_shows_the_recent_reclaims_from_the_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _history(tmp_path)
    common = ["report", "--snapshot", SNAPSHOT, "--config", CONFIG, "--state-dir", str(tmp_path)]
    assert run_observe_verb([*common, "--format", "json", "--reclaims-since", "2025-10-09"]) == 0
    data = orjson.loads(capsys.readouterr().out)
    section = data["reclaims"]
    assert (section["since"], section["moved"]) == ("2025-10-09T00:00:00Z", 3)
    assert section["lost"] == {"cpu": 240.0, "mem": 960_000.0, "gres/gpu": 60.0}
    assert [e["job"] for e in section["jobs"]] == ["103", "104", "109", "105"]
    assert run_observe_verb([*common, "--reclaims-since", "2025-10-09"]) == 0
    table = capsys.readouterr().out
    assert "reclaims since 2025-10-09T00:00:00Z (docs/rule.md §9): moved 3 job(s)" in table
    assert ", 1 chosen but not moved; work lost: 240.0 cpu-hours, 60.0 gres/gpu-hours, 937.5 mem GiB-hours" in table
    # Older than the window (the default: the last 24 h), and no `reclaim:` in the config: no section.
    assert run_observe_verb([*common, "--format", "json"]) == 0
    assert "reclaims" not in orjson.loads(capsys.readouterr().out)
    assert run_observe_verb([*common, "--format", "markdown", "--reclaims-since", "2025-10-09"]) == 0
    assert "## Reclaims" in capsys.readouterr().out


def test_the_report_without_reclaims_is_as_before() -> None:
    plan, _ = load_report_plan()
    plain = build_report(plan)
    assert "reclaims" not in render_report_json(plain)
    assert "reclaim" not in render_report_table(plain)
    empty = build_report(plan, ReclaimSection())
    assert render_report_json(empty)["reclaims"] == {"since": None, "moved": 0, "lost": {}, "jobs": []}
    assert "reclaims in the last cycle (docs/rule.md §9): moved 0 job(s)" in render_report_table(empty)


def test_report_dir_page_shows_the_last_cycles_reclaims(tmp_path: Path) -> None:
    plan, snapshot = load_report_plan()
    report = build_cycle_report(plan, snapshot, refusal="denied", read_seconds=0.1, seconds=0.2, deferred=0)
    ReportWriter(tmp_path).on_cycle(report)
    assert "Reclaims" not in (tmp_path / LATEST_HTML).read_text()
    ReportWriter(tmp_path, reclaim=True).on_cycle(report)
    assert "reclaims in the last cycle (docs/rule.md §9): moved 0 job(s)" in (tmp_path / LATEST_HTML).read_text()
    ReportWriter(tmp_path).on_cycle(replace(report, reclaimed=RECLAIMED[:2]))
    page = (tmp_path / LATEST_HTML).read_text()
    assert '<section class="reclaims" id="reclaims">' in page
    assert "moved 2 job(s) for jobs within their guarantees; work lost: 160.0 cpu-hours" in page
    assert '<td class="text">r&amp;d</td>' in page
    dry = ReclaimSection(tuple(from_reclaimed(replace(r, outcome="would")) for r in RECLAIMED[:1]))
    assert "would move 1 job(s)" in dry.heading()
