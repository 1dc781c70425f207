"""Present and past usage shown apart (docs/rule.md §6): plan JSON, report, explain, metrics, check-config.

The numbers are the worked example of docs/rule.md §6 (tests/unit/history_example.py):
the past adds 11 CPUs and 1 GPU to physics, whose running usage is 0, so its
weighted share is 11/64 with the past and 0 without.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import orjson
import pytest

import slurm_drf.trail.explain as explain_module
from slurm_drf.cli.main import main
from slurm_drf.config.checks import history_warnings
from slurm_drf.config.load import parse_config_text
from slurm_drf.config.settings import HistoryConfig
from slurm_drf.cycle.run import CycleReport
from slurm_drf.model.snapshot_file import render_snapshot_bytes
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.trail.explain import explain_job, explain_planned
from slurm_drf.trail.explain_render import render_explanation_json, render_explanation_text
from slurm_drf.trail.history_db import AuditRecorder
from slurm_drf.trail.plan_output import render_plan_json, render_plan_json_bytes
from slurm_drf.trail.prometheus import MetricsRecorder
from slurm_drf.trail.share_report import REPORT_FORMATS, render_report
from tests.helpers import parse_samples, run_observe_verb
from tests.unit.builders import job, node, snapshot
from tests.unit.history_example import (
    CONFIG,
    DAY,
    PHYSICS_PAST,
    PHYSICS_SHARE,
    PURE,
    example_past,
    example_snapshot,
)


def _blended() -> Plan:
    return compute_plan(example_snapshot(), CONFIG, past=example_past())


def _accounts(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["account"]: a for a in data["accounts"]}


# --- the plan ---------------------------------------------------------------------------


def test_the_plan_keeps_the_past_apart_from_the_running_usage() -> None:
    plan = _blended()
    assert plan.blends_past
    physics = next(a for a in plan.accounts if a.account == "physics")
    assert dict(physics.usage) == {"cpu": 0, "gres/gpu": 0}
    assert dict(physics.past) == PHYSICS_PAST
    assert physics.weighted_share == PHYSICS_SHARE
    assert physics.present_share == 0.0
    assert not compute_plan(example_snapshot(), PURE, past=example_past()).blends_past


def test_plan_json_gains_past_and_present_share_with_history() -> None:
    plan = _blended()
    data = render_plan_json(plan)
    accounts = _accounts(data)
    assert accounts["physics"]["past"] == PHYSICS_PAST
    assert accounts["physics"]["present_share"] == 0.0
    assert accounts["physics"]["weighted_share"] == PHYSICS_SHARE
    assert accounts["physics"]["shares"] == {"cpu": 11 / 64, "gres/gpu": 1 / 8}
    assert accounts["chemistry"]["past"] == {} and accounts["chemistry"]["present_share"] == 0.0
    # Beside the keys they explain: the past after usage, the present share before the blended one.
    keys = list(accounts["physics"])
    assert keys.index("usage") + 1 == keys.index("past")
    assert keys.index("present_share") + 1 == keys.index("weighted_share")
    # The fast writer gives the same document.
    assert render_plan_json_bytes(plan) == orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n"


def test_present_share_is_the_share_of_the_running_usage_alone() -> None:
    # physics runs 8 CPUs (1/8) and carries a past; weight 2 halves both shares.
    snap = snapshot(
        [node(cpu=64, mem=256_000, gpu=8)],
        [job("physics", state="RUNNING", cpu=8), job("physics"), job("chemistry", cpu=1)],
    )
    config = dataclasses.replace(CONFIG, weights={"physics": Fraction(2)})
    plan = compute_plan(snap, config, past={"default": {"physics": {"cpu": 16.0}}})
    physics = next(a for a in plan.accounts if a.account == "physics")
    assert dict(physics.past) == {"cpu": 8}
    assert physics.present_share == pytest.approx(8 / 64 / 2)
    assert physics.weighted_share == pytest.approx(16 / 64 / 2)


def _pure_and_unused_past_plans() -> list[tuple[Plan, Plan]]:
    snap = example_snapshot()
    base = compute_plan(snap, PURE)
    return [
        (base, compute_plan(snap, PURE, past=example_past())),  # history off: the past is ignored
        (base, compute_plan(snap, CONFIG)),  # history on, no past given (plan --snapshot)
        (base, compute_plan(snap, CONFIG, past={})),  # history on, nothing known yet
        (base, compute_plan(snap, CONFIG, past={"default": {"physics": {"cpu": 0.4}}})),  # rounds to 0
        (base, compute_plan(snap, CONFIG, past={"elsewhere": {"physics": {"cpu": 64.0}}})),  # another pool
        (base, compute_plan(snap, dataclasses.replace(CONFIG, history=HistoryConfig(DAY, 0.0)), past=example_past())),
    ]


@pytest.mark.parametrize("case", range(6))
def test_without_a_past_that_counts_every_output_is_unchanged(case: int) -> None:
    base, other = _pure_and_unused_past_plans()[case]
    assert not other.blends_past
    assert render_plan_json_bytes(other) == render_plan_json_bytes(base)
    for fmt in REPORT_FORMATS:
        assert render_report(other, fmt) == render_report(base, fmt)
    assert "past" not in render_report(other, "table")
    for job_id in ("100", "110"):
        one = explain_job(other, example_snapshot(), job_id, base)
        assert one.history is None
        assert render_explanation_json(one) == render_explanation_json(explain_job(base, example_snapshot(), job_id))
        assert "history" not in render_explanation_text(one)


# --- the share report ---------------------------------------------------------------------


def _table_rows(text: str, header: str) -> dict[str, list[str]]:
    """The rows under the header line starting with `header`, by account (the first word)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 2 :]:
        if not line.strip() or line.startswith(("served", "history", "warning")):
            break
        cells = line.split()
        rows[cells[0] if header == "account" else cells[1]] = cells
    return rows


