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
import functools
import json
import logging
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from slurm_drf import failpoints
from slurm_drf.cycle.recall import LedgerWrite
from slurm_drf.cycle.store import StateStore
from slurm_drf.errors import DrfError, HistoryError, StateError
from slurm_drf.files import check_regular
from slurm_drf.policy.ownership import is_label_nice
from slurm_drf.trail.plan_output import ordered_job_count

if TYPE_CHECKING:
    from slurm_drf.cycle.reclaim import Reclaimed
    from slurm_drf.cycle.run import CycleReport

logger = logging.getLogger(__name__)

HISTORY_FILE: Final = "history.sqlite"
OUTCOMES: Final = ("applied", "gone", "failed")
AUDIT_FORMATS: Final = ("table", "json", "csv")
AUDIT_TABLES: Final = ("writes", "shares", "cycles", "errors", "reclaims")
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
    # Reclaim (docs/rule.md §9): every job requeued (or cancelled) to make room for a job
    # waiting within its guarantee; `lost` is JSON resource-hours. The cooldown reads it.
    (
        """CREATE TABLE reclaims (
            id INTEGER PRIMARY KEY,
            cycle_id INTEGER NOT NULL REFERENCES cycles(id) ON DELETE CASCADE,
            time REAL NOT NULL,
            pool TEXT NOT NULL,
            job_id TEXT NOT NULL,
            account TEXT NOT NULL,
            user TEXT NOT NULL,
            claim_job TEXT NOT NULL,
            claim_account TEXT NOT NULL,
            victim_share REAL NOT NULL,
            claim_share REAL NOT NULL,
            nodes TEXT NOT NULL,
            lost TEXT NOT NULL,
            outcome TEXT NOT NULL,
            message TEXT)""",
        "CREATE INDEX reclaims_time ON reclaims(time)",
        "CREATE INDEX reclaims_job ON reclaims(job_id, time)",
        "CREATE INDEX reclaims_claim ON reclaims(claim_job, time)",
        "CREATE INDEX reclaims_cycle ON reclaims(cycle_id)",
    ),
)
SCHEMA_VERSION: Final = len(MIGRATIONS)
# Versions `audit` reads alike before the daemon has migrated the file: 3 only
# adds an index, 4 the compacted hours, 5 the reclaims (none yet in an older file).
READABLE_VERSIONS: Final = (2, 3, 4, SCHEMA_VERSION)
# The first version with compacted hours, and with reclaims.
HOURS_VERSION: Final = 4
RECLAIMS_VERSION: Final = 5


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
        if report.reclaimed and not report.dry_run:
            connection.executemany(
                "INSERT INTO reclaims (cycle_id, time, pool, job_id, account, user, claim_job, claim_account,"
                " victim_share, claim_share, nodes, lost, outcome, message)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(cycle_id, now, *reclaim_row(r)) for r in report.reclaimed],
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
        if schema_version(connection) >= RECLAIMS_VERSION:
            deleted += connection.execute("DELETE FROM reclaims WHERE time < ?", (before,)).rowcount
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
    False: "SELECT job_id, mode, new_value, NULL, old_value FROM writes"
    " WHERE job_id IN (SELECT value FROM json_each(?)) ORDER BY time, id",
    True: "SELECT job_id, mode, new_value, user_nice, old_value FROM writes"
    " WHERE job_id IN (SELECT value FROM json_each(?)) ORDER BY time, id",
}


def reclaim_row(r: Reclaimed) -> tuple[Any, ...]:
    """(pool, job, account, user, claim job, claim account, both shares, nodes, lost hours JSON, outcome, message)."""
    return (
        r.pool,
        r.victim,
        r.victim_account,
        r.victim_user,
        r.claim,
        r.claim_account,
        r.victim_share,
        r.claim_share,
        ",".join(r.nodes),
        json.dumps(dict(r.lost_hours), sort_keys=True),
        r.outcome,
        r.message or None,
    )


def moved_since(connection: sqlite3.Connection, since: float) -> dict[str, float]:
    """Each job a reclaim requeued or cancelled at or after `since`, and when last (the cooldown's record)."""
    if schema_version(connection) < RECLAIMS_VERSION:
        return {}
    rows = connection.execute(
        "SELECT job_id, MAX(time) FROM reclaims WHERE time >= ? AND outcome IN ('requeued', 'cancelled')"
        " GROUP BY job_id",
        (since,),
    ).fetchall()
    return {str(job): float(moment) for job, moment in rows}


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

    def moved_since(self, since: float) -> dict[str, float]:
        """The reclaim cooldown's record (cycle.reclaim): each job requeued since `since`, and when last."""
        if not self.path.exists():
            return {}
        connection = open_history_readonly(self.path, readable=(1, *READABLE_VERSIONS))
        try:
            return moved_since(connection, since)
        except sqlite3.Error as error:
            raise StateError(f"{self.path}: cannot read the history: {error}") from error
        finally:
            connection.close()


def _whole_or_none(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**32:
        return value
    return None


# --------------------------------------------------------------------------
# Queries (`slurm-drf audit`)
