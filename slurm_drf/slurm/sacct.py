"""Slurm's accounting: each job's allocation, with absolute times, from `sacct`.

Sits beside the CLI source, in two formats with one parser each:

- `sacct --parsable2` (the daemon's): `fetch_allocations` runs one `sacct
  --parsable2 --noheader ... --format=JobIDRaw,Account,Partition,Start,End,
  AllocTRES` (argument list, timeout, the Slurm commands' environment with
  SLURM_TIME_FORMAT=%s, through slurm.execute) and `parse_sacct_pipe` reads
  its lines into `policy.decayed_usage.Allocation`s for the daemon's past
  (trail.past, bootstrapping the decayed usage from slurmdbd). Start and End
  are seconds since the epoch: no local time, no DST fold to guess. A 23rd
  of the JSON's size, read over 30x faster (benchmarks/bench_history.py).
- `sacct --json` (the simulator's importer, sim.importers, which turns the
  records into a workload): `parse_sacct_json` reads data parser 22.05
  (dbv0.0.38: plain numbers, `state.current` a string, `time.limit` in
  minutes, `time.end` 0 while running) to 24.x (numbers wrapped as {"set",
  "infinite", "number"}, `state.current` a list) into `SacctJob`s, and
  `build_allocations` gives their allocations.
- `sacct -P` with its header line (the simulator's other sacct importer):
  `parse_sacct_table` reads whatever columns a site exported, times as
  dates or epoch seconds, into the same `SacctJob`s, steps included.

Both text formats end a record at "\n" only (slurm.parse.lines): a job's
name or account may hold U+2028, U+0085 or a form feed, which Slurm
writes through and `str.splitlines` would split at.

TRES are named as Slurm names them (`cpu`, `mem` in MiB, `node`,
`gres/gpu`, `gres/gpu:a100`, ...) by the one reader of TRES strings,
slurm.parse.amounts.parse_tres_string; typed GPUs without an untyped count also
give `gres/gpu` as their sum. Both formats leave out what never ran by the
same rule (`_allocation`).
"""

from __future__ import annotations

import logging
import operator
import os
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import orjson

from slurm_drf.errors import SlurmReadError, shorten
from slurm_drf.model.types import MAX_TRES
from slurm_drf.policy.decayed_usage import Allocation
from slurm_drf.slurm.cli_source import CommandRunner, build_command_env
from slurm_drf.slurm.execute import run_command
from slurm_drf.slurm.parse.amounts import parse_tres_entries, parse_tres_string
from slurm_drf.slurm.parse.lines import split_lines

logger = logging.getLogger(__name__)

# sacct over a few half-lives of a busy cluster is one slurmdbd query of many
# rows; it runs once per start, so it may take longer than squeue.
SACCT_TIMEOUT: Final = 60.0


@dataclass(frozen=True, slots=True)
class SacctJob:
    """One job allocation as sacct recorded it; times in seconds since the epoch, None when unset."""

    job_id: str  # `1234`, or `1234_5` for a task of array 1234 (`1234.batch`: a step, in sacct -P only)
    account: str | None
    user: str
    partition: str  # where it ran; a comma list for a job that never started
    state: str
    submit: float | None
    start: float | None  # None: never started
    end: float | None  # None: still running (or never started)
    elapsed: float | None  # sacct -P without Elapsed: End - Start
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


def _allocation(
    account: str | None, partition: str, start: float | None, end: float | None, tres: Mapping[str, int]
) -> Allocation | None:
    """What a job held and when; None when it never started, has no account or TRES, or ended as it started."""
    if start is None or not account or not tres:
        return None
    if end is not None and end <= start:
        return None
    return Allocation(account, partition, start, end, tres)


def build_allocations(jobs: Sequence[SacctJob]) -> list[Allocation]:
    """What each job of `sacct --json` held and when; what never ran left out (`_allocation`)."""
    out: list[Allocation] = []
    for job in jobs:
        if job.state == "PENDING":
            continue
        allocation = _allocation(job.account, job.partition, job.start, job.end, job.allocated)
        if allocation is not None:
            out.append(allocation)
    return out


# --- sacct -P with its header: the simulator's trace ----------------------------------

# The columns a trace needs, and one export that has them all.
_TABLE_NEEDS: Final = ("jobid", "account", "submit")
_TABLE_FORMAT: Final = "JobID,Account,User,Submit,Start,End,Elapsed,Timelimit,State,AllocTRES,ReqTRES"
_ELAPSED: Final = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")


def parse_elapsed(text: str) -> float | None:
    """Seconds from Slurm's `[D-][HH:]MM:SS` (Elapsed, Timelimit); None for `UNLIMITED`, `Partition_Limit`, empty."""
    match = _ELAPSED.match(text.strip())
    if match is None:
        return None
    days, hours, minutes, seconds = match.groups()
    return int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)


