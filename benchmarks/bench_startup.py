"""Benchmark of how fast verbs start (issue 40): run by hand, not a test.

    python benchmarks/bench_startup.py [--runs 11] [--config FILE] [--baseline CHECKOUT]

The wall time of new processes, as a user runs them, taking turns (the
order rotates every round), --runs of each; `.pyc` written (one run of
each first, without PYTHONDONTWRITEBYTECODE, as an installed package has
them):

- `python3 -c pass`, the floor: the interpreter alone;
- `python -m slurm_drf.cli --help`;
- `python -m slurm_drf.cli check-config FILE` (slurm_drf/data/config.yaml
  by default; it also runs `scontrol show config`, which fails at once
  where there is no Slurm).

Each runs in its checkout with the checkout on PYTHONPATH (`python -m`
puts the working directory first); --baseline CHECKOUT (another copy of
the code, e.g. `git archive HEAD | tar -x -C BASE`, BASE an empty directory) takes turns with
this one. Prints the median and the spread of each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent


def wall(argv: list[str], cwd: Path) -> float:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    env["PYTHONPATH"] = str(cwd)
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--config", default=str(CHECKOUT / "slurm_drf" / "data" / "config.yaml"))
    parser.add_argument("--baseline", metavar="CHECKOUT", help="another copy of the code to take turns with")
    args = parser.parse_args()
    config = str(Path(args.config).resolve())
    sides = {"this": CHECKOUT} | ({"baseline": Path(args.baseline).resolve()} if args.baseline else {})
    cli = [sys.executable, "-m", "slurm_drf.cli"]
    commands = [("python -c pass", [sys.executable, "-c", "pass"], CHECKOUT)]
    for side, path in sides.items():
        commands += [
            (f"{side}: --help", [*cli, "--help"], path),
            (f"{side}: check-config", [*cli, "check-config", config], path),
        ]
    for _, argv, cwd in commands:  # the .pyc written
        wall(argv, cwd)
    times: dict[str, list[float]] = {name: [] for name, _, _ in commands}
    for round_number in range(max(args.runs, 1)):
        shift = round_number % len(commands)
        for name, argv, cwd in commands[shift:] + commands[:shift]:
            times[name].append(wall(argv, cwd))
    print(f"{args.runs} alternating runs each, wall time of the whole process:")
    for name, values in times.items():
        print(f"  {name:22s} median {statistics.median(values):.3f} s (min {min(values):.3f}, max {max(values):.3f})")


if __name__ == "__main__":
    main()
