"""The daemon's reclaim step on a real slurmctld (docs/rule.md §9): `slurm-drf once` with `reclaim:` set.

gputeam fills the node's 8 GPUs with two 4-GPU jobs, the newer one
`--no-requeue`; newteam, guaranteed 4 GPUs, then waits with a 4-GPU job.
Before `after` nothing is requeued; once it has passed, the one cycle that
acts requeues the older gputeam job (the newest cannot be requeued), the
waiting job starts on the freed GPUs, the record says so, and no later
cycle moves anything again.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from slurm_drf.cycle.reclaim_moves import ReclaimMoves
from tests.integration.live_helpers import Live, drf, queue, write_config
from tests.polling import wait_for

if TYPE_CHECKING:
    from tests.integration.conftest import SlurmSandbox

AFTER_S = 60
# `after` plus a few cycles of a loaded machine.
ACT_TIMEOUT_S = AFTER_S + 90


@pytest.fixture
def live(slurm: SlurmSandbox, tmp_path: Path) -> Live:
    live = Live(slurm, tmp_path)
    live.require_quiet_queue()
    return live


def _once(live: Live, config: Path, *extra: str) -> str:
    run = drf("once", "--config", str(config), "--state-dir", str(live.state_dir), *extra)
    return run.stdout


def _reclaims(live: Live, config: Path) -> list[dict[str, Any]]:
    run = drf("audit", "reclaims", "--config", str(config), "--state-dir", str(live.state_dir), "--format", "json")
    rows: list[dict[str, Any]] = json.loads(run.stdout)
    return rows


def test_once_requeues_the_newest_requeueable_job_for_a_job_waiting_within_its_guarantee(live: Live) -> None:
    older = live.submit("-A", "gputeam", "-p", "gpu", "--gres=gpu:4", "-c", "4", "--mem=16000")
    live.wait_running([older])
    newest = live.submit("-A", "gputeam", "-p", "gpu", "--gres=gpu:4", "-c", "4", "--mem=16000", "--no-requeue")
    live.wait_running([newest])
    # Slurm keeps the submit time in whole seconds: at or after this one.
    submitted = math.floor(time.time())
    waiting = live.submit("-A", "newteam", "-p", "gpu", "--gres=gpu:4", "-c", "4", "--mem=16000")
    config = write_config(
        live.tmp_path,
        "reclaim.yaml",
        state_dir=str(live.state_dir),
        accounts={"newteam": {"guarantee": {"gres/gpu": 4}}},
        reclaim={"pools": ["default"], "after": AFTER_S, "min_runtime": 0},
    )
    try:
        dry = _once(live, config, "--dry-run")
        assert "reclaim:" not in dry, "nothing before `after`"
        assert queue(live.slurm)[waiting].state == "PENDING"

        def acted() -> str | None:
            out = _once(live, config)
            return out if "reclaim: requeued" in out else None

        out: str = wait_for(acted, ACT_TIMEOUT_S, "a cycle to requeue a job for the waiting one", interval=2.0)
        assert time.time() - submitted >= AFTER_S
        (line,) = [text for text in out.splitlines() if text.startswith("reclaim:")]
        assert line.startswith(f"reclaim: requeued job {older} (gputeam, ")
        assert f"for job {waiting} (newteam, " in line
        live.wait_running([waiting])
        jobs = queue(live.slurm)
        assert jobs[newest].state == "RUNNING", "a --no-requeue job is never a victim"
        assert jobs[older].state == "PENDING"
        (row,) = _reclaims(live, config)
        assert (row["job"], row["account"], row["for_job"], row["for_account"], row["outcome"]) == (
            older,
            "gputeam",
            waiting,
            "newteam",
            "requeued",
        )
        assert row["lost"]["gres/gpu"] > 0
        # The move was written down before scontrol requeue ran (its cooldown across a crash), and kept.
        assert set(ReclaimMoves(live.state_dir).moved_since(submitted)) == {older}
        # Nothing more to do: the claim runs, the requeued job waits; no cycle moves anything again.
        again = _once(live, config)
        assert "reclaim:" not in again
        assert len(_reclaims(live, config)) == 1
    finally:
        live.cancel(older, newest, waiting)
