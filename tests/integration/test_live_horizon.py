"""The exact band against a live slurmctld, with churn (issue 10, docs/rule.md §5).

After every cycle, Slurm's priorities of the first H pending jobs of the
plan (H = the config's `horizon`) must strictly fall along the plan's
order, whatever Slurm's other factors add (age and fair-share here: the
sandbox's PriorityWeight* sum is 1,100, so neighbours in the band must be
written at least 1,101 apart). Between cycles the cluster changes the way
a busy one does: running jobs end and Slurm starts the head of its order,
new jobs arrive and pending ones are cancelled; inside the band a cycle
writes at most 1.5x the order-theoretic minimum (`fewest_writes` on the
values Slurm held). On top: a cycle on an unchanged cluster writes
nothing, and the head starting costs no write.

The scene: the node's 64 CPUs run 1-CPU jobs, and a few hundred 1-CPU
jobs of three accounts wait, so each CPU a running job frees lets exactly
one pending job start. Their demands keep every level distinct, so the
tie rule (whose rotating key moves with the running set) never decides
and an unchanged order means unchanged values:

- cputeam: 1 CPU, 500 MiB; dominant share y/64 for y jobs;
- memteam: 1 CPU, 9001 MiB; dominant share 9001 m/512000 (memory);
- gputeam: 1 CPU, 500 MiB, weight 1.013; weighted share 1000 x/(64 x 1013).

Two of them are equal only for 1013 or 8000 jobs of one account (9001 is
prime), and every account always keeps a running job, so no level is 0
twice. newteam runs the jobs that free a CPU for the head and has no
pending job, so its usage moves no level.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from slurm_drf.policy.labels import fewest_writes
from tests.integration.live_helpers import (
    NODE_CPUS,
    DrfRun,
    Live,
    pending_priorities,
    plan_jobs,
    plan_order,
    queue,
    write_config,
)
from tests.polling import wait_for

if TYPE_CHECKING:
    from tests.integration.conftest import SlurmSandbox

HORIZON = 40
TEAMS: Mapping[str, tuple[str, ...]] = {
    "cputeam": ("-A", "cputeam", "-p", "cpu", "-c", "1", "--mem=500"),
    "memteam": ("-A", "memteam", "-p", "cpu", "-c", "1", "--mem=9001"),
    "gputeam": ("-A", "gputeam", "-p", "cpu", "-c", "1", "--mem=500"),
}
SLOT = ("-A", "newteam", "-p", "cpu", "-c", "1", "--mem=500")
RUNNING_PER_TEAM = 20  # and NODE_CPUS - 3 x 20 = 4 newteam slot jobs
PENDING_PER_TEAM = 100
CHURN_CYCLES = 5
SETTLE_TIMEOUT_S = 60


@pytest.fixture
def live(slurm: SlurmSandbox, tmp_path: Path) -> Live:
    return Live(slurm, tmp_path)


def submit_many(live: Live, shapes: Sequence[tuple[str, ...]]) -> list[str]:
    """sbatch each shape, a few at a time (sbatch waits for slurmctld's answer)."""
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda shape: live.submit(*shape), shapes))


def by_state(live: Live) -> tuple[dict[str, str], set[str]]:
    """Running job -> account, and the pending job ids."""
    jobs = queue(live.slurm)
    running = {j.job_id: j.account for j in jobs.values() if j.state == "RUNNING"}
    return running, {j.job_id for j in jobs.values() if j.state == "PENDING"}


def wait_full(live: Live) -> dict[str, str]:
    """Polls until every CPU runs a job again (each freed CPU starts one pending job)."""

    def full() -> dict[str, str] | None:
        jobs = queue(live.slurm)
        running = {j.job_id: j.account for j in jobs.values() if j.state == "RUNNING"}
        settling = any(j.state not in ("RUNNING", "PENDING") for j in jobs.values())
        return running if len(running) == NODE_CPUS and not settling else None

    found: dict[str, str] = wait_for(full, SETTLE_TIMEOUT_S, f"all {NODE_CPUS} CPUs to run a job")
    return found


def written(run: DrfRun) -> int:
    summary = run.summary()
    assert "wrote " in summary, summary
    return int(summary.split("wrote ", 1)[1].split()[0])


def check_exact_band(live: Live, plan: Mapping[str, Any], gap: int) -> list[str]:
    """The plan marks its first HORIZON jobs exact, their nice values rise by `gap` at least,
    and Slurm's priorities strictly fall along them."""
    order = plan_order(plan)
    entries = plan_jobs(plan)
    bands = [entries[j]["band"] for j in order]
    assert len(order) > HORIZON, len(order)
    assert bands[:HORIZON] == ["exact"] * HORIZON, bands[: HORIZON + 1]
    assert set(bands[HORIZON:]) == {"coarse"}
    head = order[:HORIZON]
    # Nothing starts between the cycle and this read: every CPU is taken.
    priorities = pending_priorities(live.slurm, head)
    along = [priorities[j] for j in head]
    assert all(a > b for a, b in itertools.pairwise(along)), list(zip(head, along, strict=True))
    jobs = queue(live.slurm)
    nice = [jobs[j].nice for j in head]
    assert nice == [entries[j]["nice"] for j in head]
    assert all(b - a >= gap for a, b in itertools.pairwise(nice)), list(zip(head, nice, strict=True))
    # The coarse band starts a gap above the band too.
    assert jobs[order[HORIZON]].nice - nice[-1] >= gap
    return order


