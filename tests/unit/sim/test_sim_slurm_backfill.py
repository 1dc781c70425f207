"""The Slurm-like backfill mode (`SimOptions(backfill="slurm")`): the invariants
of tests/unit/sim/test_sim.py, reservations that no backfilled job delays, and a
second large job that EASY backfill delays and this mode does not."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_drf.sim.daemon_loop import SlurmSide
from slurm_drf.sim.engine import simulate
from slurm_drf.sim.options import SimOptions
from slurm_drf.sim.policies import POLICIES, build_policy
from slurm_drf.sim.scenarios import build_scenario
from slurm_drf.sim.workload import NodeType, SimulationError, Workload, WorkloadJob
from tests.unit.sim.test_sim import check_invariants


def job(name: str, submit: float, cpu: int, duration: float) -> WorkloadJob:
    return WorkloadJob(name, "acct", "u", submit, duration, duration, cpu, 1000, 0)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("scenario", ["mixed", "bursty"])
def test_invariants_hold_for_every_policy(policy: str, scenario: str) -> None:
    workload = build_scenario(scenario, 7, nodes=6, jobs=300)
    options = SimOptions(interval=300, record_events=True, backfill="slurm", backfill_depth=50)
    check_invariants(simulate(workload, build_policy(policy), options))


@pytest.mark.parametrize("scenario", ["mixed", "bursty"])
def test_no_reservation_is_delayed(scenario: str) -> None:
    """fifo without urgent jobs never moves a job ahead of one submitted before it, and run times equal
    time limits: every job then starts no later than its first reservation, so no
    job started later (backfilled ones included) ever delayed one."""
    workload = build_scenario(scenario, 3, nodes=6, jobs=300)
    fifo = build_policy("fifo", slurm=SlurmSide(urgent=0.0))
    result = simulate(workload, fifo, SimOptions(interval=120, backfill="slurm", backfill_depth=100))
    check_invariants(result)
    assert result.reserved_at is not None
    reserved = np.isfinite(result.reserved_at)
    assert reserved.sum() > 50
    assert np.all(result.start[reserved] <= result.reserved_at[reserved])
    assert result.backfilled.sum() > 0


def test_easy_delays_a_second_large_job_and_slurm_does_not() -> None:
    """Two nodes of 64 CPUs. A holds node 0 until t=100, X half of node 1 until
    t=150. B and C need a whole node each; D (32 CPUs for 200 s) fits now on node 1.
    EASY reserves node 0 for B only, so D backfills onto node 1 and C waits for
    B's end at t=200. The slurm mode also reserves node 1 for C at t=150, so D
    may not start there now; it gets the next reservation instead (node 0 at 200)."""
    workload = Workload(
        "two",
        "a second large job",
        (job("A", 0, 64, 100), job("X", 0, 32, 150), job("B", 1, 64, 100), job("C", 2, 64, 100), job("D", 3, 32, 200)),
        2,
        NodeType(cpu=64, mem=64_000, gpu=0),
    )
    starts = {}
    for mode in ("easy", "slurm"):
        result = simulate(workload, build_policy("fifo"), SimOptions(interval=60, backfill=mode))
        check_invariants(result)
        starts[mode] = dict(zip([j.job_id for j in workload.jobs], result.start.tolist(), strict=True))
    assert starts["easy"] == {"A": 0.0, "X": 0.0, "B": 100.0, "C": 200.0, "D": 3.0}
    assert starts["slurm"] == {"A": 0.0, "X": 0.0, "B": 100.0, "C": 150.0, "D": 200.0}


def test_slurm_mode_keeps_the_easy_example() -> None:
    """With one large job waiting, the slurm mode backfills as EASY does."""
    workload = Workload(
        "easy",
        "EASY backfill",
        (job("A", 0, 48, 100), job("B", 1, 64, 100), job("C", 2, 16, 50), job("D", 3, 16, 200)),
        1,
        NodeType(cpu=64, mem=64_000, gpu=0),
    )
    result = simulate(workload, build_policy("fifo"), SimOptions(interval=60, backfill="slurm"))
    assert result.start.tolist() == [0.0, 100.0, 2.0, 200.0]
    assert result.backfilled.tolist() == [False, False, True, False]


def test_unknown_backfill_mode_is_refused() -> None:
    workload = Workload("one", "", (job("A", 0, 8, 10),), 1, NodeType(cpu=64, mem=64_000, gpu=0))
    with pytest.raises(SimulationError, match="backfill"):
        simulate(workload, build_policy("fifo"), SimOptions(backfill="conservative"))