# A naive time is read as UTC: `(t - _EPOCH).total_seconds()` is what `t.replace(tzinfo=UTC).timestamp()`
# computes, without the copy (a million rows hold three times each).
_EPOCH: Final = datetime(1970, 1, 1)


def _table_time(text: str) -> float | None:
    """Seconds since the epoch from `2026-11-30T01:00:00` (read as UTC) or epoch digits; None for Unknown/None.

    ASCII digits are seconds since the epoch (SLURM_TIME_FORMAT=%s), but for
    eight, which ISO 8601 reads as a date (`20261130`) when it is one. A
    field's padding is stripped before (`_TableReader.job`).
    """
    if text.isdigit() and text.isascii() and len(text) != 8:
        return float(text)
    try:
        parsed = datetime.fromisoformat(text)  # first: a million rows hold three times each
    except ValueError:
        if not text or text in ("Unknown", "None", "N/A"):
            return None
        if text.isdigit() and text.isascii():
            return float(text)
        raise ValueError(f"expected a time such as 2026-11-30T01:00:00, got {text!r}") from None
    if parsed.tzinfo is None:
        return (parsed - _EPOCH).total_seconds()
    return parsed.timestamp()


def _table_columns(header_line: str, where: str) -> tuple[list[str], dict[str, int]]:
    """The header's column names, and each lower-cased name's index; SlurmReadError (saying `where`: the
    source and the header's line) when a trace cannot be read."""
    header = [name.strip() for name in header_line.rstrip("|").split("|")]
    columns = {name.lower(): index for index, name in enumerate(header)}
    missing = [name for name in _TABLE_NEEDS if name not in columns]
    if missing:
        raise SlurmReadError(f"{where}: header lacks {', '.join(missing)}; run sacct -P --format={_TABLE_FORMAT}")
    if "elapsed" not in columns and not ("start" in columns and "end" in columns):
        raise SlurmReadError(f"{where}: header needs Elapsed, or Start and End")
    if "alloctres" not in columns and "reqtres" not in columns:
        raise SlurmReadError(f"{where}: header needs AllocTRES or ReqTRES")
    return header, columns


# The columns a SacctJob is read from, in the order `_TableReader.job` takes them.
_JOB_COLUMNS: Final = (
    "jobid",
    "account",
    "user",
    "partition",
    "state",
    "submit",
    "start",
    "end",
    "elapsed",
    "timelimit",
    "nnodes",
    "alloctres",
    "reqtres",
)


class _TableReader:
    """The rows of one table as SacctJobs: each row's fields picked by the header's columns, and what
    rows repeat (TRES strings, run times, limits) read once each.

    The TRES mappings are shared between the rows that wrote the same string: nobody writes to them.
    """

    def __init__(self, columns: Mapping[str, int], width: int) -> None:
        # A column the export lacks is read from the empty field `job` appends to each row (at `width`).
        self.pick = operator.itemgetter(*(columns.get(name, width) for name in _JOB_COLUMNS))
        self.tres: dict[tuple[str, str], dict[str, int]] = {}
        self.durations: dict[str, float | None] = {}

    def tres_of(self, text: str, field: str) -> dict[str, int]:
        """A TRES column, every entry an amount (ValueError naming the column and the entry)."""
        if not text:
            return {}
        key = (text, field)
        amounts = self.tres.get(key)
        if amounts is None:
            amounts = self.tres[key] = parse_tres_entries(text, field)[0]
        return amounts

    def duration_of(self, text: str) -> float | None:
        """Elapsed or Timelimit in seconds (`parse_elapsed`)."""
        if text in self.durations:
            return self.durations[text]
        seconds = self.durations[text] = parse_elapsed(text)
        return seconds

    def job(self, fields: list[str]) -> SacctJob:
        """One row's fields (as many as the header's, padding stripped) as a SacctJob; ValueError for a
        time or TRES amount it cannot read."""
        fields.append("")
        (
            job_id,
            account,
            user,
            partition,
            state,
            submit_text,
            start_text,
            end_text,
            elapsed_text,
            limit_text,
            nodes_text,
            allocated_text,
            requested_text,
        ) = self.pick(fields)
        submit, start, end = _table_time(submit_text), _table_time(start_text), _table_time(end_text)
        elapsed = self.duration_of(elapsed_text)
        if elapsed is None and start is not None and end is not None:
            elapsed = end - start
        limit = self.duration_of(limit_text)
        nodes = int(nodes_text) if nodes_text.isdigit() and nodes_text.isascii() else None
        allocated = self.tres_of(allocated_text, "AllocTRES")
        requested = self.tres_of(requested_text, "ReqTRES")
        # By position, in the fields' order: a third faster than by keyword, a million times.
        return SacctJob(
            job_id,
            account or None,
            user,
            partition,
            state,
            submit,
            start,
            end,
            elapsed,
            limit,
            nodes,
            allocated,
            requested,
        )


