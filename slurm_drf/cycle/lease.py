"""Two head nodes, one writer: a lease in a directory both share (docs/operations.md, "Two head nodes").

Sites with a backup slurmctld (`SlurmctldHost` twice) install the daemon on
both heads. With `lease_dir` set to a directory both see (beside Slurm's
own shared StateSaveLocation), each cycle first takes or renews the lease:
`lease.json` names the holder and when its hold ends, LEASE_INTERVALS
intervals after its last renewal, and is read and replaced under a POSIX
record lock on `lease.lock` (fcntl.lockf, which NFS carries). A daemon
that does not hold it is the standby: it reads nothing, writes nothing,
and tries again 50 ms after the hold ends (service.loop). The holder
renews at each cycle, again right before it saves its state (`confirm`,
the fence), and before every batch of its writes, each sized to end half
an interval before the hold does (cycle.fence): a holder whose hold ran
out mid-cycle writes nothing more, and one that finds the lease taken
stops writing at once (LeaseLost). A clean stop releases the lease: the
standby takes over at its next attempt, within one interval; after a
crash, LEASE_INTERVALS intervals and 50 ms after the last renewal.

The daemons' state file lives in the same directory (`StateStore(shared=)`):
the new holder knows every job's own nice from its first cycle. Each keeps
its own lock and history in its own state directory. The directory is
checked as the state directory is (files.check_directory: no symlink, no
one else may write it, room to write). The hold is wall-clock time: the
heads' clocks must agree (NTP) to well under half an interval.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from slurm_drf.errors import StateError
from slurm_drf.files import check_directory, write_atomic

logger = logging.getLogger(__name__)

LEASE_FILE: Final = "lease.json"
LEASE_LOCK: Final = "lease.lock"
# How long a renewal holds, in intervals: more than one (the next renewal
# comes an interval later), less than two (the standby's promise).
LEASE_INTERVALS: Final = 1.5


class LeaseLost(StateError):
    """Another daemon holds the lease: this one must not write."""

    category = "lease"

    def __init__(self, lease: Path, holder: str, stopped: str = "this cycle writes nothing") -> None:
        super().__init__(f"{lease}: {holder} holds the lease now; {stopped}")
        self.lease = lease
        self.holder = holder

    def stopped_after(self, sent: int, total: int) -> LeaseLost:
        """The same loss found between two batches of writes (cycle.fence): how far the writes got."""
        if sent == 0:
            return self
        return LeaseLost(
            self.lease,
            self.holder,
            f"this daemon stopped writing after {sent} of {total} value(s); the holder writes the rest",
        )


@dataclass(frozen=True, slots=True)
class Hold:
    holder: str
    until: float


class Lease:
    """The right to write, shared through a directory; one per daemon process."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        interval: float,
        *,
        clock: Callable[[], float] = time.time,
        name: str | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.interval = interval
        self.clock = clock
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    def acquire(self) -> Hold | None:
        """Take or renew the lease: None when this daemon holds it now, else the other's hold."""
        with self._locked():
            hold = self._read()
            now = self.clock()
            if hold is not None and hold.holder != self.name and hold.until > now:
                return hold
            self._write(Hold(self.name, now + LEASE_INTERVALS * self.interval))
            if hold is None or hold.holder != self.name:
                logger.warning(
                    "%s: this daemon (%s) holds the lease now%s",
                    self.directory / LEASE_FILE,
                    self.name,
                    f"; {hold.holder}'s ended" if hold is not None and hold.until > 0 else "",
                )
            return None

    def confirm(self) -> None:
        """The fence before the state is saved and before each batch of writes: renew, or LeaseLost."""
        hold = self.acquire()
        if hold is not None:
            raise LeaseLost(self.directory / LEASE_FILE, hold.holder)

    def release(self) -> None:
        """Give the lease up (a clean stop): the standby need not wait for the hold to end."""
        with contextlib.suppress(StateError, OSError), self._locked():
            hold = self._read()
            if hold is not None and hold.holder == self.name:
                self._write(Hold(self.name, 0.0))
                logger.info("%s: lease released", self.directory / LEASE_FILE)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            if not os.path.lexists(self.directory):  # a symlink in its place is check_directory's to refuse
                self.directory.mkdir(mode=0o750, parents=True, exist_ok=True)
            check_directory(self.directory, "the lease directory")
            descriptor = os.open(self.directory / LEASE_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        except OSError as error:
            raise StateError(f"{self.directory}: cannot use the lease directory: {error.strerror or error}") from error
        try:
            fcntl.lockf(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)  # closing drops the record lock

    def _read(self) -> Hold | None:
        path = self.directory / LEASE_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            holder, until = data["holder"], data["until"]
            if not isinstance(holder, str) or isinstance(until, bool) or not isinstance(until, int | float):
                raise TypeError("holder must be a string, until a number")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as error:
            # Nobody can be trusted to hold it: the next writer takes it.
            logger.warning("%s: unreadable lease (%s): taken afresh", path, error)
            return None
        return Hold(holder, float(until))

    def _write(self, hold: Hold) -> None:
        data = json.dumps({"holder": hold.holder, "until": hold.until}).encode()
        try:
            write_atomic(self.directory / LEASE_FILE, data, mode=0o640)
        except OSError as error:
            raise StateError(
                f"{self.directory / LEASE_FILE}: cannot write the lease: {error.strerror or error}"
            ) from error
