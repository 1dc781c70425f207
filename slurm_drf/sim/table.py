"""The workload's jobs as one run numbers them: per job, per shape, per record.

Sits between `workload` and everything that plays it: `engine` builds one
`WorkloadTable` per run (`build_workload_table`) and keeps it for the whole run;
the policies read it through `view.SimulatorView`. Nothing in it changes
while the run goes on, so it holds no state: what is pending, running or
done stays in the engine. Jobs, shapes, records and accounts are indexes
into these lists, which keeps the hot paths on plain lists and arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from slurm_drf.model.types import IntArray
from slurm_drf.sim.workload import Workload

# TRES in the simulator's order: cpu, mem (MiB), gres/gpu.
Vector = tuple[int, int, int]


@dataclass(frozen=True, slots=True, eq=False)
class WorkloadTable:
    """Fixed facts of one run's jobs, by index.

    A *shape* is a distinct (per-node demand, node count): a shape that does
    not fit is not retried within a scheduler pass. A *record* is what Slurm
    shows as one pending line: an array's tasks form one record, any other
    job a record of its own; record numbers follow submit order, as Slurm's
    job ids do. The `_array` fields are the lists before them as numpy
    arrays, for the vectorised paths.
    """

    accounts: tuple[str, ...]
    weights: list[float]  # per account, the workload's weight as a float
    job_count: int
    job_account: list[int]  # index into accounts
    job_user: list[str]
    job_submit: list[float]
    job_duration: list[float]
    job_limit: list[float]
    job_nodes_wanted: list[int]
    job_shape: list[int]
    job_shape_array: IntArray
    job_demand: list[Vector]  # per node
    job_record: list[int]
    job_task: list[int]  # place in its record: the array task, 0 for a plain job
    job_label: list[str]  # Slurm's job id: `N`, or `N_T` for task T of array N
    shape_demand: list[Vector]  # per node
    shape_total: list[Vector]  # the whole job: what the DRF engine counts
    record_tasks: list[list[int]]  # its jobs, in task order
    record_account: list[int]
    record_account_array: IntArray
    record_submit: list[float]
    record_number: list[int]  # Slurm's job number, from 1
    record_label: list[str]
    record_total: list[Vector]  # the first task's whole TRES, as squeue shows a record
    record_total_array: IntArray  # (R, 3)
    record_single: list[int]  # the job of a one-task record, -1 for an array's record
    record_single_array: IntArray


def build_workload_table(workload: Workload) -> WorkloadTable:
    """Number the jobs of a (validated) workload: shapes and records in submit order."""
    accounts = workload.accounts
    account_index = {a: i for i, a in enumerate(accounts)}
    fractions: list[Fraction] = [workload.weight(a) for a in accounts]
    jobs = workload.jobs
    job_account = [account_index[j.account] for j in jobs]

    shape_index: dict[tuple[int, int, int, int], int] = {}
    job_shape: list[int] = []
    shape_demand: list[Vector] = []
    shape_total: list[Vector] = []
    for job in jobs:
        key = (job.cpu, job.mem, job.gpu, job.nodes)
        shape = shape_index.get(key)
        if shape is None:
            shape = shape_index[key] = len(shape_demand)
            shape_demand.append((job.cpu, job.mem, job.gpu))
            shape_total.append(job.total())
        job_shape.append(shape)

    record_of_array: dict[str, int] = {}
    job_record: list[int] = []
    job_task: list[int] = []
    record_tasks: list[list[int]] = []
    record_account: list[int] = []
    record_submit: list[float] = []
    for index, job in enumerate(jobs):
        record = record_of_array.get(job.array_id) if job.array_id is not None else None
        if record is None:
            record = len(record_tasks)
            record_tasks.append([])
            record_account.append(job_account[index])
            record_submit.append(job.submit)
            if job.array_id is not None:
                record_of_array[job.array_id] = record
        job_task.append(len(record_tasks[record]))
        record_tasks[record].append(index)
        job_record.append(record)
    record_number = [r + 1 for r in range(len(record_tasks))]
    record_label = [str(n) for n in record_number]
    record_total = [shape_total[job_shape[tasks[0]]] for tasks in record_tasks]
    record_single = [tasks[0] if len(tasks) == 1 else -1 for tasks in record_tasks]
    job_label = [
        record_label[record] if job.array_id is None else f"{record_label[record]}_{task}"
        for job, record, task in zip(jobs, job_record, job_task, strict=True)
    ]

    return WorkloadTable(
        accounts=accounts,
        weights=[float(w) for w in fractions],
        job_count=len(jobs),
        job_account=job_account,
        job_user=[j.user for j in jobs],
        job_submit=[j.submit for j in jobs],
        job_duration=[j.duration for j in jobs],
        job_limit=[j.limit for j in jobs],
        job_nodes_wanted=[j.nodes for j in jobs],
        job_shape=job_shape,
        job_shape_array=np.array(job_shape, dtype=np.int64),
        job_demand=[shape_demand[s] for s in job_shape],
        job_record=job_record,
        job_task=job_task,
        job_label=job_label,
        shape_demand=shape_demand,
        shape_total=shape_total,
        record_tasks=record_tasks,
        record_account=record_account,
        record_account_array=np.array(record_account, dtype=np.int64),
        record_submit=record_submit,
        record_number=record_number,
        record_label=record_label,
        record_total=record_total,
        record_total_array=np.array(record_total, dtype=np.int64).reshape(-1, 3),
        record_single=record_single,
        record_single_array=np.array(record_single, dtype=np.int64),
    )
