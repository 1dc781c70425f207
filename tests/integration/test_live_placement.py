"""A job's place at submission on a real slurmctld: the sandbox runs JobSubmitPlugins=lua with the shipped
job_submit.lua (scripts/slurm-sandbox), which reads the placement table at the sandbox's path; these tests
point the daemon's `placement.path` there (docs/rule.md §8, docs/submit.md).

Each test removes the table when it ends, so that no other test's jobs are placed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.integration.live_helpers import (
    Live,
    drf,
    plan_jobs,
    plan_order,
    priority_order,
    queue,
    write_config,
)
from tests.integration.test_live_tree import submit_as
from tests.polling import wait_for

if TYPE_CHECKING:
    from tests.integration.conftest import SlurmSandbox

LABEL_BELOW = -1_000_000
BURST = 200
TREE_BURST = 12


@pytest.fixture
def placed(slurm: SlurmSandbox, tmp_path: Path) -> Iterator[Live]:
    """A Live whose daemon publishes the table the sandbox's job_submit.lua reads (flat accounts)."""
    yield from _publishing(slurm, tmp_path, "flat")


@pytest.fixture
def placed_tree(slurm: SlurmSandbox, tmp_path: Path) -> Iterator[Live]:
    """The same over the sandbox's account tree (H-DRF, users as leaves: the defaults)."""
    yield from _publishing(slurm, tmp_path, "tree")


def _publishing(slurm: SlurmSandbox, tmp_path: Path, hierarchy: str) -> Iterator[Live]:
    table = slurm.dir / "placement.txt"
    live = Live(slurm, tmp_path)
    live.config = write_config(
        tmp_path, state_dir=str(live.state_dir), hierarchy=hierarchy, placement={"path": str(table)}, interval="60s"
    )
    table.unlink(missing_ok=True)
    _next_second()
    try:
        yield live
    finally:
        table.unlink(missing_ok=True)
        # The script looks again at most once a second: after this no job of the next test is placed.
        _next_second()


def _next_second() -> None:
    """The script looks at the table at most once a second: let a second pass before a new one counts."""
    now = time.time()
    wait_for(lambda: time.time() >= int(now) + 1.05, 3, "the next second", interval=0.05)


def _others_pending(live: Live) -> list[str]:
    """Two pending jobs each of gputeam, memteam and cputeam behind a full node (levels as Live.backlog's)."""
    jobs = []
    for _ in range(2):
        jobs.append(live.submit("-A", "gputeam", "-p", "gpu", "--gres=gpu:1", "-c", "1", "--mem=1000"))
        jobs.append(live.submit("-A", "memteam", "-p", "cpu", "-c", "1", "--mem=32000"))
        jobs.append(live.submit("-A", "cputeam", "-p", "cpu", "-c", "2", "--mem=2000"))
    return jobs


def test_a_newcomer_is_first_in_slurms_order_at_submission_and_starts_before_any_further_cycle(placed: Live) -> None:
    _, slot = placed.fill_node()
    others = _others_pending(placed)
    first = placed.once()
    assert first.returncode == 0, first.stderr
    _next_second()
    # The daemon is not running: only the script can give the newcomer its place now.
    newcomer = placed.submit("-A", "newteam", "-p", "cpu", "-c", "4", "--mem=4000")
    assert queue(placed.slurm)[newcomer].nice < LABEL_BELOW
    assert priority_order(placed.slurm, [newcomer, *others])[0] == newcomer
    placed.cancel(slot)

    def started() -> list[str]:
        jobs = queue(placed.slurm)
        return [j for j in [newcomer, *others] if jobs[j].state == "RUNNING"]

    assert wait_for(started, 60, "a pending job to start") == [newcomer]


def test_a_burst_interleaves_with_the_others_as_the_next_cycle_orders_it(placed: Live) -> None:
    placed.fill_node()
    others = _others_pending(placed)
    assert placed.once().returncode == 0
    _next_second()
    # 13 CPUs each: newteam's levels 13k/64 never equal the others' (36, 38, 40, 44, 48 and 56 of 64).
    burst = [placed.submit("-A", "newteam", "-p", "cpu", "-c", "13", "--mem=1000") for _ in range(BURST)]
    assert all(queue(placed.slurm)[j].nice < LABEL_BELOW for j in burst)
    slurm_order = priority_order(placed.slurm, [*others, *burst])
    plan = placed.once("--dry-run").plan
    assert plan_order(plan) == slurm_order
    # Interleaved as the greedy loop serves them: three of newteam's (levels 0, 13/64, 26/64), then cputeam's.
    assert [j in burst for j in slurm_order[:4]] == [True, True, True, False]
    kept = plan_jobs(placed.once().plan)
    # The next cycle keeps their values: none written again in most runs; one in a run of the whole live tier
    # (0.5%, not reproduced alone). More than 1% is a placement that disagrees with the daemon's labels.
    rewritten = [j for j in burst if kept[j]["action"] == "set"]
    detail = {j: (kept[j]["current"], kept[j]["value"], kept[j]["order"]) for j in rewritten}
    assert len(rewritten) <= BURST // 100, f"{len(rewritten)} of {BURST} placed jobs written again: {detail}"


