"""history.sqlite at 90 days of 1-minute cycles (issue 24, item 5): run by hand, not a test.

    python benchmarks/bench_history_90d.py build DIR [--days 90] [--interval 60] [--accounts 2000]
        [--active 2000] [--writes 20]
    python benchmarks/bench_history_90d.py measure DIR [--rounds 3]

`build` makes DIR/history.sqlite as the daemon would leave it after
`--days` days of cycles every `--interval` seconds: the schema is the
project's own (`trail.history_db.open_history`, every migration), and the rows
are those `record_cycle` writes, but inserted directly in large
transactions (through `AuditRecorder` one cycle is one transaction and a
plan of `--active` accounts: 129,600 cycles would take hours). Each cycle
has a `cycles` row, one `shares` row for each of `--active` accounts of
`--accounts` (a rotating window: an account is present for a few hours,
then absent; usage and shares as JSON, three resources) and `--writes`
`writes` rows (new job ids, a few written again later). The newest cycle is
an interval before `NOW`.

`measure` prints, against the targets of issue 24: the file size; the wall
time of `slurm-drf audit` as a user runs it (a new process: one day of
writes, one account's writes, one job's writes, one account's shares of a
day), median of `--rounds`; the decayed past (`trail.past.HistoryPast`
without sacct, as the daemon at start and then per cycle, with a new cycle
recorded through `AuditRecorder`-shaped rows before each); and pruning at
`retention_days` (`trail.history_db.prune` of the oldest day, on a copy).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from slurm_drf.config.settings import Config, HistoryConfig
from slurm_drf.policy.decayed_usage import UsageRecord
from slurm_drf.trail.compaction import (
    DETAIL_KEPT,
    HOUR,
    build_stretches,
    compact_next_hour,
    insert_stretches,
    thin_next_hour,
)
from slurm_drf.trail.history_db import history_path, open_history, prune
from slurm_drf.trail.past import PAST_FILE, HistoryPast

DAY = 86400.0
NOW = 1_800_000_000.0  # 2027-01-15
RESOURCES = ("cpu", "mem", "gres/gpu")
POOL = "default"
CONFIG = Config(interval=60.0, resources=RESOURCES, history=HistoryConfig(half_life_s=14 * DAY, weight=0.5))
# An account present in a cycle stays present for this many cycles, then its slot moves on.
SESSION_CYCLES = 240
BATCH_CYCLES = 500


def _usage_variants(rng: random.Random, count: int) -> list[tuple[str, str, str, float, float]]:
    """(usage, shares, dominant resource, dominant share, weighted share) variants an account cycles through."""
    out = []
    for _ in range(count):
        usage = {
            "cpu": rng.choice((0, 4, 16, 64, 256)),
            "gres/gpu": rng.choice((0, 0, 1, 8)),
            "mem": rng.choice((0, 16000, 256000)),
        }
        shares = {"cpu": usage["cpu"] / 20000, "gres/gpu": usage["gres/gpu"] / 1000, "mem": usage["mem"] / 8e7}
        dominant = max(shares, key=lambda r: shares[r])
        out.append(
            (
                json.dumps(usage, sort_keys=True),
                json.dumps(shares, sort_keys=True),
                dominant,
                shares[dominant],
                shares[dominant],
            )
        )
    return out


def _cycle_rows(
    args: argparse.Namespace, start: float, detail: Callable[[int], bool] = lambda _index: True
) -> Iterator[tuple[tuple[Any, ...], list[tuple[Any, ...]], list[tuple[Any, ...]]]]:
    """(cycles row, shares rows, writes rows) per cycle, oldest first; ids from 1; shares where `detail(index)`."""
    rng = random.Random(args.seed)
    variants = [_usage_variants(rng, 4) for _ in range(args.accounts)]
    names = [f"acct{number:04d}" for number in range(args.accounts)]
    cycles = int(args.days * DAY / args.interval)
    job = 1_000_000
    recent: list[tuple[str, str]] = []
    for index in range(cycles):
        cycle_id = index + 1
        moment = start + index * args.interval
        cycle = (cycle_id, moment, "2027-01-01T00:00:00Z", "bench", "nice", 0, 1, 5000, args.writes, 0, 0.3, 0.9)
        # A window of `active` accounts that slides by one account every SESSION_CYCLES / accounts ... cycles.
        offset = (index // SESSION_CYCLES) * max(1, args.active // 8)
        shares = []
        for slot in range(args.active if detail(index) else 0):
            number = (offset + slot) % args.accounts
            usage, share, dominant, dominant_share, weighted = variants[number][(index // 60 + slot) % 4]
            shares.append(
                (cycle_id, POOL, names[number], 1.0, slot + 1, 3, 2, dominant, dominant_share, weighted, usage, share)
            )
        writes = []
        for _ in range(args.writes):
            if recent and rng.random() < 0.3:
                job_id, account = rng.choice(recent)  # a job written again (its place moved)
            else:
                job += 1
                job_id, account = str(job), names[(offset + rng.randrange(args.active)) % args.accounts]
                recent.append((job_id, account))
                if len(recent) > 5000:
                    recent.pop(0)
            writes.append(
                (cycle_id, moment, job_id, account, "user1", POOL, "nice", -1000, -1200, 0.01, 7, 0, "applied", None, 0)
            )
        yield cycle, shares, writes


def build(args: argparse.Namespace) -> int:
    """The file as the daemon leaves it: compacted and thinned hours, then the last day of every cycle.

    Hours older than DETAIL_KEPT are written as compaction leaves them:
    their cycles and writes rows, the shares rows of their last cycle, and
    the `hours` row `build_stretches` makes of their usage (the synthetic
    cycles of an hour all hold the same usage, so one record held for the
    hour is the hour's 60). The last day is written cycle by cycle, then
    compacted by the daemon's own `compact_next_hour`, timed per hour.
    """
    directory = Path(args.directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = history_path(directory)
    if path.exists():
        raise SystemExit(f"{path} exists; build into an empty directory")
    cycles = int(args.days * DAY / args.interval)
    start = NOW - args.interval * cycles
    per_hour = int(HOUR / args.interval)
    detailed = cycles - int(DETAIL_KEPT / args.interval)  # the first cycle of the last day
    usage_cache = _HourUsage(args)
    connection = open_history(path)
    began = time.perf_counter()
    try:
        connection.execute("BEGIN")
        for number, (cycle, shares, writes) in enumerate(
            _cycle_rows(args, start, lambda index: index >= detailed or index % per_hour == per_hour - 1), 1
        ):
            connection.execute("INSERT INTO cycles VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", cycle)
            connection.executemany("INSERT INTO shares VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", shares)
            connection.executemany(
                "INSERT INTO writes (cycle_id, time, job_id, account, user, pool, mode, old_value, new_value,"
                " level, position, tie, outcome, message, user_nice)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                writes,
            )
            index = number - 1
            if index < detailed and index % per_hour == per_hour - 1:
                first = index - per_hour + 1
                hour = start + first * args.interval
                record = UsageRecord(hour, usage_cache.at(first).usage)
                stretches = build_stretches([record], hour + HOUR, HOUR)
                insert_stretches(connection, hour, stretches, (first + 1, number), per_hour, 2 * args.interval)
                connection.execute("UPDATE hours SET thinned = 1 WHERE hour = ?", (hour,))
            if number % BATCH_CYCLES == 0:
                connection.execute("COMMIT")
                connection.execute("BEGIN")
                if number % (BATCH_CYCLES * 20) == 0:
                    print(f"  {number:,} of {cycles:,} cycles, {time.perf_counter() - began:.0f} s", flush=True)
        connection.execute("COMMIT")
        print(f"built {path}: {cycles:,} cycles in {time.perf_counter() - began:.0f} s", flush=True)
        slices = []
        while True:
            sliced = time.perf_counter()
            if compact_next_hour(connection, 2 * args.interval, NOW) is None:
                break
            slices.append(time.perf_counter() - sliced)
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()
    if slices:
        print(
            f"compaction of an hour of the last day (the daemon's slice, {per_hour} cycles x {args.active} accounts):"
            f" median {statistics.median(slices):.2f} s, max {max(slices):.2f} s over {len(slices)} hours"
        )
    return 0


class _HourUsage:
    """`_hour_usage` with the variants drawn once."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        rng = random.Random(args.seed)
        self.variants = [[json.loads(v[0]) for v in _usage_variants(rng, 4)] for _ in range(args.accounts)]

    def at(self, index: int) -> UsageRecord:
        args = self.args
        offset = (index // SESSION_CYCLES) * max(1, args.active // 8)
        usage: dict[str, dict[str, float]] = {}
        for slot in range(args.active):
            number = (offset + slot) % args.accounts
            usage[f"acct{number:04d}"] = self.variants[number][(index // 60 + slot) % 4]
        return UsageRecord(0.0, {POOL: usage})


def _median_seconds(run: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        run()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def _audit(directory: Path, *argv: str) -> Callable[[], object]:
    command = [sys.executable, "-m", "slurm_drf.cli", "audit", "--state-dir", str(directory), *argv]

    def run() -> object:
        done = subprocess.run(command, capture_output=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)}: exit {done.returncode}: {done.stderr.decode()[-400:]}")
        return done.stdout

    return run


def _newest_job(path: Path) -> tuple[str, str, int]:
    connection = sqlite3.connect(path)
    try:
        job_id, writes = connection.execute(
            "SELECT job_id, count(*) FROM writes WHERE id > (SELECT max(id) - 100000 FROM writes)"
            " GROUP BY job_id ORDER BY count(*) DESC LIMIT 1"
        ).fetchone()
        account = connection.execute("SELECT account FROM writes WHERE job_id = ? LIMIT 1", (job_id,)).fetchone()[0]
    finally:
        connection.close()
    return str(job_id), str(account), int(writes)


def _add_cycle(path: Path, moment: float) -> None:
    """One more cycle as the newest's copy, at `moment` (the recorder's rows, without a plan to build them from)."""
    connection = open_history(path)
    try:
        connection.execute("BEGIN IMMEDIATE")
        last = connection.execute("SELECT max(id) FROM cycles").fetchone()[0]
        connection.execute(
            "INSERT INTO cycles (time, taken_at, cluster, mode, dry_run, epoch, pending_jobs, writes_planned, deferred,"
            " read_seconds, seconds) SELECT ?, taken_at, cluster, mode, dry_run, epoch, pending_jobs, writes_planned,"
            " deferred, read_seconds, seconds FROM cycles WHERE id = ?",
            (moment, last),
        )
        connection.execute(
            "INSERT INTO shares SELECT ?, pool, account, weight, rank, running_jobs, pending_jobs, dominant_resource,"
            " dominant_share, weighted_share, usage, shares FROM shares WHERE cycle_id = ?",
            (last + 1, last),
        )
        connection.execute("COMMIT")
    finally:
        connection.close()


def _thin_copy(path: Path, now: float) -> list[float]:
    """Seconds of each `thin_next_hour` a day later (every hour of the last day thinned), on a copy."""
    copy = path.with_name("thin-copy.sqlite")
    shutil.copyfile(path, copy)
    try:
        target = open_history(copy)
        try:
            slices = []
            while True:
                began = time.perf_counter()
                if thin_next_hour(target, now + DETAIL_KEPT) is None:
                    break
                slices.append(time.perf_counter() - began)
            return slices
        finally:
            target.close()
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{copy}{suffix}").unlink(missing_ok=True)


def _prune_copy(path: Path, span: float) -> tuple[float, int]:
    """`prune` (retention_days) of the oldest `span` seconds, on a copy of the file: seconds and rows deleted."""
    copy = path.with_name("prune-copy.sqlite")
    shutil.copyfile(path, copy)
    try:
        target = open_history(copy)
        try:
            oldest = target.execute("SELECT min(time) FROM cycles").fetchone()[0]
            began = time.perf_counter()
            deleted = prune(target, oldest + span)
            return time.perf_counter() - began, deleted
        finally:
            target.close()
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{copy}{suffix}").unlink(missing_ok=True)


def measure(args: argparse.Namespace) -> int:
    directory = Path(args.directory)
    path = history_path(directory)
    size = sum(os.path.getsize(f"{path}{suffix}") for suffix in ("", "-wal") if os.path.exists(f"{path}{suffix}"))
    connection = sqlite3.connect(path)
    cycles, shares, writes = (
        connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in ("cycles", "shares", "writes")
    )
    # A cycle interval after the newest: a measure run adds cycles, the next one starts after them.
    now = float(connection.execute("SELECT max(time) FROM cycles").fetchone()[0]) + CONFIG.interval
    connection.close()
    print(f"{path}: {size / 2**30:.2f} GiB; {cycles:,} cycles, {shares:,} shares rows, {writes:,} writes rows")
    parts = set(args.parts.split(","))
    if "audit" in parts:
        _measure_audit(directory, path, now, args.rounds)
    if "past" in parts:
        _measure_past(directory, path, now, args.rounds)
    if "prune" in parts:
        for label, span in (("the oldest hour (the daemon's hourly step)", 3600.0), ("the oldest day", DAY)):
            seconds, deleted = _prune_copy(path, span)
            print(f"prune of {label}: {seconds:.2f} s, {deleted:,} rows")
    if "upkeep" in parts:
        slices = _thin_copy(path, now)
        if slices:
            print(
                f"thinning of an hour a day later: median {statistics.median(slices):.2f} s,"
                f" max {max(slices):.2f} s over {len(slices)} hours"
            )
    return 0


def _measure_audit(directory: Path, path: Path, now: float, rounds: int) -> None:
    job_id, account, job_writes = _newest_job(path)
    connection = sqlite3.connect(path)
    present = str(
        connection.execute("SELECT account FROM shares WHERE cycle_id = (SELECT max(id) FROM cycles)").fetchone()[0]
    )
    connection.close()
    # --since is back from the wall clock; the history ends at `now`: a date names the last day.
    day = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - DAY))
    audits = [
        ("audit --since <1 day>", ("--since", day)),
        (f"audit --account {account}", ("--account", account)),
        (f"audit --job {job_id} ({job_writes} writes)", ("--job", job_id)),
        (f"audit shares --account {present} --since <1 day>", ("shares", "--account", present, "--since", day)),
    ]
    for label, argv in audits:
        output = _audit(directory, *argv)()
        lines = len(bytes(output).splitlines()) if isinstance(output, bytes) else 0
        seconds = _median_seconds(_audit(directory, *argv), rounds)
        print(f"{label}: median {seconds:.2f} s over {rounds} runs ({lines:,} lines)")


def _measure_past(directory: Path, path: Path, now: float, rounds: int) -> None:
    clock = [now]
    kept = directory / PAST_FILE
    kept.unlink(missing_ok=True)
    past = HistoryPast(directory, clock=lambda: clock[0], keep=True)
    began, cpu = time.perf_counter(), time.process_time()
    result = past.past(CONFIG)
    read_seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    accounts = len(result.get(POOL, {})) if result else 0
    print(
        f"past at start, reading the history (no {PAST_FILE}): {read_seconds:.2f} s ({cpu:.2f} s of CPU),"
        f" {accounts} accounts"
    )
    per_cycle, per_cycle_cpu = [], []
    for step in range(rounds * 3):
        clock[0] = now + (step + 1) * CONFIG.interval
        _add_cycle(path, clock[0] - 1.0)
        began, cpu = time.perf_counter(), time.process_time()
        past.past(CONFIG)
        per_cycle.append(time.perf_counter() - began)
        per_cycle_cpu.append(time.process_time() - cpu)
    print(
        f"past per cycle afterwards (one new cycle read, {PAST_FILE} saved, {kept.stat().st_size / 2**20:.1f} MiB):"
        f" median {statistics.median(per_cycle) * 1000:.0f} ms ({statistics.median(per_cycle_cpu) * 1000:.0f} ms"
        f" of CPU) over {len(per_cycle)} cycles"
    )
    starts = []
    for _ in range(rounds):
        restarted = HistoryPast(directory, clock=lambda: clock[0], keep=True)
        began = time.perf_counter()
        again = restarted.past(CONFIG)
        starts.append(time.perf_counter() - began)
    if again != past.past(CONFIG):
        raise SystemExit(f"the past from {PAST_FILE} is not the running reader's")
    print(f"past at start from {PAST_FILE}: median {statistics.median(starts):.2f} s over {rounds} starts")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    making = verbs.add_parser("build")
    making.add_argument("directory")
    making.add_argument("--days", type=float, default=90.0)
    making.add_argument("--interval", type=float, default=60.0)
    making.add_argument("--accounts", type=int, default=2000)
    making.add_argument("--active", type=int, default=2000)
    making.add_argument("--writes", type=int, default=20)
    making.add_argument("--seed", type=int, default=1)
    measuring = verbs.add_parser("measure")
    measuring.add_argument("directory")
    measuring.add_argument("--rounds", type=int, default=3)
    measuring.add_argument(
        "--parts",
        default="audit,past,prune,upkeep",
        help="what to measure, a comma list of audit, past, prune, upkeep",
    )
    args = parser.parse_args()
    return build(args) if args.verb == "build" else measure(args)


if __name__ == "__main__":
    raise SystemExit(main())
