"""The reclaim's moves on disk before they are made: its cooldown across a crash.

The history records each requeue (or cancel) with Slurm's answer, after the
cycle; a daemon killed between `scontrol requeue` and that record would
not know, once restarted, that it had moved the job, and could move it
again within `cooldown` (docs/rule.md §9). So the moves about to be made
are written first to `reclaim-moves.json` in the state directory (atomic,
private): job id -> when. Once Slurm has answered, the jobs it did not
move (gone, refused) are taken out again; a crash before that keeps them,
which only errs on the side of moving less. The cooldown counts a job as
moved at the later of the history's record and this file's.

Entries older than `cooldown` are dropped on each write, so the file holds
at most the moves of one cooldown. A file that cannot be read is said once
a process, as a warning, and counted as empty (the history still has every
move it recorded); it is rewritten at the next move.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from slurm_drf.errors import StateError
from slurm_drf.files import read_private, write_atomic
from slurm_drf.model.codec import is_job_id

logger = logging.getLogger(__name__)

MOVES_FILE: Final = "reclaim-moves.json"
MOVES_FORMAT: Final = "slurm-drf-reclaim-moves/1"
# A file larger than this is not one the daemon wrote (a day of moves at 1,000 a cycle is far less).
MOVES_LIMIT: Final = 16 * 2**20


class ReclaimMoves:
    """`reclaim-moves.json` of one state directory: the moves asked of Slurm, by job, and when."""

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / MOVES_FILE
        self._said: str | None = None

    def moved_since(self, since: float) -> dict[str, float]:
        """Each job a move was asked for at or after `since`, and when last."""
        return {job: when for job, when in self._read().items() if when >= since}

    def about_to_move(self, job_ids: Sequence[str], now: float, cooldown: float) -> None:
        """Before Slurm is asked: these jobs are moved at `now` (entries older than `cooldown` dropped)."""
        if not job_ids:
            return
        kept = self._read()
        if math.isfinite(cooldown):
            kept = {job: when for job, when in kept.items() if when >= now - cooldown}
        kept.update(dict.fromkeys(job_ids, now))
        self._write(kept)

    def not_moved(self, job_ids: Sequence[str]) -> None:
        """Slurm answered and did not move these (gone, refused): they no longer count."""
        if not job_ids:
            return
        kept, gone = self._read(), set(job_ids)
        left = {job: when for job, when in kept.items() if job not in gone}
        if len(left) != len(kept):
            self._write(left)

    def _read(self) -> dict[str, float]:
        try:
            data = read_private(self.path, "the reclaim's record of moves", limit=MOVES_LIMIT)
        except FileNotFoundError:
            return {}
        except (OSError, StateError) as error:
            self._say(str(error))
            return {}
        try:
            return _parse(data)
        except ValueError as error:
            self._say(f"{self.path}: {error}")
            return {}

    def _write(self, moves: Mapping[str, float]) -> None:
        text = json.dumps({"format": MOVES_FORMAT, "moves": dict(moves)}, sort_keys=True)
        write_atomic(self.path, text.encode(), 0o600)

    def _say(self, text: str) -> None:
        if text != self._said:
            logger.warning("%s; the cooldown counts only the history's record of moves", text)
            self._said = text


def _parse(data: bytes) -> dict[str, float]:
    """The moves of a file's bytes; ValueError saying what is wrong."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"not JSON ({error})") from error
    if not isinstance(document, dict) or document.get("format") != MOVES_FORMAT:
        raise ValueError(f"not a {MOVES_FORMAT} file")
    moves = document.get("moves")
    if not isinstance(moves, dict):
        raise ValueError("moves: expected a mapping of job id to time")
    out: dict[str, float] = {}
    for job, when in moves.items():
        if not is_job_id(job) or isinstance(when, bool) or not isinstance(when, (int, float)):
            raise ValueError(f"moves: {job!r}: expected a job id and a time")
        if not math.isfinite(when):
            raise ValueError(f"moves: {job}: the time is not a finite number")
        out[job] = float(when)
    return out
