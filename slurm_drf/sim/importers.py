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
larger than one node spans ceil(processors / CPUs per node) nodes. A job
without memory (-1 or 0 in both memory fields) asks for none (`mem` 0:
the simulator counts no memory for it; `replay` submits it with Slurm's
smallest request, `replay.trace.MIN_MEM_MIB`). Fields are numbers written
in ASCII (`12`, `-1`, `3.5`, `1e3`), separated by spaces or tabs; a field
that is no such number (`nan`, `1_000`, another script's digits), a number
that is not finite, or processors or memory past MAX_TRES is refused
naming the file, the line and the field. An SWF trace is read in one pass
that keeps a few numbers per job until the jobs are made
(benchmarks/bench_import.py).

An SWF record is a line ended by "\n" alone (a "\r" before it is dropped),
never split at the U+2028, U+0085, form feeds and the like `str.splitlines`
also splits at, which a field can hold (Slurm writes them through in a job
name or an account).
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from slurm_drf.errors import SlurmReadError, shorten
from slurm_drf.model.types import MAX_TRES
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


# A job's whole TRES: cpu, mem, gres/gpu and its node count (a plain tuple: one is made per record).
_Tres = tuple[int, int, int, int]

# `1234_5`: task 5 of array 1234.
_ARRAY_TASK = re.compile(r"^(\d+)_(\d+)$")


# --------------------------------------------------------------------------
# sacct -P and sacct --json: records read by slurm.sacct, the daemon's reader of sacct


def _tres_of(tres: Mapping[str, int]) -> _Tres | None:
    """The simulator's TRES from Slurm's names; None without CPUs, memory or GPUs.

    `gres/gpu` is the GPU count, or the sum of `gres/gpu:TYPE` when only typed
    GPUs were written (slurm.parse.amounts counts them so, never twice).
    """
    # Three look-ups answer almost every record; the names are walked only when they fail.
    if (
        "cpu" not in tres
        and "mem" not in tres
        and "gres/gpu" not in tres
        and not any(name.startswith("gres/gpu:") for name in tres)
    ):
        return None
    return (tres.get("cpu", 0), tres.get("mem", 0), tres.get("gres/gpu", 0), tres.get("node", 1))


def _sacct_trace(records: Sequence[sacct.SacctJob]) -> ParsedTrace:
    """The jobs of sacct's records, submitted from 0 on; steps, what never ran and what holds no TRES
    counted as left out. A job on several nodes asks for an equal part of its TRES on each (rounded up)."""
    trace = ParsedTrace()
    # (record, submit, run time, TRES): each job is made once, its time already relative to the first.
    kept: list[tuple[sacct.SacctJob, float, float, _Tres]] = []
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
            tres = (tres[0], tres[1], tres[2], record.nodes)
        kept.append((record, record.submit, record.elapsed, tres))
    first = min((submit for _, submit, _, _ in kept), default=0.0)
    ceil = math.ceil
    jobs = trace.jobs
    for record, submit, duration, (cpu, mem, gpu, count) in kept:
        nodes = count if count > 1 else 1
        limit = record.limit
        job_id = record.job_id
        task = _ARRAY_TASK.match(job_id) if "_" in job_id else None
        jobs.append(
            WorkloadJob(
                job_id,
                record.account or "(none)",
                record.user,
                submit - first,
                duration,
                # The time limit when the job has one it kept to, else its run time.
                limit if limit is not None and limit > duration else duration,
                ceil(cpu / nodes),
                ceil(mem / nodes),
                ceil(gpu / nodes),
                nodes,
                task.group(1) if task else None,
                int(task.group(2)) if task else 0,
            )
        )
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
    """Jobs from an SWF trace, submitted from 0 on; header comments `; MaxNodes:` and `; MaxProcs:` size the cluster.

    One pass over the lines keeps each job's few numbers in columns; the
    jobs are made at the end, when the header (which may come anywhere)
    has said how many CPUs a node has.
    """
    trace = ParsedTrace()
    header: dict[str, str] = {}
    columns = _SwfColumns()
    for number, line in enumerate(_records(text), start=1):
        row = _swf_fields(line, header)
        if row is None:
            continue
        fields, plain = row
        if len(fields) != SWF_FIELDS:
            raise WorkloadError(f"{source}:{number}: {len(fields)} fields, SWF has {SWF_FIELDS}")
        reason = columns.add(fields, _swf_numbers(fields, plain, source, number), source, number)
        if reason:
            trace.skip(reason)
    max_nodes = _header_int(header, "maxnodes")
    max_procs = _header_int(header, "maxprocs")
    per_node = cpus_per_node
    if per_node is None and max_nodes and max_procs:
        per_node = max(1, max_procs // max_nodes)
    if max_nodes:
        trace.node_count = max_nodes
    if per_node:
        trace.node_type = NodeType(cpu=per_node, mem=0, gpu=0)
    trace.jobs = list(columns.jobs(per_node))
    return trace


def _records(text: str) -> Iterator[str]:
    """The lines of `text`, split at "\n" only (a "\r" before it dropped): never at the U+2028,
    U+0085, form feeds and file separators `str.splitlines` also splits at, which a field may hold."""
    start = 0
    size = len(text)
    while start < size:
        end = text.find("\n", start)
        if end < 0:
            end = size
        line = text[start:end]
        yield line[:-1] if line.endswith("\r") else line
        start = end + 1


# What an SWF data line holds: ASCII digits, signs, points, exponents, spaces and tabs.
_SWF_OTHER: Final = re.compile(r"[^0-9eE.+\- \t]")
# One SWF number, as the format writes them (no `nan`, `inf`, `1_000`, or digits of other scripts).
_SWF_NUMBER: Final = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_SWF_SPACE: Final = re.compile(r"[ \t]+")


def _swf_fields(line: str, header: dict[str, str]) -> tuple[list[str], bool] | None:
    """A data line's fields (split at spaces and tabs) and whether it holds nothing but what SWF's numbers
    are written with; None for a blank line or a comment (a header comment `; Key: value` goes into
    `header`, keys in lower case)."""
    if _SWF_OTHER.search(line) is None:  # the common line
        fields = line.split()
        return (fields, True) if fields else None
    stripped = line.strip()
    if not stripped:
        return None
    if stripped.startswith(";"):
        key, _, value = stripped[1:].partition(":")
        header[key.strip().lower()] = value.strip()
        return None
    return _SWF_SPACE.split(line.strip(" \t")), False


def _swf_numbers(fields: Sequence[str], plain: bool, source: str, number: int) -> list[float]:
    """An SWF row's fields as numbers; WorkloadError (naming the source, the line `number` and the
    field) for one that is not a finite number written as SWF writes them.

    A `plain` row holds only digits, signs, points and exponents: what float() reads of it is an SWF
    number, so it is looked at field by field only when float() fails or a value is not finite (or
    the row's sum overflows, which is no error).
    """
    if plain:
        try:
            values = list(map(float, fields))
        except ValueError:
            pass
        else:
            if math.isfinite(sum(values)):
                return values
    values = []
    for index, text in enumerate(fields):
        what = f"{source}:{number}: field {index + 1} ({SWF_FIELD_NAMES[index]}): {shorten(text, 40)!r}"
        try:
            value = float(text)
        except ValueError:
            raise WorkloadError(f"{what} is not a number") from None
        if not math.isfinite(value):
            raise WorkloadError(f"{what} is not a finite number")
        if _SWF_NUMBER.fullmatch(text) is None:  # float() also reads `1_000`, ` 1` and other scripts' digits
            raise WorkloadError(f"{what} is not a number")
        values.append(value)
    return values


class _SwfColumns:
    """The jobs of an SWF trace as columns of numbers while it is read; `jobs` makes them.

    A job's account and user names are made once per group and user id, not once per job.
    """

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.accounts: list[str] = []
        self.users: list[str] = []
        self.submit = array("d")
        self.runtime = array("d")
        self.requested_time = array("d")
        self.processors = array("q")
        self.mem = array("q")
        self._names: dict[tuple[str, float], str] = {}

    def _name(self, prefix: str, number: float, unknown: str) -> str:
        """`g7`, `u123`: one string per id; `unknown` for a negative one (SWF's -1)."""
        name = self._names.get((prefix, number))
        if name is None:
            whole = int(number)
            name = self._names[(prefix, number)] = f"{prefix}{whole}" if whole >= 0 else unknown
        return name

    def add(self, fields: Sequence[str], values: Sequence[float], source: str, number: int) -> str | None:
        """Keep one row's job; the reason it is left out instead, or WorkloadError (naming the source, the
        line `number` and the field) for an amount past MAX_TRES."""
        job, submit, _wait, runtime, procs, _cpu_used, used_mem, _req_procs, req_time, req_mem = values[:10]
        if runtime <= 0:
            return "no run time"
        index = 4 if procs > 0 else 7
        processors = values[index]
        if processors > MAX_TRES:
            raise WorkloadError(
                f"{source}:{number}: field {index + 1} ({SWF_FIELD_NAMES[index]}): "
                f"{shorten(fields[index], 40)} is past {MAX_TRES}"
            )
        cpus = int(processors)
        if cpus <= 0:
            return "no processors"
        memory_kb = req_mem if req_mem > 0 else used_mem
        mebibytes = memory_kb * cpus / 1024 if memory_kb > 0 else 0.0
        if not mebibytes <= MAX_TRES:  # an infinite product too
            index = 9 if req_mem > 0 else 6
            raise WorkloadError(
                f"{source}:{number}: field {index + 1} ({SWF_FIELD_NAMES[index]}): {shorten(fields[index], 40)} "
                f"KB per processor for {cpus} processors is past {MAX_TRES} MiB"
            )
        mem = math.ceil(mebibytes)
        self.ids.append(str(int(job)))
        self.accounts.append(self._name("g", values[12], "g-unknown"))
        self.users.append(self._name("u", values[11], ""))
        self.submit.append(submit)
        self.runtime.append(runtime)
        self.requested_time.append(req_time)
        self.processors.append(cpus)
        self.mem.append(mem)
        return None

    def jobs(self, per_node: int | None) -> Iterator[WorkloadJob]:
        """The jobs, submitted from 0 on; a job larger than one node over ceil(processors / per_node) nodes."""
        first = min(self.submit, default=0.0)
        ceil = math.ceil
        rows = zip(
            self.ids,
            self.accounts,
            self.users,
            self.submit,
            self.runtime,
            self.requested_time,
            self.processors,
            self.mem,
            strict=True,
        )
        for job_id, account, user, submit, runtime, requested, processors, mem in rows:
            nodes = max(1, ceil(processors / per_node)) if per_node else 1
            # The limit: the requested time when the job kept to it, else its run time.
            yield WorkloadJob(
                job_id,
                account,
                user,
                submit - first,
                runtime,
                max(runtime, requested),
                ceil(processors / nodes),
                ceil(mem / nodes),
                0,
                nodes,
            )


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
    # The importers already submit from 0 on: their jobs are not made twice.
    jobs = trace.jobs if first == 0 else [_shift(j, first) for j in trace.jobs]
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
