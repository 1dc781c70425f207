"""Benchmark of the `plan` verb as a whole process (issue 10, item 6): run by hand, not a test.

    python benchmarks/bench_plan_cli.py [--runs 11] [--entry-point PATH | --module]
        [--config FILE] [--baseline PATH] [--pending 100000] [--running 50000]
        [--accounts 2000] [--nodes 500] [--seed 1]

Measures what a new user sees: the wall time of new processes, each run to
the end. Three commands take turns, N runs each (the order rotates every
round so that none always follows the same neighbour):

- `python3 -c 'import json,sys; json.load(open(sys.argv[1]))' FILE`, the
  floor: a process that only reads the snapshot;
- `slurm-drf plan --snapshot FILE --format json > /dev/null`;
- `slurm-drf plan --snapshot FILE > /dev/null` (the table).

`slurm-drf` is the console script installed beside this Python (what `pip
install` gives a user); `--module` runs `python -m slurm_drf.cli` instead.
The environment is this one without $SLURM_DRF_CONFIG, so the plan runs on
the built-in defaults unless /etc/slurm-drf/config.yaml exists (as a user's
would) or `--config FILE` is given. `--baseline PATH` adds the JSON plan
of another slurm-drf console script (an older install, say) to the turns.
The snapshot is bench_engine.py's (benchmarks/data/, written the first
time).

Prints each command's median wall time and the ratios of the medians to the
floor's (the figure the README quotes), the median of the per-round ratios,
median CPU time and the largest child's peak RSS. On a shared machine the
ratios within one run are the figures to trust.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench_engine import ensure_snapshot

LOAD_ONLY = "import json,sys; json.load(open(sys.argv[1]))"


@dataclass
class Command:
    name: str
    argv: list[str]
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def run_once(command: Command, env: dict[str, str]) -> None:
    """One run of the command, stdout to /dev/null; its wall and CPU time appended."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command.argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    command.wall.append(time.perf_counter() - start)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    command.cpu.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))


def plan_command(args: argparse.Namespace) -> list[str]:
    """How `slurm-drf` is started: the console script, or `python -m slurm_drf.cli`."""
    if args.module:
        return [sys.executable, "-m", "slurm_drf.cli"]
    script = Path(args.entry_point) if args.entry_point else Path(sys.executable).parent / "slurm-drf"
    if not script.exists():
        raise SystemExit(f"{script}: no slurm-drf console script; install the package (pip install .) or use --module")
    return [str(script)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=11, help="runs of each command (default 11)")
    parser.add_argument("--entry-point", metavar="PATH", help="the slurm-drf console script (default: beside python)")
    parser.add_argument("--module", action="store_true", help="run python -m slurm_drf.cli instead of the script")
    parser.add_argument("--config", metavar="FILE", help="pass --config FILE to the plan commands")
    parser.add_argument("--baseline", metavar="PATH", help="another slurm-drf console script to compare with")
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--running", type=int, default=50_000)
    parser.add_argument("--accounts", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    path = str(ensure_snapshot(args.pending, args.running, args.accounts, args.nodes, args.seed))
    env = {key: value for key, value in os.environ.items() if key != "SLURM_DRF_CONFIG"}
    plan = [*plan_command(args), "plan", "--snapshot", path, *(["--config", args.config] if args.config else [])]
    floor = Command("json.load only", [sys.executable, "-c", LOAD_ONLY, path])
    commands = [floor, Command("plan --format json", [*plan, "--format", "json"]), Command("plan (table)", plan)]
    if args.baseline:
        commands.append(
            Command("baseline, json", [args.baseline, *plan[len(plan_command(args)) :], "--format", "json"])
        )

    print(f"snapshot: {Path(path).name}, {Path(path).stat().st_size / 1e6:.1f} MB")
    if not args.config and os.path.exists("/etc/slurm-drf/config.yaml"):
        print("note: /etc/slurm-drf/config.yaml exists; the plan commands read it")
    for command in commands:
        print(f"  {command.name}: {shlex.join(command.argv)} > /dev/null")
    for command in commands:  # a first run of each, not counted: the file in the page cache, .pyc written
        run_once(command, env)
        command.wall.clear()
        command.cpu.clear()
    for round_number in range(args.runs):
        shift = round_number % len(commands)
        for command in commands[shift:] + commands[:shift]:
            run_once(command, env)

    base = statistics.median(floor.wall)
    print(f"{args.runs} alternating runs each; median wall time, ratio to the floor's median:")
    for command in commands:
        wall = statistics.median(command.wall)
        paired = statistics.median(w / b for w, b in zip(command.wall, floor.wall, strict=True))
        print(
            f"  {command.name:20s} {wall:6.3f} s  ratio {wall / base:4.2f}  "
            f"(median of per-round ratios {paired:4.2f}; CPU {statistics.median(command.cpu):6.3f} s; "
            f"wall min {min(command.wall):.3f} max {max(command.wall):.3f})"
        )
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS of the largest child: {child:.0f} MiB (target <= 1024)")


if __name__ == "__main__":
    main()
