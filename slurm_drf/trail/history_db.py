"""History: every cycle's shares and every value written, in SQLite.

Sits beside the daemon: `AuditRecorder` is a CycleObserver the service
loop tells about every cycle (and every failed one); `slurm-drf audit`
reads the same file through `query_*`. The database is
`history.sqlite` in the state directory, in WAL mode so the CLI reads while
the daemon writes, with a versioned schema (`PRAGMA user_version`, one
migration per version, each applied in one transaction) and a retention
of `retention_days` days.

What is recorded: one `cycles` row per cycle (dry runs too, flagged), one
`shares` row per (cycle, pool, account) with the per-resource usage and
shares as JSON, one `writes` row per value sent to Slurm with its outcome
(applied, gone, failed) and one `errors` row per failed cycle. A dry run
wrote nothing, so it records no writes. Recording never stops the daemon:
a database that cannot be written is logged and the cycle goes on.

The query and render functions are pure apart from the connection they are
handed; `parse_since` takes `now` from the caller.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import logging
import operator
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson

from slurm_drf import failpoints
from slurm_drf.config.durations import SINCE_SYNTAX, parse_duration
from slurm_drf.cycle.recall import LedgerWrite
from slurm_drf.cycle.store import StateStore
from slurm_drf.errors import DrfError, HistoryError, InputError, StateError
from slurm_drf.files import check_regular
from slurm_drf.model.codec import format_time, show
from slurm_drf.policy.state import is_label_nice
from slurm_drf.trail.plan_output import ordered_job_count
from slurm_drf.trail.text import csv_cell, render_table

if TYPE_CHECKING:
    from slurm_drf.cycle.run import CycleReport

logger = logging.getLogger(__name__)

HISTORY_FILE: Final = "history.sqlite"
OUTCOMES: Final = ("applied", "gone", "failed")
AUDIT_FORMATS: Final = ("table", "json", "csv")
AUDIT_TABLES: Final = ("writes", "shares", "cycles", "errors")
# Retention runs at most this often (seconds): deleting is cheap, but not free.
PRUNE_EVERY: Final = 3600.0

# One entry per schema version: the statements that take version N to N+1.
# Never edit a released entry; append a new one.
MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """CREATE TABLE cycles (
            id INTEGER PRIMARY KEY,
            time REAL NOT NULL,
            taken_at TEXT NOT NULL,
            cluster TEXT NOT NULL,
            mode TEXT NOT NULL,
            dry_run INTEGER NOT NULL,
            epoch INTEGER NOT NULL,
            pending_jobs INTEGER NOT NULL,
            writes_planned INTEGER NOT NULL,
            deferred INTEGER NOT NULL,
            read_seconds REAL NOT NULL,
            seconds REAL NOT NULL)""",
        "CREATE INDEX cycles_time ON cycles(time)",
        """CREATE TABLE shares (
            cycle_id INTEGER NOT NULL REFERENCES cycles(id) ON DELETE CASCADE,
            pool TEXT NOT NULL,
            account TEXT NOT NULL,
            weight REAL NOT NULL,
            rank INTEGER NOT NULL,
            running_jobs INTEGER NOT NULL,
            pending_jobs INTEGER NOT NULL,
            dominant_resource TEXT,
            dominant_share REAL NOT NULL,
            weighted_share REAL NOT NULL,
            usage TEXT NOT NULL,
            shares TEXT NOT NULL,
            PRIMARY KEY (cycle_id, pool, account)) WITHOUT ROWID""",
        "CREATE INDEX shares_account ON shares(account, cycle_id)",
        """CREATE TABLE writes (
            id INTEGER PRIMARY KEY,
            cycle_id INTEGER NOT NULL REFERENCES cycles(id) ON DELETE CASCADE,
            time REAL NOT NULL,
            job_id TEXT NOT NULL,
            account TEXT NOT NULL,
            user TEXT NOT NULL,
            pool TEXT,
            mode TEXT NOT NULL,
            old_value INTEGER,
            new_value INTEGER NOT NULL,
            level REAL,
            position INTEGER,
            tie INTEGER NOT NULL,
            outcome TEXT NOT NULL CHECK (outcome IN ('applied', 'gone', 'failed')),
            message TEXT)""",
        "CREATE INDEX writes_time ON writes(time)",
        "CREATE INDEX writes_job ON writes(job_id, time)",
        "CREATE INDEX writes_account ON writes(account, time)",
        """CREATE TABLE errors (
            id INTEGER PRIMARY KEY,
            time REAL NOT NULL,
            kind TEXT NOT NULL,
            message TEXT NOT NULL)""",
        "CREATE INDEX errors_time ON errors(time)",
    ),
    # The own nice each value kept (null: unknown), so the writes alone say
    # whose value a job holds when the state is lost (cycle.recall).
    ("ALTER TABLE writes ADD COLUMN user_nice INTEGER",),
    # Deleting a cycle (pruning) looks for its writes (ON DELETE CASCADE): without
    # this index every deleted cycle scanned all of writes, and pruning an hour
    # of a 90-day history took 30 s (benchmarks/README.md).
    ("CREATE INDEX writes_cycle ON writes(cycle_id)",),
    # Compacted hours (trail.compaction, docs/formats.md): per stretch of known time
    # in one hour, each account's usage integrated over it, packed; the past at
    # start reads these instead of every cycle's shares rows.
    (
        # The (pool, account) lists of the hours' arrays, each once: an hour of 2,000
        # accounts names them in 46 kB, and most hours name the same ones.
        """CREATE TABLE hour_keys (
            id INTEGER PRIMARY KEY,
            digest TEXT NOT NULL UNIQUE,
            keys TEXT NOT NULL)""",
        """CREATE TABLE hours (
            id INTEGER PRIMARY KEY,
            hour REAL NOT NULL,
            start REAL NOT NULL,
            stop REAL NOT NULL,
            first_cycle INTEGER NOT NULL,
            last_cycle INTEGER NOT NULL,
            cycles INTEGER NOT NULL,
            max_gap REAL NOT NULL,
            keys_id INTEGER NOT NULL REFERENCES hour_keys(id),
            resources TEXT NOT NULL,
            usage BLOB NOT NULL,
            moment BLOB NOT NULL,
            thinned INTEGER NOT NULL DEFAULT 0)""",
        "CREATE INDEX hours_start ON hours(start)",
        "CREATE INDEX hours_last_cycle ON hours(last_cycle)",
        "CREATE INDEX hours_thinned ON hours(thinned, last_cycle)",
    ),
)
SCHEMA_VERSION: Final = len(MIGRATIONS)
# Versions `audit` reads alike before the daemon has migrated the file: 3 only
# adds an index, 4 the compacted hours (none yet in an older file).
READABLE_VERSIONS: Final = (2, 3, SCHEMA_VERSION)
# The first version with compacted hours.
HOURS_VERSION: Final = 4


def error_kind(error: BaseException) -> str:
    """A bounded label for an error: its category (`slurm_read`, `state`, ...) or `internal`."""
    if isinstance(error, DrfError):
        return re.sub(r"[^a-z0-9]+", "_", error.category.lower()).strip("_") or "error"
    return "internal"


# --------------------------------------------------------------------------
# Opening and migrating


def history_path(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / HISTORY_FILE


def check_history_files(path: str | os.PathLike[str]) -> None:
    """StateError unless the database and its companions are regular files (or absent): a FIFO
    there would hang SQLite's open, and with it the daemon, `audit` and `report`."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        check_regular(f"{os.fspath(path)}{suffix}", "the history database" + (f" ({suffix[1:]})" if suffix else ""))


