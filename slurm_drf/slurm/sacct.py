"""Slurm's accounting: `sacct --json` -> each job's record and allocation, with absolute times.

Sits beside the CLI source: `fetch_allocations` runs one `sacct` (argument
list, timeout, through slurm.execute) and the pure functions below read
its JSON. Two readers use them: the daemon's past (trail.past, bootstrapping
the decayed usage from slurmdbd) and the simulator's importer
(sim.importers, which turns the records into a workload).

Formats: data parser 22.05 (dbv0.0.38: plain numbers, `state.current` a
string, `time.limit` in minutes, `time.end` 0 while running) to 24.x
(numbers wrapped as {"set", "infinite", "number"}, `state.current` a list).
TRES come from sacct's list of {"type", "name", "count"} and are named as
Slurm names them (`cpu`, `mem` in MiB, `node`, `gres/gpu`,
`gres/gpu:a100`, ...); typed GPUs without an untyped count also give
`gres/gpu` as their sum (slurm.parse.parse_tres_string).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from slurm_drf.errors import SlurmReadError
from slurm_drf.policy.history import Allocation
from slurm_drf.slurm.cli_source import CommandRunner
from slurm_drf.slurm.execute import run_command
from slurm_drf.slurm.parse import parse_tres_string

# sacct over a few half-lives of a busy cluster is one slurmdbd query of many
# rows; it runs once per start, so it may take longer than squeue.
SACCT_TIMEOUT: Final = 60.0


@dataclass(frozen=True, slots=True)
class SacctJob:
    """One job allocation as sacct recorded it; times in seconds since the epoch, None when unset."""

    job_id: str  # `1234`, or `1234_5` for a task of array 1234
    account: str | None
    user: str
    partition: str  # where it ran; a comma list for a job that never started
    state: str
    submit: float | None
    start: float | None  # None: never started
    end: float | None  # None: still running (or never started)
    elapsed: float | None
    limit: float | None  # seconds; None: unlimited or unset
    nodes: int | None
    allocated: Mapping[str, int]  # TRES by Slurm's name; empty when sacct gave none
    requested: Mapping[str, int]


def _unwrap(value: object) -> object:
    """Slurm >= 23.02 writes numbers that may be unset as {"set", "infinite", "number"}."""
    if isinstance(value, Mapping) and "number" in value:
        if not value.get("set", True) or value.get("infinite", False):
            return None
        return value["number"]
    return value


def sacct_number(value: object) -> float | None:
    """A number from sacct's JSON, plain or wrapped; None when unset, infinite or not a number."""
    value = _unwrap(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def parse_sacct_tres(entries: object) -> dict[str, int]:
    """TRES by Slurm's name from sacct's list of {"type", "name", "id", "count"}; entries without a count left out."""
    if not isinstance(entries, list):
        return {}
    items: list[str] = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        count = sacct_number(entry.get("count"))
        kind = str(entry.get("type") or "").lower()
        if count is None or not kind:
            continue
        name = str(entry.get("name") or "").lower()
        items.append(f"{kind}/{name}={int(count)}" if name else f"{kind}={int(count)}")
    # The list written as sacct -P writes AllocTRES: one reader of TRES strings.
    return parse_tres_string(",".join(items))


def _state(record: Mapping[str, Any]) -> str:
    state = record.get("state")
    current = state.get("current") if isinstance(state, Mapping) else state
    if isinstance(current, list):
        return str(current[0]) if current else ""
    return str(current or "")


def _mapping(record: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = record.get(key)
    return value if isinstance(value, Mapping) else {}


def _job_id(record: Mapping[str, Any], where: str) -> str:
    job_number = sacct_number(record.get("job_id"))
    if job_number is None:
        raise SlurmReadError(f"{where}: missing job_id")
    array = _mapping(record, "array")
    array_job = sacct_number(array.get("job_id"))
    array_task = sacct_number(array.get("task_id"))
    if array_job and array_task is not None:
        return f"{int(array_job)}_{int(array_task)}"
    return str(int(job_number))


def _time(times: Mapping[str, Any], key: str) -> float | None:
    """A time of sacct's `time` object; 0 (sacct's unset, e.g. the end of a running job) is None."""
    value = sacct_number(times.get(key))
    return value if value else None


def parse_sacct_json(text: str | bytes, source: str = "sacct --json") -> list[SacctJob]:
    """Every job allocation of `sacct --json` output (steps are nested in it and left out)."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        raise SlurmReadError(f"{source}: not JSON: {error}") from error
    if not isinstance(data, Mapping) or not isinstance(data.get("jobs"), list):
        raise SlurmReadError(f"{source}: expected an object with a 'jobs' list (sacct --json)")
    jobs: list[SacctJob] = []
    for index, record in enumerate(data["jobs"]):
        where = f"{source}: jobs[{index}]"
        if not isinstance(record, Mapping):
            raise SlurmReadError(f"{where}: expected an object")
        job_id = _job_id(record, where)
        times = _mapping(record, "time")
        tres = _mapping(record, "tres")
        limit_minutes = sacct_number(times.get("limit"))
        nodes = sacct_number(record.get("allocation_nodes"))
        account = record.get("account")
        jobs.append(
            SacctJob(
                job_id=job_id,
                account=str(account) if account else None,
                user=str(record.get("user") or ""),
                partition=str(record.get("partition") or ""),
                state=_state(record),
                submit=_time(times, "submission"),
                start=_time(times, "start"),
                end=_time(times, "end"),
                elapsed=sacct_number(times.get("elapsed")),
                limit=limit_minutes * 60 if limit_minutes is not None else None,
                nodes=int(nodes) if nodes else None,
                allocated=parse_sacct_tres(tres.get("allocated")),
                requested=parse_sacct_tres(tres.get("requested")),
            )
        )
    return jobs


def build_allocations(jobs: Sequence[SacctJob]) -> list[Allocation]:
    """What each job held and when: jobs that never started, without an account or allocated TRES left out."""
    out: list[Allocation] = []
    for job in jobs:
        if job.start is None or job.state == "PENDING" or not job.account or not job.allocated:
            continue
        if job.end is not None and job.end <= job.start:
            continue
        out.append(Allocation(job.account, job.partition, job.start, job.end, job.allocated))
    return out


def _sacct_time(moment: float) -> str:
    """sacct reads -S/-E in the local time zone, like the daemon's clock shown to people."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(moment))


def build_sacct_argv(start: float) -> list[str]:
    """Every job allocation (-X, of every user) that was running at some time from `start` to now.

    With -S and -E, `--state=RUNNING` selects the jobs that ran in that
    window whatever their final state (slurmdbd's special case for
    RUNNING), and leaves out jobs that never started (measured on 22.05).
    """
    return [
        "sacct",
        "--json",
        "--allusers",
        "--allocations",
        "--starttime",
        _sacct_time(start),
        "--endtime",
        "now",
        "--state",
        "RUNNING",
    ]


def fetch_allocations(
    start: float, *, timeout: float = SACCT_TIMEOUT, runner: CommandRunner = run_command
) -> list[Allocation]:
    """The allocations slurmdbd recorded from `start` to now; SlurmReadError when sacct fails or its JSON is bad."""
    argv = build_sacct_argv(start)
    text = runner(argv, timeout)
    return build_allocations(parse_sacct_json(text, shlex.join(argv)))
