"""Audit and explain on hostile input, round 2 (issue 22, item 9).

A row `audit` cannot show (a time that is no date, JSON that is not an
object of numbers) is left out with a warning naming the file and the row;
a history it cannot use at all (no tables at the right version, a version
below 0), a `--limit` SQLite cannot take and a job id no job can have are
one line naming the problem, exit 2.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from slurm_drf.cli.main import main
from slurm_drf.config.settings import Config
from slurm_drf.cycle.run import CycleReport
from slurm_drf.errors import HistoryError, SlurmReadError
from slurm_drf.model.snapshot_file import render_snapshot_bytes
from slurm_drf.policy.plan import compute_plan
from slurm_drf.trail.history_db import (
    HISTORY_FILE,
    SCHEMA_VERSION,
    AuditRecorder,
    migrate,
    open_history,
    open_history_readonly,
)
from tests.helpers import build_cycle_report
from tests.unit.hostile.test_hostile_records import NOW, _execute, _loosen, _past, _record, _running, _warnings

# --- item 9: audit on rows no slurm-drf wrote ------------------------------------------------


def _audit(state_dir: Path, *args: str) -> list[str]:
    return ["audit", *args, "--state-dir", str(state_dir), "--config", "/dev/null", "--format", "json"]


@pytest.mark.parametrize("table", ["cycles", "shares", "writes", "errors"])
@pytest.mark.parametrize("moment", [1e20, -1e20, None, "abc", b"\x00", math.inf])
def test_audit_leaves_out_a_row_whose_time_is_no_time(
    table: str,
    moment: object,
    tmp_path: Path,
    planned: tuple[Any, Any],
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:

    state = tmp_path / "state"
    recorder = AuditRecorder(state, None, clock=lambda: NOW)
    report = build_cycle_report(*planned, refusal="denied", read_seconds=0.1, seconds=0.2, deferred=0)
    recorder.on_cycle(report)
    recorder.on_cycle(report)
    recorder.on_error(SlurmReadError("down"))
    recorder.on_error(SlurmReadError("down"))
    path = state / HISTORY_FILE
    assert main(_audit(state, table)) == 0
    before = orjson.loads(capsys.readouterr().out)
    _loosen(path)
    if table == "shares":  # a share's time is its cycle's
        _execute(path, "UPDATE cycles SET time = ? WHERE id = 1", (moment,))
    else:
        _execute(path, f"UPDATE {table} SET time = ? WHERE id = (SELECT min(id) FROM {table})", (moment,))
    assert main(_audit(state, table)) == 0
    out, err = capsys.readouterr()
    after = orjson.loads(out)
    assert err == ""
    assert 0 < len(after) < len(before)
    warned = _warnings(caplog)
    assert warned and all(w.startswith(f"{path}: ") and w.endswith("; the row is left out") for w in warned)
    assert "time " in warned[0]


@pytest.mark.parametrize("column", ["usage", "shares"])
@pytest.mark.parametrize("text", ["{not json", "null", "[1]", '{"cpu": "x"}', '{"cpu": NaN}', None, b"{}", 5])
def test_audit_leaves_out_a_share_whose_json_is_bad(
    column: str,
    text: object,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = _record(tmp_path / "state", cycles=3)
    _loosen(path)
    _execute(path, f"UPDATE shares SET {column} = ? WHERE cycle_id = 2 AND account = 'physics'", (text,))
    for fmt in ("json", "csv", "table"):
        args = _audit(tmp_path / "state", "shares")
        assert main([*args[:-1], fmt]) == 0
        out, err = capsys.readouterr()
        assert err == "" and out
    assert main(_audit(tmp_path / "state", "shares")) == 0
    rows = orjson.loads(capsys.readouterr().out)
    assert len(rows) == 5 and not any(r["cycle"] == 2 and r["account"] == "physics" for r in rows)
    assert f"{path}: shares of cycle 2, pool 'default', account 'physics': " in _warnings(caplog)[0]


# --- item 9: a history audit cannot use, a limit, a job id ------------------------------------


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    return err.rstrip("\n")


@pytest.mark.parametrize("table", ["", "cycles", "shares", "writes", "errors"])
@pytest.mark.parametrize("table_args", [["writes"], ["shares"], ["cycles"], ["errors"]])
def test_audit_on_a_history_without_its_tables_is_one_line_exit_2(
    table: str, table_args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    if table:
        path = _record(state, cycles=1)
        _execute(path, f"DROP TABLE {table}")
    else:  # the right version, no tables at all
        state.mkdir()
        path = state / HISTORY_FILE
        _execute(path, f"PRAGMA user_version = {SCHEMA_VERSION}")
    assert main(_audit(state, *table_args)) == 2
    line = _one_line(capsys)
    assert line.startswith(f"slurm-drf: history: {path}: history schema version {SCHEMA_VERSION} but no table ")
    assert line.endswith(": the file is damaged; move it away (the daemon starts a new one)")


def test_a_table_without_a_column_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _record(tmp_path / "state", cycles=1)
    _execute(path, "ALTER TABLE writes DROP COLUMN user_nice")
    assert main(_audit(tmp_path / "state")) == 2
    assert _one_line(capsys) == (
        f"slurm-drf: history: {path}: history schema version {SCHEMA_VERSION} but table writes has no column "
        "user_nice: "
        "the file is damaged; move it away (the daemon starts a new one)"
    )


@pytest.mark.parametrize("version", [-1, -2, -(2**31)])
def test_a_history_at_a_negative_version_is_one_line_exit_2(
    version: int, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    path = _record(tmp_path / "state", cycles=2)
    _execute(path, f"PRAGMA user_version = {version}")
    expected = (
        f"{path}: history schema version {version} is none slurm-drf writes (0 to {SCHEMA_VERSION}): "
        "the file is damaged or not slurm-drf's; move it away (the daemon starts a new one)"
    )
    assert main(_audit(tmp_path / "state")) == 2
    assert _one_line(capsys) == f"slurm-drf: history: {expected}"
    with pytest.raises(HistoryError, match="none slurm-drf writes"):
        open_history_readonly(path)
    with pytest.raises(HistoryError, match="none slurm-drf writes"):
        open_history(path)
    connection = sqlite3.connect(path)
    with pytest.raises(HistoryError):
        migrate(connection, str(path))
    connection.close()
    # The daemon's recorder logs it and the cycle goes on; the file is left as it was.
    plan = compute_plan(_running(), Config())
    AuditRecorder(tmp_path / "state", None).on_cycle(CycleReport(plan, _running(), (), None, 0.0, 0.0, 0, False))
    assert any(expected in w for w in _warnings(caplog))
    assert _past(tmp_path / "state") == {}


@pytest.mark.parametrize(
    "limit", [str(10**30), str(2**63), "-1", "abc", "1e3", "9" * 5000, "", " ", "٣", "1.5", "+5", "0x10"]
)
def test_an_audit_limit_sqlite_cannot_take_is_one_line_exit_2(
    limit: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _record(tmp_path / "state", cycles=2)
    assert main(_audit(tmp_path / "state", "--limit", limit)) == 2
    line = _one_line(capsys)
    assert line.startswith("slurm-drf: input: --limit ")
    assert line.endswith(": expected a number from 0 (all) to 9223372036854775807")
    assert len(line) < 300


@pytest.mark.parametrize("limit", ["0", "1", str(2**63 - 1)])
def test_an_audit_limit_up_to_sqlites_is_taken(limit: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _record(tmp_path / "state", cycles=3)
    assert main(_audit(tmp_path / "state", "cycles", "--limit", limit)) == 0
    assert len(orjson.loads(capsys.readouterr().out)) == (1 if limit == "1" else 3)


@pytest.mark.parametrize(
    "job_id", ["9" * 5000, "1" + "0" * 30, "4294967294", "0", "abc", "٣", "", "-5", "1" * 5000 + "_2", "_5", "+1"]
)
def test_explain_a_job_id_no_job_can_have_is_one_line_exit_2(
    job_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = tmp_path / "snap.json"
    snap.write_bytes(render_snapshot_bytes(_running()))
    assert main(["explain", job_id, "--snapshot", str(snap), "--config", "/dev/null"]) == 2
    line = _one_line(capsys)
    assert line.startswith("slurm-drf: input: job ")
    assert line.endswith(": not a job id: expected a job number from 1 to 4294967293 (or an array task such as 1234_5)")
    assert len(line) < 300


@pytest.mark.parametrize("job_id", ["4294967293", "99", "100_" + "9" * 5000, "100+" + "x" * 5000])
def test_explain_a_job_id_not_in_the_queue_is_one_short_line(
    job_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = tmp_path / "snap.json"
    snap.write_bytes(render_snapshot_bytes(_running()))
    code = main(["explain", job_id, "--snapshot", str(snap), "--config", "/dev/null"])
    if job_id.startswith("100"):  # an array task or het component of job 100 finds job 100
        assert code == 0
        return
    assert code == 2
    line = _one_line(capsys)
    assert line == (
        f"slurm-drf: input: job {job_id}: not in the queue of cluster test "
        "(neither pending nor running when it was read)"
    )
