"""This checkout against an earlier one, in one run (issue 36): run by hand, not a test.

    python benchmarks/bench_against.py --old DIR [--rounds 7] [--only NAME,...]

DIR is a checkout of the earlier commit (`git worktree add --detach DIR REV`).
Each case is a whole `python -m slurm_drf.cli ...` process, as a user runs
it, with PYTHONPATH set to one checkout or the other; the two take turns
(old, new, then new, old) so a loaded machine weighs on both alike, after
one run of each that is not counted. Printed per case: the median wall time
of each, the median of the per-round ratios new / old (the figure to trust
on a shared machine), and whether the two printed the same bytes (the
simulator's run-time column aside).

The cases are the README's figures that the policy's code decides:
`plan --format json` over the engine benchmark's snapshot (100,000 pending,
50,000 running, 2,000 accounts; bench_engine.py) and over an account tree
with 1-8 users per account (bench_hierarchy.py --cli's), `simulate` on its
default scenario, `simulate --scenario tree` and `--scenario tie` (where
ties are the rule), each with named policies through the plan's engine
(`--engine plan`), so both sides do the same work.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench_engine import ensure_snapshot
from bench_hierarchy import tree_snapshot, tree_snapshot_path

HERE = Path(__file__).resolve().parent
NEW = HERE.parent


@dataclass
class Case:
    name: str
    argv: list[str]
    wall: dict[str, list[float]] = field(default_factory=lambda: {"old": [], "new": []})
    digest: dict[str, str] = field(default_factory=dict)


def tree_files(folder: Path) -> tuple[Path, Path]:
    """bench_hierarchy --cli's tree snapshot (1-8 users per account) and a config ordering over the tree."""
    shape = argparse.Namespace(pending=100_000, running=50_000, nodes=500, seed=1, users="1-8", fanout="4,5,10,10")
    path = tree_snapshot_path(shape)
    if not path.exists():
        path.write_text(json.dumps(tree_snapshot(shape, (4, 5, 10, 10))))
    # The shipped config's tree settings in keys every release reads (the shipped file
    # itself renames keys over time, which an older checkout refuses).
    config = folder / "tree.yaml"
    config.write_text("hierarchy: tree\nresources: [cpu, mem, gres/gpu]\n")
    config.chmod(0o600)
    return path, config


def cases(folder: Path) -> list[Case]:
    flat = ensure_snapshot(100_000, 50_000, 2000, 500, 1)
    tree, config = tree_files(folder)
    cli = [sys.executable, "-m", "slurm_drf.cli"]
    return [
        Case("plan-flat", [*cli, "plan", "--snapshot", str(flat), "--format", "json"]),
        Case("plan-tree", [*cli, "plan", "--snapshot", str(tree), "--format", "json", "--config", str(config)]),
        # The same policies through the plan's own engine: a release's default policies and
        # engine for a scenario may change, and the comparison would no longer be like with like.
        Case("simulate", [*cli, "simulate", "--policies", "fifo,multifactor,drf,drf-labels", "--engine", "plan"]),
        Case("simulate-tree", [*cli, "simulate", "--scenario", "tree", "--policies", "drf,hdrf", "--engine", "plan"]),
        # Where ties are the rule: every account's jobs alike (the tie rule's takers, flat and tree).
        Case("simulate-tie", [*cli, "simulate", "--scenario", "tie", "--policies", "drf,hdrf", "--engine", "plan"]),
    ]


def run(case: Case, side: str, checkout: Path, cwd: Path, counted: bool) -> None:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    start = time.perf_counter()
    done = subprocess.run(case.argv, check=True, capture_output=True, env=env, cwd=cwd)
    wall = time.perf_counter() - start
    if counted:
        case.wall[side].append(wall)
    # The simulator's table ends each row with its own run time: the rest must be the same.
    printed = re.sub(rb" +[0-9.]+s$", b"", done.stdout, flags=re.MULTILINE)
    case.digest[side] = hashlib.sha256(printed).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="a checkout of the earlier commit")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", help="comma-separated case names")
    args = parser.parse_args()
    sides = {"old": args.old.resolve(), "new": NEW}
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        chosen = [c for c in cases(folder) if not args.only or c.name in args.only.split(",")]
        for case in chosen:
            for side, checkout in sides.items():  # not counted: .pyc written, files in the page cache
                run(case, side, checkout, folder, counted=False)
        for round_number in range(max(args.rounds, 1)):
            order = ("old", "new") if round_number % 2 == 0 else ("new", "old")
            for case in chosen:
                for side in order:
                    run(case, side, sides[side], folder, counted=True)
    print(f"{args.rounds} rounds, alternating; old = {sides['old'].name}, new = this checkout")
    for case in chosen:
        old, new = case.wall["old"], case.wall["new"]
        ratio = statistics.median(n / o for n, o in zip(new, old, strict=True))
        same = "same output" if case.digest["old"] == case.digest["new"] else "OUTPUT DIFFERS"
        print(
            f"{case.name:14s} old {statistics.median(old):7.3f} s  new {statistics.median(new):7.3f} s"
            f"  new/old {ratio:5.2f}x  {same}"
        )


if __name__ == "__main__":
    main()
