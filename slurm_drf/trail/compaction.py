"""Compaction of history.sqlite: old cycles' shares as per-hour stretches (docs/formats.md, docs/rule.md §6).

Sits beside `trail.history_db.AuditRecorder`: `HistoryUpkeep` is a
CycleObserver the service loop tells about every cycle after the
recorder. Each cycle it

- **compacts** the oldest complete hour not yet compacted into `hours`
  rows: one row per stretch of known time in the hour (a running daemon
  makes one), holding each (pool, account)'s usage integrated over the
  stretch and its first moment, packed (trail.past reads them: a start
  reads some 2,000 rows for 90 days, not millions);
- **thins** the oldest compacted hour older than DETAIL_KEPT: the `shares`
  rows of its cycles are deleted but those of its last cycle, so
  `audit shares` shows one row per account per hour for old times (the
  `cycles` and `writes` rows are all kept);
- **warns** once a day while the file is larger than `history_max_mb`.

Each hour is one transaction, so a kill leaves the hour compacted (or
thinned) or not, never half. Hours are done oldest first until
COMPACT_BUDGET seconds have gone (at least one of each per cycle), so a
file of an older slurm-drf catches up over some cycles without stopping
any of them. Like the recorder, upkeep never stops the daemon: what
fails is logged and the cycle goes on.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np
import orjson

from slurm_drf import failpoints
from slurm_drf.errors import HistoryError, StateError
from slurm_drf.policy.decayed_usage import UsageRecord
from slurm_drf.trail.history_db import history_path, open_history, write_transaction
from slurm_drf.trail.past import MOMENT_DTYPE, USAGE_DTYPE, read_usage_records

if TYPE_CHECKING:
    from slurm_drf.cycle.run import CycleReport

logger = logging.getLogger(__name__)

HOUR: Final = 3600.0
# Every cycle's shares rows are kept this long; older hours keep their last cycle's.
DETAIL_KEPT: Final = 86400.0
# Seconds of compaction and thinning per cycle (each does at least one hour).
COMPACT_BUDGET: Final = 0.5
# The size warning is repeated at most this often (seconds).
SIZE_WARNING_EVERY: Final = 86400.0


@dataclass(frozen=True, slots=True)
class Stretch:
    """[start, stop) of known time: per key (pool, account) and resource, ∫ usage dt and ∫ usage (t - start) dt."""

    start: float
    stop: float
    keys: tuple[tuple[str, str], ...]
    resources: tuple[str, ...]
    usage: np.ndarray  # NaN where the account never had the resource in the stretch
    moment: np.ndarray


def build_stretches(records: Sequence[UsageRecord], next_time: float | None, max_gap: float) -> list[Stretch]:
    """The known stretches of an hour's records (oldest first), pure.

    Record i holds from its time to the next record's (the first of the
    next hour, `next_time`, for the last one); an interval longer than
    `max_gap`, or after the last record when `next_time` is None, is
    unknown and ends a stretch. An hour whose records are all surrounded by
    gaps gives one stretch of length 0 (nothing known, but the cycles are
    compacted).
    """
    times = [record.time for record in records]
    ends = [*times[1:], math.inf if next_time is None else next_time]
    runs: list[list[tuple[float, float, UsageRecord]]] = []
    for record, end in zip(records, ends, strict=True):
        known = record.time < end and end - record.time <= max_gap
        if not known:
            if runs and runs[-1]:
                runs.append([])
            continue
        if not runs:
            runs.append([])
        if runs[-1] and runs[-1][-1][1] != record.time:
            runs.append([])
        runs[-1].append((record.time, end, record))
    stretches = [_stretch(run) for run in runs if run]
    if not stretches and records:
        stretches.append(Stretch(records[0].time, records[0].time, (), (), np.zeros((0, 0)), np.zeros((0, 0))))
    return stretches


def _stretch(pieces: Sequence[tuple[float, float, UsageRecord]]) -> Stretch:
    start = pieces[0][0]
    keys: dict[tuple[str, str], int] = {}
    resources: dict[str, int] = {}
    for _, _, record in pieces:
        for pool, accounts in record.usage.items():
            for account, amounts in accounts.items():
                keys.setdefault((pool, account), len(keys))
                for resource in amounts:
                    resources.setdefault(resource, len(resources))
    # Python lists, not numpy cells: 60 cycles of 2,000 accounts are 360,000 additions.
    usage = [[math.nan] * len(resources) for _ in keys]
    moment = [[0.0] * len(resources) for _ in keys]
    for begin, end, record in pieces:
        length = end - begin
        # ∫ (t - start) dt over [begin, end)
        lever = ((end - start) ** 2 - (begin - start) ** 2) / 2.0
        for pool, accounts in record.usage.items():
            for account, amounts in accounts.items():
                row = keys[(pool, account)]
                sums, moments = usage[row], moment[row]
                for resource, amount in amounts.items():
                    column = resources[resource]
                    held = sums[column]
                    sums[column] = (0.0 if math.isnan(held) else held) + amount * length
                    moments[column] += amount * lever
    shape = (len(keys), len(resources))
    return Stretch(
        start,
        pieces[-1][1],
        tuple(keys),
        tuple(resources),
        np.array(usage, dtype=np.float64).reshape(shape),
        np.array(moment, dtype=np.float64).reshape(shape),
    )


@dataclass(frozen=True, slots=True)
class Compacted:
    """One hour compacted: its start, the cycles it covered, the stretches it made."""

    hour: float
    cycles: int
    stretches: int


# The cycles a compaction walks: only those whose time is a number (a damaged record's is
# not, and the past leaves such a cycle out too).
_FIRST_AFTER: Final = "SELECT time FROM cycles WHERE id > ? AND typeof(time) IN ('integer', 'real') ORDER BY id LIMIT 1"
_LAST_BEFORE: Final = (
    "SELECT max(id), max(time) FROM cycles WHERE id > ? AND typeof(time) IN ('integer', 'real') AND time < ?"
)
_LAST_IN: Final = (
    "SELECT max(id) FROM cycles WHERE id BETWEEN ? AND ? AND typeof(time) IN ('integer', 'real') AND time < ?"
)


def compact_next_hour(connection: sqlite3.Connection, max_gap: float, now: float) -> Compacted | None:
    """The oldest complete hour of cycles not yet compacted, in one transaction; None when none is due.

    An hour is due once it is over and the record after its last cycle is
    there (or now is more than `max_gap` past that cycle: a pause). Bad
    cycles (a usage that is no amounts) are left out as the past leaves
    them out: the interval before them runs on.
    """
    with write_transaction(connection):
        done = _compact(connection, max_gap, now)
        failpoints.reached("compaction_commit")
    return done


def _compact(connection: sqlite3.Connection, max_gap: float, now: float) -> Compacted | None:
    after = int(connection.execute("SELECT coalesce(max(last_cycle), 0) FROM hours").fetchone()[0])
    first = connection.execute(
        _FIRST_AFTER,
        (after,),
    ).fetchone()
    if first is None or not math.isfinite(first[0]):
        return None
    hour = math.floor(first[0] / HOUR) * HOUR
    if hour + HOUR > now:
        return None
    upto, last_time = connection.execute(
        _LAST_BEFORE,
        (after, hour + HOUR),
    ).fetchone()
    following = connection.execute(
        _FIRST_AFTER,
        (upto,),
    ).fetchone()
    if following is None and now - last_time <= max_gap:
        return None  # the next cycle may still come: wait for it
    rows = read_usage_records(connection, since=-math.inf, until=now, after_id=after, upto_id=upto)
    for line in rows.skipped[:20]:
        logger.warning("history compaction: %s; the cycle is left out of the compacted hour", line)
    records = sorted((record for _, record in rows.records), key=lambda record: record.time)
    stretches = build_stretches(records, None if following is None else float(following[0]), max_gap)
    if not stretches:  # every cycle of the hour was bad: keep the place without a stretch
        stretches = [Stretch(hour, hour, (), (), np.zeros((0, 0)), np.zeros((0, 0)))]
    insert_stretches(connection, hour, stretches, (after + 1, upto), len(records), max_gap)
    return Compacted(hour, upto - after, len(stretches))


def insert_stretches(
    connection: sqlite3.Connection,
    hour: float,
    stretches: Sequence[Stretch],
    cycles: tuple[int, int],
    records: int,
    max_gap: float,
) -> None:
    """The `hours` rows of one hour's stretches, covering the cycles with ids from cycles[0] to cycles[1]."""
    connection.executemany(
        "INSERT INTO hours (hour, start, stop, first_cycle, last_cycle, cycles, max_gap, keys_id, resources, usage,"
        " moment) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                hour,
                stretch.start,
                stretch.stop,
                *cycles,
                records,
                max_gap,
                _keys_id(connection, stretch.keys),
                orjson.dumps(list(stretch.resources)).decode(),
                stretch.usage.astype(USAGE_DTYPE).tobytes(),
                stretch.moment.astype(MOMENT_DTYPE).tobytes(),
            )
            for stretch in stretches
        ],
    )


