"""A live cycle at 50,000 pending and 5,000 running jobs (issue 24): run by hand as root, not a test.

    SLURM_SANDBOX_NODE_CPUS=5000 scripts/slurm-sandbox fresh
    eval "$(scripts/slurm-sandbox env)"
    PYTHONPATH=. "$(scripts/pyslurm-env)" benchmarks/bench_live_50k.py [--pending 50000] [--running 5000]
        [--repeat 3] [--churn 4] [--backends cli,pyslurm]

Needs a sandbox node of as many CPUs as RUNNING (`SLURM_SANDBOX_NODE_CPUS`,
declared, not real) and nothing else queued. Run with the python of
scripts/pyslurm-env to measure the pyslurm backend beside the CLI's; with
another python only `cli` can be measured.

Setup: RUNNING 1-CPU jobs (`exec sleep`: one slurmstepd of three threads
and one sleep each) fill the node's CPUs; their memory (MemAvailable before
and after, and the proportional set size of their slurmstepd and sleep
processes) is printed per job. How many fit is checked first against
the machine's free memory and pid_max (every thread takes a pid), and the
run stops if they do not. Then PENDING 1-CPU jobs of the four team
accounts (individual jobs, not an array) are submitted held by parallel
sbatch processes and released by scontrol in a few calls; the node is
full, so they stay pending.

Then, in alternating rounds (REPEAT), per backend:

- the bare reads: `squeue --json --all` and `sinfo --json --all` as
  processes (the CLI source's reads), or pyslurm's `job().get()` and
  `node().get()` in this process; their sizes;
- the source's whole read (`fetch_snapshot`: the reads, parsing, the
  Snapshot) and a dry-run cycle as the daemon runs it (`run_cycle`,
  dry_run), and its ratio to the bare reads (target <= 1.5x);
- `slurm-drf once --dry-run` as a process, its wall time and peak RSS
  (the process's own, without the squeue it runs), against the size of the
  snapshot's JSON (`slurm-drf snapshot`; target <= 4x); then its peak RSS
  again with the config less its weights. Weights of four decimals
  (1.0001, 0.9999) take the merge engine's numbers past 2**52, so it
  computes on Python integers (policy.engine.merge_engine): exact, and bigger.

Then real cycles on one state directory, each with its parts (read, plan,
state save, writes, history commit into history.sqlite) and slurmctld's
RPCs during it (`sdiag` before and after):

- the first cycle on a fresh state, with the default max_writes_per_cycle
  (every job wants a write; the cap must hold), per backend;
- one cycle with no cap that writes every job left (time per write);
- CHURN cycles at 1% churn, alternating backends: 1% of the running jobs
  end (cancelled), Slurm starts as many pending ones, as many new pending
  jobs arrive; target: writes <= 2% of pending.

Every job it submitted is cancelled at the end, also when interrupted
(`scancel --name` of its two job names, so a killed run's jobs go too).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench_live import sbatch_argv

from slurm_drf.config.load import load_config
from slurm_drf.config.settings import DEFAULT_SLURM_TIMEOUT, Config
from slurm_drf.cycle.run import CycleReport, Writer, collector_paused, run_cycle
from slurm_drf.cycle.store import StateStore
from slurm_drf.errors import SlurmReadError
from slurm_drf.model.types import Snapshot
from slurm_drf.policy.state import PolicyState
from slurm_drf.slurm.cli_source import CliSource
from slurm_drf.slurm.pyslurm_source import PyslurmSource, pyslurm_usable
from slurm_drf.slurm.pyslurm_write import PyslurmWriter
from slurm_drf.slurm.source import ClusterSource
from slurm_drf.slurm.write import ScontrolWriter, Write, WriteResult
from slurm_drf.trail.history_db import AuditRecorder

DRF = (sys.executable, "-m", "slurm_drf.cli")
RUNNING_NAME = "bench50k-run"
PENDING_NAME = "bench50k-pend"
# 1-CPU jobs; memteam's memory share is its dominant one, the others' CPU
# share (5,000 CPUs, 512,000 MiB): gputeam and newteam differ by weight only.
SHAPES: Mapping[str, tuple[str, ...]] = {
    "cputeam": ("-p", "cpu", "-c", "1", "--mem=50"),
    "memteam": ("-p", "cpu", "-c", "1", "--mem=150"),
    "gputeam": ("-p", "cpu", "-c", "1", "--mem=50"),
    "newteam": ("-p", "cpu", "-c", "1", "--mem=50"),
}
ACCOUNTS = tuple(sorted(SHAPES))
WEIGHTS = {"gputeam": {"weight": 1.0001}, "newteam": {"weight": 0.9999}}
TASKS_PER_RUNNING_JOB = 4  # slurmstepd's three threads and the sleep it execs
CLI_TIMEOUT = 600.0
PID_SHARE = 0.75  # at most this share of pid_max in use once the running jobs run


def run(argv: Sequence[str], *, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        sys.exit(f"bench_live_50k: {' '.join(argv[:4])}... exited {proc.returncode}: {proc.stderr.strip()[:500]}")
    return proc


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, every: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            sys.exit(f"bench_live_50k: timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def squeue_ids(*args: str) -> list[str]:
    """Job ids squeue lists; a loaded slurmctld may time out a query (it answers the next one)."""
    for _ in range(10):
        proc = run(["squeue", "-h", "-o", "%A", *args], check=False)
        if proc.returncode == 0:
            return proc.stdout.split()
        time.sleep(2)
    sys.exit(f"bench_live_50k: squeue {' '.join(args)} failed ten times")


def ours(*states: str) -> list[str]:
    return squeue_ids("-n", f"{RUNNING_NAME},{PENDING_NAME}", *(["-t", ",".join(states)] if states else []))


def sbatch(scratch: Path, name: str, account: str, hold: bool) -> str:
    argv = sbatch_argv(scratch, account, [f"--job-name={name}", *SHAPES[account]], hold, wrap="exec sleep 7200")
    for attempt in range(5):
        proc = run(argv, check=False)
        if proc.returncode == 0:
            return proc.stdout.strip().split(";", 1)[0]
        time.sleep(1 + attempt)  # slurmctld busy: sbatch's own retries ran out
    sys.exit(f"bench_live_50k: sbatch failed five times: {proc.stderr.strip()[:300]}")


def submit(scratch: Path, name: str, accounts: Sequence[str], hold: bool, threads: int) -> list[str]:
    started = time.perf_counter()
    ids: list[str] = []
    with ThreadPoolExecutor(threads) as pool:
        for number, job in enumerate(pool.map(lambda a: sbatch(scratch, name, a, hold), accounts), 1):
            ids.append(job)
            if number % 10000 == 0:
                print(f"  {number} submitted in {time.perf_counter() - started:.0f} s", flush=True)
    return ids


# -- memory and pids -------------------------------------------------------


def meminfo(key: str) -> int:
    """A /proc/meminfo value in KiB."""
    for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def tasks_in_use() -> int:
    return sum(len(os.listdir(f"/proc/{p}/task")) for p in os.listdir("/proc") if p.isdigit() and _exists(p))


def _exists(pid: str) -> bool:
    return os.path.isdir(f"/proc/{pid}/task")


def parents() -> dict[int, int]:
    """Every process's parent, from one pass over /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text(encoding="ascii")
            except OSError:
                continue
            found[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def pss_kib(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text(encoding="ascii")
    except OSError:
        return 0
    match = re.search(r"^Pss:\s+(\d+)", text, re.M)
    return int(match.group(1)) if match else 0


def job_processes_pss(job_ids: Sequence[str]) -> tuple[int, int]:
    """The slurmstepds of these jobs (`slurmstepd: [ID.batch]`) and what they run: count, PSS in KiB."""
    wanted = {f"[{job}.batch]" for job in job_ids}
    steps = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                words = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode().split()
            except OSError:
                continue
            if len(words) == 2 and words[0] == "slurmstepd:" and words[1] in wanted:
                steps.append(int(entry))
    chosen = set(steps)
    procs = steps + [pid for pid, parent in parents().items() if parent in chosen]
    return len(procs), sum(pss_kib(p) for p in procs)


def node_cpus() -> int:
    return sum(int(word) for word in run(["sinfo", "-h", "-N", "-p", "cpu", "-o", "%c"]).stdout.split())


# -- sdiag -----------------------------------------------------------------


def rpc_counts() -> dict[str, tuple[int, int]]:
    """slurmctld's RPC count and total time (microseconds) by message type, from sdiag."""
    counts: dict[str, tuple[int, int]] = {}
    section = False
    for line in run(["sdiag"]).stdout.splitlines():
        if line.startswith("Remote Procedure Call statistics by message type"):
            section = True
            continue
        if line.startswith("Remote Procedure Call statistics by user"):
            break
        words = line.split()
        if section and words and words[0].isupper():
            fields = dict(word.split(":", 1) for word in words if ":" in word)
            if "count" in fields:
                counts[words[0]] = (int(fields["count"]), int(fields.get("total_time", "0")))
    return counts


def rpc_diff(before: Mapping[str, tuple[int, int]], after: Mapping[str, tuple[int, int]]) -> str:
    parts = []
    for name, (count, total) in sorted(after.items()):
        done = count - before.get(name, (0, 0))[0]
        if done > 0 and name != "REQUEST_STATS_INFO":
            micro = total - before.get(name, (0, 0))[1]
            parts.append(f"{name.removeprefix('REQUEST_')} {done} ({micro / 1e6:.2f} s)")
    return ", ".join(parts) or "none"


# -- timing ------------------------------------------------------------------


@dataclass
class Parts:
    read: float = 0.0
    save: float = 0.0
    writes: float = 0.0


class TimedSource:
    def __init__(self, source: ClusterSource, parts: Parts) -> None:
        self._source, self._parts = source, parts
        self.name = source.name

    def fetch_snapshot(self) -> Snapshot:
        started = time.perf_counter()
        try:
            return self._source.fetch_snapshot()
        finally:
            self._parts.read += time.perf_counter() - started


class TimedWriter:
    def __init__(self, writer: Writer, parts: Parts) -> None:
        self._writer, self._parts = writer, parts

    def apply(self, writes: Sequence[Write]) -> WriteResult:
        started = time.perf_counter()
        try:
            return self._writer.apply(writes)
        finally:
            self._parts.writes += time.perf_counter() - started

    def run_lines(self, lines: Sequence[str]) -> tuple[dict[str, str], list[str]]:
        return self._writer.run_lines(lines)


class TimedStore(StateStore):
    def __init__(self, directory: Path, parts: Parts) -> None:
        super().__init__(directory)
        self.parts = parts

    def save(self, state: PolicyState) -> None:
        started = time.perf_counter()
        try:
            super().save(state)
        finally:
            self.parts.save += time.perf_counter() - started


def source_of(backend: str) -> ClusterSource:
    # The daemon's timeout for one command is slurm_timeout (120 s by default); longer here.
    return PyslurmSource(timeout=CLI_TIMEOUT) if backend == "pyslurm" else CliSource(timeout=CLI_TIMEOUT)


def writer_of(backend: str) -> Writer:
    return PyslurmWriter() if backend == "pyslurm" else ScontrolWriter()


def timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def bare_cli(env: Mapping[str, str]) -> tuple[float, dict[str, int]]:
    """squeue --json --all and sinfo --json --all as processes; wall time, sizes, squeue's peak RSS."""
    total = 0.0
    sizes: dict[str, int] = {}
    for argv in (["squeue", "--json", "--all"], ["sinfo", "--json", "--all"]):
        started = time.perf_counter()
        with tempfile.TemporaryFile() as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, env=dict(env))
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            total += time.perf_counter() - started
            if proc.returncode != 0:
                sys.exit(f"bench_live_50k: {' '.join(argv)} exited {proc.returncode}")
            sizes[argv[0]] = out.tell()
            sizes[argv[0] + "_rss"] = usage.ru_maxrss
            sizes[argv[0] + "_ms"] = round(1000 * (time.perf_counter() - started))
    return total, sizes


def bare_pyslurm() -> tuple[float, float]:
    """pyslurm's `job().get()` and `node().get()`: wall time with Python's cyclic collector
    on (as a plain script runs them) and paused (as a cycle runs them, `collector_paused`)."""
    import pyslurm  # only in the pyslurm venv

    times = []
    for paused in (False, True):
        with collector_paused() if paused else contextlib.nullcontext():
            started = time.perf_counter()
            pyslurm.job().get()
            pyslurm.node().get()
            times.append(time.perf_counter() - started)
    return times[0], times[1]


# `slurm-drf once ARGS` with its peak RSS printed, and its peak when the source begins to read:
# the interpreter and the modules `once` imports (pyslurm's libslurm with that backend), which
# no queue size changes. Only the modules `once` imports itself: the sources' modules are
# among them (cycle.backends). The peak is VmHWM, the process's own: getrusage's ru_maxrss
# keeps, across fork and exec, the parent's RSS at the fork (this benchmark's, hundreds of
# MiB after a pyslurm read).
HWM = "def hwm(): return int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])\n"
PEAK = (
    "import sys\n" + HWM + "from slurm_drf.slurm.cli_source import CliSource\n"
    "from slurm_drf.slurm.pyslurm_source import PyslurmSource\n"
    "marks = []\n"
    "def marked(fetch):\n"
    "    def fetch_marked(self):\n"
    "        marks.append(hwm())\n"
    "        return fetch(self)\n"
    "    return fetch_marked\n"
    "for source in (CliSource, PyslurmSource):\n"
    "    source.fetch_snapshot = marked(source.fetch_snapshot)\n"
    "from slurm_drf.cli.main import main\n"
    "code = main(sys.argv[1:])\n"
    "print('before_read_kib', marks[0] if marks else 0, file=sys.stderr)\n"
    "print('peak_rss_kib', hwm(), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def once_dry_process(config: Path, state_dir: Path, env: Mapping[str, str]) -> tuple[float, int, int]:
    """`slurm-drf once --dry-run` in a new process: wall time, its own peak RSS and its peak
    when it began to read (KiB)."""
    argv = [sys.executable, "-c", PEAK, "once", "--dry-run", "--config", str(config)]
    started = time.perf_counter()
    proc = subprocess.run(
        [*argv, "--state-dir", str(state_dir)], capture_output=True, text=True, env=dict(env), timeout=600, check=False
    )
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        print(f"  once --dry-run exited {proc.returncode} after {elapsed:.1f} s: {proc.stderr.strip()[-300:]}")
    found = {}
    for line in proc.stderr.splitlines():
        if line.startswith(("peak_rss_kib", "before_read_kib")):
            found[line.split()[0]] = int(line.split()[1])
    return elapsed, found.get("peak_rss_kib", 0), found.get("before_read_kib", 0)


def bare_pyslurm_peak(env: Mapping[str, str]) -> int:
    """pyslurm's own `job().get()` and `node().get()` in a new process: its peak RSS (KiB)."""
    code = HWM + "import pyslurm\npyslurm.job().get(); pyslurm.node().get()\nprint(hwm())\n"
    argv = [sys.executable, "-c", code]
    proc = subprocess.run(argv, capture_output=True, text=True, env=dict(env), timeout=600, check=False)
    return int(proc.stdout.split()[-1]) if proc.returncode == 0 and proc.stdout.split() else 0


def write_config(path: Path, state_dir: Path, backend: str, cap: int | None, *, weights: bool = True) -> Path:
    keys: dict[str, object] = {"state_dir": str(state_dir), "backend": backend}
    if weights:
        keys["accounts"] = WEIGHTS
    if cap is not None:
        keys["max_writes_per_cycle"] = cap
    path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in keys.items()), encoding="utf-8")
    path.chmod(0o600)
    return path


