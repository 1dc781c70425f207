"""Writes per cycle on a live, churning queue (issue 10): run by hand as root, not a test.

    eval "$(scripts/slurm-sandbox env)"
    python benchmarks/bench_live_writes.py [--pending 5000] [--cycles 10] [--end 4]
        [--horizon N] [--seed 1]

The sandbox node's 64 CPUs run 1-CPU jobs of four accounts, and PENDING
1-CPU jobs of the same accounts wait (submitted held, then released, as in
bench_live.py). Each cycle after the first, END running jobs end (they
are cancelled), Slurm starts END others from the head of its order, END new
jobs arrive, and then one real cycle runs (`run_cycle` in this process:
the CLI source and the scontrol writer, what the daemon runs each tick),
with no write cap. Per cycle it prints:

- jobs written, and the share of the pending jobs that is;
- inside the exact band: jobs written, and the order-theoretic minimum
  (`fewest_writes` on the labels Slurm held before the cycle, in plan
  order, with the band's gap); over the whole queue, the fewest writes
  that would make Slurm's order of every pending job the plan's (gap 1),
  which the coarse band does not aim for;
- what the mapping before the labels (`spread_values`, values spread by
  rank) would have written, had Slurm held its values of the cycle before;
- the cycle's time and its read's;
- slurmctld's own count and total time of REQUEST_UPDATE_JOB RPCs during
  the cycle (the difference of `sdiag` before and after it);
- whether Slurm's priorities then strictly fall along the exact band.

The first cycle writes every job (Slurm holds none of its values yet): it
is what the mapping before the labels paid on every cycle with a queue in
motion. The accounts' job shapes and weights keep every level distinct
(cputeam 500 MiB, memteam 9001 MiB, gputeam and newteam 500 MiB with
weights 1.0001 and 0.9999), so the tie rule, whose rotating key moves with
the running set, never decides: the writes measured are the order's own.

Cancels every job it submitted and waits until they are gone, also when
interrupted. The sandbox must have no other jobs (the node gets filled).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from bench_live import cleanup, queued_ids, run, sbatch, wait_for

from slurm_drf.config.load import load_config
from slurm_drf.config.settings import Config
from slurm_drf.cycle.backends import make_source, make_writer
from slurm_drf.cycle.run import CycleReport, run_cycle
from slurm_drf.cycle.store import StateStore
from slurm_drf.errors import SlurmReadError
from slurm_drf.policy.labels import fewest_writes
from slurm_drf.policy.ownership import JobMemory
from slurm_drf.policy.values import labels_of, value_offset
from slurm_drf.sim.daemon_loop import SPREAD_SCALE, spread_values

NODE_CPUS = 64
SHAPES: Mapping[str, tuple[str, ...]] = {
    "cputeam": ("-p", "cpu", "-c", "1", "--mem=500"),
    "memteam": ("-p", "cpu", "-c", "1", "--mem=9001"),
    "gputeam": ("-p", "cpu", "-c", "1", "--mem=500"),
    "newteam": ("-p", "cpu", "-c", "1", "--mem=500"),
}
WEIGHTS = {"gputeam": {"weight": 1.0001}, "newteam": {"weight": 0.9999}}


@dataclasses.dataclass(frozen=True)
class Figures:
    """One cycle's measurements."""

    pending: int
    written: int
    exact: int  # jobs in the exact band (all pools)
    exact_written: int
    exact_minimum: int
    minimum: int  # whole queue, gap 1
    old_written: int
    seconds: float
    read_seconds: float
    rpcs: int
    rpc_seconds: float
    in_order: bool


def update_job_rpcs() -> tuple[int, int]:
    """slurmctld's REQUEST_UPDATE_JOB count and total time (microseconds) so far, from sdiag."""
    for line in run(["sdiag"]).stdout.splitlines():
        words = line.split()
        if words and words[0] == "REQUEST_UPDATE_JOB":
            fields = dict(word.split(":", 1) for word in words if ":" in word)
            return int(fields["count"]), int(fields["total_time"])
    return 0, 0  # none since slurmctld started (or the last sdiag --reset)


def squeue(*args: str) -> str:
    """squeue's output; a loaded slurmctld may time out a query (it answers the next one)."""
    answer: list[str] = []

    def answered() -> bool:
        proc = run(["squeue", "-h", *args], check=False)
        answer.append(proc.stdout)
        return proc.returncode == 0

    wait_for(answered, 120, f"squeue {' '.join(args)} to answer")
    return answer[-1]


def running_ids() -> list[str]:
    return sorted(squeue("-t", "R", "-o", "%A").split())


def node_full() -> bool:
    """Every CPU runs a job and nothing is completing."""
    states = squeue("-o", "%T").split()
    return states.count("RUNNING") == NODE_CPUS and set(states) <= {"RUNNING", "PENDING"}


