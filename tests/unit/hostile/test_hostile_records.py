"""Hostile records, round 2 (issue 22, item 2).

One bad record of history.sqlite or of sacct's answer never stops a cycle,
`report` or `explain` (`audit`: test_hostile_audit.py): it is logged once,
naming the file and the cycle or line, and left out; a negative amount
never lowers a past; a record dated in the future is skipped, not counted
as the present.
"""

from __future__ import annotations

import logging
import math
import shutil
import sqlite3
import string
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import slurm_drf.slurm.sacct as sacct_module
from slurm_drf.cli.main import main
from slurm_drf.config.settings import Config, HistoryConfig
from slurm_drf.cycle.run import CycleReport
from slurm_drf.errors import SlurmReadError
from slurm_drf.model.snapshot_file import render_snapshot_bytes
from slurm_drf.model.types import MAX_TRES, Snapshot
from slurm_drf.policy.decayed_usage import Allocation, UsageByPool, past_term
from slurm_drf.policy.plan import compute_plan
from slurm_drf.slurm.sacct import MAX_EPOCH, fetch_allocations, parse_sacct_answer
from slurm_drf.trail.history_db import HISTORY_FILE, AuditRecorder
from slurm_drf.trail.past import HistoryPast
from tests.unit.builders import job, node, snapshot
from tests.unit.service.test_service import FakeSource, make_service

NOW = 1_796_000_000.0  # 2026-11-30
HOUR = 3600.0
CONFIG = Config(
    interval=60.0, resources=("cpu", "mem", "gres/gpu"), history=HistoryConfig(half_life_s=HOUR, weight=1.0)
)
CYCLES = 30
BAD_CYCLE = 12  # the cycle the tests damage


def _running() -> Snapshot:
    return snapshot(
        [node(cpu=64, mem=256_000, gpu=8)],
        [
            job("physics", state="RUNNING", cpu=8, gpu=1),
            job("chemistry", state="RUNNING", cpu=2, mem=1000),
            job("physics", job_id="100", cpu=4, gpu=1),
            job("chemistry", job_id="101", cpu=4, gpu=1),
        ],
    )


def _record(state_dir: Path, now: float = NOW, cycles: int = CYCLES) -> Path:
    """`cycles` cycles a minute apart up to a minute before `now`; the history's path."""
    moments = iter([now - 60.0 * (cycles - i) for i in range(cycles)])
    recorder = AuditRecorder(state_dir, None, clock=lambda: next(moments))
    running = _running()
    plan = compute_plan(running, Config())
    for _ in range(cycles):
        recorder.on_cycle(CycleReport(plan, running, (), None, 0.0, 0.0, 0, False))
    return state_dir / HISTORY_FILE


def _loosen(path: Path) -> None:
    """The tables again without types or constraints: a damaged file can hold anything anywhere."""
    connection = sqlite3.connect(path)
    try:
        for table in ("writes", "shares", "errors", "cycles"):
            columns = [row[1] for row in connection.execute(f"PRAGMA table_info({table})")]
            connection.execute(f"ALTER TABLE {table} RENAME TO old_{table}")
            connection.execute(f"CREATE TABLE {table} ({', '.join(columns)})")
            connection.execute(f"INSERT INTO {table} SELECT * FROM old_{table}")
            connection.execute(f"DROP TABLE old_{table}")
        connection.commit()
    finally:
        connection.close()


def _execute(path: Path, statement: str, parameters: Sequence[object] = ()) -> None:
    connection = sqlite3.connect(path)
    try:
        connection.execute(statement, parameters)
        connection.commit()
    finally:
        connection.close()


def _without_cycle(state_dir: Path, cycle: int, into: Path) -> Path:
    """A copy of the state directory whose history lacks `cycle`: what skipping it must equal."""
    shutil.copytree(state_dir, into)
    _execute(into / HISTORY_FILE, "DELETE FROM shares WHERE cycle_id = ?", (cycle,))
    _execute(into / HISTORY_FILE, "DELETE FROM cycles WHERE id = ?", (cycle,))
    return into


def _past(state_dir: Path, config: Config = CONFIG, **kwargs: Any) -> UsageByPool | None:
    return HistoryPast(state_dir, clock=lambda: NOW, **kwargs).past(config)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def _check_past(past: UsageByPool | None) -> None:
    """Every amount of a past is a finite number >= 0."""
    assert past is not None
    for accounts in past.values():
        for amounts in accounts.values():
            for amount in amounts.values():
                assert math.isfinite(amount) and amount >= 0, past