def open_history(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open (creating it, mode 0640) and migrate the history database for writing."""
    target = Path(path)
    check_history_files(target)
    if not target.exists():
        # SQLite would create it with 0644; account names and shares are not for everybody.
        with contextlib.suppress(FileExistsError):
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640))
    connection = sqlite3.connect(target, timeout=10.0, isolation_level=None, check_same_thread=False)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA foreign_keys=ON")
        check_tables(connection, str(target), migrate(connection, str(target)))
    except BaseException:
        connection.close()
        raise
    return connection


def open_history_readonly(
    path: str | os.PathLike[str], readable: Sequence[int] = READABLE_VERSIONS
) -> sqlite3.Connection:
    """Open the history for queries only; StateError when it is missing or of a version not in `readable`."""
    target = Path(path)
    if not target.exists():
        raise StateError(f"{target}: no history yet (the daemon records one every cycle)")
    check_history_files(target)
    try:
        connection = sqlite3.connect(
            f"{target.resolve().as_uri()}?mode=ro", uri=True, timeout=10.0, isolation_level=None
        )
    except sqlite3.Error as error:
        raise StateError(f"{target}: cannot read the history: {error}") from error
    try:
        version = schema_version(connection)
        check_version(version, str(target))
        if version not in readable:
            newer = version > SCHEMA_VERSION
            raise StateError(
                f"{target}: history schema version {version}, this slurm-drf reads {SCHEMA_VERSION}; "
                + ("upgrade slurm-drf" if newer else "the daemon upgrades it on its next cycle")
            )
        check_tables(connection, str(target), version)
    except sqlite3.Error as error:
        connection.close()
        raise StateError(f"{target}: cannot read the history: {error}") from error
    except BaseException:
        connection.close()
        raise
    return connection


def schema_version(connection: sqlite3.Connection) -> int:
    return int(connection.execute("PRAGMA user_version").fetchone()[0])


def check_version(version: int, name: str) -> None:
    """HistoryError for a version no slurm-drf writes (below 0; newer ones are the migration's to refuse)."""
    if version < 0:
        raise HistoryError(
            f"{name}: history schema version {version} is none slurm-drf writes (0 to {SCHEMA_VERSION}): "
            "the file is damaged or not slurm-drf's; move it away (the daemon starts a new one)"
        )


def check_tables(connection: sqlite3.Connection, name: str, version: int) -> None:
    """HistoryError unless every table of schema `version` is there with its columns."""
    for table, columns in _schema_columns(version).items():
        found = _columns_of(connection, table)
        missing = [column for column in columns if column not in found]
        if missing:
            what = f"no table {table}" if not found else f"table {table} has no column {', '.join(missing)}"
            raise HistoryError(
                f"{name}: history schema version {version} but {what}: the file is damaged; "
                "move it away (the daemon starts a new one)"
            )


@functools.cache
def _schema_columns(version: int) -> Mapping[str, tuple[str, ...]]:
    """The columns of each table at schema `version`, as the migrations make them (in memory, once)."""
    memory = sqlite3.connect(":memory:")
    try:
        for step in MIGRATIONS[:version]:
            for statement in step:
                memory.execute(statement)
        tables = [row[0] for row in memory.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {table: tuple(_columns_of(memory, table)) for table in tables}
    finally:
        memory.close()


def _columns_of(connection: sqlite3.Connection, table: str) -> list[str]:
    # A table name from the migrations, never from input.
    return [str(row[1]) for row in connection.execute(f"PRAGMA table_info({table})")]


def migrate(connection: sqlite3.Connection, name: str = "history") -> int:
    """Bring the schema to SCHEMA_VERSION, one transaction per step; the version reached."""
    while True:
        version = schema_version(connection)
        check_version(version, name)
        if version > SCHEMA_VERSION:
            raise StateError(
                f"{name}: history schema version {version} is newer than this slurm-drf's "
                f"{SCHEMA_VERSION}; upgrade slurm-drf or move the file away"
            )
        if version == SCHEMA_VERSION:
            return version
        connection.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have migrated between our read and our lock.
            if schema_version(connection) == version:
                for statement in MIGRATIONS[version]:
                    connection.execute(statement)
                connection.execute(f"PRAGMA user_version = {version + 1}")
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        logger.info("%s: history schema migrated to version %d", name, version + 1)


# --------------------------------------------------------------------------
# Recording


@contextlib.contextmanager
def write_transaction(connection: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception (a kill leaves SQLite's journal to undo it)."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield connection
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise


def record_cycle(connection: sqlite3.Connection, report: CycleReport, now: float) -> int:
    """One cycle: its shares and, unless it was a dry run, its writes with their outcomes; the cycle id."""
    plan = report.plan
    pending = ordered_job_count(plan)
    connection.execute("BEGIN IMMEDIATE")
    try:
        cursor = connection.execute(
            "INSERT INTO cycles (time, taken_at, cluster, mode, dry_run, epoch, pending_jobs, writes_planned,"
            " deferred, read_seconds, seconds) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                now,
                plan.taken_at,
                plan.cluster,
                plan.mode,
                int(report.dry_run),
                plan.state.epoch,
                pending,
                len(report.writes),
                report.deferred,
                report.read_seconds,
                report.seconds,
            ),
        )
        cycle_id = int(cursor.lastrowid or 0)
        connection.executemany(
            "INSERT INTO shares (cycle_id, pool, account, weight, rank, running_jobs, pending_jobs,"
            " dominant_resource, dominant_share, weighted_share, usage, shares)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    cycle_id,
                    a.pool,
                    a.account,
                    float(a.weight),
                    a.rank,
                    a.running_jobs,
                    a.pending_jobs,
                    a.dominant_resource if a.dominant_share else None,
                    a.dominant_share,
                    a.weighted_share,
                    json.dumps(dict(a.usage), sort_keys=True),
                    json.dumps(dict(a.shares), sort_keys=True),
                )
                for a in plan.accounts
            ],
        )
        if not report.dry_run and report.result is not None:
            connection.executemany(
                "INSERT INTO writes (cycle_id, time, job_id, account, user, pool, mode, old_value, new_value,"
                " level, position, tie, outcome, message, user_nice)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(cycle_id, now, *row) for row in build_write_rows(report)],
            )
        failpoints.reached("history_commit")
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    return cycle_id


def build_write_rows(report: CycleReport) -> list[tuple[Any, ...]]:
    """(job, account, user, pool, mode, old, new, level, order, tie, outcome, message, own nice) per write sent."""
    result = report.result
    if result is None:
        return []
    wanted = {w.job_id for w in report.writes}
    # Straight from the plan's columns: a plan of 100k jobs need not become 100k objects.
    names = ("account", "user", "pool", "current", "level", "order", "tie", "user_nice")
    columns = {name: report.plan.column(name) for name in ("job_id", *names)}
    where = {job_id: index for index, job_id in enumerate(columns["job_id"]) if job_id in wanted}
    applied, gone = set(result.applied), set(result.gone)
    rows: list[tuple[Any, ...]] = []
    for write in report.writes:
        index = where.get(write.job_id)
        account, user, pool, current, level, order, tie, own = (
            ("", "", None, None, None, None, False, None) if index is None else (columns[n][index] for n in names)
        )
        if write.job_id in report.unknown_own:
            own = None
        if write.job_id in result.failed:
            outcome, message = "failed", result.failed[write.job_id]
        elif write.job_id in gone:
            outcome, message = "gone", None
        elif write.job_id in applied:
            outcome, message = "applied", None
        else:
            outcome, message = "failed", "no outcome reported by the writer"
        rows.append(
            (
                write.job_id,
                account,
                user,
                pool,
                write.mode,
                current,
                write.value,
                level,
                order,
                int(tie),
                outcome,
                message,
                own,
            )
        )
    return rows


def record_error(connection: sqlite3.Connection, error: BaseException, now: float) -> None:
    with connection:
        connection.execute(
            "INSERT INTO errors (time, kind, message) VALUES (?, ?, ?)",
            (now, error_kind(error), str(error) or type(error).__name__),
        )


def prune(connection: sqlite3.Connection, before: float) -> int:
    """Delete everything recorded before `before`; how many rows went."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        deleted = connection.execute("DELETE FROM writes WHERE time < ?", (before,)).rowcount
        deleted += connection.execute(
            "DELETE FROM shares WHERE cycle_id IN (SELECT id FROM cycles WHERE time < ?)", (before,)
        ).rowcount
        deleted += connection.execute("DELETE FROM cycles WHERE time < ?", (before,)).rowcount
        deleted += connection.execute("DELETE FROM errors WHERE time < ?", (before,)).rowcount
        if schema_version(connection) >= HOURS_VERSION:
            deleted += connection.execute("DELETE FROM hours WHERE start < ?", (before,)).rowcount
            connection.execute("DELETE FROM hour_keys WHERE id NOT IN (SELECT keys_id FROM hours)")
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    return max(deleted, 0)


class AuditRecorder:
    """CycleObserver: records every cycle into `history.sqlite` in the state directory."""

    def __init__(
        self, state_dir: str | os.PathLike[str], retention_days: int | None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.state_dir = Path(state_dir)
        self.path = history_path(state_dir)
        self.retention_days = retention_days
        self.clock = clock
        self._last_prune: float | None = None

    @contextlib.contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        StateStore(self.state_dir).ensure_directory()
        connection = open_history(self.path)
        try:
            yield connection
        finally:
            connection.close()

    def on_cycle(self, report: CycleReport) -> None:
        now = self.clock()
        try:
            with self._connection() as connection:
                record_cycle(connection, report, now)
                self._prune(connection, now)
        except (sqlite3.Error, OSError, StateError, HistoryError) as error:
            logger.warning("%s: cannot record the cycle in the history: %s", self.path, error)

    def on_error(self, error: Exception) -> None:
        now = self.clock()
        try:
            with self._connection() as connection:
                record_error(connection, error, now)
        except (sqlite3.Error, OSError, StateError, HistoryError) as failure:
            logger.warning("%s: cannot record the error in the history: %s", self.path, failure)

    def close(self) -> None:
        """Nothing held between cycles: each cycle opens and closes the database."""

    def _prune(self, connection: sqlite3.Connection, now: float) -> None:
        if self.retention_days is None:
            return
        if self._last_prune is not None and now - self._last_prune < PRUNE_EVERY:
            return
        self._last_prune = now
        deleted = prune(connection, now - self.retention_days * 86400.0)
        if deleted:
            logger.info("%s: %d history row(s) older than %d day(s) deleted", self.path, deleted, self.retention_days)


# Every write of the jobs named in a JSON list, oldest first; schema 1 kept no own nice.
_LEDGER_QUERIES: Final = {
    version: f"SELECT job_id, mode, new_value, {own}, old_value FROM writes"  # noqa: S608 (a constant column)
    " WHERE job_id IN (SELECT value FROM json_each(?)) ORDER BY time, id"
    for version, own in ((False, "NULL"), (True, "user_nice"))
}


class HistoryLedger:
    """cycle.recall's WriteLedger: every value the daemon wrote to given jobs, from `writes`.

    Read-only, one short connection per question; a missing history holds
    no writes. Reads schema 1 too (no own nice recorded: the recall then
    takes it from the values Slurm showed before the writes).
    """

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.path = history_path(state_dir)

    def writes_of(self, job_ids: Sequence[str]) -> dict[str, list[LedgerWrite]]:
        if not self.path.exists():
            return {}
        connection = open_history_readonly(self.path, readable=(1, *READABLE_VERSIONS))
        try:
            version = schema_version(connection)
            rows = connection.execute(_LEDGER_QUERIES[version >= 2], (json.dumps(list(job_ids)),)).fetchall()
        except sqlite3.Error as error:
            raise StateError(f"{self.path}: cannot read the history: {error}") from error
        finally:
            connection.close()
        found: dict[str, list[LedgerWrite]] = {}
        bad = 0
        for job_id, mode, value, user_nice, old_value in rows:
            own = _whole_or_none(user_nice)
            if (
                _whole_or_none(value) is None
                or mode not in ("nice", "site_factor", "priority")
                or (own is not None and is_label_nice(own))
            ):
                bad += 1  # a row nobody could have written, or that contradicts itself: no evidence
                continue
            found.setdefault(str(job_id), []).append(LedgerWrite(str(mode), int(value), own, _whole_or_none(old_value)))
        if bad:
            logger.warning(
                "%s: %d write record(s) hold values outside Slurm's range, an unknown mode or a label as "
                "an own nice: ignored",
                self.path,
                bad,
            )
        return found


def _whole_or_none(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**32:
        return value
    return None


# --------------------------------------------------------------------------
# Queries (`slurm-drf audit`)


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


def query_history(connection: sqlite3.Connection, query: AuditQuery, source: str = "history") -> list[dict[str, Any]]:
    """Records of one table, oldest first, as dicts with the columns shown by `slurm-drf audit`.

    A row no slurm-drf wrote (a time that is no date, JSON that is not an
    object of numbers, a BLOB) is left out and logged, naming `source` (the
    file) and the row: the rest of the audit is still worth showing.
    """
    check_query(query)
    time_column = {"writes": "w.time", "shares": "c.time", "cycles": "c.time", "errors": "e.time"}[query.table]
    conditions: list[str] = []
    parameters: list[Any] = []
    if query.since is not None:
        conditions.append(f"{time_column} >= ?")
        parameters.append(query.since)
    prefix = "w" if query.table == "writes" else "s"
    if query.account is not None:
        conditions.append(f"{prefix}.account = ?")
        parameters.append(query.account)
    if query.pool is not None:
        conditions.append(f"{prefix}.pool = ?")
        parameters.append(query.pool)
    if query.job is not None:
        conditions.append("w.job_id = ?")
        parameters.append(query.job)
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    order = {
        "writes": "w.time, w.id",
        "shares": "c.time, s.cycle_id, s.pool, s.rank",
        "cycles": "c.time, c.id",
        "errors": "e.time, e.id",
    }[query.table]
    # The first column names the row in a message; the rest are the record's.
    select = {
        "writes": "SELECT w.id, w.time, w.cycle_id, w.job_id, w.account, w.user, w.pool, w.mode, w.old_value, "
        "w.new_value, w.level, w.position, w.tie, w.outcome, w.message, w.user_nice FROM writes w",
        "shares": "SELECT s.cycle_id, c.time, s.cycle_id, s.pool, s.account, s.rank, s.weight, s.running_jobs, "
        "s.pending_jobs, s.dominant_resource, s.dominant_share, s.weighted_share, s.usage, s.shares "
        "FROM shares s JOIN cycles c ON c.id = s.cycle_id",
        "cycles": "SELECT c.id, c.time, c.id, c.taken_at, c.cluster, c.mode, c.dry_run, c.epoch, c.pending_jobs, "
        "c.writes_planned, c.deferred, c.read_seconds, c.seconds FROM cycles c",
        "errors": "SELECT e.id, e.time, e.kind, e.message FROM errors e",
    }[query.table]
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


# SQLite's LIMIT is a signed 64-bit integer.
MAX_AUDIT_LIMIT: Final = 2**63 - 1


def check_query(query: AuditQuery) -> None:
    """InputError for a query no table answers: a filter the table has not, a limit SQLite cannot take."""
    if query.table not in AUDIT_TABLES:
        raise InputError(f"unknown history table {query.table!r}; expected one of {', '.join(AUDIT_TABLES)}")
    if query.job is not None and query.table != "writes":
        raise InputError(f"--job selects writes; {query.table} are not per job")
    if query.account is not None and query.table not in ("writes", "shares"):
        raise InputError(f"--account selects writes or shares; {query.table} are not per account")
    if query.pool is not None and query.table not in ("writes", "shares"):
        raise InputError(f"--pool selects writes or shares; {query.table} are not per pool")
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
    names = {"writes": WRITE_COLUMNS, "cycles": CYCLE_COLUMNS, "errors": ERROR_COLUMNS}.get(table, SHARE_COLUMNS)
    if bytes in map(type, row):
        for name, value in zip(names, row, strict=True):
            if isinstance(value, bytes):
                raise ValueError(f"{name} is a BLOB of {len(value)} byte(s), not text or a number")
    record = dict(zip(names, row, strict=True))
    if table == "writes":
        record["tie"] = bool(record["tie"])
    elif table == "cycles":
        record["dry_run"] = bool(record["dry_run"])
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
