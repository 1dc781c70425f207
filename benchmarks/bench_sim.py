"""Benchmark of the simulator (issue 6): run by hand, not a test.

    python benchmarks/bench_sim.py [--scenario mixed] [--jobs 100000] [--nodes 1000]
        [--policy drf] [--interval 60] [--engine auto] [--backfill easy|slurm] [--seed 1]

Builds the scenario, simulates it under one policy and prints the wall time
of each step, what the run did (ticks, scheduler passes), the time spent in
the DRF engine's own functions, the Jain index, and the peak RSS of the
process (resource.getrusage). The target of issue 6: 100k jobs on 1,000
nodes under drf in at most 60 s on the 2-core reference machine.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

import slurm_drf.sim.policies as policies_module
from slurm_drf.sim.compare import choose_engine
from slurm_drf.sim.engine import simulate
from slurm_drf.sim.options import BACKFILL_MODES, DEFAULT_BACKFILL, SimOptions
from slurm_drf.sim.policies import POLICIES, build_policy
from slurm_drf.sim.run_metrics import compute_metrics
from slurm_drf.sim.scenarios import SCENARIOS, build_scenario

TARGET_SECONDS = 60.0


def timed(function: Callable[..., Any], spent: list[float]) -> Callable[..., Any]:
    """`function`, adding its wall time to spent[0]."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - began

    return wrapper


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=tuple(SCENARIOS), default="mixed")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--policy", choices=POLICIES, default="drf")
    parser.add_argument("--interval", type=float, default=60.0)
    parser.add_argument("--engine", choices=("auto", "plan", "fast"), default="auto")
    parser.add_argument("--backfill", choices=BACKFILL_MODES, default=DEFAULT_BACKFILL)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    # As slurm_drf.cli.main does for every verb: the run keeps its objects to the end.
    gc.set_threshold(200_000, 50, 1000)

    began = time.perf_counter()
    workload = build_scenario(args.scenario, args.seed, nodes=args.nodes, jobs=args.jobs)
    built = time.perf_counter() - began

    # Time spent inside the engine's functions, whichever path the policy takes.
    engine_time = [0.0]
    for name in ("compute_plan", "compute_before", "order_pending", "running_fingerprint"):
        setattr(policies_module, name, timed(getattr(policies_module, name), engine_time))

    engine = choose_engine(args.engine)
    policy = build_policy(args.policy, engine=engine)
    began, cpu_began = time.perf_counter(), time.process_time()
    result = simulate(workload, policy, SimOptions(interval=args.interval, backfill=args.backfill))
    simulated = time.perf_counter() - began
    cpu = time.process_time() - cpu_began
    metrics = compute_metrics(result)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux

    print(
        f"scenario {workload.name}: {len(workload.jobs)} jobs, {workload.node_count} nodes of "
        f"{workload.node_type.render()}, seed {args.seed}"
    )
    print(
        f"policy {args.policy} (engine {engine if args.policy == 'drf' else '-'}), interval {args.interval:g}s, "
        f"{args.backfill} backfill, {result.plans} ticks, {result.passes} scheduler passes, "
        f"simulated {result.end.max() / 3600:.1f} h"
    )
    print(f"build workload   {built:7.2f} s")
    print(f"simulate         {simulated:7.2f} s wall, {cpu:.2f} s CPU (DRF engine functions: {engine_time[0]:.2f} s)")
    load = os.getloadavg()[0]
    if load > 1.5:
        print(f"note: load average {load:.1f} on {os.cpu_count()} CPUs: other work shares this machine")
    print(f"peak RSS         {peak_mib:7.0f} MiB")
    print(f"Jain (backlogged) {metrics.jain:.3f}, share max/min {metrics.share_ratio:.2f}")
    within = simulated <= TARGET_SECONDS
    print(f"target: <= {TARGET_SECONDS:.0f} s for the simulation: {'met' if within else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
