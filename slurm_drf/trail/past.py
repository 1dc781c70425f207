"""Where the past comes from: the daemon's own history.sqlite, integrated (docs/rule.md §6).

Every cycle records each account's running usage per pool (`shares.usage`,
trail.history_db). `HistoryPast` reads those records, oldest first, into a
`policy.decayed_usage.DecayedUsage` and hands the cycle each account's decayed
average allocation. It reads the file once over the last
LOOKBACK_HALF_LIVES half-lives when it starts (so the past survives
restarts: it is on disk), then only the cycles recorded since.

What the record cannot know: a time the daemon did not run (or cycles
failed) longer than GAP_INTERVALS intervals is a gap. Within the last
SACCT_HALF_LIVES half-lives such spans (and the time before the first
record, and since the last one at start) are filled from Slurm's
accounting (slurm.sacct, one `sacct --parsable2` per start and per pause seen
later) as the exact step function of the jobs' allocations; the record
wins where it exists. What neither knows is left out of the average rather
than counted as zero use. A cycle with no account rows is a known interval
of no use. Dry runs record what they saw, so they count as well.

A history that cannot be read, or a sacct that fails, is logged and the
cycle goes on with what was read before: the past never stops the daemon.
Nor does one bad record: a cycle whose time is not a number or lies in the
future (skipped, not clamped: a record of the future is not the present),
or one of whose rows holds a usage that is not amounts from 0 to MAX_TRES
(null, a list, NaN, 1e999, negative), is left out of the past, logged once
per process with the file and the cycle; a bad line of sacct's answer is
left out by slurm.sacct.
A sacct that failed (slurmdbd down) is asked again every
SACCT_RETRY_INTERVALS intervals, the past then read afresh, until it
answers: the daemon recovers on its own when slurmdbd is back.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import os
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeGuard

import numpy as np
import numpy.typing as npt
import orjson

from slurm_drf.config.settings import Config
from slurm_drf.errors import HistoryError, SlurmError, StateError
from slurm_drf.files import read_private, write_atomic
from slurm_drf.model.codec import format_time, show
from slurm_drf.model.types import MAX_TRES
from slurm_drf.policy.decayed_usage import (
    Allocation,
    DecayedUsage,
    StretchGroup,
    StretchSum,
    UsageByPool,
    UsageRecord,
    UsageSpan,
    UsageStretch,
    build_partition_pools,
    build_usage_span,
)
from slurm_drf.trail.history_db import HOURS_VERSION, history_path, open_history_readonly, schema_version

logger = logging.getLogger(__name__)

# Records older than this many half-lives weigh less than 2^-20 of the newest: not read.
LOOKBACK_HALF_LIVES: Final = 20.0
# A pause between two records longer than this many intervals is a gap (unknown use).
GAP_INTERVALS: Final = 2.0
# Bad records logged one by one per read of the history; the rest are counted.
MAX_SKIPPED_LOGGED: Final = 20


@dataclass(frozen=True, slots=True)
class UsageRows:
    """What `read_usage_records` read: each good cycle's record, the bad ones said, the last cycle id read."""

    records: list[tuple[int, UsageRecord]]
    # One line per cycle left out, naming the cycle (and the row) and what is wrong with it.
    skipped: list[str]
    last_id: int
    # The time column of cycle `last_id` as stored (any value: a damaged file holds anything).
    last_id_time: object = None