def _keys_id(connection: sqlite3.Connection, keys: Sequence[tuple[str, str]]) -> int:
    """The `hour_keys` row of this list of (pool, account), added when new."""
    text = orjson.dumps([list(key) for key in keys])
    digest = hashlib.sha256(text).hexdigest()
    connection.execute("INSERT OR IGNORE INTO hour_keys (digest, keys) VALUES (?, ?)", (digest, text.decode()))
    return int(connection.execute("SELECT id FROM hour_keys WHERE digest = ?", (digest,)).fetchone()[0])


def thin_next_hour(connection: sqlite3.Connection, now: float) -> float | None:
    """The oldest compacted hour older than DETAIL_KEPT keeps its last cycle's shares rows only; its start.

    One transaction; None when no hour is due.
    """
    with write_transaction(connection):
        row = connection.execute(
            "SELECT hour, min(first_cycle), max(last_cycle) FROM hours WHERE thinned = 0 AND hour = "
            "(SELECT min(hour) FROM hours WHERE thinned = 0) GROUP BY hour"
        ).fetchone()
        if row is None or row[0] + HOUR > now - DETAIL_KEPT:
            return None
        hour, first, last = row
        kept = connection.execute(
            _LAST_IN,
            (first, last, hour + HOUR),
        ).fetchone()[0]
        connection.execute(
            "DELETE FROM shares WHERE cycle_id >= ? AND cycle_id <= ? AND cycle_id != ?", (first, last, kept or -1)
        )
        connection.execute("UPDATE hours SET thinned = 1 WHERE hour = ? AND thinned = 0", (hour,))
    return float(hour)


