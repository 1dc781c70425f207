"""The daemon's memory on disk: tie wins, users' own nice, values written.

Sits under the daemon. One JSON file, `state.json`, in the state directory,
written atomically (a temporary file beside it, fsync, rename), so a crash
leaves the old state or the new one. A missing or unreadable state file is
logged and rebuilt from nothing: losing it costs at most a round of
rewrites, never a crash. A lock file keeps one daemon per directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import operator
import os
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any, Final

import numpy as np
import orjson

from slurm_drf.config.settings import MODES
from slurm_drf.errors import StateError
from slurm_drf.files import check_directory, read_private, write_atomic
from slurm_drf.model.codec import is_job_id, show
from slurm_drf.model.types import MAX_JOB_ID, MAX_PRIORITY, NICE_RANGE, job_numbers, plain_numbers
from slurm_drf.policy.ownership import EMPTY_MEMORY, LABEL_NICE_BELOW, JobMemories, JobMemory, is_label_nice
from slurm_drf.policy.state import EMPTY_STATE, PolicyState

logger = logging.getLogger(__name__)

STATE_FORMAT: Final = "slurm-drf-state/1"
STATE_FILE: Final = "state.json"
LOCK_FILE: Final = "lock"
# A save takes milliseconds: a temporary file this old (seconds) was left by a killed process.
LEFTOVER_AGE: Final = 600.0


def render_state(state: PolicyState) -> dict[str, Any]:
    keys, user_nice, written, modes, known = state.memory.columns()
    return {
        "format": STATE_FORMAT,
        "epoch": state.epoch,
        "fingerprint": state.fingerprint,
        "tie_wins": dict(state.tie_wins),
        "plan_wins": dict(state.plan_wins),
        # An own nice nobody recorded is null: `reset` must not take 0 for it.
        "jobs": {
            job: [user if own_known else None, value, mode]
            for job, user, value, mode, own_known in zip(keys, user_nice, written, modes, known, strict=True)
        },
        **({"controller_started": state.controller_started} if state.controller_started is not None else {}),
        **({"placed_after": state.placed_after} if state.placed_after is not None else {}),
    }


_MODES: Final = frozenset({"nice", "site_factor", "priority"})


def _whole(value: object, low: int, high: int, key: str) -> int:
    """An int from low to high, else ValueError naming the key: a state the engine could not use."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{key}: expected an integer from {low} to {high}, got {show(value)}")
    return value


def _wins(value: object, key: str) -> dict[str, float]:
    if not isinstance(value, dict):
        raise ValueError(f"{key}: expected an object, got {show(value)}")
    out = {}
    for account, wins in value.items():
        if isinstance(wins, bool) or not isinstance(wins, int | float) or not 0 <= wins < 1e15:
            raise ValueError(f"{key}.{account}: expected a count of tie wins, got {show(wins)}")
        out[str(account)] = float(wins)
    return out


def parse_job_memory(job: object, entry: object) -> JobMemory:
    """One `jobs` entry, `[user_nice, written, mode]`; ValueError naming the key when out of range.

    A user_nice of null is unknown; so is one below LABEL_NICE_BELOW, which
    is a label and nobody's own nice (`is_repaired` tells them apart).
    """
    if not isinstance(job, str) or not is_job_id(job):
        raise ValueError(f"jobs: expected job ids as keys, got {show(job)}")
    if not isinstance(entry, list) or len(entry) != 3:
        raise ValueError(f"jobs.{job}: expected [user_nice, written, mode], got {show(entry)}")
    written = _whole(entry[1], -NICE_RANGE, MAX_PRIORITY, f"jobs.{job} written")
    if entry[2] not in _MODES:
        raise ValueError(f"jobs.{job} mode: expected one of nice, site_factor, priority, got {show(entry[2])}")
    if entry[0] is None:
        return JobMemory(0, written, str(entry[2]), own_known=False)
    user_nice = _whole(entry[0], -NICE_RANGE, NICE_RANGE, f"jobs.{job} user_nice")
    if is_label_nice(user_nice):
        return JobMemory(0, written, str(entry[2]), own_known=False)
    return JobMemory(user_nice, written, str(entry[2]))


def is_repaired(entry: object) -> bool:
    """A `jobs` entry whose user_nice is a label: kept as unknown, never trusted."""
    return isinstance(entry, list) and bool(entry) and isinstance(entry[0], int) and is_label_nice(entry[0])


def parse_jobs(jobs: Any) -> Mapping[str, JobMemory]:
    """The `jobs` object as JobMemories; ValueError naming the first bad entry (`parse_job_memory`).

    Checked column by column in numpy; only a file with a bad entry is read
    again entry by entry, for the message.
    """
    if not isinstance(jobs, dict):
        raise AttributeError(f"jobs: expected an object, got {show(jobs)}")
    columns = _job_columns(jobs)
    if columns is not None:
        return columns
    return {str(job): parse_job_memory(job, entry) for job, entry in jobs.items()}