def read_usage_records(
    connection: sqlite3.Connection,
    *,
    since: float,
    until: float = math.inf,
    after_id: int = 0,
    upto_id: int | None = None,
) -> UsageRows:
    """Every cycle with after_id < id <= upto_id and time >= since, in id order; bad ones skipped.

    A file others can write, or a damaged one, can hold anything in any
    column: a cycle whose time is not a number, or after `until` (a record
    dated in the future is not the present: it is skipped, not clamped), or
    one of whose rows has a usage that is not an object of amounts from 0 to
    MAX_TRES, is left out whole, said in `skipped`: left out of a cycle, an
    account would count as idle then, and a negative amount would lower its
    past below what it ran.
    """
    rows = connection.execute(
        "SELECT c.id, c.time, s.pool, s.account, s.usage FROM cycles c"
        # NULL compares as nothing, so it is asked for by name (text and BLOBs sort above every number).
        " LEFT JOIN shares s ON s.cycle_id = c.id WHERE c.id > ? AND (c.time >= ? OR c.time IS NULL)"
        " AND (? IS NULL OR c.id <= ?) ORDER BY c.id",
        (after_id, since, upto_id, upto_id),
    ).fetchall()
    records: list[tuple[int, UsageRecord]] = []
    skipped: list[str] = []
    last_id = after_id
    last_id_time: object = None
    for cycle_id, group in itertools.groupby(rows, key=lambda row: row[0]):
        cycle_rows = list(group)
        if not _is_whole(cycle_id):
            skipped.append(f"cycle id {show(cycle_id)}: not a whole number")
            continue
        if cycle_id > last_id:
            last_id, last_id_time = cycle_id, cycle_rows[0][1]
        try:
            records.append((cycle_id, _usage_record(cycle_rows, until)))
        except ValueError as error:
            skipped.append(f"cycle {cycle_id}: {error}")
    return UsageRows(records, skipped, last_id, last_id_time)


# How the compacted hours pack their arrays (trail.compaction writes them, docs/formats.md):
# little-endian, one row per key (pool, account), one column per resource.
USAGE_DTYPE: Final = "<f8"  # TRES-seconds over the stretch; NaN: the account never had the resource then
MOMENT_DTYPE: Final = "<f4"  # TRES-seconds x seconds since the stretch's start


@dataclass(frozen=True, slots=True)
class Stretches:
    """What `read_stretches` read: the known stretches, oldest first, the bad rows said, the last cycle covered."""

    stretches: list[UsageStretch]
    skipped: list[str]
    last_cycle: int


def read_stretches(
    connection: sqlite3.Connection, *, since: float, until: float, half_life_s: float, max_gap: float
) -> Stretches:
    """The compacted hours from `since` on, integrated against the decay, as few stretches as the gaps allow.

    Each row is one stretch [start, stop) of known time: the reader adds
    its whole decay weight (exact) and, per account and resource, its
    usage integral placed at its centre of mass (docs/rule.md §6 bounds the
    error). Rows that follow each other within `max_gap` become one
    stretch; a longer pause stays unknown, for sacct to fill. A row whose
    arrays do not fit its keys, hold what no amount is or lies after
    `until` is left out (a gap), said in `skipped`. Vectorised: 90 days
    of 2,000 accounts are some 2,000 rows, not millions.
    """
    last_cycle = int(connection.execute("SELECT coalesce(max(last_cycle), 0) FROM hours").fetchone()[0] or 0)
    rows = connection.execute(
        "SELECT id, start, stop, keys_id, resources, usage, moment FROM hours WHERE start >= ? ORDER BY start, id",
        (since,),
    ).fetchall()
    summing = StretchSum(half_life_s, max_gap)
    names = _Names(connection)
    skipped: list[str] = []
    for row in rows:
        row_id, start, stop = row[0], row[1], row[2]
        if _is_number(start) and _is_number(stop) and stop == start:
            continue  # an hour with nothing known (records between gaps): only its cycles counted as compacted
        try:
            summing.add(*_hour_arrays(row, until, names))
        except ValueError as error:
            skipped.append(f"compacted hour row {show(row_id)}: {error}")
    return Stretches(summing.finish(), skipped, last_cycle)