def test_report_table_shows_the_past_in_its_own_table() -> None:
    text = render_report(_blended(), "table")
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("account "))
    assert header.split("  ")[0] == "account"
    assert [h.strip() for h in header.split("  ") if h.strip()] == [
        "account",
        "cpu past",
        "gres/gpu past",
        "present share",
        "weighted share",
    ]
    past = _table_rows(text, "account")
    assert past["physics"] == ["physics", "11", "1", "0.0000", "0.1719"]
    assert past["chemistry"] == ["chemistry", "0", "0", "0.0000", "0.0000"]
    # The first table keeps its columns: running usage 0, blended shares, physics ranked 2nd.
    main_rows = _table_rows(text, "rank")
    assert main_rows["physics"][:7] == ["2", "physics", "1", "0", "3", "0", "0"]
    assert main_rows["physics"][7:] == ["0.1719", "0.1250", "cpu", "0.1719", "0.1719"]
    assert any(line.startswith("history: used (above) is the running allocation") for line in lines)


def test_report_json_csv_markdown_html_show_the_past() -> None:
    plan = _blended()
    data = json.loads(render_report(plan, "json"))
    physics = next(a for a in data["pools"][0]["accounts"] if a["account"] == "physics")
    assert physics["past"] == PHYSICS_PAST and physics["usage"] == {"cpu": 0, "gres/gpu": 0}
    assert physics["present_share"] == 0.0 and physics["weighted_share"] == PHYSICS_SHARE
    rows = {r["account"]: r for r in csv.DictReader(io.StringIO(render_report(plan, "csv")))}
    assert (rows["physics"]["past:cpu"], rows["physics"]["past:gres/gpu"]) == ("11", "1")
    assert (rows["physics"]["usage:cpu"], rows["physics"]["present_share"]) == ("0", "0.0")
    assert float(rows["physics"]["weighted_share"]) == PHYSICS_SHARE
    markdown = render_report(plan, "markdown")
    assert "| account | cpu past | gres/gpu past | present share | weighted share |" in markdown
    assert "| physics | 11 | 1 | 0.0000 | 0.1719 |" in markdown
    page = render_report(plan, "html")
    assert '<table class="shares history">' in page
    assert '<td class="text account">physics</td><td>11</td><td>1</td><td>0.0000</td><td>0.1719</td>' in page


