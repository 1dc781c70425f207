"""Faults against the sandbox's real slurmctld: time going back never makes our values the users' (issue 20).

Each test gives its jobs own nices (as their owners would: 0, 5, 100),
lets slurm-drf write, injects a fault, and checks what Slurm then holds:
after the next cycle and a `reset`, every job has exactly its own nice
again. The faults:

- slurmctld restarted from older state (its StateSaveLocation as it was
  before a `reset`: what a backup controller taking over from shared
  state, or a SIGKILL before the state save, brings back; deterministic);
- slurmctld SIGKILLed right after a `reset` (SPEC §8: it loses it);
- the daemon's state.json deleted, history.sqlite kept;
- a state directory with neither file facing an earlier install's labels.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from slurm_drf.failpoints import POINTS, VARIABLE
from slurm_drf.policy.ownership import is_label_nice
from tests.integration.live_helpers import (
    DRF,
    Live,
    drf,
    drf_env,
    pending_priorities,
    plan_jobs,
    plan_order,
    priority_order,
    queue,
    slurmctld_pid,
    start_slurmctld,
    stop_slurmctld,
    wait_in_sprio,
    wait_recorded,
    write_config,
)
from tests.polling import wait_for

if TYPE_CHECKING:
    from tests.integration.conftest import SlurmSandbox

LATER = "--begin=now+1hour"  # pending, and never started during the test
OWN = (0, 5, 100)
ACCOUNTS = (("gputeam", "gpu", "--gres=gpu:1"), ("memteam", "cpu", "--mem=32000"), ("cputeam", "cpu", "-c4"))


@pytest.fixture
def live(slurm: SlurmSandbox, tmp_path: Path) -> Live:
    return Live(slurm, tmp_path)


def submit_own(live: Live, count: int = 12, *, eligible: bool = False) -> dict[str, int]:
    """Pending jobs of three accounts, each with a nice of its owner's: job id -> own nice.

    `eligible`: behind a full node instead of a later begin time, so that
    sprio lists them (it shows site factors only for jobs that could start).
    """
    if eligible:
        live.fill_node()
    else:
        live.require_quiet_queue()
    own: dict[str, int] = {}
    for k in range(count):
        account, partition, size = ACCOUNTS[k % len(ACCOUNTS)]
        nice = OWN[k % len(OWN)]
        own[live.submit("-A", account, "-p", partition, size, f"--nice={nice}", *(() if eligible else (LATER,)))] = nice
    return own


def nices(live: Live, jobs: dict[str, int]) -> dict[str, int]:
    shown = queue(live.slurm)
    return {job: shown[job].nice for job in jobs}


def labelled(live: Live, jobs: dict[str, int]) -> list[str]:
    return [job for job, nice in nices(live, jobs).items() if is_label_nice(nice)]


def state_save_location(slurm: SlurmSandbox) -> Path:
    return slurm.dir / "state"


def kill_slurmctld(slurm: SlurmSandbox) -> None:
    """SIGKILL, as an OOM kill or a lost node does: no state save (once slurmdbd has every job)."""
    wait_recorded(slurm)
    pid = slurmctld_pid(slurm)
    assert pid is not None, "slurmctld is not running"
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: slurmctld_pid(slurm) is None, 60, "slurmctld to die")


def refused_in_last_cycle(live: Live) -> list[tuple[str, str]]:
    """(job, Slurm's message) for each write the last cycle sent that Slurm refused (history.sqlite)."""
    with contextlib.closing(sqlite3.connect(live.state_dir / "history.sqlite")) as db:
        rows = db.execute(
            "SELECT job_id, coalesce(message, '') FROM writes"
            " WHERE cycle_id = (SELECT max(id) FROM cycles) AND outcome = 'failed' ORDER BY job_id"
        ).fetchall()
    return [(str(job), str(message)) for job, message in rows]


def assert_own_after_cycle_and_reset(live: Live, own: dict[str, int], config: Path | None = None) -> None:
    """The next cycle keeps every job's own nice in its value, Slurm follows its order, and reset gives it back.

    A controller just back from a fault may refuse some updates for a while
    (slurmctld answers "try again in a bit" while it re-registers jobs with
    slurmdbd); the daemon sends those again the next cycle, so cycles are
    run until one has no refused write (each one's refusals printed).
    """
    cycles: list[str] = []

    def cycle_without_refusals() -> Mapping[str, Any] | None:
        run = live.once(config=config)
        refused = refused_in_last_cycle(live)
        cycles.append(run.stderr)
        if refused:
            print(f"cycle {len(cycles)}: Slurm refused {len(refused)} write(s): {refused}")
            return None
        return run.plan

    plan: Mapping[str, Any] = wait_for(cycle_without_refusals, 60, "a cycle whose writes Slurm all took")
    assert {job: plan_jobs(plan)[job]["user_nice"] for job in own} == own
    order = [job for job in plan_order(plan) if job in own]
    try:
        followed = priority_order(live.slurm, order)
    except AssertionError as error:  # equal priorities: say what the daemon did
        raise AssertionError(f"{error}\nthe last cycle said:\n{cycles[-1]}") from error
    assert followed == order, f"{pending_priorities(live.slurm, order)}\nthe last cycle said:\n{cycles[-1]}"
    reset = live.reset(config=config).stdout.splitlines()
    assert not [line for line in reset if "left alone" in line and "no longer" not in line], reset
    assert nices(live, own) == own


def ours_shown(live: Live, own: dict[str, int], mode: str) -> list[str]:
    """The jobs that show a value of the daemon's: a label nice, a site factor, a priority fixed by it."""
    if mode == "nice":
        return labelled(live, own)
    if mode == "site_factor":
        factors = wait_in_sprio(live.slurm, own)
        return [job for job in own if factors[job].site != 0]
    shown = queue(live.slurm)
    return [job for job in own if shown[job].nice == 0 and shown[job].priority > 1_000_000]


@pytest.mark.parametrize("mode", ["nice", "site_factor", "priority"])
def test_slurmctld_back_from_older_state_never_makes_our_values_the_users(
    live: Live, tmp_path: Path, mode: str
) -> None:
    own = submit_own(live, eligible=mode == "site_factor")
    config = write_config(tmp_path, f"{mode}.yaml", state_dir=str(live.state_dir), mode=mode)
    live.once(config=config)
    assert sorted(ours_shown(live, own, mode)) == sorted(own)
    # slurmctld saves the daemon's values (a clean stop saves everything); keep that state.
    stop_slurmctld(live.slurm)
    saved = tmp_path / "ctld-state"
    shutil.copytree(state_save_location(live.slurm), saved)
    start_slurmctld(live.slurm)
    live.reset(config=config)
    assert nices(live, own) == own
    assert ours_shown(live, own, mode) == []
    # slurmctld comes back from the state saved before the reset.
    stop_slurmctld(live.slurm)
    shutil.rmtree(state_save_location(live.slurm))
    shutil.copytree(saved, state_save_location(live.slurm))
    start_slurmctld(live.slurm)
    assert sorted(ours_shown(live, own, mode)) == sorted(own), "the older state did not come back"
    assert_own_after_cycle_and_reset(live, own, config)


def test_slurmctld_killed_right_after_a_reset(live: Live) -> None:
    own = submit_own(live)
    live.once()
    stop_slurmctld(live.slurm)  # saved with the daemon's values
    start_slurmctld(live.slurm)
    live.reset()
    kill_slurmctld(live.slurm)
    start_slurmctld(live.slurm)
    back = labelled(live, own)
    print(f"slurmctld SIGKILLed after reset: {len(back)} of {len(own)} jobs came back holding our values")
    assert_own_after_cycle_and_reset(live, own)


def test_a_deleted_state_file_is_rebuilt_from_the_history(live: Live) -> None:
    own = submit_own(live)
    live.once()
    live.state_file.unlink()
    run = live.once()
    assert "own nice recovered from the history" in run.stderr, run.stderr
    assert {job: plan_jobs(run.plan)[job]["user_nice"] for job in own} == own
    assert_own_after_cycle_and_reset(live, own)


def test_an_earlier_installs_labels_are_nobodys_own(live: Live, tmp_path: Path) -> None:
    own = submit_own(live, count=6)
    live.once()
    fresh = tmp_path / "fresh-state"
    run = drf("once", "--config", str(live.config), "--state-dir", str(fresh), "--format", "json", "--dry-run")
    assert "earlier install" in run.stderr, run.stderr
    assert {plan_jobs(run.plan)[job]["user_nice"] for job in own} == {0}
    kept = drf("reset", "--config", str(live.config), "--state-dir", str(fresh))
    assert kept.stdout.startswith("reset 0 job(s)"), kept.stdout
    assert sorted(labelled(live, own)) == sorted(own)
    drf("reset", "--config", str(live.config), "--state-dir", str(fresh), "--assume-own", "0")
    assert set(nices(live, own).values()) == {0}


# --------------------------------------------------------------------------
# The daemon killed mid-cycle


def drf_run(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """slurm-drf ARGS with extra environment; whatever its exit."""
    full = {**drf_env(), **(env or {})}
    return subprocess.run([*DRF, *args], capture_output=True, text=True, timeout=timeout, env=full, check=False)


def changes(live: Live, own: dict[str, int]) -> None:
    """Work for the next cycle: a new job at the head, two owners who renice."""
    own[live.submit("-A", "newteam", "-p", "cpu", "-c1", "--mem=100", "--nice=5", LATER)] = 5
    for job in list(own)[:2]:
        live.slurm.run("scontrol", "update", f"jobid={job}", "nice=7")
        own[job] = 7


@pytest.mark.parametrize("point", POINTS)
def test_a_cycle_killed_at_any_point_needs_no_manual_step(live: Live, point: str) -> None:
    own = submit_own(live, 9)
    live.once()
    changes(live, own)
    killed = drf_run("once", "--config", str(live.config), "--state-dir", str(live.state_dir), env={VARIABLE: point})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # No half-written state, no stale lock: the next run just runs.
    assert json.loads(live.state_file.read_text())["format"] == "slurm-drf-state/1"
    assert_own_after_cycle_and_reset(live, own)
    assert not list(live.state_dir.glob(".state.json.*.tmp"))


def test_the_daemon_killed_at_random_times_loses_no_own_nice(live: Live, tmp_path: Path) -> None:
    own = submit_own(live, 9)
    config = write_config(tmp_path, "fast.yaml", state_dir=str(live.state_dir), interval="1s")
    chance = random.Random(20)
    for round_ in range(6):
        if round_ % 2:
            changes(live, own)
        with (tmp_path / f"daemon-{round_}.log").open("wb") as log:
            daemon = subprocess.Popen(
                [*DRF, "daemon", "--config", str(config)], stdout=subprocess.DEVNULL, stderr=log, env=drf_env()
            )
            try:
                # The fault's timing, drawn: anywhere in the first cycles (reads take ~0.1-0.5 s here).
                time.sleep(chance.uniform(0.2, 2.5))
            finally:
                daemon.kill()
                daemon.wait(timeout=60)
    assert_own_after_cycle_and_reset(live, own)


# --------------------------------------------------------------------------
# slurmctld and slurmdbd


def test_slurmctld_killed_before_it_saved_our_writes(live: Live) -> None:
    own = submit_own(live)
    # slurmctld saves the jobs (a SIGKILL right after sbatch loses the job itself), then the daemon writes.
    stop_slurmctld(live.slurm)
    start_slurmctld(live.slurm)
    live.once()
    kill_slurmctld(live.slurm)
    start_slurmctld(live.slurm)
    lost = [job for job, nice in nices(live, own).items() if nice == own[job]]
    print(f"slurmctld SIGKILLed after a cycle: {len(lost)} of {len(own)} writes lost")
    assert_own_after_cycle_and_reset(live, own)


def test_a_hung_slurmctld_fails_the_cycle_in_one_line(live: Live) -> None:
    own = submit_own(live, 3)
    live.once()
    pid = slurmctld_pid(live.slurm)
    assert pid is not None
    # Each read gives up after slurm_timeout: 10 s here, not the default 2 minutes.
    hung = write_config(live.tmp_path, "hung.yaml", state_dir=str(live.state_dir), slurm_timeout="10s")
    os.kill(pid, signal.SIGSTOP)
    try:
        run = drf("once", "--config", str(hung), "--state-dir", str(live.state_dir), check=False, timeout=300)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert run.returncode == 1, run
    assert len(run.error_lines) == 1, run.stderr
    assert run.error_lines[0].startswith("slurm-drf: slurm read: "), run.error_lines
    assert_own_after_cycle_and_reset(live, own)


def slurmdbd_pid(slurm: SlurmSandbox) -> int | None:
    try:
        pid = int((slurm.dir / "run" / "slurmdbd.pid").read_text().strip())
        return pid if Path(f"/proc/{pid}/comm").read_text().strip().startswith("slurmdbd") else None
    except (OSError, ValueError):
        return None


def test_slurmdbd_down_at_start_then_back(live: Live, tmp_path: Path) -> None:
    """The past from sacct (history:) while slurmdbd is down: one warning, the cycles go on, and it is
    asked again on its own once slurmdbd is back."""
    own = submit_own(live, 3)
    config = write_config(
        tmp_path, "past.yaml", state_dir=str(live.state_dir), interval="1s", history={"half_life": "1d", "weight": 1}
    )
    pid = slurmdbd_pid(live.slurm)
    assert pid is not None, "slurmdbd is not running"
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: slurmdbd_pid(live.slurm) is None, 60, "slurmdbd to stop")
    log_path = tmp_path / "daemon.log"

    def text() -> str:
        return log_path.read_text(errors="replace")

    with log_path.open("wb") as log:
        daemon = subprocess.Popen(
            [*DRF, "daemon", "--config", str(config)], stdout=subprocess.DEVNULL, stderr=log, env=drf_env()
        )
    try:
        wait_for(lambda: "sacct failed" in text(), 120, "the daemon to say sacct failed")
        wait_for(lambda: text().count("cycle 3:") == 1, 60, "three cycles")
        start_slurmctld(live.slurm)  # `slurm-sandbox up` starts what is missing: slurmdbd
        wait_for(lambda: "sacct answers again" in text(), 120, "the daemon to ask sacct again")
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
    assert text().count("sacct failed") == 1, text()
    assert "Traceback" not in text()
    assert_own_after_cycle_and_reset(live, own)


# --------------------------------------------------------------------------
# The daemon's own disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs of the test's own, unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "drf-test", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_a_state_directory_that_cannot_be_written_writes_nothing_to_slurm(
    live: Live, small_disk: Path, fault: str
) -> None:
    own = submit_own(live, 3)
    state_dir = small_disk / "state"
    run = drf("once", "--config", str(live.config), "--state-dir", str(state_dir), "--format", "json")
    before = (state_dir / "state.json").read_bytes()
    changes(live, own)
    shown = nices(live, own)
    if fault == "full":
        with (small_disk / "filler").open("wb", buffering=0) as filler, contextlib.suppress(OSError):
            while True:
                filler.write(b"\0" * 65536)
    else:
        subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    run = drf("once", "--config", str(live.config), "--state-dir", str(state_dir), check=False)
    assert run.returncode == 1, run
    # One error; the history beside the state cannot be read or written either, and says so in a line each.
    errors = [line for line in run.error_lines if not line.startswith("slurm-drf: WARNING: ")]
    assert len(errors) == 1, run.stderr
    assert errors[0].startswith("slurm-drf: state: ") and "nothing is written to Slurm" in errors[0], errors
    assert "Traceback" not in run.stderr
    assert (state_dir / "state.json").read_bytes() == before
    assert nices(live, own) == shown  # not one write
    if fault == "full":
        (small_disk / "filler").unlink()
    else:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    plan = drf("once", "--config", str(live.config), "--state-dir", str(state_dir), "--format", "json").plan
    assert {job: plan_jobs(plan)[job]["user_nice"] for job in own} == own
    drf("reset", "--config", str(live.config), "--state-dir", str(state_dir))
    assert nices(live, own) == own