class _Names:
    """The names of a compacted row's keys and resources, each list parsed once (`hour_keys`, JSON text)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection
        self._names: dict[object, list[tuple[str, str]]] = {}
        self._resources: dict[str, list[str]] = {}

    def key_names(self, keys_id: object) -> list[tuple[str, str]]:
        """The keys of a row (`hour_keys`: JSON [[pool, account], ...]); one parse per list."""
        found = self._names.get(keys_id)
        if found is None:
            row = self.connection.execute("SELECT keys FROM hour_keys WHERE id = ?", (keys_id,)).fetchone()
            if row is None or not isinstance(row[0], str):
                raise ValueError(f"keys_id {show(keys_id)} names no list of keys")
            keys = orjson.loads(row[0])
            if not isinstance(keys, list) or not all(
                isinstance(k, list) and len(k) == 2 and all(isinstance(n, str) for n in k) for k in keys
            ):
                raise ValueError("keys is not a list of [pool, account]")
            found = [(k[0], k[1]) for k in keys]
            if len(set(found)) != len(found):
                raise ValueError("keys names an account twice")
            self._names[keys_id] = found
        return found

    def resource_names(self, text: str) -> list[str]:
        found = self._resources.get(text)
        if found is None:
            names = orjson.loads(text)
            if not (isinstance(names, list) and all(isinstance(n, str) for n in names)) or len(set(names)) != len(
                names
            ):
                raise ValueError("resources is not a list of names")
            found = self._resources[text] = names
        return found


def _hour_arrays(
    row: Sequence[object], until: float, names: _Names
) -> tuple[float, float, StretchGroup, npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """One compacted row (id, start, stop, keys, resources, usage, moment) as (start, stop,
    its group of keys and resources, usage, centre); ValueError if bad."""
    _, start, stop, keys_id, resources, usage, moment = row
    if not (_is_number(start) and _is_number(stop) and math.isfinite(start) and start <= stop < math.inf):
        raise ValueError(f"start {show(start)} and stop {show(stop)} are no stretch of time")
    if stop > until:
        raise ValueError(f"stop {_shown_time(stop)} is after now, {_shown_time(until)}: not yet the past")
    if not isinstance(resources, str):
        raise ValueError("resources is not JSON text")
    if not isinstance(usage, bytes) or not isinstance(moment, bytes):
        raise ValueError("usage or moment is not packed numbers")
    try:
        keys, resource_names = names.key_names(keys_id), names.resource_names(resources)
    except orjson.JSONDecodeError as error:
        raise ValueError(f"keys or resources is not JSON ({error})") from None
    shape = (len(keys), len(resource_names))
    size = shape[0] * shape[1]
    if len(usage) != size * 8 or len(moment) != size * 4:
        raise ValueError(f"usage or moment does not hold {shape[0]} x {shape[1]} numbers")
    length = float(stop) - float(start)
    integral = np.frombuffer(usage, dtype=USAGE_DTYPE).reshape(shape).astype(np.float64)
    moments = np.frombuffer(moment, dtype=MOMENT_DTYPE).reshape(shape).astype(np.float64)
    # NaN (no such resource) compares false both ways: only real amounts can be out of range.
    if (integral < 0).any() or (integral > MAX_TRES * max(length, 1.0)).any() or not np.isfinite(moments).all():
        raise ValueError(f"usage is not amounts from 0 to {MAX_TRES} over {length:g} s, or moment not finite")
    centre = np.zeros(shape)
    np.divide(moments, integral, out=centre, where=integral > 0)
    np.clip(centre, 0.0, length, out=centre)
    return float(start), float(stop), StretchGroup((keys_id, resources), keys, resource_names), integral, centre


def _usage_record(rows: Sequence[Sequence[object]], until: float) -> UsageRecord:
    """One cycle's record from its rows (cycle id, time, pool, account, usage); ValueError naming the bad one."""
    moment = rows[0][1]
    if not _is_number(moment) or not math.isfinite(moment):
        raise ValueError(f"time {show(moment)} is not a time")
    if moment > until:
        raise ValueError(f"time {_shown_time(moment)} is after now, {_shown_time(until)}: not yet the past")
    usage: dict[str, dict[str, Mapping[str, float]]] = {}
    for _, _, pool, account, text in rows:
        if pool is None and account is None and text is None:
            continue  # the LEFT JOIN's row of a cycle with no account rows: a known interval of no use
        if not isinstance(pool, str) or not isinstance(account, str):
            raise ValueError(f"a shares row with pool {show(pool)} and account {show(account)}: not names")
        try:
            amounts = _usage_amounts(text)
        except ValueError as error:
            raise ValueError(f"pool {show(pool)}, account {show(account)}: usage {show(text)}: {error}") from None
        usage.setdefault(pool, {})[account] = amounts
    return UsageRecord(float(moment), usage)


