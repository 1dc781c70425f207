"""Hostile round 3: a lease that outlives its writes, and state or lease directories a run cannot trust.

- A holder whose write phase outlasts its hold: the daemon renews before
  every batch and stops at once, in one line, when the lease was taken
  (cycle.fence; the fake-clock cases are tests/unit/cycle/test_fence.py);
  the writers send nothing after the end of the hold they are given.
- A state or lease directory that is a symlink, writable by others (mode
  1777 too), on a read-only or full filesystem: one line naming it, exit 2
  (others could change it) or 1 (the disk), before anything is written;
  `once --dry-run` refuses exactly what `once` does (one check,
  files.check_directory).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import subprocess
import sys
import time
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from slurm_drf.cli.main import main
from slurm_drf.config.settings import Config
from slurm_drf.cycle import backends
from slurm_drf.cycle import fence as fence_module
from slurm_drf.cycle.lease import LEASE_FILE, Lease, LeaseLost
from slurm_drf.cycle.reset import reset_jobs
from slurm_drf.cycle.run import run_cycle
from slurm_drf.cycle.store import STATE_FILE, StateStore
from slurm_drf.errors import SlurmWriteError, StateError
from slurm_drf.files import MIN_FREE_BYTES, UnsafePathError, check_directory
from slurm_drf.model.types import Snapshot
from slurm_drf.service.loop import Service, ServiceParts
from slurm_drf.slurm import execute, pyslurm_write, write
from slurm_drf.slurm.execute import DeadlinePassed, run_process_by
from slurm_drf.slurm.pyslurm_write import PyslurmWriter
from slurm_drf.slurm.write import HoldEnded, ScontrolWriter, Write, WriteResult
from tests.polling import wait_for
from tests.unit.builders import job, node, snapshot

# --------------------------------------------------------------------------
# The lease taken while the holder writes


def pending(count: int) -> Snapshot:
    jobs = [job(("a", "b", "c")[k % 3], job_id=str(100 + k), cpu=1 + k % 2) for k in range(count)]
    return snapshot([node(cpu=4)], jobs)


class Source:
    name = "fake"

    def __init__(self, count: int) -> None:
        self.count = count

    def fetch_snapshot(self) -> Snapshot:
        return pending(self.count)


class TakenMidWrite:
    """A writer during whose `at`-th batch the other head takes the lease (its clock past our hold)."""

    def __init__(self, lease_dir: Path, at: int) -> None:
        self.other = Lease(lease_dir, 60.0, clock=lambda: 4_000_000_000.0, name="head2")
        self.at = at
        self.batches: list[list[str]] = []
        self.after_takeover: list[str] = []

    def apply(self, writes: Sequence[Write]) -> WriteResult:
        if len(self.batches) >= self.at:
            self.after_takeover.extend(w.job_id for w in writes)
        self.batches.append([w.job_id for w in writes])
        if len(self.batches) == self.at:
            assert self.other.acquire() is None  # head2 holds it now
        return WriteResult(applied=tuple(w.job_id for w in writes))

    def run_lines(self, lines: Sequence[str]) -> tuple[dict[str, str], list[str]]:
        return {}, []


def test_a_daemon_whose_lease_is_taken_mid_write_stops_at_once_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lease_dir = tmp_path / "shared"
    writer = TakenMidWrite(lease_dir, at=2)
    config = Config(resources=("cpu",), state_dir=str(tmp_path / "head1"), lease_dir=str(lease_dir), interval=60.0)
    service = Service(
        config,
        StateStore(config.state_dir, config.lease_dir),
        parts=ServiceParts(lambda _config: Source(40), lambda _source: writer, lambda _config: []),
    )
    with caplog.at_level(logging.INFO, logger="slurm_drf"):
        delay = service.run_once()
    assert delay is not None  # the cycle failed, and the next attempt waits
    assert len(writer.batches) == 2 and writer.after_takeover == []
    sent = sum(map(len, writer.batches))
    assert 1 < sent < 40
    lost = [r for r in caplog.records if "holds the lease now; this daemon stopped" in r.getMessage()]
    assert len(lost) == 1 and lost[0].levelno == logging.WARNING
    assert (
        lost[0]
        .getMessage()
        .startswith(
            f"cycle 1 failed: lease: {lease_dir / LEASE_FILE}: head2 holds the lease now; "
            f"this daemon stopped writing after {sent} of 40 value(s); the holder writes the rest; next attempt in "
        )
    )
    # The state both heads share was saved before the writes, and not again by the daemon that lost the lease.
    assert json.loads((lease_dir / LEASE_FILE).read_text())["holder"] == "head2"


class DeadlineWriter:
    """Sends at most `room` writes of each batch: the end of the hold came before the rest."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.sent: list[str] = []
        self.left: list[float] = []  # how long before the end of the hold each batch was handed over

    def apply(self, writes: Sequence[Write]) -> WriteResult:
        raise AssertionError("under a lease a writer that can is told the end of the hold")

    def apply_until(self, writes: Sequence[Write], until: float) -> WriteResult:
        self.left.append(until - time.monotonic())
        done = tuple(w.job_id for w in writes[: self.room])
        self.sent.extend(done)
        return WriteResult(applied=done)

    def run_lines(self, lines: Sequence[str]) -> tuple[dict[str, str], list[str]]:
        return {}, []