def parse_sacct_table(text: str, source: str = "sacct -P") -> list[SacctJob]:
    """Every row of `sacct -P` (or `--parsable2`) output with its header line, job steps included.

    The columns may be any of sacct's, in any order: a trace needs JobID,
    Account, Submit, Elapsed (or Start and End) and AllocTRES or ReqTRES.
    A row that cannot be read (its number of fields, a time, a TRES amount)
    is a SlurmReadError naming the source, the line and the job.
    """
    # Records end at "\n" only (slurm.parse.lines); a line's number counts the blank ones too.
    lines = split_lines(text)
    first = next((index for index, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise SlurmReadError(f"{source}: empty; expected sacct -P output with a header line")
    header, columns = _table_columns(lines[first], f"{source}:{first + 1}")
    width = len(header)
    reader = _TableReader(columns, width)
    jobs: list[SacctJob] = []
    for number, line in enumerate(lines[first + 1 :], start=first + 2):
        if not line.strip():
            continue
        # sacct -P quotes nothing: every "|" separates two fields. Only spaces and tabs are padding
        # (sacct writes none): a name may end in U+0085 or U+2028, which str.strip() would drop.
        fields = line.split("|")
        if " " in line or "\t" in line:
            fields = [field.strip(" \t") for field in fields]
        if len(fields) == width + 1 and fields[-1] == "":
            fields.pop()  # a line may end in the separator (sacct -p): one empty field more
        if len(fields) != width:
            raise SlurmReadError(f"{source}:{number}: {len(fields)} fields, the header has {width}")
        try:
            jobs.append(reader.job(fields))
        except ValueError as error:
            raise SlurmReadError(f"{source}:{number}: job {fields[columns['jobid']]}: {error}") from error
    return jobs


# --- sacct --parsable2: the daemon's bootstrap ----------------------------------------

# The columns the daemon asks for, in this order.
SACCT_FIELDS: Final = ("JobIDRaw", "Account", "Partition", "Start", "End", "AllocTRES")
# How sacct writes a time it does not have: `Unknown` (the start of a job that
# never started, the end of a running one; measured on 22.05), `None`.
_UNSET_TIMES: Final = frozenset({"", "Unknown", "None"})


# The latest time a date can say (9999-12-31T23:59:59Z): a Start or End past it is no time of a job.
MAX_EPOCH: Final = 253_402_300_799
_DIGITS: Final = re.compile(r"-?[0-9]+")


class _BadLine(ValueError):
    """A line of the right shape whose values no job can have: it is left out, the others kept."""


def _epoch(text: str, where: str, column: str) -> float | None:
    """Seconds since the epoch (SLURM_TIME_FORMAT=%s); None when sacct has no such time.

    Not digits: SlurmReadError (the answer is not in the format asked for).
    Digits out of 0 to MAX_EPOCH: _BadLine (this line's record is bad).
    """
    if text in _UNSET_TIMES:
        return None
    if _DIGITS.fullmatch(text) is None:
        raise SlurmReadError(
            f"{where}: {column} {text!r} is not seconds since the epoch (was SLURM_TIME_FORMAT=%s lost?)"
        )
    if len(text) > len(str(MAX_EPOCH)) or not 0 <= int(text) <= MAX_EPOCH:
        raise _BadLine(f"{column} {shorten(text, 60)} is not a time from 0 to {MAX_EPOCH} (9999-12-31)")
    return float(text)


def _line_tres(text: str) -> Mapping[str, int]:
    """AllocTRES read by slurm.parse.amounts; _BadLine for an amount no job can hold (past MAX_TRES)."""
    try:
        tres = parse_tres_string(text)
    except (ValueError, OverflowError):  # an amount of hundreds of digits
        raise _BadLine(f"AllocTRES {shorten(text, 80)!r} holds an amount past {MAX_TRES}") from None
    for name, amount in tres.items():
        if not 0 <= amount <= MAX_TRES:
            raise _BadLine(f"AllocTRES {shorten(text, 80)!r}: {name}={amount} is not from 0 to {MAX_TRES}")
    return tres


@dataclass(frozen=True, slots=True)
class SacctAnswer:
    """What `sacct --parsable2` answered: the allocations, and each line left out with why."""

    allocations: list[Allocation]
    # (the line, what is wrong with it: names the source, the line's number and its job)
    skipped: list[tuple[str, str]]


def parse_sacct_pipe(text: str, source: str = "sacct --parsable2") -> list[Allocation]:
    """Every allocation in `sacct --parsable2 --noheader --format=<SACCT_FIELDS>` output with epoch times
    (`parse_sacct_answer`, without the lines it left out)."""
    return parse_sacct_answer(text, source).allocations


def parse_sacct_answer(text: str, source: str = "sacct --parsable2") -> SacctAnswer:
    """Every allocation in `sacct --parsable2 --noheader --format=<SACCT_FIELDS>` output with epoch times.

    Jobs that never started (Start `Unknown`), ended as they started (a job
    cancelled while pending) or hold no TRES are left out, as
    `build_allocations` leaves them out of the JSON. A line that is not six
    fields, or a time that is not seconds since the epoch, is a
    SlurmReadError naming the line: the answer is not what was asked for.
    A line of that shape whose record no job can have (a time of 400
    digits, an amount past MAX_TRES) is left out, said in `skipped`, and
    the others are kept: one bad record does not lose the answer.
    """
    allocations: list[Allocation] = []
    skipped: list[tuple[str, str]] = []
    # Jobs share a few AllocTRES strings: each is read once (the mappings are not written to).
    tres_of: dict[str, Mapping[str, int]] = {}
    # Records end at "\n" only (slurm.parse.lines): a field may hold U+2028, U+0085 or a form feed.
    for number, line in enumerate(split_lines(text), start=1):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != len(SACCT_FIELDS):
            expected = "|".join(SACCT_FIELDS)
            raise SlurmReadError(
                f"{source}: line {number}: {len(fields)} fields, expected {len(SACCT_FIELDS)} ({expected})"
            )
        job_id, account, partition, start_text, end_text, tres_text = fields
        where = f"{source}: line {number}: job {shorten(job_id, 40)}"
        try:
            start = _epoch(start_text, where, "Start")
            end = _epoch(end_text, where, "End")
            tres = tres_of.get(tres_text)
            if tres is None:
                tres = tres_of[tres_text] = _line_tres(tres_text)
        except _BadLine as error:
            skipped.append((line, f"{where}: {error}"))
            continue
        allocation = _allocation(account, partition, start, end, tres)
        if allocation is not None:
            allocations.append(allocation)
    return SacctAnswer(allocations, skipped)


def _sacct_time(moment: float) -> str:
    """-S in the local time zone, as sacct reads it: 22.05 refuses epoch seconds
    (`Invalid time specification`, measured). A DST fold can move it by an hour,
    at the far end of the window where use weighs under 2^-5 of the newest."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(moment))


def build_sacct_argv(start: float) -> list[str]:
    """Every job allocation (-X, of every user) that was running at some time from `start` to now.

    With -S and -E, `--state=RUNNING` selects the jobs that ran in that
    window whatever their final state (slurmdbd's special case for
    RUNNING), and leaves out jobs that never started (measured on 22.05;
    a job cancelled while pending has Start = End and is still listed).
    """
    return [
        "sacct",
        "--parsable2",
        "--noheader",
        "--allusers",
        "--allocations",
        "--starttime",
        _sacct_time(start),
        "--endtime",
        "now",
        "--state",
        "RUNNING",
        "--format=" + ",".join(SACCT_FIELDS),
    ]


def build_sacct_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The Slurm commands' environment (cli_source.build_command_env) for this one sacct.

    SLURM_TIME_FORMAT=%s makes Start and End seconds since the epoch (22.05
    and later); sacct's own defaults (SACCT_FORMAT, SACCT_FEDERATION, ...)
    are dropped so that the answer is what was asked for.
    """
    env = {k: v for k, v in build_command_env(environ).items() if not k.startswith("SACCT_")}
    env["SLURM_TIME_FORMAT"] = "%s"
    return env


def fetch_allocations(
    start: float,
    *,
    timeout: float = SACCT_TIMEOUT,
    runner: CommandRunner = run_command,
    environ: Mapping[str, str] | None = None,
) -> list[Allocation]:
    """The allocations slurmdbd recorded from `start` to now; SlurmReadError when sacct fails or its answer is bad."""
    argv = build_sacct_argv(start)
    env = build_sacct_env(os.environ if environ is None else environ)
    answer = parse_sacct_answer(runner(argv, timeout, env=env), shlex.join(argv))
    _report_skipped(answer.skipped)
    return answer.allocations


# The bad lines logged so far, by their text: each once per process, though
# every later sacct over the same window answers it again.
_reported_lines: set[str] = set()
# Beyond this many the set stops growing and further bad lines are logged at debug.
MAX_REPORTED_LINES: Final = 10_000


def _report_skipped(skipped: Sequence[tuple[str, str]]) -> None:
    for line, message in skipped:
        if line in _reported_lines:
            continue
        if len(_reported_lines) >= MAX_REPORTED_LINES:
            logger.debug("%s; the line is left out", message)
            continue
        _reported_lines.add(line)
        logger.warning("%s; the line is left out", message)