def _usage_amounts(text: object) -> Mapping[str, float]:
    """The amounts of one usage column: a JSON object of numbers from 0 to MAX_TRES, else ValueError.

    Shared between the rows of the same text (an account's usage changes
    seldom from one cycle to the next): never changed by its readers.
    """
    if not isinstance(text, str):
        raise ValueError("not JSON text")
    return _parsed_amounts(text)


@functools.lru_cache(maxsize=65536)
def _parsed_amounts(text: str) -> Mapping[str, float]:
    try:
        amounts = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        raise ValueError(f"not JSON ({error})") from None
    if not isinstance(amounts, dict):
        raise ValueError("not an object of amounts")
    # orjson makes int, float, bool, str, list, dict and None: only the first two are amounts.
    if not all(type(amount) in (int, float) and 0 <= amount <= MAX_TRES for amount in amounts.values()):
        bad = next(a for a in amounts.values() if not (_is_number(a) and 0 <= a <= MAX_TRES))
        raise ValueError(f"{show(bad)} is not an amount from 0 to {MAX_TRES}")
    return {resource: float(amount) for resource, amount in amounts.items()}


def _shown_time(moment: float) -> str:
    try:
        return format_time(moment)
    except (ValueError, OverflowError, OSError):  # beyond what a date can say
        return show(moment)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


# Slurm's accounting fills unknown spans this many half-lives back: older use
# weighs under 2^-5 (3 %) of the newest, and all of it together at most 1/32
# of the average, while each further half-life lengthens the one slurmdbd
# query at start.
SACCT_HALF_LIVES: Final = 5.0
# After a failed sacct, the past is read afresh (sacct asked again) this many intervals later.
SACCT_RETRY_INTERVALS: Final = 10.0

# The daemon's integrated past, kept beside the history so that a start goes on
# from it instead of reading 90 days of cycles again (docs/rule.md §6).
PAST_FILE: Final = "past.json"
PAST_FILE_VERSION: Final = 1
# A past of 2,000 accounts is about 0.4 MB; a file far larger is no past of ours.
MAX_PAST_FILE_BYTES: Final = 256 * 2**20

# Fetches the allocations slurmdbd recorded from a time to now (slurm.sacct).
AllocationFetch = Callable[[float], Sequence[Allocation]]


