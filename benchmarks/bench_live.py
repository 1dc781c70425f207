"""Live benchmark in the Slurm sandbox (issue 3): run by hand as root, not a test.

    eval "$(scripts/slurm-sandbox env)"
    python benchmarks/bench_live.py [--jobs 2000] [--repeat 5]

Fills the sandbox node with one big running job per account, then submits
JOBS small pending jobs (separate jobs, not an array) spread over the four
team accounts: submitted held, so that the scheduler does not consider
each one as it arrives, then released in one scontrol call; the node is
full, so they stay pending, not held. Then measures in the same run:

- the bare reads: `squeue --json --all` plus `sinfo --json --all` (the
  commands the CLI source runs) as processes, best and median of REPEAT;
- `slurm-drf once --dry-run` as a process, best and median of REPEAT, and
  the ratio to the bare reads (target <= 1.5x); the same dry-run cycle as
  the daemon runs it (`run_cycle` in this process: no interpreter start or
  imports), and its ratio;
- the first real `once` (its time and write count) and a second `once`
  right after it (it must write 0);
- whether Slurm's priority order of the pending jobs is then the plan's.

Cancels every job it submitted and waits until they are gone, also when
interrupted. The sandbox must have no other jobs (the node gets filled).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from slurm_drf.config.load import load_config
from slurm_drf.cycle.backends import make_source, make_writer
from slurm_drf.cycle.run import run_cycle
from slurm_drf.cycle.store import StateStore

DRF = (sys.executable, "-m", "slurm_drf.cli")
ACCOUNTS = ("gputeam", "memteam", "cputeam", "newteam")
# One running job per account, 16 CPUs each: the node's 64 CPUs are taken.
FILL = {
    "gputeam": ("-p", "gpu", "--gres=gpu:6", "-c", "16", "--mem=32000"),
    "memteam": ("-p", "cpu", "-c", "16", "--mem=300000"),
    "cputeam": ("-p", "cpu", "-c", "16", "--mem=16000"),
    "newteam": ("-p", "cpu", "-c", "16", "--mem=8000"),
}
# Pending job shapes per account, cycled: GPU-heavy, memory-heavy, CPU-heavy, small.
SHAPES = {
    "gputeam": (
        ("-p", "gpu", "--gres=gpu:1", "-c", "1", "--mem=1000"),
        ("-p", "gpu", "--gres=gpu:2", "-c", "2", "--mem=2000"),
    ),
    "memteam": (("-p", "cpu", "-c", "1", "--mem=32000"), ("-p", "cpu", "-c", "2", "--mem=64000")),
    "cputeam": (("-p", "cpu", "-c", "8", "--mem=1000"), ("-p", "cpu", "-c", "4", "--mem=1000")),
    "newteam": (("-p", "cpu", "-c", "1", "--mem=500"), ("-p", "cpu", "-c", "2", "--mem=1000")),
}


def run(argv: Sequence[str], *, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        sys.exit(f"bench_live: {' '.join(argv[:4])}... exited {proc.returncode}: {proc.stderr.strip()[:500]}")
    return proc


def queued_ids() -> set[str]:
    return set(run(["squeue", "-h", "-o", "%A"]).stdout.split())


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            sys.exit(f"bench_live: timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.5)


def sbatch_argv(
    scratch: Path, account: str, options: Sequence[str], hold: bool, *, wrap: str = "sleep 3600"
) -> list[str]:
    """The argv of one benchmark job: `wrap` as the script, its output discarded."""
    return [
        "sbatch",
        "--parsable",
        f"--chdir={scratch}",
        "--output=/dev/null",
        "--error=/dev/null",
        "-A",
        account,
        *options,
        *(["--hold"] if hold else []),
        "--wrap",
        wrap,
    ]


def sbatch(scratch: Path, account: str, options: Sequence[str], hold: bool) -> str:
    return run(sbatch_argv(scratch, account, options, hold)).stdout.strip().split(";", 1)[0]


def timed(argv: Sequence[str], env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=600, env=env, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"bench_live: {' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[:500]}")
    return elapsed, proc


def bare_reads(env: dict[str, str]) -> float:
    first, _ = timed(["squeue", "--json", "--all"], env)
    second, _ = timed(["sinfo", "--json", "--all"], env)
    return first + second


def dry_cycle(config_path: Path, state_dir: Path) -> float:
    """One dry-run cycle as the daemon runs it: read through the CLI source, plan, write nothing."""
    config = load_config(config_path)
    started = time.perf_counter()
    source = make_source(config)
    run_cycle(source, make_writer(source), config, StateStore(state_dir), dry_run=True)
    return time.perf_counter() - started


def summary_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if "pending jobs," in line]
    return lines[-1].split("INFO: ", 1)[-1] if lines else "(no summary)"


def written(stderr: str) -> int:
    line = summary_line(stderr)
    for marker in ("wrote ", "would write "):
        if marker in line:
            return int(line.split(marker, 1)[1].split()[0])
    return -1


def figures(values: Sequence[float]) -> str:
    return f"best {min(values):6.3f} s, median {statistics.median(values):6.3f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=2000, help="pending jobs to submit (default 2000)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each read (default 5)")
    parser.add_argument("--threads", type=int, default=4, help="concurrent sbatch processes (default 4)")
    args = parser.parse_args()
    if not os.environ.get("SLURM_CONF"):
        sys.exit('bench_live: SLURM_CONF is not set; run: eval "$(scripts/slurm-sandbox env)"')
    if queued_ids():
        sys.exit("bench_live: the sandbox already has jobs; this benchmark fills the node and needs it to itself")

    submitted: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp:
        scratch = Path(tmp) / "jobs"
        scratch.mkdir()
        state_dir = Path(tmp) / "state"
        config = Path(tmp) / "config.yaml"
        config.write_text(f"state_dir: {json.dumps(str(state_dir))}\n", encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if k != "SLURM_DRF_CONFIG"}
        env["SLURM_BITSTR_LEN"] = "0"  # what the CLI source sets for its own reads
        try:
            measure(args, scratch, state_dir, config, env, submitted)
        finally:
            cleanup(submitted)


def measure(
    args: argparse.Namespace, scratch: Path, state_dir: Path, config: Path, env: dict[str, str], submitted: list[str]
) -> None:
    started = time.perf_counter()
    fill = [sbatch(scratch, account, options, hold=False) for account, options in FILL.items()]
    submitted += fill
    wait_for(
        lambda: set(run(["squeue", "-h", "-t", "R", "-o", "%A"]).stdout.split()) >= set(fill),
        60,
        "the node-filling jobs to run",
    )

    plan = [(ACCOUNTS[i % 4], SHAPES[ACCOUNTS[i % 4]][(i // 4) % 2]) for i in range(args.jobs)]
    with ThreadPoolExecutor(args.threads) as pool:
        pending = list(pool.map(lambda item: sbatch(scratch, item[0], item[1], hold=True), plan))
    submitted += pending
    for start in range(0, len(pending), 500):
        run(["scontrol", "release", ",".join(pending[start : start + 500])])
    held = run(["squeue", "-h", "-t", "PD", "-o", "%A %r"]).stdout.splitlines()
    still_held = [line for line in held if "JobHeld" in line]
    if still_held:
        sys.exit(f"bench_live: {len(still_held)} job(s) still held after the release")
    print(f"setup: {len(fill)} running + {len(pending)} pending jobs in {time.perf_counter() - started:.1f} s")

    reads = [bare_reads(env) for _ in range(args.repeat)]
    dry = [
        timed([*DRF, "once", "--dry-run", "--config", str(config), "--state-dir", str(state_dir)], env)[0]
        for _ in range(args.repeat)
    ]
    cycles = [dry_cycle(config, state_dir) for _ in range(args.repeat)]
    # Interleave once more, so that a drift of the machine shows in all three.
    reads.append(bare_reads(env))
    startup, _ = timed([sys.executable, "-c", "import slurm_drf.cli.main"], env)
    print(f"bare reads (squeue --json --all + sinfo --json --all): {figures(reads)}")
    print(f"once --dry-run (process):                             {figures(dry)}")
    print(f"dry-run cycle in a running daemon (run_cycle):        {figures(cycles)}")
    print(f"  (of the process: interpreter start and imports {startup:.3f} s)")
    print(
        f"ratio once --dry-run / bare reads: best {min(dry) / min(reads):.2f}x, "
        f"median {statistics.median(dry) / statistics.median(reads):.2f}x (target <= 1.5x)"
    )
    print(
        f"ratio daemon cycle / bare reads:   best {min(cycles) / min(reads):.2f}x, "
        f"median {statistics.median(cycles) / statistics.median(reads):.2f}x (target <= 1.5x)"
    )

    once = [*DRF, "once", "--config", str(config), "--state-dir", str(state_dir), "--format", "json"]
    first_time, first = timed(once, env)
    print(f"first once:  {first_time:6.3f} s, wrote {written(first.stderr)} ({summary_line(first.stderr)})")
    second_time, second = timed(once, env)
    print(f"second once: {second_time:6.3f} s, wrote {written(second.stderr)} ({summary_line(second.stderr)})")

    ordered = sorted((j for j in json.loads(second.stdout)["jobs"] if j["order"] is not None), key=lambda j: j["order"])
    order = [j["job_id"] for j in ordered]
    text = run(["squeue", "-h", "-t", "PD", "--sort=-p,i", "-o", "%A %Q"]).stdout.split("\n")
    slurm_order = [line.split()[0] for line in text if line.strip() and line.split()[0] in set(order)]
    priorities = [int(line.split()[1]) for line in text if line.strip()]
    distinct = len(set(priorities)) == len(priorities)
    print(
        f"Slurm's priority order equals the plan's: {slurm_order == order} "
        f"({len(order)} jobs, priorities distinct: {distinct}, lowest {min(priorities)})"
    )


def cleanup(submitted: list[str]) -> None:
    if not submitted:
        return
    started = time.perf_counter()
    for start in range(0, len(submitted), 500):
        run(["scancel", *submitted[start : start + 500]], check=False)
    wait_for(lambda: queued_ids().isdisjoint(submitted), 300, "the benchmark's jobs to leave squeue")
    print(f"cleanup: cancelled {len(submitted)} jobs in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
