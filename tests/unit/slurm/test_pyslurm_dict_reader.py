"""DictJobReader: jobs straight from pyslurm's dicts are what the squeue-shaped record and its parser make.

The reader makes a plain job itself and sends every other one (and the
first of each shape of request) the whole way, through
`build_job_record_from_dict` and `parse_squeue_record`. Each test compares
the two on the same dicts: the jobs, in order, and the warnings, one per
odd job as the parser gives them, however many jobs share a shape.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_drf.errors import SlurmReadError
from slurm_drf.model.types import Job, JobRows
from slurm_drf.slurm.parse.jobs import parse_het_leaders, parse_squeue_json
from slurm_drf.slurm.parse.snapshot import SnapshotHeader, build_snapshot
from slurm_drf.slurm.pyslurm_source import DictJobReader, build_job_record_from_dict

NICE_OFFSET = 0x80000000
NO_VAL = 0xFFFFFFFE
NO_VAL64 = 0xFFFFFFFFFFFFFFFE


def user_name(uid: int) -> str:
    return {0: "root", 1000: "alice", 1001: "bob"}.get(uid, str(uid))


HEADER = SnapshotHeader("drftest", "2026-12-03T00:00:00Z", "22.05.8")
CONFIG = "MaxJobCount             = 10\n"  # past it: the warning counts the jobs read


def whole_way(loaded: Sequence[Any]) -> tuple[Sequence[Job], frozenset[str]]:
    """What the source made before the reader: every dict a record, then the parser."""
    records = []
    for job in loaded:
        try:
            records.append(build_job_record_from_dict(job, user_name))
        except Exception as error:
            logging.getLogger("slurm_drf.slurm.pyslurm_source").warning("pyslurm job skipped: %s", error)
    return parse_squeue_json({"jobs": records}), parse_het_leaders(records)


def read(loaded: Sequence[Any]) -> tuple[Sequence[Job], frozenset[str]]:
    reader = DictJobReader(user_name)
    return reader.read(loaded), parse_het_leaders(reader.het_records)


def snapshot_of(read_jobs: Callable[[], tuple[Sequence[Job], frozenset[str]]]) -> tuple[object, ...]:
    """The jobs read, the snapshot the source builds of them and its table, column by column;
    or what the read and build raised."""
    try:
        jobs, leaders = read_jobs()
        snapshot = build_snapshot(HEADER, [], jobs, None, CONFIG, leaders)
    except Exception as error:
        return ("raised", type(error), str(error))
    table = snapshot.table
    columns = {
        f.name: list(getattr(table, f.name))
        for f in dataclasses.fields(table)
        if f.name not in ("tres", "_plain") and f.init
    }
    tres = {name: column.tolist() for name, column in table.tres.items()}
    return tuple(jobs), leaders, snapshot, columns, tres


def both_ways(loaded: Sequence[Any], caplog: pytest.LogCaptureFixture) -> None:
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        expected = snapshot_of(lambda: whole_way(loaded))
        said_then = Counter(r.getMessage() for r in caplog.records)
        caplog.clear()
        got = snapshot_of(lambda: read(loaded))
        said_now = Counter(r.getMessage() for r in caplog.records)
    assert got == expected
    assert said_now == said_then


def job(number: int, **fields: Any) -> dict[str, Any]:
    """A dict-API job as pyslurm 22.5's get_job_ptr() gives it: a pending 2-CPU, 1-GPU request."""
    record: dict[str, Any] = {
        "job_id": number,
        "job_state": "PENDING",
        "state_reason": "Priority",
        "account": "physics",
        "partition": "gpu",
        "user_id": 1000,
        "priority": 4000,
        "nice": 0,
        "submit_time": 1_700_000_000 + number,
        "array_job_id": 0,
        "array_task_id": NO_VAL,
        "array_task_str": None,
        "het_job_id": 0,
        "het_job_offset": 0,
        "tres_req_str": "cpu=2,mem=8G,node=1,billing=2,gres/gpu=1",
        "tres_alloc_str": None,
        "tres_per_job": None,
        "tres_per_node": "gres:gpu:1",
        "tres_per_task": None,
        "tres_per_socket": None,
        "mem_per_tres": None,
        "min_memory_node": 8192,
        "min_memory_cpu": None,
        "num_cpus": 2,
        "num_nodes": 1,
        "num_tasks": 1,
        "sockets_per_node": None,
    }
    record.update(fields)
    return record


