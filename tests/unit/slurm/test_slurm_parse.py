"""Parsers of Slurm's output, replayed from canned fixtures (tests/fixtures/).

22.05 output is captured from a real slurmctld; 23.02, 23.11 and 24.11
output is constructed from Slurm's source (see tests/fixtures/README.md).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import re
import stat
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from slurm_drf.config.settings import Config
from slurm_drf.cycle.run import run_cycle
from slurm_drf.cycle.store import StateStore
from slurm_drf.errors import SlurmReadError, SlurmWriteError, SnapshotError
from slurm_drf.model.snapshot_file import SnapshotFileSource, write_snapshot_file
from slurm_drf.model.types import Job, Node, Snapshot
from slurm_drf.slurm import execute
from slurm_drf.slurm.cli_source import (
    CliSource,
    build_assoc_mgr_argv,
    build_command_env,
    build_node_commands,
    build_scontrol_nodes_argv,
    build_sinfo_argv,
    build_squeue_argv,
)
from slurm_drf.slurm.parse.amounts import parse_gres, parse_number, parse_tres_per, parse_tres_string
from slurm_drf.slurm.parse.arrays import ArrayTasks, parse_array_task_string
from slurm_drf.slurm.parse.envelope import parse_json_cluster, parse_slurm_version, parse_version_tuple
from slurm_drf.slurm.parse.jobs import INFINITE_PRIORITY, parse_job_state, parse_squeue_json, parse_squeue_record
from slurm_drf.slurm.parse.nodes import parse_node_state, parse_sinfo_json
from slurm_drf.slurm.parse.scontrol import parse_cluster_name, parse_priority_type, parse_priority_weights
from slurm_drf.slurm.parse.snapshot import SnapshotHeader, build_snapshot, select_partitions
from slurm_drf.slurm.source import ClusterSource
from tests.paths import FIXTURES
from tests.unit.service.test_service import FakeWriter

CONSTRUCTED = ["23.02", "23.11", "24.11"]


def load(release: str, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"slurm-{release}" / name).read_text())
    return data


def text(release: str, name: str) -> str:
    return (FIXTURES / f"slurm-{release}" / name).read_text()


def by_id(jobs: Sequence[Job]) -> dict[str, Job]:
    return {job.job_id: job for job in jobs}


# --------------------------------------------------------------------------
# Slurm 22.05, captured


@pytest.fixture(scope="module")
def jobs_2205() -> dict[str, Job]:
    jobs = parse_squeue_json(load("22.05", "squeue.json"))
    assert len(jobs) == 20
    return by_id(jobs)


def test_2205_running_job_gets_gpus_from_tres_per_node(jobs_2205: dict[str, Job]) -> None:
    job = jobs_2205["1"]
    assert (job.account, job.user, job.partition, job.state) == ("gputeam", "root", "main", "RUNNING")
    # tres_alloc_str has no gres/gpu; tres_per_node gres:gpu:4 x 1 node adds it
    assert dict(job.tres) == {"cpu": 2, "mem": 8192, "node": 1, "billing": 2, "gres/gpu": 4}
    assert (job.priority, job.nice, job.held, job.array_tasks) == (1, 0, False, 1)
    assert job.submit_time == 1796004252.0


def test_2205_pending_job_gets_gpus_its_request_string_lacks(jobs_2205: dict[str, Job]) -> None:
    job = jobs_2205["3"]
    assert (job.account, job.state, job.priority) == ("gputeam", "PENDING", 5000)
    assert dict(job.tres) == {"cpu": 2, "mem": 8192, "node": 1, "billing": 2, "gres/gpu": 4}


def test_2205_gpus_in_request_string_are_not_added_twice(jobs_2205: dict[str, Job]) -> None:
    # tres_req_str has gres/gpu=2 and tres_per_node gres:gpu:2: two, not four
    assert dict(jobs_2205["7"].tres) == {"cpu": 2, "mem": 8192, "node": 1, "billing": 2, "gres/gpu": 2}


def test_2205_running_array_tasks_are_separate_records(jobs_2205: dict[str, Job]) -> None:
    # array 8, tasks 0-9: job ids 10..18 for tasks 0..8, the array id 8 for task 9
    task_ids = {"8", *(str(n) for n in range(10, 19))}
    assert task_ids <= jobs_2205.keys()
    for job_id in task_ids:
        job = jobs_2205[job_id]
        assert (job.account, job.state, job.array_tasks, job.nice) == ("memteam", "RUNNING", 1, 20)
        assert dict(job.tres) == {"cpu": 1, "mem": 4096, "node": 1, "billing": 1}


def test_2205_held_jobs(jobs_2205: dict[str, Job]) -> None:
    assert (jobs_2205["19"].held, jobs_2205["19"].priority, jobs_2205["19"].nice) == (True, 0, 50)
    assert (jobs_2205["20"].held, jobs_2205["20"].priority, jobs_2205["20"].nice) == (True, 0, 30)
    assert not any(job.held for job_id, job in jobs_2205.items() if job_id not in ("19", "20"))


def test_2205_nice(jobs_2205: dict[str, Job]) -> None:
    assert jobs_2205["5"].nice == 100
    assert jobs_2205["6"].nice == 100
    assert jobs_2205["9"].nice == 5
    assert jobs_2205["2"].nice == 0  # null in the JSON


def test_2205_memory_per_cpu_job(jobs_2205: dict[str, Job]) -> None:
    assert dict(jobs_2205["9"].tres) == {"cpu": 8, "mem": 8192, "node": 1, "billing": 8}


def test_2205_version_and_cluster() -> None:
    data = load("22.05", "squeue.json")
    assert parse_slurm_version(data) == "22.05.8"
    assert parse_json_cluster(data) == "drftest"


def test_2205_sinfo_node() -> None:
    nodes = parse_sinfo_json(load("22.05", "sinfo.json"))
    assert nodes == [Node("vm", ("main",), "mixed", nodes[0].tres)]
    assert dict(nodes[0].tres) == {"cpu": 64, "mem": 512000, "billing": 64, "gres/gpu": 8}
    assert nodes[0].eligible


# --------------------------------------------------------------------------
# 23.02, 23.11, 24.11, constructed from Slurm's source

# job id -> state, TRES, array tasks, held, nice, priority, partition
EXPECTED_JOBS: list[tuple[str, str, dict[str, int], int, bool, int, int, str]] = [
    ("101", "RUNNING", {"cpu": 2, "mem": 8192, "node": 1, "billing": 2, "gres/gpu": 4}, 1, False, 0, 1, "main"),
    ("102", "PENDING", {"cpu": 2, "mem": 8192, "node": 1, "billing": 2, "gres/gpu": 2}, 1, False, 0, 5000, "main"),
    (
        "103",
        "PENDING",
        {"cpu": 4, "mem": 16384, "node": 1, "billing": 4, "gres/gpu": 2, "gres/gpu:a100": 2},
        1,
        False,
        0,
        4000,
        "gpu,main",
    ),
    ("110", "PENDING", {"cpu": 1, "mem": 4096, "node": 1, "billing": 1}, 100, False, 20, 3000, "main"),
    ("111", "RUNNING", {"cpu": 1, "mem": 4096, "node": 1, "billing": 1}, 1, False, 20, 1, "main"),
    ("120", "PENDING", {"cpu": 1, "mem": 1024, "node": 1, "billing": 1}, 1, True, 30, 0, "main"),
    # A pending het job: its two components (cpu 2 and cpu 4) as one record under the leader.
    ("130", "PENDING", {"cpu": 6, "mem": 6144, "node": 2, "billing": 6}, 1, False, 0, 2000, "main"),
    ("140", "COMPLETING", {"cpu": 8, "mem": 8192, "node": 1, "billing": 8}, 1, False, 0, 1, "main"),
    ("150", "PENDING", {"cpu": 64, "mem": 512000, "node": 1, "billing": 64}, 1, False, 0, 1500, "main"),
    ("160", "PENDING", {"cpu": 1, "mem": 2048, "node": 1, "billing": 1}, 4, False, 0, 1400, "main"),
    ("170", "RUNNING", {"cpu": 8, "mem": 32768, "node": 2, "billing": 8, "gres/gpu": 4}, 1, False, 0, 1, "main"),
    ("180", "PENDING", {"cpu": 8, "mem": 16384, "node": 1, "billing": 8, "gres/gpu": 4}, 1, False, 0, 1300, "main"),
]


@pytest.mark.parametrize("release", CONSTRUCTED)
def test_constructed_squeue(release: str) -> None:
    jobs = parse_squeue_json(load(release, "squeue.json"))
    got = [(j.job_id, j.state, dict(j.tres), j.array_tasks, j.held, j.nice, j.priority, j.partition) for j in jobs]
    assert got == EXPECTED_JOBS  # 141 (COMPLETED) is left out


@pytest.mark.parametrize("release", CONSTRUCTED)
def test_constructed_users_and_times(release: str) -> None:
    jobs = parse_squeue_json(load(release, "squeue.json"))
    assert [j.user for j in jobs if j.job_id in ("103", "180")] == ["bob", "bob"]
    assert next(j for j in jobs if j.job_id == "110").submit_time == 1796004320.0


@pytest.mark.parametrize(("release", "version"), [("23.02", "23.02.5"), ("23.11", "23.11.1"), ("24.11", "24.11.1")])
def test_constructed_version_and_cluster(release: str, version: str) -> None:
    data = load(release, "squeue.json")
    assert parse_slurm_version(data) == version
    assert parse_json_cluster(data) == "drftest"
    assert parse_slurm_version(load(release, "scontrol-show-nodes.json")) == version


def test_finished_jobs_on_request() -> None:
    jobs = parse_squeue_json(load("24.11", "squeue.json"), include_finished=True)
    assert by_id(jobs)["141"].state == "COMPLETED"


@pytest.mark.parametrize("release", CONSTRUCTED)
def test_constructed_scontrol_nodes(release: str) -> None:
    nodes = {n.name: n for n in parse_sinfo_json(load(release, "scontrol-show-nodes.json"))}
    assert list(nodes) == ["vm", "gpu02", "cpu03"]
    assert (nodes["vm"].state, nodes["vm"].partitions) == ("mixed", ("main",))
    assert dict(nodes["vm"].tres) == {"cpu": 64, "mem": 512000, "billing": 64, "gres/gpu": 8}
    assert (nodes["gpu02"].state, nodes["gpu02"].partitions) == ("idle+drain", ("gpu", "main"))
    # typed GPUs come from the node's GRES; the TRES total is not doubled
    assert dict(nodes["gpu02"].tres) == {"cpu": 32, "mem": 256000, "billing": 32, "gres/gpu": 4, "gres/gpu:a100": 4}
    assert nodes["cpu03"].state == "down+not_responding"
    assert dict(nodes["cpu03"].tres) == {"cpu": 16, "mem": 64000, "billing": 16}
    assert [n.eligible for n in nodes.values()] == [True, False, False]


def test_2302_grouped_sinfo() -> None:
    nodes = {n.name: n for n in parse_sinfo_json(load("23.02", "sinfo.json"))}
    assert list(nodes) == ["vm", "gpu02", "cpu03"]
    assert nodes["gpu02"].partitions == ("main", "gpu")  # one record per partition, merged
    assert nodes["gpu02"].state == "idle+drain"
    assert dict(nodes["gpu02"].tres) == {"cpu": 32, "mem": 256000, "gres/gpu": 4, "gres/gpu:a100": 4}
    assert dict(nodes["vm"].tres) == {"cpu": 64, "mem": 512000, "gres/gpu": 8}
    assert dict(nodes["cpu03"].tres) == {"cpu": 16, "mem": 64000}


# --------------------------------------------------------------------------
# Bad records


def test_malformed_records_are_skipped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    data = copy.deepcopy(load("22.05", "squeue.json"))
    good = data["jobs"][0]
    bad_state = dict(good, job_id=901, job_state=42)
    no_account = dict(good, job_id=902, account="")
    bad_array = dict(good, job_id=903, job_state="PENDING", array_task_string="5-1")
    no_id = {k: v for k, v in good.items() if k != "job_id"}
    data["jobs"][3:3] = [bad_state, "not a job", no_account, bad_array, no_id]
    with caplog.at_level(logging.WARNING, logger="slurm_drf.slurm.parse"):
        jobs = parse_squeue_json(data)
    assert len(jobs) == 20
    assert not {"901", "902", "903"} & by_id(jobs).keys()
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(messages) == 5
    assert any(m.startswith("job 901 skipped") and "job_state" in m for m in messages)
    assert any(m.startswith("job 902 skipped") and "no account" in m for m in messages)
    assert any(m.startswith("job 903 skipped") and "5-1" in m for m in messages)
    assert any(m.startswith("job ? skipped") and "missing job_id" in m for m in messages)


def test_odd_gres_keeps_the_job_and_warns(caplog: pytest.LogCaptureFixture) -> None:
    record = dict(load("22.05", "squeue.json")["jobs"][0], tres_per_node="gres:gpu:a:b:c", gres_detail=[])
    with caplog.at_level(logging.WARNING, logger="slurm_drf.slurm.parse"):
        job = parse_squeue_record(record)
    assert job is not None
    assert dict(job.tres) == {"cpu": 2, "mem": 8192, "node": 1, "billing": 2}
    assert "job 1 tres_per_node" in caplog.text


def test_every_job_with_the_same_odd_gres_is_named_though_shapes_are_parsed_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    base = load("22.05", "squeue.json")["jobs"][0]
    odd = [dict(base, job_id=i, tres_per_node="gres:gpu:a:b:c", gres_detail=[]) for i in (71, 72)]
    same = [dict(base, job_id=i) for i in (81, 82)]
    with caplog.at_level(logging.WARNING, logger="slurm_drf.slurm.parse"):
        jobs = [parse_squeue_record(record) for record in [*odd, *same]]
    assert "job 71 tres_per_node" in caplog.text and "job 72 tres_per_node" in caplog.text
    assert all(job is not None for job in jobs)
    tres = [dict(job.tres) for job in jobs if job is not None]
    assert tres[0] == tres[1] == {"cpu": 2, "mem": 8192, "node": 1, "billing": 2}
    assert tres[2] == tres[3] == dict(parse_squeue_record(base).tres)  # type: ignore[union-attr]
    # A field that differs only in its JSON type is another shape: True is no node count.
    with pytest.raises((TypeError, ValueError)):
        parse_squeue_record(dict(base, node_count=True))


def test_jobs_of_one_shape_share_their_resources_and_a_list_field_is_part_of_the_shape() -> None:
    base = dict(
        load("22.05", "squeue.json")["jobs"][0],
        job_state="RUNNING",
        tres_alloc_str="cpu=2,mem=8G,node=1",
        gres_detail=["gpu:2(IDX:0-1)"],
    )
    first, second = (parse_squeue_record(dict(base, job_id=i)) for i in (91, 92))
    other = parse_squeue_record(dict(base, job_id=93, gres_detail=["gpu:4(IDX:0-3)"]))
    assert first is not None and second is not None and other is not None
    assert first.tres is second.tres  # parsed once
    assert first.tres["gres/gpu"] == 2 and other.tres["gres/gpu"] == 4
    with pytest.raises(TypeError):
        first.tres["cpu"] = 1  # type: ignore[index]  # shared, so read-only


# A TRES amount no job can hold (issue 22): the job is skipped with one warning
# naming it and the field, the rest of squeue's answer is read, and the
# snapshot is built (a 20-digit amount once stopped the cycle in numpy).
BAD_AMOUNTS = [
    ("1" * 400, "characters left out"),
    ("9" * 5000, "characters left out"),  # past Python's int digit limit
    ("99999999999999999999", "mem=99999999999999999999"),  # past int64, under float's infinity
    ("9223372036854775808", "mem=9223372036854775808"),  # MAX_TRES + 1
    ("-5", "mem=-5"),
    ("-8G", "mem=-8G"),
    ("5X", "mem=5X"),
    ("8GB", "mem=8GB"),
    ("1e5", "mem=1e5"),
    ("nan", "mem=nan"),
    ("inf", "mem=inf"),
    ("5.5.5", "mem=5.5.5"),
    ("0x10", "mem=0x10"),
    ("\u0661\u0662", "mem=\u0661\u0662"),  # Arabic-Indic digits: int() reads them, Slurm never prints them
    ("", "mem="),
]


@pytest.mark.parametrize("release", ["22.05", "24.11"])
@pytest.mark.parametrize("field", ["tres_alloc_str", "tres_req_str"])
@pytest.mark.parametrize(("amount", "said"), BAD_AMOUNTS, ids=[repr(a[0])[:24] for a in BAD_AMOUNTS])
def test_a_bad_tres_amount_skips_the_job_with_one_warning_naming_it_and_the_field(
    release: str, field: str, amount: str, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    data = copy.deepcopy(load(release, "squeue.json"))
    # A running job reads its allocation, a pending one its request.
    state = "RUNNING" if field == "tres_alloc_str" else "PENDING"
    target = next(r for r in data["jobs"] if state in str(r["job_state"]) and r.get(field))
    target[field] = f"cpu=2,mem={amount},node=1"
    with caplog.at_level(logging.WARNING, logger="slurm_drf.slurm.parse"):
        jobs = parse_squeue_json(data)
    build_snapshot(SnapshotHeader("c", "t", None), [], jobs, None, "")  # the rest makes a snapshot
    job_id = str(target["job_id"])
    assert job_id not in by_id(jobs)
    assert len(jobs) == len(parse_squeue_json(load(release, "squeue.json"))) - 1
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(messages) == 1
    assert messages[0].startswith(f"job {job_id} skipped: {field}: ")
    assert said in messages[0] and "is not an amount from 0 to 9223372036854775807" in messages[0]
    assert len(messages[0]) < 250 and "\n" not in messages[0]


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"memory_per_node": 10**30, "tres_req_str": "cpu=4,node=1"}, "mem 1000000000000000000000000000000"),
        ({"memory_per_node": 2**62, "node_count": 4, "tres_req_str": "cpu=4"}, f"mem {2**64}"),
        ({"tres_per_node": f"gres:gpu:{2**62}", "node_count": 4}, f"gres/gpu {2**64}"),
        ({"memory_per_node": -5, "tres_req_str": "cpu=4,node=1"}, "memory_per_node: expected a number >= 0"),
    ],
)
def test_a_product_past_max_tres_skips_the_job(fields: dict[str, Any], said: str) -> None:
    with pytest.raises(ValueError, match=re.escape(said)):
        parse_squeue_record(minimal_record(**fields))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mem=9223372036854775807", {"mem": 2**63 - 1}),  # the largest amount, exactly (no float)
        ("mem=9007199254740993", {"mem": 9007199254740993}),  # 2^53 + 1, which a float rounds
        ("mem=1.5K", {"mem": 0}),  # 1.5 KiB: 0.0015 MiB
        ("mem=512K", {"mem": 0}),  # half a MiB: halves to even
        ("mem=1536K", {"mem": 2}),
        ("cpu=2,mem=-5", {"cpu": 2}),  # nodes and sacct leave a non-amount out ...
        ("cpu=2,mem=12\u0663", {"cpu": 2}),
    ],
)
def test_tres_amounts_are_exact(text: str, expected: dict[str, int]) -> None:
    assert parse_tres_string(text) == expected


def test_a_node_tres_amount_of_400_digits_skips_the_node(caplog: pytest.LogCaptureFixture) -> None:
    data = copy.deepcopy(load("24.11", "scontrol-show-nodes.json"))
    data["nodes"][1]["tres"] = "cpu=4,mem=" + "1" * 400
    with caplog.at_level(logging.WARNING, logger="slurm_drf.slurm.parse"):
        nodes = parse_sinfo_json(data)
    assert [n.name for n in nodes] == ["vm", "cpu03"]
    assert "node gpu02 skipped" in caplog.text and "is past 9223372036854775807" in caplog.text


def test_malformed_node_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    data = copy.deepcopy(load("24.11", "scontrol-show-nodes.json"))
    data["nodes"][1]["state"] = 7
    with caplog.at_level(logging.WARNING, logger="slurm_drf.slurm.parse"):
        nodes = parse_sinfo_json(data)
    assert [n.name for n in nodes] == ["vm", "cpu03"]
    assert "node gpu02 skipped" in caplog.text


@pytest.mark.parametrize(
    "data",
    [
        {"meta": {}, "errors": [], "warnings": []},
        {"jobs": "nope"},
        {"jobs": [], "errors": [{"error": "Unable to contact slurm controller", "error_number": 1}]},
    ],
)
def test_output_that_is_not_squeue_is_an_error(data: dict[str, Any]) -> None:
    with pytest.raises(SlurmReadError):
        parse_squeue_json(data)


def test_no_jobs_is_fine() -> None:
    assert parse_squeue_json({"jobs": [], "errors": [], "warnings": [{"description": "Zero jobs"}]}) == []


# --------------------------------------------------------------------------
# Single records: other spellings


def minimal_record(**fields: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "job_id": 7,
        "account": "physics",
        "user_name": "alice",
        "partition": "gpu",
        "job_state": ["PENDING"],
        "priority": 100,
        "nice": 0,
        "submit_time": 1796004252,
        "tres_req_str": "cpu=4,mem=16G,node=1",
        "node_count": 1,
        "tasks": 1,
        "cpus": 4,
    }
    record.update(fields)
    return record


def test_complex_mode_record() -> None:
    # --json=v0.0.41+complex: plain numbers, null strings, "Infinity"
    job = parse_squeue_record(
        minimal_record(
            priority="Infinity",
            nice=None,
            tres_alloc_str=None,
            array_task_string=None,
            memory_per_node=None,
            memory_per_cpu=None,
            het_job_id=None,
            user_name=None,
            user_id=1001,
        )
    )
    assert job is not None
    assert (job.priority, job.nice, job.user, job.held) == (INFINITE_PRIORITY, 0, "1001", False)
    assert dict(job.tres) == {"cpu": 4, "mem": 16384, "node": 1}


def test_running_het_component_keeps_its_own_id() -> None:
    record = minimal_record(
        job_id=41, job_state=["RUNNING"], het_job_id=40, het_job_offset=1, tres_alloc_str="cpu=4,mem=16G,node=1"
    )
    job = parse_squeue_record(record)
    assert job is not None and job.job_id == "41"


def test_pending_array_record_uses_array_job_id() -> None:
    record = minimal_record(job_id=55, array_job_id=50, array_task_string="3,5-9")
    job = parse_squeue_record(record)
    assert job is not None and (job.job_id, job.array_tasks) == ("50", 6)


def test_truncated_array_string_counts_a_lower_bound(caplog: pytest.LogCaptureFixture) -> None:
    record = minimal_record(array_job_id=7, array_task_string="0,2,4,6,...")
    with caplog.at_level(logging.WARNING, logger="slurm_drf.slurm.parse"):
        job = parse_squeue_record(record)
    assert job is not None and job.array_tasks == 4
    assert "SLURM_BITSTR_LEN=0" in caplog.text


def test_memory_from_per_cpu_and_per_gpu_when_tres_lacks_it() -> None:
    per_cpu = parse_squeue_record(minimal_record(tres_req_str="cpu=4,node=1", memory_per_cpu=1000))
    assert per_cpu is not None and per_cpu.tres["mem"] == 4000
    per_node = parse_squeue_record(
        minimal_record(
            tres_req_str="cpu=4,node=2", node_count=2, memory_per_node={"set": True, "infinite": False, "number": 3000}
        )
    )
    assert per_node is not None and per_node.tres["mem"] == 6000
    per_gpu = parse_squeue_record(
        minimal_record(tres_req_str="cpu=4,node=1", tres_per_job="gres/gpu:2", memory_per_tres="gres/gpu:5000")
    )
    assert per_gpu is not None and (per_gpu.tres["mem"], per_gpu.tres["gres/gpu"]) == (10000, 2)
    whole_node = parse_squeue_record(minimal_record(tres_req_str="cpu=4,node=1", memory_per_node=0))
    assert whole_node is not None and "mem" not in whole_node.tres


def test_empty_tres_string_falls_back_to_cpus_and_node_count() -> None:
    job = parse_squeue_record(minimal_record(tres_req_str="", cpus=6, node_count=2, memory_per_cpu=100))
    assert job is not None and dict(job.tres) == {"cpu": 6, "node": 2, "mem": 600}


def test_gres_per_task_and_per_node_multiply() -> None:
    per_task = parse_squeue_record(minimal_record(tres_per_task="cpu:2,gres/gpu:1", tasks=3))
    assert per_task is not None and per_task.tres["gres/gpu"] == 3
    per_node = parse_squeue_record(
        minimal_record(tres_per_node="gres/gpu:a100:2", node_count=3, tres_req_str="cpu=4,mem=1G,node=3")
    )
    assert per_node is not None
    assert (per_node.tres["gres/gpu"], per_node.tres["gres/gpu:a100"]) == (6, 6)
    # tres_per_job is the whole job and wins over the per-node count
    both = parse_squeue_record(
        minimal_record(
            tres_per_job="gres/gpu:5", tres_per_node="gres/gpu:2", node_count=3, tres_req_str="cpu=4,mem=1G,node=3"
        )
    )
    assert both is not None and both.tres["gres/gpu"] == 5


def test_running_job_gres_detail_is_what_it_holds() -> None:
    job = parse_squeue_record(
        minimal_record(
            job_state="RUNNING",
            tres_alloc_str="cpu=4,mem=1G,node=2",
            node_count=2,
            tres_per_job="gres:gpu:3",
            gres_detail=["gpu:a100:2(IDX:0-1)", "gpu:a100:1(IDX:3)"],
        )
    )
    assert job is not None
    assert (job.tres["gres/gpu"], job.tres["gres/gpu:a100"]) == (3, 3)


def test_held_by_reason_alone() -> None:
    job = parse_squeue_record(minimal_record(state_reason="JobHeldAdmin", priority=1))
    assert job is not None and job.held


# --------------------------------------------------------------------------
# Strings, parametrized


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cpu=2,mem=8G,node=1,billing=2,gres/gpu=2", {"cpu": 2, "mem": 8192, "node": 1, "billing": 2, "gres/gpu": 2}),
        ("cpu=64,mem=500G,billing=64,gres/gpu=8", {"cpu": 64, "mem": 512000, "billing": 64, "gres/gpu": 8}),
        ("mem=1.50G", {"mem": 1536}),
        ("mem=62.50G", {"mem": 64000}),
        ("mem=512M", {"mem": 512}),
        ("mem=1024K", {"mem": 1}),
        ("mem=2T", {"mem": 2097152}),
        ("mem=1P", {"mem": 1073741824}),
        ("mem=100", {"mem": 100}),
        ("cpu=4,gres/gpu:a100=2", {"cpu": 4, "gres/gpu": 2, "gres/gpu:a100": 2}),
        ("gres/gpu=4,gres/gpu:a100=2,gres/gpu:v100=2", {"gres/gpu": 4, "gres/gpu:a100": 2, "gres/gpu:v100": 2}),
        ("gres/gpu:a100=2,gres/gpu:v100=1", {"gres/gpu": 3, "gres/gpu:a100": 2, "gres/gpu:v100": 1}),
        ("cpu=abc,mem=4G", {"mem": 4096}),
        ("cpu=2,,mem=1G,junk", {"cpu": 2, "mem": 1024}),
        ("license/matlab=2,billing=3", {"license/matlab": 2, "billing": 3}),
        ("", {}),
        (None, {}),
    ],
)
def test_parse_tres_string(text: str | None, expected: dict[str, int]) -> None:
    assert parse_tres_string(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu:a100:4(S:0-1)", {"gres/gpu": 4, "gres/gpu:a100": 4}),
        ("gres:gpu:4", {"gres/gpu": 4}),
        ("gres/gpu:2", {"gres/gpu": 2}),
        ("gres/gpu:a100:2", {"gres/gpu": 2, "gres/gpu:a100": 2}),
        ("gpu:8(IDX:0-7)", {"gres/gpu": 8}),
        ("gpu:2(IDX:0,2)", {"gres/gpu": 2}),
        ("gpu:a100:4(S:0-1),gpu:v100:2(S:2)", {"gres/gpu": 6, "gres/gpu:a100": 4, "gres/gpu:v100": 2}),
        ("gpu:4,gpu:a100:4", {"gres/gpu": 4, "gres/gpu:a100": 4}),
        ("gpu:a100:2,gpu:a100:2", {"gres/gpu": 4, "gres/gpu:a100": 4}),
        ("gres/gpu:a100:2,gres/shard:8", {"gres/gpu": 2, "gres/gpu:a100": 2, "gres/shard": 8}),
        ("gpu:no_consume:2", {"gres/gpu": 2}),
        ("gpu", {"gres/gpu": 1}),
        ("gpu:a100", {"gres/gpu": 1, "gres/gpu:a100": 1}),
        ("gpu:(null):2(IDX:0-1)", {"gres/gpu": 2}),
        ("gres/gpu=2", {"gres/gpu": 2}),
        ("mps:2k", {"gres/mps": 2048}),
        ("", {}),
        ("(null)", {}),
        (None, {}),
    ],
)
def test_parse_gres(text: str | None, expected: dict[str, int]) -> None:
    assert parse_gres(text) == expected


@pytest.mark.parametrize("text", ["gpu:a100:2.5", "gpu:a:b:c", ":"])
def test_parse_gres_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="cannot read GRES"):
        parse_gres(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cpu:2,gres/gpu:1", {"gres/gpu": 1}),
        ("license/iop1:1,gres:gpu:2", {"gres/gpu": 2}),
        ("gpu:2", {"gres/gpu": 2}),
        ("cpu=4", {}),
        ("gres:gpu:a100:1,gres:gpu:v100:1", {"gres/gpu": 2, "gres/gpu:a100": 1, "gres/gpu:v100": 1}),
    ],
)
def test_parse_tres_per(text: str, expected: dict[str, int]) -> None:
    assert parse_tres_per(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0-9", ArrayTasks(10, None, False)),
        ("0-99%4", ArrayTasks(100, 4, False)),
        ("1,3,5-7", ArrayTasks(5, None, False)),
        ("0-15:4", ArrayTasks(4, None, False)),
        ("1-10:3", ArrayTasks(4, None, False)),
        ("7", ArrayTasks(1, None, False)),
        ("0-2,10-12%2", ArrayTasks(6, 2, False)),
        ("[0-3]", ArrayTasks(4, None, False)),
        ("0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32,34,36,38,40,42,4...%5", ArrayTasks(23, 5, True)),
    ],
)
def test_parse_array_task_string(text: str, expected: ArrayTasks) -> None:
    assert parse_array_task_string(text) == expected


@pytest.mark.parametrize("text", ["", "a-b", "5-3", "0-9:0", "0-9%x", "1,,2"])
def test_parse_array_task_string_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="array"):
        parse_array_task_string(text)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("RUNNING", "RUNNING"),
        ("pending", "PENDING"),
        ("COMPLETING", "COMPLETING"),
        ("CONFIGURING", "RUNNING"),
        (["PENDING"], "PENDING"),
        (["RUNNING", "COMPLETING"], "COMPLETING"),
        (["RUNNING", "CONFIGURING"], "RUNNING"),
        (["PENDING", "REQUEUE_HOLD"], "PENDING"),
        (["COMPLETED"], "COMPLETED"),
    ],
)
def test_parse_job_state(value: object, expected: str) -> None:
    assert parse_job_state(value) == expected


@pytest.mark.parametrize("value", [5, [], "", None, [1]])
def test_parse_job_state_rejects(value: object) -> None:
    with pytest.raises(ValueError, match="job_state"):
        parse_job_state(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (5, 5),
        (2.5, 2.5),
        ({"set": True, "infinite": False, "number": 5}, 5),
        ({"set": False, "infinite": False, "number": 0}, None),
        ({"set": False, "infinite": True, "number": 0}, math.inf),
        (None, None),
        ("Infinity", math.inf),
        ("12", 12),
    ],
)
def test_parse_number(value: object, expected: float | None) -> None:
    assert parse_number(value) == expected


@pytest.mark.parametrize("value", [True, "many", [1]])
def test_parse_number_rejects(value: object) -> None:
    with pytest.raises(ValueError, match="expected a number"):
        parse_number(value)


@pytest.mark.parametrize(
    ("state", "flags", "expected"),
    [
        ("idle", ["DRAIN"], "idle+drain"),
        ("mixed", [], "mixed"),
        (["IDLE", "DRAIN"], None, "idle+drain"),
        (["DOWN", "NOT_RESPONDING"], None, "down+not_responding"),
        ("IDLE+DRAIN", None, "idle+drain"),
        (None, None, "unknown"),
    ],
)
def test_parse_node_state(state: object, flags: object, expected: str) -> None:
    assert parse_node_state(state, flags) == expected


# --------------------------------------------------------------------------
# Versions and configuration


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"meta": {"Slurm": {"version": {"major": 22, "minor": 5, "micro": 8}}}}, "22.05.8"),
        ({"meta": {"slurm": {"version": {"major": "24", "minor": "05", "micro": "1"}}}}, "24.05.1"),
        ({"meta": {"slurm": {"release": "25.05.0"}}}, "25.05.0"),
        ({"meta": {}}, None),
        ({}, None),
    ],
)
def test_parse_slurm_version(data: dict[str, Any], expected: str | None) -> None:
    assert parse_slurm_version(data) == expected


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("22.05.8", (22, 5)),
        ("23.02.5", (23, 2)),
        ("24.11.1", (24, 11)),
        (None, None),
        ("x", None),
    ],
)
def test_parse_version_tuple(version: str | None, expected: tuple[int, int] | None) -> None:
    assert parse_version_tuple(version) == expected


def test_priority_weights_multifactor() -> None:
    config = text("24.11", "scontrol-show-config.txt")
    assert parse_priority_weights(config) == {
        "PriorityWeightAge": 1000,
        "PriorityWeightAssoc": 0,
        "PriorityWeightFairShare": 10000,
        "PriorityWeightJobSize": 0,
        "PriorityWeightPartition": 1000,
        "PriorityWeightQOS": 0,
        "PriorityWeightTRES/CPU": 1000,
        "PriorityWeightTRES/Mem": 2000,
        "PriorityWeightTRES/GRES/gpu": 4000,
    }
    assert parse_priority_type(config) == "priority/multifactor"
    assert parse_cluster_name(config) == "drftest"


def test_priority_weights_basic() -> None:
    config = text("23.02", "scontrol-show-config-basic.txt")
    assert parse_priority_weights(config) == {}
    assert parse_priority_type(config) == "priority/basic"


def test_priority_weight_tres_null() -> None:
    config = "PriorityWeightAge       = 5\nPriorityWeightTRES      = (null)\n"
    assert parse_priority_weights(config) == {"PriorityWeightAge": 5}


def test_select_partitions() -> None:
    nodes = parse_sinfo_json(load("24.11", "scontrol-show-nodes.json"))
    jobs = parse_squeue_json(load("24.11", "squeue.json"))
    kept_nodes, kept_jobs = select_partitions(nodes, jobs, ["gpu"])
    assert [n.name for n in kept_nodes] == ["gpu02"]
    assert [j.job_id for j in kept_jobs] == ["103"]
    assert select_partitions(nodes, jobs, None) == (nodes, jobs)


# --------------------------------------------------------------------------
# Snapshot files


def small_snapshot() -> Snapshot:
    jobs = parse_squeue_json(load("22.05", "squeue.json"))
    nodes = parse_sinfo_json(load("22.05", "sinfo.json"))
    return Snapshot(
        "drftest", "2026-11-30T02:00:00Z", tuple(nodes), tuple(jobs), "22.05.8", {"PriorityWeightAge": 1000}
    )


def test_snapshot_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.json"
    snapshot = small_snapshot()
    write_snapshot_file(path, snapshot)
    source = SnapshotFileSource(path)
    assert isinstance(source, ClusterSource)
    again = source.fetch_snapshot()
    assert again.jobs == snapshot.jobs
    assert again.nodes == snapshot.nodes
    assert (again.cluster, again.taken_at, again.slurm_version) == ("drftest", "2026-11-30T02:00:00Z", "22.05.8")
    assert dict(again.priority_weights) == {"PriorityWeightAge": 1000}
    assert [p.name for p in tmp_path.iterdir()] == ["snapshot.json"]  # no temporary file left


def test_snapshot_file_invalid_json_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{\n  "format": "slurm-drf-snapshot/1",\n  "nodes": [,]\n}\n')
    with pytest.raises(SnapshotError, match=r"broken\.json:3:\d+: invalid JSON"):
        SnapshotFileSource(path).fetch_snapshot()


def test_snapshot_file_missing(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match=r"absent\.json: cannot read"):
        SnapshotFileSource(tmp_path / "absent.json").fetch_snapshot()


def test_snapshot_file_contract_error_names_file_and_job(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(
        json.dumps(
            {
                "format": "slurm-drf-snapshot/1",
                "nodes": [],
                "jobs": [{"job_id": "5", "partition": "p", "state": "PENDING"}],
            }
        )
    )
    with pytest.raises(SnapshotError, match=r"bad\.json: job 5: missing key 'account'"):
        SnapshotFileSource(path).fetch_snapshot()


def test_write_snapshot_file_into_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="cannot write"):
        write_snapshot_file(tmp_path / "no" / "such" / "snapshot.json", small_snapshot())


def test_snapshot_file_mode_follows_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o027)
    try:
        write_snapshot_file(tmp_path / "snapshot.json", small_snapshot())
        write_snapshot_file(tmp_path / "snapshot.json", small_snapshot())  # replacing keeps it so
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "snapshot.json").stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["snapshot.json"]


# --------------------------------------------------------------------------
# The command runner (subprocess.run replaced: unit tests start no process)


class FakeRun:
    def __init__(self, outcome: subprocess.CompletedProcess[str] | BaseException) -> None:
        self.outcome = outcome
        self.calls: list[tuple[list[str], dict[str, Any]]] = []

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append((argv, kwargs))
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


def test_run_command_returns_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRun(subprocess.CompletedProcess(["squeue"], 0, stdout="{}", stderr=""))
    monkeypatch.setattr(subprocess, "run", fake)
    assert execute.run_command(["squeue", "--json"], 5.0, env={"PATH": "/bin"}) == "{}"
    argv, kwargs = fake.calls[0]
    assert argv == ["squeue", "--json"]
    assert kwargs["timeout"] == 5.0 and kwargs["env"] == {"PATH": "/bin"}
    assert "shell" not in kwargs


@pytest.mark.parametrize(
    ("outcome", "message"),
    [
        (
            subprocess.CompletedProcess(
                ["squeue"], 1, stdout="", stderr="\nsqueue: error: Unable to contact slurm controller\nmore\n"
            ),
            "squeue --json: exit status 1: squeue: error: Unable to contact slurm controller",
        ),
        (FileNotFoundError(2, "No such file"), "squeue --json: squeue not found"),
        (subprocess.TimeoutExpired(["squeue"], 5.0), "squeue --json: no answer within 5 s"),
        (PermissionError(13, "Permission denied"), "squeue --json: permission denied"),
    ],
)
def test_run_command_errors_are_one_line(monkeypatch: pytest.MonkeyPatch, outcome: Any, message: str) -> None:
    monkeypatch.setattr(subprocess, "run", FakeRun(outcome))
    with pytest.raises(SlurmReadError) as caught:
        execute.run_command(["squeue", "--json"], 5.0)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_run_command_names_slurmctld_when_the_controller_is_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    # 26.05's squeue with slurmctld stopped: exit 1 and this line on stderr (captured).
    stderr = (FIXTURES / "slurm-26.05" / "squeue-slurmctld-down.stderr").read_text()
    monkeypatch.setattr(
        subprocess, "run", FakeRun(subprocess.CompletedProcess(["squeue"], 1, stdout="", stderr=stderr))
    )
    with pytest.raises(SlurmReadError) as caught:
        execute.run_command(["squeue", "--json", "--all"], 5.0)
    assert str(caught.value) == (
        "squeue --json --all: exit status 1: slurm_load_jobs error: Unable to contact slurm controller"
        " (connect failure); is slurmctld running? `scontrol ping` tells"
    )


def test_run_command_adds_no_hint_to_other_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        subprocess, "run", FakeRun(subprocess.CompletedProcess(["squeue"], 1, stdout="", stderr="Invalid user"))
    )
    with pytest.raises(SlurmReadError) as caught:
        execute.run_command(["squeue", "--json"], 5.0)
    assert str(caught.value) == "squeue --json: exit status 1: Invalid user"


def test_run_command_error_class(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        subprocess, "run", FakeRun(subprocess.CompletedProcess(["scontrol"], 1, stdout="", stderr="denied"))
    )
    with pytest.raises(SlurmWriteError, match="denied"):
        execute.run_command(["scontrol", "update"], 5.0, error_class=SlurmWriteError)


# --------------------------------------------------------------------------
# CliSource, replaying canned output (ReFrame's slurm_commands idea)


class Replay:
    """Answers Slurm commands from fixture files."""

    def __init__(self, answers: Mapping[tuple[str, ...], str | BaseException]) -> None:
        self.answers = answers
        self.calls: list[tuple[list[str], float, Mapping[str, str] | None]] = []

    def __call__(self, argv: Sequence[str], timeout: float, *, env: Mapping[str, str] | None = None) -> str:
        self.calls.append((list(argv), timeout, env))
        answer = self.answers.get(tuple(argv))
        if answer is None:
            raise SlurmReadError(f"{' '.join(argv)}: exit status 1: unknown command")
        if isinstance(answer, BaseException):
            raise answer
        return answer


CONFIG = ("scontrol", "show", "config")


def test_build_commands() -> None:
    assert build_squeue_argv() == ["squeue", "--json", "--all"]
    assert "--array" not in build_squeue_argv()
    assert build_node_commands("22.05.8") == [build_sinfo_argv()]
    assert build_node_commands("23.02.5") == [build_scontrol_nodes_argv(), build_sinfo_argv()]
    assert build_node_commands(None) == [build_scontrol_nodes_argv(), build_sinfo_argv()]
    env = build_command_env({"PATH": "/usr/bin", "SQUEUE_STATES": "RUNNING", "SLURM_CONF": "x"})
    assert env == {"PATH": "/usr/bin", "SLURM_CONF": "x", "SLURM_BITSTR_LEN": "0"}


def test_cli_source_2205() -> None:
    replay = Replay(
        {
            tuple(build_squeue_argv()): text("22.05", "squeue.json"),
            tuple(build_sinfo_argv()): text("22.05", "sinfo.json"),
            CONFIG: text("23.02", "scontrol-show-config-basic.txt"),
        }
    )
    source = CliSource(timeout=7.0, runner=replay, environ={"SQUEUE_PARTITION": "x"}, clock=lambda: 1796004401.0)
    assert isinstance(source, ClusterSource)
    snapshot = source.fetch_snapshot()
    assert [call[0] for call in replay.calls] == [
        build_squeue_argv(),
        build_sinfo_argv(),
        list(CONFIG),
        build_assoc_mgr_argv(),
    ]
    assert all(call[1] == 7.0 and call[2] == {"SLURM_BITSTR_LEN": "0"} for call in replay.calls)
    assert (snapshot.cluster, snapshot.taken_at, snapshot.slurm_version) == (
        "drftest",
        "2026-11-30T02:06:41Z",
        "22.05.8",
    )
    assert len(snapshot.jobs) == 20 and [n.name for n in snapshot.nodes] == ["vm"]
    assert dict(snapshot.priority_weights) == {}
    assert source.priority_type == "priority/basic"


def test_cli_source_2411_with_partitions() -> None:
    replay = Replay(
        {
            tuple(build_squeue_argv()): text("24.11", "squeue.json"),
            tuple(build_scontrol_nodes_argv()): text("24.11", "scontrol-show-nodes.json"),
            CONFIG: text("24.11", "scontrol-show-config.txt"),
        }
    )
    snapshot = CliSource(partitions=["gpu"], runner=replay, environ={}, clock=lambda: 0.0).fetch_snapshot()
    assert [call[0][0:2] for call in replay.calls] == [
        ["squeue", "--json"],
        ["scontrol", "--all"],
        ["scontrol", "show"],
        ["scontrol", "show"],
    ]
    assert [n.name for n in snapshot.nodes] == ["gpu02"]
    assert [j.job_id for j in snapshot.jobs] == ["103"]
    assert snapshot.priority_weights["PriorityWeightFairShare"] == 10000
    assert snapshot.taken_at == "1970-01-01T00:00:00Z"


def test_cli_source_falls_back_to_sinfo_and_survives_config_failure(caplog: pytest.LogCaptureFixture) -> None:
    replay = Replay(
        {
            tuple(build_squeue_argv()): text("23.02", "squeue.json"),
            tuple(build_scontrol_nodes_argv()): SlurmReadError("scontrol: exit status 1: invalid option"),
            tuple(build_sinfo_argv()): text("23.02", "sinfo.json"),
            CONFIG: SlurmReadError("scontrol show config: no answer within 30 s"),
        }
    )
    with caplog.at_level(logging.WARNING):
        snapshot = CliSource(runner=replay, environ={}).fetch_snapshot()
    assert [n.name for n in snapshot.nodes] == ["vm", "gpu02", "cpu03"]
    assert snapshot.cluster == "drftest"  # from the jobs' cluster field
    assert dict(snapshot.priority_weights) == {}
    assert "priority weights unknown" in caplog.text


def test_cli_source_invalid_json_is_a_read_error() -> None:
    replay = Replay({tuple(build_squeue_argv()): '{"jobs": [\n  {,}\n'})
    with pytest.raises(SlurmReadError, match=r"squeue --json --all: invalid JSON at line 2"):
        CliSource(runner=replay, environ={}).fetch_snapshot()


def complete_2205() -> dict[tuple[str, ...], str | BaseException]:
    return {
        tuple(build_squeue_argv()): text("22.05", "squeue.json"),
        tuple(build_sinfo_argv()): text("22.05", "sinfo.json"),
        CONFIG: text("23.02", "scontrol-show-config-basic.txt"),
    }


@pytest.mark.parametrize("argv", [build_squeue_argv(), build_sinfo_argv()], ids=["squeue", "sinfo"])
@pytest.mark.parametrize("kept", [0.0, 0.01, 0.5, 0.999])
def test_a_truncated_answer_is_one_line_naming_the_command_and_what_arrived(argv: list[str], kept: float) -> None:
    answers = complete_2205()
    whole = answers[tuple(argv)]
    assert isinstance(whole, str)
    cut = whole[: int(len(whole) * kept)]
    answers[tuple(argv)] = cut
    with pytest.raises(SlurmReadError) as raised:
        CliSource(runner=Replay(answers), environ={}).fetch_snapshot()
    message = str(raised.value)
    assert "\n" not in message
    if not cut:
        assert message == f"{' '.join(argv)}: empty answer (exit status 0 but no JSON on standard output)"
    else:
        assert re.fullmatch(
            rf"{' '.join(argv)}: answer cut short: its JSON stops at line \d+ column \d+ "
            rf"after {len(cut)} characters, incomplete",
            message,
        ), message


def test_json_broken_before_its_end_is_not_called_cut_short() -> None:
    answers = complete_2205()
    answers[tuple(build_squeue_argv())] = '{"jobs": [,]}\n'
    with pytest.raises(SlurmReadError, match=r"^squeue --json --all: invalid JSON at line 1 column 11: "):
        CliSource(runner=Replay(answers), environ={}).fetch_snapshot()


# squeue's answer is read one job record at a time (JsonAnswer); what the
# whole answer says around the records must still be read, and anything
# that is not one JSON object with one jobs list is one line.
ODD_ANSWERS = [
    ('{"jobs": [], "jobs": []}', r"the member 'jobs' appears twice in the answer"),
    ('{"meta": {}, "meta": {}, "jobs": []}', r"the member 'meta' appears twice"),
    ('{"jobs": [{"job_id": NaN}]}', r"invalid JSON at line 1 column 11: NaN is not a JSON value"),
    ('{"jobs": []} {"jobs": []}', r"invalid JSON at line 1 column 14: more after the answer's object"),
    ('{"jobs": []}\n ]', r"invalid JSON at line 2 column 2: more after the answer's object"),
    ('{"jobs": [{}] "meta": {}}', r"invalid JSON at line 1 column 15: expected '}'"),
    ('{"jobs": [{} {}]}', r"invalid JSON at line 1 column 14: expected '\]'"),
    ("[]", r"expected a JSON object, got list"),
    ('{"jobs": {}}', r"squeue --json: no 'jobs' list in the output"),
    ("{}", r"squeue --json: no 'jobs' list in the output"),
    ('{"jobs": [' + "[" * 100_000 + "]" * 100_000 + "]}", r"invalid JSON at line 1 column 11: nested too deep"),
    ('{"jobs": [], "errors": [{"error": "Unspecified error", "description": "Failed"}]}', r"reported an error"),
]


@pytest.mark.parametrize(("answer", "expected"), ODD_ANSWERS, ids=[a[:30] for a, _ in ODD_ANSWERS])
def test_an_answer_that_is_not_one_object_with_one_jobs_list_is_one_line(answer: str, expected: str) -> None:
    answers = complete_2205()
    answers[tuple(build_squeue_argv())] = answer
    with pytest.raises(SlurmReadError) as raised:
        CliSource(runner=Replay(answers), environ={}).fetch_snapshot()
    message = str(raised.value)
    assert "\n" not in message and re.search(expected, message), message


@pytest.mark.parametrize("release", ["22.05", "23.11", "24.11"])
def test_the_answer_around_the_records_is_read_before_or_after_them(release: str) -> None:
    """22.05 prints meta and errors before the jobs, 23.11 and later after them."""
    whole = json.loads(text(release, "squeue.json"))
    keys = list(whole)
    answers = complete_2205()
    answers[tuple(build_squeue_argv())] = text(release, "squeue.json")
    snapshot = CliSource(runner=Replay(answers), environ={}).fetch_snapshot()
    assert snapshot.slurm_version == parse_slurm_version(whole)
    assert snapshot.slurm_version is not None
    assert len(snapshot.jobs) == len(parse_squeue_json(whole))
    assert (keys.index("meta") < keys.index("jobs")) == (release == "22.05")


def test_numbers_past_64_bits_and_unicode_in_a_record_are_read_as_the_whole_parse_reads_them() -> None:
    whole = json.loads(text("22.05", "squeue.json"))
    whole["jobs"][0]["name"] = "r\u00e9sum\u00e9 \ud83d\ude80"
    whole["jobs"][0]["time_limit"] = 2**70
    answers = complete_2205()
    answers[tuple(build_squeue_argv())] = json.dumps(whole, indent=2)
    snapshot = CliSource(runner=Replay(answers), environ={}).fetch_snapshot()
    assert list(snapshot.jobs) == parse_squeue_json(whole)


class RecordingWriter(FakeWriter):
    """test_service's writer, which must not be asked to reset."""

    def run_lines(self, lines: Sequence[str]) -> tuple[dict[str, str], list[str]]:
        raise AssertionError(f"no reset expected: {lines}")


