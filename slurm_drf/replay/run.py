"""One arm of a replay on a live Slurm: submit on time, sample, measure, leave nothing behind.

Sits under `cli/replay.py`. `run_arm` checks the trace and the options
first, before Slurm is asked anything (`trace.check_trace`: every name
follows the one rule, and whatever `simulate` refuses is refused; every
wall time bounded), then the cluster (no other jobs
unless forced, every job fits, jobs no shorter than Slurm's scheduling
interval, every job's submitter a Unix user, every account and user
association known or created), starts the daemon for a drf
arm (`slurm-drf daemon` with the arm's config, in a private temporary
state directory), then submits each trace job at its compressed time and
samples the cluster every `sample_interval` wall seconds through the
configured backend, until every job has ended (or `stop_after` trace
seconds). Whatever happens — the end, an error, SIGINT or SIGTERM — every
job it submitted, and only those, is cancelled before it returns.
"""

from __future__ import annotations

import json
import logging
import math
import os
import pwd
import secrets
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType, MappingProxyType
from typing import Any, Final

import yaml

from slurm_drf.config.load import load_config
from slurm_drf.config.settings import Config
from slurm_drf.cycle.backends import make_source
from slurm_drf.errors import DrfError
from slurm_drf.model.types import RUNNING, Node, Snapshot
from slurm_drf.replay import cluster
from slurm_drf.replay.arms import Arm, build_daemon_config
from slurm_drf.replay.result import ReplayReclaim, ReplayResult
from slurm_drf.replay.trace import (
    ReplayInputError,
    Submission,
    build_submissions,
    check_compression,
    check_fits,
    check_name,
    check_trace,
    job_name,
    on_cluster,
    scheduling_interval,
)
from slurm_drf.replay.users import UserChoice, UserPlan, plan_associations, plan_users
from slurm_drf.sim.workload import MAX_SUBMIT_SECONDS, RESOURCES, Workload
from slurm_drf.slurm.source import ClusterSource
from slurm_drf.trail.text import terminal_text

logger = logging.getLogger(__name__)

DAEMON_STOP_SECONDS: Final = 30.0
CANCEL_SECONDS: Final = 60.0
# Past the last submission, an arm waits at most this many times the longest job, plus a minute.
DRAIN_FACTOR: Final = 3.0
# Wall seconds between samples (each a squeue and a sinfo): no busy loop, and at least one sample an hour.
MIN_SAMPLE_INTERVAL: Final = 0.1
MAX_SAMPLE_INTERVAL: Final = 3600.0


class ReplayError(DrfError):
    """A replay that could not go on (exit code 1); its jobs were cancelled."""

    category = "replay"


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    arm: Arm
    compression: float
    config: Config  # backend and partitions; the drf arms' daemon config starts from its file
    config_keys: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    sample_interval: float = 2.0
    stop_after: float | None = None  # trace seconds
    create_accounts: bool = False
    force: bool = False
    users: UserChoice = field(default_factory=UserChoice)
    create_unix_users: bool = False
    partition: str | None = None
    # Where the cluster's job_submit script reads the placement table (the placing arm writes it).
    placement_table: str | None = None


Progress = Callable[[str, float], None]


def pool_nodes(snapshot: Snapshot, config: Config) -> list[Node]:
    """The nodes of the managed partitions (every node when the config names none)."""
    wanted = set(config.partitions) if config.partitions else None
    return [n for n in snapshot.nodes if wanted is None or wanted & set(n.partitions)]


def pool_capacity(nodes: Sequence[Node]) -> tuple[int, int, int]:
    eligible = [n for n in nodes if n.eligible]
    cpu, mem, gpu = (sum(int(n.tres.get(r, 0)) for n in eligible) for r in RESOURCES)
    return cpu, mem, gpu


def check_options(options: ReplayOptions) -> None:
    """Refuse, in one line naming the option, what no replay may hand to Slurm or wait for."""
    if options.partition is not None:
        check_name(options.partition, "--partition")
    if not MIN_SAMPLE_INTERVAL <= options.sample_interval <= MAX_SAMPLE_INTERVAL:
        raise ReplayInputError(
            f"--sample-interval: expected {MIN_SAMPLE_INTERVAL:g} to {MAX_SAMPLE_INTERVAL:g} wall seconds, "
            f"got {options.sample_interval:g}"
        )
    if options.stop_after is not None and not 0 < options.stop_after <= MAX_SUBMIT_SECONDS:
        raise ReplayInputError(
            f"--stop-after: expected more than 0 and at most {MAX_SUBMIT_SECONDS} trace seconds, "
            f"got {options.stop_after:g}"
        )