def test_writes_the_hold_left_no_time_for_are_forgotten_and_wait_for_the_next_cycle(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lease = Lease(tmp_path / "shared", 60.0, name="head1")
    assert lease.acquire() is None
    store = StateStore(tmp_path / "head1", tmp_path / "shared")
    writer = DeadlineWriter(room=3)
    report = run_cycle(Source(12), writer, Config(resources=("cpu",)), store, guard=lease.confirm)
    # The first batch is one write; of the second (four) the writer sent three before the hold ended.
    assert report.result is not None and report.result.count == 4 == len(writer.sent)
    assert len(report.writes) == 12
    # The memory keeps only what was written: the others' values were never sent.
    assert set(store.load().jobs) == set(writer.sent)
    assert [r.getMessage() for r in caplog.records if r.name == "slurm_drf.cycle.run"] == [
        "8 of 12 write(s) wait for the next cycle: the lease's hold (less half an interval) ended before they were sent"
    ]
    # Each batch was told when the hold ends, less half an interval of the 60 s interval's 90 s hold.
    assert len(writer.left) == 2 and all(55 < left <= 60 for left in writer.left)


def test_reset_renews_the_lease_before_its_writes_and_stops_when_it_is_taken(tmp_path: Path) -> None:
    lease_dir = tmp_path / "shared"
    store = StateStore(tmp_path / "head1", lease_dir)
    lease = Lease(lease_dir, 60.0, name="head1")
    assert lease.acquire() is None
    run_cycle(Source(6), TakenMidWrite(lease_dir, at=99), Config(resources=("cpu",)), store, guard=lease.confirm)
    assert len(store.load().jobs) == 6

    class Labelled(Source):
        def fetch_snapshot(self) -> Snapshot:
            memory = store.load().jobs
            jobs = [
                job("a", job_id=str(100 + k), cpu=1, nice=memory[str(100 + k)].written if str(100 + k) in memory else 0)
                for k in range(self.count)
            ]
            return snapshot([node(cpu=4)], jobs)

    class TakenDuringReset:
        """scontrol for reset's lines; the other head takes the lease while the first batch runs."""

        def __init__(self) -> None:
            self.other = Lease(lease_dir, 60.0, clock=lambda: 4_000_000_000.0, name="head2")
            self.calls: list[list[str]] = []

        def apply(self, writes: Sequence[Write]) -> WriteResult:
            raise AssertionError("reset sends lines, not writes")

        def run_lines(self, lines: Sequence[str]) -> tuple[dict[str, str], list[str]]:
            self.calls.append(list(lines))
            assert self.other.acquire() is None
            return {}, []

    writer = TakenDuringReset()
    fence = fence_module.HoldFence(lease.confirm, 60.0)
    with pytest.raises(LeaseLost, match=r"head2 holds the lease now; this daemon stopped writing after 1 of 6 "):
        reset_jobs(Labelled(6), writer, store, fence=fence)
    assert writer.calls == [["update jobid=100 nice=0"]]  # one batch (one job's line), then nothing more
    # The state both heads share is not saved by the daemon that lost the lease: all six still remembered.
    assert len(store.load().jobs) == 6


def test_the_reset_verb_passes_the_fence_before_every_batch_of_its_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `slurm-drf reset` under a lease: the other head takes the lease while reset's first batch runs.
    lease_dir, state_dir = tmp_path / "shared", tmp_path / "head1"
    store = StateStore(state_dir, lease_dir)
    run_cycle(Source(6), TakenMidWrite(lease_dir, at=99), Config(resources=("cpu",)), store)
    remembered = store.load().jobs
    assert len(remembered) == 6

    class Labelled(Source):
        def fetch_snapshot(self) -> Snapshot:
            jobs = [job("a", job_id=job_id, cpu=1, nice=memory.written) for job_id, memory in remembered.items()]
            return snapshot([node(cpu=4)], jobs)

    class TakenDuringReset:
        def __init__(self) -> None:
            self.calls: list[list[str]] = []

        def apply(self, writes: Sequence[Write]) -> WriteResult:
            raise AssertionError("reset sends lines, not writes")

        def run_lines(self, lines: Sequence[str]) -> tuple[dict[str, str], list[str]]:
            self.calls.append(list(lines))
            assert Lease(lease_dir, 60.0, clock=lambda: 4_000_000_000.0, name="head2").acquire() is None
            return {}, []

    writer = TakenDuringReset()
    monkeypatch.setattr(backends, "make_source", lambda config: Labelled(6))
    monkeypatch.setattr(backends, "make_writer", lambda source: writer)
    config = _config(tmp_path, lease_dir=str(lease_dir), interval="60s")
    assert main(["reset", "--config", str(config), "--state-dir", str(state_dir)]) == 1
    assert _error_line(capsys) == (
        f"slurm-drf: lease: {lease_dir / LEASE_FILE}: head2 holds the lease now; "
        "this daemon stopped writing after 1 of 6 value(s); the holder writes the rest"
    )
    assert writer.calls == [["update jobid=100 nice=0"]]  # one batch of one job's line, then nothing more
    assert store.load().jobs == remembered  # the shared state is not saved by the daemon that lost the lease


# --------------------------------------------------------------------------
# The writers send nothing after the end of the hold


class FakeTime:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


def test_scontrol_is_given_no_longer_than_the_hold_and_a_part_not_started_is_not_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeTime()
    timeouts: list[float] = []

    def run_process_by(argv: list[str], timeout: float, deadline: float, **kwargs: Any) -> types.SimpleNamespace:
        timeouts.append(timeout)
        clock.now += 2.0  # each scontrol process takes 2 s
        return types.SimpleNamespace(returncode=0, stderr="", stdout="")

    monkeypatch.setattr(write, "run_process_by", run_process_by)
    monkeypatch.setattr(write, "time", clock)
    writes = [Write(str(1 + k), "nice", 5) for k in range(write.BATCH * 3)]
    result = ScontrolWriter(timeout=60.0).apply_until(writes, until=clock.now + 3.0)
    # The first part gets the 3 s the hold has left, the second the 1 s then left; the third is not sent.
    assert timeouts == [3.0, 1.0]
    assert result.applied == tuple(w.job_id for w in writes[: 2 * write.BATCH])


def test_scontrol_stopped_at_the_end_of_the_hold_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeTime()

    def run_process_by(argv: list[str], timeout: float, deadline: float, **kwargs: Any) -> types.SimpleNamespace:
        clock.now += timeout
        raise SlurmWriteError(f"scontrol: no answer within {timeout:g} s")

    monkeypatch.setattr(write, "run_process_by", run_process_by)
    monkeypatch.setattr(write, "time", clock)
    with pytest.raises(HoldEnded) as caught:
        ScontrolWriter(timeout=60.0).apply_until([Write("7", "nice", 5)], until=clock.now + 0.25)
    assert str(caught.value) == (
        "scontrol update: stopped at the end of the lease's hold, after 0.250 s: which of its 1 write(s) "
        "landed is unknown (the next cycle reads them back)"
    )


def test_a_process_that_starts_after_its_deadline_is_stopped_before_it_reads_its_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon paused between its last look at the clock and scontrol's start (SIGSTOP, a stalled machine)
    must not send the batch once it runs again: the hold it was sized for has ended. A timeout alone
    would count from the start and give the process its whole time after the pause."""
    received = tmp_path / "received"
    cat = ["sh", "-c", f'cat > "{received}"']
    with pytest.raises(DeadlinePassed, match="not started: its deadline had passed"):
        run_process_by(cat, 60.0, time.monotonic() - 1.0, input_text="update JobId=7 Nice=5\n")
    assert not received.exists()
    # Paused (two minutes) once the process exists: it is stopped before it reads a line.
    looks = iter([0.0, 120.0])
    clock = types.SimpleNamespace(monotonic=lambda: time.monotonic() + next(looks, 120.0))
    monkeypatch.setattr(execute, "time", clock)
    with pytest.raises(DeadlinePassed, match="stopped before its input was sent"):
        run_process_by(cat, 60.0, time.monotonic() + 60.0, input_text="update JobId=7 Nice=5\n")
    assert not received.exists() or received.read_text() == ""
    monkeypatch.undo()
    # Before its deadline it runs as without one.
    done = run_process_by(cat, 60.0, time.monotonic() + 60.0, input_text="update JobId=7 Nice=5\n")
    assert done.returncode == 0 and received.read_text() == "update JobId=7 Nice=5\n"


def test_a_paused_caller_cannot_keep_its_process_alive_past_the_deadline(tmp_path: Path) -> None:
    """The holder stopped (SIGSTOP) while its scontrol runs: nothing of the daemon's can stop scontrol at
    the end of the hold, so the deadline has a keeper of its own (timeout(1)). A process that would write
    after 3 s, its deadline in 0.5 s, its caller stopped meanwhile: it is gone, and never wrote."""
    command, pid_file, late = _late_writer(tmp_path)
    caller = subprocess.Popen(
        [sys.executable, "-c", CALLER, json.dumps(command)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 30, "the process to start")
        caller.send_signal(signal.SIGSTOP)
        pid = int(pid_file.read_text())
        wait_for(lambda: not _alive(pid), 30, "the process to be stopped")
        assert not late.exists()
        caller.send_signal(signal.SIGCONT)
        _, err = caller.communicate(timeout=30)
        # The caller, resumed, says it as a process that did not answer in time.
        assert caller.returncode == 3, err
        assert b"no answer within" in err, err
    finally:
        caller.kill()
        caller.wait()


def test_a_process_stopped_at_its_timeout_is_stopped_whole(tmp_path: Path) -> None:
    """Stopping the command at its timeout (the caller running) stops what runs under timeout(1) too:
    killing timeout alone would leave the command running with nothing left to stop it."""
    command, pid_file, late = _late_writer(tmp_path)
    with pytest.raises(SlurmWriteError, match="no answer within"):
        run_process_by(command, 0.5, time.monotonic() + 60.0, error_class=SlurmWriteError)
    pid = int(pid_file.read_text())
    wait_for(lambda: not _alive(pid), 30, "the process to be stopped")
    assert not late.exists()


# Runs run_process_by on the argv given, with half a second to its deadline; exits 3 on SlurmWriteError.
CALLER = """
import json, sys, time
from slurm_drf.errors import SlurmWriteError
from slurm_drf.slurm.execute import run_process_by
try:
    run_process_by(json.loads(sys.argv[1]), 60.0, time.monotonic() + 0.5, error_class=SlurmWriteError)
except SlurmWriteError as error:
    print(error, file=sys.stderr)
    sys.exit(3)
"""


def _late_writer(tmp_path: Path) -> tuple[list[str], Path, Path]:
    """A command that says its pid (in the first file), then writes the second file 3 s later."""
    pid_file, late = tmp_path / "pid", tmp_path / "late"
    return ["sh", "-c", f'echo $$ > "{pid_file}"; sleep 3; echo late > "{late}"'], pid_file, late


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie, ended and not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def test_a_part_whose_scontrol_started_after_the_hold_is_not_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    deadlines: list[float] = []

    def run_process_by(argv: list[str], timeout: float, deadline: float, **kwargs: Any) -> types.SimpleNamespace:
        deadlines.append(deadline)
        if len(deadlines) == 2:
            raise DeadlinePassed("scontrol: stopped before its input was sent: it started after its deadline")
        return types.SimpleNamespace(returncode=0, stderr="", stdout="")

    monkeypatch.setattr(write, "run_process_by", run_process_by)
    writes = [Write(str(1 + k), "nice", 5) for k in range(write.BATCH * 3)]
    until = time.monotonic() + 60.0
    result = ScontrolWriter(timeout=60.0).apply_until(writes, until=until)
    # Each part is given the hold's end; the second started after it: it and the rest wait, in no field.
    assert deadlines == [until, until]
    assert result.applied == tuple(w.job_id for w in writes[: write.BATCH])
    assert not result.gone and not result.failed


def test_pyslurm_sends_no_update_after_the_end_of_the_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeTime()
    updated: list[int] = []

    class JobSubmitDescription:
        def __init__(self, **changes: int) -> None:
            self.changes = changes

    class Job:
        def __init__(self, job_id: int) -> None:
            self.job_id = job_id

        def modify(self, changes: JobSubmitDescription) -> None:
            updated.append(self.job_id)
            clock.now += 0.4

    module = types.ModuleType("pyslurm")
    module.Job = Job  # type: ignore[attr-defined]
    module.JobSubmitDescription = JobSubmitDescription  # type: ignore[attr-defined]
    monkeypatch.setattr(pyslurm_write, "time", clock)
    writes = [Write(str(1 + k), "nice", 5) for k in range(10)]
    result = PyslurmWriter(module).apply_until(writes, until=clock.now + 1.0)
    assert updated == [1, 2, 3]  # sent at 0, 0.4 and 0.8 s; not at 1.2
    assert result.applied == ("1", "2", "3") and not result.failed and not result.gone


# --------------------------------------------------------------------------
# State and lease directories a run cannot trust


def _config(tmp_path: Path, **keys: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text("".join(f"{key}: {json.dumps(value)}\n" for key, value in keys.items()), encoding="utf-8")
    path.chmod(0o600)
    return path


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("slurm-drf: INFO: ")]
    assert len(lines) == 1, lines
    return lines[0]


def _state_dir(tmp_path: Path, kind: str) -> tuple[Path, str]:
    """A state directory of `kind`, and the line every run must refuse it with."""
    path = tmp_path / "state"
    if kind == "symlink":
        target = tmp_path / "real-state"
        target.mkdir(mode=0o700)
        path.symlink_to(target)
        return path, (
            f"slurm-drf: state: {path}: the state directory is a symlink (to {target}); "
            f"name the directory itself in the config: {target}"
        )
    if kind == "dangling symlink":
        path.symlink_to(tmp_path / "nowhere")
        return path, (
            f"slurm-drf: state: {path}: the state directory is a symlink (to {tmp_path / 'nowhere'}); "
            f"name the directory itself in the config: {tmp_path / 'nowhere'}"
        )
    if kind == "file":
        path.write_text("")
        shown = stat.filemode(path.stat().st_mode)
        return path, f"slurm-drf: state: {path}: the state directory is not a directory ({shown})"
    mode = {"mode 1777": 0o1777, "mode 0777": 0o777, "mode 0770": 0o770}[kind]
    path.mkdir()
    path.chmod(mode)
    shown = stat.filemode(stat.S_IFDIR | mode)
    return path, (
        f"slurm-drf: state: {path}: the state directory is writable by group or others (mode {shown}); "
        f"run: chmod go-w {path}"
    )


UNSAFE = ["symlink", "dangling symlink", "file", "mode 1777", "mode 0777", "mode 0770"]


@pytest.mark.parametrize("kind", UNSAFE)
@pytest.mark.parametrize("verb", [["once", "--dry-run"], ["once"], ["reset", "--dry-run"], ["reset"]], ids=" ".join)
def test_a_state_directory_others_could_change_is_refused_by_the_pre_flight_as_by_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, verb: list[str]
) -> None:
    # The input: a state directory of mode 1777 that `once --dry-run` accepted and `once` refused.
    state_dir, expected = _state_dir(tmp_path, kind)
    before = sorted(os.listdir(tmp_path))
    config = _config(tmp_path)
    assert main([*verb, "--config", str(config), "--state-dir", str(state_dir)]) == 2
    assert _error_line(capsys) == expected
    assert sorted(os.listdir(tmp_path)) == sorted([*before, "config.yaml"])  # nothing created beside it
    if state_dir.is_dir() and not state_dir.is_symlink():
        assert os.listdir(state_dir) == []  # and nothing in it


@pytest.mark.parametrize("kind", ["symlink", "mode 1777"])
def test_a_lease_directory_others_could_change_is_refused_before_the_lease_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    lease_dir, expected = _state_dir(tmp_path, kind)
    expected = expected.replace("the state directory", "the lease directory")
    config = _config(tmp_path, lease_dir=str(lease_dir))
    for verb in (["once", "--dry-run"], ["once"]):
        assert main([*verb, "--config", str(config), "--state-dir", str(tmp_path / "own")]) == 2
        assert _error_line(capsys) == expected
    assert not (Path(os.path.realpath(lease_dir)) / LEASE_FILE).exists()
    # The lease itself checks its directory as the state is checked.
    with pytest.raises(UnsafePathError, match="the lease directory is "):
        Lease(lease_dir, 60.0).acquire()


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_a_state_directory_on_a_full_or_read_only_filesystem_is_one_line_exit_1_before_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    (state_dir / STATE_FILE).write_bytes(b"x" * 5000)
    real = os.statvfs(state_dir)
    fields = list(real)
    if fault == "full":
        fields[3] = fields[4] = 1  # f_bfree, f_bavail: one block left
    else:
        fields[8] = real.f_flag | os.ST_RDONLY
    filled = os.statvfs_result(fields)
    monkeypatch.setattr(os, "statvfs", lambda path: filled)
    if fault == "full":
        free = real.f_frsize
        expected = (
            f"slurm-drf: state: {state_dir}: the state directory is on a full filesystem ({free:,} bytes free, "
            f"a save needs {5000 + MIN_FREE_BYTES:,}); nothing is written to Slurm until there is room"
        )
    else:
        expected = (
            f"slurm-drf: state: {state_dir}: the state directory is on a read-only filesystem; "
            "nothing is written to Slurm until it can be written"
        )
    config = _config(tmp_path)
    for verb in (["once", "--dry-run"], ["once"], ["reset", "--dry-run"], ["reset"]):
        assert main([*verb, "--config", str(config), "--state-dir", str(state_dir)]) == 1, verb
        assert _error_line(capsys) == expected
    assert sorted(os.listdir(state_dir)) == [STATE_FILE]  # no lock, no history, nothing half-written


def test_a_missing_state_directory_is_judged_by_the_directories_above_it(tmp_path: Path) -> None:
    check_directory(tmp_path / "new" / "state", "the state directory")  # fine: the run creates it
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    with pytest.raises(UnsafePathError, match=r"is in directory .*open, which is writable by group or others"):
        check_directory(tmp_path / "open" / "state", "the state directory")
    with pytest.raises(UnsafePathError):
        StateStore(tmp_path / "open" / "state").ensure_directory()
    assert not (tmp_path / "open" / "state").exists()


def test_the_store_and_its_check_agree_and_a_private_directory_passes(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state", tmp_path / "shared")
    store.ensure_directory()
    store.check()
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) & 0o027 == 0
    (tmp_path / "shared").chmod(0o1777)
    with pytest.raises(StateError, match=r"shared: the lease directory is writable by group or others"):
        store.check()
