"""Files the daemon trusts or publishes: the privacy check and atomic writes.

Sits at the bottom beside errors: config (its file), state (its directory
and file), snapshot files and the report and metrics writers use it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from slurm_drf.errors import DrfError, StateError


def check_private(path: str | os.PathLike[str], what: str, error: type[DrfError] = StateError) -> None:
    """Refuse a file or directory others could write to, as ssh does.

    Whoever can write the config or the state can make a privileged daemon
    reorder (or hold back) every job on the cluster. A path that cannot be
    read is left to whoever reads it to report.
    """
    try:
        info = os.stat(path)
    except OSError:
        return
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise error(
            f"{path}: {what} is writable by group or others (mode {stat.filemode(info.st_mode)}); "
            f"run: chmod go-w {path}"
        )
    if info.st_uid not in (0, os.geteuid()):
        raise error(
            f"{path}: {what} is owned by uid {info.st_uid}, neither root nor this user "
            f"(uid {os.geteuid()}); run: chown root {path}"
        )


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int | None = 0o644) -> None:
    """Write `data` to `path` so a reader sees the old file or the new one.

    The data goes to a temporary file beside `path`, is flushed to disk and
    then renamed over it. `mode` is the new file's mode; None gives the
    usual permissions of a new file (0666 less the umask).
    """
    target = Path(path)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # Created private when a mode follows (no moment in which others may read
    # it); with 0666 when the umask decides, which only open(2) can apply
    # without changing the process-wide umask.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else 0o600)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