def test_a_cycle_on_a_truncated_answer_writes_and_saves_nothing_and_the_next_goes_on(tmp_path: Path) -> None:
    answers = complete_2205()
    config = Config(resources=("cpu", "mem"), state_dir=str(tmp_path), max_writes_per_cycle=1)
    store, writer = StateStore(tmp_path), RecordingWriter()
    source = CliSource(runner=Replay(answers), environ={})
    first = run_cycle(source, writer, config, store)
    assert len(writer.writes) == 1 and first.deferred > 0  # one write per cycle: the next has some to do
    saved = (tmp_path / "state.json").read_bytes()

    whole = answers[tuple(build_squeue_argv())]
    assert isinstance(whole, str)
    answers[tuple(build_squeue_argv())] = whole[: len(whole) // 3]
    with pytest.raises(SlurmReadError, match=r"^squeue --json --all: answer cut short"):
        run_cycle(source, writer, config, store)
    assert len(writer.writes) == 1
    assert (tmp_path / "state.json").read_bytes() == saved

    answers[tuple(build_squeue_argv())] = whole
    again = run_cycle(source, writer, config, store)
    assert len(writer.writes) == 2 and again.result is not None and again.result.count == 1


@pytest.mark.parametrize(("limit", "warned"), [(10, True), (20, True), (21, False), (None, False)])
def test_a_queue_at_max_job_count_is_one_warning_and_the_snapshot_is_whole(
    limit: int | None, warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = parse_squeue_json(load("22.05", "squeue.json"))
    tasks = sum(max(job.array_tasks, 1) for job in jobs)
    assert tasks == 20  # the fixture's records: no pending array
    nodes = parse_sinfo_json(load("22.05", "sinfo.json"))
    config = "" if limit is None else f"MaxJobCount             = {limit}\n"
    with caplog.at_level(logging.WARNING):
        snapshot = build_snapshot(SnapshotHeader("c", "2026-01-01T00:00:00Z", "22.05.8"), nodes, jobs, None, config)
    assert len(snapshot.jobs) == len(jobs)
    lines = [r.getMessage() for r in caplog.records if "MaxJobCount" in r.getMessage()]
    expected = (
        f"slurmctld holds 20 jobs, at or past its MaxJobCount {limit}: sbatch refuses new jobs until some "
        "end (raise MaxJobCount in slurm.conf); the cycle goes on with the jobs read"
    )
    assert lines == ([expected] if warned else [])


def test_cli_source_nodes_unreadable() -> None:
    replay = Replay({tuple(build_squeue_argv()): text("24.11", "squeue.json")})
    with pytest.raises(SlurmReadError, match="sinfo --json --all"):
        CliSource(runner=replay, environ={}).fetch_snapshot()


@pytest.mark.parametrize(
    ("raw", "nice"), [(None, 0), (100, 100), (4294967291, -5), (2147483651, -2147483645), (4293967296, -1000000)]
)
def test_negative_nice_wrapped_as_unsigned_by_22_05(raw: int | None, nice: int) -> None:
    """Measured on Slurm 22.05.8: `scontrol update nice=-5` shows as 4294967291 in squeue --json."""
    data = json.loads((FIXTURES / "slurm-22.05" / "squeue.json").read_text())
    record = dict(data["jobs"][2])
    record["nice"] = raw
    job = parse_squeue_record(record)
    assert job is not None and job.nice == nice