def band_gap(live: Live) -> int:
    """1 + the sum of Slurm's PriorityWeight* (`scontrol show config`): how far apart the band keeps neighbours."""
    text = live.slurm.run("scontrol", "show", "config").stdout
    weights = [line.split("=", 1) for line in text.splitlines() if line.startswith("PriorityWeight")]
    return 1 + sum(int(value) for _, value in weights if value.strip().isdigit())


def exact_band_writes(plan: Mapping[str, Any], previous: set[str], gap: int) -> tuple[int, int]:
    """Jobs the cycle wrote inside the exact band, and the fewest it could have written.

    The minimum (`fewest_writes`) keeps a longest run of the values Slurm
    held that already rise by the band's gap; jobs not in the previous plan
    hold none of ours and count as written.
    """
    order = plan_order(plan)[:HORIZON]
    entries = plan_jobs(plan)
    nice = np.array([entries[j]["current"] for j in order], dtype=np.int64)
    ours = np.array([j in previous for j in order], dtype=np.bool_)
    band_written = sum(entries[j]["action"] == "set" for j in order)
    return band_written, fewest_writes(nice, ours, gap)


def test_slurms_priorities_follow_the_exact_band_through_churn(live: Live, tmp_path: Path) -> None:
    live.require_quiet_queue()
    rng = random.Random(10)
    gap = band_gap(live)
    assert gap > 1, "the sandbox's slurm.conf sets PriorityWeightAge and PriorityWeightFairshare"
    config = write_config(
        tmp_path,
        "horizon.yaml",
        state_dir=str(live.state_dir),
        horizon=HORIZON,
        accounts={"gputeam": {"weight": 1.013}},
    )
    fill = [shape for shape in TEAMS.values() for _ in range(RUNNING_PER_TEAM)]
    fill += [SLOT] * (NODE_CPUS - len(fill))
    live.wait_running(submit_many(live, fill))
    # Interleaved, so that submit order is not the DRF order.
    submit_many(live, [TEAMS[team] for _ in range(PENDING_PER_TEAM) for team in TEAMS])
    running, pending = by_state(live)
    assert len(running) == NODE_CPUS and len(pending) == len(TEAMS) * PENDING_PER_TEAM

    first = live.once(config=config)
    assert written(first) == len(pending)
    ordered = [j for j in first.plan["jobs"] if j["order"] is not None]
    assert len(ordered) == len(pending)
    # The premise that makes an unchanged order mean unchanged values.
    assert not any(j["tie"] for j in ordered)
    order = check_exact_band(live, first.plan, gap)

    # Nothing changed: nothing is written, nothing moves.
    second = live.once(config=config)
    assert written(second) == 0
    assert plan_order(second.plan) == order
    check_exact_band(live, second.plan, gap)

    # A newteam job ends: its CPU goes to the plan's head, and the next cycle
    # writes nothing (the head's account's later jobs keep their levels).
    slot = next(j for j, account in running.items() if account == "newteam")
    live.cancel(slot)
    wait_full(live)
    started = by_state(live)[0].keys() - running.keys()
    assert started == {order[0]}, f"Slurm started {sorted(started)}, the plan's head is {order[0]}"
    after_head = live.once(config=config)
    assert written(after_head) == 0, after_head.summary()
    assert plan_order(after_head.plan) == order[1:]
    order = check_exact_band(live, after_head.plan, gap)

    for _ in range(CHURN_CYCLES):
        running = wait_full(live)
        # Three running jobs end and Slurm starts three others.
        live.cancel(*rng.sample(sorted(j for j, account in running.items() if account in TEAMS), 3))
        # Every team still runs a job: no two levels are 0.
        assert set(wait_full(live).values()) >= set(TEAMS)
        # Pending jobs are cancelled, one of them inside the band, and new ones arrive.
        pending = by_state(live)[1]
        in_band = [j for j in order[:HORIZON] if j in pending]
        gone = [rng.choice(in_band), *rng.sample(sorted(pending - set(in_band)), 2)]
        live.cancel(*gone)
        submit_many(live, [TEAMS[team] for team in rng.choices(sorted(TEAMS), k=6)])

        previous = set(order)
        run = live.once(config=config)
        order = check_exact_band(live, run.plan, gap)
        band_written, band_minimum = exact_band_writes(run.plan, previous, gap)
        # Within the horizon, at most 1.5x the fewest writes that make Slurm's order the plan's.
        assert band_written <= 1.5 * band_minimum, (band_written, band_minimum)
        # The tail's coarse values mostly stay too (about a tenth of the queue is written here).
        assert written(run) < len(order) // 4, run.summary()

    # Nothing changed since the last cycle: nothing is written.
    settled = live.once(config=config)
    assert written(settled) == 0, settled.summary()
    assert plan_order(settled.plan) == order