def test_a_locked_history_is_one_line_and_the_cycle_goes_on(live: Live) -> None:
    own = submit_own(live, 3)
    live.once()
    changes(live, own)
    holder = sqlite3.connect(live.state_dir / "history.sqlite", isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        run = live.once()
    finally:
        holder.close()
    warnings = [line for line in run.error_lines if "history.sqlite" in line]
    assert len(warnings) == 1 and "locked" in warnings[0], run.stderr
    assert_own_after_cycle_and_reset(live, own)


# --------------------------------------------------------------------------
# Two head nodes


TWO_HEADS_INTERVAL = 2.0


class Head:
    """One head node's daemon: its own state directory, the shared lease directory."""

    def __init__(self, tmp_path: Path, name: str, lease_dir: Path) -> None:
        self.name = name
        self.config = write_config(
            tmp_path,
            f"{name}.yaml",
            state_dir=str(tmp_path / name),
            lease_dir=str(lease_dir),
            interval=f"{TWO_HEADS_INTERVAL:g}s",
        )
        self.log_path = tmp_path / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*DRF, "daemon", "--config", str(self.config)], stdout=subprocess.DEVNULL, stderr=log, env=drf_env()
            )

    def stop(self, how: signal.Signals) -> float:
        """Signal it, wait for it to end; when it ended (monotonic)."""
        assert self.process is not None
        self.process.send_signal(how)
        self.process.wait(timeout=60)
        return time.monotonic()

    def lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines()

    def cycles(self) -> list[str]:
        """Its cycles that read and planned (a standby's attempts are not cycles)."""
        return [line for line in self.lines() if " pending jobs, " in line]

    def standby(self) -> bool:
        return any("standby: " in line for line in self.lines())