def slurm_priorities() -> dict[str, int]:
    text = squeue("-t", "PD", "-o", "%A %Q")
    return {job: int(priority) for job, priority in (line.split() for line in text.splitlines() if line.strip())}


def measure_cycle(
    config: Config, store: StateStore, old_values: dict[str, int], rpcs_before: tuple[int, int]
) -> tuple[CycleReport, Figures]:
    """One real cycle, and what it wrote beside what it had to."""
    memory: Mapping[str, JobMemory] = store.load().jobs
    source = make_source(config)
    report = run_cycle(source, make_writer(source), config, store)
    rpcs_after = update_job_rpcs()
    plan = report.plan
    ids, current, user_nice, actions, levels = (
        plan.column(name) for name in ("job_id", "current", "user_nice", "action", "level")
    )
    exact = exact_written = exact_minimum = minimum = old_written = 0
    in_order = True
    priorities = slurm_priorities()
    offset = value_offset(config)
    new_old: dict[str, int] = {}
    gaps = {pool.name: pool.gap for pool in plan.pools}
    for record in plan.orders:
        gap = gaps[record.pool]
        rows = range(record.offset, record.offset + record.size)
        now = [current[p] for p in rows]
        own = np.array([user_nice[p] for p in rows], dtype=np.int64)
        # The labels Slurm's values stand for now: our part of each value (without the user's nice).
        values = np.array([0 if c is None else c for c in now], dtype=np.int64)
        labels = labels_of(config.mode, values - own if config.mode == "nice" else values, offset)
        remembered = [memory.get(ids[p]) for p in rows]
        ours = np.array(
            [m is not None and m.mode == config.mode and m.written == c for m, c in zip(remembered, now, strict=True)],
            dtype=np.bool_,
        )
        band = record.exact
        exact += band
        exact_written += sum(actions[p] == "set" for p in rows[:band])
        exact_minimum += fewest_writes(labels[:band], ours[:band], gap)
        minimum += fewest_writes(labels, ours, 1)
        # The mapping before the labels: values spread by rank, rewritten when they move.
        spread = spread_values(np.array([levels[p] for p in rows], dtype=np.float64), SPREAD_SCALE, gap)
        for p, label, user in zip(rows, spread.tolist(), own.tolist(), strict=True):
            new_old[ids[p]] = user + min(label - offset, -1)
            old_written += old_values.get(ids[p]) != new_old[ids[p]]
        along = [priorities[ids[p]] for p in rows[:band]]
        in_order &= all(a > b for a, b in itertools.pairwise(along))
    old_values.clear()
    old_values.update(new_old)
    written = report.result.count if report.result is not None else 0
    figures = Figures(
        pending=len(priorities),
        written=written,
        exact=exact,
        exact_written=exact_written,
        exact_minimum=exact_minimum,
        minimum=minimum,
        old_written=old_written,
        seconds=report.seconds,
        read_seconds=report.read_seconds,
        rpcs=rpcs_after[0] - rpcs_before[0],
        rpc_seconds=(rpcs_after[1] - rpcs_before[1]) / 1e6,
        in_order=in_order,
    )
    return report, figures


def cycle_retrying_reads(config: Config, store: StateStore, old_values: dict[str, int]) -> Figures:
    """measure_cycle; a read that a loaded slurmctld timed out wrote nothing, so the cycle runs again."""
    for attempt in range(3):
        try:
            return measure_cycle(config, store, old_values, update_job_rpcs())[1]
        except SlurmReadError as error:
            print(f"  (read failed, attempt {attempt + 1}: {error})", flush=True)
    sys.exit("bench_live_writes: slurmctld did not answer three reads in a row")


def churn(scratch: Path, rng: random.Random, end: int, submitted: list[str]) -> None:
    """END running jobs end, Slurm fills their CPUs from the head of its order, END new jobs arrive."""
    ending = rng.sample(running_ids(), end)
    run(["scancel", *ending])
    wait_for(
        lambda: set(squeue("-o", "%A").split()).isdisjoint(ending) and node_full(), 120, "Slurm to fill the freed CPUs"
    )
    for account in rng.choices(sorted(SHAPES), k=end):
        submitted.append(sbatch(scratch, account, SHAPES[account], hold=False))


HEADER = (
    f"{'cycle':>5} {'pending':>7} {'written':>7} {'%':>6} {'exact':>5} {'ex.wr':>5} {'ex.min':>6} "
    f"{'q.min':>6} {'old':>6} {'cycle s':>7} {'read s':>6} {'RPCs':>5} {'RPC s':>6} {'in order':>8}"
)


