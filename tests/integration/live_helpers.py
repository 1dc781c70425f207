"""Helpers for the live tests that drive slurm-drf against the sandbox.

The session fixture ``slurm_sandbox`` (conftest.py) starts the sandbox and
the function fixture ``slurm`` cancels what a test submitted through
``slurm.sbatch``. What these tests need on top of that lives here:

- ``Live``: submits jobs that write nothing into the repository (output to
  /dev/null, working directory in pytest's tmp_path), builds the scenes the
  tests share (a full node and a backlog of four accounts), and reads what
  Slurm reports back (``squeue -o``, ``sprio``) independently of the
  product's own JSON parser;
- ``drf``: runs ``slurm-drf`` as a subprocess with a config file and state
  directory of the test's own, never the machine's.

The sandbox node has 64 CPUs, 512000 MiB and 8 GPUs; several tests fill it
and therefore expect nobody else to run jobs in the sandbox meanwhile
(``require_quiet_queue`` says so plainly instead of failing obscurely). To
run next to other users of the default sandbox, give the run its own one
(docs/sandbox.md, "isolated run").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.paths import SANDBOX_SCRIPT
from tests.polling import wait_for

if TYPE_CHECKING:
    from tests.integration.conftest import SlurmSandbox

SCRIPT = SANDBOX_SCRIPT
DRF = (sys.executable, "-m", "slurm_drf.cli")
# The backend `backend: auto` picks in this tier: scripts/test runs the live
# tier once with Slurm's CLI and once in a venv with a matching pyslurm
# (scripts/pyslurm-env), where it sets SLURM_DRF_LIVE_BACKEND=pyslurm.
LIVE_BACKEND = os.environ.get("SLURM_DRF_LIVE_BACKEND", "cli")
# Long enough for slurmctld's own retries (squeue gives up after ~9 s when it is down).
DRF_TIMEOUT_S = 120
START_TIMEOUT_S = 60
QUIET_TIMEOUT_S = 30

NODE_CPUS = 64
NODE_MEM = 512000
NODE_GPUS = 8


# --------------------------------------------------------------------------
# What Slurm reports


@dataclass(frozen=True)
class QueuedJob:
    """One line of ``squeue -o``: the text output, signed nice included."""

    job_id: str  # %A: a pending array record's id is its array job id
    array: str  # %K: the task list of a pending array record, "N/A" otherwise
    state: str
    priority: int
    nice: int
    reason: str
    account: str
    partition: str


_SQUEUE_FORMAT = "%A|%K|%T|%Q|%y|%r|%a|%P"


def parse_squeue_lines(text: str) -> dict[str, QueuedJob]:
    jobs: dict[str, QueuedJob] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        job_id, array, state, priority, nice, reason, account, partition = line.split("|")
        jobs[job_id] = QueuedJob(job_id, array, state, int(priority), int(nice), reason, account, partition)
    return jobs


def queue(slurm: SlurmSandbox) -> dict[str, QueuedJob]:
    """Every job squeue shows, by id."""
    return parse_squeue_lines(slurm.run("squeue", "-h", "--noconvert", "-o", _SQUEUE_FORMAT).stdout)


def pending_priorities(slurm: SlurmSandbox, job_ids: Iterable[str]) -> dict[str, int]:
    """Slurm's priority of each of ``job_ids`` (all pending), highest first; ties allowed."""
    wanted = set(job_ids)
    text = slurm.run("squeue", "-h", "--noconvert", "-t", "PD", "--sort=-p,i", "-o", _SQUEUE_FORMAT).stdout
    # parse_squeue_lines keeps squeue's line order.
    lines = [job for job in parse_squeue_lines(text).values() if job.job_id in wanted]
    assert {j.job_id for j in lines} == wanted, f"not all pending: {sorted(wanted - {j.job_id for j in lines})}"
    return {j.job_id: j.priority for j in lines}


def priority_order(slurm: SlurmSandbox, job_ids: Iterable[str]) -> list[str]:
    """``job_ids`` (all pending) in Slurm's own order: squeue sorted by priority, highest first.

    Fails when two of them share a priority: then Slurm, not the daemon,
    decides between them.
    """
    by_priority = pending_priorities(slurm, job_ids)
    priorities = list(by_priority.values())
    assert len(set(priorities)) == len(priorities), f"equal priorities: {list(by_priority.items())}"
    assert priorities == sorted(priorities, reverse=True)
    return list(by_priority)