def med(values: Sequence[float]) -> float:
    return statistics.median(values)


# -- phases ----------------------------------------------------------------


def setup(args: argparse.Namespace, scratch: Path) -> int:
    """Fill the node, then queue the pending jobs; the running count."""
    cpus = node_cpus()
    running = int(args.running)
    free = meminfo("MemAvailable")
    per_job_guess = 2048  # KiB, measured at a few hundred: about 1.3 MiB PSS per job
    in_use = tasks_in_use()
    have = ours("R")
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text(encoding="ascii"))
    fit_pids = int((PID_SHARE * pid_max - in_use) / TASKS_PER_RUNNING_JOB)
    fit_memory = int(free * 0.5 / per_job_guess)
    print(
        f"machine: MemAvailable {free / 1024**2:.1f} GiB, {in_use} tasks of pid_max {pid_max}: "
        f"room for {fit_pids} running jobs by pids ({PID_SHARE:.0%} of pid_max), {fit_memory} by memory (half)"
    )
    if running - len(have) > min(fit_pids, fit_memory):
        most = min(fit_pids, fit_memory)
        sys.exit(f"bench_live_50k: {running} running jobs do not fit safely; ask for at most {most}")
    if cpus != running:
        sys.exit(f"bench_live_50k: the node has {cpus} CPUs; make it {running}: SLURM_SANDBOX_NODE_CPUS={running}")

    started = time.perf_counter()
    fill = have + submit(
        scratch, RUNNING_NAME, [ACCOUNTS[i % 4] for i in range(len(have), running)], False, args.threads
    )
    wait_for(lambda: len(ours("R")) == running, 900, f"{running} jobs to run", every=5)
    # Let slurmd settle (launch threads end), then measure.
    time.sleep(5)
    count, pss = job_processes_pss(fill)
    after = meminfo("MemAvailable")
    drop = f"{(free - after) / running:.0f} KiB of MemAvailable, " if not have else ""
    print(
        f"setup: {len(fill)} running in {time.perf_counter() - started:.0f} s; per running job "
        f"{drop}{pss / running:.0f} KiB PSS ({count} processes: slurmstepd and sleep); "
        f"tasks now {tasks_in_use()} of {pid_max}",
        flush=True,
    )

    started = time.perf_counter()
    queued = len(ours("PD"))
    pending = submit(scratch, PENDING_NAME, [ACCOUNTS[i % 4] for i in range(queued, args.pending)], True, args.threads)
    submitted = time.perf_counter() - started
    for start in range(0, len(pending), 10000):  # one argument stays below the kernel's 128 KiB
        run(["scontrol", "release", ",".join(pending[start : start + 10000])])
    held = [line for line in run(["squeue", "-h", "-t", "PD", "-o", "%r"]).stdout.splitlines() if "Held" in line]
    if held:
        sys.exit(f"bench_live_50k: {len(held)} job(s) still held after the release")
    print(
        f"setup: {len(pending)} pending submitted held in {submitted:.0f} s "
        f"({len(pending) / submitted:.0f}/s, {args.threads} sbatch at a time), released in "
        f"{time.perf_counter() - started - submitted:.1f} s"
    )
    return running


