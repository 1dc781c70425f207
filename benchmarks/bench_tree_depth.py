"""Benchmark of deep account trees (issue 22, item 5): run by hand, not a test.

    python benchmarks/bench_tree_depth.py [--depths 100,500,1000] [--refuse 100000] [--runs 3]

For each depth d of --depths, a chain root -> a0 -> ... -> a{d-1} with a
user and a pending job at every level (so no chain contracts: the worst
shape for the engine), planned in this process: `compute_plan`, the JSON
plan, the share report (table) and the explanation of the deepest job, each
timed (median of --runs) with the peak RSS of the whole process. Then the
wall time of `slurm-drf plan --snapshot FILE` (a new process, `python -m
slurm_drf.cli`) on a chain of --refuse accounts, which is refused in one
line at model.account_tree.MAX_TREE_DEPTH with exit 2, and that process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from slurm_drf.config.settings import Config
from slurm_drf.model.account_tree import MAX_TREE_DEPTH
from slurm_drf.model.types import Association, Job, Node, Snapshot, freeze_tres
from slurm_drf.policy.plan import compute_plan
from slurm_drf.trail.explain import explain_job
from slurm_drf.trail.explain_render import render_explanation_json
from slurm_drf.trail.plan_output import render_plan_json
from slurm_drf.trail.share_report import render_report


def chain_snapshot(depth: int) -> Snapshot:
    associations = [Association("root", None, None, 1)]
    associations += [Association(f"a{i}", "root" if i == 0 else f"a{i - 1}", None, 1) for i in range(depth)]
    associations += [Association(f"a{i}", f"a{i}", "u", 1) for i in range(depth)]
    jobs = [
        Job(f"{i + 1}", f"a{i}", "u", "main", "PENDING", 1000, 0, False, float(i), 1, freeze_tres({"cpu": 1}))
        for i in range(depth)
    ]
    node = Node("n1", ("main",), "idle", freeze_tres({"cpu": 64}))
    return Snapshot("bench", "2026-11-30T00:00:00Z", (node,), tuple(jobs), associations=tuple(associations))


def median_time(call: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(max(runs, 1)):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def refusal(depth: int) -> None:
    associations: list[dict[str, object]] = [{"account": "root", "parent": None}]
    associations += [{"account": f"a{i}", "parent": "root" if i == 0 else f"a{i - 1}"} for i in range(depth)]
    associations.append({"account": f"a{depth - 1}", "user": "u"})
    data = {
        "format": "slurm-drf-snapshot/1",
        "cluster": "bench",
        "taken_at": "2026-11-30T02:00:00Z",
        "nodes": [{"name": "n", "partitions": ["p"], "state": "idle", "tres": {"cpu": 8}}],
        "jobs": [
            {"job_id": "1", "account": f"a{depth - 1}", "user": "u", "partition": "p", "state": "PENDING",
             "priority": 1, "nice": 0, "submit_time": "2026-11-30T01:00:00Z", "tres": {"cpu": 1}}
        ],
        "associations": associations,
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "chain.json"
        path.write_text(json.dumps(data))
        argv = [sys.executable, "-m", "slurm_drf.cli", "plan", "--snapshot", str(path), "--config", "/dev/null"]
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"chain of {depth} accounts: exit {done.returncode} in {wall:.2f} s, peak RSS {peak:.0f} MiB")
    print(f"  {done.stderr.strip()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depths", default=f"100,500,{MAX_TREE_DEPTH}")
    parser.add_argument("--refuse", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    config = Config(resources=("cpu",))
    for depth in (int(d) for d in args.depths.split(",")):
        snap = chain_snapshot(depth)
        plan = compute_plan(snap, config)
        deepest = str(depth)
        figures = {
            "plan": median_time(lambda: compute_plan(snap, config), args.runs),  # noqa: B023
            "plan json": median_time(lambda: render_plan_json(plan), args.runs),  # noqa: B023
            "report": median_time(lambda: render_report(plan, "table"), args.runs),  # noqa: B023
            "explain": median_time(
                lambda: render_explanation_json(explain_job(plan, snap, deepest)),  # noqa: B023
                args.runs,
            ),
        }
        shown = ", ".join(f"{name} {seconds:.3f} s" for name, seconds in figures.items())
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"depth {depth:5d} ({depth} jobs, one per level): {shown}; peak RSS so far {peak:.0f} MiB")
    if args.refuse:
        refusal(args.refuse)


if __name__ == "__main__":
    main()
