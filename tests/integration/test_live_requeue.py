"""Reclaim's Slurm side on a real slurmctld: the read per node (slurm.running.fetch_occupancy) and the requeue
(slurm.running.apply_reclaim), checked against what Slurm itself says (`scontrol -d show job`, squeue's text).

These tests need the sandbox to themselves (they fill a node); the one of a job on two nodes runs only on a
sandbox of several nodes (marked `multinode`: scripts/test deselects it; run it by hand on
SLURM_SANDBOX_NODES=2, docs/sandbox.md). A requeued job may
start again only after Slurm's requeue delay (BeginTime about two minutes on), so one test waits that long.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from slurm_drf.slurm.parse.amounts import parse_gres
from slurm_drf.slurm.parse.running import Occupancy, RunningJob
from slurm_drf.slurm.running import apply_reclaim, fetch_occupancy
from tests.integration.live_helpers import NODE_CPUS, NODE_GPUS, NODE_MEM, Live, queue
from tests.polling import wait_for

if TYPE_CHECKING:
    from tests.integration.conftest import SlurmSandbox

RESOURCES = ("cpu", "mem", "gres/gpu")
CAPACITY = (NODE_CPUS, NODE_MEM, NODE_GPUS)
PARTITIONS = frozenset({"gpu", "cpu"})
TIMEOUT = 30.0
# Slurm holds a requeued job back for its requeue delay (measured: 121 s on 22.05, 24.11 and 26.05).
RERUN_TIMEOUT_S = 300
START_TIMEOUT_S = 60
_NODE_LINE = re.compile(r"^\s*Nodes=(?P<nodes>\S+) CPU_IDs=(?P<cpus>\S+) Mem=(?P<mem>\d+)(?: GRES=(?P<gres>\S*))?")


def _count_ids(text: str) -> int:
    """`0-2,5` -> 4."""
    count = 0
    for part in text.split(","):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1
    return count


def slurm_rows(slurm: SlurmSandbox, job_id: str) -> dict[str, tuple[int, ...]]:
    """The job's allocation per node as `scontrol -d show job` prints it (Slurm's text, not the JSON read)."""
    rows: dict[str, tuple[int, ...]] = {}
    for line in slurm.run("scontrol", "-d", "show", "job", job_id).stdout.splitlines():
        found = _NODE_LINE.match(line)
        if found is None:
            continue
        nodes = slurm.run("scontrol", "show", "hostnames", found["nodes"]).stdout.split()
        gpus = parse_gres(found["gres"] or "").get("gres/gpu", 0)
        for node in nodes:
            rows[node] = (_count_ids(found["cpus"]), int(found["mem"]), gpus)
    return rows


def node_names(slurm: SlurmSandbox) -> list[str]:
    return sorted(set(slurm.run("sinfo", "-h", "-N", "-o", "%N").stdout.split()))


def read() -> Occupancy:
    return fetch_occupancy(PARTITIONS, RESOURCES, timeout=TIMEOUT)


def job_of(occupancy: Occupancy, job_id: str) -> RunningJob:
    (job,) = [job for job in occupancy.jobs if job.job_id == job_id]
    return job


def named(job_id: str) -> RunningJob:
    """A job that is not running, as the executor takes it."""
    return RunningJob(job_id, "", "", "", "", 0.0, True, {}, job_id)


def submit(live: Live, *args: str, wrap: str = "sleep 600") -> str:
    return live.slurm.sbatch(f"--chdir={live.scratch}", "--output=/dev/null", "--error=/dev/null", *args, wrap=wrap)


@pytest.fixture
def live(slurm: SlurmSandbox, tmp_path: Path) -> Live:
    live = Live(slurm, tmp_path)
    live.require_quiet_queue()
    return live


def test_the_read_is_what_slurm_allocated(live: Live) -> None:
    """Each running job's rows are `scontrol -d show job`'s; each node's free vector is its capacity less them."""
    node = node_names(live.slurm)[0]
    gpus = submit(live, "-A", "gputeam", "-p", "gpu", "-w", node, "-n", "3", "--mem=1000", "--gres=gpu:2")
    fixed = submit(live, "-A", "cputeam", "-p", "cpu", "-w", node, "-n", "2", "--mem-per-cpu=500", "--no-requeue")
    live.wait_running([gpus, fixed])
    occupancy = read()
    assert occupancy.resources == RESOURCES
    for job_id in (gpus, fixed):
        assert dict(job_of(occupancy, job_id).allocation) == slurm_rows(live.slurm, job_id)
    assert dict(job_of(occupancy, gpus).allocation) == {node: (3, 1000, 2)}
    assert dict(job_of(occupancy, fixed).allocation) == {node: (2, 1000, 0)}
    assert job_of(occupancy, gpus).requeueable
    assert not job_of(occupancy, fixed).requeueable  # sbatch --no-requeue
    spread = job_of(occupancy, gpus)
    assert (spread.account, spread.partition, spread.qos, spread.user) == ("gputeam", "gpu", "normal", "root")
    assert abs(spread.start - time.time()) < START_TIMEOUT_S
    for name in node_names(live.slurm):
        held = [job.allocation[name] for job in occupancy.jobs if name in job.allocation]
        used = tuple(sum(column) for column in zip(*held, strict=True)) if held else (0, 0, 0)
        assert tuple(f + u for f, u in zip(occupancy.free[name], used, strict=True)) == CAPACITY
    assert fetch_occupancy({"nosuch"}, RESOURCES, timeout=TIMEOUT).jobs == ()


