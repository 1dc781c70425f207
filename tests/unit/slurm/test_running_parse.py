"""Reclaim's reader and executor (slurm.parse.running, slurm.running) on output captured from 22.05, 24.11 and 26.05.

The fixtures (`squeue-running.json` and the node list beside it in
tests/fixtures/slurm-RELEASE/) are one scene captured on a two-node sandbox
of each release: job A (gputeam, 4 CPUs over two nodes, 2 GPUs a node), B
(cputeam, --no-requeue), an array of two tasks (memteam) and D (newteam,
--gpus=3). The live tier (tests/integration/test_live_requeue.py) runs the
same readers against a real slurmctld.
"""

from __future__ import annotations

import copy
import json
import logging
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from slurm_drf.errors import SlurmError, SlurmReadError, SlurmWriteError
from slurm_drf.slurm.parse.running import Occupancy, RunningJob, parse_free, parse_running
from slurm_drf.slurm.running import (
    Outcome,
    apply_reclaim,
    build_reclaim_argv,
    build_state_argv,
    fetch_occupancy,
    parse_outcome,
    parse_states,
)
from tests.paths import FIXTURES

RESOURCES = ("cpu", "mem", "gres/gpu", "node")
NODES = {
    "22.05": "sinfo-running.json",
    "24.11": "scontrol-show-nodes-running.json",
    "26.05": "scontrol-show-nodes-running.json",
}
RELEASES = sorted(NODES)


def load(release: str, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"slurm-{release}" / name).read_text())
    return data


def squeue(release: str) -> dict[str, Any]:
    return load(release, "squeue-running.json")


def by_account(jobs: Sequence[RunningJob]) -> dict[str, list[RunningJob]]:
    out: dict[str, list[RunningJob]] = {}
    for job in jobs:
        out.setdefault(job.account, []).append(job)
    return out


@pytest.mark.parametrize("release", RELEASES)
def test_each_job_has_a_row_per_node(release: str) -> None:
    jobs = by_account(parse_running(squeue(release), None, RESOURCES))
    (spread,) = jobs["gputeam"]
    # -N2 -n4 --gres=gpu:2 --mem=1000: Slurm put 3 tasks on the first node, 1 on the second.
    assert dict(spread.allocation) == {"drfnode1": (3, 1000, 2, 1), "drfnode2": (1, 1000, 2, 1)}
    assert spread.running().total == (4, 2000, 4, 2)
    (gpus,) = jobs["newteam"]
    assert dict(gpus.allocation) == {"drfnode1": (2, 700, 3, 1)}
    (cpus,) = jobs["cputeam"]
    assert dict(cpus.allocation) == {"drfnode1": (3, 1500, 0, 1)}
    assert sorted(dict(job.allocation)["drfnode1"] for job in jobs["memteam"]) == [(1, 300, 0, 1)] * 2


@pytest.mark.parametrize("release", RELEASES)
def test_who_when_and_whether_requeueable(release: str) -> None:
    jobs = by_account(parse_running(squeue(release), None, RESOURCES))
    (spread,) = jobs["gputeam"]
    assert (spread.user, spread.partition, spread.qos) == ("root", "gpu", "normal")
    assert spread.start > 1.7e9
    assert spread.requeueable
    (no_requeue,) = jobs["cputeam"]  # sbatch --no-requeue
    assert not no_requeue.requeueable
    # Each running array task has a plain job id of its own; Slurm's commands name it ARRAY_TASK, because
    # the last task's own id is the array's, which names every task (`scontrol requeue ID` requeues them all).
    tasks = sorted(jobs["memteam"], key=lambda job: job.target)
    assert all(job.job_id.isdigit() for job in tasks)
    array = min(int(job.job_id) for job in tasks)
    assert [job.target for job in tasks] == [f"{array}_0", f"{array}_1"]
    assert array == int(tasks[1].job_id)  # the last task holds the array's id
    assert spread.target == spread.job_id


@pytest.mark.parametrize("release", RELEASES)
def test_free_is_total_less_allocated(release: str) -> None:
    free = parse_free(load(release, NODES[release]), None, RESOURCES)
    # drfnode1 holds 3+3+1+1+2 CPUs, 1000+1500+300+300+700 MiB, 2+3 GPUs; drfnode2 1 CPU, 1000 MiB, 2 GPUs.
    assert free == {"drfnode1": (54, 512000 - 3800, 3, 0), "drfnode2": (63, 511000, 6, 0)}


