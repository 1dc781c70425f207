"""The simulator's model of a job's place at submission (`drf-placed`, docs/rule.md §8)."""

from __future__ import annotations

from slurm_drf.sim.engine import simulate
from slurm_drf.sim.options import SimOptions
from slurm_drf.sim.policies import ALL_POLICIES, PLACED_POLICY, build_policy
from slurm_drf.sim.workload import NodeType, Workload, WorkloadJob


def _newcomer_between_ticks() -> Workload:
    """One node of 4 CPUs: hog's first job holds it until t=150, its queue waits behind; newlab's one
    job comes at t=130, after the tick at 120 and before the node frees, 30 s before the next tick."""
    first = WorkloadJob("0", "hog", "u", 0.0, 150.0, 1000.0, cpu=4, mem=10, gpu=0)
    queue = [WorkloadJob(str(i + 1), "hog", "u", 1.0 + i, 100.0, 1000.0, cpu=4, mem=10, gpu=0) for i in range(10)]
    newcomer = WorkloadJob("99", "newlab", "v", 130.0, 100.0, 1000.0, cpu=4, mem=10, gpu=0)
    return Workload("newcomer", "a newcomer between ticks", (first, *queue, newcomer), 1, NodeType(4, 1000, 0), seed=1)


def test_a_newcomer_placed_at_submission_starts_when_the_node_frees_before_the_next_cycle() -> None:
    workload = _newcomer_between_ticks()
    options = SimOptions(interval=60.0)
    placed = simulate(workload, build_policy(PLACED_POLICY), options)
    labels = simulate(workload, build_policy("drf-labels"), options)
    assert placed.start[-1] == 150.0  # first in Slurm's queue at submission
    # Without it the job holds nice 0 behind every labelled job until the tick at 180: hog's job starts at 150.
    assert labels.start[-1] > 150.0
    assert labels.start[1] == 150.0


def test_drf_placed_is_a_policy_of_its_own() -> None:
    assert PLACED_POLICY in ALL_POLICIES
    assert build_policy(PLACED_POLICY).name == PLACED_POLICY