def measure_reads(args: argparse.Namespace, tmp: Path, backends: Sequence[str], env: Mapping[str, str]) -> None:
    snap = tmp / "snapshot.json"
    run([*DRF, "snapshot", "--output", str(snap)])
    snapshot_bytes = snap.stat().st_size
    bare: dict[str, list[float]] = {b: [] for b in backends}
    bare_on: list[float] = []
    fetch: dict[str, list[float]] = {b: [] for b in backends}
    dry: dict[str, list[float]] = {b: [] for b in backends}
    proc: dict[str, list[float]] = {b: [] for b in backends}
    peak: dict[str, list[int]] = {b: [] for b in backends}
    before_read: dict[str, list[int]] = {b: [] for b in backends}
    plain_peak: dict[str, list[int]] = {b: [] for b in backends}
    sizes: dict[str, int] = {}
    # One source per backend for the dry cycles, as the daemon keeps one (the tree is re-read
    # every few minutes, not every cycle); the first round's cycle reads it.
    daemon_sources = {b: source_of(b) for b in backends}
    for round_number in range(args.repeat):
        for backend in backends:
            state_dir = tmp / f"dry-{backend}"
            config = write_config(tmp / f"dry-{backend}.yaml", state_dir, backend, None)
            loaded = load_config(config)
            if backend == "cli":
                seconds, sizes = bare_cli(env)
                bare[backend].append(seconds)
            else:
                collector_on, collector_off = bare_pyslurm()
                bare_on.append(collector_on)
                bare[backend].append(min(collector_on, collector_off))
            fetch[backend].append(timed(source_of(backend).fetch_snapshot))
            source = daemon_sources[backend]
            dry[backend].append(timed(functools.partial(dry_cycle, source, backend, loaded, state_dir)))
            elapsed, rss, baseline = once_dry_process(config, state_dir, env)
            proc[backend].append(elapsed)
            peak[backend].append(rss)
            before_read[backend].append(baseline)
            # The same without the weights: no exact big-number arithmetic (module docstring).
            plain = write_config(tmp / f"dry-{backend}-plain.yaml", state_dir, backend, None, weights=False)
            plain_peak[backend].append(once_dry_process(plain, state_dir, env)[1])
        print(f"  round {round_number + 1} of {args.repeat} done", flush=True)
    print(
        f"reads: squeue --json {sizes['squeue'] / 1e6:.1f} MB "
        f"(squeue's peak RSS {sizes['squeue_rss'] / 1024:.0f} MiB), "
        f"sinfo --json {sizes['sinfo'] / 1e6:.2f} MB; the snapshot's JSON (slurm-drf snapshot) "
        f"{snapshot_bytes / 1e6:.1f} MB; the last squeue took {sizes['squeue_ms'] / 1000:.1f} s "
        f"(the daemon's slurm_timeout by default: {DEFAULT_SLURM_TIMEOUT:g} s)"
    )
    for backend in backends:
        b, d = med(bare[backend]), med(dry[backend])
        what = "squeue + sinfo processes" if backend == "cli" else "pyslurm job().get() + node().get()"
        print(f"[{backend}] bare reads ({what}): median {b:.2f} s (of {len(bare[backend])}: {_list(bare[backend])})")
        if backend == "pyslurm":
            print(f"[{backend}]   (the faster of collector on and paused; on alone: median {med(bare_on):.2f} s)")
        print(f"[{backend}] fetch_snapshot (reads, parse, Snapshot): median {med(fetch[backend]):.2f} s")
        print(
            f"[{backend}] dry-run cycle in the daemon (run_cycle): median {d:.2f} s = {d / b:.2f}x the bare reads "
            f"(target <= 1.5x; per round {_list([x / y for x, y in zip(dry[backend], bare[backend], strict=True)])})"
        )
        p, base = med(peak[backend]) * 1024, med(before_read[backend]) * 1024
        print(
            f"[{backend}] once --dry-run process: median {med(proc[backend]):.2f} s, peak RSS {p / 2**20:.0f} MiB "
            f"= {p / snapshot_bytes:.2f}x the snapshot's JSON (target <= 4x), "
            f"{p / sizes.get('squeue', snapshot_bytes):.2f}x squeue's JSON; before the read "
            f"{base / 2**20:.0f} MiB, so the read and plan add {(p - base) / 2**20:.0f} MiB "
            f"= {(p - base) / snapshot_bytes:.2f}x the snapshot's JSON"
        )
        unweighted = med(plain_peak[backend]) * 1024
        print(
            f"[{backend}]   without the weights (the embedded default): peak RSS {unweighted / 2**20:.0f} MiB "
            f"= {unweighted / snapshot_bytes:.2f}x; the read and plan add {(unweighted - base) / 2**20:.0f} MiB "
            f"= {(unweighted - base) / snapshot_bytes:.2f}x"
        )
    if "pyslurm" in backends:
        own = bare_pyslurm_peak(env) * 1024
        print(f"[pyslurm] pyslurm's own job().get() + node().get() in a new process: peak RSS {own / 2**20:.0f} MiB")


