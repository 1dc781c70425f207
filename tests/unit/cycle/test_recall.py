"""Whose value a job holds when time goes back (issue 20, cycle.recall).

A small controller stands in for slurmctld's job table here: it keeps each
job's nice and priority, applies `scontrol update` lines, saves its state
and, on `crash`, goes back to what it last saved, as a SIGKILLed slurmctld
does (SPEC §8). The cycle, the state file, the history and `reset` are the
real ones. The same faults run against a real slurmctld in
tests/integration/test_live_faults.py.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_drf.config.settings import Config, Mode
from slurm_drf.cycle.recall import LedgerWrite, Recall
from slurm_drf.cycle.reset import reset_jobs
from slurm_drf.cycle.run import CycleHistory, run_cycle
from slurm_drf.cycle.store import StateStore
from slurm_drf.model.types import Job, Snapshot
from slurm_drf.policy.ownership import LABEL_NICE_BELOW, is_label_nice
from slurm_drf.policy.plan import compute_plan
from slurm_drf.policy.state import PolicyState
from slurm_drf.trail.history_db import AuditRecorder, HistoryLedger, history_path
from tests.unit.builders import job, node, snapshot
from tests.unit.controller import Controller

OWN = (0, 0, 5, 100, 0, 7)  # hand-set nices, as sites have them


def queue(count: int = 60) -> list[Job]:
    accounts = ("gpu", "mem", "cpu")
    return [
        job(accounts[k % 3], job_id=str(1000 + k), nice=OWN[k % len(OWN)], submit_time=float(k), cpu=1 + k % 4, mem=100)
        for k in range(count)
    ]


def cycle(controller: Controller, state_dir: Path, recall: Recall | None = None, mode: Mode = "nice") -> None:
    """One daemon cycle with its history, as `slurm-drf once` runs it."""
    config = Config(resources=("cpu", "mem"), mode=mode, state_dir=str(state_dir))
    store = StateStore(state_dir)
    recall = recall if recall is not None else Recall(HistoryLedger(state_dir))
    report = run_cycle(controller, controller, config, store, history=CycleHistory(recall=recall))
    AuditRecorder(state_dir, None).on_cycle(report)


def reset(controller: Controller, state_dir: Path, assume_own: int | None = None) -> tuple[str, ...]:
    report = reset_jobs(
        controller, controller, StateStore(state_dir), recall=Recall(HistoryLedger(state_dir)), assume_own=assume_own
    )
    return report.reset


def planned_own(controller: Controller, state_dir: Path) -> dict[str, int]:
    """The own nice each job's next value keeps, as the plan says (a dry run)."""
    store = StateStore(state_dir)
    state, _ = Recall(HistoryLedger(state_dir)).reconcile(controller.fetch_snapshot(), store.load())
    plan = compute_plan(controller.fetch_snapshot(), Config(resources=("cpu", "mem")), state)
    return dict(zip(plan.column("job_id"), plan.column("user_nice"), strict=True))


@pytest.fixture
def controller() -> Controller:
    return Controller(queue())


def test_reset_lost_by_a_crashed_slurmctld_gives_back_the_own_nice_next_time(
    controller: Controller, tmp_path: Path
) -> None:
    own = controller.nices()
    cycle(controller, tmp_path)
    assert all(is_label_nice(n) for n in controller.nices().values())
    controller.save()  # slurmctld saved the daemon's values
    assert len(reset(controller, tmp_path)) == len(own)
    assert controller.nices() == own
    controller.crash()  # ... but not the reset
    assert all(is_label_nice(n) for n in controller.nices().values())
    assert planned_own(controller, tmp_path) == own
    cycle(controller, tmp_path)  # the daemon runs again: nothing it sees is taken for a user's
    assert len(reset(controller, tmp_path)) == len(own)
    assert controller.nices() == own


def test_older_values_after_a_crash_are_ours_and_written_again(controller: Controller, tmp_path: Path) -> None:
    own = controller.nices()
    cycle(controller, tmp_path)
    controller.save()
    # The queue changes and the daemon writes new values; slurmctld loses them.
    controller.jobs["1000"] = replace(controller.jobs["1000"], priority=9000)
    controller.jobs.update({j.job_id: j for j in [job("gpu", job_id="2000", cpu=30, mem=100, submit_time=-1.0)]})
    own["2000"] = 0
    cycle(controller, tmp_path)
    controller.crash()
    controller.jobs.update({j.job_id: j for j in [job("gpu", job_id="2000", cpu=30, mem=100, submit_time=-1.0)]})
    assert planned_own(controller, tmp_path) == own
    cycle(controller, tmp_path)
    assert reset(controller, tmp_path)
    assert controller.nices() == own


