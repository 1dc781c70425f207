"""`slurm-drf snapshot` against the sandbox: the snapshot holds what was submitted.

Jobs are submitted with known requests; the snapshot (read through squeue
and sinfo JSON by the CLI source) must report each job's TRES as docs/formats.md
defines them: allocated for running jobs, requested for pending ones, the
whole job (all tasks), memory in MiB, GPUs from --gres and --gpus alike, a
pending array as one record with its task count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.integration.live_helpers import Live, drf, queue

if TYPE_CHECKING:
    from tests.integration.conftest import SlurmSandbox

LATER = "--begin=now+1hour"  # pending for the whole test, whatever the node has free


@pytest.fixture
def live(slurm: SlurmSandbox, tmp_path: Path) -> Live:
    return Live(slurm, tmp_path)


def _wanted_tres(job: dict[str, Any]) -> dict[str, int]:
    """The snapshot's TRES without the keys Slurm adds on its own (billing)."""
    return {k: v for k, v in job["tres"].items() if k in ("cpu", "mem", "gres/gpu", "node")}


def test_snapshot_matches_what_was_submitted(live: Live, tmp_path: Path) -> None:
    submitted = {
        # running
        "gres": live.submit("-A", "gputeam", "-p", "gpu", "--gres=gpu:2", "-c", "4", "--mem=8G"),
        "tasks": live.submit("-A", "memteam", "-p", "cpu", "-n", "4", "-c", "2", "--mem-per-cpu=1000"),
        "gpus": live.submit("-A", "cputeam", "-p", "gpu", "--gpus=1", "-c", "1", "--mem=1G"),
        # pending
        "pending_gpus": live.submit("-A", "cputeam", "-p", "gpu", "--gpus=3", "-c", "1", "--mem=1G", LATER),
        "pending_tasks": live.submit(
            "-A", "gputeam", "-p", "gpu", "--gres=gpu:1", "-n", "4", "-c", "2", "--mem-per-cpu=512", LATER
        ),
        "array": live.submit("-A", "newteam", "-p", "cpu", "--array=0-9%2", "-c", "1", "--mem=100", LATER),
        "held": live.submit("--hold", "-A", "memteam", "-p", "cpu", "-c", "2", "--mem=2G"),
        "nice": live.submit("-A", "newteam", "-p", "cpu", "-c", "3", "--mem=300", "--nice=77", LATER),
    }
    live.wait_running([submitted["gres"], submitted["tasks"], submitted["gpus"]])

    path = tmp_path / "snapshot.json"
    drf("snapshot", "--config", str(live.config), "--output", str(path))
    snapshot = json.loads(path.read_text())
    reported = queue(live.slurm)

    assert snapshot["format"] == "slurm-drf-snapshot/1"
    assert snapshot["cluster"] == "drftest"
    node = next(n for n in snapshot["nodes"] if n["name"] == "drfnode")
    assert sorted(node["partitions"]) == ["cpu", "gpu"]
    assert {k: node["tres"][k] for k in ("cpu", "mem", "gres/gpu")} == {"cpu": 64, "mem": 512000, "gres/gpu": 8}

    jobs = {j["job_id"]: j for j in snapshot["jobs"]}
    assert set(submitted.values()) <= set(jobs)
    expected = {
        "gres": ("RUNNING", "gputeam", "gpu", {"cpu": 4, "mem": 8192, "gres/gpu": 2, "node": 1}),
        "tasks": ("RUNNING", "memteam", "cpu", {"cpu": 8, "mem": 8000, "node": 1}),
        "gpus": ("RUNNING", "cputeam", "gpu", {"cpu": 1, "mem": 1024, "gres/gpu": 1, "node": 1}),
        "pending_gpus": ("PENDING", "cputeam", "gpu", {"cpu": 1, "mem": 1024, "gres/gpu": 3, "node": 1}),
        "pending_tasks": ("PENDING", "gputeam", "gpu", {"cpu": 8, "mem": 4096, "gres/gpu": 1, "node": 1}),
        "array": ("PENDING", "newteam", "cpu", {"cpu": 1, "mem": 100, "node": 1}),
        "held": ("PENDING", "memteam", "cpu", {"cpu": 2, "mem": 2048, "node": 1}),
        "nice": ("PENDING", "newteam", "cpu", {"cpu": 3, "mem": 300, "node": 1}),
    }
    for name, (state, account, partition, tres) in expected.items():
        job = jobs[submitted[name]]
        assert (job["state"], job["account"], job["partition"]) == (state, account, partition), name
        assert job["state"] == reported[submitted[name]].state, name
        assert _wanted_tres(job) == tres, name
        assert job["user"] == "root"

    array = jobs[submitted["array"]]
    assert array["array_tasks"] == 10
    assert reported[submitted["array"]].array == "0-9%2"
    # One record for the whole pending array: no per-task ids.
    assert not any(j.startswith(f"{submitted['array']}_") for j in jobs)
    assert all(jobs[submitted[n]]["array_tasks"] == 1 for n in expected if n != "array")

    held = jobs[submitted["held"]]
    assert (held["held"], held["priority"]) == (True, 0)
    assert not any(jobs[submitted[n]]["held"] for n in expected if n != "held")
    assert jobs[submitted["nice"]]["nice"] == 77
    assert jobs[submitted["gres"]]["nice"] == 0

    # The saved snapshot plans offline like the live cluster: held skipped, the array once.
    plan = json.loads(drf("plan", "--snapshot", str(path), "--config", str(live.config), "--format", "json").stdout)
    entries = {j["job_id"]: j for j in plan["jobs"]}
    assert (entries[submitted["held"]]["action"], entries[submitted["held"]]["reason"]) == ("skip", "held")
    assert entries[submitted["array"]]["array_tasks"] == 10
    assert {j for j, e in entries.items() if e["order"] is not None} >= {
        submitted[n] for n in ("pending_gpus", "pending_tasks", "array", "nice")
    }