def _list(values: Sequence[float]) -> str:
    return " ".join(f"{v:.2f}" for v in values)


def dry_cycle(source: ClusterSource, backend: str, config: Config, state_dir: Path) -> CycleReport:
    return run_cycle(source, writer_of(backend), config, StateStore(state_dir), dry_run=True)


def real_cycle(backend: str, config: Config, state_dir: Path, recorder: AuditRecorder) -> str:
    """One real cycle with its parts; a read that a loaded slurmctld timed out is retried (it wrote nothing)."""
    for attempt in range(3):
        parts = Parts()
        before = rpc_counts()
        started = time.perf_counter()
        try:
            report = run_cycle(
                TimedSource(source_of(backend), parts),
                TimedWriter(writer_of(backend), parts),
                config,
                TimedStore(state_dir, parts),
            )
        except SlurmReadError as error:
            print(f"  (read failed, attempt {attempt + 1}: {error})", flush=True)
            continue
        cycle = time.perf_counter() - started
        commit = timed(functools.partial(recorder.on_cycle, report))
        after = rpc_counts()
        written = report.result.count if report.result is not None else 0
        failed = len(report.result.failed) if report.result is not None else 0
        pending = sum(1 for order in report.plan.column("order") if order is not None)
        plan = cycle - parts.read - parts.save - parts.writes
        per_write = f", {1000 * parts.writes / written:.1f} ms per write" if written else ""
        return (
            f"[{backend}] {pending} pending: wrote {written} ({100 * written / max(pending, 1):.2f}%), "
            f"{report.deferred} deferred, {failed} failed; {cycle:.2f} s = read {parts.read:.2f} + plan {plan:.2f} "
            f"+ state save {parts.save:.2f} + writes {parts.writes:.2f}{per_write}; history commit {commit:.2f} s\n"
            f"    slurmctld RPCs: {rpc_diff(before, after)}"
        )
    sys.exit("bench_live_50k: slurmctld did not answer three reads in a row")


