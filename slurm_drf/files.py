"""Files the daemon trusts or publishes: the privacy checks and atomic writes.

Sits at the bottom beside errors: config (its file), state and lease (their
directories, `check_directory`, and files), snapshot files and the report
and metrics writers use it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Final

from slurm_drf.errors import DrfError, InputError, StateError


class UnsafePathError(StateError, InputError):
    """A state or lease directory that others could change or swap: exit 2, as a config file others could change.

    A StateError to the daemon (a cycle that fails, retried), an InputError
    to the CLI (exit 2, which systemd does not restart into: the
    administrator must fix the directory first).
    """

    category = "state"


# Room a directory the daemon saves into must have beyond the file a save
# replaces (write_atomic writes the new file beside the old one): the lease,
# the lock, and the rounding of each to whole blocks.
MIN_FREE_BYTES: Final = 64 * 1024


def check_directory(path: str | os.PathLike[str], what: str, *, replaces: int = 0) -> None:
    """The one check of a directory the daemon keeps its state or lease in: what a run needs of it.

    The daemon, `once`, `reset` and the lease run it before they write
    anything there, and a dry run (`once --dry-run`, the pre-flight) runs
    the same one, so that it refuses what the run would. Refused:

    - a symlink at the path (its target is what the daemon would trust, and
      whoever may write the directory holding the link may point it
      elsewhere): UnsafePathError, naming the target to configure instead;
    - anything but a directory; a directory group or others may write (a
      sticky bit does not make it safe: others could still put files of
      the names the daemon opens in it), or owned by neither root nor us;
      a directory above it others could change (`check_ancestors`):
      UnsafePathError;
    - one this user cannot write, on a read-only filesystem, or with less
      than `replaces` (the size of the file a save replaces) plus
      MIN_FREE_BYTES free: StateError (exit 1; the daemon retries, as the
      disk may be freed).

    A directory that does not exist yet (the run creates it) is judged by
    the directories above it.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        check_ancestors(path, what, UnsafePathError)
        _check_room(_existing_parent(Path(path)), path, what, MIN_FREE_BYTES)
        return
    except OSError as error:
        raise StateError(f"{path}: cannot use {what}: {error.strerror or error}") from error
    if stat.S_ISLNK(info.st_mode):
        target = os.path.realpath(path)
        raise UnsafePathError(
            f"{path}: {what} is a symlink (to {target}); name the directory itself in the config: {target}"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafePathError(f"{path}: {what} is not a directory ({stat.filemode(info.st_mode)})")
    check_private_status(info, path, what, UnsafePathError)
    check_ancestors(path, what, UnsafePathError)
    if not os.access(path, os.W_OK | os.X_OK):
        raise StateError(
            f"{path}: {what} is not writable by this user (uid {os.geteuid()}); nothing is written to Slurm"
        )
    _check_room(Path(path), path, what, replaces + MIN_FREE_BYTES)


def _existing_parent(path: Path) -> Path:
    """The nearest directory above `path` that exists (the one a mkdir would write into)."""
    for parent in Path(os.path.abspath(path)).parents:
        if parent.exists():
            return parent
    return Path("/")


def _check_room(directory: Path, path: str | os.PathLike[str], what: str, need: int) -> None:
    """StateError when the filesystem of `directory` is read-only or has less than `need` bytes free (for us)."""
    try:
        room = os.statvfs(directory)
    except OSError:
        return  # the save itself says what is wrong
    if room.f_flag & os.ST_RDONLY:
        raise StateError(
            f"{path}: {what} is on a read-only filesystem; nothing is written to Slurm until it can be written"
        )
    # Root may use the blocks reserved for it; anyone else only what is available.
    free = (room.f_bfree if os.geteuid() == 0 else room.f_bavail) * room.f_frsize
    if free < need:
        raise StateError(
            f"{path}: {what} is on a full filesystem ({free:,} bytes free, a save needs {need:,}); "
            "nothing is written to Slurm until there is room"
        )


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
    # os.urandom(4).hex() is secrets.token_hex(4), without importing secrets (hmac, OpenSSL) at start-up.
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
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
