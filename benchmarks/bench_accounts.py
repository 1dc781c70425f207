"""Benchmark of many accounts (issue 22, item 4): run by hand, not a test.

    python benchmarks/bench_accounts.py [--accounts 20000] [--jobs 2] [--runs 5] [--metrics-runs 3]

A snapshot of --accounts accounts with --jobs pending jobs each (one pool,
ten nodes, everyone at share 0: one tie of every account) in
benchmarks/data/, then new processes taking turns, --runs each:

- `python3 -c 'import json,sys; json.load(open(sys.argv[1]))' FILE`, the floor;
- `python -m slurm_drf.cli plan --snapshot FILE --config /dev/null --format json`;
- `report --format json`, `report` (the text table) and `explain JOB` (JOB the
  last job of the order: every other account is ahead of it), the same way.

The processes run with their modules' `.pyc` written (without
PYTHONDONTWRITEBYTECODE, as an installed package has them; one run of each
command before the timed rounds writes them). Prints each command's median
wall time and the median of the per-round ratios to the floor (the figure
the issue's target, <= 3x at 20,000 accounts, is about).

Then, in this process, the daemon's metrics of that plan (--metrics-runs
rounds): `MetricsRecorder.on_cycle` (the gauges of every account) and
`render` (the Prometheus text), medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from slurm_drf.config.settings import Config
from slurm_drf.cycle.run import CycleReport
from slurm_drf.model.snapshot_file import SnapshotFileSource
from slurm_drf.policy.plan import compute_plan
from slurm_drf.trail.prometheus import MetricsRecorder

HERE = Path(__file__).resolve().parent
LOAD_ONLY = "import json,sys; json.load(open(sys.argv[1]))"


def ensure_snapshot(accounts: int, jobs: int) -> Path:
    data_dir = HERE / "data"
    data_dir.mkdir(exist_ok=True)
    path = data_dir / f"accounts-{accounts}-{jobs}.json"
    if not path.exists():
        records = [
            {"job_id": str(a * jobs + k + 1), "account": f"acct{a:06d}", "user": f"u{a % 50}", "partition": "p",
             "state": "PENDING", "priority": 1000, "nice": 0, "submit_time": "2026-11-30T01:00:00Z",
             "tres": {"cpu": 1, "mem": 1000}}
            for a in range(accounts)
            for k in range(jobs)
        ]  # fmt: skip
        nodes = [
            {"name": f"n{i}", "partitions": ["p"], "state": "idle", "tres": {"cpu": 64, "mem": 256000}}
            for i in range(10)
        ]
        snapshot = {
            "format": "slurm-drf-snapshot/1",
            "cluster": "bench",
            "taken_at": "2026-11-30T02:00:00Z",
            "nodes": nodes,
            "jobs": records,
        }
        path.write_text(json.dumps(snapshot))
    return path


def wall(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def commands(path: Path, last_job: str) -> dict[str, list[str]]:
    """Each timed command's argv, the floor first."""
    cli = [sys.executable, "-m", "slurm_drf.cli"]
    snapshot = ["--snapshot", str(path), "--config", "/dev/null"]
    return {
        "json.load": [sys.executable, "-c", LOAD_ONLY, str(path)],
        "plan --format json": [*cli, "plan", *snapshot, "--format", "json"],
        "report --format json": [*cli, "report", *snapshot, "--format", "json"],
        "report": [*cli, "report", *snapshot, "--color", "never"],
        f"explain {last_job}": [*cli, "explain", last_job, *snapshot],
    }


def metrics_times(path: Path, runs: int) -> tuple[float, float]:
    """Medians of the metrics' on_cycle and render for the plan of the snapshot, in this process."""
    snapshot = SnapshotFileSource(path).fetch_snapshot()
    plan = compute_plan(snapshot, Config())
    report = CycleReport(plan, snapshot, (), None, 0.0, 0.0, 0, dry_run=True)
    recorder = MetricsRecorder(registry=CollectorRegistry(auto_describe=True))
    cycles, renders = [], []
    for _ in range(max(runs, 1)):
        start = time.perf_counter()
        recorder.on_cycle(report)
        cycles.append(time.perf_counter() - start)
        start = time.perf_counter()
        recorder.render()
        renders.append(time.perf_counter() - start)
    return statistics.median(cycles), statistics.median(renders)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accounts", type=int, default=20_000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--metrics-runs", type=int, default=3, help="rounds of the metrics (0: none)")
    args = parser.parse_args()
    path = ensure_snapshot(args.accounts, args.jobs)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    argvs = commands(path, str(args.accounts * args.jobs))
    for argv in argvs.values():
        wall(argv, env)  # writes the .pyc
    times: dict[str, list[float]] = {name: [] for name in argvs}
    names = list(argvs)
    for round_number in range(max(args.runs, 1)):
        # The order rotates every round so that no command always follows the same neighbour.
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(wall(argvs[name], env))
    print(f"{args.accounts} accounts, {args.jobs} pending jobs each, {args.runs} alternating runs")
    floor = times["json.load"]
    for name, values in times.items():
        ratios = [t / f for t, f in zip(values, floor, strict=True)]
        print(f"{name:22s} median {statistics.median(values):7.3f} s   x{statistics.median(ratios):5.2f} of json.load")
    if args.metrics_runs:
        cycle, render = metrics_times(path, args.metrics_runs)
        print(f"metrics: on_cycle median {cycle:.3f} s, render median {render:.3f} s ({args.metrics_runs} rounds)")


if __name__ == "__main__":
    main()
