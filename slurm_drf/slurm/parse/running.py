"""What a reclaim needs from Slurm, read per node: each node's free resources and each running job's allocation.

Sits under `slurm.running` (which runs the commands) and beside `jobs` and
`nodes`, whose readers it reuses; pure, like every reader here. The policy's
`reclaim.choose_victims` compares, node by node, what is free with what
requeueing a job would free, so both are vectors by the config's resources
(`cpu`, `mem` in MiB, `gres/...`, `node`) in the config's order:

- a node's free vector is its TRES (`slurm.parse.nodes`) less what is
  allocated on it: `alloc_cpus`, `alloc_memory` and `gres_used` (every
  release from 22.05 to 26.05 has these three; `tres_used` is not always
  filled); `node` is 1 on a node where nothing is allocated;
- a running job's row on one of its nodes comes from its `job_resources`:
  26.05 to 23.11 list `nodes.allocation` entries with `cpus.count` and
  `memory.allocated`; 22.05 lists `allocated_nodes` with the cores the job
  holds and `memory_allocated`, and no CPU count per node, so the job's
  CPUs (`cpus`) are shared out in proportion to its cores there (exact:
  Slurm gives a job whole cores, or one CPU a core); GRES per node from
  `gres_detail`, one entry per node in the same order. A job whose rows do
  not add up to its `tres_alloc_str` for CPUs and memory is left out with a
  warning (never a victim; its resources still count as used on the nodes).

Resources that Slurm counts per cluster, not per node (licenses, billing),
are 0 in every row and every free vector: a claim that needs them is never
placed by freeing nodes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NamedTuple

from slurm_drf.model.types import RUNNING, Node
from slurm_drf.policy.reclaim import Running, Vector
from slurm_drf.slurm.parse.amounts import lenient_gres, parse_gres, parse_number, parse_tres_string, text_field
from slurm_drf.slurm.parse.envelope import json_records
from slurm_drf.slurm.parse.jobs import parse_job_state
from slurm_drf.slurm.parse.nodes import parse_node_record

logger = logging.getLogger(__name__)

# An amount counted per node (in a node's TRES and a job's row on it); the rest count 0 per node.
PER_NODE_PREFIXES = ("gres/",)
PER_NODE = ("cpu", "mem", "node")


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A running job as a reclaim sees it: who, since when, whether it may be requeued, its rows per node.

    `allocation[node]` is its vector on that node by the resources read with
    it; `requeueable`: a batch job whose requeue flag is set, and no het job
    (requeueing one component requeues them all). `target` is how Slurm's
    commands name this job and no other: `ARRAY_TASK` for an array task
    (the last task's own id is the array's id, which names every task),
    `LEADER+OFFSET` for a het job component, else the job id.
    """

    job_id: str
    account: str
    user: str
    partition: str
    qos: str
    start: float
    requeueable: bool
    allocation: Mapping[str, Vector]
    target: str

    def running(self, *, exempt: bool = False, moved_at: float | None = None) -> Running:
        """The policy's view of it (policy.reclaim.Running)."""
        return Running(self.job_id, self.account, self.allocation, self.start, self.requeueable, exempt, moved_at)


@dataclass(frozen=True, slots=True)
class Occupancy:
    """What reclaim reads: `free[node]` for the nodes that can run jobs, and the running jobs, by `resources`."""

    resources: tuple[str, ...]
    free: Mapping[str, Vector]
    jobs: tuple[RunningJob, ...]
    version: str | None = None

    def running(
        self,
        exempt: Callable[[RunningJob], bool] = lambda job: False,
        moved_at: Mapping[str, float] | None = None,
    ) -> list[Running]:
        """Every job as policy.reclaim.Running, `exempt` and the time a reclaim last moved it filled in."""
        moved = moved_at or {}
        return [job.running(exempt=exempt(job), moved_at=moved.get(job.job_id)) for job in self.jobs]


def _counted(resource: str) -> bool:
    return resource in PER_NODE or resource.startswith(PER_NODE_PREFIXES)


def _vector(amounts: Mapping[str, int], resources: Sequence[str]) -> Vector:
    return tuple(amounts.get(r, 0) if _counted(r) else 0 for r in resources)


