"""One site model for every policy (docs/evaluation.md, *One site model*): the same urgent
jobs, age and QOS terms in every policy's priority, the main pass at the same depth."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_drf.model.types import FloatArray
from slurm_drf.sim.daemon_loop import SlurmSide
from slurm_drf.sim.engine import simulate
from slurm_drf.sim.options import SimOptions
from slurm_drf.sim.policies import ALL_POLICIES, DrfPolicy, Policy, build_policy
from slurm_drf.sim.scenarios import build_scenario
from slurm_drf.sim.workload import NodeType, Workload, WorkloadJob


def full_node_then_queue(jobs: int = 12) -> Workload:
    """One node of 4 CPUs held by a first job until t=1000; then `jobs` jobs of 4 CPUs, one a second,
    all of one account, so the order they start in is the queue's order."""
    held = WorkloadJob("0", "a", "u", 0.0, 1000.0, 1000.0, cpu=4, mem=10, gpu=0)
    queue = [WorkloadJob(str(i + 1), "a", "u", 1.0 + i, 100.0, 100.0, cpu=4, mem=10, gpu=0) for i in range(jobs)]
    return Workload("queue", "one node, a queue behind a long job", (held, *queue), 1, NodeType(4, 1000, 0), seed=3)


def start_order(result_start: FloatArray) -> list[int]:
    return [int(i) for i in np.argsort(result_start[1:], kind="stable")]


@pytest.mark.parametrize("name", ALL_POLICIES)
def test_every_policy_runs_under_the_site_it_is_given(name: str) -> None:
    site = SlurmSide(queue_depth=7, urgent=0.3)
    policy = build_policy(name, slurm=site, engine="fast")
    assert policy.site == site
    assert policy.queue_depth == 7


def test_the_same_jobs_are_urgent_under_every_policy() -> None:
    workload = build_scenario("mixed", 4, nodes=4, jobs=120)
    drawn = []
    for name in ("fifo", "multifactor", "drf", "drf-labels", "hdrf"):
        policy = build_policy(name, engine="fast")
        simulate(workload, policy, SimOptions(interval=600))
        drawn.append(policy.urgent)
    assert all(np.array_equal(drawn[0], d) for d in drawn[1:])
    assert 0 < drawn[0].mean() < 0.2


def urgent_record(policy: Policy, workload: Workload) -> int:
    """Bind `policy` to a dry run of `workload` and return the first urgent record after the held job."""
    simulate(workload, policy, SimOptions(interval=60))
    urgent = np.flatnonzero(policy.urgent[1:])
    assert len(urgent), "the draw put no job of the queue in the urgent QOS: pick another seed"
    return int(urgent[0])


@pytest.mark.parametrize("name", ["fifo", "multifactor", "drf", "drf-labels"])
def test_an_urgent_job_starts_first_in_its_account_under_every_policy(name: str) -> None:
    """The node frees at t=1000; every policy's queue then puts the account's urgent job first:
    its QOS term (10,000) is beyond age (1,000), and the daemon takes an account's jobs in Slurm's order."""
    workload = full_node_then_queue()
    site = SlurmSide(urgent=0.25)
    first = urgent_record(build_policy(name, slurm=site, engine="fast"), workload)
    result = simulate(workload, build_policy(name, slurm=site, engine="fast"), SimOptions(interval=60))
    assert first > 0, "the first queued job is urgent anyway: the test would prove nothing"
    assert start_order(result.start)[0] == first


@pytest.mark.parametrize("name", ["fifo", "multifactor", "drf", "drf-labels"])
def test_without_urgent_jobs_the_queue_keeps_submit_order(name: str) -> None:
    workload = full_node_then_queue()
    result = simulate(workload, build_policy(name, slurm=SlurmSide(urgent=0.0), engine="fast"), SimOptions(60))
    assert start_order(result.start) == list(range(12))


def test_multifactor_priority_is_fairshare_weight_times_factor_plus_qos() -> None:
    """A QOS of 10,000 beside PriorityWeightFairshare 100,000 lifts an urgent job past an
    account whose fair-share factor is higher by less than 0.1, and not past one higher by more."""
    jobs = [
        WorkloadJob("hog", "hog", "u", 0.0, 5000.0, 5000.0, cpu=3, mem=10, gpu=0),
        WorkloadJob("idle", "idle", "u", 0.0, 10.0, 10.0, cpu=1, mem=10, gpu=0),
        *(WorkloadJob(f"h{i}", "hog", "u", 100.0 + i, 100.0, 100.0, cpu=4, mem=10, gpu=0) for i in range(6)),
        *(WorkloadJob(f"i{i}", "idle", "u", 100.5 + i, 100.0, 100.0, cpu=4, mem=10, gpu=0) for i in range(6)),
    ]
    workload = Workload("two", "a hog and an idle account", tuple(jobs), 1, NodeType(4, 1000, 0), seed=3)
    for weight, hog_first in ((100_000, False), (0, True)):
        site = SlurmSide(urgent=1.0, weight_fairshare=weight)  # every job urgent: QOS cancels out
        result = simulate(workload, build_policy("multifactor", slurm=site), SimOptions(interval=60))
        first = int(np.argmin(np.where(result.start >= 5000, result.start, np.inf)))
        # With fair share dominant the idle account goes first; weighted 0, the equal QOS and
        # age terms leave it to the job number (hog's first job was submitted first).
        assert (result.accounts[result.job_account[first]] == "hog") is hog_first


def test_the_plan_and_fast_engines_agree_under_the_site_model() -> None:
    workload = build_scenario("mixed", 5, nodes=6, jobs=300)
    site = SlurmSide(urgent=0.2)
    runs = []
    for engine in ("plan", "fast"):
        policy = DrfPolicy(engine=engine, site=site)
        policy.history = []
        result = simulate(workload, policy, SimOptions(interval=120))
        runs.append((policy.history, result.start))
    assert runs[0][0] == runs[1][0]
    assert np.array_equal(runs[0][1], runs[1][1])
