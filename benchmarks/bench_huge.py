"""Benchmark of huge account trees and configs (issue 40): run by hand, not a test.

    python benchmarks/bench_huge.py [--cases siblings,users,weights] [--size 100000]
        [--weight-keys 40000] [--runs 3] [--baseline CHECKOUT] [--profile CASE] [--check]

Three inputs an administrator with a real site's worst files can hand to
`slurm-drf plan`, written to benchmarks/data/ the first time (one pool of
ten nodes, one pending job of one CPU per leaf, every leaf at share 0):

- siblings: --size accounts under the root, each with one user association;
- users: one account with --size users (one job each), beside a small one;
- weights: a tree of --size accounts (100 divisions under the root, each
  account with a user) and a config whose `accounts:` gives --weight-keys
  of them a weight (every fourth named by path, the rest by name; every
  twentieth with a user's weight too).

Each case runs as a user runs it: `python -m slurm_drf.cli plan --snapshot
FILE --format json [--config FILE]` (no config: /dev/null, the built-in
defaults), a new process, stdout to /dev/null, `.pyc` written (one run of
each command first). With --baseline CHECKOUT (another copy of the code,
e.g. `git archive HEAD | tar -x -C BASE`, BASE an empty directory) the same command runs with
that checkout first on PYTHONPATH, the two taking turns. Prints each
command's median wall and CPU time. --check compares the two JSON plans
byte for byte (needs --baseline). --profile CASE runs `plan` of that case in
this process under cProfile and prints the 30 costliest functions.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent
CASES = ("siblings", "users", "weights")


def _job(number: int, account: str, user: str) -> dict[str, Any]:
    return {
        "job_id": str(number), "account": account, "user": user, "partition": "p", "state": "PENDING",
        "priority": 1000, "nice": 0, "submit_time": "2026-11-30T01:00:00Z", "tres": {"cpu": 1, "mem": 1000},
    }  # fmt: skip


def _snapshot(jobs: list[dict[str, Any]], associations: list[dict[str, Any]]) -> dict[str, Any]:
    nodes = [
        {"name": f"n{i}", "partitions": ["p"], "state": "idle", "tres": {"cpu": 64, "mem": 256000}} for i in range(10)
    ]
    return {
        "format": "slurm-drf-snapshot/1",
        "cluster": "bench",
        "taken_at": "2026-11-30T02:00:00Z",
        "nodes": nodes,
        "jobs": jobs,
        "associations": associations,
    }


def _account(name: str, parent: str) -> dict[str, Any]:
    return {"account": name, "parent": parent, "user": None, "shares": 1}


def _user(account: str, user: str) -> dict[str, Any]:
    return {"account": account, "parent": account, "user": user, "shares": 1}


def siblings(size: int) -> dict[str, Any]:
    """`size` accounts under the root, a user and a job each."""
    associations = [{"account": "root", "parent": None, "user": None, "shares": 1}]
    jobs = []
    for a in range(size):
        name = f"acct{a:06d}"
        associations += [_account(name, "root"), _user(name, f"u{a % 50}")]
        jobs.append(_job(a + 1, name, f"u{a % 50}"))
    return _snapshot(jobs, associations)


def users(size: int) -> dict[str, Any]:
    """One account of `size` users, a job each, beside an account of one user."""
    associations = [{"account": "root", "parent": None, "user": None, "shares": 1}]
    associations += [_account("big", "root"), _account("small", "root"), _user("small", "alice")]
    associations += [_user("big", f"user{u:06d}") for u in range(size)]
    jobs = [_job(u + 1, "big", f"user{u:06d}") for u in range(size)]
    jobs.append(_job(size + 1, "small", "alice"))
    return _snapshot(jobs, associations)


def _division(a: int) -> str:
    return f"d{a % 100}"


def weighted_tree(size: int) -> dict[str, Any]:
    """`size` accounts under 100 divisions, a user and a job each."""
    associations = [{"account": "root", "parent": None, "user": None, "shares": 1}]
    associations += [_account(f"d{d}", "root") for d in range(100)]
    jobs = []
    for a in range(size):
        name = f"a{a}"
        associations += [_account(name, _division(a)), _user(name, f"u{a % 50}")]
        jobs.append(_job(a + 1, name, f"u{a % 50}"))
    return _snapshot(jobs, associations)


def weights_config(size: int, keys: int) -> str:
    """`keys` accounts of `weighted_tree(size)` with weights 1 to 4: every fourth named by its path,
    the others by name, every twentieth with a user's weight too (within the config's 1 MiB)."""
    lines = ["accounts:"]
    step = max(size // max(keys, 1), 1)
    for k in range(min(keys, size)):
        a = k * step
        key = f"{_division(a)}/a{a}" if k % 4 == 0 else f"a{a}"
        users = f", users: {{u{a % 50}: 2}}" if k % 20 == 0 else ""
        lines.append(f"  {key}: {{weight: {1 + k % 4}{users}}}")
    return "\n".join(lines) + "\n"


def ensure_inputs(case: str, size: int, keys: int) -> tuple[Path, Path | None]:
    """The case's snapshot (and config) in benchmarks/data/, written the first time."""
    data = HERE / "data"
    data.mkdir(exist_ok=True)
    snapshot = data / f"huge-{case}-{size}.json"
    if not snapshot.exists():
        build = {"siblings": siblings, "users": users, "weights": weighted_tree}[case]
        snapshot.write_bytes(orjson.dumps(build(size)))
    if case != "weights":
        return snapshot, None
    config = data / f"huge-weights-{size}-{keys}.yaml"
    if not config.exists():
        config.write_text(weights_config(size, keys))
    return snapshot, config