# --- explain ---------------------------------------------------------------------------------


def test_explain_says_how_much_of_the_place_comes_from_history() -> None:
    snap = example_snapshot()
    pure = compute_plan(snap, PURE)
    pure_order = next(j.order for j in pure.jobs if j.job_id == "100")
    assert pure_order in (0, 1)  # without the past the accounts alternate from the first job
    e = explain_planned(snap, CONFIG, "100", past=example_past())
    assert (e.order, e.level) == (2, PHYSICS_SHARE)
    assert e.history is not None
    assert dict(e.history.added) == PHYSICS_PAST
    assert (e.history.present_share, e.history.weighted_share) == (0.0, PHYSICS_SHARE)
    assert (e.history.order_without, e.history.level_without) == (pure_order, 0.0)
    text = render_explanation_text(e)
    assert (
        "history: the decayed past adds cpu=11, gres/gpu=1 to physics's usage "
        "(weighted share 0.0000 running alone, 0.1719 with the past)"
    ) in text
    assert f"without it this job would be at place {pure_order} instead of 2 (level 0 instead of 0.171875)" in text
    assert "over its running usage and past plus its 0 earlier" in text
    assert render_explanation_json(e)["history"] == {
        "past": PHYSICS_PAST,
        "present_share": 0.0,
        "weighted_share": PHYSICS_SHARE,
        "order_without": pure_order,
        "level_without": 0.0,
    }
    # chemistry has no past, but physics' moves it: its second job goes from place 2 or 3 to 1.
    second = explain_planned(snap, CONFIG, "111", past=example_past())
    assert second.history is not None and dict(second.history.added) == {}
    assert (second.order, second.history.order_without) == (1, next(j.order for j in pure.jobs if j.job_id == "111"))
    assert "adds nothing to chemistry's usage" in render_explanation_text(second)


def test_explain_plans_again_only_when_a_past_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    real = compute_plan

    def counting(*args: Any, **kwargs: Any) -> Plan:
        calls.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(explain_module, "compute_plan", counting)
    snap = example_snapshot()
    for config, past, plans in (
        (PURE, example_past(), 1),
        (CONFIG, None, 1),
        (CONFIG, {}, 1),
        (CONFIG, example_past(), 2),
    ):
        calls.clear()
        e = explain_planned(snap, config, "100", past=past)
        assert len(calls) == plans
        assert (e.history is not None) == (plans == 2)


def test_explain_of_a_running_job_shows_its_account_past() -> None:
    snap = example_snapshot()
    snap = dataclasses.replace(snap, jobs=(*snap.jobs, job("physics", job_id="90", state="RUNNING", cpu=2, gpu=1)))
    e = explain_planned(snap, CONFIG, "90", past=example_past())
    assert e.status == "running" and e.history is not None
    assert dict(e.history.added) == PHYSICS_PAST and e.history.order_without is None
    assert "without it" not in render_explanation_text(e)


# --- metrics -----------------------------------------------------------------------------------


def _cycle(plan: Plan) -> CycleReport:
    return CycleReport(plan, example_snapshot(), (), None, 0.0, 0.0, 0, True)


def test_metrics_show_the_past_per_account_and_resource_and_drop_it_without() -> None:
    recorder = MetricsRecorder(clock=lambda: 0.0)
    recorder.on_cycle(_cycle(_blended()))
    samples = parse_samples(recorder.render().decode())

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted({"pool": "default", **labels}.items())))]

    assert value("slurm_drf_account_past_usage", account="physics", resource="cpu") == 11
    assert value("slurm_drf_account_past_usage", account="physics", resource="gres/gpu") == 1
    assert value("slurm_drf_account_past_usage", account="chemistry", resource="cpu") == 0
    assert value("slurm_drf_present_share", account="physics") == 0.0
    assert value("slurm_drf_weighted_share", account="physics") == PHYSICS_SHARE
    past_series = {k for k in samples if k[0] == "slurm_drf_account_past_usage"}
    assert len(past_series) == 2 * 2  # accounts x configured resources, no other label
    assert {label for _, labels in past_series for label, _ in labels} == {"pool", "account", "resource"}
    # History off the next cycle: the history series go, the others stay.
    recorder.on_cycle(_cycle(compute_plan(example_snapshot(), PURE)))
    samples = parse_samples(recorder.render().decode())
    assert not [k for k in samples if k[0] in ("slurm_drf_account_past_usage", "slurm_drf_present_share")]
    assert ("slurm_drf_weighted_share", (("account", "physics"), ("pool", "default"))) in samples