@pytest.mark.parametrize("damage", ["deleted", "corrupt", "older"])
def test_a_lost_or_older_state_is_rebuilt_from_the_history(
    controller: Controller, tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    own = controller.nices()
    state_file = StateStore(tmp_path).path
    cycle(controller, tmp_path)
    backup = tmp_path / "backup.json"
    shutil.copy(state_file, backup)
    # More jobs come and are written; then the state is lost, or an older one restored.
    for k in range(5):
        extra = job("mem", job_id=str(3000 + k), nice=3, cpu=2, mem=100, submit_time=-float(k) - 1)
        controller.jobs[extra.job_id] = extra
        own[extra.job_id] = 3
    cycle(controller, tmp_path)
    if damage == "deleted":
        state_file.unlink()
    elif damage == "corrupt":
        state_file.write_text("{not json")
    else:
        shutil.copy(backup, state_file)
    caplog.set_level(logging.WARNING, logger="slurm_drf")
    assert planned_own(controller, tmp_path) == own
    cycle(controller, tmp_path)
    assert "own nice recovered from the history" in caplog.text
    assert len(reset(controller, tmp_path)) == len(own)
    assert controller.nices() == own


def test_labels_without_any_record_are_not_taken_for_own_nices(
    controller: Controller, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An earlier install's labels, with neither state nor history: unknown, never 'restored'."""
    cycle(controller, tmp_path / "earlier")
    labelled = controller.nices()
    assert all(is_label_nice(n) for n in labelled.values())
    fresh = tmp_path / "fresh"
    caplog.set_level(logging.WARNING, logger="slurm_drf")
    assert set(planned_own(controller, fresh).values()) == {0}
    cycle(controller, fresh)
    assert "earlier install" in caplog.text
    saved = json.loads(StateStore(fresh).path.read_text())["jobs"]
    assert {entry[0] for entry in saved.values()} == {None}
    assert reset(controller, fresh) == ()
    assert all(is_label_nice(n) for n in controller.nices().values())
    assert len(reset(controller, fresh, assume_own=0)) == len(labelled)
    assert set(controller.nices().values()) == {0}


def test_a_users_new_nice_is_still_theirs(controller: Controller, tmp_path: Path) -> None:
    own = controller.nices()
    cycle(controller, tmp_path)
    controller.jobs["1001"] = replace(controller.jobs["1001"], nice=42)  # the owner renices
    own["1001"] = 42
    assert planned_own(controller, tmp_path) == own
    cycle(controller, tmp_path)
    assert reset(controller, tmp_path)
    assert controller.nices() == own


def test_priority_mode_keeps_the_own_nice_through_a_crash(controller: Controller, tmp_path: Path) -> None:
    cycle(controller, tmp_path, mode="priority")
    written = {j: m.written for j, m in StateStore(tmp_path).load().jobs.items()}
    controller.save()
    state = StateStore(tmp_path).load()
    StateStore(tmp_path).save(replace(state, jobs={}))  # the state is lost
    recovered, found = Recall(HistoryLedger(tmp_path)).reconcile(
        controller.fetch_snapshot(), StateStore(tmp_path).load()
    )
    assert found.recovered == len(written)
    assert {j: (m.written, m.mode, m.user_nice) for j, m in recovered.jobs.items()} == {
        j: (written[j], "priority", controller.saved[j].nice) for j in written
    }


def test_a_label_kept_as_own_in_the_state_is_repaired(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = StateStore(tmp_path)
    store.ensure_directory()
    store.path.write_text(
        json.dumps(
            {
                "format": "slurm-drf-state/1",
                "epoch": 1,
                "fingerprint": "",
                "tie_wins": {},
                "plan_wins": {},
                "jobs": {"7": [-1_500_000_000, -1_600_000_000, "nice"], "8": [3, -5, "nice"]},
            }
        )
    )
    caplog.set_level(logging.WARNING, logger="slurm_drf")
    state = store.load()
    assert f"{store.path}: 1 job(s)' own nice is a label value" in caplog.text
    assert not state.jobs["7"].own_known and state.jobs["7"].user_nice == 0
    assert state.jobs["8"].own_known and state.jobs["8"].user_nice == 3


def test_the_ledger_reads_the_history_of_schema_1(tmp_path: Path) -> None:
    """A history written before the own nice was recorded still tells whose value a job holds."""
    import sqlite3

    from slurm_drf.trail.history_db import MIGRATIONS

    connection = sqlite3.connect(history_path(tmp_path), isolation_level=None)
    for statement in MIGRATIONS[0]:
        connection.execute(statement)
    connection.execute("PRAGMA user_version = 1")
    connection.execute(
        "INSERT INTO cycles VALUES (1, 0, '', 'c', 'nice', 0, 1, 1, 1, 0, 0, 0)",
    )
    for value, old in ((-2_000_000_000, 5), (-1_900_000_000, -2_000_000_000)):
        connection.execute(
            "INSERT INTO writes (cycle_id, time, job_id, account, user, pool, mode, old_value, new_value, tie, outcome)"
            " VALUES (1, 0, '44', 'a', 'u', 'default', 'nice', ?, ?, 0, 'applied')",
            (old, value),
        )
    connection.close()
    writes = HistoryLedger(tmp_path).writes_of(["44", "45"])
    assert writes == {
        "44": [LedgerWrite("nice", -2_000_000_000, None, 5), LedgerWrite("nice", -1_900_000_000, None, -2_000_000_000)]
    }
    lone = snapshot([node(cpu=4)], [job("a", job_id="44", nice=-2_000_000_000, cpu=1)])
    state, found = Recall(HistoryLedger(tmp_path)).reconcile(lone, PolicyState())
    assert found.recovered == 1
    assert state.jobs["44"].user_nice == 5 and state.jobs["44"].own_known


def test_an_unreadable_history_is_said_once_and_labels_still_hold(tmp_path: Path) -> None:
    history_path(tmp_path).write_text("this is not a database")
    recall = Recall(HistoryLedger(tmp_path))
    lone = snapshot([node(cpu=4)], [job("a", job_id="44", nice=LABEL_NICE_BELOW - 1, cpu=1)])
    state, found = recall.reconcile(lone, PolicyState())
    assert found.ledger_error is not None and "history" in found.text("state.json")
    assert not state.jobs["44"].own_known
    _, again = recall.reconcile(lone, PolicyState())
    assert again.ledger_error is None


def test_write_records_that_contradict_themselves_are_ignored_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    controller = Controller(queue(3))
    cycle(controller, tmp_path)
    import sqlite3

    connection = sqlite3.connect(history_path(tmp_path), isolation_level=None)
    connection.execute("UPDATE writes SET new_value = 99999999999 WHERE job_id = '1000'")
    connection.execute("UPDATE writes SET user_nice = -2000000000 WHERE job_id = '1001'")
    connection.close()
    caplog.set_level(logging.WARNING, logger="slurm_drf")
    found = HistoryLedger(tmp_path).writes_of(["1000", "1001", "1002"])
    assert set(found) == {"1002"}
    assert f"{history_path(tmp_path)}: 2 write record(s) hold values outside Slurm's range" in caplog.text


def test_site_factors_are_written_again_after_slurmctld_restarted(tmp_path: Path) -> None:
    """squeue cannot show site factors: a new BOOT_TIME means ours may be older ones, so all are written."""
    from slurm_drf.slurm.parse.snapshot import SnapshotHeader, build_snapshot

    jobs = queue(6)
    config = Config(resources=("cpu", "mem"), mode="site_factor", state_dir=str(tmp_path))
    store = StateStore(tmp_path)

    class Source:
        name = "boot"

        def __init__(self, boot: str) -> None:
            self.boot = boot

        def fetch_snapshot(self) -> Snapshot:
            text = f"BOOT_TIME               = {self.boot}\nClusterName = test\n"
            shown = list(slurmctld.jobs.values())
            return build_snapshot(SnapshotHeader("test", "", None), [node(cpu=64, mem=64000)], shown, None, text)

    slurmctld = Controller(jobs)
    first = run_cycle(Source("2026-12-02T01:00:00"), slurmctld, config, store)
    assert len(first.writes) == len(jobs)
    assert store.load().controller_started == "2026-12-02T01:00:00"
    same = run_cycle(Source("2026-12-02T01:00:00"), slurmctld, config, store)
    assert same.writes == ()  # nothing changed, nothing written
    again = run_cycle(Source("2026-12-02T02:00:00"), slurmctld, config, store)
    assert set(again.writes) == set(first.writes)  # the same values, written again
    assert store.load().controller_started == "2026-12-02T02:00:00"


@pytest.mark.parametrize("value", [None, "2026-12-02T01:19:41"])
def test_the_controllers_boot_time_goes_through_a_snapshot_file(value: str | None) -> None:
    from slurm_drf.model.codec import parse_snapshot, render_snapshot

    taken = replace(snapshot([node(cpu=4)], [job("a", job_id="1", cpu=1)]), controller_started=value)
    data = render_snapshot(taken)
    assert ("controller_started" in data) == (value is not None)
    assert parse_snapshot(data).controller_started == value


def test_a_boot_time_that_is_not_text_is_refused() -> None:
    from slurm_drf.errors import SnapshotError
    from slurm_drf.model.codec import parse_snapshot, render_snapshot

    data = render_snapshot(snapshot([node(cpu=4)], [job("a", job_id="1", cpu=1)]))
    with pytest.raises(SnapshotError, match="controller_started: expected a short string, got 5"):
        parse_snapshot({**data, "controller_started": 5})
