"""The kept past (docs/rule.md §6, issue 24): a start goes on from past.json instead of reading every cycle.

A daemon's HistoryPast (`keep=True`) saves what it integrated after every
read; a later HistoryPast starts from that file when it fits the config
and the history, and gives exactly the past of the reader that kept
running. Whatever does not fit, or is no past slurm-drf kept, is said and
the history read as before.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from slurm_drf.config.settings import Config, HistoryConfig
from slurm_drf.cycle.run import CycleReport
from slurm_drf.errors import SlurmReadError
from slurm_drf.policy.decayed_usage import Allocation, DecayedUsage, UsageByPool, UsageRecord
from slurm_drf.policy.plan import compute_plan
from slurm_drf.trail.history_db import HISTORY_FILE, AuditRecorder
from slurm_drf.trail.past import PAST_FILE, HistoryPast
from tests.unit.builders import job, node, snapshot

HOUR = 3600.0
START = 1_800_000_000.0
CONFIG = Config(interval=60.0, history=HistoryConfig(half_life_s=HOUR, weight=1.0))


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _record(clock: Clock, recorder: AuditRecorder, step: int) -> None:
    jobs = [job("physics", state="RUNNING", cpu=2, gpu=1) for _ in range(step % 5)]
    jobs.append(job("chemistry", state="RUNNING", cpu=1 + step % 3, gpu=1))
    snap = snapshot([node(cpu=64, mem=256_000, gpu=8)], jobs)
    recorder.on_cycle(CycleReport(compute_plan(snap, Config()), snap, (), None, 0.0, 0.0, 0, False))


def _run(directory: Path, clock: Clock, cycles: int, past: HistoryPast, first: int = 0) -> UsageByPool | None:
    """`cycles` daemon cycles: the past read, then the cycle recorded, a minute apart."""
    recorder = AuditRecorder(directory, None, clock=clock)
    got: UsageByPool | None = None
    for step in range(first, first + cycles):
        got = past.past(CONFIG)
        _record(clock, recorder, step)
        clock.now += 60.0
    return got


def _same(one: UsageByPool | None, other: UsageByPool | None, tolerance: float = 1e-12) -> bool:
    if one is None or other is None or set(one) != set(other):
        return False
    for pool, accounts in one.items():
        if set(accounts) != set(other[pool]):
            return False
        for account, amounts in accounts.items():
            if set(amounts) != set(other[pool][account]):
                return False
            for resource, amount in amounts.items():
                if not math.isclose(amount, other[pool][account][resource], rel_tol=tolerance, abs_tol=1e-12):
                    return False
    return True


@pytest.fixture
def kept(tmp_path: Path) -> tuple[Path, Clock, HistoryPast]:
    """A daemon's reader after 90 cycles, its past.json written."""
    clock = Clock(START)
    daemon = HistoryPast(tmp_path, clock=clock, keep=True)
    _run(tmp_path, clock, 90, daemon)
    daemon.past(CONFIG)
    assert (tmp_path / PAST_FILE).exists()
    return tmp_path, clock, daemon


def test_a_start_goes_on_from_the_kept_past_exactly(
    kept: tuple[Path, Clock, HistoryPast], caplog: pytest.LogCaptureFixture
) -> None:
    directory, clock, daemon = kept
    with caplog.at_level(logging.INFO, logger="slurm_drf.trail.past"):
        restarted = HistoryPast(directory, clock=clock)
        assert restarted.past(CONFIG) == daemon.past(CONFIG)  # bit for bit: floats go through JSON unchanged
    assert "the past goes on from cycle 90" in caplog.text
    # And it stays so, cycle after cycle, as both read the new records.
    recorder = AuditRecorder(directory, None, clock=clock)
    for step in range(30):
        _record(clock, recorder, step)
        clock.now += 60.0
        assert restarted.past(CONFIG) == daemon.past(CONFIG)


