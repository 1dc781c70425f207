"""Guarantees in the order (slurm_drf/policy/guarantees.py, docs/rule.md §9)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_drf.policy.guarantees import UNNAMED, guaranteed_first, within_guarantee
from slurm_drf.policy.order import compute_before


@st.composite
def _queues(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[list[int] | None]]:
    accounts = draw(st.integers(1, 4))
    sizes = [draw(st.integers(0, 6)) for _ in range(accounts)]
    account_of = np.repeat(np.arange(accounts, dtype=np.int64), sizes)
    demand = np.array([[draw(st.integers(0, 8)), draw(st.integers(0, 8))] for _ in account_of], dtype=np.int64)
    demand = demand.reshape(len(account_of), 2)
    usage = np.array([[draw(st.integers(0, 10)), draw(st.integers(0, 10))] for _ in range(accounts)], dtype=np.int64)
    guarantees: list[list[int] | None] = [
        draw(st.one_of(st.none(), st.lists(st.sampled_from([UNNAMED, 0, 5, 10, 20, 40]), min_size=2, max_size=2)))
        for _ in range(accounts)
    ]
    return account_of, compute_before(demand, account_of, usage), demand, guarantees


@settings(max_examples=300, deadline=None)
@given(_queues())
def test_a_job_is_within_its_guarantee_exactly_when_its_account_stays_within_it_with_it(
    queue: tuple[np.ndarray, np.ndarray, np.ndarray, list[list[int] | None]],
) -> None:
    account_of, before, demand, guarantees = queue
    within = within_guarantee(account_of, before, demand, guarantees)
    for job, account in enumerate(account_of.tolist()):
        guarantee = guarantees[account]
        expected = guarantee is not None and all(
            g == UNNAMED or b + d <= g for b, d, g in zip(before[job], demand[job], guarantee, strict=True)
        )
        assert bool(within[job]) == expected
    # Monotone down each account's jobs: none within after one that is not.
    for account in set(account_of.tolist()):
        rows = within[account_of == account].tolist()
        assert rows == sorted(rows, reverse=True)


@settings(max_examples=200, deadline=None)
@given(_queues())
def test_the_jobs_within_go_first_and_each_part_keeps_its_order(
    queue: tuple[np.ndarray, np.ndarray, np.ndarray, list[list[int] | None]],
) -> None:
    account_of, before, demand, guarantees = queue
    within = within_guarantee(account_of, before, demand, guarantees)
    order = np.random.default_rng(len(account_of)).permutation(len(account_of)).astype(np.int64)
    moved = guaranteed_first(order, within)
    assert sorted(moved.tolist()) == sorted(order.tolist())
    first = int(within.sum())
    assert within[moved[:first]].all() and not within[moved[first:]].any()
    for part in (moved[:first].tolist(), moved[first:].tolist()):
        positions = [order.tolist().index(job) for job in part]
        assert positions == sorted(positions)
