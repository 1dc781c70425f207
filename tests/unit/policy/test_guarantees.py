"""Guarantees and limits in the order (slurm_drf/policy/guarantees.py, docs/rule.md §9)."""

from __future__ import annotations

from fractions import Fraction
from types import MappingProxyType

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_drf.config.settings import Amounts, Config, ReclaimConfig
from slurm_drf.model.types import IntArray
from slurm_drf.policy.guarantees import ORDINARY, OVER, UNNAMED, WITHIN, PoolBounds, arrange
from slurm_drf.policy.plan import compute_plan
from tests.unit.builders import job, node, snapshot

Queue = tuple[IntArray, IntArray, IntArray, PoolBounds]


@st.composite
def _queues(draw: st.DrawFn) -> Queue:
    """A DRF order of 0-12 jobs of 1-4 accounts over 2 resources, and 0-3 groups of accounts with
    guarantees and limits (each resource named or not)."""
    accounts = draw(st.integers(1, 4))
    count = draw(st.integers(0, 12))
    account_of = np.array([draw(st.integers(0, accounts - 1)) for _ in range(count)], dtype=np.int64)
    demand = np.array([[draw(st.integers(0, 6)), draw(st.integers(0, 6))] for _ in range(count)], dtype=np.int64)
    demand = demand.reshape(count, 2)
    usage = np.array([[draw(st.integers(0, 8)), draw(st.integers(0, 8))] for _ in range(accounts)], dtype=np.int64)
    order = np.array(draw(st.permutations(range(count))), dtype=np.int64)
    groups = draw(st.integers(0, 3))
    bound = st.lists(st.sampled_from([UNNAMED, UNNAMED, 0, 4, 10, 20]), min_size=2, max_size=2)
    members = np.array([[draw(st.booleans()) for _ in range(accounts)] for _ in range(groups)], dtype=np.bool_).reshape(
        groups, accounts
    )
    guarantee = np.array([draw(bound) for _ in range(groups)], dtype=np.int64).reshape(groups, 2)
    limit = np.array([draw(bound) for _ in range(groups)], dtype=np.int64).reshape(groups, 2)
    bounds = PoolBounds(tuple(str(g) for g in range(groups)), members, guarantee, limit)
    return order, account_of, demand, usage, bounds  # type: ignore[return-value]


def _level(used: np.ndarray, bounds: PoolBounds, account: int) -> Fraction:
    worst = Fraction(0)
    for g in np.flatnonzero(bounds.members[:, account]).tolist():
        for r, amount in enumerate(bounds.guarantee[g].tolist()):
            if amount not in (UNNAMED, 0):
                worst = max(worst, Fraction(int(used[g, r]), amount))
    return worst


@settings(max_examples=400, deadline=None)
@given(_queues())
def test_arrange_keeps_every_law_of_the_order(queue: tuple[IntArray, IntArray, IntArray, IntArray, PoolBounds]) -> None:
    order, account_of, demand, usage, bounds = queue
    arranged, part = arrange(order, account_of, demand, usage, bounds)
    assert sorted(arranged.tolist()) == sorted(order.tolist())
    parts = part[arranged].tolist()
    assert parts == sorted(parts), "within guarantees first, then the ordinary order, then over limits"
    position = {j: p for p, j in enumerate(order.tolist())}
    # The ordinary and over-limit parts keep the DRF order; every account keeps its own order.
    for kept in (ORDINARY, OVER):
        jobs = [j for j in arranged.tolist() if part[j] == kept]
        assert jobs == sorted(jobs, key=position.__getitem__)
    for a in set(account_of.tolist()):
        own = [j for j in arranged.tolist() if account_of[j] == a]
        assert own == sorted(own, key=position.__getitem__)
    running = bounds.members.astype(np.int64) @ usage
    # Within: every guaranteed group covering the job stays within its guarantee with all its
    # jobs found within, and one group at least has one.
    taken = running.copy()
    served = np.zeros(len(bounds.keys), dtype=np.bool_)
    for j in arranged.tolist():
        if part[j] != WITHIN:
            continue
        covering = [g for g in np.flatnonzero(bounds.members[:, account_of[j]]).tolist()]
        guaranteed = [g for g in covering if (bounds.guarantee[g] != UNNAMED).any()]
        assert guaranteed
        for g in guaranteed:
            taken[g] += demand[j]
            served[g] = True
    for g in np.flatnonzero(served).tolist():
        named = bounds.guarantee[g] != UNNAMED
        assert (taken[g][named] <= bounds.guarantee[g][named]).all()
    # The guaranteed part is the DRF loop over shares relative to the guarantees: each job's
    # account was, when it was taken, no further up its guarantee than any other account waiting.
    used = running.copy()
    within = [j for j in arranged.tolist() if part[j] == WITHIN]
    for k, j in enumerate(within):
        ours = _level(used, bounds, int(account_of[j]))
        for other in within[k + 1 :]:
            assert ours <= _level(used, bounds, int(account_of[other]))
        used[bounds.members[:, account_of[j]]] += demand[j]


