"""Requeue in the simulator (what a reclaim does, docs/rule.md §9): the victim's resources are free at once,
its run is lost, it waits out Slurm's requeue delay and runs again from the start; nothing is counted twice."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from slurm_drf.sim.engine import Simulator, simulate
from slurm_drf.sim.options import SimOptions
from slurm_drf.sim.policies import FifoPolicy, build_policy
from slurm_drf.sim.run_metrics import compute_metrics
from slurm_drf.sim.scenarios import build_scenario
from slurm_drf.sim.table import build_workload_table
from slurm_drf.sim.workload import NodeType, SimulationError, Workload, WorkloadJob


def _job(job_id: str, account: str, submit: float, duration: float, gpu: int) -> WorkloadJob:
    return WorkloadJob(job_id, account, f"{account}-u", submit, duration, duration, 8, 1000, gpu, 1)


class _ReclaimAt(FifoPolicy):
    """fifo that requeues the given jobs (by index: the workload's order) at the first tick at or after `when`."""

    def __init__(self, when: float, jobs: Sequence[int]) -> None:
        super().__init__()
        self.when, self.jobs, self.done = when, jobs, False

    def reclaim(self, now: float) -> Sequence[int]:
        if self.done or now < self.when:
            return ()
        self.done = True
        return self.jobs


def _workload(*jobs: WorkloadJob, nodes: int = 1) -> Workload:
    return Workload("t", "requeue", tuple(jobs), nodes, NodeType(cpu=64, mem=512_000, gpu=8))


def test_a_requeued_job_frees_its_node_at_once_and_runs_again_after_the_delay() -> None:
    workload = _workload(_job("long", "b", 0.0, 10_000.0, 8), _job("claim", "a", 100.0, 1_000.0, 8))
    result = simulate(workload, _ReclaimAt(600.0, [0]), SimOptions(interval=60.0, requeue_delay=120.0))
    long, claim = 0, 1
    assert result.requeued == ((long, 600.0, 600.0),)
    assert result.start[claim] == 600.0  # on the node the requeue freed, at that tick
    # Pending again at 720 s, the node busy until the claim ends: then it runs its whole length again.
    assert result.start[long] == 1_600.0 and result.end[long] == 11_600.0
    assert np.isfinite(result.end).all()


def test_the_cut_run_never_ends_and_usage_is_never_counted_twice() -> None:
    workload = _workload(
        _job("long", "b", 0.0, 700.0, 4), _job("other", "b", 0.0, 5_000.0, 4), _job("claim", "a", 10.0, 300.0, 4)
    )
    simulator = Simulator(workload, _ReclaimAt(120.0, [0]), SimOptions(interval=60.0, requeue_delay=60.0))
    result = simulator.run()
    # The cut run would have ended at 700 s: that end is stale and must not end the new run (which starts
    # once the claim ends at 420 s, and ends 700 s later).
    assert result.start[2] == 120.0 and result.end[2] == 420.0
    assert result.start[0] == 420.0 and result.end[0] == 1_120.0
    assert simulator.usage.sum() == 0 and simulator.cluster.used() == (0, 0, 0)
    # Samples never show more than the node holds.
    assert (result.sample_used[:, 2] <= 8).all()


def test_requeuing_a_job_that_is_not_running_is_an_error() -> None:
    workload = _workload(_job("waiting", "b", 0.0, 100.0, 8), _job("later", "b", 0.0, 100.0, 8))
    with pytest.raises(SimulationError, match="not running"):
        simulate(workload, _ReclaimAt(0.0, [1]), SimOptions(interval=60.0))


def test_without_a_reclaim_nothing_changes() -> None:
    workload = _workload(_job("long", "b", 0.0, 1_000.0, 8), _job("claim", "a", 100.0, 1_000.0, 8))
    result = simulate(workload, FifoPolicy(), SimOptions(interval=60.0))
    assert result.requeued == () and result.start[1] == 1_000.0 and not math.isnan(result.end[1])


def test_in_the_long_jobs_scenario_ordering_alone_leaves_the_newcomer_waiting_for_hogs_jobs_to_end() -> None:
    """The problem reclaim exists for (issue 39): whatever the order, the newcomer reaches its fair share
    only as hog's 12-36 h jobs end."""
    workload = build_scenario("long-jobs", 1, nodes=4, jobs=60)
    metrics = compute_metrics(simulate(workload, build_policy("drf", engine="fast")))
    newcomer = next(a for a in metrics.accounts if a.account == "newcomer")
    assert newcomer.time_to_fair_share > 8 * 3600


def test_with_guarantees_and_reclaim_the_newcomer_reaches_its_share_within_after_and_two_cycles() -> None:
    """drf-reclaim (docs/rule.md §9) on the scenario as it is built (8 nodes, 200 jobs): each account
    guaranteed its fair share, a claim waits `after` (10 min), then its victims are requeued and it starts
    at the next cycle; 13 hours before (the test above, at a smaller scale)."""
    workload = build_scenario("long-jobs", 1)
    plain = simulate(workload, build_policy("drf-labels"))
    reclaimed = simulate(workload, build_policy("drf-reclaim"))
    metrics, before = compute_metrics(reclaimed), compute_metrics(plain)
    newcomer = next(a for a in metrics.accounts if a.account == "newcomer")
    assert newcomer.time_to_fair_share <= 600 + 2 * 60
    moved = [job for job, _, _ in reclaimed.requeued]
    assert moved and len(moved) == len(set(moved))  # nobody requeued twice
    table = build_workload_table(workload)
    assert {table.accounts[table.job_account[job]] for job in moved} == {"hog"}  # only the account over its share
    lost = sum(ran * table.job_demand[job][2] * table.job_nodes_wanted[job] for job, _, ran in reclaimed.requeued)
    served = sum(j.duration * j.gpu * j.nodes for j in workload.jobs)
    assert lost < 0.05 * served
    for resource in ("cpu", "mem", "gres/gpu"):
        assert abs(metrics.utilisation[resource] - before.utilisation[resource]) <= 0.02, resource
