"""`slurm-drf audit`: the history's tables queried and shown (table, JSON, CSV). Reads only."""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import logging
import operator
import os
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from slurm_drf.config.durations import SINCE_SYNTAX, parse_duration
from slurm_drf.errors import HistoryError, InputError, StateError
from slurm_drf.model.codec import format_time, show
from slurm_drf.trail.history_db import (
    AUDIT_FORMATS,
    AUDIT_TABLES,
    READABLE_VERSIONS,
    RECLAIMS_VERSION,
    history_path,
    open_history_readonly,
    schema_version,
)
from slurm_drf.trail.text import csv_cell, render_table

logger = logging.getLogger(__name__)


def parse_since(text: str, now: float) -> float:
    """Seconds since the epoch from `7d`, `12h`, `30m`, `2w`, a date (`2026-11-30`, UTC) or an ISO time."""
    with contextlib.suppress(ValueError):
        return now - parse_duration(text, SINCE_SYNTAX)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InputError(
            f"--since {text!r}: expected a duration back from now (7d, 12h, 30m, 2w), a date "
            "(2026-11-30) or a time (2026-11-30T02:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@dataclass(frozen=True, slots=True)
class AuditQuery:
    table: str = "writes"
    since: float | None = None
    account: str | None = None
    job: str | None = None
    pool: str | None = None
    limit: int = 0


WRITE_COLUMNS: Final = (
    "time",
    "cycle",
    "job",
    "account",
    "user",
    "pool",
    "mode",
    "old",
    "new",
    "level",
    "order",
    "tie",
    "outcome",
    "message",
    "own_nice",
)
CYCLE_COLUMNS: Final = (
    "time",
    "cycle",
    "taken_at",
    "cluster",
    "mode",
    "dry_run",
    "epoch",
    "pending",
    "writes_planned",
    "deferred",
    "read_seconds",
    "seconds",
)
ERROR_COLUMNS: Final = ("time", "kind", "message")
RECLAIM_COLUMNS: Final = (
    "time",
    "cycle",
    "pool",
    "job",
    "account",
    "user",
    "for_job",
    "for_account",
    "share",
    "for_share",
    "nodes",
    "lost",
    "outcome",
    "message",
)


def query_history(connection: sqlite3.Connection, query: AuditQuery, source: str = "history") -> list[dict[str, Any]]:
    """Records of one table, oldest first, as dicts with the columns shown by `slurm-drf audit`.

    A row no slurm-drf wrote (a time that is no date, JSON that is not an
    object of numbers, a BLOB) is left out and logged, naming `source` (the
    file) and the row: the rest of the audit is still worth showing.
    """
    check_query(query)
    if query.table == "reclaims" and schema_version(connection) < RECLAIMS_VERSION:
        return []  # a file the daemon has not migrated yet holds none
    _, _, order, select = _TABLE_SQL[query.table]
    where, parameters = _where(query)
    if query.limit > 0:
        # The newest `limit` rows, shown oldest first like the rest.
        descending = ", ".join(f"{column} DESC" for column in order.split(", "))
        rows = connection.execute(
            f"{select}{where} ORDER BY {descending} LIMIT ?", [*parameters, query.limit]
        ).fetchall()
        rows.reverse()
    else:
        rows = connection.execute(f"{select}{where} ORDER BY {order}", parameters).fetchall()
    records: list[dict[str, Any]] = []
    bad: list[str] = []
    for row in rows:
        try:
            records.append(_record(query.table, row[1:]))
        except ValueError as error:
            bad.append(f"{_row_name(query.table, row)}: {error}")
    for line in bad[:MAX_BAD_ROWS_LOGGED]:
        logger.warning("%s: %s; the row is left out", source, line)
    if len(bad) > MAX_BAD_ROWS_LOGGED:
        logger.warning("%s: %d more bad %s row(s) left out", source, len(bad) - MAX_BAD_ROWS_LOGGED, query.table)
    return records


def recorded_reclaims(
    state_dir: str | os.PathLike[str], jobs: Sequence[str] = (), since: float | None = None
) -> list[dict[str, Any]]:
    """The history's reclaims (audit's records, oldest first) naming any of `jobs` (either job; all
    when none is given) since `since`, read-only; none from a missing or older history.

    For `explain` and `report`, which go on without them: a history that cannot be read is logged.
    """
    path = history_path(state_dir)
    if not path.exists():
        return []
    try:
        connection = open_history_readonly(path, readable=(1, *READABLE_VERSIONS))
    except (StateError, HistoryError) as error:
        logger.warning("%s; its reclaims are not shown", error)
        return []
    try:
        if schema_version(connection) < RECLAIMS_VERSION:
            return []
        found: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        wanted: list[str | None] = [*dict.fromkeys(jobs)] or [None]
        for job in wanted:
            for record in query_history(connection, AuditQuery("reclaims", since=since, job=job), str(path)):
                found.setdefault(
                    (record["time"], str(record["job"]), str(record["for_job"]), str(record["cycle"])), record
                )
    except sqlite3.Error as error:
        logger.warning("%s: cannot read the history: %s; its reclaims are not shown", path, error)
        return []
    finally:
        connection.close()
    return sorted(found.values(), key=lambda r: str(r["time"]))


# Per audit table: its time column, the alias its account and pool are read through, its
# order, and its SELECT (the first column names the row in a message; the rest are the record's).
_TABLE_SQL: Final[Mapping[str, tuple[str, str, str, str]]] = {
    "writes": (
        "w.time",
        "w",
        "w.time, w.id",
        "SELECT w.id, w.time, w.cycle_id, w.job_id, w.account, w.user, w.pool, w.mode, w.old_value, "
        "w.new_value, w.level, w.position, w.tie, w.outcome, w.message, w.user_nice FROM writes w",
    ),
    "shares": (
        "c.time",
        "s",
        "c.time, s.cycle_id, s.pool, s.rank",
        "SELECT s.cycle_id, c.time, s.cycle_id, s.pool, s.account, s.rank, s.weight, s.running_jobs, "
        "s.pending_jobs, s.dominant_resource, s.dominant_share, s.weighted_share, s.usage, s.shares "
        "FROM shares s JOIN cycles c ON c.id = s.cycle_id",
    ),
    "cycles": (
        "c.time",
        "c",
        "c.time, c.id",
        "SELECT c.id, c.time, c.id, c.taken_at, c.cluster, c.mode, c.dry_run, c.epoch, c.pending_jobs, "
        "c.writes_planned, c.deferred, c.read_seconds, c.seconds FROM cycles c",
    ),
    "errors": ("e.time", "e", "e.time, e.id", "SELECT e.id, e.time, e.kind, e.message FROM errors e"),
    "reclaims": (
        "r.time",
        "r",
        "r.time, r.id",
        "SELECT r.id, r.time, r.cycle_id, r.pool, r.job_id, r.account, r.user, r.claim_job, "
        "r.claim_account, r.victim_share, r.claim_share, r.nodes, r.lost, r.outcome, r.message FROM reclaims r",
    ),
}


def _where(query: AuditQuery) -> tuple[str, list[Any]]:
    """The query's WHERE clause (empty without a filter) and its parameters."""
    time_column, prefix, _, _ = _TABLE_SQL[query.table]
    conditions: list[str] = []
    parameters: list[Any] = []
    if query.since is not None:
        conditions.append(f"{time_column} >= ?")
        parameters.append(query.since)
    if query.account is not None:
        conditions.append(f"{prefix}.account = ?")
        parameters.append(query.account)
    if query.pool is not None:
        conditions.append(f"{prefix}.pool = ?")
        parameters.append(query.pool)
    if query.job is not None:
        # A reclaim names two jobs: the one requeued and the one it made room for.
        conditions.append("(r.job_id = ? OR r.claim_job = ?)" if query.table == "reclaims" else "w.job_id = ?")
        parameters.extend([query.job] * (2 if query.table == "reclaims" else 1))
    return (f" WHERE {' AND '.join(conditions)}" if conditions else ""), parameters


# SQLite's LIMIT is a signed 64-bit integer.
MAX_AUDIT_LIMIT: Final = 2**63 - 1


def check_query(query: AuditQuery) -> None:
    """InputError for a query no table answers: a filter the table has not, a limit SQLite cannot take."""
    if query.table not in AUDIT_TABLES:
        raise InputError(f"unknown history table {query.table!r}; expected one of {', '.join(AUDIT_TABLES)}")
    if query.job is not None and query.table not in ("writes", "reclaims"):
        raise InputError(f"--job selects writes or reclaims; {query.table} are not per job")
    if query.account is not None and query.table not in ("writes", "shares", "reclaims"):
        raise InputError(f"--account selects writes, shares or reclaims; {query.table} are not per account")
    if query.pool is not None and query.table not in ("writes", "shares", "reclaims"):
        raise InputError(f"--pool selects writes, shares or reclaims; {query.table} are not per pool")
    if not 0 <= query.limit <= MAX_AUDIT_LIMIT:
        raise InputError(f"--limit {show(query.limit)}: expected 0 (all) to {MAX_AUDIT_LIMIT} rows")


# Bad rows logged one by one per query; the rest are counted.
MAX_BAD_ROWS_LOGGED: Final = 20


def _row_name(table: str, row: Sequence[Any]) -> str:
    """How a message names a row: by its id, or a share by its cycle, pool and account."""
    if table == "shares":
        return f"shares of cycle {show(row[0])}, pool {show(row[3])}, account {show(row[4])}"
    if table == "cycles":
        return f"cycle {show(row[0])}"
    return f"{table} row {show(row[0])}"


def _record(table: str, row: Sequence[Any]) -> dict[str, Any]:
    """One row as `audit` shows it; ValueError naming the column when it holds what no slurm-drf writes."""
    names = {
        "writes": WRITE_COLUMNS,
        "cycles": CYCLE_COLUMNS,
        "errors": ERROR_COLUMNS,
        "reclaims": RECLAIM_COLUMNS,
    }.get(table, SHARE_COLUMNS)
    if bytes in map(type, row):
        for name, value in zip(names, row, strict=True):
            if isinstance(value, bytes):
                raise ValueError(f"{name} is a BLOB of {len(value)} byte(s), not text or a number")
    record = dict(zip(names, row, strict=True))
    if table == "writes":
        record["tie"] = bool(record["tie"])
    elif table == "cycles":
        record["dry_run"] = bool(record["dry_run"])
    elif table == "reclaims":
        record["lost"] = _amounts(record["lost"], "lost")
    elif table == "shares":
        record["usage"] = _amounts(record["usage"], "usage")
        record["shares"] = _amounts(record["shares"], "shares")
    record["time"] = _shown_time(record["time"])
    return record


SHARE_COLUMNS: Final = (
    "time",
    "cycle",
    "pool",
    "account",
    "rank",
    "weight",
    "running",
    "pending",
    "dominant",
    "dominant_share",
    "weighted_share",
    "usage",
    "shares",
)


def _shown_time(moment: object) -> str:
    """A row's time as audit shows it; ValueError when it is no number or no date (past the year 9999)."""
    if isinstance(moment, bool) or not isinstance(moment, int | float):
        raise ValueError(f"time {show(moment)} is not a number")
    try:
        return _format_time(float(moment))
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"time {show(moment)} is not a time a date can say") from None