def _job_columns(jobs: dict[Any, Any]) -> JobMemories | None:
    """`jobs` as columns when every entry is a good one, else None."""
    keys = list(jobs)
    entries = list(jobs.values())
    if not keys:
        return EMPTY_MEMORY
    if set(map(type, keys)) != {str} or set(map(type, entries)) != {list} or set(map(len, entries)) != {3}:
        return None
    user, written_list, mode_list = (list(map(operator.itemgetter(k), entries)) for k in range(3))
    user_types = set(map(type, user))
    if set(map(type, written_list)) != {int} or not user_types <= {int, type(None)}:
        return None
    if not set(mode_list) <= _MODES:
        return None
    try:
        numbers = plain_numbers(keys, job_numbers(keys))
        written = np.array(written_list, dtype=np.int64)
        if type(None) in user_types:
            known = np.array([v is not None for v in user], dtype=np.bool_)
            user_nice = np.array([0 if v is None else v for v in user], dtype=np.int64)
        else:
            known = np.ones(len(user), dtype=np.bool_)
            user_nice = np.array(user, dtype=np.int64)
    except (OverflowError, ValueError):
        return None
    if (
        numbers.min() < 1
        or numbers.max() > MAX_JOB_ID
        or written.min() < -NICE_RANGE
        or written.max() > MAX_PRIORITY
        or user_nice.min() < -NICE_RANGE
        or user_nice.max() > NICE_RANGE
    ):
        return None
    # A label kept as an own nice is nobody's: unknown (`is_repaired`).
    label = known & (user_nice < LABEL_NICE_BELOW)
    known &= ~label
    user_nice[label] = 0
    codes = {name: code for code, name in enumerate(MODES)}
    mode = np.fromiter(map(codes.__getitem__, mode_list), dtype=np.int64, count=len(mode_list))
    return JobMemories.from_columns(keys, numbers, user_nice, written, mode, known)


def parse_state(data: Any) -> PolicyState:
    """A PolicyState from decoded JSON; ValueError/KeyError/TypeError when it is not one,
    or when a value is outside what the engine and Slurm can hold (the message names the key)."""
    if data.get("format") != STATE_FORMAT:
        raise ValueError(f"format is {data.get('format')!r}, expected {STATE_FORMAT!r}")
    jobs = parse_jobs(data["jobs"])
    fingerprint = data["fingerprint"]
    if not isinstance(fingerprint, str):
        raise ValueError(f"fingerprint: expected a string, got {show(fingerprint)}")
    started = data.get("controller_started")
    if started is not None and not isinstance(started, str):
        raise ValueError(f"controller_started: expected a string, got {show(started)}")
    placed_after = data.get("placed_after")
    if placed_after is not None and (
        isinstance(placed_after, bool) or not isinstance(placed_after, int | float) or not math.isfinite(placed_after)
    ):
        raise ValueError(f"placed_after: expected a number of seconds, got {show(placed_after)}")
    return PolicyState(
        epoch=_whole(data["epoch"], 0, 2**62, "epoch"),
        fingerprint=fingerprint,
        tie_wins=MappingProxyType(_wins(data["tie_wins"], "tie_wins")),
        plan_wins=MappingProxyType(_wins(data["plan_wins"], "plan_wins")),
        jobs=jobs,
        controller_started=started,
        placed_after=None if placed_after is None else float(placed_after),
    )


def salvage_user_nice(data: object) -> PolicyState:
    """From a state that does not parse, the jobs' remembered own nice values that do.

    Forgetting them would make the daemon take the nice it wrote for the
    user's own, and keep it for good. An entry whose written value or mode
    is unusable keeps its user nice as if that had been written, so the job
    gets its own nice back on reset. Everything else starts afresh.
    """
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, dict):
        return EMPTY_STATE
    kept: dict[str, JobMemory] = {}
    for job, entry in jobs.items():
        try:
            kept[job] = parse_job_memory(job, entry)
        except ValueError:
            if isinstance(job, str) and is_job_id(job) and isinstance(entry, list) and entry:
                try:
                    user_nice = _whole(entry[0], -NICE_RANGE, NICE_RANGE, "user_nice")
                except ValueError:
                    continue
                if not is_label_nice(user_nice):
                    kept[job] = JobMemory(user_nice, user_nice, "nice")
    return PolicyState(jobs=MappingProxyType(kept))


def _json_loads(raw: bytes) -> Any:
    return json.loads(raw.decode("utf-8"))


