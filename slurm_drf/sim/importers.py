"""Workloads from a real cluster's history: `sacct --json`, `sacct -P` and SWF traces.

Sits at the start of the simulator's flow, beside `scenarios`: each parser
turns text into `WorkloadJob`s (pure); `load_workload` reads the file and
sizes the simulated cluster. What a trace says is kept: submit time, run
time (Elapsed), time limit, account, user, TRES and node count; what the
cluster did with it (start times, nodes) is not, the simulator decides
that anew.

Records left out, counted in the workload's notes: job steps (`1234.batch`,
`1234.0`), jobs that never started (no run time to replay) and records
without TRES. Times are made relative to the first submission. Memory is
MiB; a GPU count is `gres/gpu` or, when only typed GPUs appear, the sum of
`gres/gpu:TYPE` (never both). A job on several nodes asks for an equal
part of its TRES on each (rounded up).

SWF (Standard Workload Format, Feitelson's Parallel Workloads Archive) has
no accounts: the group id stands for the account (`g<id>`), the user id
for the user (`u<id>`: `u123`; none for -1). Processors are CPUs; memory per processor is KB; a job
larger than one node spans ceil(processors / CPUs per node) nodes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from slurm_drf.errors import SlurmReadError
from slurm_drf.sim.workload import (
    NodeType,
    Workload,
    WorkloadError,
    WorkloadJob,
    fit_node_type,
    nodes_for_load,
)
from slurm_drf.slurm import sacct

FORMATS: Final = ("sacct-json", "sacct", "swf")
# An imported trace is played on as many nodes as give it this offered load,
# unless --nodes says otherwise.
IMPORT_LOAD: Final = 0.9


@dataclass(slots=True)
class ParsedTrace:
    """Jobs read from a trace, with what was skipped and any hint of the cluster size."""

    jobs: list[WorkloadJob] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    node_count: int | None = None
    node_type: NodeType | None = None

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


@dataclass(frozen=True, slots=True)
class _Tres:
    cpu: int
    mem: int
    gpu: int
    nodes: int


# `1234_5`: task 5 of array 1234.
_ARRAY_TASK = re.compile(r"^(\d+)_(\d+)$")


def _per_node(total: _Tres) -> tuple[int, int, int, int]:
    nodes = max(1, total.nodes)
    return (math.ceil(total.cpu / nodes), math.ceil(total.mem / nodes), math.ceil(total.gpu / nodes), nodes)


def _job(
    job_id: str, account: str, user: str, submit: float, duration: float, limit: float | None, tres: _Tres
) -> WorkloadJob:
    cpu, mem, gpu, nodes = _per_node(tres)
    array = _ARRAY_TASK.match(job_id)
    return WorkloadJob(
        job_id=job_id,
        account=account,
        user=user,
        submit=submit,
        duration=duration,
        limit=max(duration, limit or 0.0),
        cpu=cpu,
        mem=mem,
        gpu=gpu,
        nodes=nodes,
        array_id=array.group(1) if array else None,
        array_index=int(array.group(2)) if array else 0,
    )


# --------------------------------------------------------------------------
# sacct -P and sacct --json: records read by slurm.sacct, the daemon's reader of sacct


def _tres_of(tres: Mapping[str, int]) -> _Tres | None:
    """The simulator's TRES from Slurm's names; None without CPUs, memory or GPUs.

    `gres/gpu` is the GPU count, or the sum of `gres/gpu:TYPE` when only typed
    GPUs were written (slurm.parse.amounts counts them so, never twice).
    """
    if not any(name in ("cpu", "mem", "gres/gpu") or name.startswith("gres/gpu:") for name in tres):
        return None
    return _Tres(tres.get("cpu", 0), tres.get("mem", 0), tres.get("gres/gpu", 0), tres.get("node", 1))


def _sacct_trace(records: Sequence[sacct.SacctJob]) -> ParsedTrace:
    """The jobs of sacct's records; steps, what never ran and what holds no TRES counted as left out."""
    trace = ParsedTrace()
    for record in records:
        if "." in record.job_id:
            trace.skip("job steps")
            continue
        if record.submit is None:
            trace.skip("no submit time")
            continue
        if record.start is None or record.state == "PENDING":
            trace.skip("never started")
            continue
        if record.elapsed is None or record.elapsed <= 0:
            trace.skip("no run time")
            continue
        tres = _tres_of(record.allocated) or _tres_of(record.requested)
        if tres is None:
            trace.skip("no TRES")
            continue
        if record.nodes:
            tres = _Tres(tres.cpu, tres.mem, tres.gpu, record.nodes)
        account = record.account or "(none)"
        trace.jobs.append(_job(record.job_id, account, record.user, record.submit, record.elapsed, record.limit, tres))
    return trace


