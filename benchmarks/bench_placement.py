"""The placement table's cost (issue 38): its size and build time, and what reading it costs inside slurmctld.

    PYTHONPATH=. python benchmarks/bench_placement.py [--pending 1000,50000] [--accounts 200] [--repeat 5] [--tree]

For each queue size: a plan of that many pending jobs (and a tenth as many
running) over ACCOUNTS accounts on 500 nodes, then

- the table `policy.placement.build_table` + `trail.placement.render_placement`
  makes of it: its bytes and lines, and the time to build and render it
  (median of REPEAT, in this process);
- in each Lua interpreter Debian has (lua5.1 is what Debian 12's
  job_submit_lua.so links), the job_submit module parsing that table
  (`parse_table`: what slurmctld pays once per new table, under its locks)
  and placing one job from the parsed table (what it pays per submission),
  each the median of REPEAT timings of a loop inside one interpreter
  process (os.clock: CPU time of the process).

The table's size is bounded by the exact band (every job of it, at most
2,000) and 500 sampled points past it, whatever the queue. `--tree` puts
the accounts under 20 divisions with 1-8 users each (Slurm's associations,
ordered by H-DRF with users as leaves, the defaults): the table then also
carries the tree's nodes, leaves and steps (at most about 8,000).
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import slurm_drf
from slurm_drf.config.settings import Config
from slurm_drf.model.types import Association, Job, Node, Snapshot, freeze_tres
from slurm_drf.policy.placement import build_table
from slurm_drf.policy.plan import compute_plan
from slurm_drf.trail.placement import render_placement

MODULE_DIR = Path(slurm_drf.__file__).resolve().parent / "data"
INTERPRETERS = ("lua5.1", "lua5.2", "lua5.3", "lua5.4")

# Times parse_table and place inside one interpreter: prints "parse SECONDS" and "place SECONDS", medians.
LUA_TIMER = """
package.path = arg[1] .. "/?.lua;" .. package.path
local said = {}
local function say(_, message) said[#said + 1] = message end
slurm = {SUCCESS = 0, NICE_OFFSET = 2147483648, log_info = say, log_error = say}
local M = require("slurm_drf_submit")
local file = assert(io.open(arg[2], "rb"))
local text = file:read("*a")
file:close()
local repeat_count, places = tonumber(arg[3]), 2000
local function median(values)
    table.sort(values)
    return values[math.floor((#values + 1) / 2)]
end
local parse, place = {}, {}
for r = 1, repeat_count do
    local started = os.clock()
    local parsed = assert(M.parse_table(text))
    parse[r] = os.clock() - started
end
M.configure({table = arg[2]})
local job = {account = "acct7", user_id = 1001, user_name = "u1", partition = "main",
    min_cpus = 4, num_tasks = 1, cpus_per_task = 1, min_nodes = 1,
    min_mem_per_node = 8000, tres_per_node = "gres:gpu:1", nice = 4294967294, priority = 4294967294,
    array_inx = nil, site_factor = 4294967294, shared = 65534}
local parts = {main = {name = "main", flag_default = 1, def_mem_per_cpu = 0, def_mem_per_node = 0, max_share = 1}}
for r = 1, repeat_count do
    local started = os.clock()
    for _ = 1, places do
        job.nice = 4294967294
        M.place(job, parts, 1000)
    end
    place[r] = (os.clock() - started) / places
end
assert(job.nice ~= 4294967294, "the benchmark's job was not placed: " .. table.concat(said, "; "))
print(string.format("parse %.6f", median(parse)))
print(string.format("place %.9f", median(place)))
"""


def _plan_snapshot(pending: int, accounts: int, tree: bool, seed: int = 1) -> Snapshot:
    rng = random.Random(seed)
    users = [rng.randint(1, 8) for _ in range(accounts)]
    tres = freeze_tres({"cpu": 64, "mem": 512_000, "gres/gpu": 8})
    nodes = tuple(Node(f"n{i:04d}", ("main",), "idle", tres) for i in range(500))
    jobs: list[Job] = []
    for k in range(pending + pending // 10):
        state = "RUNNING" if k < pending // 10 else "PENDING"
        gpu = rng.choice((0, 0, 1, 2))
        job_tres = freeze_tres({"cpu": rng.choice((1, 4, 16)), "mem": rng.choice((4000, 16000)), "gres/gpu": gpu})
        code = rng.randrange(accounts)
        user = f"u{rng.randrange(users[code])}"
        jobs.append(Job(str(k + 1), f"acct{code}", user, "main", state, 1000, 0, False, float(k), 1, job_tres))
    associations: list[Association] = []
    if tree:
        associations.append(Association("root", None, None, 1))
        associations += [Association(f"div{d}", "root", None, 1 + d % 3) for d in range(20)]
        for code in range(accounts):
            associations.append(Association(f"acct{code}", f"div{code % 20}", None, 1 + code % 4))
            associations += [Association(f"acct{code}", f"acct{code}", f"u{u}", 1) for u in range(users[code])]
    return Snapshot("bench", "2026-12-04T00:00:00Z", nodes, tuple(jobs), associations=tuple(associations))


def _lua_times(interpreter: str, table: Path, repeat: int) -> tuple[float, float] | None:
    path = shutil.which(interpreter)
    if path is None:
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(LUA_TIMER)
    proc = subprocess.run(
        [path, script.name, str(MODULE_DIR), str(table), str(repeat)], capture_output=True, text=True, check=False
    )
    Path(script.name).unlink()
    if proc.returncode != 0:
        raise SystemExit(f"{interpreter}: {proc.stderr.strip()}")
    out = proc.stdout
    figures = dict(line.split() for line in out.splitlines())
    return float(figures["parse"]), float(figures["place"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pending", default="1000,50000", help="queue sizes, comma-separated")
    parser.add_argument("--accounts", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tree", action="store_true", help="accounts under divisions, users as leaves (H-DRF)")
    args = parser.parse_args()
    config = Config(hierarchy="tree" if args.tree else "flat")
    for pending in (int(p) for p in args.pending.split(",")):
        plan = compute_plan(_plan_snapshot(pending, args.accounts, args.tree), config)
        builds = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            data = render_placement(build_table(plan, config, time.time()))
            builds.append(time.perf_counter() - started)
        lines = data.count(b"\n")
        print(
            f"{pending} pending, {args.accounts} accounts: table {len(data):,} bytes, {lines:,} lines; "
            f"built and rendered in {statistics.median(builds) * 1000:.1f} ms"
        )
        with tempfile.TemporaryDirectory() as scratch:
            table = Path(scratch) / "placement.txt"
            table.write_bytes(data)
            for interpreter in INTERPRETERS:
                times = _lua_times(interpreter, table, args.repeat)
                if times is None:
                    print(f"  {interpreter}: not installed")
                    continue
                parse, place = times
                print(f"  {interpreter}: reading the table {parse * 1000:.1f} ms; placing a job {place * 1e6:.1f} us")


if __name__ == "__main__":
    main()