# --- check-config -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "warned"),
    [
        ("retention_days: 30\nhistory: {half_life: 14d}\n", "c.yaml:1: retention_days: 30 day(s) is shorter than 3"),
        ("history: {half_life: 40d}\n", "c.yaml:1: retention_days: 90 day(s) is shorter than 3"),  # the default 90
        ("retention_days: 42\nhistory: {half_life: 14d}\n", None),
        ("retention_days: null\nhistory: {half_life: 14d}\n", None),
        ("retention_days: 1\nhistory: {half_life: 14d, weight: 0}\n", None),
        ("retention_days: 1\n", None),
        # The old name: the warning names the key the file writes.
        ("history_days: 30\nhistory: {half_life: 14d}\n", "c.yaml:1: history_days: 30 day(s) is shorter than 3"),
    ],
)
def test_check_config_warns_when_retention_days_cuts_the_past_short(text: str, warned: str | None) -> None:
    warnings = history_warnings(parse_config_text(text, "c.yaml"))
    if warned is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and warnings[0].startswith(warned)
        assert "cut short" in warnings[0]


def test_check_config_prints_the_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("interval: 60s\nretention_days: 7\nhistory:\n  half_life: 7d\n")
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"warning: {path}:2: retention_days: 7 day(s) is shorter than 3 half-lives" in out
    assert "keep retention_days at 21 or more" in out


# --- the verbs read the past from the daemon's history ----------------------------------------------


def _record_history(state_dir: Path) -> None:
    """Half an hour of cycles, one a minute up to a minute ago, physics running 64 CPUs and 8 GPUs."""
    now = time.time()
    moments = iter([now - 60.0 * (30 - i) for i in range(30)])
    recorder = AuditRecorder(state_dir, None, clock=lambda: next(moments))
    running = snapshot([node(cpu=64, mem=256_000, gpu=8)], [job("physics", state="RUNNING", cpu=64, gpu=8)])
    plan = compute_plan(running, PURE)
    for _ in range(30):
        recorder.on_cycle(CycleReport(plan, running, (), None, 0.0, 0.0, 0, False))


def test_report_and_explain_read_the_past_from_the_state_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    _record_history(state)
    snap = tmp_path / "snap.json"
    snap.write_bytes(render_snapshot_bytes(example_snapshot()))
    config = tmp_path / "c.yaml"
    config.write_text("interval: 60s\nresources: [cpu, gres/gpu]\nhistory: {half_life: 1h, weight: 1}\n")
    common = ["--snapshot", str(snap), "--config", str(config)]
    assert run_observe_verb(["report", *common, "--state-dir", str(state), "--format", "json"]) == 0
    physics = next(a for a in json.loads(capsys.readouterr().out)["pools"][0]["accounts"] if a["account"] == "physics")
    # A constant use averages to itself, whatever the decay.
    assert physics["past"] == {"cpu": 64, "gres/gpu": 8} and physics["present_share"] == 0.0
    assert run_observe_verb(["explain", "100", *common, "--state-dir", str(state)]) == 0
    assert "history: the decayed past adds cpu=64, gres/gpu=8 to physics's usage" in capsys.readouterr().out
    # A snapshot without --state-dir has no history: pure DRF, as `plan --snapshot`.
    assert run_observe_verb(["report", *common, "--format", "json"]) == 0
    assert "past" not in json.loads(capsys.readouterr().out)["pools"][0]["accounts"][0]
