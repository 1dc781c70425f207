"""The daemon's memory of written jobs at 100,000 jobs (issue 24, item 2): run by hand, not a test.

    python benchmarks/bench_memory.py [--rounds 9] [--pending 100000] [--running 50000]
        [--accounts 2000] [--nodes 500] [--seed 1]

The synthetic snapshot of bench_engine.py is planned once in nice mode,
and every pending job is given the value that plan chose, as if the daemon
had written them all: the state then remembers 100,000 written jobs (own
nice 0, the value written, nice mode), and Slurm shows each its value. In
one process, taking turns round after round, each on a new copy of its
snapshot (nothing derived from the table kept from an earlier run), it measures:

- the plan without memory (`compute_plan` of the first snapshot, empty state);
- the plan with the memory (`compute_plan` of the written snapshot and its state);
- the recall of that state against the snapshot (`Recall.reconcile`, no ledger), and the
  recall followed by the plan of what it gives (what a cycle does);
- `StateStore.save` and `StateStore.load` of that state (state.json of 100,000 jobs).

Prints the median of each and the median of the per-round ratios of the
plan with memory to the plan without (the figure the target is against).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from collections.abc import Callable
from types import MappingProxyType

import numpy as np
from bench_engine import RESOURCES, add_cluster_arguments, build_snapshot

from slurm_drf.config.settings import Config
from slurm_drf.cycle.recall import Recall
from slurm_drf.cycle.store import StateStore
from slurm_drf.model.codec import parse_snapshot
from slurm_drf.model.types import Snapshot
from slurm_drf.policy.ownership import JobMemory
from slurm_drf.policy.plan import compute_plan
from slurm_drf.policy.state import EMPTY_STATE, PolicyState


def written_snapshot(snapshot: Snapshot, config: Config) -> tuple[Snapshot, PolicyState]:
    """The snapshot with every planned job holding the value planned for it, and the state that remembers it."""
    plan = compute_plan(snapshot, config, EMPTY_STATE)
    values = {job_id: value for job_id, value in zip(plan.column("job_id"), plan.column("value"), strict=True)}
    table = snapshot.table
    nice = np.array([values.get(job_id, n) for job_id, n in zip(table.job_id, table.nice.tolist(), strict=True)])
    written = dataclasses.replace(table, nice=nice.astype(np.int64))
    memory = {job_id: JobMemory(0, value, "nice") for job_id, value in values.items() if value is not None}
    state = dataclasses.replace(plan.state, jobs=MappingProxyType(memory))
    return (
        Snapshot.from_table(written, cluster=snapshot.cluster, taken_at=snapshot.taken_at, nodes=snapshot.nodes),
        state,
    )


def fresh(snapshot: Snapshot) -> Snapshot:
    """The same snapshot with nothing derived from its table yet (as each cycle's new one)."""
    table = dataclasses.replace(snapshot.table)
    return Snapshot.from_table(table, cluster=snapshot.cluster, taken_at=snapshot.taken_at, nodes=snapshot.nodes)


def timed(func: Callable[[Snapshot], object], snapshot: Snapshot) -> float:
    """Wall time of `func` on a fresh copy of `snapshot` (the copy is not timed)."""
    copy = fresh(snapshot)
    start = time.perf_counter()
    func(copy)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    snapshot = parse_snapshot(build_snapshot(args.pending, args.running, args.accounts, args.nodes, args.seed))
    config = Config(resources=RESOURCES, partitions=("gpu", "cpu"))
    written, state = written_snapshot(snapshot, config)
    print(f"{args.pending} pending, {args.running} running; memory of {len(state.jobs)} written jobs")
    with tempfile.TemporaryDirectory() as directory:
        store = StateStore(directory)
        store.save(state)
        size = store.path.stat().st_size
        assert store.load().jobs == state.jobs, "state.json does not read back as saved"
        assert Recall(None).reconcile(written, state)[0].jobs == state.jobs, "the recall changed a written job"
        steps: dict[str, tuple[Callable[[Snapshot], object], Snapshot]] = {
            "plan without memory": (lambda s: compute_plan(s, config, EMPTY_STATE), snapshot),
            "plan with memory": (lambda s: compute_plan(s, config, state), written),
            "recall (no ledger)": (lambda s: Recall(None).reconcile(s, state), written),
            "recall, then plan": (lambda s: compute_plan(s, config, Recall(None).reconcile(s, state)[0]), written),
            "state.json save": (lambda s: store.save(state), written),
            "state.json load": (lambda s: store.load(), written),
        }
        times: dict[str, list[float]] = {name: [] for name in steps}
        names = list(steps)
        for round_ in range(args.rounds):
            # Alternate the order, so that neither plan always follows the other.
            for name in names if round_ % 2 == 0 else reversed(names):
                times[name].append(timed(*steps[name]))
    median = statistics.median
    for name, values in times.items():
        print(f"{name:<22} {median(values):8.3f} s   (min {min(values):.3f}, max {max(values):.3f})")
    ratios = [a / b for a, b in zip(times["plan with memory"], times["plan without memory"], strict=True)]
    print(f"plan with / without memory, median of {args.rounds} rounds: {median(ratios):.2f}x")
    print(f"state.json: {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
