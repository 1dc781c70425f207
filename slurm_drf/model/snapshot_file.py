"""Snapshots saved as JSON files: a ClusterSource that reads one, and the writer.

Sits beside the CLI source: `slurm-drf plan --snapshot FILE` reads the
cluster from a file written earlier by `slurm-drf snapshot` (or by hand),
so the policy can be run and tested without Slurm. The format is docs/formats.md;
turning the JSON into the model is `model.codec.parse_snapshot`'s job.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Final

from slurm_drf.errors import SnapshotError

if TYPE_CHECKING:
    from slurm_drf.model.types import Snapshot

# The codec (numpy) and orjson are imported by the functions that read and
# write: every verb's parser takes the limit below (cli.options), and
# `slurm-drf --help` or `check-config` should not pay for them.

logger = logging.getLogger(__name__)

# The largest snapshot file read by default. 100,000 jobs are about 40 MiB;
# the limit keeps `--snapshot /dev/zero` (or a runaway file) from eating memory.
DEFAULT_MAX_SNAPSHOT_BYTES: Final = 512 * 1024 * 1024
_CHUNK: Final = 1024 * 1024


class SnapshotFileSource:
    """A ClusterSource reading a snapshot JSON file on every fetch."""

    def __init__(
        self, path: str | os.PathLike[str], max_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES, *, keep_decoded: bool = False
    ) -> None:
        self.path = Path(path)
        self.name = f"snapshot file {self.path}"
        self.max_bytes = max_bytes
        # keep_decoded: hold on to the decoded JSON of the last fetch, for a
        # process that ends with os._exit and so never pays for freeing it
        # (the CLI's `run`); otherwise it is freed as soon as it is parsed.
        self.keep_decoded = keep_decoded
        self.decoded: object = None

    def fetch_snapshot(self) -> Snapshot:
        """The snapshot in the file; SnapshotError names the file and the problem."""
        import orjson  # noqa: PLC0415  (lazy, as said at the top)

        from slurm_drf.model.codec import parse_snapshot  # noqa: PLC0415

        try:
            data = self._read()
        except OSError as error:
            raise SnapshotError(f"{self.path}: cannot read: {error.strerror or error}") from error
        try:
            decoded = orjson.loads(data)
        except orjson.JSONDecodeError as error:
            raise SnapshotError(f"{self.path}:{error.lineno}:{error.colno}: invalid JSON: {error.msg}") from error
        try:
            snapshot = parse_snapshot(decoded)
        except SnapshotError as error:
            raise SnapshotError(f"{self.path}: {error}") from error
        if self.keep_decoded:
            self.decoded = decoded
        logger.debug("%s: %d nodes, %d jobs", self.path, len(snapshot.nodes), len(snapshot.jobs))
        return snapshot

    def _read(self) -> bytes:
        """The file's bytes, at most `max_bytes` of them (a device or pipe may never end)."""
        limit = self.max_bytes
        with self.path.open("rb") as stream:
            chunks: list[bytes] = []
            if os.path.isfile(self.path):
                expected = os.fstat(stream.fileno()).st_size
                if expected > limit:
                    raise self._too_large()
                # A regular file in one read (one more byte shows a file still growing).
                chunks.append(stream.read(expected + 1))
            size = sum(map(len, chunks))
            if size > limit:
                raise self._too_large()
            while chunk := stream.read(min(_CHUNK, limit + 1 - size)):
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    raise self._too_large()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _too_large(self) -> SnapshotError:
        mib = self.max_bytes / (1024 * 1024)
        return SnapshotError(
            f"{self.path}: larger than the {mib:g} MiB a snapshot may be; "
            "if it really is one, raise the limit with --max-snapshot-mb"
        )


def render_snapshot_bytes(snapshot: Snapshot) -> bytes:
    """The snapshot as indented JSON ending in a newline."""
    import orjson  # noqa: PLC0415  (lazy, as said at the top)

    from slurm_drf.model.codec import render_snapshot  # noqa: PLC0415

    return orjson.dumps(render_snapshot(snapshot), option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)


def write_snapshot_file(path: str | os.PathLike[str], snapshot: Snapshot) -> None:
    """Write the snapshot atomically (`files.write_atomic`).

    A reader sees the old file or the new one, never half of one. A snapshot
    lists every user and account, so the file is created 0640, or stricter
    when the umask says so (never the 0666 less the umask of a plain file).
    """
    # Imported here: `plan --snapshot` reads a file and need not pay for the writer's imports.
    from slurm_drf.files import write_atomic  # noqa: PLC0415

    target = Path(path)
    data = render_snapshot_bytes(snapshot)
    try:
        write_atomic(target, data, mode=0o640, umask=True)
    except OSError as error:
        raise SnapshotError(f"{target}: cannot write: {error.strerror or error}") from error
    logger.debug("wrote %s (%d bytes)", target, len(data))
