"""Benchmark of the DRF engine (issue 2): run by hand, not a test.

    python benchmarks/bench_engine.py [--pending 100000] [--running 50000]
        [--accounts 2000] [--nodes 500] [--seed 1]

Writes a synthetic snapshot to benchmarks/data/ (`ensure_snapshot`, also
used by bench_plan_cli.py), then measures in one run: the engine
(`compute_plan` on a parsed snapshot) and the rule's greedy loop
(`policy.rule.flat_order`) on the same jobs. Prints the ratio (the figure that
matters on a noisy machine) and peak RSS. Whole `slurm-drf plan` processes
are measured by benchmarks/bench_plan_cli.py.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import TypeVar

import numpy as np

from slurm_drf.config.settings import Config
from slurm_drf.model.codec import format_time, parse_snapshot
from slurm_drf.model.types import SNAPSHOT_FORMAT, job_number
from slurm_drf.policy.plan import compute_plan, plan_order_pairs
from slurm_drf.policy.rule import flat_order

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the checkout: its test-only nested heaps (tests/reference/), for bench_hierarchy

RESOURCES = ("cpu", "mem", "gres/gpu")
T = TypeVar("T")


def build_snapshot(pending: int, running: int, accounts: int, nodes: int, seed: int) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    node_list = [
        {
            "name": f"n{i:04d}",
            "partitions": ["gpu" if i % 4 == 0 else "cpu"],
            "state": "mixed",
            "tres": {"cpu": 128, "mem": 1_024_000, "gres/gpu": 8 if i % 4 == 0 else 0},
        }
        for i in range(nodes)
    ]
    names = [f"acct{i:04d}" for i in range(accounts)]
    # Zipf-like account popularity: a few big accounts, a long tail.
    popularity = 1.0 / np.arange(1, accounts + 1) ** 0.8
    popularity /= popularity.sum()
    jobs = []
    total = pending + running
    acct = rng.choice(accounts, size=total, p=popularity)
    kind = rng.integers(0, 3, size=total)
    cpus = rng.integers(1, 33, size=total)
    gpus = np.where(kind == 0, rng.integers(1, 9, size=total), 0)
    mem = np.where(kind == 1, rng.integers(32_000, 512_000, size=total), cpus * 4000)
    submit = 1_796_000_000 + rng.integers(0, 86_400 * 7, size=total)
    prio = rng.integers(1000, 100_000, size=total)
    for i in range(total):
        state = "RUNNING" if i < running else "PENDING"
        jobs.append(
            {
                "job_id": str(1000 + i),
                "account": names[acct[i]],
                "user": f"user{acct[i] % 500}",
                "partition": "gpu" if gpus[i] else "cpu",
                "state": state,
                "priority": int(prio[i]),
                "nice": 0,
                "held": False,
                "submit_time": format_time(float(submit[i])),
                "array_tasks": 1,
                "tres": {"cpu": int(cpus[i]), "mem": int(mem[i]), "gres/gpu": int(gpus[i])},
            }
        )
    return {
        "format": SNAPSHOT_FORMAT,
        "cluster": "bench",
        "taken_at": "2026-11-30T00:00:00Z",
        "nodes": node_list,
        "jobs": jobs,
    }


def ensure_snapshot(pending: int, running: int, accounts: int, nodes: int, seed: int) -> Path:
    """The synthetic snapshot file in benchmarks/data/, written the first time it is asked for."""
    data_dir = HERE / "data"
    data_dir.mkdir(exist_ok=True)
    path = data_dir / f"snapshot-{pending}-{running}-{accounts}-{nodes}-{seed}.json"
    if not path.exists():
        path.write_text(json.dumps(build_snapshot(pending, running, accounts, nodes, seed)))
    return path


def timed(func: Callable[[], T], repeat: int = 3) -> tuple[float, T]:
    """Best wall time of `func` over `repeat` runs (at least one), and its last result."""
    best = float("inf")
    for _ in range(max(repeat, 1)):
        start = time.perf_counter()
        result = func()
        best = min(best, time.perf_counter() - start)
    return best, result


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """The synthetic cluster's size, shared by the benchmarks that build it."""
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--running", type=int, default=50_000)
    parser.add_argument("--accounts", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)


def main() -> None:
    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    parser.add_argument("--skip-reference", action="store_true")
    args = parser.parse_args()

    path = ensure_snapshot(args.pending, args.running, args.accounts, args.nodes, args.seed)
    print(f"snapshot: {path.name}, {path.stat().st_size / 1e6:.1f} MB")

    load_s, raw = timed(lambda: json.loads(path.read_text()))
    parse_s, snap = timed(lambda: parse_snapshot(raw))
    config = Config(resources=RESOURCES, partitions=("gpu", "cpu"))
    engine_s, plan = timed(lambda: compute_plan(snap, config))
    print(f"json.load:              {load_s:8.3f} s")
    print(f"parse_snapshot:         {parse_s:8.3f} s")
    print(f"engine (compute_plan):  {engine_s:8.3f} s   ({len(plan.jobs)} pending jobs, {len(plan.accounts)} accounts)")

    if not args.skip_reference:
        jobs = list(snap.jobs)

        def reference() -> list[tuple[str, int]]:
            capacity = [plan.pools[0].capacity[r] for r in RESOURCES]
            usage: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
            queues: dict[str, list[tuple[tuple[int, float, int], list[int]]]] = defaultdict(list)
            for job in jobs:
                vector = [job.tres.get(r, 0) for r in RESOURCES]
                if job.holding:
                    usage[job.account] = [a + b for a, b in zip(usage[job.account], vector, strict=True)]
                elif job.pending:
                    key = (-job.priority, job.submit_time, job_number(job.job_id))
                    queues[job.account].append((key, vector))
            pending = {a: [v for _, v in sorted(q, key=lambda e: e[0])] for a, q in queues.items()}
            return flat_order(pending, usage, capacity, {a: Fraction(1) for a in pending}, epoch=plan.state.epoch).jobs

        ref_s, expected = timed(reference, repeat=1)
        assert plan_order_pairs(plan, plan.pools[0].name) == expected, "engine and reference orders differ"
        print(f"reference heap loop:    {ref_s:8.3f} s   (engine is {ref_s / engine_s:.1f}x faster)")

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process: {rss:.0f} MiB")
    print("whole `slurm-drf plan` processes: python benchmarks/bench_plan_cli.py")


if __name__ == "__main__":
    main()