def compact_history(
    connection: sqlite3.Connection,
    max_gap: float,
    now: float,
    budget: float = COMPACT_BUDGET,
    monotonic: Callable[[], float] = time.monotonic,
) -> tuple[int, int]:
    """Compact, then thin, hours oldest first until `budget` seconds are spent; (compacted, thinned) hours."""
    began = monotonic()
    compacted = thinned = 0
    while compacted == 0 or monotonic() - began < budget:
        if compact_next_hour(connection, max_gap, now) is None:
            break
        compacted += 1
    while thinned == 0 or monotonic() - began < budget:
        if thin_next_hour(connection, now) is None:
            break
        thinned += 1
    return compacted, thinned


def history_size(path: Path) -> int:
    """Bytes of the database with its write-ahead log (what the disk holds for it)."""
    return sum(os.path.getsize(f"{path}{suffix}") for suffix in ("", "-wal") if os.path.exists(f"{path}{suffix}"))


class HistoryUpkeep:
    """CycleObserver after the AuditRecorder: compacts and thins history.sqlite, warns when it is too large."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        interval: float,
        max_mb: int | None = None,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        budget: float = COMPACT_BUDGET,
    ) -> None:
        self.path = history_path(state_dir)
        self.max_gap = 2.0 * interval  # trail.past's GAP_INTERVALS
        self.max_mb = max_mb
        self.clock = clock
        self.monotonic = monotonic
        self.budget = budget
        self._warned: float | None = None

    def on_cycle(self, report: CycleReport) -> None:
        del report
        now = self.clock()
        if not self.path.exists():
            return
        try:
            with contextlib.closing(open_history(self.path)) as connection:
                compact_history(connection, self.max_gap, now, self.budget, self.monotonic)
        except (sqlite3.Error, OSError, StateError, HistoryError) as error:
            if getattr(error, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                # The cycle's record has said so in its own line; the next cycle compacts.
                logger.debug("%s: compaction deferred: %s", self.path, error)
            else:
                logger.warning("%s: cannot compact the history: %s", self.path, error)
        self._check_size(now)

    def on_error(self, error: Exception) -> None:
        """Nothing new to compact after a failed cycle."""
        del error

    def close(self) -> None:
        """Nothing held between cycles."""

    def _check_size(self, now: float) -> None:
        if self.max_mb is None:
            return
        try:
            size = history_size(self.path)
        except OSError:
            return
        if size <= self.max_mb * 2**20:
            self._warned = None  # below again: the next time it grows past is said at once
            return
        if self._warned is not None and now - self._warned < SIZE_WARNING_EVERY:
            return
        self._warned = now
        logger.warning(
            "%s: the history is %.0f MiB, larger than history_max_mb (%d MiB); lower retention_days or raise "
            "history_max_mb (docs/operations.md)",
            self.path,
            size / 2**20,
            self.max_mb,
        )