def test_two_head_nodes_one_writer_and_the_standby_takes_over(live: Live, tmp_path: Path) -> None:
    own = submit_own(live, 6)
    lease_dir = tmp_path / "shared"
    first, second = Head(tmp_path, "head1", lease_dir), Head(tmp_path, "head2", lease_dir)
    try:
        first.start()
        wait_for(lambda: len(first.cycles()) >= 1, 60, "head1's first cycle")
        second.start()
        wait_for(second.standby, 60, "head2 to be the standby")
        wait_for(lambda: len(first.cycles()) >= 4, 60, "head1's fourth cycle")
        assert second.cycles() == [], "the standby read and planned while head1 held the lease"
        # head1 dies (SIGKILL: no release): head2 takes over when head1's hold ends.
        killed = first.stop(signal.SIGKILL)
        wait_for(second.cycles, 60, "head2 to take over")
        took = time.monotonic() - killed
        print(f"two heads: head2 took over {took:.1f} s after head1 was killed (interval {TWO_HEADS_INTERVAL:g} s)")
        assert took <= 2 * TWO_HEADS_INTERVAL + 1.0  # + one cycle's read on a loaded machine
        first.start()
        wait_for(first.standby, 60, "head1, back, to be the standby")
        count = len(first.cycles())
        # head2 stops cleanly: it releases the lease, and head1 takes over at its next attempt.
        stopped = second.stop(signal.SIGTERM)
        wait_for(lambda: len(first.cycles()) > count, 60, "head1 to take over")
        took = time.monotonic() - stopped
        print(f"two heads: head1 took over {took:.1f} s after head2 stopped")
        assert took <= 2 * TWO_HEADS_INTERVAL + 1.0
        first.stop(signal.SIGTERM)
    finally:
        for head in (first, second):
            if head.process is not None and head.process.poll() is None:
                head.process.kill()
                head.process.wait(timeout=60)
    # Whoever wrote last, every job's own nice was kept in its value and comes back.
    drf("reset", "--config", str(first.config))
    assert nices(live, own) == own