def _nested(depth: int) -> str:
    return '{"cpu": ' * depth + "1" + "}" * depth


# --- item 2: a bad usage, a bad time --------------------------------------------------------

BAD_USAGE: list[object] = [
    "null",
    "[1, 2]",
    '{"cpu": {"a": 1}}',
    '{"cpu": [8]}',
    '{"cpu": NaN}',
    '{"cpu": Infinity}',
    '{"cpu": -Infinity}',
    '{"cpu": 1e999}',
    '{"cpu": -1}',
    '{"cpu": -1e-300}',
    '{"gres/gpu": -8, "cpu": 8}',
    '{"cpu": 1e19}',
    '{"cpu": 9223372036854775808}',
    '{"cpu": ' + "9" * 400 + "}",
    '{"cpu": true}',
    '{"cpu": "8"}',
    '{"cpu": null}',
    '"8"',
    "8",
    "",
    "not json",
    '{"cpu": 8',
    _nested(5000),
    None,
    b'{"cpu": 8}',
    8,
    8.5,
]


@pytest.mark.parametrize("usage", BAD_USAGE, ids=lambda u: repr(u)[:40])
def test_a_bad_usage_is_left_out_once_and_the_past_goes_on(
    usage: object, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _record(tmp_path / "state")
    expected = _past(_without_cycle(tmp_path / "state", BAD_CYCLE, tmp_path / "clean"))
    _loosen(path)
    _execute(path, "UPDATE shares SET usage = ? WHERE cycle_id = ? AND account = 'physics'", (usage, BAD_CYCLE))
    reader = HistoryPast(tmp_path / "state", clock=lambda: NOW)
    past = reader.past(CONFIG)
    # The cycle is left out whole, as if it had never been recorded; the rest still counts.
    assert past == expected
    assert past is not None and past["default"]["physics"]["cpu"] == pytest.approx(8.0)
    (warning,) = _warnings(caplog)
    assert warning.startswith(f"{path}: cycle {BAD_CYCLE}: pool 'default', account 'physics': usage ")
    assert warning.endswith("; the cycle is left out of the past")
    assert len(warning) < 600
    # Once per process: not again next cycle, nor when a new half-life reads the file afresh.
    caplog.clear()
    reader.past(CONFIG)
    reader.past(replace(CONFIG, history=HistoryConfig(half_life_s=2 * HOUR, weight=1.0)))
    assert _warnings(caplog) == []


BAD_TIMES: list[object] = [1e20, NOW + HOUR, NOW + 1.0, math.inf, None, "abc", "2026-11-30T02:00:00Z", b"\x00"]


@pytest.mark.parametrize("moment", BAD_TIMES, ids=repr)
def test_a_cycle_whose_time_is_no_past_time_is_left_out_once(
    moment: object, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _record(tmp_path / "state")
    expected = _past(_without_cycle(tmp_path / "state", BAD_CYCLE, tmp_path / "clean"))
    _loosen(path)
    _execute(path, "UPDATE cycles SET time = ? WHERE id = ?", (moment, BAD_CYCLE))
    reader = HistoryPast(tmp_path / "state", clock=lambda: NOW)
    # A record dated in the future is skipped (not clamped to now): it is not the present.
    assert reader.past(CONFIG) == expected
    (warning,) = _warnings(caplog)
    assert warning.startswith(f"{path}: cycle {BAD_CYCLE}: time ")
    caplog.clear()
    reader.past(CONFIG)
    assert _warnings(caplog) == []


def test_the_newest_record_in_the_future_is_not_the_present(tmp_path: Path) -> None:
    """Physics ran 8 CPUs all along; a last record dated tomorrow says 64. It must not be what runs now."""
    path = _record(tmp_path / "state")
    _execute(path, "UPDATE shares SET usage = ? WHERE account = 'physics' AND cycle_id = ?", ('{"cpu": 64}', CYCLES))
    _execute(path, "UPDATE cycles SET time = ? WHERE id = ?", (NOW + 86400.0, CYCLES))
    past = _past(tmp_path / "state")
    assert past is not None and past["default"]["physics"]["cpu"] == pytest.approx(8.0)


def test_a_bad_cycle_id_is_left_out(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _record(tmp_path / "state")
    _loosen(path)
    _execute(path, "UPDATE cycles SET id = 'x' WHERE id = ?", (BAD_CYCLE,))
    assert _past(tmp_path / "state") is not None
    assert any(w.startswith(f"{path}: cycle id 'x': not a whole number") for w in _warnings(caplog))


@pytest.mark.parametrize("pool, account", [(None, "physics"), ("default", None), (7, "physics"), ("default", b"x")])
def test_a_shares_row_without_names_leaves_its_cycle_out(
    pool: object, account: object, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _record(tmp_path / "state")
    expected = _past(_without_cycle(tmp_path / "state", BAD_CYCLE, tmp_path / "clean"))
    _loosen(path)
    _execute(
        path,
        "UPDATE shares SET pool = ?, account = ? WHERE cycle_id = ? AND account = 'physics'",
        (pool, account, BAD_CYCLE),
    )
    assert _past(tmp_path / "state") == expected
    (warning,) = _warnings(caplog)
    assert warning.startswith(f"{path}: cycle {BAD_CYCLE}: a shares row with pool ")


@pytest.mark.parametrize("amount", [-5.0, -math.inf, math.nan, math.inf, 1e308, -1e-300])
def test_no_past_lowers_a_share(amount: float) -> None:
    """Whatever reaches the plan as a past, it never takes usage below what runs: no queue jumping."""
    assert past_term({"physics": {"cpu": amount, "gres/gpu": 2.0}}, 100.0, ("cpu", "gres/gpu")) == {
        "physics": ({"cpu": round(100.0 * amount)} if 0 < 100.0 * amount < math.inf else {}) | {"gres/gpu": 200}
    }
    snap = _running()
    pure = compute_plan(snap, CONFIG)
    blended = compute_plan(snap, CONFIG, past={"default": {"physics": {"cpu": amount}, "chemistry": {"cpu": amount}}})
    for before, after in zip(pure.accounts, blended.accounts, strict=True):
        assert after.weighted_share >= before.weighted_share
        assert all(value >= 0 for value in after.past.values())


@pytest.mark.parametrize("amount", [float(MAX_TRES), 2.0**63, 1e300])
def test_a_past_of_any_size_fits_the_plan(amount: float) -> None:
    """usage + past + pending demand must stay inside int64: a huge past saturates, never wraps negative."""
    snap = _running()
    plan = compute_plan(snap, CONFIG, past={"default": {"physics": {"cpu": amount}}})
    physics = next(a for a in plan.accounts if a.account == "physics")
    assert 0 < physics.past["cpu"] <= MAX_TRES
    assert [j.account for j in plan.jobs] == ["chemistry", "physics"]
    assert all(j.level is not None and j.level >= 0 for j in plan.jobs)


# --- item 2: the verbs and the daemon's cycle go on -----------------------------------------


def _state_with_bad_record(tmp_path: Path, now: float) -> Path:
    path = _record(tmp_path / "state", now=now)
    _loosen(path)
    _execute(path, "UPDATE shares SET usage = 'null' WHERE cycle_id = ?", (BAD_CYCLE,))
    _execute(path, "UPDATE cycles SET time = 'abc' WHERE id = ?", (BAD_CYCLE + 1,))
    return path


@pytest.mark.parametrize("verb", [["report", "--format", "json"], ["explain", "100"]])
def test_report_and_explain_go_on_past_a_bad_record(
    verb: list[str], tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    path = _state_with_bad_record(tmp_path, time.time())
    snap = tmp_path / "snap.json"
    snap.write_bytes(render_snapshot_bytes(_running()))
    config = tmp_path / "c.yaml"
    config.write_text("interval: 60s\nhistory: {half_life: 1h, weight: 1}\n")
    code = main([*verb, "--snapshot", str(snap), "--config", str(config), "--state-dir", str(path.parent)])
    out, err = capsys.readouterr()
    assert (code, "Traceback" in err) == (0, False)
    assert out
    warned = _warnings(caplog)
    assert any(w.startswith(f"{path}: cycle {BAD_CYCLE}: pool 'default', account ") for w in warned)
    assert any(w.startswith(f"{path}: cycle {BAD_CYCLE + 1}: time 'abc' is not a time") for w in warned)


def test_a_daemon_cycle_succeeds_past_a_bad_record_and_a_bad_sacct_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import time

    state = tmp_path / "state"
    _state_with_bad_record(tmp_path, time.time())

    def fetch(start: float) -> list[Allocation]:
        bad = f"7|physics|main|{'9' * 400}|Unknown|cpu=8\n8|physics|main|{int(start)}|Unknown|cpu={'9' * 400}\n"
        return parse_sacct_answer(bad + f"9|physics|main|{int(start)}|Unknown|cpu=8\n").allocations

    config = replace(CONFIG, state_dir=str(state))
    service = make_service(tmp_path, FakeSource([_running()]), config=config, past=HistoryPast(state, fetch=fetch))
    assert service.run_once() is None
    assert service.failures == 0
    assert any(f"cycle {BAD_CYCLE}:" in w for w in _warnings(caplog))


# --- item 2: sacct's bad lines ---------------------------------------------------------------

GOOD_LINES = "1|physics|main|100|200|cpu=2\n2|chemistry|main|150|Unknown|cpu=1,mem=1000\n"
BAD_LINES = [
    ("7|physics|main|" + "9" * 400 + "|200|cpu=2", "Start 99999"),
    ("7|physics|main|100|" + "9" * 400 + "|cpu=2", "End 99999"),
    ("7|physics|main|" + "9" * 5000 + "|200|cpu=2", "Start 99999"),
    ("7|physics|main|-5|200|cpu=2", "Start -5 is not a time from 0"),
    (f"7|physics|main|{MAX_EPOCH + 1}|Unknown|cpu=2", f"Start {MAX_EPOCH + 1} is not a time from 0"),
    ("7|physics|main|100|10000000000000|cpu=2", "End 10000000000000 is not a time"),
    ("7|physics|main|100|200|cpu=" + "9" * 400, "AllocTRES 'cpu=9999"),
    ("7|physics|main|100|200|cpu=1,mem=" + "9" * 400, "AllocTRES 'cpu=1,mem=9999"),
    ("7|physics|main|100|200|gres/gpu=" + "9" * 400, "AllocTRES 'gres/gpu=9999"),
    ("7|physics|main|100|200|gres/gpu:a100=" + "9" * 400, "AllocTRES 'gres/gpu:a100=9999"),
    ("7|physics|main|100|200|cpu=9223372036854775808", "cpu=9223372036854775808 is not from 0 to"),
    ("7|physics|main|100|200|mem=99999999999P", "mem=107374182398926258176 is not from 0"),
    ("7|physics|main|100|200|cpu=99999999999999999999999", "AllocTRES 'cpu=99999999999999999999999': cpu="),
]


@pytest.mark.parametrize(("line", "said"), BAD_LINES, ids=[b[1][:30] for b in BAD_LINES])
def test_a_bad_sacct_line_is_left_out_and_the_rest_kept(line: str, said: str) -> None:
    text = GOOD_LINES.replace("\n", "\n" + line + "\n", 1)
    answer = parse_sacct_answer(text, "sacct -P")
    assert answer.allocations == parse_sacct_answer(GOOD_LINES).allocations
    ((skipped_line, message),) = answer.skipped
    assert skipped_line == line
    assert message.startswith("sacct -P: line 2: job 7: ") and said in message, message
    assert len(message) < 400


def test_bad_sacct_lines_are_logged_once_per_process(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sacct_module, "_reported_lines", set())
    text = GOOD_LINES + BAD_LINES[0][0] + "\n" + BAD_LINES[6][0] + "\n"
    for _ in range(3):
        allocations = fetch_allocations(0.0, runner=lambda argv, timeout, env=None: text, environ={})
        assert [a.account for a in allocations] == ["physics", "chemistry"]
    warned = _warnings(caplog)
    assert len(warned) == 2
    assert all(w.startswith("sacct --parsable2 ") and w.endswith("; the line is left out") for w in warned)


def test_a_bad_sacct_line_leaves_the_past_as_without_it(tmp_path: Path) -> None:
    _record(tmp_path / "state", cycles=5)

    def fetch_with(extra: str) -> Callable[[float], list[Allocation]]:
        def fetch(start: float) -> list[Allocation]:
            good = f"1|physics|main|{int(start) - 60}|Unknown|cpu=16\n"
            return parse_sacct_answer(good + extra).allocations

        return fetch

    bad = "".join(line + "\n" for line, _ in BAD_LINES)
    with_bad = _past(tmp_path / "state", fetch=fetch_with(bad))
    _check_past(with_bad)
    assert with_bad == _past(tmp_path / "state", fetch=fetch_with(""))


# --- item 2: any row, any line: the past never raises ------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["cpu", "mem", "gres/gpu"]), inner),
    max_leaves=8,
)


def _as_json(value: object) -> str:
    import json

    return json.dumps(value, allow_nan=True)


_cells = (
    st.none()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=4)
)
_usages = _json_values.map(_as_json) | _cells
_times = (
    st.floats(min_value=NOW - 10 * HOUR, max_value=NOW + HOUR)
    | st.integers(min_value=int(NOW - 10 * HOUR), max_value=int(NOW + HOUR))
    | _cells
)
_rows = st.lists(
    st.tuples(
        _times,
        st.lists(
            st.tuples(
                st.sampled_from(["default", "other"]) | _cells,
                st.sampled_from(["physics", "chemistry"]) | _cells,
                _usages,
            ),
            max_size=3,
        ),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=_rows)
def test_any_history_rows_give_a_past_that_never_lowers_a_share(rows: list[tuple[object, list[Any]]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = _record(Path(directory), cycles=3)
        _loosen(path)
        connection = sqlite3.connect(path)
        try:
            for offset, (moment, shares) in enumerate(rows):
                cycle = 100 + offset
                connection.execute("INSERT INTO cycles (id, time) VALUES (?, ?)", (cycle, moment))
                connection.executemany(
                    "INSERT INTO shares (cycle_id, pool, account, usage) VALUES (?, ?, ?, ?)",
                    [(cycle, *share) for share in shares],
                )
            connection.commit()
        finally:
            connection.close()
        past = _past(Path(directory))
    _check_past(past)
    snap = _running()
    pure = compute_plan(snap, CONFIG)
    blended = compute_plan(snap, CONFIG, past=past)
    for before, after in zip(pure.accounts, blended.accounts, strict=True):
        assert after.weighted_share >= before.weighted_share


_fields = (
    st.text(alphabet=string.digits, min_size=1, max_size=450)
    | st.sampled_from(["Unknown", "None", "", "-1", "0", str(MAX_EPOCH), str(MAX_EPOCH + 1)])
    | st.integers(min_value=0, max_value=int(NOW)).map(str)
    | st.text(max_size=6).filter(lambda t: "|" not in t and "\n" not in t and "\r" not in t)
)
_tres_items = st.tuples(
    st.sampled_from(["cpu", "mem", "node", "gres/gpu", "gres/gpu:a100", "billing", "license/x", ""]),
    st.text(alphabet=string.digits, min_size=1, max_size=450)
    | st.sampled_from(["8G", "1.5T", "99999999999P", "x", ""]),
).map(lambda item: f"{item[0]}={item[1]}")
_lines = st.tuples(
    st.text(alphabet=string.digits, min_size=1, max_size=12),
    st.sampled_from(["physics", "chemistry", ""]),
    st.sampled_from(["main", "main,gpu", "other", ""]),
    _fields,
    _fields,
    st.lists(_tres_items, max_size=4).map(",".join),
).map("|".join)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(_lines, max_size=8))
def test_any_sacct_lines_give_a_past_or_a_refused_answer_never_a_crash(lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    try:
        answer = parse_sacct_answer(text)
    except SlurmReadError:
        pass  # not the format asked for (a time that is not digits): the answer refused, as before
    else:
        assert len(answer.allocations) + len(answer.skipped) <= len(lines)
        for allocation in answer.allocations:
            assert 0 <= allocation.start <= MAX_EPOCH
            assert allocation.end is None or allocation.start < allocation.end <= MAX_EPOCH
            assert all(0 <= amount <= MAX_TRES for amount in allocation.tres.values())

    def fetch(start: float) -> list[Allocation]:
        return fetch_allocations(start, runner=lambda argv, timeout, env=None: text, environ={})

    with tempfile.TemporaryDirectory() as directory:
        _record(Path(directory), now=NOW - 2 * HOUR, cycles=3)  # a gap up to now: sacct is asked
        _check_past(_past(Path(directory), fetch=fetch))