@pytest.mark.multinode
def test_a_job_on_two_nodes_has_two_rows(live: Live) -> None:
    nodes = node_names(live.slurm)
    assert len(nodes) >= 2, "a sandbox of one node: run this test on SLURM_SANDBOX_NODES=2 (docs/sandbox.md)"
    first, second = nodes[:2]
    extra = ["--ntasks-per-node=2", "--mem=700", "--gres=gpu:3"]
    spread = submit(live, "-A", "gputeam", "-p", "gpu", "-w", f"{first},{second}", "-N", "2", "-n", "4", *extra)
    live.wait_running([spread])
    occupancy = read()
    rows = dict(job_of(occupancy, spread).allocation)
    assert rows == {first: (2, 700, 3), second: (2, 700, 3)}
    assert rows == slurm_rows(live.slurm, spread)
    for name in (first, second):
        assert occupancy.free[name] == (NODE_CPUS - 2, NODE_MEM - 700, NODE_GPUS - 3)


def test_requeue_frees_the_node_and_the_job_runs_again(live: Live) -> None:
    """A requeued batch job goes back to PENDING (BeginTime), a job waiting for its node starts, and the
    requeued job runs again once its delay is over; a --no-requeue job is refused with Slurm's words."""
    node = node_names(live.slurm)[0]
    on_node = ["-w", node, "--mem=1000"]
    victim = submit(live, "-A", "cputeam", "-p", "cpu", "-n", str(NODE_CPUS - 4), *on_node)
    fixed = submit(live, "-A", "memteam", "-p", "cpu", "-n", "4", "--no-requeue", *on_node)
    live.wait_running([victim, fixed])
    waiting = submit(live, "-A", "gputeam", "-p", "gpu", "-n", "8", *on_node, wrap="sleep 15")
    wait_for(lambda: queue(live.slurm).get(waiting, None), START_TIMEOUT_S, f"job {waiting} in the queue")
    assert queue(live.slurm)[waiting].state == "PENDING"
    occupancy = read()
    assert occupancy.free[node][0] == 0
    assert job_of(occupancy, victim).requeueable and not job_of(occupancy, fixed).requeueable

    requeued_at = time.time()
    victims = [job_of(occupancy, victim), job_of(occupancy, fixed)]
    outcomes = {o.job_id: o for o in apply_reclaim(victims, "requeue", timeout=TIMEOUT)}
    assert outcomes[victim].result == "done"
    assert outcomes[fixed].result == "refused"
    assert "disabled" in outcomes[fixed].message  # "Requested operation is presently disabled for job N"

    started = wait_for(lambda: _running_since(live, waiting), START_TIMEOUT_S, f"job {waiting} to start")
    seen = time.time()
    after = live.slurm.job(victim)
    assert after is not None
    assert live.slurm.job_state(after) == "PENDING"
    assert after["state_reason"] == "BeginTime"
    eligible = live.slurm.number(after["eligible_time"])
    assert eligible > requeued_at
    print(
        f"\nrequeue -> waiting job seen running {seen - requeued_at:.1f} s later (its start_time "
        f"{started - requeued_at:+.0f} s); requeued job PENDING/BeginTime, "
        f"eligible {eligible - requeued_at:.0f} s after the requeue"
    )
    assert queue(live.slurm)[fixed].state == "RUNNING"

    # The requeued job runs again: once the waiting job (15 s) is done and its delay is over.
    rerun = wait_for(lambda: _running_since(live, victim), RERUN_TIMEOUT_S, f"job {victim} to run again")
    assert rerun >= eligible
    again = live.slurm.job(victim)
    assert again is not None and live.slurm.number(again["restart_cnt"]) == 1
    print(f"requeued job running again {rerun - requeued_at:.0f} s after the requeue")


