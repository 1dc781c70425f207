"""Costs that grew with accounts squared (issue 22, item 4): no per-account scan inside a per-account loop."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from fractions import Fraction
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_drf.config.settings import Config, PoolConfig
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.policy.plan_columns import AccountColumns, AccountShare, PlanAccounts
from slurm_drf.policy.pools import fraction_parts
from slurm_drf.policy.rule import rotation_key
from slurm_drf.policy.state import TieBook, rotation_key_list
from slurm_drf.trail.explain import explain_job
from slurm_drf.trail.plan_output import render_plan_json, render_plan_json_bytes
from slurm_drf.trail.share_report import (
    REPORT_FORMATS,
    build_report,
    render_report,
    render_report_json,
    render_report_json_bytes,
)
from tests.unit.builders import job, node, snapshot


def many_accounts(count: int) -> Plan:
    jobs = [job(f"acct{a:05d}", job_id=f"{a}-{k}", cpu=1) for a in range(count) for k in range(2)]
    return compute_plan(snapshot([node(cpu=64)], jobs), Config(resources=("cpu",)))


@pytest.mark.parametrize("render", ["json", "json-bytes", *REPORT_FORMATS])
def test_outputs_read_whether_the_plan_blends_a_past_once_not_per_account(
    render: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = many_accounts(500)
    calls: list[int] = []
    original = Plan.blends_past

    def counted(self: Plan) -> bool:
        calls.append(1)
        return bool(original.fget(self))  # type: ignore[attr-defined]

    monkeypatch.setattr(Plan, "blends_past", property(counted))
    if render == "json":
        data = render_plan_json(plan)
        assert len(data["accounts"]) == 500
    elif render == "json-bytes":
        assert render_plan_json_bytes(plan)
    else:
        assert render_report(plan, render)
    assert 1 <= len(calls) <= 2


def test_plan_json_and_report_json_make_no_account_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = many_accounts(300)
    made: list[int] = []
    original = AccountColumns.rows

    def counted(self: AccountColumns, positions: Sequence[int] | None = None) -> list[AccountShare]:
        made.append(len(self) if positions is None else len(positions))
        return original(self, positions)

    monkeypatch.setattr(AccountColumns, "rows", counted)
    data = orjson.loads(render_plan_json_bytes(plan))
    report = orjson.loads(render_report(plan, "json"))
    assert made == []
    assert len(data["accounts"]) == len(report["pools"][0]["accounts"]) == 300
    # explain reads its own account's row alone.
    snap = snapshot(
        [node(cpu=64)], [job(f"acct{a:05d}", job_id=f"{a}-{k}", cpu=1) for a in range(300) for k in range(2)]
    )
    share = explain_job(plan, snap, "299-1").account_share
    assert made == [1]
    assert share is not None and share.account == "acct00299" and share.pending_jobs == 2


def test_account_rows_made_from_the_columns_are_the_rows() -> None:
    plan = compute_plan(
        snapshot(
            [node(cpu=64, gpu=8), node("n2", partitions=("b",), cpu=32)],
            [
                job("physics", cpu=8, gpu=2, state="RUNNING"),
                job("physics", cpu=4),
                job("chemistry", cpu=16, state="RUNNING"),
                job("biology", cpu=1, partition="b"),
                job("idle", cpu=0, gpu=0),
            ],
        ),
        Config(resources=("cpu", "gres/gpu"), pools=(PoolConfig("a", ("main",)), PoolConfig("b", ("b",)))),
    )
    accounts = plan.accounts
    assert isinstance(accounts, PlanAccounts)
    # Row by row (bisecting the pools), then all at once.
    one_by_one = [accounts.row(i) for i in range(len(accounts))]
    rows = list(accounts)
    assert one_by_one == rows and [a.pool for a in rows] == ["a"] * 3 + ["b"]
    assert plan.account_column("account") == [a.account for a in rows]
    assert plan.account_column("pool") == [a.pool for a in rows]
    assert plan.account_column("present_share") == [None] * len(rows)
    with pytest.raises(KeyError):
        plan.account_column("usage")
    for a in rows:
        assert plan.account_share(a.pool, a.account) == a
    assert plan.account_share("a", "nobody") is None and plan.account_share("b", "physics") is None
    physics = next(a for a in rows if a.account == "physics")
    assert dict(physics.usage) == {"cpu": 8, "gres/gpu": 2} and physics.dominant_resource == "gres/gpu"
    # idle uses nothing; chemistry (16/64 CPUs) and physics (2/8 GPUs) hold equal shares: one rank.
    assert [(a.account, a.rank) for a in rows if a.pool == "a"] == [("idle", 1), ("chemistry", 2), ("physics", 2)]


@st.composite
def _tie_inputs(draw: st.DrawFn) -> tuple[list[int], list[str], dict[str, float]]:
    """Rows, their accounts' names (one row each) and the accounts' committed tie wins (some none)."""
    names = draw(st.lists(st.sampled_from([f"a{i}" for i in range(12)]), min_size=2, max_size=12, unique=True))
    wins = {name: float(draw(st.integers(0, 2))) for name in names if draw(st.booleans())}
    return list(range(len(names))), names, wins


@settings(max_examples=200, deadline=None)
@given(data=st.data(), collide=st.booleans())
def test_a_tie_of_one_job_per_account_is_the_heaps_order(data: st.DataObject, collide: bool) -> None:
    """TieBook.take_one_each (one sort) takes a tie as take_turns (the heap) would, wins counted alike."""
    rows, names, committed = data.draw(_tie_inputs())
    earlier = {name: 1.0 for name in names[::2]}  # wins of an earlier tie of this plan
    sorted_wins, sorted_plan = dict(committed), dict(earlier)
    heap_wins, heap_plan = dict(committed), dict(earlier)
    with contextlib.ExitStack() as stack:
        if collide:  # with every rotation key alike, the names decide
            stack.enter_context(mock.patch("slurm_drf.policy.state.rotation_key", lambda epoch, name: 7))
            stack.enter_context(
                mock.patch("slurm_drf.policy.state.rotation_key_list", lambda epoch, keys: [7] * len(keys))
            )
        placed, held = TieBook(3, sorted_wins, sorted_plan).take_one_each(names)
        turns, turn_held, won = TieBook(3, heap_wins, heap_plan).take_turns(
            {row: [row] for row in rows}, dict(zip(rows, names, strict=True))
        )
    assert [rows[i] for i in placed] == turns and held == turn_held and won == len(rows) - 1
    assert sorted_wins == heap_wins and list(sorted_plan.items()) == list(heap_plan.items())


def test_rotation_keys_in_one_loop_are_rotation_key() -> None:
    names = ["physics", "", "a/b", "user=x", "ü"]
    assert rotation_key_list(5, names) == [rotation_key(5, name) for name in names]


def test_fraction_parts_read_shared_and_distinct_weights() -> None:
    half = Fraction(1, 2)
    numerators, denominators = fraction_parts([half, Fraction(3), half, Fraction(2, 6)])
    assert numerators.tolist() == [1.0, 3.0, 1.0, 1.0] and denominators.tolist() == [2.0, 1.0, 2.0, 3.0]
    empty = fraction_parts([])
    assert empty[0].shape == empty[1].shape == (0,)


def _report_plans() -> list[Plan]:
    from tests.helpers import load_report_plan
    from tests.unit.history_example import CONFIG, example_past, example_snapshot
    from tests.unit.trail.test_tree_shown import physics_plan

    hostile = [job(name, cpu=1 + k) for k, name in enumerate(["a", 'quote"', "new\nline", "\x00nul", "ü", ""])]
    return [
        load_report_plan()[0],  # two pools, weights
        compute_plan(example_snapshot(), CONFIG, past=example_past()),  # a past: `past` and `present_share`
        physics_plan()[0],  # a tree
        compute_plan(snapshot([node(cpu=64)], hostile[:-1]), Config(resources=("cpu",))),
        compute_plan(snapshot([node(cpu=64)], []), Config(resources=())),  # no accounts, no resources
    ]


@pytest.mark.parametrize("case", range(5))
def test_report_json_from_the_columns_is_orjson_of_the_report_data(case: int) -> None:
    plan = _report_plans()[case]
    report = build_report(plan)
    expected = orjson.dumps(render_report_json(report), option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    assert render_report_json_bytes(report) == expected
    assert render_report(plan, "json") == expected.decode()