def _whole(value: object, key: str) -> int:
    number = parse_number(value)
    if number is None or not math.isfinite(number) or number < 0:
        raise ValueError(f"{key}: expected a number >= 0, got {value!r}")
    return round(number)


def _in_partitions(node: Node, partitions: Collection[str] | None) -> bool:
    return partitions is None or any(p in partitions for p in node.partitions)


def parse_node_free(record: Mapping[str, Any], resources: Sequence[str]) -> tuple[Node, Vector]:
    """One node record (22.05 `sinfo --json`, 23.02+ `scontrol show nodes --json`): the Node and what is free on it.

    Free is never below 0 (a node can be oversubscribed, or shrink under
    its jobs). `effective_cpus` and `specialized_memory` (23.02+) take the
    CPUs and memory Slurm keeps for itself out of the total.
    """
    node = parse_node_record(record)
    total = dict(node.tres)
    effective = parse_number(record.get("effective_cpus"))
    if effective is not None and math.isfinite(effective) and "cpu" in total:
        total["cpu"] = min(total["cpu"], round(effective))
    special = parse_number(record.get("specialized_memory"))
    if special and math.isfinite(special) and "mem" in total:
        total["mem"] -= round(special)
    used = {
        "cpu": _whole(record.get("alloc_cpus"), "alloc_cpus"),
        "mem": _whole(record.get("alloc_memory"), "alloc_memory"),
    }
    used.update(
        lenient_gres(parse_gres, text_field(record.get("gres_used"), "gres_used"), f"node {node.name} gres_used")
    )
    total["node"] = 1
    used["node"] = 1 if any(used.values()) else 0
    free = tuple(max(total.get(r, 0) - used.get(r, 0), 0) if _counted(r) else 0 for r in resources)
    return node, free


def parse_free(
    data: Mapping[str, Any], partitions: Collection[str] | None, resources: Sequence[str]
) -> dict[str, Vector]:
    """Free vectors of the nodes of `partitions` (None: all) that can run jobs (Node.eligible).

    A record that cannot be read is left out with a warning: its node frees
    nothing for a claim, which is the safe side.
    """
    free: dict[str, Vector] = {}
    for record in json_records(data, "nodes", "node list"):
        try:
            if not isinstance(record, Mapping):
                raise TypeError(f"expected a node object, got {type(record).__name__}")
            node, vector = parse_node_free(record, resources)
        except (TypeError, ValueError) as error:
            label = record.get("name", "?") if isinstance(record, Mapping) else "?"
            logger.warning("node %s left out of reclaim: %s", label, error)
            continue
        if node.eligible and _in_partitions(node, partitions):
            free[node.name] = vector
    return free


class _Row(NamedTuple):
    """A job's allocation on one node, as job_resources gives it."""

    node: str
    cpus: int
    memory: int


def _held_cores(entry: Mapping[str, Any]) -> int:
    """Cores of one `allocated_nodes` entry the job holds (`{"sockets": {"0": {"cores": {"0": "allocated"}}}}`)."""
    sockets = entry.get("sockets") or {}
    states = [str(state).lower() for socket in sockets.values() for state in (socket.get("cores") or {}).values()]
    return sum(not state.startswith("un") for state in states)  # "unallocated", should a release list those


def _rows_22_05(resources: Mapping[str, Any], cpus: int) -> list[_Row]:
    """22.05's `allocated_nodes`: the cores held on each node, the job's `cpus` shared out in proportion."""
    entries = resources.get("allocated_nodes") or []
    cores = [_held_cores(entry) for entry in entries]
    if not sum(cores):
        return []
    shares = [Fraction(cpus * count, sum(cores)) for count in cores]
    counts = [math.floor(share) for share in shares]
    # What rounding down left over goes to the rows with the largest remainders, first rows first.
    for index in sorted(range(len(counts)), key=lambda i: -(shares[i] - counts[i]))[: cpus - sum(counts)]:
        counts[index] += 1
    return [
        _Row(text_field(entry.get("nodename"), "nodename"), count, _whole(entry.get("memory_allocated"), "memory"))
        for entry, count in zip(entries, counts, strict=True)
    ]


