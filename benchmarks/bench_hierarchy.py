"""Benchmark of the H-DRF order (issue 12): run by hand, not a test.

    python benchmarks/bench_hierarchy.py [--pending 100000] [--running 50000]
        [--fanout 4,5,10,10] [--nodes 500] [--seed 1] [--rounds 5] [--paper | --plan] [--profile]

Builds a synthetic tree (root, then one level per --fanout entry: 4 x 5 x
10 x 10 = 2,000 leaves on 5 levels), spreads running and pending jobs over
the leaves (Zipf-like popularity, GPU, memory-heavy and CPU jobs like
bench_engine.py; running jobs start while they fit), and times in one
process, alternating, each from the same Python tuples to the order:

- tree: `order_online` on the tree, the plan's H-DRF (the merge engine);
- flat: `order_online` on the flat tree of the same leaves as accounts,
  which is today's flat engine (`order_pending`) behind the same checks;
- arrays: today's flat engine alone, `compute_before` and `order_pending`
  on numpy arrays as the plan calls it (the arrays built outside the timing);
- with --paper, `order_hierarchy` (the nested heaps, the paper's rule with
  saturation) on the tree.

With --plan it times whole plans instead: `compute_plan` on bench_engine.py's
synthetic snapshot (--pending, --running, 2,000 accounts, --nodes; two
pools) with an association tree laid over its accounts by --fanout, with
`hierarchy: tree` (the default) against `hierarchy: flat`, alternating.

Prints each side's median and the medians of the per-round ratios (the
figure the issue's target, <= 2x, is about). --profile prints where the
merge engine spends its time.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import pstats
import statistics
import time
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np
from bench_engine import build_snapshot

from slurm_drf.config.settings import Config
from slurm_drf.model.codec import parse_snapshot
from slurm_drf.model.types import Association, IntArray
from slurm_drf.policy.hierarchy import TreeNode, order_hierarchy
from slurm_drf.policy.hierarchy_online import order_online
from slurm_drf.policy.order import compute_before, order_pending
from slurm_drf.policy.plan import compute_plan

Leaf = tuple[tuple[int, ...], IntArray]


def build_leaves(leaves: int, pending: int, running: int, capacity: Sequence[int], seed: int) -> list[Leaf]:
    """(usage, jobs) per leaf over (cpu, mem, gres/gpu), the jobs as one integer array as the plan passes them.

    Up to `running` jobs start while they fit in `capacity` (so the pool is
    nearly full, as on a busy cluster, and saturation is reached early in the
    order); the next `pending` jobs are pending.
    """
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, leaves + 1) ** 0.8
    popularity /= popularity.sum()
    total = pending + 2 * running
    owner = rng.permutation(leaves)[rng.choice(leaves, size=total, p=popularity)]
    kind = rng.integers(0, 3, size=total)
    cpus = rng.integers(1, 33, size=total)
    gpus = np.where(kind == 0, rng.integers(1, 9, size=total), 0)
    mem = np.where(kind == 1, rng.integers(32_000, 512_000, size=total), cpus * 4000)
    demand = np.stack([cpus, mem, gpus], axis=1).tolist()
    usage = [[0, 0, 0] for _ in range(leaves)]
    free = list(capacity)
    jobs: list[list[tuple[int, ...]]] = [[] for _ in range(leaves)]
    started = 0
    for leaf, row in zip(owner.tolist(), demand, strict=True):
        if started < running and all(d <= f for d, f in zip(row, free, strict=True)):
            free = [f - d for f, d in zip(free, row, strict=True)]
            usage[leaf] = [u + d for u, d in zip(usage[leaf], row, strict=True)]
            started += 1
        elif sum(map(len, jobs)) < pending:
            jobs[leaf].append(tuple(row))
    return [(tuple(usage[i]), np.array(jobs[i], dtype=np.int64).reshape(len(jobs[i]), 3)) for i in range(leaves)]


def build_tree(fanout: Sequence[int], data: list[Leaf]) -> TreeNode:
    feed = iter(data)

    def node(name: str, level: int) -> TreeNode:
        if level == len(fanout):
            usage, jobs = next(feed)
            return TreeNode(name, usage=usage, jobs=jobs)
        return TreeNode(name, children=tuple(node(f"{name[:1]}{level}_{i}", level + 1) for i in range(fanout[level])))

    return TreeNode("root", children=tuple(node(f"d{i}", 1) for i in range(fanout[0])))


def flat_tree(data: list[Leaf]) -> TreeNode:
    return TreeNode(
        "root", children=tuple(TreeNode(f"leaf{i}", usage=usage, jobs=jobs) for i, (usage, jobs) in enumerate(data))
    )


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def flat_arrays(data: list[Leaf], capacity: Sequence[int]) -> Callable[[], object]:
    """Today's flat engine as the plan calls it, on arrays built here (outside the timing)."""
    account_of = np.repeat(np.arange(len(data), dtype=np.int64), [len(jobs) for _, jobs in data])
    demand = np.concatenate([jobs for _, jobs in data])
    usage = np.array([u for u, _ in data], dtype=np.int64)
    caps = np.array(capacity, dtype=np.int64)
    weights = [Fraction(1)] * len(data)
    names = [f"leaf{i}" for i in range(len(data))]

    def call() -> object:
        before = compute_before(demand, account_of, usage)
        return order_pending(before, account_of, caps, weights, names, 1, {}, {})

    return call