# The writes of one cycle share its time: a day of them is 30,000 rows and 1,440 times.
_format_time: Final = functools.lru_cache(maxsize=4096)(format_time)


def _amounts(text: object, column: str) -> dict[str, Any]:
    """A usage or shares column: a JSON object of numbers; ValueError otherwise."""
    try:
        data = orjson.loads(text) if isinstance(text, str) else None
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or not all(
        isinstance(value, int | float) and not isinstance(value, bool) for value in data.values()
    ):
        raise ValueError(f"{column} {show(text)} is not a JSON object of numbers")
    return data


# --------------------------------------------------------------------------
# Rendering query results (pure)


def _flatten(record: Mapping[str, Any]) -> dict[str, Any]:
    """Nested per-resource mappings as `usage:cpu`, `share:cpu` columns."""
    flat: dict[str, Any] = {}
    for key, value in record.items():
        # Plain values first: the Mapping ABC's check is slow, and a day of writes asks it 400k times.
        if not isinstance(value, str | int | float | None) and isinstance(value, Mapping):
            label = "share" if key == "shares" else key
            flat.update({f"{label}:{name}": amount for name, amount in value.items()})
        else:
            flat[key] = value
    return flat


def _columns(records: Sequence[Mapping[str, Any]]) -> list[str]:
    columns: dict[str, None] = {}
    for record in records:
        columns.update(dict.fromkeys(record))
    return list(columns)