def _node_rows(record: Mapping[str, Any], cpus: int) -> list[_Row]:
    """The job's allocation on each of its nodes, in `gres_detail`'s order."""
    resources = record.get("job_resources")
    if not isinstance(resources, Mapping):
        return []
    nodes = resources.get("nodes")
    if isinstance(nodes, Mapping):  # 23.11 and later
        return [
            _Row(
                text_field(entry.get("name"), "name"),
                _whole((entry.get("cpus") or {}).get("count"), "cpus.count"),
                _whole((entry.get("memory") or {}).get("allocated"), "memory.allocated"),
            )
            for entry in nodes.get("allocation") or []
        ]
    return _rows_22_05(resources, cpus)


def parse_running_record(record: Mapping[str, Any], resources: Sequence[str]) -> RunningJob:
    """One `squeue --json` record of a RUNNING job as a RunningJob; ValueError when its rows cannot be read."""
    job_id = str(_whole(record.get("job_id"), "job_id"))
    alloc = parse_tres_string(text_field(record.get("tres_alloc_str"), "tres_alloc_str"))
    rows = _node_rows(record, alloc.get("cpu", 0))
    if not rows:
        raise ValueError("no allocation per node (job_resources)")
    for what, column in (("cpu", [row.cpus for row in rows]), ("mem", [row.memory for row in rows])):
        if what in alloc and sum(column) != alloc[what]:
            raise ValueError(f"its {what} per node ({column}) does not add up to tres_alloc_str's {alloc[what]}")
    detail = record.get("gres_detail") or []
    if detail and len(detail) != len(rows):
        raise ValueError(f"{len(detail)} gres_detail entries for {len(rows)} nodes")
    allocation: dict[str, Vector] = {}
    for index, (name, cpus, memory) in enumerate(rows):
        amounts = {"cpu": cpus, "mem": memory, "node": 1}
        if detail:
            amounts.update(
                lenient_gres(parse_gres, text_field(detail[index], "gres_detail"), f"job {job_id} gres_detail")
            )
        allocation[name] = _vector(amounts, resources)
    start = parse_number(record.get("start_time"))
    het = parse_number(record.get("het_job_id"))
    array = parse_number(record.get("array_job_id"))
    task = parse_number(record.get("array_task_id"))
    if het:
        target = f"{het}+{_whole(record.get('het_job_offset'), 'het_job_offset')}"
    elif array and task is not None:
        target = f"{array}_{task}"
    else:
        target = job_id
    user = text_field(record.get("user_name"), "user_name")
    if not user and isinstance(record.get("user_id"), int):
        user = str(record["user_id"])
    return RunningJob(
        job_id=job_id,
        account=text_field(record.get("account"), "account"),
        user=user,
        partition=text_field(record.get("partition"), "partition"),
        qos=text_field(record.get("qos"), "qos"),
        start=float(start) if start is not None and math.isfinite(start) else 0.0,
        requeueable=record.get("batch_flag") is True and record.get("requeue") is True and not het,
        allocation=allocation,
        target=target,
    )


def parse_running(
    data: Mapping[str, Any], partitions: Collection[str] | None, resources: Sequence[str]
) -> list[RunningJob]:
    """The RUNNING jobs of `partitions` (None: all) in `squeue --json` output (22.05 to 26.05), each per node.

    Filtered here whatever squeue was asked: before 24.05 its JSON output
    ignores `--states` and `--partition`. A record that cannot be read is
    left out with a warning naming the job: it is never a victim.
    """
    jobs: list[RunningJob] = []
    for record in json_records(data, "jobs", "squeue --json"):
        if not isinstance(record, Mapping):
            continue
        try:
            if parse_job_state(record.get("job_state")) != RUNNING:
                continue
            if partitions is not None and text_field(record.get("partition"), "partition") not in partitions:
                continue
            jobs.append(parse_running_record(record, resources))
        except (TypeError, ValueError, AttributeError) as error:
            logger.warning("running job %s left out of reclaim: %s", record.get("job_id", "?"), error)
    return jobs
