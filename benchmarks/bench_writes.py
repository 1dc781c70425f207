"""Writes per cycle on a churning queue (issue 10): run by hand, not a test.

    python benchmarks/bench_writes.py [--pending 100000] [--running 50000]
        [--accounts 2000] [--nodes 500] [--cycles 8] [--weight-sums 0,13000,1410000]

The synthetic cluster of bench_engine.py, then cycles of what a busy
cluster does between two runs of the daemon: 1% of the running jobs end,
the daemon plans and writes (nice mode, no write cap), and Slurm starts as
many jobs as ended, the head of *its* order: priority = a factor of each
job's own between 0 and the PriorityWeight* sum (age, QOS, ...) - nice.
For each sum it runs the labels, the mapping of 0.1.0 before them
(`sim.daemon_loop.spread_values`), and labels in factor weighting (DRF as one factor of
weight 1,000,000), and prints per cycle, as medians over the cycles after
the first: jobs written, the order-theoretic minimum (fewest writes after
which the values already held rise by gap = 1 + the sum along the plan),
both inside the exact band and in all, whether Slurm's order of the exact
band equals the plan's after the writes, and the engine's time.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np
from bench_engine import RESOURCES, add_cluster_arguments, build_snapshot

from slurm_drf.config.settings import Config
from slurm_drf.model.codec import parse_snapshot
from slurm_drf.model.types import BoolArray, IntArray, JobTable, Snapshot
from slurm_drf.policy.labels import fewest_writes
from slurm_drf.policy.ownership import JobMemory
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.policy.state import PolicyState
from slurm_drf.policy.values import label_space, labels_of, value_offset
from slurm_drf.sim.daemon_loop import SPREAD_SCALE, spread_values

RUNNING, PENDING, GONE = 0, 1, 2
# factor weighting's DRF weight in the "factor" rows, as a site replacing
# PriorityWeightFairshare would set it.
FACTOR_WEIGHT = 1_000_000


def subset(table: JobTable, rows: IntArray, state: IntArray, nice: IntArray, priority: IntArray) -> JobTable:
    """The table's rows `rows`, with new state codes, nice and priority."""
    ids = [table.job_id[i] for i in rows.tolist()]
    return dataclasses.replace(
        table,
        job_id=ids,
        job_number=table.job_number[rows],
        account=table.account[rows],
        user=[table.user[i] for i in rows.tolist()],
        partition=table.partition[rows],
        state=state,
        priority=priority,
        nice=nice,
        held=table.held[rows],
        submit_time=table.submit_time[rows],
        array_tasks=table.array_tasks[rows],
        site_factor=[None] * len(ids),
        tres={name: column[rows] for name, column in table.tres.items()},
    )


@dataclasses.dataclass
class Cycle:
    written: int
    minimum: int
    exact_written: int
    exact_minimum: int
    exact_in_order: bool
    engine_s: float


def pool_positions(plan: Plan) -> list[tuple[list[int], int]]:
    """Per pool: plan.jobs indices in DRF order, and the size of its exact band."""
    return [(list(range(r.offset, r.offset + r.size)), r.exact) for r in plan.orders]