class HistoryPast:
    """The decayed past for each cycle, read from `history.sqlite` in the state directory.

    Unknown spans of the record inside the last SACCT_HALF_LIVES half-lives
    are filled from Slurm's accounting through `fetch` (the daemon and
    `once` pass `slurm.sacct.fetch_allocations`, one `sacct`): at the first read (before
    the first record, between records, after the last one until now) and
    afterwards whenever a newly read record follows a gap. The record wins
    where it exists. Without `fetch` the past is the record's alone.

    With `keep` (the daemon) what it integrated is saved after every read in
    PAST_FILE beside the history; every HistoryPast starts from that file
    when it fits (the same half-life and interval, and the history still
    holds the cycle it ends with) and reads only the cycles after it: a
    start then costs about what one cycle costs, where reading 90 days of a
    large cluster's cycles takes minutes (benchmarks/README.md).
    """

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        fetch: AllocationFetch | None = None,
        keep: bool = False,
    ) -> None:
        self.path: Path = history_path(state_dir)
        self.past_file: Path = Path(state_dir) / PAST_FILE
        self.keep = keep
        self.clock = clock
        self.fetch = fetch
        self._last_cycle: tuple[int, float] | None = None  # the last cycle read, id and time: names the file read
        self._save_warned = False
        self._usage: DecayedUsage | None = None
        self._since = 0.0
        self._last_id = 0
        self._last_time: float | None = None  # of the last record of the file read
        self._started = False
        self._checked: float | None = None  # sacct was asked up to here at the first read
        self._sacct_warned = False
        self._sacct_failed: float | None = None  # when sacct last failed to fill what the record misses
        self._skipped: set[str] = set()  # the bad records said so far

    def past(self, config: Config) -> UsageByPool | None:
        """Each account's decayed average allocation now; None when `history` is off."""
        history = config.history
        if history is None or not history.active:
            self._usage = None
            return None
        now = self.clock()
        max_gap = GAP_INTERVALS * config.interval
        usage = self._usage
        retry = self._sacct_failed is not None and now - self._sacct_failed >= SACCT_RETRY_INTERVALS * config.interval
        if retry or usage is None or usage.half_life_s != history.half_life_s or usage.max_gap != max_gap:
            restored = None if retry else self._restore(history.half_life_s, max_gap, now)
            usage = self._usage = restored or self._fresh(history.half_life_s, max_gap, now)
        records = self._read(now, history.half_life_s, max_gap)
        if records is None:  # the history compacted cycles this reader had not read yet: read it afresh
            usage = self._usage = self._fresh(history.half_life_s, max_gap, now)
            records = self._read(now, history.half_life_s, max_gap) or []
        spans = self._unknown_spans(records, now, max_gap)
        fills = self._fill(spans, config, history.half_life_s, now)
        self._add(usage, records, fills)
        if not self._started:
            self._started, self._checked = True, now
        if self.keep:
            self._save(usage)
        return usage.past_at(now)

    def _add(
        self,
        usage: DecayedUsage,
        records: Sequence[UsageRecord | UsageStretch],
        fills: dict[int, list[UsageSpan]],
    ) -> None:
        """The records read, oldest first, each after the spans sacct filled before it."""
        for index, record in enumerate(records):
            for span in fills.get(index, ()):
                usage.add_span(span)
            if isinstance(record, UsageStretch):
                usage.add_stretch(record)
            else:
                usage.add(record)
            self._last_time = _stop(record)
        for span in fills.get(len(records), ()):
            usage.add_span(span)

    def _fresh(self, half_life_s: float, max_gap: float, now: float) -> DecayedUsage:
        """A past to read from the start of the window: nothing read yet."""
        self._since = now - LOOKBACK_HALF_LIVES * half_life_s
        self._last_id = 0
        self._last_time = None
        self._last_cycle = None
        self._started = False
        self._checked = None
        return DecayedUsage(half_life_s, max_gap)

    def _save(self, usage: DecayedUsage) -> None:
        """PAST_FILE: where a later start goes on from. Not while sacct fails (its spans are missing then)."""
        if self._sacct_failed is not None or self._last_cycle is None:
            return
        data = {
            "version": PAST_FILE_VERSION,
            "cycle": list(self._last_cycle),
            "last_id": self._last_id,
            "last_time": self._last_time,
            "since": self._since,
            "checked": self._checked,
            "usage": usage.render_state(),
        }
        try:
            write_atomic(self.past_file, orjson.dumps(data), mode=0o640)
        except (OSError, TypeError) as error:
            if not self._save_warned:
                logger.warning(
                    "%s: cannot keep the past (%s); a restart reads it from the history", self.past_file, error
                )
            self._save_warned = True
            return
        self._save_warned = False

    def _restore(self, half_life_s: float, max_gap: float, now: float) -> DecayedUsage | None:
        """The past PAST_FILE kept, when it fits this config and this history; None (said why) otherwise."""
        try:
            raw = read_private(self.past_file, "the kept past", StateError, MAX_PAST_FILE_BYTES)
        except FileNotFoundError:
            return None
        except (OSError, StateError) as error:
            logger.warning("%s: cannot read the kept past (%s); reading the history", self.past_file, error)
            return None
        try:
            data = orjson.loads(raw)
            kept = _parse_kept(data)
        except (orjson.JSONDecodeError, ValueError, TypeError) as error:
            logger.warning("%s: not a past slurm-drf kept (%s); reading the history", self.past_file, error)
            return None
        usage = kept.usage
        if usage.half_life_s != half_life_s or usage.max_gap != max_gap:
            logger.info("%s: kept for another half_life or interval; reading the history", self.past_file)
            return None
        if usage.last_time is not None and usage.last_time > now:
            logger.warning("%s: kept at a time after now; reading the history", self.past_file)
            return None
        if not self._holds(kept.cycle):
            logger.info(
                "%s: the history no longer holds cycle %d, the last it counted (replaced or pruned); "
                "reading the history",
                self.past_file,
                kept.cycle[0],
            )
            return None
        self._since, self._last_id, self._last_time = kept.since, kept.last_id, kept.last_time
        self._last_cycle, self._started, self._checked = kept.cycle, True, kept.checked
        logger.info("%s: the past goes on from cycle %d", self.past_file, kept.cycle[0])
        return usage

    def _holds(self, cycle: tuple[int, float]) -> bool:
        """Whether the history holds this cycle (id and time): the file the kept past was read from."""
        if not self.path.exists():
            return False
        try:
            connection = open_history_readonly(self.path)
            try:
                row = connection.execute("SELECT time FROM cycles WHERE id = ?", (cycle[0],)).fetchone()
            finally:
                connection.close()
        except (sqlite3.Error, StateError, HistoryError, OSError) as error:
            logger.warning("%s: cannot read the history: %s", self.path, error)
            return False
        return row is not None and _is_number(row[0]) and float(row[0]) == cycle[1]

    def _read(self, now: float, half_life_s: float, max_gap: float) -> list[UsageRecord | UsageStretch] | None:
        """What the history holds after what was read: at the first read its compacted hours, then cycles.

        None when cycles this reader has not read yet were thinned
        (trail.compaction): only a read from the start of the window counts them.
        """
        if not self.path.exists():
            return []  # a fresh install: no record yet
        stretches: list[UsageStretch] = []
        try:
            connection = open_history_readonly(self.path)
            try:
                after = self._last_id
                if schema_version(connection) >= HOURS_VERSION:
                    if self._last_id == 0 and not self._started:
                        read = read_stretches(
                            connection, since=self._since, until=now, half_life_s=half_life_s, max_gap=max_gap
                        )
                        stretches, after = read.stretches, read.last_cycle
                        self._report_skipped(read.skipped)
                    elif thinned_through(connection) > self._last_id:
                        logger.info("%s: cycles not yet read were compacted; reading the history afresh", self.path)
                        return None
                rows = read_usage_records(connection, since=self._since, until=now, after_id=after)
            finally:
                connection.close()
        except (sqlite3.Error, StateError, HistoryError, OSError, ValueError) as error:
            logger.warning("%s: cannot read past usage from the history: %s", self.path, error)
            return []
        if rows.last_id > self._last_id and _is_number(rows.last_id_time) and math.isfinite(rows.last_id_time):
            self._last_cycle = (rows.last_id, float(rows.last_id_time))
        self._last_id = max(rows.last_id, after)
        self._report_skipped(rows.skipped)
        return [*stretches, *(record for _, record in rows.records)]

    def _report_skipped(self, skipped: Sequence[str]) -> None:
        """Each bad record once per process (a later read of the same file may meet it again)."""
        new = [line for line in skipped if line not in self._skipped]
        self._skipped.update(new)
        for line in new[:MAX_SKIPPED_LOGGED]:
            logger.warning("%s: %s; the cycle is left out of the past", self.path, line)
        if len(new) > MAX_SKIPPED_LOGGED:
            logger.warning(
                "%s: %d more bad cycle record(s) left out of the past", self.path, len(new) - MAX_SKIPPED_LOGGED
            )

    def _unknown_spans(self, records: Sequence[UsageRecord | UsageStretch], now: float, max_gap: float) -> list[_Span]:
        """What the record leaves unknown, each span with the index of the record that ends it.

        At the first read: before the first record, every pause longer than
        `max_gap` between records, and from the last record to now. Later:
        only pauses, found when the record after one is read (so a daemon
        whose cycles fail does not ask sacct every cycle).
        """
        spans: list[_Span] = []
        previous = self._last_time
        if self._checked is not None:
            previous = self._checked if previous is None else max(previous, self._checked)
        if not self._started:
            spans.append(_Span(None, _start(records[0]) if records else now, 0))
        for index, record in enumerate(records):
            if previous is not None and _start(record) - previous > max_gap:
                spans.append(_Span(previous, _start(record), index))
            previous = _stop(record) if previous is None else max(previous, _stop(record))
        if not self._started and previous is not None and now - previous > max_gap:
            spans.append(_Span(previous, now, len(records)))
        return spans

    def _fill(
        self, spans: Sequence[_Span], config: Config, half_life_s: float, now: float
    ) -> dict[int, list[UsageSpan]]:
        """What sacct knows of each span inside the window, by the index of the record it goes before."""
        earliest = now - SACCT_HALF_LIVES * half_life_s
        wanted = [span for span in spans if span.stop > max(earliest, span.start or earliest)]
        if not wanted or self.fetch is None:
            return {}
        query_start = min(max(earliest, span.start or earliest) for span in wanted)
        try:
            allocations = self.fetch(query_start)
        except SlurmError as error:
            self._warn(error)
            self._sacct_failed = now
            return {}
        if self._sacct_failed is not None:
            logger.warning("past usage: sacct answers again; the spans the record misses are filled from it")
            self._sacct_failed = None
            self._sacct_warned = False
        # Before the record's first cycle sacct vouches from its first allocation on,
        # not from the window's start (a cluster accounted only since then); between
        # records and after the last, an empty answer is known idle time.
        first_known = max(query_start, min((a.start for a in allocations), default=math.inf))
        pool_of = build_partition_pools(config)
        fills: dict[int, list[UsageSpan]] = {}
        for span in wanted:
            start = max(earliest, span.start) if span.start is not None else first_known
            if span.stop <= start:
                continue
            fills.setdefault(span.before, []).append(
                build_usage_span(
                    allocations, start, span.stop, half_life_s, pool_of, config.resources, config.exclude_accounts
                )
            )
        return fills

    def _warn(self, error: SlurmError) -> None:
        if self._sacct_warned:
            logger.debug("past usage from sacct: %s", error)
            return
        self._sacct_warned = True
        logger.warning("past usage from the history only, sacct failed: %s", error)


