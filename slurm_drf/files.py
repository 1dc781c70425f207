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
    """Refuse a file or directory others could change, as ssh does (`check_private_status`, `check_ancestors`).

    Whoever can write the config or the state can make a privileged daemon
    reorder (or hold back) every job on the cluster. A path that cannot be
    read is left to whoever reads it to report. For a file the daemon reads,
    `read_private` checks what it opened instead of the path.
    """
    try:
        info = os.stat(path)
    except OSError:
        return
    check_private_status(info, path, what, error)
    check_ancestors(path, what, error)


def read_private(
    path: str | os.PathLike[str], what: str, error: type[DrfError] = StateError, limit: int | None = None
) -> bytes:
    """The bytes of a file the daemon trusts, read from the very file that was checked.

    Opened first, then checked through its descriptor (fstat: a path swapped
    between a check and the open cannot pass), then its directories
    (`check_ancestors`), then read from the same descriptor. Only a regular
    file is read. `limit`: refuse (as `error`) a file longer than that many
    bytes. OSError (missing, unreadable) is the caller's to report.
    """
    # O_NONBLOCK: a FIFO put in the file's place must not hang the open.
    descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path}: {what} is not a regular file ({stat.filemode(info.st_mode)})")
    except BaseException:
        os.close(descriptor)
        raise
    with os.fdopen(descriptor, "rb") as stream:
        check_private_status(info, path, what, error)
        check_ancestors(path, what, error)
        if limit is not None and info.st_size > limit:
            raise error(too_large_message(path, what, limit))
        data = stream.read() if limit is None else stream.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise error(too_large_message(path, what, limit))
    return data


def check_regular(path: str | os.PathLike[str], what: str, error: type[DrfError] = StateError) -> None:
    """Refuse anything at `path` but a regular file (a missing one is fine).

    For files a library opens by name (SQLite's database and its -wal,
    -shm and -journal companions): opening a FIFO for reading waits for a
    writer, so a FIFO (or a device) put there would hang every reader for ever.
    """
    try:
        info = os.stat(path)
    except OSError:
        return  # missing or unreadable: the opener says so
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{path}: {what} is not a regular file ({stat.filemode(info.st_mode)})")


def too_large_message(path: str | os.PathLike[str], what: str, limit: int) -> str:
    """`config.yaml: the config file is larger than 1,048,576 bytes (1 MiB), ...`."""
    return (
        f"{path}: {what} is larger than {limit:,} bytes ({limit / 2**20:g} MiB), "
        "far more than a real one needs; is it the right file?"
    )


def check_private_status(
    info: os.stat_result, path: str | os.PathLike[str], what: str, error: type[DrfError] = StateError
) -> None:
    """Refuse what `info` describes when group or others may write it, or when neither root nor we own it."""
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise error(
            f"{path}: {what} is writable by group or others (mode {stat.filemode(info.st_mode)}); "
            f"run: chmod go-w {path}"
        )
    _refuse_foreign_owner(info, path, f"{what} is", path, error)


def _refuse_foreign_owner(
    info: os.stat_result, path: str | os.PathLike[str], subject: str, target: object, error: type[DrfError]
) -> None:
    """The owner rule of `check_private_status` and `check_ancestors`: root or this user."""
    if info.st_uid not in (0, os.geteuid()):
        raise error(
            f"{path}: {subject} owned by uid {info.st_uid}, neither root nor this user "
            f"(uid {os.geteuid()}); run: chown root {target}"
        )


def check_ancestors(path: str | os.PathLike[str], what: str, error: type[DrfError] = StateError) -> None:
    """Refuse a path whose directories someone else could change, as OpenSSH's `safe_path` does.

    Every directory from the one holding the (symlink-resolved) path up to
    `/` must be owned by root or by us, and not writable by group or others:
    whoever may write a directory may rename the file in it away and put
    their own in its place. One exception to OpenSSH: a directory with the
    sticky bit (`/tmp`, mode 1777, owned by root) passes, because there no
    one but an entry's owner (or root) may rename or remove it; the owner
    rule still applies to it. docs/operations.md says so.
    """
    resolved = Path(os.path.realpath(path))
    for directory in resolved.parents:
        try:
            info = os.stat(directory)
        except OSError:
            continue
        writable = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if writable and not info.st_mode & stat.S_ISVTX:
            raise error(
                f"{path}: {what} is in directory {directory}, which is writable by group or others "
                f"(mode {stat.filemode(info.st_mode)}) and not sticky; run: chmod go-w {directory}"
            )
        _refuse_foreign_owner(info, path, f"{what} is in directory {directory},", directory, error)


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o644, *, umask: bool = False) -> None:
    """Write `data` to `path` so a reader sees the old file or the new one.

    The data goes to a temporary file beside `path`, is flushed to disk and
    then renamed over it. `mode` is the new file's mode; with `umask` the
    process umask may make it stricter still, never looser (a snapshot lists
    every user: 0640 at most, 0600 under umask 077).
    """
    target = Path(path)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # Created private (no moment in which others may read it), then given
    # its mode; or, when the umask may tighten it, created with the mode
    # itself, which open(2) narrows by the umask without changing the
    # process-wide umask.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode if umask else 0o600)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if not umask:
            os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