def test_over_the_tree_a_new_users_first_job_is_first_and_a_burst_interleaves(placed_tree: Live) -> None:
    """The sandbox's tree: root -> research -> {gputeam, memteam, cputeam, newteam} and root -> physics ->
    theory -> {drfalice, drfbob, root}. drfbob's first job takes theory's next turn, before theory's waiting
    drfalice (his share in theory is 0; theory is charged what drfalice holds, docs/rule.md §7), and theory,
    holding a 4-CPU slot, is far below research: Slurm must start it before anything else, before any
    further cycle."""
    live = placed_tree
    live.require_quiet_queue()
    # fill_node's jobs, with its 4-CPU slot run by drfalice: theory's share is above 0 but for drfbob's.
    running = [
        live.submit("-A", "gputeam", "-p", "gpu", "--gres=gpu:6", "-c", "20", "--mem=16000"),
        live.submit("-A", "memteam", "-p", "cpu", "-c", "8", "--mem=320000"),
        live.submit("-A", "cputeam", "-p", "cpu", "-c", "32", "--mem=32000"),
    ]
    slot = submit_as(live, "drfalice", "theory", "-c", "4", "--mem=1000")
    live.wait_running([*running, slot])
    others = _others_pending(live)
    alice = [submit_as(live, "drfalice", "theory", "-c", "8", "--mem=8000") for _ in range(3)]
    assert live.once().returncode == 0
    _next_second()
    bob = submit_as(live, "drfbob", "theory", "-c", "4", "--mem=4000")
    assert queue(live.slurm)[bob].nice < LABEL_BELOW
    assert priority_order(live.slurm, [bob, *others, *alice])[0] == bob
    # A burst of drfbob's: interleaved with the research teams' jobs as the next plan orders them.
    burst = [submit_as(live, "drfbob", "theory", "-c", "4", "--mem=4000") for _ in range(TREE_BURST)]
    pending = [bob, *burst, *others, *alice]
    assert all(queue(live.slurm)[j].nice < LABEL_BELOW for j in burst)
    plan = live.once("--dry-run").plan
    keep = {bob, *burst, *others}  # theory's other jobs move as drfbob joins it: the next cycle writes them
    slurm_order = [j for j in priority_order(live.slurm, pending) if j in keep]
    plan_sequence = [j for j in plan_order(plan) if j in keep]
    assert max(abs(slurm_order.index(j) - plan_sequence.index(j)) for j in burst) <= 1, (slurm_order, plan_sequence)
    assert 0 < sum(slurm_order.index(j) < slurm_order.index(others[-1]) for j in burst) < TREE_BURST
    live.cancel(slot)

    def started() -> list[str]:
        jobs = queue(live.slurm)
        return [j for j in pending if jobs[j].state == "RUNNING"]

    assert bob in wait_for(started, 60, "a pending job to start")


def test_job_submit_status_finds_everything_in_place_on_the_sandbox(placed: Live) -> None:
    """The sandbox loads job_submit/lua with the shipped script (slurm.conf sets no global memory default,
    and the script carries none); once the daemon has published a table, every finding is ok."""
    assert placed.once().returncode == 0
    status = drf("job-submit", "status", "--config", str(placed.config), check=False)
    lines = status.stdout.splitlines()
    assert status.returncode == 0, status.stdout
    assert [line.split(":", 1)[0] for line in lines] == ["ok"] * 4, lines
    assert "loads job_submit/lua" in lines[0] and "global memory defaults" in lines[2] and "fresh" in lines[3]
    placed.slurm.dir.joinpath("placement.txt").unlink()
    missing = drf("job-submit", "status", "--config", str(placed.config), check=False)
    assert missing.returncode == 1 and missing.stdout.splitlines()[-1].startswith("not ok: ")


BROKEN = {
    "missing": None,
    "empty": b"",
    "truncated": b"slurm-drf-placement/1\nwritten {now}\nstale_after 180\nmode nice\n",
    "a wrong count": b"slurm-drf-placement/1\nwritten {now}\nstale_after 180\nmode nice\nresources cpu\nend 9\n",
    "garbled": b"slurm-drf-placement/1\nwritten {now}\n\x00\xff garbage\nend 3\n",
    "another format": b"slurm-drf-placement/9\nwritten {now}\nstale_after 180\nmode nice\nresources cpu\nend 5\n",
    "stale": b"slurm-drf-placement/1\nwritten {old}\nstale_after 180\nmode nice\nresources cpu\nend 5\n",
    "huge": b"slurm-drf-placement/1\nwritten {now}\n" + b"#" * (20 * 1024 * 1024) + b"\n",
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_table_leaves_every_submission_accepted_and_unchanged(placed: Live, case: str) -> None:
    table = placed.slurm.dir / "placement.txt"
    content = BROKEN[case]
    if content is not None:
        now = int(time.time())
        table.write_bytes(content.replace(b"{now}", str(now).encode()).replace(b"{old}", str(now - 3600).encode()))
    _next_second()
    job = placed.submit("-A", "newteam", "-p", "cpu", "-c", "1", "--mem=100", "--begin=now+1hour")
    assert queue(placed.slurm)[job].nice == 0


def test_a_users_own_nice_and_a_held_job_are_left_as_they_are(placed: Live) -> None:
    placed.fill_node()
    _others_pending(placed)
    assert placed.once().returncode == 0
    _next_second()
    own = placed.submit("-A", "newteam", "-p", "cpu", "-c", "1", "--mem=100", "--nice=500")
    held = placed.submit("-A", "newteam", "-p", "cpu", "-c", "1", "--mem=100", "--hold")
    placed_job = placed.submit("-A", "newteam", "-p", "cpu", "-c", "1", "--mem=100")
    jobs = queue(placed.slurm)
    assert jobs[own].nice == 500 and jobs[held].nice == 0
    assert jobs[placed_job].nice < LABEL_BELOW  # the same table placed the job beside them