@dataclass(frozen=True, slots=True)
class _Kept:
    """What PAST_FILE holds: the integrated past and where in the history it stopped."""

    usage: DecayedUsage
    cycle: tuple[int, float]
    last_id: int
    last_time: float | None
    since: float
    checked: float | None


def _parse_kept(data: object) -> _Kept:
    """PAST_FILE's JSON as _render_kept wrote it; ValueError naming what is not."""
    if not isinstance(data, dict) or data.get("version") != PAST_FILE_VERSION:
        raise ValueError(f"not version {PAST_FILE_VERSION}")
    cycle, last_id = data.get("cycle"), data.get("last_id")
    if not (isinstance(cycle, list) and len(cycle) == 2 and _is_whole(cycle[0]) and _is_finite(cycle[1])):
        raise ValueError("cycle is not [id, time]")
    if not _is_whole(last_id) or last_id < cycle[0]:
        raise ValueError("last_id is not a cycle id")
    since, last_time, checked = data.get("since"), data.get("last_time"), data.get("checked")
    if not _is_finite(since) or not all(value is None or _is_finite(value) for value in (last_time, checked)):
        raise ValueError("since, last_time or checked is not a time")
    return _Kept(
        DecayedUsage.from_state(data.get("usage")),
        (cycle[0], float(cycle[1])),
        last_id,
        None if last_time is None else float(last_time),
        float(since),
        None if checked is None else float(checked),
    )


def _is_finite(value: object) -> TypeGuard[int | float]:
    return _is_number(value) and math.isfinite(value)


@dataclass(frozen=True, slots=True)
class _Span:
    """[start, stop) unknown to the record; start None: from the window's start. `before`: the record ending it."""

    start: float | None
    stop: float
    before: int


def _start(item: UsageRecord | UsageStretch) -> float:
    return item.start if isinstance(item, UsageStretch) else item.time


def _stop(item: UsageRecord | UsageStretch) -> float:
    return item.stop if isinstance(item, UsageStretch) else item.time


def thinned_through(connection: sqlite3.Connection) -> int:
    """The last cycle id whose hour was thinned (its cycles' shares rows but the last deleted); 0 if none."""
    return int(connection.execute("SELECT coalesce(max(last_cycle), 0) FROM hours WHERE thinned = 1").fetchone()[0])
