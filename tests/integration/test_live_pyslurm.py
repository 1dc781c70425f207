"""The pyslurm backend against the sandbox, beside the CLI backend on the same cluster.

These run in the pyslurm tier: scripts/test runs the live tier a second time
with the Python of the venv that scripts/pyslurm-env makes (a pyslurm built
for the sandbox's Slurm) and SLURM_DRF_LIVE_BACKEND=pyslurm; there every
other live test also reads and writes through pyslurm, because
`backend: auto` picks it. The CLI tier deselects the `pyslurm` marker.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.integration.live_helpers import LIVE_BACKEND, Live, drf, plan_jobs, queue, write_config
from tests.polling import wait_for

if TYPE_CHECKING:
    from tests.integration.conftest import SlurmSandbox

pytestmark = pytest.mark.pyslurm

LATER = "--begin=now+1hour"  # pending for the whole test, whatever the node has free
# A pending het job: two components (sbatch's `:`) under one leader's id.
HET_JOB = (
    "-A",
    "gputeam",
    "-p",
    "cpu",
    "-c",
    "1",
    "--mem=100",
    LATER,
    ":",
    "-A",
    "gputeam",
    "-p",
    "cpu",
    "-c",
    "2",
    "--mem=200",
)


@pytest.fixture
def live(slurm: SlurmSandbox, tmp_path: Path) -> Live:
    if LIVE_BACKEND != "pyslurm":
        message = "the pyslurm tier runs in scripts/pyslurm-env's venv with SLURM_DRF_LIVE_BACKEND=pyslurm"
        if os.environ.get("SLURM_DRF_REQUIRE_SLURM") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return Live(slurm, tmp_path)


def test_auto_picks_pyslurm_when_it_matches(live: Live) -> None:
    # live.config names no backend: `auto`.
    run = live.once("--dry-run")
    assert "slurm-drf: INFO: backend: pyslurm" in run.stderr.splitlines(), run.stderr


def _snapshot(live: Live, backend: str) -> dict[str, Any]:
    path = live.tmp_path / f"snapshot-{backend}.json"
    config = write_config(live.tmp_path, f"{backend}.yaml", backend=backend, state_dir=str(live.state_dir))
    drf("snapshot", "--config", str(config), "--output", str(path))
    data: dict[str, Any] = json.loads(path.read_text())
    data.pop("taken_at")
    data["jobs"] = sorted(data["jobs"], key=lambda job: int(job["job_id"]))
    data["nodes"] = sorted(data["nodes"], key=lambda node: node["name"])
    return data


def test_snapshots_of_both_backends_are_equal_field_by_field(live: Live) -> None:
    running = [
        live.submit("-A", "gputeam", "-p", "gpu", "--gres=gpu:2", "-c", "4", "--mem=8G"),
        live.submit("-A", "memteam", "-p", "cpu", "-n", "4", "-c", "2", "--mem-per-cpu=1000"),
        live.submit("-A", "cputeam", "-p", "gpu", "--gpus=1", "-c", "1", "--mem=1G"),
    ]
    pending = [
        live.submit("-A", "cputeam", "-p", "gpu", "--gpus=3", "-c", "1", "--mem=1G", LATER),
        live.submit("-A", "gputeam", "-p", "gpu", "--gres=gpu:1", "-n", "4", "-c", "2", "--mem-per-cpu=512", LATER),
        live.submit("-A", "newteam", "-p", "cpu", "--array=0-9%2", "-c", "1", "--mem=100", LATER),
        live.submit("--hold", "-A", "memteam", "-p", "cpu", "-c", "2", "--mem=2G"),
        live.submit("-A", "newteam", "-p", "cpu", "-c", "3", "--mem=300", "--nice=77", LATER),
        live.submit(*HET_JOB),
    ]
    live.wait_running(running)

    def agreeing() -> tuple[dict[str, Any], dict[str, Any]] | None:
        # Priorities move with age between two reads: take the pyslurm one
        # between two CLI reads that agree.
        before, through_pyslurm, after = _snapshot(live, "cli"), _snapshot(live, "pyslurm"), _snapshot(live, "cli")
        return (before, through_pyslurm) if before == after else None

    by_cli, by_pyslurm = wait_for(agreeing, 60, "two CLI snapshots in a row that agree")
    ours = {job["job_id"] for job in by_cli["jobs"]}
    assert set(running) | set(pending) <= ours
    assert by_pyslurm["het_leaders"] == by_cli["het_leaders"] == [pending[-1]]
    assert by_pyslurm["nodes"] == by_cli["nodes"]
    cli_jobs = {job["job_id"]: job for job in by_cli["jobs"]}
    for job in by_pyslurm["jobs"]:
        assert job == cli_jobs[job["job_id"]], job["job_id"]
    assert by_pyslurm == by_cli


def test_het_leader_written_through_scontrol_reaches_every_component(live: Live) -> None:
    live.require_quiet_queue()
    het = live.submit(*HET_JOB)
    other = live.submit("-A", "cputeam", "-p", "cpu", "-c", "1", "--mem=100", LATER)
    plan = live.once().plan
    entries = plan_jobs(plan)
    assert entries[het]["action"] == "set"
    assert entries[other]["action"] == "set"
    lines = live.slurm.run("squeue", "-h", "-t", "PD", "-o", "%i %y").stdout.split()
    nice = dict(zip(lines[::2], map(int, lines[1::2]), strict=True))
    assert nice[f"{het}+0"] == nice[f"{het}+1"] == entries[het]["nice"]
    assert queue(live.slurm)[other].nice == entries[other]["nice"]


def test_a_users_nice_of_zero_is_given_back(live: Live) -> None:
    # pyslurm drops a nice of 0 (docs/rule.md §5): reset must send it another way.
    # (site_factor's reset to 0 is test_live_modes', which this tier runs too.)
    live.require_quiet_queue()
    job = live.submit("-A", "memteam", "-p", "cpu", "-c", "1", "--mem=100", LATER)
    live.once()
    assert queue(live.slurm)[job].nice < 0
    live.reset()
    assert queue(live.slurm)[job].nice == 0
