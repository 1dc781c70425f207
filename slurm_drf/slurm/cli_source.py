"""A ClusterSource that reads the cluster through Slurm's command-line tools.

Sits between the daemon and Slurm: `fetch_snapshot` runs

- `squeue --json --all` for every job (pending arrays stay one record: JSON
  output is never expanded per task, and `--array` is not passed);
- `scontrol --all --json show nodes` (23.02 and later) or `sinfo --json
  --all` (22.05, whose scontrol has no JSON) for the nodes; the release is
  taken from squeue's meta, and the other command is tried when the first
  fails;
- `scontrol show config` for the PriorityWeight* values and ClusterName;
- `scontrol show assoc_mgr flags=assoc` for the association tree (accounts,
  their parents and users, RawShares): slurmctld's own cache, the tree its
  scheduler uses, read without a round trip to slurmdbd; at most every
  `TREE_MAX_AGE` seconds (`AssociationReader`);

and turns their output into a Snapshot with the pure readers of slurm.parse.
The argv lists and the environment are built by pure `build_*` functions;
execute.run_command runs them, and execute.stream_command runs squeue,
whose answer is read from the pipe a job record at a time
(`slurm.parse.json_stream`). Each command may run `timeout` seconds (the
config's `slurm_timeout`); one that takes more than half of it is warned
of (`SlowReads`), once an hour, before the queue outgrows it.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Protocol, TypeVar

import orjson

from slurm_drf.config.settings import DEFAULT_SLURM_TIMEOUT
from slurm_drf.errors import SlurmReadError
from slurm_drf.model.codec import format_time
from slurm_drf.model.types import Association, Node, Snapshot
from slurm_drf.slurm.execute import run_command, stream_command
from slurm_drf.slurm.parse.assoc_mgr import check_associations, parse_assoc_mgr
from slurm_drf.slurm.parse.envelope import parse_version_tuple
from slurm_drf.slurm.parse.jobs import SqueueAnswer, read_squeue_answer
from slurm_drf.slurm.parse.json_stream import JsonAnswer
from slurm_drf.slurm.parse.nodes import parse_sinfo_json
from slurm_drf.slurm.parse.scontrol import parse_cluster_name, parse_priority_type
from slurm_drf.slurm.parse.snapshot import SnapshotHeader, build_snapshot

logger = logging.getLogger(__name__)

# squeue, sinfo and scontrol read defaults from these; a stray SQUEUE_STATES
# or SQUEUE_PARTITION in the daemon's environment would hide jobs from the
# JSON output (filtered since 24.05).
_FILTER_ENV_PREFIXES = ("SQUEUE_", "SINFO_", "SCONTROL_")


class CommandRunner(Protocol):
    """execute.run_command's shape; tests pass a fake that replays output."""

    def __call__(self, argv: Sequence[str], timeout: float, *, env: Mapping[str, str] | None = None) -> str: ...


_T = TypeVar("_T")


class CommandStreamer(Protocol):
    """execute.stream_command's shape: the output handed to `consume` in pieces as it arrives."""

    def __call__(
        self,
        argv: Sequence[str],
        timeout: float,
        consume: Callable[[Iterator[str]], _T],
        *,
        env: Mapping[str, str] | None = None,
    ) -> _T: ...


def build_squeue_argv() -> list[str]:
    """Every job, also those in hidden partitions, as JSON."""
    return ["squeue", "--json", "--all"]


def build_sinfo_argv() -> list[str]:
    """Nodes as JSON: one record per node in 22.05, node groups from 23.02."""
    return ["sinfo", "--json", "--all"]


def build_scontrol_nodes_argv() -> list[str]:
    """One JSON record per node (23.02 and later)."""
    return ["scontrol", "--all", "--json", "show", "nodes"]


def build_scontrol_config_argv() -> list[str]:
    return ["scontrol", "show", "config"]


def build_assoc_mgr_argv() -> list[str]:
    """slurmctld's cached associations: no slurmdbd round trip (22.05 sacctmgr has no --json)."""
    return ["scontrol", "show", "assoc_mgr", "flags=assoc"]


