"""The three write modes against the sandbox's multifactor priority plugin.

For each of `nice`, `site_factor` and `priority`: with the node full and a
backlog from four accounts, `once` must make Slurm's own priority order of
the pending jobs the plan's DRF order, the value Slurm reports must be the
one written (squeue's nice, sprio's site factor, squeue's priority), a
second `once` must write nothing, and `reset` must give the jobs back the
values multifactor computes for them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.integration.live_helpers import (
    Live,
    plan_jobs,
    plan_order,
    priority_order,
    queue,
    sprio,
    wait_in_sprio,
    write_config,
)
from tests.polling import wait_for

if TYPE_CHECKING:
    from tests.integration.conftest import SlurmSandbox


@pytest.fixture
def live(slurm: SlurmSandbox, tmp_path: Path) -> Live:
    return Live(slurm, tmp_path)


@pytest.mark.parametrize("mode", ["nice", "site_factor", "priority"])
def test_mode_orders_slurm_and_reset_gives_values_back(live: Live, tmp_path: Path, mode: str) -> None:
    backlog = live.backlog()
    pending = backlog.pending_ids
    # sprio shows a job once the scheduler made it eligible; wait for that
    # before writing, so that the "before" values are multifactor's.
    before = wait_in_sprio(live.slurm, pending)
    assert all(before[j].site == 0 for j in pending)
    config = write_config(tmp_path, f"{mode}.yaml", mode=mode, state_dir=str(live.state_dir))

    run = live.once(config=config)
    plan = run.plan
    assert plan["mode"] == mode
    order = plan_order(plan)
    assert order == backlog.expected
    assert "wrote 9 value(s)" in run.summary()
    entries = plan_jobs(plan)
    for j in order:
        assert mode in entries[j]
        assert mode == "nice" or "nice" not in entries[j]

    assert priority_order(live.slurm, pending) == order
    jobs = queue(live.slurm)
    assert all(jobs[j].priority > 1 for j in pending), {j: jobs[j].priority for j in pending}
    if mode == "nice":
        assert {j: jobs[j].nice for j in order} == {j: entries[j]["nice"] for j in order}
    elif mode == "site_factor":
        factors = sprio(live.slurm)
        assert {j: factors[j].site for j in order} == {j: entries[j]["site_factor"] for j in order}
        # The user's nice is left alone; the site factor is added to the rest.
        assert {j: jobs[j].nice for j in order} == dict.fromkeys(order, 0)
        for j in order:
            assert factors[j].priority == factors[j].site + factors[j].factors, (j, factors[j])
    else:
        assert {j: jobs[j].priority for j in order} == {j: entries[j]["priority"] for j in order}

    again = live.once(config=config)
    assert {j["action"] for j in again.plan["jobs"] if j["order"] is not None} == {"keep"}
    assert "wrote 0 value(s)" in again.summary()

    reset = live.reset(config=config)
    assert reset.stdout.startswith("reset 9 job(s)"), reset.stdout
    assert json.loads(live.state_file.read_text())["jobs"] == {}
    wait_in_sprio(live.slurm, pending)

    def recalculated() -> bool:
        # squeue and sprio read at slightly different times; multifactor
        # recalculates every minute, so agree on one reading.
        jobs, factors = queue(live.slurm), sprio(live.slurm)
        return all(jobs[j].priority == factors[j].priority for j in pending)

    wait_for(recalculated, 30, "squeue and sprio to agree")
    jobs, factors = queue(live.slurm), sprio(live.slurm)
    for j in pending:
        assert jobs[j].state == "PENDING"
        assert not jobs[j].reason.startswith("JobHeld"), (j, jobs[j].reason)
        assert jobs[j].nice == 0
        assert factors[j].site == 0
        # Multifactor computes the priority again: the sum of its factors.
        assert factors[j].priority == max(1, factors[j].factors - factors[j].nice), (j, factors[j])
        if mode == "priority":
            assert jobs[j].priority != entries[j]["priority"]
        assert jobs[j].priority < 10_000, (j, jobs[j].priority)


def test_switching_mode_gives_back_what_the_old_mode_wrote(live: Live, tmp_path: Path) -> None:
    backlog = live.backlog()
    pending = backlog.pending_ids
    wait_in_sprio(live.slurm, pending)
    for mode in ("nice", "site_factor", "priority", "nice"):
        config = write_config(tmp_path, f"{mode}.yaml", mode=mode, state_dir=str(live.state_dir))
        plan = live.once(config=config).plan
        entries = plan_jobs(plan)
        assert plan_order(plan) == backlog.expected, mode
        assert priority_order(live.slurm, pending) == backlog.expected, mode
        jobs = queue(live.slurm)
        factors = wait_in_sprio(live.slurm, pending)
        for j in pending:
            # Only the current mode's value is in force; the others are back to Slurm's own.
            assert jobs[j].nice == (entries[j]["nice"] if mode == "nice" else 0), (mode, j)
            assert factors[j].site == (entries[j]["site_factor"] if mode == "site_factor" else 0), (mode, j)
            if mode == "priority":
                assert jobs[j].priority == entries[j]["priority"], j
            else:
                assert factors[j].priority == max(1, factors[j].site + factors[j].factors - factors[j].nice), (mode, j)
        remembered = json.loads(live.state_file.read_text())["jobs"]
        assert {entry[2] for entry in remembered.values()} == {mode}
        assert set(remembered) == set(pending)


def test_priority_mode_remembers_the_users_nice_across_rewrites(live: Live, tmp_path: Path) -> None:
    """Setting a priority makes Slurm reset the job's nice to 0; the daemon
    must still remember the nice the job had before it first touched it
    (docs/rule.md §5), also after it rewrites the job, and reset must restore it.

    Values are stable labels: a job is rewritten only when its place among
    its neighbours changes. Two jobs with the user's nice 77 swap places,
    so one of them is rewritten (which one is the engine's choice), and
    both must get their 77 back."""
    live.require_quiet_queue()
    running = live.submit("-A", "newteam", "-p", "cpu", "-c", "8", "--mem=1000")
    other_running = live.submit("-A", "cputeam", "-p", "cpu", "-c", "4", "--mem=1000")
    live.wait_running([running, other_running])
    # Levels: newteam 8/64 = 0.125, cputeam 4/64 = 0.0625.
    job = live.submit("-A", "newteam", "-p", "cpu", "-c", "2", "--mem=1000", "--nice=77", "--begin=now+1hour")
    other = live.submit("-A", "cputeam", "-p", "cpu", "-c", "2", "--mem=1000", "--nice=77", "--begin=now+1hour")
    config = write_config(tmp_path, "priority.yaml", mode="priority", state_dir=str(live.state_dir))

    first_plan = live.once(config=config).plan
    assert plan_order(first_plan) == [other, job]
    first = plan_jobs(first_plan)
    assert first[job]["user_nice"] == first[other]["user_nice"] == 77
    # Slurm's own behaviour, which makes the daemon's memory the only record of the 77.
    jobs = queue(live.slurm)
    assert jobs[job].nice == jobs[other].nice == 0

    # newteam's running job ends: its share drops to 0, the two swap places, one is written again.
    live.cancel(running)
    second_plan = live.once(config=config).plan
    assert plan_order(second_plan) == [job, other]
    second = plan_jobs(second_plan)
    rewritten = [j for j in (job, other) if second[j]["action"] == "set"]
    assert len(rewritten) == 1, {j: second[j]["action"] for j in (job, other)}
    assert (
        queue(live.slurm)[rewritten[0]].priority == second[rewritten[0]]["priority"] != first[rewritten[0]]["priority"]
    )
    assert priority_order(live.slurm, [job, other]) == [job, other]
    assert all(second[j]["user_nice"] == 77 for j in (job, other))

    live.reset(config=config)
    jobs = queue(live.slurm)
    assert (jobs[job].nice, jobs[other].nice) == (77, 77), "reset gave a job nice 0: the user's own nice was forgotten"


def test_mode_switch_while_a_written_job_is_held_does_not_leave_our_nice_behind(live: Live, tmp_path: Path) -> None:
    """nice mode writes a job; its user holds it; the site switches to
    site_factor. Once the job is released, it must not keep the nice the
    old mode wrote (the new mode would take it for the user's own)."""
    live.require_quiet_queue()
    job = live.submit("-A", "newteam", "-p", "cpu", "-c", "2", "--mem=1000", "--begin=now+1hour")
    nice_config = write_config(tmp_path, "nice.yaml", mode="nice", state_dir=str(live.state_dir))
    site_config = write_config(tmp_path, "site.yaml", mode="site_factor", state_dir=str(live.state_dir))
    live.once(config=nice_config)
    assert queue(live.slurm)[job].nice < 0
    live.slurm.run("scontrol", "hold", job)

    live.once(config=site_config)
    live.slurm.run("scontrol", "release", job)
    plan = live.once(config=site_config).plan

    assert plan_jobs(plan)[job]["user_nice"] == 0, "the old mode's nice is taken for the user's own"
    assert queue(live.slurm)[job].nice == 0, "the job keeps the nice the old mode wrote"
