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
import os
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any, Final

from slurm_drf.errors import StateError
from slurm_drf.files import check_private, write_atomic
from slurm_drf.policy.state import EMPTY_STATE, JobMemory, PolicyState

logger = logging.getLogger(__name__)

STATE_FORMAT: Final = "slurm-drf-state/1"
STATE_FILE: Final = "state.json"
LOCK_FILE: Final = "lock"


def render_state(state: PolicyState) -> dict[str, Any]:
    return {
        "format": STATE_FORMAT,
        "epoch": state.epoch,
        "fingerprint": state.fingerprint,
        "tie_wins": dict(state.tie_wins),
        "plan_wins": dict(state.plan_wins),
        "jobs": {job: [m.user_nice, m.written, m.mode] for job, m in state.jobs.items()},
    }


def parse_state(data: Any) -> PolicyState:
    """A PolicyState from decoded JSON; ValueError/KeyError/TypeError when it is not one."""
    if data.get("format") != STATE_FORMAT:
        raise ValueError(f"format is {data.get('format')!r}, expected {STATE_FORMAT!r}")
    jobs = {str(job): JobMemory(int(entry[0]), int(entry[1]), str(entry[2])) for job, entry in data["jobs"].items()}
    return PolicyState(
        epoch=int(data["epoch"]),
        fingerprint=str(data["fingerprint"]),
        tie_wins=MappingProxyType({str(k): float(v) for k, v in data["tie_wins"].items()}),
        plan_wins=MappingProxyType({str(k): float(v) for k, v in data["plan_wins"].items()}),
        jobs=MappingProxyType(jobs),
    )


class StateStore:
    """Loads and saves the PolicyState in a directory."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / STATE_FILE
        self._lock: IO[str] | None = None

    def ensure_directory(self) -> None:
        try:
            self.directory.mkdir(mode=0o750, parents=True, exist_ok=True)
        except OSError as error:
            raise StateError(
                f"{self.directory}: cannot create the state directory: {error.strerror or error}"
            ) from error
        check_private(self.directory, "the state directory")

    def load(self) -> PolicyState:
        """The saved state; a fresh one (logged) when missing or corrupt."""
        check_private(self.path, "the state file")
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            logger.info("%s: no state yet; starting fresh", self.path)
            return EMPTY_STATE
        except OSError as error:
            logger.warning("%s: cannot read the state (%s); starting fresh", self.path, error.strerror or error)
            return EMPTY_STATE
        try:
            return parse_state(json.loads(text))
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as error:
            logger.warning(
                "%s: state is corrupt (%s); starting fresh: tie wins are forgotten and jobs are rewritten where needed",
                self.path,
                error,
            )
            return EMPTY_STATE

    def save(self, state: PolicyState) -> None:
        """Atomically replace the state file."""
        self.ensure_directory()
        data = json.dumps(render_state(state), separators=(",", ":"), sort_keys=True)
        write_atomic(self.path, data.encode(), mode=0o640)

    def lock(self) -> None:
        """Hold the directory's lock for as long as this process lives."""
        self.ensure_directory()
        path = self.directory / LOCK_FILE
        handle = path.open("a+", encoding="utf-8")
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

    def unlock(self) -> None:
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None