@dataclass(frozen=True)
class PriorityFactors:
    """One line of ``sprio``: the priority and the factors it is the sum of."""

    job_id: str
    priority: int
    site: int
    factors: int  # age + fair-share + job size + partition + QOS + assoc
    nice: int


def sprio(slurm: SlurmSandbox) -> dict[str, PriorityFactors]:
    """sprio's view of the pending, eligible jobs (it leaves out held jobs and those not yet eligible)."""
    text = slurm.run("sprio", "-h", "-o", "%i|%Y|%S|%A|%F|%J|%P|%Q|%N").stdout
    out: dict[str, PriorityFactors] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        job_id, priority, site, *factors, nice = (field.strip() for field in line.split("|"))
        out[job_id] = PriorityFactors(job_id, int(priority), int(site), sum(int(f) for f in factors), int(nice))
    return out


def wait_in_sprio(slurm: SlurmSandbox, job_ids: Iterable[str]) -> dict[str, PriorityFactors]:
    """sprio lists a pending job once the scheduler made it eligible (a second or two)."""
    wanted = set(job_ids)

    def listed() -> dict[str, PriorityFactors] | None:
        rows = sprio(slurm)
        return rows if wanted <= set(rows) else None

    found: dict[str, PriorityFactors] = wait_for(listed, START_TIMEOUT_S, f"sprio to list {sorted(wanted)}")
    return found


# --------------------------------------------------------------------------
# slurm-drf as a subprocess


@dataclass(frozen=True)
class DrfRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def plan(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.stdout)
        return data

    @property
    def error_lines(self) -> list[str]:
        """stderr less blank lines and INFO log lines (such as the backend chosen)."""
        return [line for line in self.stderr.splitlines() if line.strip() and not line.startswith("slurm-drf: INFO: ")]

    def summary(self) -> str:
        """The cycle's summary line (logged at INFO on stderr)."""
        lines = [line for line in self.stderr.splitlines() if "pending jobs," in line]
        assert len(lines) == 1, f"no single summary line in stderr:\n{self.stderr}"
        return lines[0]


def drf_env() -> dict[str, str]:
    """Our environment (SLURM_CONF set by the sandbox fixture), minus a config the machine may point at."""
    env = {k: v for k, v in os.environ.items() if k != "SLURM_DRF_CONFIG"}
    assert env.get("SLURM_CONF"), "SLURM_CONF is not set: the slurm_sandbox fixture sets it"
    return env


def drf(*args: str, check: bool = True, timeout: float = DRF_TIMEOUT_S) -> DrfRun:
    """``slurm-drf ARGS`` in a subprocess; with ``check`` it must exit 0."""
    proc = subprocess.run([*DRF, *args], capture_output=True, text=True, timeout=timeout, env=drf_env(), check=False)
    run = DrfRun(proc.returncode, proc.stdout, proc.stderr)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"slurm-drf {' '.join(args)} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return run


def write_config(directory: Path, name: str = "config.yaml", **keys: object) -> Path:
    """A config file (YAML is a superset of JSON, so each value is written as JSON)."""
    path = directory / name
    path.write_text("".join(f"{key}: {json.dumps(value)}\n" for key, value in keys.items()), encoding="utf-8")
    path.chmod(0o600)
    return path


def plan_order(plan: Mapping[str, Any]) -> list[str]:
    """The ids of the plan's ordered (not skipped) jobs, in DRF order."""
    ordered = [j for j in plan["jobs"] if j["order"] is not None]
    assert {j["pool"] for j in ordered} <= {"default"}
    return [j["job_id"] for j in sorted(ordered, key=lambda j: j["order"])]