def render_audit_json(records: Sequence[Mapping[str, Any]]) -> str:
    return orjson.dumps(list(records), option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE).decode()


def render_audit_csv(records: Sequence[Mapping[str, Any]]) -> str:
    flat = [_flatten(r) for r in records]
    columns = _columns(flat)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for record in flat:
        writer.writerow(
            [
                "" if record.get(c) is None else repr(v) if isinstance(v := record.get(c), float) else csv_cell(v)
                for c in columns
            ]
        )
    return out.getvalue()


def render_audit_table(records: Sequence[Mapping[str, Any]], table: str = "writes") -> str:
    if not records:
        return f"no {table} recorded for this query\n"
    # Only shares nest (usage, shares per resource); the records of the other tables are flat already.
    first = records[0].keys()
    nested = any(not isinstance(value, str | int | float | None) for value in records[0].values())
    if nested or any(record.keys() != first for record in records):
        flat = [_flatten(r) for r in records]
        # The table leaves usage out (it is in JSON and CSV): shares say it relative to the pool.
        columns = [c for c in _columns(flat) if not c.startswith("usage:")]
        rows: list[Sequence[Any]] = [[record.get(c) for c in columns] for record in flat]
    else:
        # Flat records of one table have the same columns: read them by position, in C.
        columns = list(first)
        pick = operator.itemgetter(*columns)
        rows = list(map(pick, records)) if len(columns) > 1 else [[pick(record)] for record in records]
    return render_table(columns, rows) + "\n"


def render_audit(records: Sequence[Mapping[str, Any]], fmt: str, table: str = "writes") -> str:
    if fmt == "json":
        return render_audit_json(records)
    if fmt == "csv":
        return render_audit_csv(records)
    if fmt == "table":
        return render_audit_table(records, table)
    raise ValueError(f"unknown audit format {fmt!r}; expected one of {', '.join(AUDIT_FORMATS)}")
