"""`explain_job`: the reasons it gives agree with the engine's order."""

from __future__ import annotations

from fractions import Fraction
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_drf.config.settings import Config, PoolConfig
from slurm_drf.errors import InputError
from slurm_drf.model.types import Snapshot
from slurm_drf.policy.plan import compute_plan
from slurm_drf.policy.state import PolicyState, running_fingerprint
from slurm_drf.trail.explain import explain_job
from slurm_drf.trail.explain_render import render_explanation_json, render_explanation_text
from tests.helpers import load_report_plan
from tests.unit.builders import job, node, snapshot

CONFIG = Config(resources=("cpu", "mem"))


def test_ordered_job_in_the_fixture() -> None:
    plan, snap = load_report_plan()
    e = explain_job(plan, snap, "204")
    assert (e.status, e.account, e.pool, e.order, e.pool_jobs) == ("ordered", "physics", "gpu", 2, 4)
    # Level over running usage (24 cpu, 147456 mem, 6 gpu) plus job 201 (8, 65536, 2), weight 2.
    assert dict(e.usage_before) == {"cpu": 32, "mem": 212992, "gres/gpu": 8}
    assert e.level_exact == Fraction(8, 16) / 2
    assert (e.band, e.exact) == ("exact", 4)
    assert e.earlier_own == 1
    assert {(a.account, a.jobs): dict(a.reasons) for a in e.ahead} == {
        ("newteam", 1): {"lower_level": 1},
        ("physics", 1): {"own_queue": 1},
    }
    assert (e.ahead_total, e.behind, e.tie) == (2, 1, False)
    assert e.value == plan.jobs[2].value
    assert (e.current, e.action) == (0, "set")
    text = render_explanation_text(e)
    assert "place 2 of 4" in text and "1 lower level" in text and "no tie" in text
    assert render_explanation_json(e)["level_exact"] == "1/4"


def test_array_task_finds_its_record_and_counts_all_tasks() -> None:
    plan, snap = load_report_plan()
    e = explain_job(plan, snap, "203_2")
    assert (e.job_id, e.array_tasks, e.order) == ("203", 4, 0)
    assert dict(e.demand) == {"cpu": 16, "mem": 32768, "gres/gpu": 4}


@pytest.mark.parametrize(
    ("job_id", "status", "reason"),
    [("206", "skipped", "held"), ("208", "skipped", "partition not managed"), ("101", "running", None)],
)
def test_jobs_the_plan_does_not_order(job_id: str, status: str, reason: str | None) -> None:
    plan, snap = load_report_plan()
    e = explain_job(plan, snap, job_id)
    assert (e.status, e.reason, e.order) == (status, reason, None)
    if status == "running":
        assert e.pool == "gpu" and e.account_share is not None and e.account_share.running_jobs == 2
        assert "counts in its account's usage" in render_explanation_text(e)
    else:
        assert e.action == "skip"
        assert f"skipped: {reason}" in render_explanation_text(e)


def test_unknown_job_is_an_input_error() -> None:
    plan, snap = load_report_plan()
    with pytest.raises(InputError, match="job 999: not in the queue"):
        explain_job(plan, snap, "999")


def _tied_cluster() -> Snapshot:
    nodes = [node("n1", cpu=100, mem=1000)]
    jobs = [
        job("a", "RUNNING", job_id="1", cpu=10, mem=100),
        job("b", "RUNNING", job_id="2", cpu=10, mem=100),
        job("a", job_id="11", submit_time=1, cpu=10, mem=100),
        job("a", job_id="12", submit_time=2, cpu=10, mem=100),
        job("b", job_id="21", submit_time=3, cpu=10, mem=100),
        job("b", job_id="22", submit_time=4, cpu=10, mem=100),
        # c: same level as the others' first jobs, smaller share vector (no memory).
        job("c", "RUNNING", job_id="3", cpu=10),
        job("c", job_id="31", submit_time=5, cpu=10),
    ]
    return snapshot(nodes, jobs)


def test_tie_decided_by_tie_wins() -> None:
    snap = _tied_cluster()
    fingerprint = running_fingerprint(["1", "2", "3"])
    state = PolicyState(epoch=7, fingerprint=fingerprint, tie_wins=MappingProxyType({"a": 3.0}))
    plan = compute_plan(snap, CONFIG, state)
    order = [j.job_id for j in plan.jobs if j.order is not None]
    # c's share vector (0.1, 0) beats (0.1, 0.1); b has fewer tie wins than a.
    assert order[:3] == ["31", "21", "11"]
    e = explain_job(plan, snap, "11")
    assert e.tie and e.tie_replayed and e.tie_detail is not None
    assert {a.account: dict(a.reasons) for a in e.ahead} == {"c": {"share_vector": 1}, "b": {"tie_wins": 1}}
    assert sorted(e.tie_detail.accounts) == ["a", "b"]
    assert dict(e.tie_detail.wins) == {"a": 3.0, "b": 0.0}
    assert (e.tie_detail.lost_to, e.tie_detail.won_against) == (1, 0)
    text = render_explanation_text(e)
    assert "a tie decided its place" in text and "fewer recent tie wins" in text


