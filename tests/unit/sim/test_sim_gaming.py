"""Gaming strategies (sim.gaming, issue 35): each keeps the gamer's real work and leaves the others'
jobs alone; the measure counts pieces by their share of the original job; the runner fills every field."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest

from slurm_drf.sim.engine import simulate
from slurm_drf.sim.gaming import (
    GAMING_POLICIES,
    LIED_LIMIT,
    SPLIT_PIECES,
    STRATEGIES,
    USERS,
    GainRow,
    Gamed,
    build_gamed,
    measure,
    merge_rows,
    run_gaming,
    useful_work,
)
from slurm_drf.sim.options import DEFAULT_INTERVAL, SimOptions
from slurm_drf.sim.policies import ALL_POLICIES, build_policy
from slurm_drf.sim.scenarios import GAMING_ACCOUNT, build_scenario
from slurm_drf.sim.workload import NodeType, Workload, WorkloadJob, validate_workload

SMALL = build_scenario("gaming", 3, nodes=2, jobs=80)


def _real_work(workload: Workload, gamed: Gamed) -> dict[str, float]:
    """Per original job of `workload`, the share of it the gamed jobs do (1.0 each when all is kept)."""
    done: dict[str, float] = defaultdict(float)
    for job in gamed.workload.jobs:
        piece = gamed.pieces[job.job_id]
        done[piece.original] += piece.fraction
    return dict(done)


def _resource_seconds(job: WorkloadJob) -> tuple[float, float, float]:
    seconds = job.nodes * job.duration
    return (job.cpu * seconds, job.mem * seconds, job.gpu * seconds)


def test_the_gaming_scenario_has_five_accounts_of_one_user_each_and_g_uses_gpus() -> None:
    assert len(SMALL.accounts) == 5 and GAMING_ACCOUNT in SMALL.accounts
    assert all(job.user == job.account for job in SMALL.jobs)
    assert all(job.gpu > 0 for job in SMALL.jobs if job.account == GAMING_ACCOUNT)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_a_strategy_keeps_the_real_work_and_the_other_accounts_jobs(strategy: str) -> None:
    gamed = build_gamed(SMALL, strategy)
    validate_workload(gamed.workload)  # every gamed job can run
    done = _real_work(SMALL, gamed)
    assert done.keys() == {job.job_id for job in SMALL.jobs}
    assert all(share == pytest.approx(1.0) for share in done.values())
    others = [job for job in SMALL.jobs if job.account != GAMING_ACCOUNT]
    assert [job for job in gamed.workload.jobs if job.account != GAMING_ACCOUNT] == others
    changed = {job for job in gamed.workload.jobs if job.account == GAMING_ACCOUNT} - set(SMALL.jobs)
    assert changed, f"{strategy} changed none of {GAMING_ACCOUNT}'s jobs"


def test_split_pieces_add_up_to_the_original_resource_seconds() -> None:
    gamed = build_gamed(SMALL, "split")
    originals = {job.job_id: job for job in SMALL.jobs}
    pieces: dict[str, list[WorkloadJob]] = defaultdict(list)
    for job in gamed.workload.jobs:
        pieces[gamed.pieces[job.job_id].original].append(job)
    for job_id, made in pieces.items():
        original = originals[job_id]
        if original.account != GAMING_ACCOUNT:
            assert made == [original]
            continue
        assert len(made) == SPLIT_PIECES
        total = [sum(column) for column in zip(*(_resource_seconds(piece) for piece in made), strict=True)]
        assert total == pytest.approx(_resource_seconds(original))
        assert all(piece.gpu == original.gpu // SPLIT_PIECES or piece.gpu == original.gpu for piece in made)


def test_each_strategy_changes_what_it_says() -> None:
    node = SMALL.node_type
    g = [job for job in SMALL.jobs if job.account == GAMING_ACCOUNT]

    def gamed(strategy: str) -> list[WorkloadJob]:
        return [job for job in build_gamed(SMALL, strategy).workload.jobs if job.account == GAMING_ACCOUNT]

    memory = gamed("over-request memory")
    assert [j.mem for j in memory] == [min(node.mem, 3 * j.mem) for j in g]
    assert all(j.submit == 0 for j in gamed("stuff"))
    after = gamed("after-cycle")
    assert all(
        a.submit > j.submit and (a.submit - 1) % DEFAULT_INTERVAL == 0 and a.submit - j.submit <= DEFAULT_INTERVAL + 1
        for a, j in zip(after, g, strict=True)
    )
    assert len({j.user for j in gamed("many-users")}) == USERS
    assert all(j.limit == LIED_LIMIT and j.duration < LIED_LIMIT for j in gamed("run-time lies"))
    idle = gamed("idle holding")
    assert all(i.duration == 4 * j.duration for i, j in zip(idle, g, strict=True))


def test_strategies_are_deterministic_for_a_seed() -> None:
    again = build_scenario("gaming", 3, nodes=2, jobs=80)
    for strategy in STRATEGIES:
        assert build_gamed(SMALL, strategy) == build_gamed(again, strategy)


def _hand_case() -> Workload:
    """One node of 2 GPUs: g's job takes both for 2 h and cannot split in width (6 CPUs), so it splits
    into four 30-minute pieces that run one after another; other's CPU job runs beside them for 1 h."""
    g = WorkloadJob("g-0", "g", "g", 0.0, 7200.0, 7200.0, cpu=6, mem=16_000, gpu=2)
    other = WorkloadJob("other-0", "other", "other", 0.0, 3600.0, 3600.0, cpu=4, mem=8_000, gpu=0)
    return Workload("hand", "", (g, other), 1, NodeType(cpu=64, mem=512_000, gpu=2))


def test_the_measure_counts_pieces_by_their_share_and_completes_on_the_last() -> None:
    honest = _hand_case()
    gamed = build_gamed(honest, "split", account="g")
    result = simulate(gamed.workload, build_policy("fifo"), SimOptions())
    assert sorted(float(end) for end in result.end) == [1800.0, 3600.0, 3600.0, 5400.0, 7200.0]
    outcome = measure(honest, gamed, result, "g", horizon=4000.0)
    # Two of four pieces of a job worth 2 GPU-node-hours (both GPUs of the node for 2 h): 1.0.
    assert outcome.useful == pytest.approx(1.0)
    assert outcome.others == pytest.approx(useful_work(honest.jobs[1], honest.node_type)) == pytest.approx(4 / 64)
    assert outcome.completion == 7200.0
    plain = build_gamed(honest, "honest", account="g")
    unsplit = measure(honest, plain, simulate(plain.workload, build_policy("fifo"), SimOptions()), "g", 4000.0)
    assert unsplit.useful == 0.0 and unsplit.completion == 7200.0


def test_a_small_run_fills_every_field_and_rows_merge_by_seed() -> None:
    assert set(GAMING_POLICIES) <= set(ALL_POLICIES)
    rows = run_gaming(("split",), ("fifo", "drf"), (1,), jobs=60)
    assert [(row.strategy, row.policy) for row in rows] == [("split", "fifo"), ("split", "drf")]
    for row in rows:
        assert row.seeds == (1,)
        for values in (row.gain, row.others, row.sooner):
            assert len(values) == 1 and math.isfinite(values[0])
    more = [GainRow(r.strategy, r.policy, (2,), (0.5,), (-0.1,), (0.2,)) for r in rows]
    merged = merge_rows([*rows, *more])
    assert len(merged) == 2
    assert all(
        m.seeds == (1, 2) and m.gain[1] == 0.5 and m.median(m.others) == pytest.approx((r.others[0] - 0.1) / 2)
        for m, r in zip(merged, rows, strict=True)
    )
