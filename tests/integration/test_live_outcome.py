"""Outcome, not only priorities: the job Slurm's backfill starts is the plan's.

test_live_cycle's ``test_freed_slot_goes_to_the_account_with_the_lowest_share``
shows it for the main scheduler: a running job ends and the plan's head
starts in the freed space. Here the plan's head cannot start there, so the
main scheduler stops at it and only backfill may start a smaller job behind
it, one that does not delay the head's reservation. Backfill goes through
the pending jobs in priority order too, so the small job it starts must be
the one of the account with the lowest share, the plan's next job, not the
one Slurm alone would pick.

Backfill plans with time limits: every job here has one (``--time``). The
running jobs end in 30 minutes at the latest, so the head's reservation
starts then; the small jobs run for 5 minutes at most and end before it.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.integration.live_helpers import (
    Live,
    pending_priorities,
    plan_jobs,
    plan_order,
    priority_order,
    queue,
    scheduled_by,
)
from tests.polling import wait_for

if TYPE_CHECKING:
    from tests.integration.conftest import SlurmSandbox

RUNNING_LIMIT = "--time=30"  # minutes: when the head's reservation starts at the latest
SMALL_LIMIT = "--time=5"  # well before it: backfilling a small job delays nothing


@pytest.fixture
def live(slurm: SlurmSandbox, tmp_path: Path) -> Live:
    return Live(slurm, tmp_path)


def times(slurm: SlurmSandbox, job_id: str) -> tuple[str, str]:
    """squeue's start and end time of a job: expected ones while it is pending, "N/A" when unknown."""
    start, end = slurm.run("squeue", "-h", "-j", job_id, "-o", "%S|%e").stdout.strip().split("|")
    return start, end


def test_backfill_starts_the_small_job_of_the_account_with_the_lowest_share(live: Live) -> None:
    # All 64 CPUs run; the cputeam slot job frees 4 of them.
    _, slot = live.fill_node("cputeam", RUNNING_LIMIT)
    # newteam (no running jobs, share 0) wants 32 CPUs: the plan's head, and
    # it cannot start when the slot frees. Behind it one 4-CPU job from each
    # other account, each fitting the freed space, only one of them at a
    # time. cputeam's (share 0.5625, the lowest of the three) submits last
    # and with nice 5000, so that Slurm alone would backfill it last.
    head = live.submit("-A", "newteam", "-p", "cpu", "-c", "32", "--mem=16000", RUNNING_LIMIT)
    small = {
        "gputeam": live.submit("-A", "gputeam", "-p", "gpu", "--gres=gpu:1", "-c", "4", "--mem=4000", SMALL_LIMIT),
        "memteam": live.submit("-A", "memteam", "-p", "cpu", "-c", "4", "--mem=4000", SMALL_LIMIT),
        "cputeam": live.submit("-A", "cputeam", "-p", "cpu", "-c", "4", "--mem=4000", "--nice=5000", SMALL_LIMIT),
    }
    small_ids = list(small.values())
    # The control, on a just-created sandbox too (no recorded usage: the
    # fair-share factors tie, only the nice sets cputeam's job apart): the
    # small job Slurm would backfill first is another account's.
    before = pending_priorities(live.slurm, small_ids)
    cputeam = before.pop(small["cputeam"])
    assert all(cputeam < other for other in before.values()), (
        f"control: without slurm-drf, Slurm would backfill cputeam's job last: {cputeam} vs {before}"
    )

    plan = live.once().plan
    shares = {a["account"]: a["weighted_share"] for a in plan["accounts"]}
    assert shares == pytest.approx({"newteam": 0.0, "cputeam": 0.5625, "memteam": 0.625, "gputeam": 0.75})
    expected = [head, small["cputeam"], small["memteam"], small["gputeam"]]
    assert plan_order(plan) == expected
    assert all(plan_jobs(plan)[j]["action"] == "set" for j in expected)
    assert priority_order(live.slurm, [head, *small_ids]) == expected

    live.cancel(slot)

    def started() -> list[str]:
        jobs = queue(live.slurm)
        return [j for j in small_ids if jobs[j].state == "RUNNING"]

    assert wait_for(started, 60, "a small job to start") == [small["cputeam"]]
    # The head still waits, and it was backfill that started the small job
    # (the main scheduler stops at the head: nothing behind it starts there).
    assert queue(live.slurm)[head].state == "PENDING"
    assert scheduled_by(live.slurm, small["cputeam"]) == "SchedBackfill"

    # The head holds a reservation, and the backfilled job ends before it.
    def reserved() -> str | None:
        start, _ = times(live.slurm, head)
        return start if start != "N/A" else None

    head_start = datetime.fromisoformat(wait_for(reserved, 60, f"backfill to plan a start for job {head}"))
    _, small_end = times(live.slurm, small["cputeam"])
    assert datetime.fromisoformat(small_end) <= head_start, (small_end, head_start)
    # No other small job started in the meantime: the freed space held one.
    assert started() == [small["cputeam"]]