def churn(scratch: Path, rng: random.Random, end: int) -> None:
    """END running jobs end, Slurm starts END pending ones, END new pending jobs arrive."""
    running = ours("R")
    ending = rng.sample(running, end)
    run(["scancel", *ending])
    wait_for(lambda: len(ours("R")) == len(running) and not (set(ours()) & set(ending)), 300, "Slurm to refill")
    submit(scratch, PENDING_NAME, rng.choices(ACCOUNTS, k=end), False, 4)


def measure_cycles(args: argparse.Namespace, tmp: Path, scratch: Path, backends: Sequence[str], running: int) -> None:
    state_dir = tmp / "state"
    recorder = AuditRecorder(state_dir, None)
    configs = {b: load_config(write_config(tmp / f"{b}.yaml", state_dir, b, None)) for b in backends}
    print(f"first cycles on a fresh state (max_writes_per_cycle {configs[backends[0]].max_writes_per_cycle}):")
    for backend in backends:
        print(real_cycle(backend, configs[backend], state_dir, recorder), flush=True)
    fastest = backends[-1]
    uncapped = replace(configs[fastest], max_writes_per_cycle=10**9)
    print("a cycle with no cap (every job left):", flush=True)
    print(real_cycle(fastest, uncapped, state_dir, recorder), flush=True)
    print(real_cycle(fastest, uncapped, state_dir, recorder), flush=True)
    end = max(1, running // 100)
    print(f"steady cycles, 1% churn ({end} of {running} running end, {end} arrive; target <= 2% of pending):")
    rng = random.Random(args.seed)
    for cycle, backend in zip(range(args.churn), _alternate(backends), strict=False):
        churn(scratch, rng, end)
        print(real_cycle(backend, configs[backend], state_dir, recorder), flush=True)
        del cycle


def _alternate(backends: Sequence[str]) -> Iterator[str]:
    while True:
        yield from backends


def cleanup() -> None:
    started = time.perf_counter()
    mine = ours()
    if not mine:
        return
    for start in range(0, len(mine), 5000):
        run(["scancel", *mine[start : start + 5000]], check=False)
    wait_for(lambda: not ours(), 900, "the benchmark's jobs to leave squeue", every=3)
    print(f"cleanup: cancelled {len(mine)} jobs in {time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--pending", type=int, default=50000)
    parser.add_argument("--running", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3, help="alternating rounds of the reads (default 3)")
    parser.add_argument("--churn", type=int, default=4, help="steady cycles at 1%% churn (default 4)")
    parser.add_argument("--backends", default="cli,pyslurm")
    parser.add_argument("--threads", type=int, default=4, help="concurrent sbatch processes (default 4)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="leave the jobs queued (a later run with --reuse)")
    parser.add_argument("--reuse", action="store_true", help="go on with the jobs a --keep run left")
    parser.add_argument("--cleanup", action="store_true", help="only cancel what a --keep run left")
    args = parser.parse_args()
    if not os.environ.get("SLURM_CONF"):
        sys.exit('bench_live_50k: SLURM_CONF is not set; run: eval "$(scripts/slurm-sandbox env)"')
    if args.cleanup:
        cleanup()
        return
    backends = [b for b in args.backends.split(",") if b]
    if "pyslurm" in backends and not pyslurm_usable()[0]:
        why = pyslurm_usable()[1]
        sys.exit(f"bench_live_50k: pyslurm is not usable here ({why}); run scripts/pyslurm-env's python")
    if not args.reuse and squeue_ids():
        sys.exit("bench_live_50k: the sandbox already has jobs; this benchmark fills the node")
    env = {k: v for k, v in os.environ.items() if k != "SLURM_DRF_CONFIG"}
    env["SLURM_BITSTR_LEN"] = "0"
    with tempfile.TemporaryDirectory(prefix="bench-live-50k-") as name:
        tmp = Path(name)
        scratch = tmp / "jobs"
        scratch.mkdir()
        scratch.chmod(0o755)
        try:
            running = setup(args, scratch)
            print(f"measuring: {len(ours('R'))} running, {len(ours('PD'))} pending", flush=True)
            measure_reads(args, tmp, backends, env)
            measure_cycles(args, tmp, scratch, backends, running)
            print(f"this process's peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
        finally:
            if not args.keep:
                cleanup()


if __name__ == "__main__":
    main()
