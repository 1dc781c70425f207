"""sd_notify(3): how the service tells systemd it is ready, alive, reloading or stopping."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import MutableMapping

logger = logging.getLogger(__name__)


def parse_notify_address(value: str | None) -> str | None:
    """The AF_UNIX address in $NOTIFY_SOCKET: a path, or an abstract name written `@name`."""
    if not value:
        return None
    if value.startswith("@"):
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None  # vsock: and other transports: not spoken here


def parse_watchdog_seconds(environ: MutableMapping[str, str]) -> float | None:
    """The watchdog period from $WATCHDOG_USEC, when it is meant for this process."""
    usec = environ.get("WATCHDOG_USEC", "")
    pid = environ.get("WATCHDOG_PID", "")
    if pid and pid != str(os.getpid()):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 1_000_000 if value > 0 else None


class Notifier:
    """Tells systemd how the service is doing; does nothing when not run by systemd.

    The protocol is one datagram per message to the AF_UNIX socket named by
    $NOTIFY_SOCKET, holding newline-separated `KEY=value` lines.
    """

    def __init__(self, address: str | None = None, watchdog_seconds: float | None = None) -> None:
        self.address = address
        self.watchdog_seconds = watchdog_seconds
        self._lock = threading.Lock()
        self._failed = False

    @classmethod
    def from_environment(cls, environ: MutableMapping[str, str], *, unset: bool = True) -> Notifier:
        """Read $NOTIFY_SOCKET and $WATCHDOG_USEC; `unset` keeps them from the Slurm commands we run."""
        raw = environ.get("NOTIFY_SOCKET")
        address = parse_notify_address(raw)
        if raw and address is None:
            logger.warning("NOTIFY_SOCKET=%s: only unix sockets are supported; not notifying systemd", raw)
        watchdog = parse_watchdog_seconds(environ)
        if unset:
            for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
                environ.pop(name, None)
        return cls(address, watchdog if address else None)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, *fields: str) -> bool:
        """Send one message; False (logged once) when it could not be delivered."""
        if self.address is None:
            return False
        data = "\n".join(fields).encode("utf-8", errors="replace")
        try:
            with self._lock, socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(self.address)
                sock.sendall(data)
        except OSError as error:
            if not self._failed:
                logger.warning("sd_notify to %s failed: %s", self.address.replace("\0", "@"), error.strerror or error)
            self._failed = True
            return False
        self._failed = False
        return True

    def ready(self, status: str) -> bool:
        return self.notify("READY=1", status_field(status))

    def cycle(self, status: str) -> bool:
        return self.notify(status_field(status), "WATCHDOG=1")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def reloading(self) -> bool:
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={now}")

    def stopping(self, status: str) -> bool:
        return self.notify("STOPPING=1", status_field(status))


def status_field(text: str) -> str:
    """`STATUS=text` on one line, as systemctl status shows it."""
    return "STATUS=" + " ".join(text.split())
