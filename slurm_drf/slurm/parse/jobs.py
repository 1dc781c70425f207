"""Jobs: `squeue --json` records (and the pyslurm source's, shaped alike) -> Job.

Where a job's resources, state, priority, nice and hold are read, and a
pending heterogeneous job becomes one job under its leader's id. Its
numbers and TRES come from `slurm.parse.amounts`, an array's task count
from `slurm.parse.arrays`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from slurm_drf.errors import SlurmReadError, shorten
from slurm_drf.model.types import HOLDING_STATES, MAX_TRES, PENDING, Job, JobRows, JobTableBuilder, Tres, freeze_tres
from slurm_drf.slurm.parse.amounts import (
    WARNINGS,
    gres_names,
    lenient_gres,
    merge_gres,
    parse_gres,
    parse_number,
    parse_tres_entries,
    parse_tres_per,
    shared_text,
    text_field,
    whole_number,
)
from slurm_drf.slurm.parse.arrays import parse_array_task_string
from slurm_drf.slurm.parse.envelope import check_errors, json_records, parse_json_cluster, parse_slurm_version
from slurm_drf.slurm.parse.json_stream import JsonAnswer

logger = logging.getLogger(__name__)

# Slurm's INFINITE (uint32); a priority reported as infinite reads as this.
INFINITE_PRIORITY: Final = 2**32 - 1

# Base job states (job_state_string() in src/common/slurm_protocol_defs.c).
_BASE_JOB_STATES: Final = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)
# Before 23.11 job_state is one word and a state flag wins over the base
# state. These flags only occur on jobs that hold their allocation, so they
# read as RUNNING; COMPLETING stays itself (the model counts it as holding).
_FLAG_ONLY_HOLDING: Final[Mapping[str, str]] = {
    "CONFIGURING": "RUNNING",
    "RESIZING": "RUNNING",
    "STOPPED": "RUNNING",
}


def parse_job_state(value: object) -> str:
    """Slurm's base state in upper case from a string (<= 23.02) or a list.

    COMPLETING wins over the base state, as job_state_string() does, because
    a completing job still holds its nodes.
    """
    if isinstance(value, str):
        state = value.strip().upper()
        if not state:
            raise ValueError("empty job_state")
        return _FLAG_ONLY_HOLDING.get(state, state)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        states: list[str] = [str(v).strip().upper() for v in value]
        if "COMPLETING" in states:
            return "COMPLETING"
        base = next((s for s in states if s in _BASE_JOB_STATES), None)
        if base is not None:
            return base
        return _FLAG_ONLY_HOLDING.get(states[0], states[0])
    raise ValueError(f"job_state: expected a state or a list of states, got {value!r}")


def _job_label(record: object) -> str:
    if isinstance(record, Mapping):
        job_id = record.get("job_id")
        if isinstance(job_id, int | str) and not isinstance(job_id, bool):
            return str(job_id)
    return "?"


def _positive(record: Mapping[str, Any], key: str) -> int | None:
    value = whole_number(record.get(key), key)
    return value if value else None


def _job_gres(record: Mapping[str, Any], nodes: int, tasks: int, holding: bool) -> dict[str, int]:  # noqa: C901
    """GRES the job asks for (or holds), from the fields beside the TRES string.

    A running job's `gres_detail` (one entry per allocated node; filled when
    squeue asks for details, as 22.05 does) is what it holds. Otherwise
    `tres_per_job` is the whole job, `tres_per_node` counts per node,
    `tres_per_task` per task, `tres_per_socket` per socket; for each GRES
    name the first of these that mentions it decides.
    """
    label = f"job {_job_label(record)}"
    if holding:
        detail = record.get("gres_detail")
        if isinstance(detail, list) and detail and all(isinstance(d, str) for d in detail):
            total: dict[str, int] = {}
            for entry in detail:
                for key, amount in lenient_gres(parse_gres, entry, f"{label} gres_detail").items():
                    total[key] = total.get(key, 0) + amount
            if total:
                return total
    sockets_per_node = _positive(record, "sockets_per_node")
    sources: list[tuple[str, int | None]] = [
        ("tres_per_job", 1),
        ("tres_per_node", nodes),
        ("tres_per_task", tasks),
        ("tres_per_socket", sockets_per_node * nodes if sockets_per_node else None),
    ]
    out: dict[str, int] = {}
    covered: set[str] = set()
    for key, factor in sources:
        per = lenient_gres(parse_tres_per, text_field(record.get(key), key), f"{label} {key}")
        names = gres_names(per) - covered
        if not names:
            continue
        if factor is None:
            WARNINGS.warned(
                logger, "%s: %s=%s without sockets_per_node; GRES per socket not counted", label, key, record.get(key)
            )
            continue
        for entry, amount in per.items():
            if entry[len("gres/") :].split(":", 1)[0] in names:
                out[entry] = amount * factor
        covered |= names
    return out


def _job_memory(record: Mapping[str, Any], nodes: int, cpus: int | None, gpus: int | None) -> int | None:
    """Whole-job memory in MiB from the per-node, per-CPU or per-GPU request.

    `--mem=0` (all of a node's memory) gives 0 per node here: nothing can be
    computed, so the caller keeps what the TRES string says.
    """
    per_node = whole_number(record.get("memory_per_node"), "memory_per_node")
    if per_node:
        return per_node * nodes
    per_cpu = whole_number(record.get("memory_per_cpu"), "memory_per_cpu")
    if per_cpu and cpus:
        return per_cpu * cpus
    per_tres = lenient_gres(
        parse_tres_per,
        text_field(record.get("memory_per_tres"), "memory_per_tres"),
        f"job {_job_label(record)} memory_per_tres",
    )
    per_gpu = per_tres.get("gres/gpu")
    if per_gpu and gpus:
        return per_gpu * gpus
    return None


# What `_job_tres` reads of a record; `job_resources` only without a
# `node_count`, and then the record's resources are not cached.
_TRES_FIELDS: Final = (
    "tres_req_str",
    "tres_alloc_str",
    "node_count",
    "tasks",
    "cpus",
    "sockets_per_node",
    "tres_per_job",
    "tres_per_node",
    "tres_per_task",
    "tres_per_socket",
    "memory_per_node",
    "memory_per_cpu",
    "memory_per_tres",
    "gres_detail",
)
# A queue of 50,000 jobs has a few dozen distinct shapes (bench_read.py).
_TRES_CACHE_SIZE: Final = 4096
_TRES_CACHE: dict[tuple[object, ...], Tres] = {}


def _hashable(value: object) -> object:
    """A stand-in for a JSON value that hashes; 1, 1.0 and True stay apart."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return (dict, tuple((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (list, tuple(_hashable(v) for v in value))
    return (type(value), value)


def _shared_job_tres(record: Mapping[str, Any], state: str) -> Tres:
    """`_job_tres`, frozen, and shared by the records whose fields it reads are the same.

    Each shape is parsed once: a record that raises or warns is parsed
    every time, so each job with an odd field is named in its own line.
    """
    node_count = record.get("node_count")
    if node_count is None or node_count == 0:
        return freeze_tres(_job_tres(record, state))  # job_resources is read too
    values = tuple(map(record.get, _TRES_FIELDS))
    key: tuple[object, ...] = (state in HOLDING_STATES, values, tuple(map(type, values)))
    try:
        tres = _TRES_CACHE.get(key)
    except TypeError:  # a list or object among the fields (gres_detail, 23.02+'s numbers)
        key = (key[0], *map(_hashable, values))
        tres = _TRES_CACHE.get(key)
    if tres is None:
        warned = WARNINGS.count
        tres = freeze_tres(_job_tres(record, state))
        if WARNINGS.count == warned:
            if len(_TRES_CACHE) >= _TRES_CACHE_SIZE:
                _TRES_CACHE.clear()
            _TRES_CACHE[key] = tres
    return tres


def _job_tres(record: Mapping[str, Any], state: str) -> dict[str, int]:
    holding = state in HOLDING_STATES
    request = text_field(record.get("tres_req_str"), "tres_req_str")
    allocated = text_field(record.get("tres_alloc_str"), "tres_alloc_str")
    field = (
        ("tres_alloc_str" if allocated else "tres_req_str")
        if holding
        else ("tres_req_str" if request else "tres_alloc_str")
    )
    text = (allocated or request) if holding else (request or allocated)
    tres, explicit = parse_tres_entries(text, field)

    nodes = _positive(record, "node_count")
    if nodes is None:
        resources = record.get("job_resources")
        if isinstance(resources, Mapping):
            nested = resources.get("nodes")
            nodes = _positive(nested, "count") if isinstance(nested, Mapping) else None
            nodes = nodes or _positive(resources, "allocated_hosts")
    nodes = nodes or tres.get("node") or 1
    tasks = _positive(record, "tasks") or 1
    cpus = tres.get("cpu") or _positive(record, "cpus")

    merge_gres(tres, explicit, _job_gres(record, nodes, tasks, holding))
    if "cpu" not in tres and cpus:
        tres["cpu"] = cpus
    if "node" not in tres:
        tres["node"] = nodes
    if "mem" not in tres:
        memory = _job_memory(record, nodes, cpus, tres.get("gres/gpu"))
        if memory is not None:
            tres["mem"] = memory
    for name, amount in tres.items():
        # Counts times nodes or tasks, memory per node times nodes: each fits, the product may not.
        if amount > MAX_TRES:
            raise ValueError(
                f"{name} {shorten(str(amount), 40)} (from {field} and the per-node, per-task and "
                f"memory fields) is past {MAX_TRES}"
            )
    return tres


def _priority(record: Mapping[str, Any]) -> tuple[int, bool]:
    """(priority, reported as zero)."""
    value = parse_number(record.get("priority"))
    if value is None:
        return 0, False
    if value == math.inf:
        return INFINITE_PRIORITY, False
    return round(value), value == 0


def parse_squeue_record(record: object, *, include_finished: bool = False) -> Job | None:  # noqa: C901
    """One `squeue --json` job record as a Job.

    Returns None for a job that neither holds nor waits for resources
    (completed, cancelled, ...) unless `include_finished`. Raises ValueError
    (or TypeError) when the record cannot be read.

    The job id is the one to write to: a pending array record is written
    through its array job id (updating every pending task), a pending
    heterogeneous job component through its leader (`het_job_id`); each
    component keeps its own resources, so a pending het job appears as
    several records sharing the leader's id. Running array tasks and running
    het components keep their own job ids.
    """
    if not isinstance(record, Mapping):
        raise TypeError(f"expected a job object, got {type(record).__name__}")
    raw_id = whole_number(record.get("job_id"), "job_id")
    if raw_id is None:
        raise ValueError("missing job_id")
    state = parse_job_state(record.get("job_state"))
    if not include_finished and state != PENDING and state not in HOLDING_STATES:
        logger.debug("job %s: state %s neither holds nor waits for resources; left out", raw_id, state)
        return None
    account = text_field(record.get("account"), "account").strip()
    if not account:
        raise ValueError("no account")

    job_id = raw_id
    array_tasks = 1
    task_string = text_field(record.get("array_task_string"), "array_task_string").strip()
    if state == PENDING and task_string:
        tasks = parse_array_task_string(task_string)
        if tasks.truncated:
            logger.warning(
                "job %s: array_task_string %r is cut short (set SLURM_BITSTR_LEN=0); "
                "counting at least %d pending tasks",
                raw_id,
                task_string,
                tasks.tasks,
            )
        array_tasks = tasks.tasks
        job_id = _positive(record, "array_job_id") or raw_id
    het_leader = _pending_het_leader(record, state)
    if het_leader is not None:
        job_id = het_leader

    priority, priority_zero = _priority(record)
    nice = parse_number(record.get("nice"))
    if nice is None or nice == math.inf or not math.isfinite(nice):
        nice = 0
    elif nice >= 2**31:
        # Slurm 22.05's JSON prints nice as an unsigned 32-bit number: -5 arrives
        # as 4294967291 (measured on the sandbox); squeue's text output is signed.
        nice -= 2**32
    reason = text_field(record.get("state_reason"), "state_reason")
    held = priority_zero or reason.startswith("JobHeld") or record.get("hold") is True

    user = text_field(record.get("user_name"), "user_name")
    if not user:
        user_id = whole_number(record.get("user_id"), "user_id")
        user = "" if user_id is None else str(user_id)
    submit = parse_number(record.get("submit_time"))
    submit_time = float(submit) if submit is not None and math.isfinite(submit) else 0.0

    # A queue's accounts, users, partitions and states are a few strings each: one copy of
    # each, not one per job (50,000 jobs, a few MiB).
    return Job(
        job_id=str(job_id),
        account=shared_text(account),
        user=shared_text(user),
        partition=shared_text(text_field(record.get("partition"), "partition")),
        state=shared_text(state),
        priority=priority,
        nice=round(nice),
        held=held,
        submit_time=submit_time,
        array_tasks=array_tasks,
        tres=_shared_job_tres(record, state),
    )


def _pending_het_leader(record: Mapping[str, Any], state: str) -> int | None:
    """The leader's id when the record is a pending het job component other than the leader."""
    leader = _positive(record, "het_job_id")
    if state == PENDING and leader and _positive(record, "het_job_offset"):
        return leader
    return None


def parse_het_leaders(records: Iterable[object]) -> frozenset[str]:
    """Leader ids of pending het jobs with a pending component besides the leader.

    The records are squeue-shaped (`squeue --json`'s `jobs`, or the pyslurm
    source's). These are the ids `merge_pending_components` sums components
    under; the Snapshot keeps them (`het_leaders`) because a write to one
    must reach every component: `scontrol update jobid=LEADER` does,
    slurm_update_job() (pyslurm's Job.modify) changes only the named record.
    """
    leaders: set[str] = set()
    for record in records:
        if not isinstance(record, Mapping) or not record.get("het_job_id"):
            continue  # most jobs: no het job id (0 or unset) is no leader
        try:
            leader = _pending_het_leader(record, parse_job_state(record.get("job_state")))
        except (TypeError, ValueError):
            continue  # parse_squeue_json warns about the record
        if leader is not None:
            leaders.add(str(leader))
    return frozenset(leaders)


def parse_squeue_json(data: Mapping[str, Any], *, include_finished: bool = False) -> list[Job]:
    """Every job in `squeue --json` output (Slurm 22.05 to 25.x) as a Job.

    A record that cannot be read is skipped with a warning naming the job
    and the problem. Raises SlurmReadError only when the output as a whole
    is not squeue's (no `jobs` list, or only errors).
    """
    records = json_records(data, "jobs", "squeue --json")
    return merge_pending_components(list(_read_records(records, include_finished, set(), [])))


def _read_records(
    records: Iterable[object], include_finished: bool, leaders: set[str], clusters: list[str]
) -> Iterator[Job]:
    """The Jobs of `records`, each bad one skipped with a warning; adds het leaders and the first cluster named."""
    for record in records:
        if isinstance(record, Mapping):
            if record.get("het_job_id"):
                leaders |= parse_het_leaders([record])
            if not clusters and isinstance(record.get("cluster"), str) and record["cluster"]:
                clusters.append(record["cluster"])
        job = parse_record_or_warn(record, include_finished=include_finished)
        if job is not None:
            yield job


def parse_record_or_warn(record: object, *, include_finished: bool = False) -> Job | None:
    """`parse_squeue_record`, a record it cannot read skipped with a warning naming the job (None)."""
    try:
        return parse_squeue_record(record, include_finished=include_finished)
    except Exception as error:  # one bad record must not stop the rest
        logger.warning("job %s skipped: %s", _job_label(record), error)
        return None


@dataclass(frozen=True, slots=True)
class SqueueAnswer:
    """What a read of `squeue --json` gives: the jobs, pending het leaders, the release and cluster it names.

    The jobs are `JobRows` (read into their table as they came), or a list
    of Jobs when a het job's components were merged or a number of one is
    past 64 bits (`JobTableBuilder.jobs`).
    """

    jobs: Sequence[Job]
    het_leaders: frozenset[str]
    version: str | None
    cluster: str | None


def read_squeue_answer(answer: JsonAnswer) -> SqueueAnswer:
    """squeue's answer read one record at a time (`JsonAnswer`), as parse_squeue_json reads it whole.

    Raises SlurmReadError when the answer is not squeue's: not JSON, cut
    short, no `jobs` list, or Slurm's errors and no records.
    """
    leaders: set[str] = set()
    clusters: list[str] = []
    builder = JobTableBuilder()
    for job in _read_records(answer.records(), False, leaders, clusters):
        builder.add_job(job)  # no Job kept: 50,000 of them would pin the memory of the records read
    check_errors(answer.envelope, "squeue --json", bool(answer.count))
    if answer.count is None:
        raise SlurmReadError("squeue --json: no 'jobs' list in the output")
    cluster = parse_json_cluster(answer.envelope) or (clusters[0] if clusters else None)
    return SqueueAnswer(built_jobs(builder), frozenset(leaders), parse_slurm_version(answer.envelope), cluster)


def built_jobs(builder: JobTableBuilder) -> Sequence[Job]:
    """The builder's jobs: `JobRows` over their table, or a list with each pending het job's
    components merged (`merge_pending_components`)."""
    jobs = builder.jobs()
    return jobs if isinstance(jobs, JobRows) else merge_pending_components(list(jobs))


def merge_pending_components(jobs: list[Job]) -> list[Job]:
    """One record per pending het job: its components summed under the leader's id.

    Slurm schedules a het job as a whole and `scontrol update` takes the
    leader, so the plan must see one job with the whole demand, not one
    per component (which would write the leader once per component). Which
    ids are such leaders goes into the Snapshot (`parse_het_leaders`).
    """
    first: dict[str, int] = {}
    out: list[Job] = []
    for job in jobs:
        if not job.pending:
            out.append(job)
            continue
        index = first.get(job.job_id)
        if index is None:
            first[job.job_id] = len(out)
            out.append(job)
            continue
        merged = out[index]
        tres = dict(merged.tres)
        for name, amount in job.tres.items():
            tres[name] = tres.get(name, 0) + amount
        out[index] = replace(merged, tres=freeze_tres(tres), held=merged.held or job.held)
    return out