def parse_sacct_pipe(text: str, source: str = "sacct") -> ParsedTrace:
    """Jobs from `sacct -P` (or `--parsable2`) output with its header line (`slurm.sacct.parse_sacct_table`)."""
    try:
        return _sacct_trace(sacct.parse_sacct_table(text, source))
    except SlurmReadError as error:
        raise WorkloadError(str(error)) from error


def parse_sacct_json(text: str | bytes, source: str = "sacct --json") -> ParsedTrace:
    """Jobs from `sacct --json` output, data_parser 22.05 to 24.x (`slurm.sacct.parse_sacct_json`)."""
    try:
        return _sacct_trace(sacct.parse_sacct_json(text, source))
    except SlurmReadError as error:
        raise WorkloadError(str(error)) from error


# --------------------------------------------------------------------------
# Standard Workload Format

SWF_FIELDS: Final = 18


# The Standard Workload Format's fields, in order.
SWF_FIELD_NAMES: Final = (
    "job number",
    "submit time",
    "wait time",
    "run time",
    "processors",
    "average CPU time",
    "used memory",
    "requested processors",
    "requested time",
    "requested memory",
    "status",
    "user",
    "group",
    "executable",
    "queue",
    "partition",
    "preceding job",
    "think time",
)


def parse_swf(text: str, source: str = "swf", cpus_per_node: int | None = None) -> ParsedTrace:
    """Jobs from an SWF trace; header comments `; MaxNodes:` and `; MaxProcs:` size the cluster."""
    trace = ParsedTrace()
    header, rows = _read_swf(text, source)
    max_nodes = _header_int(header, "maxnodes")
    max_procs = _header_int(header, "maxprocs")
    per_node = cpus_per_node
    if per_node is None and max_nodes and max_procs:
        per_node = max(1, max_procs // max_nodes)
    if max_nodes:
        trace.node_count = max_nodes
    if per_node:
        trace.node_type = NodeType(cpu=per_node, mem=0, gpu=0)
    for number, fields in rows:
        values = _swf_numbers(fields, f"{source}:{number}")
        job, submit, _wait, runtime, procs, _cpu_used, used_mem, req_procs, req_time, req_mem = values[:10]
        user, group = int(values[11]), int(values[12])
        processors = int(procs if procs > 0 else req_procs)
        if runtime <= 0:
            trace.skip("no run time")
            continue
        if processors <= 0:
            trace.skip("no processors")
            continue
        memory_kb = req_mem if req_mem > 0 else used_mem
        mem = math.ceil(memory_kb * processors / 1024) if memory_kb > 0 else 0
        nodes = max(1, math.ceil(processors / per_node)) if per_node else 1
        limit = req_time if req_time >= runtime else None
        trace.jobs.append(
            _job(
                str(int(job)),
                f"g{group}" if group >= 0 else "g-unknown",
                f"u{user}" if user >= 0 else "",
                submit,
                runtime,
                limit,
                _Tres(processors, mem, 0, nodes),
            )
        )
    return trace


def _read_swf(text: str, source: str) -> tuple[dict[str, str], list[tuple[int, list[str]]]]:
    """An SWF file's header comments (`; Key: value`, keys in lower case) and its rows of
    fields, each with its line number; WorkloadError for a row of the wrong length."""
    header: dict[str, str] = {}
    rows: list[tuple[int, list[str]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith(";"):
            key, _, value = stripped[1:].partition(":")
            header[key.strip().lower()] = value.strip()
            continue
        fields = stripped.split()
        if len(fields) != SWF_FIELDS:
            raise WorkloadError(f"{source}:{number}: {len(fields)} fields, SWF has {SWF_FIELDS}")
        rows.append((number, fields))
    return header, rows


def _swf_numbers(fields: Sequence[str], where: str) -> list[float]:
    """An SWF row's fields as numbers; WorkloadError (at `where`) for one that is not a finite number."""
    try:
        values = [float(f) for f in fields]
    except ValueError as error:
        raise WorkloadError(f"{where}: not a number: {error}") from error
    for index, amount in enumerate(values):
        if not math.isfinite(amount):
            name = SWF_FIELD_NAMES[index]
            raise WorkloadError(f"{where}: field {index + 1} ({name}): {fields[index]!r} is not a finite number")
    return values


def _header_int(header: Mapping[str, str], key: str) -> int | None:
    value = header.get(key, "").split()
    if value and value[0].isdigit():
        return int(value[0])
    return None


# --------------------------------------------------------------------------
# Files -> Workload


def parse_trace(text: str, fmt: str, source: str, cpus_per_node: int | None = None) -> ParsedTrace:
    if fmt == "sacct-json":
        return parse_sacct_json(text, source)
    if fmt == "sacct":
        return parse_sacct_pipe(text, source)
    if fmt == "swf":
        return parse_swf(text, source, cpus_per_node)
    raise WorkloadError(f"unknown workload format {fmt!r}; choose one of {', '.join(FORMATS)}")


def guess_format(path: str) -> str:
    """sacct-json for .json, swf for .swf, sacct otherwise."""
    suffix = Path(path).suffix.lower()
    return {".json": "sacct-json", ".swf": "swf"}.get(suffix, "sacct")


def build_trace_workload(
    trace: ParsedTrace, name: str, node_type: NodeType | None = None, node_count: int | None = None
) -> Workload:
    """A Workload from parsed jobs: times from 0, a node shape every job fits, a cluster size."""
    if not trace.jobs:
        reasons = ", ".join(f"{n} {r}" for r, n in sorted(trace.skipped.items())) or "no records"
        raise WorkloadError(f"{name}: no job to simulate ({reasons})")
    first = min(j.submit for j in trace.jobs)
    jobs = [_shift(j, first) for j in trace.jobs]
    base = node_type or _trace_node_type(trace)
    shape = fit_node_type(jobs, base)
    notes = [f"left out {n} record(s): {reason}" for reason, n in sorted(trace.skipped.items())]
    if shape != base:
        notes.append(f"nodes grown to {shape.render()} so that every job fits on them")
    count = node_count or trace.node_count or nodes_for_load(jobs, shape, IMPORT_LOAD)
    if node_count is None and trace.node_count is None:
        notes.append(f"{count} node(s): the trace's offered load is {IMPORT_LOAD:.0%} of them (set --nodes)")
    return Workload(
        name=name,
        description=f"imported from {name}",
        jobs=tuple(jobs),
        node_count=count,
        node_type=shape,
        notes=tuple(notes),
    )


def _trace_node_type(trace: ParsedTrace) -> NodeType:
    if trace.node_type is not None:
        return trace.node_type
    return NodeType()


def _shift(job: WorkloadJob, first: float) -> WorkloadJob:
    return WorkloadJob(
        job.job_id,
        job.account,
        job.user,
        job.submit - first,
        job.duration,
        job.limit,
        job.cpu,
        job.mem,
        job.gpu,
        job.nodes,
        job.array_id,
        job.array_index,
    )


def load_workload(
    path: str, fmt: str | None = None, node_type: NodeType | None = None, node_count: int | None = None
) -> Workload:
    """Read a trace file and build its Workload (I/O here only)."""
    chosen = fmt or guess_format(path)
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise WorkloadError(f"{path}: cannot read: {error.strerror or error}") from error
    trace = parse_trace(text, chosen, Path(path).name, node_type.cpu if node_type is not None else None)
    return build_trace_workload(trace, Path(path).name, node_type, node_count)