@settings(max_examples=200, deadline=None)
@given(_queues())
def test_without_bounds_the_order_is_untouched(
    queue: tuple[IntArray, IntArray, IntArray, IntArray, PoolBounds],
) -> None:
    order, account_of, demand, usage, bounds = queue
    empty = PoolBounds((), bounds.members[:0], bounds.guarantee[:0], bounds.limit[:0])
    arranged, part = arrange(order, account_of, demand, usage, empty)
    assert arranged.tolist() == order.tolist()
    assert (part == ORDINARY).all()


RESOURCES = ("cpu", "mem", "gres/gpu")
NODES = [node(f"g{i}", cpu=64, mem=512_000, gpu=8) for i in range(4)]


def _plan(config: Config, extra: list | None = None):  # type: ignore[no-untyped-def,type-arg]
    jobs = [job("hog", state="RUNNING", cpu=8, gpu=8) for _ in range(4)]
    jobs += [job("hog", cpu=8, gpu=8, job_id=f"h{i}", submit_time=i) for i in range(3)]
    jobs += [job("newcomer", cpu=4, gpu=4, job_id=f"n{i}", submit_time=i) for i in range(6)]
    jobs += [job("cpu", cpu=32, job_id=f"c{i}", submit_time=i) for i in range(3)]
    return compute_plan(snapshot(NODES, jobs + (extra or [])), config)


def _config(**kwargs: object) -> Config:
    return Config(resources=RESOURCES, **kwargs)  # type: ignore[arg-type]


def test_a_guarantee_puts_the_jobs_within_it_first_and_a_limit_puts_the_jobs_over_it_last() -> None:
    plan = _plan(
        _config(
            guarantees=MappingProxyType({"newcomer": Amounts(amounts=MappingProxyType({"gres/gpu": 12}))}),
            limits=MappingProxyType({"hog": Amounts(fraction=Fraction(1, 2))}),
        )
    )
    ids, reasons = plan.column("job_id"), plan.column("reason")
    assert ids[:3] == ["n0", "n1", "n2"]
    assert reasons[:3] == ["within guarantee"] * 3
    assert ids[-3:] == ["h0", "h1", "h2"] and reasons[-3:] == ["over limit"] * 3
    assert set(ids[3:-3]) == {"n3", "n4", "n5", "c0", "c1", "c2"} and set(reasons[3:-3]) == {None}
    values = plan.column("value")
    assert values == sorted(values), "the values follow the arranged order"


def test_without_guarantees_the_plan_is_the_plain_drf_plan() -> None:
    plain = _plan(_config())
    unused = _plan(_config(guarantees=MappingProxyType({"nobody": Amounts(fraction=Fraction(1, 4))})))
    assert plain.column("job_id") == unused.column("job_id")
    assert plain.column("value") == unused.column("value")
    assert set(plain.column("reason")) == {None}


def test_guarantees_over_the_pool_are_ignored_there_with_a_warning() -> None:
    config = _config(
        guarantees=MappingProxyType(
            {
                "newcomer": Amounts(amounts=MappingProxyType({"gres/gpu": 24})),
                "cpu": Amounts(amounts=MappingProxyType({"gres/gpu": 16})),
            }
        )
    )
    plan = _plan(config)
    (warning,) = [w for w in plan.warnings if "guarantees" in w]
    assert "gres/gpu (40 of 32)" in warning and "ignored" in warning
    assert "within guarantee" not in plan.column("reason")


