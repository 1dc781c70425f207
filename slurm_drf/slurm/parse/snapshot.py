"""The Snapshot every source hands the daemon, built from what the readers of `slurm.parse` read.

The last step of reading Slurm: the partitions asked for, what `scontrol
show config` adds, and the consistency checks a snapshot file gets too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from slurm_drf.errors import SlurmReadError, SnapshotError
from slurm_drf.model.codec import check_job_table, check_nodes
from slurm_drf.model.types import INT64, PENDING, Association, Job, JobRows, JobTable, Node, Snapshot, freeze_tres
from slurm_drf.slurm.parse.scontrol import (
    _config_value,
    parse_priority_type,
    parse_priority_weights,
    parse_scheduler_parameters,
    parse_scontrol_config,
)

logger = logging.getLogger(__name__)


def select_partitions(
    nodes: Sequence[Node], jobs: Sequence[Job], partitions: Iterable[str] | None
) -> tuple[list[Node], list[Job]]:
    """Nodes and jobs in any of `partitions` (all of them when None).

    A job pending in several partitions stays when one of them is wanted.
    """
    if partitions is None:
        return list(nodes), list(jobs)
    wanted = set(partitions)
    return (
        [n for n in nodes if wanted.intersection(n.partitions)],
        [j for j in jobs if wanted.intersection(j.partitions)],
    )


@dataclass(frozen=True, slots=True)
class SnapshotHeader:
    """Which cluster was read, when (`taken_at`, ISO 8601) and which Slurm it runs (None: not said)."""

    cluster: str
    taken_at: str
    version: str | None


def build_snapshot(
    header: SnapshotHeader,
    nodes: Sequence[Node],
    jobs: Sequence[Job],
    partitions: Sequence[str] | None,
    config_text: str,
    het_leaders: Iterable[str] = (),
    associations: tuple[Association, ...] = (),
) -> Snapshot:
    """The Snapshot every source hands the daemon, from what it read.

    `config_text` is `scontrol show config`: priority weights and type, and
    the SchedulerParameters that set how deep Slurm looks into the queue.
    `het_leaders` (`parse_het_leaders`) are kept for the pending jobs the
    snapshot holds. `associations` is the checked tree
    (`check_associations`), or () when it is unknown.
    """
    warn_max_job_count(jobs, config_text)
    if isinstance(jobs, JobRows) and partitions is None:
        # Read straight into a table (the pyslurm source): kept as it is.
        table: JobTable = jobs.table
        pending_code = table.states.index(PENDING) if PENDING in table.states else -1
        pending = {table.job_id[i] for i in np.flatnonzero(table.state == pending_code).tolist()}
        nodes = list(nodes)
    else:
        nodes, selected = select_partitions(list(nodes), list(jobs), partitions)
        table = _table_of(selected)
        jobs = tuple(selected)
        pending = {job.job_id for job in jobs if job.pending}
    snapshot = Snapshot.from_table(
        table,
        jobs,
        cluster=header.cluster,
        taken_at=header.taken_at,
        nodes=tuple(nodes),
        slurm_version=header.version,
        priority_weights=freeze_tres(parse_priority_weights(config_text)),
        priority_type=parse_priority_type(config_text),
        het_leaders=frozenset(het_leaders) & pending,
        scheduler_parameters=freeze_tres(parse_scheduler_parameters(config_text)),
        associations=associations,
        controller_started=parse_scontrol_config(config_text).get("BOOT_TIME") or None,
    )
    check_snapshot(snapshot)
    return snapshot


def _table_of(jobs: Sequence[Job]) -> JobTable:
    """The jobs' table; SlurmReadError naming the job when a number of one is past 64 bits."""
    try:
        return JobTable.from_jobs(jobs)
    except OverflowError as error:
        for job in jobs:
            for name in ("priority", "nice", "array_tasks"):
                if getattr(job, name) not in INT64:
                    raise SlurmReadError(
                        f"inconsistent data from Slurm: job {job.job_id}: {name} {getattr(job, name)} is past 64 bits"
                    ) from error
        raise


def check_snapshot(snapshot: Snapshot) -> None:
    """The consistency checks of a snapshot file (`model.codec`), for what Slurm said.

    A node listed twice would double the pool's capacity, a job listed
    twice give two plan rows for one job: the same refusal as for a file,
    as a SlurmReadError, since what Slurm said is no input of the user's
    (the daemon skips the cycle and backs off, `once` exits 1).
    """
    try:
        check_nodes(snapshot.nodes)
        check_job_table(snapshot.table)  # the table is kept: the plan uses it
    except SnapshotError as error:
        raise SlurmReadError(f"inconsistent data from Slurm: {error}") from error


def warn_max_job_count(jobs: Sequence[Job], config_text: str) -> int | None:
    """One warning line when slurmctld holds at least its MaxJobCount jobs; that limit, if known.

    slurmctld then refuses every new job (sbatch: "Slurm temporarily unable
    to accept job"), but answers squeue and job updates as before: a
    lowered MaxJobCount even keeps every job it already holds. The read is
    whole, so the cycle goes on and writes; what has to change is Slurm's.
    Jobs are counted as slurmctld counts them: a pending array is its tasks.
    """
    text = _config_value(config_text, "MaxJobCount")
    if text is None or not text.isdigit():
        return None
    limit = int(text)
    if isinstance(jobs, JobRows):
        held = int(np.maximum(jobs.table.array_tasks, 1).sum())
    else:
        held = sum(max(job.array_tasks, 1) for job in jobs)
    if limit and held >= limit:
        logger.warning(
            "slurmctld holds %d jobs, at or past its MaxJobCount %d: sbatch refuses new jobs until some "
            "end (raise MaxJobCount in slurm.conf); the cycle goes on with the jobs read",
            held,
            limit,
        )
    return limit
