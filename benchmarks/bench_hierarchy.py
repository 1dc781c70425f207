"""Benchmark of the H-DRF order (issue 12): run by hand, not a test.

    python benchmarks/bench_hierarchy.py [--pending 100000] [--running 50000]
        [--fanout 4,5,10,10] [--nodes 500] [--seed 1] [--rounds 3] [--profile]

Builds a synthetic tree (root, then one level per --fanout entry: 4 x 5 x
10 x 10 = 2,000 leaves on 5 levels), spreads running and pending jobs over
the leaves (Zipf-like popularity, GPU, memory-heavy and CPU jobs like
bench_engine.py; running jobs start while they fit), and times in one process, alternating, `order_hierarchy`
on the tree and on the flat tree of the same leaves as accounts (which is
today's engine, `order_pending`). Prints each side's median and the median
of the per-round ratios (the figure the issue's target, <= 2x, is about).
--profile prints where the hierarchical engine spends its time.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from collections.abc import Sequence

import numpy as np

from slurm_drf.policy.hierarchy import TreeNode, order_hierarchy


def build_leaves(
    leaves: int, pending: int, running: int, capacity: Sequence[int], seed: int
) -> list[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]]:
    """(usage, jobs) per leaf over (cpu, mem, gres/gpu).

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
    return [(tuple(usage[i]), tuple(jobs[i])) for i in range(leaves)]


def build_tree(fanout: Sequence[int], data: list[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]]) -> TreeNode:
    feed = iter(data)

    def node(name: str, level: int) -> TreeNode:
        if level == len(fanout):
            usage, jobs = next(feed)
            return TreeNode(name, usage=usage, jobs=jobs)
        return TreeNode(name, children=tuple(node(f"{name[:1]}{level}_{i}", level + 1) for i in range(fanout[level])))

    return TreeNode("root", children=tuple(node(f"d{i}", 1) for i in range(fanout[0])))


def flat_tree(data: list[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]]) -> TreeNode:
    return TreeNode(
        "root", children=tuple(TreeNode(f"leaf{i}", usage=usage, jobs=jobs) for i, (usage, jobs) in enumerate(data))
    )


def run(tree: TreeNode, capacity: Sequence[int]) -> float:
    start = time.perf_counter()
    order_hierarchy(tree, capacity, 1, {}, {})
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--running", type=int, default=50_000)
    parser.add_argument("--fanout", default="4,5,10,10")
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    fanout = [int(x) for x in args.fanout.split(",")]
    leaves = int(np.prod(fanout))
    capacity = (128 * args.nodes, 1_024_000 * args.nodes, 8 * (args.nodes // 4))
    data = build_leaves(leaves, args.pending, args.running, capacity, args.seed)
    tree, flat = build_tree(fanout, data), flat_tree(data)
    running = sum(1 for usage, _ in data if any(usage))
    pending = sum(len(jobs) for _, jobs in data)
    print(f"{pending} pending, running jobs on {running} leaves, {leaves} leaves on {len(fanout) + 1} levels")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(order_hierarchy, tree, capacity, 1, {}, {})
        pstats.Stats(profile).sort_stats("tottime").print_stats(12)
        return
    flat_s: list[float] = []
    tree_s: list[float] = []
    for _ in range(max(args.rounds, 1)):
        flat_s.append(run(flat, capacity))
        tree_s.append(run(tree, capacity))
    ratios = [t / f for t, f in zip(tree_s, flat_s, strict=True)]
    print(f"flat engine (order_pending):  median {statistics.median(flat_s):8.3f} s over {len(flat_s)} runs")
    print(f"H-DRF engine (nested heaps):  median {statistics.median(tree_s):8.3f} s")
    print(f"ratio H-DRF / flat: median of rounds {statistics.median(ratios):.1f}x (target <= 2x)")


if __name__ == "__main__":
    main()
