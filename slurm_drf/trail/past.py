"""Where the past comes from: the daemon's own history.sqlite, integrated (docs/rule.md §6).

Every cycle records each account's running usage per pool (`shares.usage`,
trail.history). `HistoryPast` reads those records, oldest first, into a
`policy.history.DecayedUsage` and hands the cycle each account's decayed
average allocation. It reads the file once over the last
LOOKBACK_HALF_LIVES half-lives when it starts (so the past survives
restarts: it is on disk), then only the cycles recorded since.

What the record cannot know: a time the daemon did not run (or cycles
failed) longer than GAP_INTERVALS intervals is a gap, left out of the
average rather than counted as zero use; jobs that ran only during such a
gap are not seen (a later increment recovers them from Slurm's
accounting). A cycle with no account rows is a known interval of no use.
Dry runs record what they saw, so they count as well.

A history that cannot be read is logged and the cycle goes on with what
was read before: the past never stops the daemon.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from slurm_drf.config.settings import Config
from slurm_drf.errors import StateError
from slurm_drf.policy.history import DecayedUsage, UsageByPool, UsageRecord
from slurm_drf.trail.history import history_path, open_history_readonly

logger = logging.getLogger(__name__)

# Records older than this many half-lives weigh less than 2^-20 of the newest: not read.
LOOKBACK_HALF_LIVES: Final = 20.0
# A pause between two records longer than this many intervals is a gap (unknown use).
GAP_INTERVALS: Final = 2.0


def read_usage_records(
    connection: sqlite3.Connection, *, since: float, after_id: int = 0
) -> list[tuple[int, UsageRecord]]:
    """(cycle id, record) of every cycle with id > after_id and time >= since, in id order."""
    rows = connection.execute(
        "SELECT c.id, c.time, s.pool, s.account, s.usage FROM cycles c"
        " LEFT JOIN shares s ON s.cycle_id = c.id WHERE c.id > ? AND c.time >= ? ORDER BY c.id",
        (after_id, since),
    ).fetchall()
    records: list[tuple[int, UsageRecord]] = []
    current: tuple[int, float] | None = None
    usage: dict[str, dict[str, dict[str, float]]] = {}
    for cycle_id, moment, pool, account, text in rows:
        if current is not None and current[0] != cycle_id:
            records.append((current[0], UsageRecord(current[1], usage)))
            usage = {}
        current = (int(cycle_id), float(moment))
        if pool is not None:
            amounts = json.loads(text)
            usage.setdefault(pool, {})[account] = {r: float(a) for r, a in amounts.items()}
    if current is not None:
        records.append((current[0], UsageRecord(current[1], usage)))
    return records


class HistoryPast:
    """The decayed past for each cycle, read from `history.sqlite` in the state directory."""

    def __init__(self, state_dir: str | os.PathLike[str], *, clock: Callable[[], float] = time.time) -> None:
        self.path: Path = history_path(state_dir)
        self.clock = clock
        self._usage: DecayedUsage | None = None
        self._since = 0.0
        self._last_id = 0

    def past(self, config: Config) -> UsageByPool | None:
        """Each account's decayed average allocation now; None when `history` is off."""
        history = config.history
        if history is None or not history.active:
            self._usage = None
            return None
        now = self.clock()
        max_gap = GAP_INTERVALS * config.interval
        usage = self._usage
        if usage is None or usage.half_life != history.half_life or usage.max_gap != max_gap:
            usage = self._usage = DecayedUsage(history.half_life, max_gap)
            self._since = now - LOOKBACK_HALF_LIVES * history.half_life
            self._last_id = 0
        self._read(usage)
        return usage.past_at(now)

    def _read(self, usage: DecayedUsage) -> None:
        if not self.path.exists():
            return  # a fresh install: no past yet
        try:
            connection = open_history_readonly(self.path)
            try:
                records = read_usage_records(connection, since=self._since, after_id=self._last_id)
            finally:
                connection.close()
        except (sqlite3.Error, StateError, OSError, ValueError) as error:
            logger.warning("%s: cannot read past usage from the history: %s", self.path, error)
            return
        for cycle_id, record in records:
            usage.add(record)
            self._last_id = cycle_id
