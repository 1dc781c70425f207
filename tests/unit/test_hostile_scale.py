"""Costs that grew with accounts squared (issue 22, item 4): no per-account scan inside a per-account loop."""

from __future__ import annotations

import pytest
from builders import job, node, snapshot

from slurm_drf.config.settings import Config
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.trail.plan_output import render_plan_json, render_plan_json_bytes
from slurm_drf.trail.share_report import REPORT_FORMATS, render_report


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
