"""Benchmark of the H-DRF order (issue 12): run by hand, not a test.

    python benchmarks/bench_hierarchy.py [--pending 100000] [--running 50000]
        [--fanout 4,5,10,10] [--nodes 500] [--seed 1] [--rounds 5] [--paper | --plan | --cli]
        [--users N | LOW-HIGH] [--profile]

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
Each account has one user (bench_engine.py's) unless --users gives each
account N users, or LOW to HIGH (drawn per account), as user associations:
its jobs are spread evenly over them, so the users are the tree's leaves.
The issue's two cases (issue 24, item 3) are 3 levels below the root
(20 divisions, 2,000 accounts, their users): `--fanout 20,100 --users 1-8`
(realistic) and `--fanout 20,100 --users 70` (heavy).

With --cli it times whole processes instead, as a user runs them, on that
snapshot written to benchmarks/data/: `python -m slurm_drf.cli plan
--snapshot FILE --format json --config slurm_drf/data/config.yaml` (the
daemon's config, `hierarchy: tree`) against the same config with
`hierarchy: flat`, alternating; stdout to /dev/null.

Prints each side's median and the medians of the per-round ratios (the
figure the issue's target, <= 2x, is about). --profile prints where the
merge engine spends its time (with --plan: where `compute_plan` over the
tree does).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import functools
import json
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from bench_engine import HERE, build_snapshot

from slurm_drf.config.settings import Config
from slurm_drf.model.codec import parse_snapshot, render_association
from slurm_drf.model.types import Association, IntArray
from slurm_drf.policy.engine.hierarchy import TreeNode
from slurm_drf.policy.engine.merge_engine import order_online
from slurm_drf.policy.engine.order import compute_before, order_pending
from slurm_drf.policy.plan import compute_plan
from slurm_drf.policy.state import TieBook
from tests.reference.nested_heaps import order_hierarchy  # bench_engine puts the checkout on sys.path

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
        return order_pending(before, account_of, caps, weights, names, TieBook(1))

    return call


def user_counts(spec: str, accounts: int, seed: int) -> list[int]:
    """Users per account from --users: N for every account, or LOW-HIGH drawn per account."""
    low, _, high = spec.partition("-")
    if not high:
        return [int(low)] * accounts
    counts: list[int] = np.random.default_rng(seed + 1).integers(int(low), int(high) + 1, size=accounts).tolist()
    return counts


def associations(fanout: Sequence[int], accounts: int, users: Sequence[int] | None = None) -> tuple[Association, ...]:
    """bench_engine.py's accounts (acct0000...) as the leaves of a tree of `fanout`, in order, with their users.

    Without `users` each account has bench_engine.py's one user; with it,
    account i has users[i] users of its own (`acct0000-u0`, ...).
    """
    out = [Association("root", None, None, 1)]
    parents = ["root"]
    for level, count in enumerate(fanout[:-1]):
        below = [f"l{level}_{i}" for i in range(len(parents) * count)]
        out += [Association(name, parents[i // count], None, 1) for i, name in enumerate(below)]
        parents = below
    for i in range(accounts):
        name = f"acct{i:04d}"
        out += [Association(name, parents[i * len(parents) // accounts], None, 1)]
        own = [f"user{i % 500}"] if users is None else [f"{name}-u{k}" for k in range(users[i])]
        out += [Association(name, name, user, 1) for user in own]
    return tuple(out)


def tree_snapshot(args: argparse.Namespace, fanout: Sequence[int]) -> dict[str, Any]:
    """bench_engine.py's snapshot with the tree's associations; with --users, each job given a user of its account."""
    accounts = int(np.prod(fanout))
    raw = build_snapshot(args.pending, args.running, accounts, args.nodes, args.seed)
    users = user_counts(args.users, accounts, args.seed) if args.users else None
    if users is not None:
        jobs: list[dict[str, Any]] = raw["jobs"]  # type: ignore[assignment]
        seen = [0] * accounts
        for job in jobs:  # each account's jobs dealt to its users in turn
            code = int(job["account"][4:])
            job["user"] = f"{job['account']}-u{seen[code] % users[code]}"
            seen[code] += 1
    raw["associations"] = [render_association(a) for a in associations(fanout, accounts, users)]
    return raw


def plans(args: argparse.Namespace, fanout: Sequence[int]) -> None:
    snap = parse_snapshot(tree_snapshot(args, fanout))
    tree = Config(resources=("cpu", "mem", "gres/gpu"), partitions=("gpu", "cpu"))
    flat = dataclasses.replace(tree, hierarchy="flat")
    print(describe(args, fanout, len(snap.associations)))
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(compute_plan, snap, tree)
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        return
    times: dict[str, list[float]] = {"tree": [], "flat": []}
    for _ in range(max(args.rounds, 1)):
        times["tree"].append(timed(lambda: compute_plan(snap, tree)))
        times["flat"].append(timed(lambda: compute_plan(snap, flat)))
    report(times, "compute_plan, hierarchy:")


def describe(args: argparse.Namespace, fanout: Sequence[int], associations: int) -> str:
    users = f"{args.users} users per account" if args.users else "one user per account"
    accounts = int(np.prod(fanout))
    return (
        f"{args.pending} pending, {args.running} running, {accounts} accounts under {'x'.join(map(str, fanout[:-1]))}"
        f" ({users}, {associations} associations), two pools"
    )


def report(times: dict[str, list[float]], label: str) -> None:
    for name, values in times.items():
        print(f"{label} {name:5s} median {statistics.median(values):8.3f} s over {len(values)} rounds")
    ratios = [t / f for t, f in zip(times["tree"], times["flat"], strict=True)]
    print(f"ratio tree / flat: median of rounds {statistics.median(ratios):.2f}x")


def tree_snapshot_path(args: argparse.Namespace) -> Path:
    """Where `tree_snapshot`'s file for these arguments is kept in benchmarks/data/ (made here)."""
    (HERE / "data").mkdir(exist_ok=True)
    name = f"tree-{args.pending}-{args.running}-{args.fanout.replace(',', 'x')}-{args.users or 1}-{args.seed}.json"
    return HERE / "data" / name