def run(base: Snapshot, weight_sum: int, mapping: str, cycles: int, seed: int) -> list[Cycle]:
    rng = np.random.default_rng(seed)
    table = base.table
    total = len(table)
    running_code = table.states.index("RUNNING")
    status = np.where(table.state == running_code, RUNNING, PENDING)
    factor = rng.integers(0, weight_sum + 1, size=total)
    nice = np.zeros(total, dtype=np.int64)
    memory: dict[str, JobMemory] = {}
    index_of = {job_id: i for i, job_id in enumerate(table.job_id)}
    weights = MappingProxyType({"PriorityWeightAge": weight_sum} if weight_sum else {})
    config = Config(resources=RESOURCES, partitions=("gpu", "cpu"))
    if mapping == "factor":
        config = dataclasses.replace(config, weighting="factor", factor_weight=FACTOR_WEIGHT)
    states = ("RUNNING", "PENDING")
    policy = PolicyState()
    out = []
    for _ in range(cycles + 1):
        running = np.flatnonzero(status == RUNNING)
        ending = rng.choice(running, size=max(1, len(running) // 100), replace=False)
        status[ending] = GONE
        rows = np.flatnonzero(status != GONE)
        priority = np.clip(factor[rows] - nice[rows], 1, 2**32 - 1)
        snap_table = dataclasses.replace(subset(table, rows, status[rows], nice[rows], priority), states=states)
        snap = Snapshot.from_table(snap_table, cluster="bench", taken_at="", nodes=base.nodes, priority_weights=weights)
        policy = dataclasses.replace(policy, jobs=MappingProxyType(memory))
        started = time.perf_counter()
        plan = compute_plan(snap, config, policy)
        engine_s = time.perf_counter() - started
        policy = plan.state
        space = label_space(config, weights, {})
        ids = plan.column("job_id")
        values = plan.column("value")
        if mapping == "spread":
            values = list(values)
            levels = plan.column("level")
            for positions, _ in pool_positions(plan):
                spread = spread_values(np.array([levels[p] for p in positions]), SPREAD_SCALE, space.gap)
                for p, label in zip(positions, spread.tolist(), strict=True):
                    values[p] = min(label - config.offset, -1)
        offset = value_offset(config)
        current = np.array([nice[index_of[job_id]] for job_id in ids], dtype=np.int64)
        known = np.array([job_id in memory for job_id in ids], dtype=np.bool_)
        written = exact_written = minimum = exact_minimum = 0
        for positions, exact in pool_positions(plan):
            labels = labels_of("nice", current[positions], offset)
            ours: BoolArray = known[positions]
            minimum += fewest_writes(labels, ours, space.gap)
            exact_minimum += fewest_writes(labels[:exact], ours[:exact], space.gap)
            changed = [values[p] != current[p] or not known[p] for p in positions]
            written += sum(changed)
            exact_written += sum(changed[:exact])
        for p, job_id in enumerate(ids):
            if values[p] is not None and (values[p] != current[p] or job_id not in memory):
                nice[index_of[job_id]] = values[p]
                memory[job_id] = JobMemory(0, values[p], "nice")
        # Factor weighting promises the DRF factor's order, not dominance over the others.
        in_order = _exact_band_in_order(plan, ids, nice, factor * (mapping != "factor"), index_of)
        out.append(Cycle(written, minimum, exact_written, exact_minimum, in_order, engine_s))
        # Slurm starts the head of its own order, as many jobs as ended.
        pending = np.flatnonzero(status == PENDING)
        slurm_priority = factor[pending] - nice[pending]
        status[pending[np.argsort(-slurm_priority, kind="stable")[: len(ending)]]] = RUNNING
        for i in np.flatnonzero(status != PENDING).tolist():
            memory.pop(table.job_id[i], None)
    return out[1:]


def _exact_band_in_order(
    plan: Plan, ids: Sequence[str], nice: IntArray, factor: IntArray, index_of: Mapping[str, int]
) -> bool:
    """Slurm's priorities (factor - nice, any factor) strictly fall along every pool's exact band."""
    for record in plan.orders:
        rows = [index_of[ids[p]] for p in range(record.offset, record.offset + record.exact)]
        worst = factor[rows].max() if rows else 0
        # The plan's order is Slurm's whatever factors the jobs get: the best a
        # job can get must stay below the worst its predecessor can.
        high = worst - nice[rows]
        low = -nice[rows]
        if len(rows) > 1 and not (high[1:] < low[:-1]).all():
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    parser.add_argument("--cycles", type=int, default=8)
    parser.add_argument("--weight-sums", default="0,13000,1410000")
    args = parser.parse_args()
    base = parse_snapshot(build_snapshot(args.pending, args.running, args.accounts, args.nodes, args.seed))
    print(f"{args.pending} pending, {args.running} running, {args.accounts} accounts, {args.nodes} nodes")
    print("1% of running jobs end per cycle; medians over", args.cycles, "cycles after the first")
    header = (
        f"{'weights':>9} {'mapping':>7} {'written':>8} {'min':>7} {'% pend':>7} "
        f"{'exact w':>8} {'exact min':>9} {'in order':>8} {'engine s':>8}"
    )
    print(header)
    for weight_sum in (int(x) for x in args.weight_sums.split(",")):
        for mapping in ("spread", "labels", "factor"):
            cycles = run(base, weight_sum, mapping, args.cycles, args.seed)
            median = statistics.median
            written = median(c.written for c in cycles)
            print(
                f"{weight_sum:>9} {mapping:>7} {written:>8.0f} {median(c.minimum for c in cycles):>7.0f} "
                f"{100 * written / args.pending:>6.1f}% {median(c.exact_written for c in cycles):>8.0f} "
                f"{median(c.exact_minimum for c in cycles):>9.0f} {all(c.exact_in_order for c in cycles)!s:>8} "
                f"{median(c.engine_s for c in cycles):>8.3f}"
            )


if __name__ == "__main__":
    main()