def _running_since(live: Live, job_id: str) -> float | None:
    job = live.slurm.job(job_id)
    if job is None or live.slurm.job_state(job) != "RUNNING":
        return None
    start: float = live.slurm.number(job["start_time"])
    return start


def test_jobs_not_running_are_never_touched(live: Live) -> None:
    """A held job, a job that completed (a plain `scontrol requeue` would run it again) and an unknown id
    are `gone`, and stay as they were; a running array task is requeued by its own id."""
    held = submit(live, "-A", "cputeam", "-p", "cpu", "-n", "1", "--mem=100", "--hold")
    done = submit(live, "-A", "cputeam", "-p", "cpu", "-n", "1", "--mem=100", wrap="true")
    array = submit(live, "-A", "memteam", "-p", "cpu", "-n", "1", "--mem=100", "--array=0-1")

    def completed() -> bool:
        out = live.slurm.run("scontrol", "show", "job", done, check=False).stdout
        return "JobState=COMPLETED" in out

    wait_for(completed, START_TIMEOUT_S, f"job {done} to complete")
    outcomes = apply_reclaim([named(held), named(done), named("999999")], "requeue", timeout=TIMEOUT)
    assert [o.result for o in outcomes] == ["gone", "gone", "gone"]
    assert "PENDING" in outcomes[0].message
    jobs = queue(live.slurm)
    assert jobs[held].reason == "JobHeldUser"
    assert done not in jobs  # still completed, not back in the queue

    wait_for(lambda: _tasks_running(live) == 2, START_TIMEOUT_S, f"both tasks of array {array} to run")
    # The last task's own job id is the array's: requeued by that id, every task would go.
    (last,) = [job for job in read().jobs if job.job_id == array]
    assert last.target == f"{array}_1"
    (outcome,) = apply_reclaim([last], "requeue", timeout=TIMEOUT)
    assert outcome.result == "done"
    wait_for(lambda: _task_state(live, array) == "PENDING", START_TIMEOUT_S, f"array task {array}_1 to be pending")
    assert queue(live.slurm)[array].array == "1"
    assert _tasks_running(live) == 1  # the other task still runs


def _task_state(live: Live, job_id: str) -> str | None:
    job = queue(live.slurm).get(job_id)
    return job.state if job is not None else None


def _tasks_running(live: Live) -> int:
    return sum(job.state == "RUNNING" for job in queue(live.slurm).values() if job.account == "memteam")


def test_cancel_ends_a_running_job(live: Live) -> None:
    running = submit(live, "-A", "cputeam", "-p", "cpu", "-n", "1", "--mem=100")
    pending = submit(live, "-A", "cputeam", "-p", "cpu", "-n", "1", "--mem=100", "--hold")
    live.wait_running([running])
    outcomes = apply_reclaim([job_of(read(), running), named(pending)], "cancel", timeout=TIMEOUT)
    assert [o.result for o in outcomes] == ["done", "gone"]
    wait_for(lambda: running not in queue(live.slurm), START_TIMEOUT_S, f"job {running} to end")
    assert queue(live.slurm)[pending].reason == "JobHeldUser"