def test_tie_decided_by_rotation() -> None:
    snap = _tied_cluster()
    plan = compute_plan(snap, CONFIG)
    ordered = [j for j in plan.jobs if j.order is not None]
    first, second = ordered[1], ordered[2]
    assert {first.job_id, second.job_id} == {"11", "21"}
    e = explain_job(plan, snap, second.job_id)
    assert {a.account: dict(a.reasons) for a in e.ahead}[first.account] == {"rotation": 1}
    assert e.tie_detail is not None
    assert e.tie_detail.rotation_rank[first.account] == 1
    # The winner now has one tie win: the next tie (the second jobs) goes to the other account.
    later = explain_job(plan, snap, "12" if first.account == "a" else "22")
    assert {a.account: dict(a.reasons) for a in later.ahead} == {
        first.account: {"own_queue": 1},
        second.account: {"lower_level": 1, "tie_wins": 1},
        "c": {"lower_level": 1},
    }
    assert later.tie_detail is not None and later.tie_detail.wins[first.account] == 1.0


@st.composite
def _clusters(draw: st.DrawFn) -> tuple[Snapshot, Config, PolicyState]:
    accounts = draw(st.lists(st.sampled_from("abcde"), min_size=2, max_size=5, unique=True))
    jobs = []
    number = 100
    for account in accounts:
        for _ in range(draw(st.integers(0, 2))):
            number += 1
            jobs.append(
                job(
                    account,
                    "RUNNING",
                    job_id=str(number),
                    partition=draw(st.sampled_from(["p", "q"])),
                    cpu=draw(st.sampled_from([0, 4, 8])),
                    mem=draw(st.sampled_from([0, 100, 200])),
                )
            )
        for _ in range(draw(st.integers(1, 4))):
            number += 1
            jobs.append(
                job(
                    account,
                    job_id=str(number),
                    submit_time=number,
                    partition=draw(st.sampled_from(["p", "q"])),
                    cpu=draw(st.sampled_from([0, 4, 8])),
                    mem=draw(st.sampled_from([0, 100, 200])),
                    array_tasks=draw(st.sampled_from([1, 1, 2])),
                )
            )
    nodes = [node("n1", ["p"], cpu=32, mem=800), node("n2", ["q"], cpu=16, mem=400)]
    weights = {a: Fraction(draw(st.sampled_from([1, 1, 2]))) for a in accounts}
    config = Config(
        resources=("cpu", "mem"),
        weights=MappingProxyType(weights),
        pools=(PoolConfig("p", ("p",)), PoolConfig("q", ("q",))),
    )
    wins = {a: float(draw(st.sampled_from([0, 0, 1, 2.5]))) for a in accounts}
    state = PolicyState(epoch=draw(st.integers(0, 50)), tie_wins=MappingProxyType(wins))
    return snapshot(nodes, jobs), config, state


@settings(max_examples=150, deadline=None)
@given(_clusters())
def test_reasons_account_for_every_job_ahead(case: tuple[Snapshot, Config, PolicyState]) -> None:
    snap, config, state = case
    plan = compute_plan(snap, config, state)
    for planned in plan.jobs:
        if planned.order is None:
            continue
        e = explain_job(plan, snap, planned.job_id)
        # Every tie comes with its detail from the engine's record (wins carried across pools).
        assert e.tie_replayed
        assert e.ahead_total == planned.order
        assert sum(a.jobs for a in e.ahead) == planned.order
        ahead = [j for j in plan.jobs if j.pool == planned.pool and j.order is not None and j.order < planned.order]
        assert {a.account: a.jobs for a in e.ahead} == {
            account: sum(1 for j in ahead if j.account == account) for account in {j.account for j in ahead}
        }
        assert e.earlier_own == sum(1 for j in ahead if j.account == planned.account)
        assert "tie" not in {k for a in e.ahead for k in a.reasons}
        assert float(e.level_exact or 0) == planned.level
        assert e.tie == planned.tie
        assert (e.tie_detail is not None) == planned.tie
        if any(k in ("tie_wins", "rotation") for a in e.ahead for k in a.reasons):
            assert planned.tie
