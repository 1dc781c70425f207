"""The cost of the sacct bootstrap of the decayed past (issue 13): run by hand, not a test.

    python benchmarks/bench_history.py [--jobs 100000] [--accounts 50] [--days 70] [--rounds 5]

A fresh install with `history:` on asks `sacct --parsable2` once for the
last five half-lives (70 days at the default 14-day half-life) and
integrates every allocation against the decay. This builds the answer of
`--jobs` allocations twice, with the same accounts, times and TRES: as the
daemon's `sacct --parsable2` lines with epoch times (the captured
fixture's first line, varied) and, for comparison with what the bootstrap
read before, as `sacct --json` in Slurm 22.05's shape (the captured JSON
fixture's first record, varied). It times, as medians over the rounds in
one process: parsing each (`slurm.sacct.parse_sacct_pipe`;
`parse_sacct_json` and `build_allocations`), and integrating the
allocations (`policy.decayed_usage.build_usage_span` and
`DecayedUsage.add_span`). The sacct query itself is slurmdbd's time and is
not measured here; the size of each answer is printed.
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

from slurm_drf.policy.decayed_usage import DecayedUsage, build_usage_span
from slurm_drf.policy.pools import DEFAULT_POOL
from slurm_drf.slurm.sacct import build_allocations, parse_sacct_json, parse_sacct_pipe

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "slurm-22.05"
RESOURCES = ("cpu", "mem", "gres/gpu")
DAY = 86400.0
HALF_LIFE = 14 * DAY


def build_jobs(
    jobs: int, accounts: int, days: float, seed: int
) -> tuple[list[tuple[int, str, int, int, int, int]], float]:
    """(job id, account, start, end, CPUs, MiB) of `jobs` allocations over the last `days`; the time of taking."""
    rng = random.Random(seed)
    now = 1_800_000_000.0 + days * DAY
    out: list[tuple[int, str, int, int, int, int]] = []
    for number in range(jobs):
        start = now - rng.uniform(0.0, days * DAY)
        end = min(now, start + rng.uniform(60.0, 2 * DAY))
        cpu, mem = rng.choice((1, 4, 16, 64)), rng.choice((1000, 16000, 256000))
        out.append((number + 1, f"acct{rng.randrange(accounts)}", int(start), int(end), cpu, mem))
    return out, now


def build_json_text(jobs: list[tuple[int, str, int, int, int, int]]) -> bytes:
    """The jobs as a sacct --json answer (22.05), each record the captured fixture's first with these values."""
    document = json.loads((FIXTURES / "sacct-allocations.json").read_text())
    template = document["jobs"][0]
    records: list[dict[str, Any]] = []
    for job_id, account, start, end, cpu, mem in jobs:
        record = copy.deepcopy(template)
        record["job_id"] = job_id
        record["account"] = record["association"]["account"] = account
        record["time"]["start"] = start
        record["time"]["end"] = end
        for entry in record["tres"]["allocated"]:
            if entry["type"] == "cpu":
                entry["count"] = cpu
            elif entry["type"] == "mem":
                entry["count"] = mem
        records.append(record)
    document["jobs"] = records
    return json.dumps(document).encode()


def build_pipe_text(jobs: list[tuple[int, str, int, int, int, int]]) -> str:
    """The jobs as the daemon's sacct --parsable2 answer (JobIDRaw|Account|Partition|Start|End|AllocTRES)."""
    first = (FIXTURES / "sacct-allocations.txt").read_text().splitlines()[0].split("|")
    partition, items = first[2], first[5].split(",")

    def tres(cpu: int, mem: int) -> str:
        varied = {"cpu": f"cpu={cpu}", "mem": f"mem={mem}M"}
        return ",".join(varied.get(item.partition("=")[0], item) for item in items)

    return "".join(
        f"{job_id}|{account}|{partition}|{start}|{end}|{tres(cpu, mem)}\n"
        for job_id, account, start, end, cpu, mem in jobs
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--accounts", type=int, default=50)
    parser.add_argument("--days", type=float, default=70.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    jobs, now = build_jobs(args.jobs, args.accounts, args.days, args.seed)
    pipe_text, json_text = build_pipe_text(jobs), build_json_text(jobs)
    start = now - args.days * DAY
    pipe_times: list[float] = []
    json_times: list[float] = []
    integrate_times: list[float] = []
    for _ in range(args.rounds):
        began = time.perf_counter()
        allocations = parse_sacct_pipe(pipe_text)
        parsed = time.perf_counter()
        from_json = build_allocations(parse_sacct_json(json_text))
        json_parsed = time.perf_counter()
        usage = DecayedUsage(HALF_LIFE, 120.0)
        usage.add_span(build_usage_span(allocations, start, now, HALF_LIFE, lambda _p: DEFAULT_POOL, RESOURCES))
        past = usage.past_at(now)
        done = time.perf_counter()
        if from_json != allocations:
            raise SystemExit("the two formats gave different allocations")
        pipe_times.append(parsed - began)
        json_times.append(json_parsed - parsed)
        integrate_times.append(done - json_parsed)
    pipe_size, json_size = len(pipe_text.encode()) / 2**20, len(json_text) / 2**20
    print(
        f"{args.jobs:,} allocations of {args.accounts} accounts over {args.days:g} days, "
        f"{len(past.get(DEFAULT_POOL, {}))} accounts in the past"
    )
    print(f"answer: sacct --parsable2 {pipe_size:.1f} MiB, sacct --json {json_size:.0f} MiB")
    print(f"parse (sacct -P -> allocations):   median {statistics.median(pipe_times):.2f} s over {args.rounds} rounds")
    print(f"parse (sacct JSON -> allocations): median {statistics.median(json_times):.2f} s")
    print(f"integrate (decayed past):          median {statistics.median(integrate_times):.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