def row(cycle: int, f: Figures) -> str:
    return (
        f"{cycle:>5} {f.pending:>7} {f.written:>7} {100 * f.written / max(f.pending, 1):>5.1f}% {f.exact:>5} "
        f"{f.exact_written:>5} {f.exact_minimum:>6} {f.minimum:>6} {f.old_written:>6} {f.seconds:>7.2f} "
        f"{f.read_seconds:>6.2f} {f.rpcs:>5} {f.rpc_seconds:>6.3f} {f.in_order!s:>8}"
    )


def summary(figures: Sequence[Figures]) -> list[str]:
    """Medians over the churn cycles (all but the first)."""
    churned = figures[1:]
    if not churned:
        return []
    median = statistics.median
    ratios = [f.exact_written / f.exact_minimum for f in churned if f.exact_minimum]
    return [
        f"churn cycles {len(churned)}, medians: written {median(f.written for f in churned):.0f} "
        f"({median(100 * f.written / f.pending for f in churned):.1f}% of pending; target <= 10%), "
        f"old mapping {median(f.old_written for f in churned):.0f}",
        f"  exact band: written {median(f.exact_written for f in churned):.0f}, minimum "
        f"{median(f.exact_minimum for f in churned):.0f}, worst ratio {max(ratios, default=1.0):.2f} "
        "(target <= 1.5)",
        f"  cycle {median(f.seconds for f in churned):.2f} s (read {median(f.read_seconds for f in churned):.2f} s); "
        f"slurmctld: {median(f.rpcs for f in churned):.0f} job-update RPCs in "
        f"{median(f.rpc_seconds for f in churned):.3f} s; first cycle {figures[0].rpcs} in "
        f"{figures[0].rpc_seconds:.3f} s",
        "  Slurm's priorities strictly fall along the exact band after every cycle: "
        f"{all(f.in_order for f in figures)}",
    ]


def setup(args: argparse.Namespace, scratch: Path, submitted: list[str]) -> None:
    accounts = sorted(SHAPES)
    fill = [accounts[i % len(accounts)] for i in range(NODE_CPUS)]
    submitted += [sbatch(scratch, account, SHAPES[account], hold=False) for account in fill]
    wait_for(node_full, 120, "the node-filling jobs to run")
    with ThreadPoolExecutor(args.threads) as pool:
        pending = list(
            pool.map(
                lambda i: sbatch(scratch, accounts[i % len(accounts)], SHAPES[accounts[i % len(accounts)]], True),
                range(args.pending),
            )
        )
    submitted += pending
    for start in range(0, len(pending), 500):
        run(["scontrol", "release", ",".join(pending[start : start + 500])])
    still_held = [line for line in squeue("-t", "PD", "-o", "%r").splitlines() if "Held" in line]
    if still_held:
        sys.exit(f"bench_live_writes: {len(still_held)} job(s) still held after the release")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--pending", type=int, default=5000, help="pending jobs (default 5000)")
    parser.add_argument("--cycles", type=int, default=10, help="cycles, the first one included (default 10)")
    parser.add_argument("--end", type=int, default=4, help="running jobs that end before each cycle (default 4)")
    parser.add_argument("--horizon", type=int, default=None, help="the config's horizon (default: auto)")
    parser.add_argument("--threads", type=int, default=4, help="concurrent sbatch processes (default 4)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if not os.environ.get("SLURM_CONF"):
        sys.exit('bench_live_writes: SLURM_CONF is not set; run: eval "$(scripts/slurm-sandbox env)"')
    if queued_ids():
        sys.exit("bench_live_writes: the sandbox already has jobs; this benchmark fills the node")
    rng = random.Random(args.seed)
    submitted: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-live-writes-") as tmp:
        scratch = Path(tmp) / "jobs"
        scratch.mkdir()
        path = Path(tmp) / "config.yaml"
        keys: dict[str, object] = {
            "state_dir": str(Path(tmp) / "state"),
            "max_writes_per_cycle": 1_000_000,
            "accounts": WEIGHTS,
        }
        if args.horizon is not None:
            keys["horizon"] = args.horizon
        path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in keys.items()), encoding="utf-8")
        path.chmod(0o600)
        try:
            setup(args, scratch, submitted)
            config = load_config(path)
            store = StateStore(Path(config.state_dir))
            old_values: dict[str, int] = {}
            print(f"{NODE_CPUS} running, {args.pending} pending 1-CPU jobs, 4 accounts; {args.end} end per cycle")
            print(HEADER)
            figures: list[Figures] = []
            for cycle in range(args.cycles):
                if cycle:
                    churn(scratch, rng, args.end, submitted)
                measured = cycle_retrying_reads(config, store, old_values)
                figures.append(measured)
                print(row(cycle + 1, measured), flush=True)
            for line in summary(figures):
                print(line)
        finally:
            cleanup(submitted)


if __name__ == "__main__":
    main()