class StateStore:
    """Loads and saves the PolicyState in a directory.

    `shared`: the directory two head nodes share (`lease_dir`,
    cycle.lease), where the state file then lives, so that whichever
    daemon holds the lease knows every job's own nice; the lock stays in
    `directory`, this daemon's own.
    """

    def __init__(self, directory: str | os.PathLike[str], shared: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory)
        self.shared = Path(shared) if shared is not None else None
        self.path = (self.shared or self.directory) / STATE_FILE
        self._lock: IO[str] | None = None

    def ensure_directory(self) -> None:
        """`check` the directories, create those that are missing (0750), and check those again."""
        self.check()  # nothing created below a directory others could change
        missing = [directory for directory in self._directories() if not os.path.lexists(directory)]
        for directory in missing:
            try:
                directory.mkdir(mode=0o750, parents=True, exist_ok=True)
            except OSError as error:
                raise StateError(
                    f"{directory}: cannot create the state directory: {error.strerror or error}"
                ) from error
        if missing:
            self.check()

    def check(self) -> None:
        """What a run needs of the state directories (files.check_directory), missing ones judged by their parents.

        The daemon and `once` check them before anything is saved or
        written, and a dry run at the start of its cycle as well, so that
        `once --dry-run` refuses what `once` would.
        """
        try:
            replaces = os.lstat(self.path).st_size
        except OSError:
            replaces = 0
        check_directory(self.directory, "the state directory", replaces=0 if self.shared else replaces)
        if self.shared is not None:
            check_directory(self.shared, "the lease directory", replaces=replaces)

    def _directories(self) -> list[Path]:
        return [self.directory] if self.shared is None else [self.directory, self.shared]

    def load(self) -> PolicyState:
        """The saved state; a fresh one (logged) when missing or corrupt."""
        try:
            # Checked through the opened file and its directories, then read from it.
            raw = read_private(self.path, "the state file")
        except FileNotFoundError:
            logger.info("%s: no state yet; starting fresh", self.path)
            return EMPTY_STATE
        except OSError as error:
            logger.warning("%s: cannot read the state (%s); starting fresh", self.path, error.strerror or error)
            return EMPTY_STATE
        data: Any = None
        error_text = ""
        # orjson first, for speed; a file it refuses, or that does not parse, is read again as
        # Python's json reads it (orjson reads integers past 64 bits as floats): judged as before.
        for decode in (orjson.loads, _json_loads):
            try:
                data = decode(raw)
            except (ValueError, RecursionError) as error:  # not UTF-8: a ValueError, so corrupt
                data, error_text = None, str(error)
                continue
            try:
                state = parse_state(data)
            except (ValueError, KeyError, TypeError, AttributeError, IndexError) as error:
                error_text = str(error)
                continue
            # Only a job whose own nice is unknown can have been repaired.
            repaired = sum(map(is_repaired, data["jobs"].values())) if state.memory.unknown else 0
            if repaired:
                logger.warning(
                    "%s: %d job(s)' own nice is a label value, nobody's own: kept as unknown "
                    "(the order counts it as 0; reset leaves those jobs alone unless given --assume-own)",
                    self.path,
                    repaired,
                )
            return state
        salvaged = salvage_user_nice(data)
        logger.warning(
            "%s: state is corrupt (%s); starting fresh but for %d job(s)' own nice: "
            "tie wins are forgotten and jobs are rewritten where needed",
            self.path,
            error_text,
            len(salvaged.jobs),
        )
        return salvaged

    def save(self, state: PolicyState) -> None:
        """Atomically replace the state file; StateError (the old file kept) when it cannot be written."""
        self.ensure_directory()
        data = orjson.dumps(render_state(state), option=orjson.OPT_SORT_KEYS)
        try:
            write_atomic(self.path, data, mode=0o640)
        except OSError as error:
            raise StateError(
                f"{self.path}: cannot save the state ({error.strerror or error}); the last one is kept "
                "and nothing is written to Slurm until it can be saved"
            ) from error

    def _remove_leftovers(self) -> None:
        """Temporary files of a save a killed process never finished (write_atomic's names).

        In a directory shared with another head node's daemon, only those
        older than LEFTOVER_AGE: the other one may be saving right now.
        """
        oldest = time.time() - LEFTOVER_AGE if self.shared is not None else math.inf
        for leftover in self.path.parent.glob(f".{STATE_FILE}.*.tmp"):
            with contextlib.suppress(OSError):
                if leftover.stat().st_mtime < oldest:
                    leftover.unlink()
                    logger.info("%s: removed the leftover of an unfinished save", leftover)

    def lock(self) -> None:
        """Hold the directory's lock for as long as this process lives."""
        self.ensure_directory()
        path = self.directory / LOCK_FILE
        # 0640 whatever the umask (it names the daemon's pid, nothing more, but
        # nothing in the state directory is for others); an older, looser one is narrowed.
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        except OSError as error:
            raise StateError(
                f"{path}: cannot take the state directory's lock ({error.strerror or error}); "
                "nothing is written to Slurm"
            ) from error
        if os.fstat(descriptor).st_mode & 0o137:
            with contextlib.suppress(OSError):
                os.fchmod(descriptor, os.fstat(descriptor).st_mode & 0o640)
        handle = os.fdopen(descriptor, "r+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            handle.seek(0)
            owner = handle.read().strip() or "unknown"
            handle.close()
            raise StateError(f"{path}: another slurm-drf (pid {owner}) already uses this state directory") from error
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._lock = handle
        # Ours alone now: what a killed holder left half-saved can go.
        self._remove_leftovers()

    def unlock(self) -> None:
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None