@pytest.mark.parametrize("release", RELEASES)
def test_free_agrees_with_the_jobs(release: str) -> None:
    """What the nodes say is allocated is what the jobs' rows add up to (nothing else runs there)."""
    jobs = parse_running(squeue(release), None, RESOURCES)
    free = parse_free(load(release, NODES[release]), None, RESOURCES)
    for node, vector in free.items():
        held = [sum(job.allocation[node][r] for job in jobs if node in job.allocation) for r in range(3)]
        assert [v + h for v, h in zip(vector[:3], held, strict=False)] == [64, 512000, 8]


@pytest.mark.parametrize("release", RELEASES)
def test_resources_in_the_order_asked(release: str) -> None:
    order = ("gres/gpu", "cpu", "license/matlab", "mem")
    jobs = by_account(parse_running(squeue(release), None, order))
    assert dict(jobs["gputeam"][0].allocation)["drfnode2"] == (2, 1, 0, 1000)
    assert parse_free(load(release, NODES[release]), None, order)["drfnode2"] == (6, 63, 0, 511000)


@pytest.mark.parametrize("release", RELEASES)
def test_partitions_filter_jobs(release: str) -> None:
    accounts = {job.account for job in parse_running(squeue(release), {"cpu"}, RESOURCES)}
    assert accounts == {"cputeam", "memteam"}
    assert parse_running(squeue(release), {"nosuch"}, RESOURCES) == []
    assert parse_free(load(release, NODES[release]), {"nosuch"}, RESOURCES) == {}
    assert set(parse_free(load(release, NODES[release]), {"cpu"}, RESOURCES)) == {"drfnode1", "drfnode2"}


def _drain(release: str) -> dict[str, Any]:
    data = copy.deepcopy(load(release, NODES[release]))
    node = data["nodes"][1]
    if release == "22.05":
        node["state_flags"] = ["DRAIN"]
    else:
        node["state"] = [*node["state"], "DRAIN"]
    return data


@pytest.mark.parametrize("release", RELEASES)
def test_a_drained_node_frees_nothing(release: str) -> None:
    assert set(parse_free(_drain(release), None, RESOURCES)) == {"drfnode1"}


@pytest.mark.parametrize("release", RELEASES)
def test_pending_jobs_are_not_running(release: str) -> None:
    data = copy.deepcopy(squeue(release))
    for record in data["jobs"]:
        record["job_state"] = "PENDING" if release == "22.05" else ["PENDING"]
    assert parse_running(data, None, RESOURCES) == []


def test_22_05_shares_cpus_out_by_cores() -> None:
    """22.05 lists cores per node, not CPUs: with two threads a core, 4 cores hold 8 CPUs (6 and 2)."""
    data = copy.deepcopy(squeue("22.05"))
    (record,) = [r for r in data["jobs"] if r["account"] == "gputeam"]
    record["tres_alloc_str"] = record["tres_alloc_str"].replace("cpu=4", "cpu=8")
    (job,) = [j for j in parse_running(data, None, RESOURCES) if j.account == "gputeam"]
    assert dict(job.allocation) == {"drfnode1": (6, 1000, 2, 1), "drfnode2": (2, 1000, 2, 1)}


@pytest.mark.parametrize("release", RELEASES)
def test_rows_that_do_not_add_up_leave_the_job_out(release: str, caplog: pytest.LogCaptureFixture) -> None:
    data = copy.deepcopy(squeue(release))
    (record,) = [r for r in data["jobs"] if r["account"] == "gputeam"]
    record["tres_alloc_str"] = record["tres_alloc_str"].replace("mem=2000M", "mem=3000M")
    del data["jobs"][1]["job_resources"]
    with caplog.at_level(logging.WARNING):
        jobs = parse_running(data, None, RESOURCES)
    assert "gputeam" not in {job.account for job in jobs}
    assert len(jobs) == 3
    assert "does not add up" in caplog.text
    assert "no allocation per node" in caplog.text


def test_a_het_job_is_not_requeueable() -> None:
    data = copy.deepcopy(squeue("24.11"))
    data["jobs"][0]["het_job_id"] = {"set": True, "infinite": False, "number": 7}
    data["jobs"][0]["het_job_offset"] = {"set": True, "infinite": False, "number": 1}
    job = parse_running(data, None, RESOURCES)[0]
    assert not job.requeueable
    assert job.target == "7+1"


