"""JobTableBuilder: jobs read one at a time into columns give the Jobs and the table
`JobTable.from_jobs` gives of the same jobs; a list of Jobs where the columns cannot hold them."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from types import MappingProxyType

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_drf.model.types import PENDING, RUNNING, Job, JobRows, JobTable, JobTableBuilder

CPU = MappingProxyType({"cpu": 2, "mem": 100})
GPU = MappingProxyType({"cpu": 1, "gres/gpu": 1, "node": 1})

# Numbers on both sides of what an int64 column holds.
numbers = st.one_of(
    st.integers(-5, 5),
    st.integers(2**31, 2**32),
    st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64]),
)
jobs = st.builds(
    Job,
    job_id=st.sampled_from(["1", "2", "3", "10_4", "77+1", "0012"]),
    account=st.sampled_from(["physics", "chem", "bio"]),
    user=st.sampled_from(["ann", "bob", "42"]),
    partition=st.sampled_from(["cpu", "gpu", "cpu,gpu"]),
    state=st.sampled_from([PENDING, RUNNING, "SUSPENDED"]),
    priority=numbers,
    nice=numbers,
    held=st.booleans(),
    submit_time=st.floats(allow_nan=False, allow_infinity=False),
    array_tasks=numbers,
    tres=st.sampled_from([CPU, GPU, MappingProxyType({})]),
    site_factor=st.one_of(st.none(), st.integers(1, 10)),
)


def built(given_jobs: Sequence[Job]) -> Sequence[Job]:
    builder = JobTableBuilder()
    for job in given_jobs:
        builder.add_job(job)
    return builder.jobs()


def columns(table: JobTable) -> dict[str, object]:
    out: dict[str, object] = {
        f.name: list(getattr(table, f.name)) for f in dataclasses.fields(table) if f.init and f.name != "tres"
    }
    out["tres"] = {name: column.tolist() for name, column in table.tres.items()}
    return out


def fits(job: Job) -> bool:
    return all(-(2**63) <= n < 2**63 for n in (job.priority, job.nice, job.array_tasks))


@settings(max_examples=300, deadline=None)
@given(st.lists(jobs, max_size=12))
def test_the_same_jobs_and_table_as_from_jobs(given_jobs: list[Job]) -> None:
    out = built(given_jobs)
    assert list(out) == given_jobs
    pending = [j.job_id for j in given_jobs if j.pending]
    if all(map(fits, given_jobs)) and len(set(pending)) == len(pending):
        assert isinstance(out, JobRows)
        assert columns(out.table) == columns(JobTable.from_jobs(given_jobs))
        assert [out.row(i) for i in range(len(out))] == given_jobs
    else:
        assert not isinstance(out, JobRows)  # build_snapshot names the number; het components are merged


def test_a_plain_queue_is_its_table_and_keeps_no_job() -> None:
    given_jobs = [Job(str(n), "physics", "ann", "cpu", PENDING, 10 + n, 0, False, 1e9 + n, 1, CPU) for n in range(5)]
    out = built(given_jobs)
    assert isinstance(out, JobRows)
    assert out.table.job_id == [j.job_id for j in given_jobs]
    assert out.table.priority.dtype == np.int64
    assert out.table.priority.tolist() == [10, 11, 12, 13, 14]
    assert out.table.submit_time.tolist() == [1e9 + n for n in range(5)]
    assert out.table.tres["cpu"].tolist() == [2] * 5


def test_a_number_past_64_bits_turns_the_rest_into_jobs() -> None:
    first = Job("1", "physics", "ann", "cpu", PENDING, 1, 0, False, 0.0, 1, CPU)
    big = dataclasses.replace(first, job_id="2", priority=2**64)
    last = dataclasses.replace(first, job_id="3")
    out = built([first, big, last])
    assert out == [first, big, last]
    assert not isinstance(out, JobRows)


def test_pending_jobs_sharing_an_id_come_as_a_list_to_merge() -> None:
    leader = Job("5", "physics", "ann", "cpu", PENDING, 1, 0, False, 0.0, 1, CPU)
    component = dataclasses.replace(leader, tres=GPU)
    out = built([leader, component])
    assert out == [leader, component]
    assert not isinstance(out, JobRows)


def test_no_jobs() -> None:
    out = built([])
    assert isinstance(out, JobRows)
    assert len(out) == 0
    assert len(out.table) == 0