# How long a tree read from Slurm is used before it is read again. Accounts
# and shares change by hand, rarely; jobs every cycle. The text is about 20
# lines per association, so a large site's tree is worth not reading every cycle.
TREE_MAX_AGE: Final = 300.0


class AssociationReader:
    """The association tree, re-read at most every `max_age` seconds.

    A failed read (scontrol fails, or what it prints is not one tree) is a
    one-line warning: the last tree read is kept, and before any was read
    the tree is empty, which is today's flat behaviour. The next read is
    tried at the next fetch after a failure, not `max_age` later.
    """

    def __init__(
        self,
        run: Callable[[Sequence[str]], str],
        clock: Callable[[], float],
        max_age: float = TREE_MAX_AGE,
    ) -> None:
        self._run = run
        self._clock = clock
        self.max_age = max_age
        self._tree: tuple[Association, ...] = ()
        self._read_at: float | None = None

    def fetch(self, cluster: str | None) -> tuple[Association, ...]:
        now = self._clock()
        if self._read_at is not None and 0 <= now - self._read_at < self.max_age:
            return self._tree
        argv = build_assoc_mgr_argv()
        try:
            tree = check_associations(parse_assoc_mgr(self._run(argv), cluster or None))
        except SlurmReadError as error:
            kept = f"keeping the tree read {now - self._read_at:.0f}s ago" if self._read_at is not None else "flat"
            logger.warning("association tree unknown (%s): %s", kept, error)
            return self._tree
        self._tree, self._read_at = tree, now
        logger.debug("read %d associations", len(tree))
        return tree


# How often the slow-read warning may repeat for one command: once is enough
# to act on, and a slow site's log is not flooded every cycle.
SLOW_READ_WARN_EVERY: Final = 3600.0