def _is_unix_user(name: str) -> bool:
    """Whether this host knows the user (its passwd, or LDAP and the like through NSS)."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _invoking_user() -> str:
    """Who runs the replay (the effective user, whatever $USER says)."""
    return pwd.getpwuid(os.geteuid()).pw_name


def prepare_users(workload: Workload, cluster_name: str, options: ReplayOptions) -> tuple[UserPlan, list[str]]:
    """Who submits each job, with its Unix users and Slurm associations made as asked; the notes saying so.

    Everything is checked (one line, nothing made) before the first useradd or sacctmgr.
    """
    check_name(cluster_name, "the cluster's name (Slurm's ClusterName)")
    plan = plan_users(
        workload,
        options.users,
        _invoking_user(),
        _is_unix_user,
        create_unix_users=options.create_unix_users,
        root=os.geteuid() == 0,
    )
    made = plan_associations(workload, plan, cluster.fetch_associations(cluster_name), options.create_accounts)
    for user in plan.create:
        cluster.create_unix_user(user)
    for account, parent, fairshare in made.accounts:
        cluster.create_account(cluster_name, account, parent, fairshare)
    for account, user in made.users:
        cluster.create_user(cluster_name, user, account)
    notes = [plan.note()]
    if made.accounts:
        notes.append(f"created account(s) with sacctmgr: {', '.join(a for a, _, _ in made.accounts)}")
    if made.users:
        notes.append(f"created user association(s) with sacctmgr: {', '.join(f'{u} in {a}' for a, u in made.users)}")
    return plan, notes


@contextmanager
def _signals_stop(stop: threading.Event) -> Iterator[list[str]]:
    """SIGINT and SIGTERM set `stop` (and name themselves) while the arm runs."""
    caught: list[str] = []

    def handler(number: int, frame: FrameType | None) -> None:
        caught.append(signal.Signals(number).name)
        stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield caught
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


class _Daemon:
    """`slurm-drf daemon` with the arm's config, in its own temporary directory."""

    def __init__(self, config: Mapping[str, Any], directory: Path) -> None:
        self.path = directory / "config.yaml"
        self.path.write_text(yaml.safe_dump(dict(config), sort_keys=True), encoding="utf-8")
        self.path.chmod(0o600)
        load_config(self.path)  # a bad base config is refused before anything is made or submitted
        self.log = directory / "daemon.log"
        self.history = Path(str(config["state_dir"])) / "history.sqlite"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "slurm_drf.cli", "daemon", "--config", str(self.path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def check(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise ReplayError(f"the daemon exited with status {self.process.returncode}: {self.last_line()}")

    def last_line(self) -> str:
        """The log's last line, control characters escaped (it may quote names from Slurm)."""
        lines = [line for line in self.log.read_text(encoding="utf-8", errors="replace").split("\n") if line.strip()]
        return terminal_text(lines[-1]) if lines else "(no output)"

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(DAEMON_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def writes_per_cycle(self) -> tuple[int, ...]:
        """Jobs written in each cycle the daemon recorded (its history.sqlite)."""
        if not self.history.exists():
            return ()
        with sqlite3.connect(f"file:{self.history}?mode=ro", uri=True) as db:
            rows = db.execute(
                "SELECT COUNT(w.id) FROM cycles c LEFT JOIN writes w ON w.cycle_id = c.id GROUP BY c.id ORDER BY c.id"
            ).fetchall()
        return tuple(int(r[0]) for r in rows)

    def reclaims(self, origin_epoch: float, compression: float) -> tuple[ReplayReclaim, ...]:
        """What the daemon's reclaim took (its history's `reclaims`), in trace time from `origin_epoch`."""
        if not self.history.exists():
            return ()
        with sqlite3.connect(f"file:{self.history}?mode=ro", uri=True) as db:
            if not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'reclaims'").fetchone():
                return ()
            rows = db.execute(
                "SELECT time, job_id, account, claim_job, claim_account, lost, outcome FROM reclaims ORDER BY id"
            ).fetchall()
        return tuple(
            ReplayReclaim(
                job_id=str(job),
                account=str(account),
                claim_job=str(claim),
                claim_account=str(claim_account),
                at=max(0.0, (float(at) - origin_epoch) * compression),
                # The daemon's hours are wall hours: in the trace, `compression` times as many.
                lost=MappingProxyType({str(k): float(v) * compression for k, v in json.loads(lost).items()}),
                outcome=str(outcome),
            )
            for at, job, account, claim, claim_account, lost, outcome in rows
        )


@dataclass(slots=True)
class _Samples:
    accounts: tuple[str, ...]
    times: list[float] = field(default_factory=list)  # wall seconds from the start
    used: list[tuple[tuple[int, int, int], ...]] = field(default_factory=list)
    pending: list[tuple[int, ...]] = field(default_factory=list)

    def take(self, at: float, snapshot: Snapshot, ours: Mapping[str, str]) -> int:
        """Record the sample taken `at` of our jobs (job id -> account); how many of them Slurm still shows."""
        index = {a: i for i, a in enumerate(self.accounts)}
        used = [[0, 0, 0] for _ in self.accounts]
        pending = [0] * len(self.accounts)
        seen = 0
        for job in snapshot.jobs:
            account = ours.get(job.job_id)
            if account is None:
                continue
            seen += 1
            slot = index[account]
            if job.state == RUNNING:
                for r, resource in enumerate(RESOURCES):
                    used[slot][r] += int(job.tres.get(resource, 0))
            elif job.pending:
                pending[slot] += 1
        self.times.append(at)
        self.used.append(tuple((u[0], u[1], u[2]) for u in used))
        self.pending.append(tuple(pending))
        return seen


def _trace_times(
    times: cluster.JobTimes | None, origin: float, compression: float, cut: float
) -> tuple[float, float, float]:
    """(submit, start, end) in trace seconds; a job never started or ended counts as doing so at `cut`."""
    if times is None:
        return (cut, cut, cut)

    def trace(value: float) -> float:
        # sacct's times are whole seconds: a job submitted in the replay's first second can read as before it.
        return max(0.0, (value - origin) * compression) if math.isfinite(value) else math.nan

    submit, start, end = trace(times.submit), trace(times.start), trace(times.end)
    start = min(start, cut) if math.isfinite(start) else cut
    end = min(end, cut) if math.isfinite(end) else cut
    return (submit, start, max(start, end))


def run_arm(workload: Workload, options: ReplayOptions, progress: Progress | None = None) -> ReplayResult:
    """Replay `workload` once under `options.arm`; see the module docstring."""
    check_trace(workload)
    check_options(options)
    arm = options.arm
    source = make_source(options.config)
    snapshot = source.fetch_snapshot()
    nodes = pool_nodes(snapshot, options.config)
    check_fits(workload, nodes)
    # The result (and the simulator's prediction of it) describes this cluster, not the trace's.
    workload, shape_note = on_cluster(workload, nodes)
    subs = build_submissions(workload, options.compression)
    check_compression(subs, options.compression, scheduling_interval(snapshot.scheduler_parameters))
    if options.stop_after is not None:
        subs = tuple(s for s in subs if s.at * options.compression < options.stop_after)
        if not subs:
            raise ReplayInputError("--stop-after ends the replay before its first submission")
    busy = cluster.other_jobs(())
    if busy and not options.force:
        raise ReplayInputError(
            f"the cluster has {len(busy)} job(s) of its own (first: {busy[0]}); a replay submits jobs and must not "
            "mix into real work: wait until it is empty, or pass --force"
        )
    with tempfile.TemporaryDirectory(prefix="slurm-drf-replay-") as scratch:
        directory = Path(scratch)
        daemon = None
        daemon_config = None
        if arm.daemon is not None:
            daemon_config = build_daemon_config(
                arm, options.compression, str(directory / "state"), options.config_keys, options.placement_table
            )
            # A bad base config is refused here, before any user, account or job is made.
            daemon = _Daemon(daemon_config, directory)
        users, user_notes = prepare_users(workload, snapshot.cluster, options)
        notes = [
            f"compression {options.compression:g}: one wall second is {options.compression:g} trace seconds",
            *user_notes,
            "Slurm recalculates fair share every PriorityCalcPeriod (whole minutes, at least 1): "
            f"{options.compression:g} trace minutes per recalculation",
        ]
        if arm.reclaim:
            notes.append(
                "jobs submitted with --requeue (the daemon's reclaim requeues its victims; every other arm's jobs "
                "are --no-requeue); a requeued job runs its whole sleep again"
            )
        if any(j.array_id is not None for j in workload.jobs):
            notes.append("job arrays replayed as one job per task")
        if shape_note is not None:
            notes.append(shape_note)
        ready = _Arm(workload, tuple(subs), options, source, daemon, daemon_config, notes, directory, users)
        return _play(ready, progress)


@dataclass(frozen=True, slots=True)
class _Arm:
    """What one arm plays with, checked and ready."""

    workload: Workload
    subs: tuple[Submission, ...]
    options: ReplayOptions
    source: ClusterSource
    daemon: _Daemon | None
    daemon_config: Mapping[str, Any] | None
    notes: list[str]
    directory: Path
    users: UserPlan


class _Player:
    """One arm's run: the submissions, the samples and the jobs it submitted so far."""

    def __init__(self, ready: _Arm, progress: Progress | None) -> None:
        self.ready = ready
        self.progress = progress
        self.samples = _Samples(ready.workload.accounts)
        self.ours: dict[str, str] = {}  # Slurm job id -> account
        self.submitted: list[tuple[Submission, str]] = []
        self.waiting = list(ready.subs)
        self.stop = threading.Event()
        self.origin = time.monotonic()
        # This run's token in its jobs' names, and the names of submissions whose sbatch failed:
        # slurmctld may hold them all the same, with no id known to us.
        self.run = secrets.token_hex(4)
        self.unknown: list[str] = []

    def submit_due(self, now: float) -> None:
        while self.waiting and self.waiting[0].at <= now and not self.stop.is_set():
            sub = self.waiting.pop(0)
            try:
                options = self.ready.options
                job_id = cluster.submit(
                    sub, options.partition, self.ready.users.run_as(sub.job), self.run, options.arm.reclaim
                )
            except DrfError:
                self.unknown.append(job_name(sub.job, self.run))
                raise
            self.ours[job_id] = sub.job.account
            self.submitted.append((sub, job_id))

    def sample(self) -> bool:
        """Take a sample; whether the arm is over (everything submitted has ended)."""
        at = time.monotonic() - self.origin  # squeue, read first, answers for about this moment
        shown = self.samples.take(at, self.ready.source.fetch_snapshot(), self.ours)
        if self.progress is not None:
            finished = max(len(self.submitted) - shown, 0)
            self.progress(self.ready.options.arm.name, min(1.0, finished / len(self.ready.subs)))
        return not self.waiting and shown == 0

    def play(self) -> str:
        """Submit and sample until the arm is over; why it ended early ("" when every job ended)."""
        options = self.ready.options
        interval = options.sample_interval
        deadline = self.ready.subs[-1].at + DRAIN_FACTOR * max(s.sleep for s in self.ready.subs) + 60.0
        cut = options.stop_after / options.compression if options.stop_after is not None else math.inf
        self.origin = time.monotonic()
        next_sample = 0.0
        while not self.stop.is_set():
            now = time.monotonic() - self.origin
            self.submit_due(now)
            if now >= next_sample:
                next_sample += interval
                if self.sample():
                    return ""
            if self.ready.daemon is not None:
                self.ready.daemon.check()
            if now >= cut:
                return f"stopped after {options.stop_after:g} trace seconds (--stop-after)"
            if now >= deadline:
                return f"jobs still running {DRAIN_FACTOR:g} times the longest job after the last submission"
            wake = min(next_sample, self.waiting[0].at if self.waiting else math.inf, cut)
            self.stop.wait(max(0.0, wake - (time.monotonic() - self.origin)))
        return "interrupted"


def _play(ready: _Arm, progress: Progress | None) -> ReplayResult:
    options, source, daemon = ready.options, ready.source, ready.daemon
    settings = cluster.fetch_priority_settings()
    rpcs_before = cluster.fetch_rpcs()
    player = _Player(ready, progress)
    with _signals_stop(player.stop) as caught:
        try:
            if daemon is not None:
                daemon.start()
            origin_epoch = time.time()
            reason = player.play()
        finally:
            left = _cancel_ours(list(player.ours), player.unknown)
            if daemon is not None:
                daemon.stop()
        if caught:
            raise ReplayError(
                f"interrupted by {caught[0]}: cancelled the {len(player.ours)} job(s) this replay submitted"
                + (f" ({len(left)} still shown by squeue)" if left else "")
                + "; no result written"
            )
    wall = time.monotonic() - player.origin
    notes = [*ready.notes, reason] if reason else ready.notes
    rpcs_after = cluster.fetch_rpcs()
    rpcs = {k: v - rpcs_before.get(k, 0) for k, v in rpcs_after.items() if v > rpcs_before.get(k, 0)}
    return _measure(
        ready,
        player,
        origin_epoch,
        wall,
        ReplayResult(
            arm=options.arm.name,
            summary=options.arm.summary,
            compression=options.compression,
            sample_interval=options.sample_interval,
            workload=ready.workload,
            job_ids=(),
            start=(),
            end=(),
            capacity=pool_capacity(pool_nodes(source.fetch_snapshot(), options.config)),
            sample_time=(),
            sample_used=(),
            sample_pending=(),
            writes_per_cycle=None if daemon is None else daemon.writes_per_cycle(),
            rpcs=MappingProxyType(rpcs),
            slurm_settings=tuple(settings),
            slurm_version=next((s.split("=", 1)[1].strip() for s in settings if s.startswith("SLURM_VERSION")), None),
            daemon_config=ready.daemon_config,
            backend=source.name,
            notes=tuple(notes),
            wall_seconds=wall,
        ),
    )


def _measure(ready: _Arm, player: _Player, origin_epoch: float, wall: float, result: ReplayResult) -> ReplayResult:
    """`result` with the jobs' times (sacct's, in trace seconds) and the samples of the accounts replayed."""
    compression = ready.options.compression
    times = cluster.fetch_job_times([job_id for _, job_id in player.submitted])
    cut = wall * compression
    measured = []
    starts: list[float] = []
    ends: list[float] = []
    for sub, job_id in player.submitted:
        submit, start, end = _trace_times(times.get(job_id), origin_epoch, compression, cut)
        measured.append(replace(sub.job, submit=submit if math.isfinite(submit) else sub.job.submit))
        starts.append(start)
        ends.append(end)
    replayed = replace(ready.workload, jobs=tuple(measured))
    # The sampled accounts are the workload's; the replayed ones can be fewer when a replay stops early.
    keep = [ready.workload.accounts.index(a) for a in replayed.accounts]
    return replace(
        result,
        workload=replayed,
        job_ids=tuple(job_id for _, job_id in player.submitted),
        submitted_as=tuple(ready.users.submitter(sub.job) for sub, _ in player.submitted),
        node_lists=tuple(times[job_id].nodes if job_id in times else "" for _, job_id in player.submitted),
        users=ready.users.mode,
        start=tuple(starts),
        end=tuple(ends),
        sample_time=tuple(t * compression for t in player.samples.times),
        sample_used=tuple(tuple(s[i] for i in keep) for s in player.samples.used),
        sample_pending=tuple(tuple(s[i] for i in keep) for s in player.samples.pending),
        reclaims=() if ready.daemon is None else ready.daemon.reclaims(origin_epoch, compression),
    )


def _cancel_ours(job_ids: Sequence[str], unknown: Sequence[str] = ()) -> list[str]:
    """Cancel every job of ours Slurm still shows, and wait until it shows none; those it still shows.

    `unknown`: names of submissions whose sbatch failed (the job may exist with no id known here).
    """
    if unknown:
        try:
            cluster.cancel_named(unknown)
        except DrfError as error:
            logger.error("cancelling the replay's submissions that failed (%s): %s", ", ".join(unknown), error)
    if not job_ids:
        return []
    try:
        cluster.cancel(job_ids)
        deadline = time.monotonic() + CANCEL_SECONDS
        left = cluster.remaining(job_ids)
        while left and time.monotonic() < deadline:
            time.sleep(0.5)  # polling interval while slurmctld ends the jobs
            left = cluster.remaining(job_ids)
    except DrfError as error:
        logger.error("cancelling the replay's jobs: %s", error)
        return list(job_ids)
    if left:
        logger.error("%d job(s) of this replay still shown after scancel: %s", len(left), ", ".join(left[:10]))
    return left