def associations(fanout: Sequence[int], accounts: int) -> tuple[Association, ...]:
    """bench_engine.py's accounts (acct0000...) as the leaves of a tree of `fanout`, in order, with their users."""
    out = [Association("root", None, None, 1)]
    parents = ["root"]
    for level, count in enumerate(fanout[:-1]):
        below = [f"l{level}_{i}" for i in range(len(parents) * count)]
        out += [Association(name, parents[i // count], None, 1) for i, name in enumerate(below)]
        parents = below
    for i in range(accounts):
        name = f"acct{i:04d}"
        out += [Association(name, parents[i * len(parents) // accounts], None, 1)]
        out += [Association(name, name, f"user{i % 500}", 1)]
    return tuple(out)


def plans(args: argparse.Namespace, fanout: Sequence[int]) -> None:
    accounts = int(np.prod(fanout))
    snap = parse_snapshot(build_snapshot(args.pending, args.running, accounts, args.nodes, args.seed))
    snap = dataclasses.replace(snap, associations=associations(fanout, accounts))
    tree = Config(resources=("cpu", "mem", "gres/gpu"), partitions=("gpu", "cpu"))
    flat = dataclasses.replace(tree, hierarchy="flat")
    times: dict[str, list[float]] = {"tree": [], "flat": []}
    for _ in range(max(args.rounds, 1)):
        times["tree"].append(timed(lambda: compute_plan(snap, tree)))
        times["flat"].append(timed(lambda: compute_plan(snap, flat)))
    print(f"{args.pending} pending, {args.running} running, {accounts} accounts on {len(fanout) + 1} levels, two pools")
    for name, values in times.items():
        print(f"compute_plan, hierarchy: {name:5s} median {statistics.median(values):8.3f} s over {len(values)} rounds")
    ratios = [t / f for t, f in zip(times["tree"], times["flat"], strict=True)]
    print(f"ratio tree / flat: median of rounds {statistics.median(ratios):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--running", type=int, default=50_000)
    parser.add_argument("--fanout", default="4,5,10,10")
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--paper", action="store_true")
    parser.add_argument("--plan", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    fanout = [int(x) for x in args.fanout.split(",")]
    if args.plan:
        plans(args, fanout)
        return
    leaves = int(np.prod(fanout))
    capacity = (128 * args.nodes, 1_024_000 * args.nodes, 8 * (args.nodes // 4))
    data = build_leaves(leaves, args.pending, args.running, capacity, args.seed)
    tree, flat = build_tree(fanout, data), flat_tree(data)
    running = sum(1 for usage, _ in data if any(usage))
    pending = sum(len(jobs) for _, jobs in data)
    print(f"{pending} pending, running jobs on {running} leaves, {leaves} leaves on {len(fanout) + 1} levels")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(order_online, tree, capacity, 1, {}, {})
        pstats.Stats(profile).sort_stats("tottime").print_stats(12)
        return
    sides: dict[str, Callable[[], object]] = {
        "tree": lambda: order_online(tree, capacity, 1, {}, {}),
        "flat": lambda: order_online(flat, capacity, 1, {}, {}),
        "arrays": flat_arrays(data, capacity),
    }
    if args.paper:
        sides["paper"] = lambda: order_hierarchy(tree, capacity, 1, {}, {})
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(max(args.rounds, 1)):
        for name, call in sides.items():
            times[name].append(timed(call))
    labels = {
        "tree": "H-DRF, order_online (merge engine)",
        "flat": "flat, order_online on the flat tree",
        "arrays": "flat, order_pending on arrays",
        "paper": "paper's rule, nested heaps",
    }
    for name, values in times.items():
        print(f"{labels[name]:38s} median {statistics.median(values):8.3f} s over {len(values)} rounds")
    for base in ("flat", "arrays"):
        ratios = [t / f for t, f in zip(times["tree"], times[base], strict=True)]
        print(f"ratio H-DRF / {base}: median of rounds {statistics.median(ratios):.2f}x (target <= 2x)")


if __name__ == "__main__":
    main()