class SlowReads:
    """Times Slurm's read commands, and warns when one took more than half of `timeout`.

    squeue's time grows with the queue: the warning comes while the cycles
    still succeed, naming the key to raise, at most once every
    SLOW_READ_WARN_EVERY seconds per command. `clock` is monotonic.
    """

    def __init__(self, timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self._clock = clock
        self._warned_at: dict[str, float] = {}

    def timed(self, argv: Sequence[str], read: Callable[[], _T]) -> _T:
        """What `read()` returns; a read that fails says why itself, as `no answer` past the timeout."""
        started = self._clock()
        result = read()
        self.note(" ".join(argv), self._clock() - started)
        return result

    def note(self, command: str, seconds: float) -> None:
        """Warn of `command` taking `seconds`, when over half the timeout and not warned of within the hour."""
        if seconds <= self.timeout / 2:
            return
        now = self._clock()
        warned = self._warned_at.get(command)
        if warned is not None and now - warned < SLOW_READ_WARN_EVERY:
            return
        self._warned_at[command] = now
        logger.warning(
            "%s took %.1f s, more than half of slurm_timeout (%g s): raise slurm_timeout in the config "
            "before the cycles fail with no answer (warned at most once an hour)",
            command,
            seconds,
            self.timeout,
        )


def build_node_commands(version: str | None) -> list[list[str]]:
    """The node commands to try, best first, for a Slurm release."""
    release = parse_version_tuple(version)
    if release is not None and release < (23, 2):
        return [build_sinfo_argv()]
    return [build_scontrol_nodes_argv(), build_sinfo_argv()]


def build_command_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment for Slurm's commands.

    SLURM_BITSTR_LEN=0 makes squeue print a pending array's whole task list
    (it cuts it to 64 characters otherwise, see xlate_array_task_str());
    the tools' own default-filter variables are dropped.
    """
    env = {k: v for k, v in environ.items() if not k.startswith(_FILTER_ENV_PREFIXES)}
    env["SLURM_BITSTR_LEN"] = "0"
    return env


def parse_command_json(text: str, command: Sequence[str]) -> dict[str, Any]:
    """A command's JSON output; SlurmReadError names the command and position.

    An answer that stops before its JSON is complete (a command killed
    mid-output, a full pipe, a disk that filled under a wrapper) is named
    as cut short, with how much arrived, and an empty one as empty: the
    cycle stops before anything is planned or written.
    """
    name = " ".join(command)
    if not text.strip():
        raise SlurmReadError(f"{name}: empty answer (exit status 0 but no JSON on standard output)")
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        if error.pos >= len(text.rstrip()):
            raise SlurmReadError(
                f"{name}: answer cut short: its JSON stops at {where} after {len(text)} characters, incomplete"
            ) from error
        raise SlurmReadError(f"{name}: invalid JSON at {where}: {error.msg}") from error
    if not isinstance(data, dict):
        raise SlurmReadError(f"{' '.join(command)}: expected a JSON object, got {type(data).__name__}")
    return data


def _read_jobs(name: str, pieces: Iterator[str]) -> SqueueAnswer:
    """squeue's answer a record at a time: at 50,000 jobs its parsed tree would be the daemon's peak memory."""
    return read_squeue_answer(JsonAnswer(pieces, "jobs", name))


class CliSource:
    """Reads the cluster with squeue, sinfo/scontrol; one Snapshot per fetch."""

    def __init__(
        self,
        timeout: float = DEFAULT_SLURM_TIMEOUT,
        partitions: Iterable[str] | None = None,
        *,
        runner: CommandRunner = run_command,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        streamer: CommandStreamer | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = "slurm cli"
        self.timeout = timeout
        # `clock` stamps the snapshot; the commands are timed on `monotonic`.
        self.slow_reads = SlowReads(timeout, monotonic)
        if isinstance(partitions, str):
            partitions = [partitions]
        self.partitions = tuple(partitions) if partitions is not None else None
        self._runner = runner
        # squeue's answer is read as it arrives; a test's runner hands it over whole.
        self._stream: CommandStreamer = streamer or (stream_command if runner is run_command else self._whole)
        self._env = build_command_env(os.environ if environ is None else environ)
        self._clock = clock
        #: PriorityType from the last fetch (also in the Snapshot it returned).
        self.priority_type: str | None = None
        self.associations = AssociationReader(self._run, clock)

    def _run(self, argv: Sequence[str]) -> str:
        return self.slow_reads.timed(argv, lambda: self._runner(argv, self.timeout, env=self._env))

    def _whole(
        self,
        argv: Sequence[str],
        timeout: float,
        consume: Callable[[Iterator[str]], _T],
        *,
        env: Mapping[str, str] | None = None,
    ) -> _T:
        return consume(iter([self._runner(argv, timeout, env=env)]))

    def _fetch_nodes(self, version: str | None) -> list[Node]:
        failure: SlurmReadError | None = None
        for argv in build_node_commands(version):
            try:
                return parse_sinfo_json(parse_command_json(self._run(argv), argv))
            except SlurmReadError as error:
                logger.info("%s", error)
                failure = error
        raise failure or SlurmReadError("no command to read the nodes with")

    def _fetch_config(self) -> str:
        try:
            return self._run(build_scontrol_config_argv())
        except SlurmReadError as error:
            # Weights only feed a warning; the cycle can go on without them.
            logger.warning("priority weights unknown: %s", error)
            return ""

    def fetch_snapshot(self) -> Snapshot:
        """Read jobs, nodes and configuration now; SlurmReadError when Slurm cannot be read."""
        squeue_argv = build_squeue_argv()
        name = " ".join(squeue_argv)
        read = functools.partial(_read_jobs, name)
        squeue = self.slow_reads.timed(
            squeue_argv, lambda: self._stream(squeue_argv, self.timeout, read, env=self._env)
        )
        version = squeue.version
        nodes = self._fetch_nodes(version)
        config = self._fetch_config()
        self.priority_type = parse_priority_type(config)
        cluster = squeue.cluster or parse_cluster_name(config) or ""
        associations = self.associations.fetch(cluster)
        logger.debug("read %d nodes and %d jobs from Slurm %s", len(nodes), len(squeue.jobs), version or "?")
        taken_at = format_time(self._clock())
        header = SnapshotHeader(cluster, taken_at, version)
        return build_snapshot(header, nodes, squeue.jobs, self.partitions, config, squeue.het_leaders, associations)