def test_plain_jobs_of_a_few_shapes(caplog: pytest.LogCaptureFixture) -> None:
    loaded = [
        job(
            100 + i,
            account=["physics", "chem", " bio "][i % 3],
            user_id=[0, 1000, 1001, 4242][i % 4],
            job_state=["PENDING", "RUNNING", "COMPLETED", "COMPLETING", "SUSPENDED"][i % 5],
            num_cpus=1 + i % 4,
            tres_req_str=f"cpu={1 + i % 4},mem=4G,node=1",
            tres_alloc_str=f"cpu={1 + i % 4},mem=4G,node=1" if i % 2 else None,
            priority=[0, 1, 4000, None][i % 4],
            nice=[NICE_OFFSET - 5 - NICE_OFFSET, 7, NO_VAL - NICE_OFFSET, 0][i % 4],
            state_reason=["Priority", "JobHeldUser", "Resources", None][i % 4],
            partition=["gpu", "gpu,cpu", None][i % 3],
        )
        for i in range(200)
    ]
    both_ways(loaded, caplog)
    reader = DictJobReader(user_name)
    jobs = reader.read(loaded)
    assert isinstance(jobs, JobRows)  # straight into their table
    assert len(jobs) == 160  # the completed ones are left out
    # Each shape (state, CPUs, allocation) went the whole way once, or twice when its first was completed.
    assert reader.whole <= 2 * 5 * 4 * 2 < len(loaded)


def test_arrays_and_het_jobs_go_the_whole_way(caplog: pytest.LogCaptureFixture) -> None:
    loaded = [
        job(10, array_job_id=10, array_task_str="0-99%4"),
        job(11, array_job_id=10, array_task_id=3, job_state="RUNNING", array_task_str=None),
        job(20, het_job_id=20, het_job_offset=0),
        job(21, het_job_id=20, het_job_offset=1, tres_req_str="cpu=8,mem=1G,node=1"),
        job(22),
        job(23, array_task_str="   "),
    ]
    both_ways(loaded, caplog)
    jobs, leaders = read(loaded)
    assert leaders == frozenset({"20"})
    assert isinstance(jobs, list)  # a het job's components summed: the parser's merge
    assert [j.array_tasks for j in jobs if j.job_id == "10"] == [100]


@pytest.mark.parametrize(
    "odd",
    [
        {"job_id": None},
        {"job_id": -1},
        {"job_id": "12"},
        {"job_id": True},
        {"job_state": None},
        {"job_state": ""},
        {"job_state": ["PENDING"]},
        {"account": ""},
        {"account": "  "},
        {"account": None},
        {"user_id": None},
        {"user_id": -3},
        {"submit_time": None},
        {"submit_time": 2**70},
        {"submit_time": 1.5},
        {"priority": "7"},
        {"priority": True},
        {"priority": 2**40},
        {"nice": "3"},
        {"nice": 1.0},
        {"nice": True},
        {"num_cpus": -2},
        {"num_cpus": True},
        {"num_nodes": 0},
        {"num_nodes": None},
        {"tres_req_str": "cpu=-2,node=1"},
        {"tres_req_str": "cpu=" + "9" * 400},
        {"tres_per_node": "gres:gpu:x"},
        {"tres_per_socket": "gres:gpu:1"},
        {"min_memory_node": NO_VAL64},
        {"mem_per_tres": ["gres:gpu:1"]},
        {"state_reason": 5},
        {"partition": 3},
    ],
    ids=repr,
)
def test_an_odd_field_reads_as_the_parser_reads_it(odd: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    # Plain jobs of the same shape before and after, so a shape kept from one never hides the odd one.
    loaded = [job(1), job(2, **odd), job(3), job(4, **odd), job(5, **{"job_state": "RUNNING", **odd})]
    both_ways(loaded, caplog)


@pytest.mark.parametrize("missing", ["nice", "partition", "num_nodes", "het_job_id", "state_reason", "job_id"])
def test_a_missing_field_reads_as_the_parser_reads_it(missing: str, caplog: pytest.LogCaptureFixture) -> None:
    lacking = job(2)
    del lacking[missing]
    both_ways([job(1), lacking, job(3)], caplog)


def test_not_a_dict_is_skipped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    both_ways([job(1), "nonsense", None, job(2)], caplog)
    assert "pyslurm job skipped" in caplog.text


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=5),
    st.sampled_from([NO_VAL, NO_VAL64, 2**31 + 4, 2**53 + 1, 2**64]),
    st.sampled_from(["", " ", "x", "1", "gres:gpu:2", "cpu=4,mem=2G,node=2", "PENDING", "RUNNING"]),
    st.floats(allow_nan=True),
)
FIELDS = st.sampled_from(sorted(job(0)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.dictionaries(FIELDS, VALUES, max_size=3), min_size=1, max_size=6), repeat=st.integers(1, 3))
def test_any_mix_of_fields_reads_as_the_parser_reads_it(
    changes: list[dict[str, Any]], repeat: int, caplog: pytest.LogCaptureFixture
) -> None:
    loaded = [job(100 + n, **change) for n, change in enumerate(changes * repeat)]
    both_ways(loaded, caplog)


@pytest.mark.parametrize("field", ["priority", "nice"])
def test_a_number_past_64_bits_is_one_line_naming_the_job(field: str) -> None:
    jobs, leaders = read([job(1), job(2, **{field: 2**64 + 5}), job(3)])
    with pytest.raises(SlurmReadError, match=rf"^inconsistent data from Slurm: job 2: {field} \d+ is past 64 bits$"):
        build_snapshot(HEADER, [], jobs, None, "", leaders)