def plan_jobs(plan: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {j["job_id"]: j for j in plan["jobs"]}


# --------------------------------------------------------------------------
# Scenes


@dataclass(frozen=True)
class Backlog:
    """A full node, and pending jobs from four accounts.

    ``running`` maps account -> its running job ids; ``slot`` is a small
    running job whose end frees room for exactly one pending job;
    ``pending`` maps account -> its pending job ids in submit order;
    ``expected`` is the DRF order worked out by hand (levels in the
    comment of ``Live.backlog``).
    """

    running: Mapping[str, list[str]]
    slot: str
    pending: Mapping[str, list[str]]
    expected: list[str]

    @property
    def pending_ids(self) -> list[str]:
        return [job for jobs in self.pending.values() for job in jobs]


class Live:
    """One test's view of the sandbox: its scratch directory, state and config."""

    def __init__(self, slurm: SlurmSandbox, tmp_path: Path) -> None:
        self.slurm = slurm
        self.tmp_path = tmp_path
        self.scratch = tmp_path / "jobs"
        self.scratch.mkdir(mode=0o700, exist_ok=True)
        self.state_dir = tmp_path / "state"
        self.config = write_config(tmp_path, state_dir=str(self.state_dir))

    # -- jobs

    def submit(self, *args: str) -> str:
        """sbatch ARGS; output to /dev/null, working directory in tmp_path."""
        return self.slurm.sbatch(
            f"--chdir={self.scratch}", "--output=/dev/null", "--error=/dev/null", *args, wrap="sleep 600"
        )

    def wait_running(self, job_ids: Iterable[str]) -> None:
        wanted = set(job_ids)

        def running() -> bool:
            jobs = queue(self.slurm)
            return all(job in jobs and jobs[job].state == "RUNNING" for job in wanted)

        wait_for(running, START_TIMEOUT_S, f"jobs {sorted(wanted)} to run")

    def cancel(self, *job_ids: str) -> None:
        """Cancels jobs and waits until squeue no longer shows them."""
        self.slurm.run("scancel", *job_ids)
        wait_for(
            lambda: set(queue(self.slurm)).isdisjoint(job_ids), START_TIMEOUT_S, f"jobs {list(job_ids)} to leave squeue"
        )

    def require_quiet_queue(self) -> None:
        """The tests that fill the node need the sandbox to themselves."""

        def quiet() -> bool:
            return not queue(self.slurm)

        try:
            wait_for(quiet, QUIET_TIMEOUT_S, "an empty queue", interval=0.5)
        except AssertionError:
            others = sorted(queue(self.slurm))
            raise AssertionError(
                f"the sandbox runs jobs this test did not submit ({', '.join(others)}); this test fills the "
                "node and needs the sandbox to itself: give the run its own sandbox (docs/sandbox.md)"
            ) from None

    def fill_node(self, slot_account: str = "cputeam", *extra: str) -> tuple[dict[str, list[str]], str]:
        """Running jobs that take all 64 CPUs; dominant shares gputeam 0.75 (GPUs),
        memteam 0.625 (memory), cputeam 0.5625 (CPUs, with the 4-CPU slot job).

        ``extra`` are sbatch options for every one of them (say, a time limit).
        """
        self.require_quiet_queue()
        running = {
            "gputeam": [self.submit("-A", "gputeam", "-p", "gpu", "--gres=gpu:6", "-c", "20", "--mem=16000", *extra)],
            "memteam": [self.submit("-A", "memteam", "-p", "cpu", "-c", "8", "--mem=320000", *extra)],
            "cputeam": [self.submit("-A", "cputeam", "-p", "cpu", "-c", "32", "--mem=32000", *extra)],
        }
        slot = self.submit("-A", slot_account, "-p", "cpu", "-c", "4", "--mem=1000", *extra)
        self.wait_running([*(j for jobs in running.values() for j in jobs), slot])
        return running, slot

    def backlog(self) -> Backlog:
        """The node full, then nine pending jobs, submitted in an order unlike the DRF order.

        Levels (weighted dominant share before each job; all weights 1):
        newteam 0, 0.25, 0.5 (16 of 64 CPUs each); cputeam 0.5625, 0.59375
        (2 CPUs each on top of 36); memteam 0.625, 0.6875 (32000 MiB each on
        top of 320000 of 512000); gputeam 0.75, 0.875 (one GPU each on top of
        6 of 8). All distinct, so the order is exact.
        """
        running, slot = self.fill_node()
        pending: dict[str, list[str]] = {"gputeam": [], "memteam": [], "cputeam": [], "newteam": []}
        for _ in range(2):
            pending["gputeam"].append(
                self.submit("-A", "gputeam", "-p", "gpu", "--gres=gpu:1", "-c", "1", "--mem=1000")
            )
        for _ in range(2):
            pending["memteam"].append(self.submit("-A", "memteam", "-p", "cpu", "-c", "1", "--mem=32000"))
        for _ in range(2):
            pending["cputeam"].append(self.submit("-A", "cputeam", "-p", "cpu", "-c", "2", "--mem=2000"))
        for _ in range(3):
            pending["newteam"].append(self.submit("-A", "newteam", "-p", "cpu", "-c", "16", "--mem=16000"))
        expected = [*pending["newteam"], *pending["cputeam"], *pending["memteam"], *pending["gputeam"]]
        backlog = Backlog(running, slot, pending, expected)
        # Nothing may have started: the node is full.
        jobs = queue(self.slurm)
        assert all(jobs[j].state == "PENDING" for j in backlog.pending_ids), jobs
        return backlog

    # -- slurm-drf

    def once(self, *extra: str, config: Path | None = None) -> DrfRun:
        return drf(
            "once",
            "--config",
            str(config or self.config),
            "--state-dir",
            str(self.state_dir),
            "--format",
            "json",
            *extra,
        )

    def reset(self, config: Path | None = None) -> DrfRun:
        return drf("reset", "--config", str(config or self.config), "--state-dir", str(self.state_dir))

    @property
    def state_file(self) -> Path:
        return self.state_dir / "state.json"


def scheduled_by(slurm: SlurmSandbox, job_id: str) -> str:
    """Which scheduler started a job: "SchedMain", "SchedBackfill" or "SchedSubmit".

    sacct's Flags column (slurmdbd records it with the job's start, so it is
    polled for).
    """

    def flag() -> str | None:
        text = slurm.run("sacct", "-n", "-X", "-P", "-j", job_id, "-o", "Flags", check=False).stdout
        flags = {f for line in text.splitlines() for f in line.strip().split(",")}
        found = sorted(flags & {"SchedMain", "SchedBackfill", "SchedSubmit"})
        return found[0] if len(found) == 1 else None

    found: str = wait_for(flag, START_TIMEOUT_S, f"sacct to record which scheduler started job {job_id}")
    return found


# --------------------------------------------------------------------------
# slurmctld


def slurmctld_pid(slurm: SlurmSandbox) -> int | None:
    """The sandbox's live slurmctld, from its pid file (scripts/slurm-sandbox writes it in run/)."""
    try:
        pid = int((slurm.dir / "run" / "slurmctld.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    return pid if comm.startswith("slurmctld") else None


def wait_recorded(slurm: SlurmSandbox) -> None:
    """Waits until slurmdbd lists every job slurmctld holds (sacct), so that slurmctld has each one's
    database index before a test stops it.

    slurmctld sends a new job to slurmdbd a few seconds after the submission
    and refuses updates to it until the answer is in ("Job update not
    available right now, the DB index is being set": scontrol retries on its
    own). A job saved without its index is sent again after the restart, and
    on a loaded machine the first write after it waited more than a minute.
    """

    def all_listed() -> bool:
        held = set(slurm.run("squeue", "-h", "-t", "all", "-o", "%A").stdout.split())
        if not held:
            return True
        listed = slurm.run("sacct", "-n", "-X", "-P", "-o", "JobIDRaw", "-j", ",".join(sorted(held)), check=False)
        return held <= set(listed.stdout.split())

    wait_for(all_listed, START_TIMEOUT_S, "slurmdbd to list every job slurmctld holds")


def stop_slurmctld(slurm: SlurmSandbox) -> None:
    """Stops slurmctld only (slurmd, slurmdbd and the jobs keep running), once slurmdbd has every job."""
    wait_recorded(slurm)
    pid = slurmctld_pid(slurm)
    assert pid is not None, "slurmctld is not running"
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: slurmctld_pid(slurm) is None, 60, "slurmctld to stop")


def start_slurmctld(slurm: SlurmSandbox) -> None:
    """``scripts/slurm-sandbox up`` (it starts only what is missing), then waits until sinfo answers."""
    up = subprocess.run([str(SCRIPT), "up"], capture_output=True, text=True, timeout=300, check=False)
    assert up.returncode == 0, f"slurm-sandbox up failed:\n{up.stdout}\n{up.stderr}"
    wait_for(lambda: slurm.run("sinfo", "-h", "-o", "%P", check=False).returncode == 0, 60, "sinfo to answer")


def file_fingerprint(path: Path) -> tuple[bytes, int]:
    """Content and modification time, to show a file was not rewritten."""
    return path.read_bytes(), path.stat().st_mtime_ns