def test_the_restarted_reader_reads_only_the_cycles_after_the_kept_past(kept: tuple[Path, Clock, HistoryPast]) -> None:
    directory, clock, daemon = kept
    # Older records changed after they were counted: a reader of the whole history sees it, the kept past not.
    with sqlite3.connect(directory / HISTORY_FILE) as connection:
        connection.execute("""UPDATE shares SET usage = '{"cpu": 1000000}' WHERE cycle_id < 80""")
    assert HistoryPast(directory, clock=clock).past(CONFIG) == daemon.past(CONFIG)
    (directory / PAST_FILE).unlink()
    assert HistoryPast(directory, clock=clock).past(CONFIG) != daemon.past(CONFIG)


def test_the_kept_past_equals_reading_the_whole_history(kept: tuple[Path, Clock, HistoryPast]) -> None:
    directory, clock, _ = kept
    from_file = HistoryPast(directory, clock=clock).past(CONFIG)
    (directory / PAST_FILE).unlink()
    assert _same(HistoryPast(directory, clock=clock).past(CONFIG), from_file, tolerance=1e-9)


@pytest.mark.parametrize(
    "config",
    [
        Config(interval=60.0, history=HistoryConfig(half_life_s=2 * HOUR, weight=1.0)),
        Config(interval=30.0, history=HistoryConfig(half_life_s=HOUR, weight=1.0)),
    ],
    ids=["half_life", "interval"],
)
def test_another_half_life_or_interval_reads_the_history(
    kept: tuple[Path, Clock, HistoryPast], config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    directory, clock, _ = kept
    with caplog.at_level(logging.INFO, logger="slurm_drf.trail.past"):
        got = HistoryPast(directory, clock=clock).past(config)
    assert "kept for another half_life or interval; reading the history" in caplog.text
    os.replace(directory / PAST_FILE, directory / "aside.json")
    assert got == HistoryPast(directory, clock=clock).past(config)


def test_a_replaced_history_is_read_not_the_kept_past(
    kept: tuple[Path, Clock, HistoryPast], tmp_path_factory: pytest.TempPathFactory, caplog: pytest.LogCaptureFixture
) -> None:
    directory, clock, _ = kept
    other = tmp_path_factory.mktemp("other")
    other_clock = Clock(START + 7.0)
    _run(other, other_clock, 95, HistoryPast(other, clock=other_clock), first=3)
    os.replace(other / HISTORY_FILE, directory / HISTORY_FILE)  # cycle 90 exists, at another time
    with caplog.at_level(logging.INFO, logger="slurm_drf.trail.past"):
        got = HistoryPast(directory, clock=clock).past(CONFIG)
    assert "no longer holds cycle 90" in caplog.text
    (directory / PAST_FILE).unlink()
    assert got == HistoryPast(directory, clock=clock).past(CONFIG)


def _damage(path: Path, change: dict[str, Any]) -> None:
    data = json.loads(path.read_text())
    for dotted, value in change.items():
        *parents, last = dotted.split(".")
        target = data
        for key in parents:
            target = target[key]
        target[last] = value
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"version": 2}, "not version 1"),
        ({"cycle": [90]}, "cycle is not [id, time]"),
        ({"cycle": [True, 1.0]}, "cycle is not [id, time]"),
        ({"last_id": 3}, "last_id is not a cycle id"),
        ({"since": "yesterday"}, "since, last_time or checked is not a time"),
        ({"usage.weight": -1.0}, "half_life, max_gap or weight is not a number >= 0"),
        ({"usage.half_life": 0}, "half_life and max_gap must be > 0"),
        ({"usage.last_time": "now"}, "last_time is not a time"),
        ({"usage.sums.default.physics.cpu": -5.0}, "sums.default.physics is not an object of amounts >= 0"),
        ({"usage.sums.default": [1, 2]}, "sums.default is not an object"),
        ({"usage.last": None}, "last is not an object"),
    ],
)
def test_a_damaged_kept_past_is_said_and_the_history_read(
    kept: tuple[Path, Clock, HistoryPast], change: dict[str, Any], said: str, caplog: pytest.LogCaptureFixture
) -> None:
    directory, clock, daemon = kept
    _damage(directory / PAST_FILE, change)
    with caplog.at_level(logging.WARNING, logger="slurm_drf.trail.past"):
        got = HistoryPast(directory, clock=clock).past(CONFIG)
    assert f"not a past slurm-drf kept ({said}" in caplog.text
    assert _same(got, daemon.past(CONFIG), tolerance=1e-9)


