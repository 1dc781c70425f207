"""The cost of the sacct bootstrap of the decayed past (issue 13): run by hand, not a test.

    python benchmarks/bench_history.py [--jobs 100000] [--accounts 50] [--days 70] [--rounds 5]

A fresh install with `history:` on asks `sacct --json` once for the last
five half-lives (70 days at the default 14-day half-life) and integrates
every allocation against the decay. This builds a `sacct --json` text of
`--jobs` allocations in Slurm 22.05's shape (the captured fixture's first
record, with its account, times and TRES varied), then times, as medians
over the rounds in one process: parsing it (`slurm.sacct.parse_sacct_json`
and `build_allocations`), and integrating it (`policy.history.build_usage_span`
and `DecayedUsage.add_span`). The sacct query itself is slurmdbd's time and
is not measured here; the size of its answer is printed.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from slurm_drf.policy.history import DecayedUsage, build_usage_span
from slurm_drf.policy.pools import DEFAULT_POOL
from slurm_drf.slurm.sacct import build_allocations, parse_sacct_json

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "slurm-22.05" / "sacct-allocations.json"
RESOURCES = ("cpu", "mem", "gres/gpu")
DAY = 86400.0
HALF_LIFE = 14 * DAY


def build_text(jobs: int, accounts: int, days: float, seed: int) -> tuple[bytes, float]:
    """A sacct --json answer of `jobs` allocations over the last `days`, and the time it was taken."""
    document = json.loads(FIXTURE.read_text())
    template = document["jobs"][0]
    rng = random.Random(seed)
    now = float(template["time"]["end"]) + days * DAY
    records: list[dict[str, Any]] = []
    for number in range(jobs):
        record = copy.deepcopy(template)
        start = now - rng.uniform(0.0, days * DAY)
        record["job_id"] = number + 1
        record["account"] = record["association"]["account"] = f"acct{rng.randrange(accounts)}"
        record["time"]["start"] = int(start)
        record["time"]["end"] = int(min(now, start + rng.uniform(60.0, 2 * DAY)))
        for entry in record["tres"]["allocated"]:
            if entry["type"] == "cpu":
                entry["count"] = rng.choice((1, 4, 16, 64))
            elif entry["type"] == "mem":
                entry["count"] = rng.choice((1000, 16000, 256000))
        records.append(record)
    document["jobs"] = records
    return json.dumps(document).encode(), now


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--accounts", type=int, default=50)
    parser.add_argument("--days", type=float, default=70.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    text, now = build_text(args.jobs, args.accounts, args.days, args.seed)
    start = now - args.days * DAY
    parse_times: list[float] = []
    integrate_times: list[float] = []
    for _ in range(args.rounds):
        began = time.perf_counter()
        allocations = build_allocations(parse_sacct_json(text))
        parsed = time.perf_counter()
        usage = DecayedUsage(HALF_LIFE, 120.0)
        usage.add_span(build_usage_span(allocations, start, now, HALF_LIFE, lambda _p: DEFAULT_POOL, RESOURCES))
        past = usage.past_at(now)
        done = time.perf_counter()
        parse_times.append(parsed - began)
        integrate_times.append(done - parsed)
    print(
        f"{args.jobs:,} allocations of {args.accounts} accounts over {args.days:g} days "
        f"({len(text) / 2**20:.0f} MiB of sacct --json), {len(past.get(DEFAULT_POOL, {}))} accounts in the past"
    )
    print(f"parse (sacct JSON -> allocations): median {statistics.median(parse_times):.2f} s over {args.rounds} rounds")
    print(f"integrate (decayed past):          median {statistics.median(integrate_times):.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