def processes(args: argparse.Namespace, fanout: Sequence[int]) -> None:
    """Whole `plan --format json` processes over the tree and flat, alternating (--cli)."""
    raw = tree_snapshot(args, fanout)
    path = tree_snapshot_path(args)
    if not path.exists():
        path.write_text(json.dumps(raw))
    print(describe(args, fanout, len(raw["associations"])))
    config = (HERE.parent / "slurm_drf" / "data" / "config.yaml").read_text()
    with tempfile.TemporaryDirectory() as folder:
        argv: dict[str, list[str]] = {}
        for hierarchy in ("tree", "flat"):
            file = Path(folder) / f"{hierarchy}.yaml"
            file.write_text(config.replace("hierarchy: tree", f"hierarchy: {hierarchy}"))
            file.chmod(0o600)
            argv[hierarchy] = [sys.executable, "-m", "slurm_drf.cli", "plan", "--snapshot", str(path)]
            argv[hierarchy] += ["--format", "json", "--config", str(file)]
        print(f"  {' '.join(argv['tree'][1:])} > /dev/null, against hierarchy: flat")
        times: dict[str, list[float]] = {"tree": [], "flat": []}
        for hierarchy in argv:  # a first run of each, not counted (.pyc written, the file in the page cache)
            subprocess.run(argv[hierarchy], check=True, stdout=subprocess.DEVNULL)
        for round_number in range(max(args.rounds, 1)):
            for hierarchy in ("tree", "flat") if round_number % 2 == 0 else ("flat", "tree"):
                times[hierarchy].append(
                    timed(functools.partial(subprocess.run, argv[hierarchy], check=True, stdout=subprocess.DEVNULL))
                )
    report(times, "plan --format json, hierarchy:")


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
    parser.add_argument("--cli", action="store_true")
    parser.add_argument("--users", metavar="N|LOW-HIGH", help="users per account (--plan, --cli)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    fanout = [int(x) for x in args.fanout.split(",")]
    if args.plan:
        plans(args, fanout)
        return
    if args.cli:
        processes(args, fanout)
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
        profile.runcall(order_online, tree, capacity, TieBook(1))
        pstats.Stats(profile).sort_stats("tottime").print_stats(12)
        return
    sides: dict[str, Callable[[], object]] = {
        "tree": lambda: order_online(tree, capacity, TieBook(1)),
        "flat": lambda: order_online(flat, capacity, TieBook(1)),
        "arrays": flat_arrays(data, capacity),
    }
    if args.paper:
        sides["paper"] = lambda: order_hierarchy(tree, capacity, TieBook(1))
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
