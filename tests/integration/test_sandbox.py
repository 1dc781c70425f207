"""The sandbox has the shape the rest of the live tests rely on."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.integration.conftest import SlurmSandbox

NODE = "drfnode"
TEAMS = {"gputeam", "memteam", "cputeam", "newteam"}


def _number(value: Any) -> Any:
    # 23.02+ wraps numbers as {"set": ..., "infinite": ..., "number": N}.
    return value["number"] if isinstance(value, dict) else value


def _node_facts(sinfo: dict[str, Any]) -> dict[str, Any]:
    """cpus, memory, gres and partitions of NODE from ``sinfo --json``."""
    if "nodes" in sinfo:  # 22.05: one record per node
        node = next(n for n in sinfo["nodes"] if n["name"] == NODE)
        return {
            "cpus": node["cpus"],
            "memory": node["real_memory"],
            "gres": node["gres"],
            "partitions": set(node["partitions"]),
        }
    # 23.02+: one record per (partition, node group)
    rows = [r for r in sinfo["sinfo"] if NODE in r["nodes"]["nodes"]]
    return {
        "cpus": _number(rows[0]["cpus"]["total"]),
        "memory": _number(rows[0]["memory"]["maximum"]),
        "gres": rows[0]["gres"]["total"],
        "partitions": {r["partition"]["name"] for r in rows},
    }


def test_node_shape(slurm_sandbox: SlurmSandbox) -> None:
    facts = _node_facts(json.loads(slurm_sandbox.run("sinfo", "--json").stdout))
    assert facts["cpus"] == 64
    assert facts["memory"] == 512000
    assert facts["gres"].split("(")[0] == "gpu:8"
    assert facts["partitions"] == {"gpu", "cpu"}
    # gpu is the default partition.
    assert "Default=YES" in slurm_sandbox.run("scontrol", "show", "partition", "gpu").stdout


def test_gpu_job_runs_with_gres_in_tres(slurm: SlurmSandbox) -> None:
    job_id = slurm.sbatch("-A", "gputeam", "-p", "gpu", "--gres=gpu:2", "-c", "4", "--mem=8G", "--wrap", "sleep 300")
    job = slurm.wait_for_state(job_id, "RUNNING")
    assert job["account"] == "gputeam"
    assert job["partition"] == "gpu"
    assert "gres/gpu=2" in job["tres_alloc_str"].split(",")
    assert "cpu=4" in job["tres_alloc_str"].split(",")


def test_held_job_stays_pending_with_priority_zero(slurm: SlurmSandbox) -> None:
    job_id = slurm.sbatch("--hold", "-A", "memteam", "-p", "cpu", "-c", "1", "--mem=1G")
    # Watch a few scheduler passes (bf_interval=1, sched_interval=1).
    deadline = time.monotonic() + 3
    while True:
        job = slurm.job(job_id)
        assert job is not None
        assert slurm.job_state(job) == "PENDING"
        assert slurm.number(job["priority"]) == 0
        assert job["state_reason"] == "JobHeldUser"
        if time.monotonic() >= deadline:
            break
        time.sleep(0.5)


def test_team_accounts_exist(slurm_sandbox: SlurmSandbox) -> None:
    out = slurm_sandbox.run("sacctmgr", "-nP", "show", "assoc", "format=account,user,parentname").stdout
    rows = [line.split("|") for line in out.splitlines() if line]
    parents = {acct: parent for acct, user, parent in rows if not user}
    users = {(acct, user) for acct, user, _ in rows if user}
    assert {a for a, p in parents.items() if p == "research"} == TEAMS
    assert parents["research"] == "root"
    assert {(team, "root") for team in TEAMS} <= users
