"""One live cycle against the sandbox's slurmctld: what `once` and `reset` do to Slurm.

Every test submits real jobs, runs slurm-drf (a subprocess, or run_cycle
with the real CLI source and scontrol writer), and checks what Slurm then
reports: squeue's priority order and nice values, holds, which job starts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from slurm_drf.config.load import load_config
from slurm_drf.cycle.backends import make_writer
from slurm_drf.cycle.run import run_cycle
from slurm_drf.cycle.store import StateStore
from slurm_drf.model.types import Snapshot
from slurm_drf.slurm.cli_source import CliSource
from tests.integration.live_helpers import (
    LIVE_BACKEND,
    Live,
    drf,
    file_fingerprint,
    pending_priorities,
    plan_jobs,
    plan_order,
    priority_order,
    queue,
    start_slurmctld,
    stop_slurmctld,
    write_config,
)
from tests.polling import wait_for

if TYPE_CHECKING:
    from tests.integration.conftest import SlurmSandbox

LATER = "--begin=now+1hour"  # pending, and never started during the test


@pytest.fixture
def live(slurm: SlurmSandbox, tmp_path: Path) -> Live:
    return Live(slurm, tmp_path)


def test_once_makes_slurms_priority_order_the_drf_order(live: Live) -> None:
    backlog = live.backlog()
    run = live.once()
    plan = run.plan

    # The plan read the cluster right: shares of the running jobs, by hand.
    shares = {a["account"]: a["weighted_share"] for a in plan["accounts"]}
    assert shares == pytest.approx({"newteam": 0.0, "cputeam": 0.5625, "memteam": 0.625, "gputeam": 0.75})
    assert plan["pools"][0]["capacity"] == {"cpu": 64, "mem": 512000, "gres/gpu": 8}
    order = plan_order(plan)
    assert order == backlog.expected
    levels = [plan_jobs(plan)[j]["level"] for j in order]
    assert levels == pytest.approx([0, 0.25, 0.5, 0.5625, 0.59375, 0.625, 0.6875, 0.75, 0.875])
    assert "wrote 9 value(s)" in run.summary()

    # Slurm's own order of the pending jobs is now the DRF order, strictly.
    assert priority_order(live.slurm, backlog.pending_ids) == order
    jobs = queue(live.slurm)
    entries = plan_jobs(plan)
    for job_id in order:
        assert jobs[job_id].nice == entries[job_id]["nice"], job_id
        assert jobs[job_id].priority > 1, f"job {job_id} clamped to priority {jobs[job_id].priority}"


def test_second_once_writes_nothing(live: Live) -> None:
    backlog = live.backlog()
    first = live.once()
    assert "wrote 9 value(s)" in first.summary()
    written = {j: queue(live.slurm)[j].nice for j in backlog.pending_ids}
    state = file_fingerprint(live.state_file)

    second = live.once()
    ordered = [j for j in second.plan["jobs"] if j["order"] is not None]
    assert len(ordered) == 9
    assert {j["action"] for j in ordered} == {"keep"}
    assert plan_order(second.plan) == plan_order(first.plan)
    assert "wrote 0 value(s)" in second.summary()
    assert {j: queue(live.slurm)[j].nice for j in backlog.pending_ids} == written
    # Same jobs, same decisions: the state file keeps its content.
    assert json.loads(live.state_file.read_bytes())["jobs"] == json.loads(state[0])["jobs"]


def test_freed_slot_goes_to_the_account_with_the_lowest_share(live: Live) -> None:
    _, slot = live.fill_node(slot_account="cputeam")
    # One 4-CPU job per account; the slot job frees exactly 4 CPUs. newteam
    # (no running jobs, share 0) submits last and with nice 5000, so that
    # Slurm alone would start it last.
    pending = {
        "gputeam": live.submit("-A", "gputeam", "-p", "gpu", "--gres=gpu:1", "-c", "4", "--mem=4000"),
        "memteam": live.submit("-A", "memteam", "-p", "cpu", "-c", "4", "--mem=4000"),
        "cputeam": live.submit("-A", "cputeam", "-p", "cpu", "-c", "4", "--mem=4000"),
        "newteam": live.submit("-A", "newteam", "-p", "cpu", "-c", "4", "--mem=4000", "--nice=5000"),
    }
    ids = list(pending.values())
    # The control holds on a just-created sandbox too: with no recorded usage
    # Slurm's fair-share factors tie the other three, and only newteam's nice
    # sets it apart, so compare newteam with each of them, not their order.
    before = pending_priorities(live.slurm, ids)
    newteam = before.pop(pending["newteam"])
    assert all(newteam < other for other in before.values()), (
        f"control: without slurm-drf, Slurm would start newteam's job last: {newteam} vs {before}"
    )

    plan = live.once().plan
    with_pending = [a for a in plan["accounts"] if a["pending_jobs"]]
    lowest = min(with_pending, key=lambda a: a["weighted_share"])
    assert lowest["account"] == "newteam"
    assert plan_order(plan)[0] == pending["newteam"]
    assert priority_order(live.slurm, ids)[0] == pending["newteam"]

    live.cancel(slot)

    def started() -> list[str]:
        jobs = queue(live.slurm)
        return [j for j in ids if jobs[j].state == "RUNNING"]

    assert wait_for(started, 60, "a pending job to start") == [pending["newteam"]]


def test_held_job_untouched_and_user_nice_restored_by_reset(live: Live) -> None:
    live.require_quiet_queue()
    held = live.submit("--hold", "-A", "memteam", "-p", "cpu", "-c", "2", "--mem=2000", LATER)
    own = live.submit("-A", "cputeam", "-p", "cpu", "-c", "4", "--mem=4000", "--nice=77", LATER)
    plain = live.submit("-A", "gputeam", "-p", "gpu", "--gres=gpu:2", "-c", "2", "--mem=4000", LATER)
    later = live.submit("-A", "newteam", "-p", "cpu", "-c", "8", "--mem=8000", LATER)

    def check_held() -> None:
        job = queue(live.slurm)[held]
        assert (job.state, job.priority, job.nice, job.reason) == ("PENDING", 0, 0, "JobHeldUser")

    first = live.once().plan
    entries = plan_jobs(first)
    assert (entries[held]["action"], entries[held]["reason"]) == ("skip", "held")
    check_held()
    jobs = queue(live.slurm)
    assert entries[own]["user_nice"] == 77
    for job_id in (own, plain, later):
        assert entries[job_id]["action"] == "set"
        assert jobs[job_id].nice == entries[job_id]["nice"]
    ours_later = jobs[later].nice
    assert ours_later < 0
    # The state remembers each job's own nice beside what was written.
    remembered = json.loads(live.state_file.read_text())["jobs"]
    assert remembered[own] == [77, jobs[own].nice, "nice"]
    assert held not in remembered

    # The user sets a nice of their own after our write: it is kept, ours added.
    live.slurm.run("scontrol", "update", f"jobid={later}", "nice=77")
    second = live.once().plan
    assert plan_jobs(second)[later]["user_nice"] == 77
    assert queue(live.slurm)[later].nice == 77 + ours_later
    check_held()

    reset = live.reset()
    assert reset.stdout.startswith("reset 3 job(s)"), reset.stdout
    jobs = queue(live.slurm)
    assert (jobs[own].nice, jobs[later].nice, jobs[plain].nice) == (77, 77, 0)
    check_held()
    assert json.loads(live.state_file.read_text())["jobs"] == {}


class CancellingSource:
    """The real CLI source, but a pending job is cancelled right after the read."""

    def __init__(self, live: Live, victim: str) -> None:
        self.name = "slurm cli, cancelling"
        self.inner = CliSource()
        self.live = live
        self.victim = victim

    def fetch_snapshot(self) -> Snapshot:
        snapshot = self.inner.fetch_snapshot()
        assert self.victim in {j.job_id for j in snapshot.jobs if j.pending}
        self.live.slurm.run("scancel", self.victim)

        def ended() -> bool:
            # Still listed by scontrol for MinJobAge seconds, but no longer pending.
            shown = self.live.slurm.run("scontrol", "-o", "show", "job", self.victim, check=False).stdout
            return "JobState=PENDING" not in shown

        wait_for(ended, 30, f"job {self.victim} to be cancelled")
        return snapshot


def test_job_cancelled_between_read_and_write_does_not_fail_the_cycle(live: Live, tmp_path: Path) -> None:
    live.require_quiet_queue()
    keep = [
        live.submit("-A", "gputeam", "-p", "gpu", "--gres=gpu:1", "-c", "1", "--mem=1000", LATER),
        live.submit("-A", "memteam", "-p", "cpu", "-c", "1", "--mem=64000", LATER),
    ]
    victim = live.submit("-A", "cputeam", "-p", "cpu", "-c", "8", "--mem=1000", LATER)
    config = load_config(write_config(tmp_path, "cycle.yaml", state_dir=str(live.state_dir)))
    store = StateStore(live.state_dir)

    source = CancellingSource(live, victim)
    report = run_cycle(source, make_writer(source), config, store)

    assert report.result is not None
    assert {w.job_id for w in report.writes} == {*keep, victim}
    assert report.result.gone == (victim,)
    assert dict(report.result.failed) == {}
    assert sorted(report.result.applied) == sorted(keep)
    jobs = queue(live.slurm)
    for entry in report.plan.jobs:
        if entry.job_id in keep:
            assert jobs[entry.job_id].nice == entry.value
    assert set(store.load().jobs) == set(keep)


def test_once_with_slurmctld_down_fails_in_one_line_and_writes_nothing(live: Live) -> None:
    live.require_quiet_queue()
    job = live.submit("-A", "newteam", "-p", "cpu", "-c", "1", "--mem=1000", LATER)
    other = live.submit("-A", "gputeam", "-p", "gpu", "--gres=gpu:1", "-c", "1", "--mem=1000", LATER)
    live.once()
    before = file_fingerprint(live.state_file)
    nice = {j: queue(live.slurm)[j].nice for j in (job, other)}
    # A user change the daemon would act on if it could.
    live.slurm.run("scontrol", "update", f"jobid={other}", "nice=10")

    stop_slurmctld(live.slurm)
    try:
        run = drf("once", "--config", str(live.config), "--state-dir", str(live.state_dir), check=False)
    finally:
        start_slurmctld(live.slurm)

    assert run.returncode == 1, run
    assert len(run.error_lines) == 1, run.stderr
    line = run.error_lines[0]
    assert line.startswith("slurm-drf: slurm read: "), line
    # It names the command (or library) that failed and what to look at.
    assert ("pyslurm: loading" if LIVE_BACKEND == "pyslurm" else "squeue") in line, line
    assert "slurmctld" in line, line
    assert "Traceback" not in run.stderr
    assert run.stdout == ""
    assert file_fingerprint(live.state_file) == before
    after = queue(live.slurm)
    assert after[job].nice == nice[job]
    assert after[other].nice == 10


def test_writes_per_cycle_are_bounded_head_of_the_order_first(live: Live, tmp_path: Path) -> None:
    live.require_quiet_queue()
    jobs: list[str] = []
    for _ in range(3):
        jobs.append(live.submit("-A", "gputeam", "-p", "gpu", "--gres=gpu:1", "-c", "1", "--mem=1000", LATER))
        jobs.append(live.submit("-A", "memteam", "-p", "cpu", "-c", "1", "--mem=51200", LATER))
        jobs.append(live.submit("-A", "cputeam", "-p", "cpu", "-c", "4", "--mem=1000", LATER))
    jobs.append(live.submit("-A", "newteam", "-p", "cpu", "-c", "24", "--mem=1000", LATER))
    config = write_config(tmp_path, "bounded.yaml", state_dir=str(live.state_dir), max_writes_per_cycle=3)

    order: list[str] | None = None
    done: list[str] = []
    for expected in (3, 3, 3, 1, 0):
        run = live.once(config=config)
        this_order = plan_order(run.plan)
        order = order or this_order
        assert this_order == order, "the order must not move while the cluster stands still"
        assert f"wrote {expected} value(s)" in run.summary()
        deferred = len(jobs) - len(done) - expected
        assert (f"{deferred} deferred" in run.summary()) == (deferred > 0), run.summary()
        done += order[len(done) : len(done) + expected]
        nice = {j: n.nice for j, n in queue(live.slurm).items() if j in jobs}
        assert {j for j, n in nice.items() if n != 0} == set(done)
    assert order is not None
    assert sorted(order) == sorted(jobs)
    assert priority_order(live.slurm, jobs) == order


def test_job_held_after_our_write_gets_its_own_nice_back_from_reset(live: Live) -> None:
    """A job we wrote, then held by its user: reset must not lose its own nice.

    Whether reset restores it at once (scontrol may update a held job) or
    keeps it in the state for a reset after the release, once the job is
    released and reset has run, the job must carry its own nice (77), not
    ours.
    """
    live.require_quiet_queue()
    job = live.submit("-A", "newteam", "-p", "cpu", "-c", "1", "--mem=100", "--nice=77", LATER)
    live.once()
    ours = queue(live.slurm)[job].nice
    assert ours != 77
    live.slurm.run("scontrol", "hold", job)

    live.reset()
    held = queue(live.slurm)[job]
    assert (held.priority, held.reason) == (0, "JobHeldAdmin")
    live.slurm.run("scontrol", "release", job)
    live.reset()

    assert queue(live.slurm)[job].nice == 77, "the user's own nice is lost: the job keeps the daemon's boost"