def test_occupancy_as_the_policy_sees_it() -> None:
    jobs = tuple(parse_running(squeue("24.11"), None, RESOURCES))
    occupancy = Occupancy(RESOURCES, {}, jobs)
    running = occupancy.running(lambda job: job.account == "newteam", {jobs[0].job_id: 5.0})
    assert [r.job_id for r in running] == [j.job_id for j in jobs]
    assert [r.exempt for r in running] == [j.account == "newteam" for j in jobs]
    assert running[0].moved_at == 5.0
    assert all(r.moved_at is None for r in running[1:])
    assert [r.allocation for r in running] == [j.allocation for j in jobs]
    assert [r.requeueable for r in running] == [j.requeueable for j in jobs]


# --------------------------------------------------------------------------
# The executor's pure parts, and its flow with a fake runner


@pytest.mark.parametrize(
    ("returncode", "stderr", "result"),
    [
        (0, "", "done"),
        (1, "Requested operation is presently disabled for job 2", "refused"),  # --no-requeue, 22.05 to 26.05
        (1, "Job is pending execution for job 1", "gone"),
        (1, "Invalid job id specified for job 99999", "gone"),
        (1, "scancel: error: Kill job error on job id 9: Job/step already completing or completed", "gone"),
        (1, "Access/permission denied for job 5", "refused"),
    ],
)
def test_outcome_of_a_command(returncode: int, stderr: str, result: str) -> None:
    outcome = parse_outcome("5", returncode, stderr)
    assert outcome.result == result
    assert outcome.message == stderr


def test_state_lines() -> None:
    assert build_state_argv(["3", "51_2"])[-2:] == ["--jobs=3,51_2", "--format=%i|%T"]
    assert parse_states("3|RUNNING\n51_2|COMPLETING\n\n") == {"3": "RUNNING", "51_2": "COMPLETING"}


@pytest.mark.parametrize("target", ["", "12+0", "12_", "1;reboot", "-1", " 12", "12345678901", "12_[1-3]"])
def test_only_a_job_or_an_array_task_is_named(target: str) -> None:
    with pytest.raises(SlurmWriteError, match="only a plain job id or an array task"):
        build_reclaim_argv(target, "requeue")


def test_the_commands() -> None:
    assert build_reclaim_argv("12", "requeue") == ["scontrol", "requeue", "Incomplete", "12"]
    assert build_reclaim_argv("51_2", "cancel") == ["scancel", "--state=RUNNING", "51_2"]


def victims(*job_ids: str) -> list[RunningJob]:
    return [RunningJob(job_id, "a", "u", "p", "normal", 0.0, True, {}, job_id) for job_id in job_ids]


class FakeSlurm:
    """Answers squeue's state query from `states` and each requeue from `answers`; records the commands."""

    def __init__(self, states: Mapping[str, str], answers: Mapping[str, tuple[int, str] | None]) -> None:
        self.states = states
        self.answers = answers
        self.commands: list[list[str]] = []

    def __call__(
        self,
        argv: Sequence[str],
        timeout: float,
        *,
        env: Mapping[str, str] | None = None,
        error_class: type[SlurmError],
    ) -> subprocess.CompletedProcess[str]:
        self.commands.append(list(argv))
        if argv[0] == "squeue":
            asked = argv[3].removeprefix("--jobs=").split(",")
            assert argv[4] == "--format=%i|%T"
            lines = [f"{job}|{self.states[job]}" for job in asked if job in self.states]
            if not lines:
                return subprocess.CompletedProcess(argv, 1, "", "slurm_load_jobs error: Invalid job id specified\n")
            return subprocess.CompletedProcess(argv, 0, "\n".join(lines) + "\n", "")
        answer = self.answers.get(argv[-1], (0, ""))
        if answer is None:
            raise error_class(f"{' '.join(argv)}: no answer within {timeout:g} s")
        return subprocess.CompletedProcess(argv, answer[0], "", answer[1])


