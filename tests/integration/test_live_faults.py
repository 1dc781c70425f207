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

import os
import shutil
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from live_helpers import (
    Live,
    drf,
    plan_jobs,
    plan_order,
    priority_order,
    queue,
    slurmctld_pid,
    start_slurmctld,
    stop_slurmctld,
)

from slurm_drf.policy.state import is_label_nice
from tests.polling import wait_for

if TYPE_CHECKING:
    from conftest import SlurmSandbox

LATER = "--begin=now+1hour"  # pending, and never started during the test
OWN = (0, 5, 100)
ACCOUNTS = (("gputeam", "gpu", "--gres=gpu:1"), ("memteam", "cpu", "--mem=32000"), ("cputeam", "cpu", "-c4"))


@pytest.fixture
def live(slurm: SlurmSandbox, tmp_path: Path) -> Live:
    return Live(slurm, tmp_path)


def submit_own(live: Live, count: int = 12) -> dict[str, int]:
    """Pending jobs of three accounts, each with a nice of its owner's: job id -> own nice."""
    live.require_quiet_queue()
    own: dict[str, int] = {}
    for k in range(count):
        account, partition, size = ACCOUNTS[k % len(ACCOUNTS)]
        nice = OWN[k % len(OWN)]
        own[live.submit("-A", account, "-p", partition, size, f"--nice={nice}", LATER)] = nice
    return own


def nices(live: Live, jobs: dict[str, int]) -> dict[str, int]:
    shown = queue(live.slurm)
    return {job: shown[job].nice for job in jobs}


def labelled(live: Live, jobs: dict[str, int]) -> list[str]:
    return [job for job, nice in nices(live, jobs).items() if is_label_nice(nice)]


def state_save_location(slurm: SlurmSandbox) -> Path:
    return slurm.dir / "state"


def kill_slurmctld(slurm: SlurmSandbox) -> None:
    """SIGKILL, as an OOM kill or a lost node does: no state save."""
    pid = slurmctld_pid(slurm)
    assert pid is not None, "slurmctld is not running"
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: slurmctld_pid(slurm) is None, 60, "slurmctld to die")


def assert_own_after_cycle_and_reset(live: Live, own: dict[str, int]) -> None:
    """The next cycle keeps every job's own nice in its value, Slurm follows its order, and reset gives it back."""
    plan = live.once().plan
    assert {job: plan_jobs(plan)[job]["user_nice"] for job in own} == own
    order = [job for job in plan_order(plan) if job in own]
    assert priority_order(live.slurm, order) == order
    assert not [line for line in live.reset().stdout.splitlines() if "left alone" in line and "no longer" not in line]
    assert nices(live, own) == own


def test_slurmctld_back_from_older_state_never_makes_our_values_the_users(live: Live, tmp_path: Path) -> None:
    own = submit_own(live)
    live.once()
    assert sorted(labelled(live, own)) == sorted(own)
    # slurmctld saves the daemon's values (a clean stop saves everything); keep that state.
    stop_slurmctld(live.slurm)
    saved = tmp_path / "ctld-state"
    shutil.copytree(state_save_location(live.slurm), saved)
    start_slurmctld(live.slurm)
    live.reset()
    assert nices(live, own) == own
    # slurmctld comes back from the state saved before the reset.
    stop_slurmctld(live.slurm)
    shutil.rmtree(state_save_location(live.slurm))
    shutil.copytree(saved, state_save_location(live.slurm))
    start_slurmctld(live.slurm)
    assert sorted(labelled(live, own)) == sorted(own), "the older state did not come back"
    assert_own_after_cycle_and_reset(live, own)


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