def plan_argv(snapshot: Path, config: Path | None) -> list[str]:
    return [
        sys.executable, "-m", "slurm_drf.cli", "plan", "--snapshot", str(snapshot),
        "--config", str(config or os.devnull), "--format", "json",
    ]  # fmt: skip


def run(argv: list[str], env: dict[str, str], output: Path | None = None) -> tuple[float, float]:
    """Wall and CPU time of one process, stdout to `output` or /dev/null; run in its checkout
    (`python -m` puts the working directory first on the path)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(output or os.devnull, "wb") as stdout:
        subprocess.run(argv, check=True, stdout=stdout, env=env, cwd=env["PYTHONPATH"])
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def environment(path: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    env["PYTHONPATH"] = str(path)
    return env


def profile(case: str, size: int, keys: int) -> None:
    from slurm_drf.cli.main import main

    snapshot, config = ensure_inputs(case, size, keys)
    argv = [str(a) for a in plan_argv(snapshot, config)[3:]]
    profiler = cProfile.Profile()
    stdout = sys.stdout
    sys.stdout = io.TextIOWrapper(open(os.devnull, "wb"))  # noqa: SIM115  (closed below)
    try:
        profiler.runcall(main, argv)
    finally:
        sys.stdout.close()
        sys.stdout = stdout
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated, of " + ", ".join(CASES))
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--weight-keys", type=int, default=40_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline", metavar="CHECKOUT", help="another copy of the code to take turns with")
    parser.add_argument("--check", action="store_true", help="compare the plans of this code and --baseline")
    parser.add_argument("--profile", metavar="CASE", choices=CASES, help="profile this case in this process")
    args = parser.parse_args()
    if args.profile:
        profile(args.profile, args.size, args.weight_keys)
        return
    sides = {"this": environment(CHECKOUT)}
    if args.baseline:
        sides["baseline"] = environment(Path(args.baseline).resolve())
    for case in args.cases.split(","):
        snapshot, config = ensure_inputs(case, size=args.size, keys=args.weight_keys)
        argv = plan_argv(snapshot, config)
        with tempfile.TemporaryDirectory() as directory:  # the plans --check compares (100 MB or more each)
            outputs = {side: Path(directory) / f"{side}.json" for side in sides}
            for side, env in sides.items():  # also writes the .pyc
                run(argv, env, outputs[side] if args.check else None)
            if args.check and args.baseline:
                same = outputs["this"].read_bytes() == outputs["baseline"].read_bytes()
                print(f"{case}: the plans are {'identical' if same else 'DIFFERENT'}")
        times: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
        names = list(sides)
        for round_number in range(max(args.runs, 1)):
            shift = round_number % len(names)
            for side in names[shift:] + names[:shift]:
                times[side].append(run(argv, sides[side]))
        extra = f", config {config.name}" if config else ""
        print(f"{case} (--size {args.size}{extra}), {args.runs} alternating runs, `plan --format json`:")
        for side, values in times.items():
            walls = [w for w, _ in values]
            cpu = statistics.median(c for _, c in values)
            print(f"  {side:9s} wall median {statistics.median(walls):6.2f} s (min {min(walls):.2f}), CPU {cpu:6.2f} s")


if __name__ == "__main__":
    main()
