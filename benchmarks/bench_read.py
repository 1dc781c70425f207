"""Reading a big queue offline (issue 24): what each backend adds to the bare read.

    PYTHONPATH=. python3 benchmarks/bench_read.py [--pending 50000] [--running 5000] [--rounds 5] [--profile]

A queue of PENDING and RUNNING jobs made from the Slurm 22.05 fixture's
records (tests/fixtures/slurm-22.05/squeue.json: each record copied with
its own job id, a pending copy of a running record taking the running
record's request), answered by the test suite's stand-ins for Slurm: a
command runner returning the squeue and sinfo JSON (the CLI backend), and
a pyslurm module whose dict API builds the jobs' dicts as pyslurm 22.05
does (the pyslurm backend). In alternating rounds, medians:

- the bare read: `orjson.loads` of squeue's and sinfo's answer (what the
  CLI backend cannot avoid), `job().get()` and `node().get()` (pyslurm);
- the backend's `fetch_snapshot` (read, parse, Snapshot);
- a dry-run cycle (`run_cycle`, the default config: plan included);

and what each adds to the bare read. Live, slurmctld's own answer comes
on top of the bare read (bench_live_50k.py); this is the part that is
ours. `--profile` prints cProfile's top functions of one pyslurm cycle.

`--memory` prints the peak of the memory Python held during each read
beyond what it held before (tracemalloc: the answer's text is made
before), against the size of squeue's answer.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import gc
import json
import pstats
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from slurm_drf.config.settings import Config
from slurm_drf.cycle.run import run_cycle
from slurm_drf.cycle.store import StateStore
from slurm_drf.slurm.cli_source import CliSource, CommandStreamer
from slurm_drf.slurm.source import ClusterSource
from tests.unit.slurm.test_pyslurm_backend import (
    BOTH,
    fake_cluster,
    make_pyslurm,
    pyslurm_source,
    replay,
    sinfo_fixture,
    squeue_fixture,
)

NOW = 1_700_000_000.0
ACCOUNTS = ("physics", "chemistry", "biology", "cs")


def make_queue(pending: int, running: int) -> dict[str, Any]:
    """The fixture's squeue answer with PENDING + RUNNING jobs of the fixture's shapes."""
    data = squeue_fixture()
    shapes = [r for r in data["jobs"] if not r.get("array_task_string") and not r.get("het_job_id")]
    pending_shapes = [r for r in shapes if r["job_state"] == "PENDING"] or shapes
    running_shapes = [r for r in shapes if r["job_state"] == "RUNNING"]
    jobs: list[dict[str, Any]] = []
    for index in range(pending + running):
        is_running = index >= pending and running_shapes
        base = (
            running_shapes[index % len(running_shapes)] if is_running else pending_shapes[index % len(pending_shapes)]
        )
        record = copy.deepcopy(base)
        record.update(
            job_id=100_000 + index,
            account=ACCOUNTS[index % len(ACCOUNTS)],
            user_name="root",
            user_id=0,
            submit_time=int(NOW) - index,
        )
        jobs.append(record)
    data["jobs"] = jobs
    return data


def _in_pieces(runner: Callable[..., str]) -> CommandStreamer:
    """The answer handed over in pieces of 64 KiB, as execute.stream_command reads a pipe."""

    def stream(argv: Any, timeout: float, consume: Callable[[Iterator[str]], Any], *, env: Any = None) -> Any:
        text = runner(argv, timeout, env=env)
        return consume(text[start : start + 65536] for start in range(0, len(text), 65536))

    return stream


def _median(call: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _dry_cycle(source: ClusterSource, state_dir: Path) -> None:
    run_cycle(source, _NoWriter(), Config(), StateStore(state_dir), dry_run=True)


class _NoWriter:
    def apply(self, writes: object) -> Any:
        raise AssertionError("a dry run writes nothing")

    def run_lines(self, lines: object) -> Any:
        raise AssertionError("a dry run writes nothing")


def traced_peak(call: Callable[[], object]) -> int:
    """The most memory Python held at once during `call`, beyond what it held before (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def measure_memory(calls: dict[str, Callable[[], object]], answer_bytes: int) -> None:
    for name in ("cli bare", "cli fetch_snapshot", "pyslurm bare", "pyslurm fetch_snapshot"):
        peak = traced_peak(calls[name])
        print(f"{name}: peak of Python's memory {peak / 2**20:.0f} MiB = {peak / answer_bytes:.2f}x squeue's answer")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pending", type=int, default=50_000)
    parser.add_argument("--running", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--memory", action="store_true")
    args = parser.parse_args()

    squeue = make_queue(args.pending, args.running)
    sinfo = sinfo_fixture()
    squeue_text = json.dumps(squeue)
    sinfo_text = json.dumps(sinfo)
    module = make_pyslurm(fake_cluster(squeue, sinfo), **BOTH)
    cli = CliSource(
        runner=replay(squeue, sinfo), environ={}, clock=lambda: NOW, streamer=_in_pieces(replay(squeue, sinfo))
    )
    pyslurm = pyslurm_source(module, squeue, sinfo)
    print(f"{len(squeue['jobs']):,} jobs; squeue's answer {len(squeue_text) / 1e6:.1f} MB", flush=True)

    with tempfile.TemporaryDirectory() as scratch:
        state_dir = Path(scratch)
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(_dry_cycle, pyslurm, state_dir)
            pstats.Stats(profile).sort_stats("cumulative").print_stats(30)
            return 0
        calls: dict[str, Callable[[], object]] = {
            "cli bare": lambda: (orjson.loads(squeue_text), orjson.loads(sinfo_text)),
            "cli fetch_snapshot": cli.fetch_snapshot,
            "cli dry cycle": lambda: _dry_cycle(cli, state_dir),
            "pyslurm bare": lambda: (module.job().get(), module.node().get()),
            "pyslurm fetch_snapshot": pyslurm.fetch_snapshot,
            "pyslurm dry cycle": lambda: _dry_cycle(pyslurm, state_dir),
        }
        if args.memory:
            measure_memory(calls, len(squeue_text))
            return 0
        runs: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(args.rounds):
            for name, call in calls.items():
                runs[name].append(_median(call, 1))
    medians = {name: statistics.median(values) for name, values in runs.items()}
    print(f"{'':24} {'median s':>9} {'over bare s':>12}")
    for name, value in medians.items():
        bare = medians[f"{name.split()[0]} bare"]
        print(f"{name:24} {value:9.2f} {value - bare:12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