@pytest.mark.parametrize("content", [b"", b"{", b"\xff\xfe", b"[]", b"null", b"1e999"])
def test_a_kept_past_that_is_no_json_object_is_said(
    kept: tuple[Path, Clock, HistoryPast], content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    directory, clock, daemon = kept
    (directory / PAST_FILE).write_bytes(content)
    assert _same(HistoryPast(directory, clock=clock).past(CONFIG), daemon.past(CONFIG), tolerance=1e-9)
    assert "not a past slurm-drf kept" in caplog.text


def test_a_kept_past_others_can_write_is_refused(
    kept: tuple[Path, Clock, HistoryPast], caplog: pytest.LogCaptureFixture
) -> None:
    directory, clock, daemon = kept
    _damage(directory / PAST_FILE, {"usage.sums.default.physics.cpu": 1e9})  # what another user would plant
    os.chmod(directory / PAST_FILE, 0o666)
    assert _same(HistoryPast(directory, clock=clock).past(CONFIG), daemon.past(CONFIG), tolerance=1e-9)
    assert "cannot read the kept past" in caplog.text


def test_a_kept_past_dated_after_now_is_not_the_present(
    kept: tuple[Path, Clock, HistoryPast], caplog: pytest.LogCaptureFixture
) -> None:
    directory, clock, _ = kept
    early = Clock(clock.now - 3 * HOUR)
    HistoryPast(directory, clock=early).past(CONFIG)
    assert "kept at a time after now" in caplog.text


def test_only_a_keeping_reader_writes_and_the_file_is_private(tmp_path: Path) -> None:
    clock = Clock(START)
    _run(tmp_path, clock, 5, HistoryPast(tmp_path, clock=clock))
    assert not (tmp_path / PAST_FILE).exists()
    HistoryPast(tmp_path, clock=clock, keep=True).past(CONFIG)
    assert (tmp_path / PAST_FILE).stat().st_mode & 0o777 == 0o640


def test_nothing_is_kept_while_sacct_fails(tmp_path: Path) -> None:
    def failing(_start: float) -> list[Allocation]:
        raise SlurmReadError("sacct: slurmdbd down")

    clock = Clock(START)
    _run(tmp_path, clock, 5, HistoryPast(tmp_path, clock=clock))
    HistoryPast(tmp_path, clock=clock, fetch=failing, keep=True).past(CONFIG)
    assert not (tmp_path / PAST_FILE).exists()  # its spans are missing: a restart asks sacct again


def test_the_down_time_after_a_kept_past_is_filled_from_sacct_at_the_next_record(tmp_path: Path) -> None:
    """A restart after down time: the pause is asked of sacct once the first new record is read, as for a
    reader that kept running through it."""
    asked: list[float] = []

    def fetch(start: float) -> list[Allocation]:
        asked.append(start)
        return [Allocation("physics", "", START, None, {"cpu": 8})]

    clock = Clock(START)
    daemon = HistoryPast(tmp_path, clock=clock, fetch=fetch, keep=True)
    _run(tmp_path, clock, 30, daemon)
    clock.now += HOUR  # down an hour
    restarted = HistoryPast(tmp_path, clock=clock, fetch=fetch, keep=True)
    _run(tmp_path, clock, 3, restarted)
    asked.clear()
    _run(tmp_path, clock, 3, daemon)  # the one that kept running meets the same pause
    assert len(asked) == 1
    assert _same(restarted.past(CONFIG), daemon.past(CONFIG), tolerance=1e-9)


def test_decayed_usage_state_round_trips() -> None:
    usage = DecayedUsage(HOUR, 120.0)
    usage.add(UsageRecord(0.0, {"p": {"a": {"cpu": 4.0}}}))
    usage.add(UsageRecord(60.0, {"p": {"a": {"cpu": 2.0}, "b": {"gres/gpu": 1.0}}}))
    again = DecayedUsage.from_state(json.loads(json.dumps(usage.render_state())))
    assert again.past_at(100.0) == usage.past_at(100.0)
    for one in (usage, again):
        one.add(UsageRecord(120.0, {}))
    assert again.past_at(150.0) == usage.past_at(150.0)