def test_share_floor_guarantees_a_share_of_the_fair_share_in_the_reclaim_pools_only() -> None:
    floor = ReclaimConfig(pools=("default",), share_floor=Fraction(1))
    plan = _plan(_config(reclaim=floor))
    # Three accounts of weight 1, each guaranteed a third of every resource: newcomer's first two
    # 4-GPU jobs fit in 10 GPUs, cpu's first two 32-CPU jobs in 85 CPUs; hog holds 32 GPUs already.
    assert set(plan.column("job_id")[:4]) == {"n0", "n1", "c0", "c1"}
    assert plan.column("reason")[:4] == ["within guarantee"] * 4
    assert "within guarantee" not in plan.column("reason")[4:]
    elsewhere = _plan(_config(reclaim=ReclaimConfig(pools=("gpu",), share_floor=Fraction(1))))
    assert set(elsewhere.column("reason")) == {None}


def test_explain_names_the_guarantee_and_the_limit_and_no_table_places_such_a_pool() -> None:
    from slurm_drf.policy.placement import build_table
    from slurm_drf.trail.explain import explain_job
    from slurm_drf.trail.explain_render import render_explanation_text

    config = _config(
        guarantees=MappingProxyType({"newcomer": Amounts(amounts=MappingProxyType({"gres/gpu": 8}))}),
        limits=MappingProxyType({"hog": Amounts(fraction=Fraction(1, 2))}),
    )
    jobs = [job("hog", state="RUNNING", cpu=8, gpu=8) for _ in range(4)]
    jobs += [job("hog", cpu=8, gpu=8, job_id="h0"), job("cpu", cpu=32, job_id="c0")]
    jobs += [job("newcomer", cpu=4, gpu=4, job_id=f"n{i}", submit_time=i) for i in range(3)]
    shot = snapshot(NODES, jobs)
    plan = compute_plan(shot, config)
    assert plan.column("job_id")[:2] == ["n0", "n1"]
    explained = explain_job(plan, shot, "c0")
    assert {a.account: dict(a.reasons) for a in explained.ahead}["newcomer"] == {"guarantee": 2}
    assert "within its account's guarantee" in render_explanation_text(explained)
    last = explain_job(plan, shot, "h0")
    assert last.order == len(plan.column("job_id")) - 1
    reasons = {a.account: dict(a.reasons) for a in last.ahead}
    assert reasons == {"newcomer": {"guarantee": 2, "limit": 1}, "cpu": {"limit": 1}}
    assert build_table(plan, config, 0.0).pools == ()


def test_over_a_tree_a_guarantee_covers_the_accounts_under_its_key_and_the_paths_follow_their_jobs() -> None:
    from tests.unit.policy.test_tree_plan import assoc, with_tree

    tree = [
        *assoc("root", None),
        *assoc("physics", "root"),
        *assoc("theory", "physics", "alice"),
        *assoc("lab", "physics", "bob"),
        *assoc("bio", "root", "carol"),
    ]
    jobs = [job("bio", state="RUNNING", user="carol", cpu=64, gpu=8) for _ in range(3)]
    jobs += [job("bio", user="carol", cpu=8, gpu=8, job_id=f"b{i}", submit_time=i) for i in range(3)]
    jobs += [job("theory", user="alice", cpu=4, gpu=4, job_id=f"t{i}", submit_time=10 + i) for i in range(3)]
    jobs += [job("lab", user="bob", cpu=4, gpu=4, job_id=f"l{i}", submit_time=20 + i) for i in range(3)]
    config = _config(guarantees=MappingProxyType({"physics": Amounts(amounts=MappingProxyType({"gres/gpu": 12}))}))
    plan = compute_plan(with_tree(snapshot(NODES, jobs), tree), config)
    ids, reasons, paths = plan.column("job_id"), plan.column("reason"), plan.column("path")
    # 12 GPUs for theory and lab together: three 4-GPU jobs of the two, before anything of bio's.
    assert reasons[:3] == ["within guarantee"] * 3 and "within guarantee" not in reasons[3:]
    assert {i[0] for i in ids[:3]} == {"t", "l"}
    owner = {j.job_id: j.account for j in jobs}
    for job_id, path in zip(ids, paths, strict=True):
        assert path is not None and f"/{owner[job_id]}/" in f"/{path}/", (job_id, path)