def test_only_running_jobs_are_touched() -> None:
    slurm = FakeSlurm(
        {"1": "RUNNING", "2": "RUNNING", "3": "PENDING", "4": "COMPLETING"},
        {"2": (1, "Requested operation is presently disabled for job 2")},
    )
    outcomes = apply_reclaim(victims("1", "2", "3", "4", "5"), "requeue", timeout=5, runner=slurm, environ={})
    assert [(o.job_id, o.result) for o in outcomes] == [
        ("1", "done"),
        ("2", "refused"),
        ("3", "gone"),
        ("4", "gone"),
        ("5", "gone"),
    ]
    assert outcomes[1].message == "Requested operation is presently disabled for job 2"
    assert "PENDING" in outcomes[2].message
    assert [c for c in slurm.commands if c[0] != "squeue"] == [
        ["scontrol", "requeue", "Incomplete", "1"],
        ["scontrol", "requeue", "Incomplete", "2"],
    ]


def test_all_gone_and_nothing_asked() -> None:
    slurm = FakeSlurm({}, {})
    assert apply_reclaim(victims("8", "9"), "cancel", timeout=5, runner=slurm, environ={}) == (
        Outcome("8", "gone", "job 8 is no longer in the queue"),
        Outcome("9", "gone", "job 9 is no longer in the queue"),
    )
    assert apply_reclaim([], "requeue", timeout=5, runner=slurm, environ={}) == ()
    assert len(slurm.commands) == 1  # the state query; nothing asked for no victims


def test_an_array_task_by_its_name_and_a_het_job_not_at_all() -> None:
    slurm = FakeSlurm({"51_2": "RUNNING"}, {})
    het = RunningJob("60", "a", "u", "p", "normal", 0.0, False, {}, "60+0")
    task = RunningJob("51", "a", "u", "p", "normal", 0.0, True, {}, "51_2")
    outcomes = apply_reclaim([het, task, het], "cancel", timeout=5, runner=slurm, environ={})
    assert [(o.job_id, o.result) for o in outcomes] == [("60", "refused"), ("51", "done"), ("60", "refused")]
    assert "array task" in outcomes[0].message
    assert slurm.commands == [
        ["squeue", "--all", "--noheader", "--jobs=51_2", "--format=%i|%T"],
        ["scancel", "--state=RUNNING", "51_2"],
    ]
    slurm.commands.clear()
    assert apply_reclaim([het], "requeue", timeout=5, runner=slurm, environ={})[0].result == "refused"
    assert slurm.commands == []


def test_each_job_is_acted_on_once() -> None:
    slurm = FakeSlurm({"1": "RUNNING"}, {})
    assert [o.result for o in apply_reclaim(victims("1", "1"), "requeue", timeout=5, runner=slurm, environ={})] == [
        "done",
        "done",
    ]
    assert len(slurm.commands) == 2


def test_a_command_without_answer_is_that_jobs_refusal() -> None:
    slurm = FakeSlurm({"1": "RUNNING", "2": "RUNNING"}, {"1": None})
    outcomes = apply_reclaim(victims("1", "2"), "cancel", timeout=5, runner=slurm, environ={})
    assert outcomes == (
        Outcome("1", "refused", "scancel --state=RUNNING 1: no answer within 5 s"),
        Outcome("2", "done"),
    )
    assert slurm.commands[-1] == ["scancel", "--state=RUNNING", "2"]


def test_states_that_cannot_be_read_stop_the_reclaim() -> None:
    def broken(
        argv: Sequence[str], timeout: float, *, env: Mapping[str, str] | None = None, error_class: type[SlurmError]
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", "squeue: error: Unable to contact slurm controller\n")

    with pytest.raises(SlurmReadError, match="Unable to contact"):
        apply_reclaim(victims("1"), "requeue", timeout=5, runner=broken, environ={})


def test_fetch_picks_the_node_command_by_release() -> None:
    answers = {
        "squeue": json.dumps(squeue("22.05")),
        "sinfo": json.dumps(load("22.05", NODES["22.05"])),
    }
    asked: list[str] = []

    def runner(argv: Sequence[str], timeout: float, *, env: Mapping[str, str] | None = None) -> str:
        asked.append(argv[0])
        return answers[argv[0]]

    occupancy = fetch_occupancy({"gpu", "cpu"}, RESOURCES, timeout=5, runner=runner, environ={})
    assert asked == ["squeue", "sinfo"]  # 22.05's scontrol has no JSON
    assert occupancy.version == "22.05.8"
    assert len(occupancy.jobs) == 5
    assert set(occupancy.free) == {"drfnode1", "drfnode2"}
