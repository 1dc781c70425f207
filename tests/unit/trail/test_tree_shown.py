"""The account tree seen everywhere (issue 12, item 5): plan JSON, report, explain, metrics.

The tree of most tests: root -> {chem -> dave, physics -> {lab -> carol, theory -> {alice, bob}}}
on 16 CPUs and 4 GPUs. alice runs 4 CPUs, carol 2 CPUs + 1 GPU; alice, bob and dave have one
pending job each (2, 2 and 1 CPUs).
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Sequence

import orjson
import pytest

from slurm_drf.config.settings import Config, HistoryConfig, WithinAccount
from slurm_drf.model.types import Association, Snapshot
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.trail.explain import explain_job
from slurm_drf.trail.explain_render import render_explanation_json, render_explanation_text
from slurm_drf.trail.plan_output import render_plan_json, render_plan_json_bytes
from slurm_drf.trail.prometheus import MetricsRecorder
from slurm_drf.trail.share_report import render_report
from tests.helpers import SampleKey, build_cycle_report, parse_samples
from tests.unit.builders import job, node, snapshot
from tests.unit.hostile.test_hostile_dos import HOSTILE

FLAT_JOB_KEYS = [
    "job_id",
    "account",
    "user",
    "pool",
    "order",
    "level",
    "nice",
    "current",
    "action",
    "reason",
    "tie",
    "user_nice",
    "array_tasks",
    "band",
]


def assoc(account: str, parent: str | None, *users: str, shares: int = 1) -> list[Association]:
    return [Association(account, parent, None, shares)] + [Association(account, account, u, 1) for u in users]


def config(within: WithinAccount = "user") -> Config:
    return dataclasses.replace(Config(resources=("cpu", "gres/gpu")), fairness_within_account=within)


def physics_snapshot(accounts: Sequence[Association] | None = None) -> Snapshot:
    jobs = [
        job("theory", "RUNNING", job_id="r1", user="alice", cpu=4),
        job("lab", "RUNNING", job_id="r2", user="carol", cpu=2, gpu=1),
        job("theory", job_id="p1", user="alice", cpu=2, submit_time=1.0),
        job("theory", job_id="p2", user="bob", cpu=2, submit_time=2.0),
        job("chem", job_id="p3", user="dave", cpu=1, submit_time=3.0),
    ]
    tree = (
        assoc("root", None)
        + assoc("physics", "root")
        + assoc("theory", "physics", "alice", "bob")
        + assoc("lab", "physics", "carol")
        + assoc("chem", "root", "dave")
    )
    snap = snapshot([node(cpu=16, gpu=4)], jobs)
    return dataclasses.replace(snap, associations=tuple(tree if accounts is None else accounts))


def physics_plan() -> tuple[Plan, Snapshot]:
    snap = physics_snapshot()
    return compute_plan(snap, config()), snap


# --- the plan and its JSON --------------------------------------------------------------


def test_plan_json_has_the_tree_rows_with_hand_checked_numbers() -> None:
    plan, _ = physics_plan()
    data = orjson.loads(render_plan_json_bytes(plan))
    assert data == orjson.loads(orjson.dumps(render_plan_json(plan)))
    rows = {row["path"]: row for row in data["pools"][0]["tree"]}
    assert [row["path"] for row in data["pools"][0]["tree"]] == [
        "chem",
        "chem/user=dave",
        "physics",
        "physics/lab",
        "physics/lab/user=carol",
        "physics/theory",
        "physics/theory/user=alice",
        "physics/theory/user=bob",
    ]
    physics = rows["physics"]
    assert (physics["depth"], physics["kind"], physics["weight"]) == (1, "account", 1.0)
    assert physics["usage"] == {"cpu": 6, "gres/gpu": 1}
    assert (physics["running_jobs"], physics["pending_jobs"]) == (2, 2)
    # 6 of 16 CPUs against 1 of 4 GPUs.
    assert (physics["dominant_resource"], physics["dominant_share"]) == ("cpu", 0.375)
    # theory, an account over its users, sums them as they are (docs/rule.md §7): alice's 4/16 beside
    # bob's 0 is 0.25; physics scales theory (waiting) to its own 0.25, the least waiting, and lab has
    # nothing pending (blocked) and counts as it is: (4 + 2)/16 CPUs = 0.375.
    assert physics["weighted_share"] == 0.375
    assert rows["physics/theory"]["weighted_share"] == 0.25
    assert rows["physics/theory"]["dominant_share"] == 0.25
    assert rows["physics/lab"]["blocked"] and not rows["physics/theory"]["blocked"]
    alice = rows["physics/theory/user=alice"]
    assert (alice["name"], alice["kind"], alice["depth"], alice["weighted_share"]) == ("alice", "user", 3, 0.25)
    assert rows["chem"]["dominant_resource"] is None and rows["chem"]["weighted_share"] == 0.0
    jobs = {entry["job_id"]: entry for entry in data["jobs"]}
    assert [entry["job_id"] for entry in data["jobs"]] == ["p3", "p2", "p1"]
    assert jobs["p1"]["path"] == "physics/theory/user=alice"
    # When p1 is placed bob holds 2 CPUs and has nothing left (blocked): theory = 4 + 2 of 16,
    # physics = theory's 6 + lab's 2 of 16.
    assert jobs["p1"]["path_shares"] == [0.5, 0.375, 0.25]
    assert jobs["p2"]["path_shares"] == [0.375, 0.25, 0.0]
    # chem has a single child: the chain is one node, both names carry its share.
    assert jobs["p3"]["path"] == "chem/user=dave" and jobs["p3"]["path_shares"] == [0.0, 0.0]


def test_the_past_is_a_row_of_its_account() -> None:
    snap = physics_snapshot()
    cfg = dataclasses.replace(config(), history=HistoryConfig(half_life_s=86400.0, weight=1.0))
    plan = compute_plan(snap, cfg, past={"default": {"chem": {"cpu": 4.0}}})
    rows = {row.path: row for row in plan.pools[0].tree}
    assert rows["chem/past="].kind == "past" and rows["chem/past="].usage["cpu"] == 4
    assert rows["chem"].usage["cpu"] == 4 and rows["chem"].dominant_share == 0.25
    assert rows["chem"].weighted_share == 0.25  # dave's 0 leaves the past (blocked) as it is


def test_a_full_resource_still_counts_at_an_internal_node() -> None:
    """The plan's online rule (docs/rule.md §7): nothing saturates, so lab's GPUs, all of them and
    nothing more waiting (blocked, counted as they are), hold physics at 1 beside theory's 0."""
    jobs = [
        job("lab", "RUNNING", job_id="r1", user="carol", gpu=4),
        job("theory", job_id="p2", user="alice", cpu=2),
        job("chem", job_id="p3", user="dave", cpu=1),
    ]
    tree = assoc("root", None) + assoc("physics", "root") + assoc("theory", "physics", "alice")
    tree += assoc("lab", "physics", "carol") + assoc("chem", "root", "dave")
    snap = dataclasses.replace(snapshot([node(cpu=16, gpu=4)], jobs), associations=tuple(tree))
    plan = compute_plan(snap, config())
    rows = {row.path: row for row in plan.pools[0].tree}
    assert rows["physics/lab"].blocked and rows["physics/lab"].weighted_share == 1.0
    assert rows["physics"].weighted_share == 1.0 and not rows["physics"].blocked
    assert rows["chem"].weighted_share == 0.0
    assert [j.job_id for j in plan.jobs] == ["p3", "p2"]  # chem at 0 before physics at 1


def test_a_plan_without_a_tree_is_unchanged() -> None:
    snap = dataclasses.replace(physics_snapshot(), associations=())
    plan = compute_plan(snap, config())
    data = orjson.loads(render_plan_json_bytes(plan))
    assert all(pool.tree == () for pool in plan.pools)
    assert "tree" not in data["pools"][0]
    assert all(list(entry) == FLAT_JOB_KEYS for entry in data["jobs"])
    assert all(job.path is None and job.path_shares is None for job in plan.jobs)
    report = render_report(plan, "table")
    assert "account tree" not in report
    assert "tree" not in orjson.loads(render_report(plan, "json"))["pools"][0]
    assert "\n\n" not in render_report(plan, "csv")


# --- the report ----------------------------------------------------------------------------


def _tree_lines(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("account tree"))
    return lines[start + 1 :]


def test_report_table_indents_the_tree_like_sshare() -> None:
    plan, _ = physics_plan()
    lines = _tree_lines(render_report(plan, "table"))
    assert lines[0].split() == [
        "node",
        "weight",
        "cpu",
        "used",
        "gres/gpu",
        "used",
        "dominant",
        "share",
        "weighted",
        "share",
        "running",
        "pending",
    ]
    nodes = [line[: len("    carol (user)")].rstrip() for line in lines[2:10]]
    assert nodes == [
        "chem",
        "  dave (user)",
        "physics",
        "  lab",
        "    carol (user)",
        "  theory",
        "    alice (user)",
        "    bob (user)",
    ]
    physics = lines[4].split()
    assert physics == ["physics", "1", "6", "1", "0.3750", "0.3750", "2", "2"]


def test_report_memory_in_the_tree_reads_as_the_report_shows_it() -> None:
    jobs = [job("theory", "RUNNING", job_id="r1", user="alice", cpu=1, mem=65536), job("lab", job_id="p", cpu=1)]
    tree = assoc("root", None) + assoc("physics", "root") + assoc("theory", "physics", "alice")
    tree += assoc("lab", "physics", "u")
    snap = dataclasses.replace(snapshot([node(cpu=16, mem=262144)], jobs), associations=tuple(tree))
    plan = compute_plan(snap, dataclasses.replace(config(), resources=("cpu", "mem")))
    lines = _tree_lines(render_report(plan, "table"))
    assert "64 GiB" in next(line for line in lines if line.startswith("physics"))


def test_report_json_and_csv_carry_the_tree() -> None:
    plan, _ = physics_plan()
    pools = orjson.loads(render_report(plan, "json"))["pools"]
    assert [row["path"] for row in pools[0]["tree"]][:3] == ["chem", "chem/user=dave", "physics"]
    flat, tree = render_report(plan, "csv").split("\n\n")
    assert flat.splitlines()[0].startswith("pool,rank,account")
    header, *rows = tree.splitlines()
    assert header.split(",")[:4] == ["pool", "path", "depth", "kind"]
    assert rows[2].split(",")[:9] == ["default", "physics", "1", "account", "1", "2", "2", "6", "1"]


NAMES = HOSTILE  # "/" and "%" in a name are %-escaped in its node's name (policy.engine.tree_order.node_name)


def test_report_html_and_markdown_escape_node_names() -> None:
    tree = assoc("root", None) + assoc("division", "root")
    jobs = []
    for index, name in enumerate(NAMES):
        tree += assoc(name, "division", "u" + name)
        jobs.append(job(name, job_id=str(100 + index), user="u" + name, cpu=1))
    snap = dataclasses.replace(snapshot([node(cpu=64)], jobs), associations=tuple(tree))
    plan = compute_plan(snap, config())
    assert sorted(j.order for j in plan.jobs if j.order is not None) == list(range(len(NAMES)))
    assert any("%2F" in row.path for pool in plan.pools for row in pool.tree)
    page = render_report(plan, "html")
    table = page[page.index('<table class="shares tree">') :]
    assert "<img" not in table and "<script" not in page
    assert html.escape("<img src=x onerror=alert(1)>") in table
    assert 'style="padding-left: 26px">' + html.escape("<img src=x onerror=alert(1)>") in table
    assert "\x1b" not in page and "\x00" not in page
    markdown = render_report(plan, "markdown")
    assert "<img" not in markdown and "\x1b" not in markdown
    assert "\x1b" not in render_report(plan, "table")


# --- explain ---------------------------------------------------------------------------------


def test_explain_gives_the_path_with_each_level() -> None:
    plan, snap = physics_plan()
    explanation = explain_job(plan, snap, "p1")
    assert [(s.path, s.share_at_placement, s.share_now, s.rank, s.siblings) for s in explanation.tree] == [
        ("physics", 0.5, 0.375, 2, 2),
        ("physics/theory", 0.375, 0.25, 1, 2),
        ("physics/theory/user=alice", 0.25, 0.25, 2, 2),
    ]
    text = render_explanation_text(explanation)
    assert "path physics/theory/user=alice in the account tree" in text
    lines = text.splitlines()
    assert next(line for line in lines if line.strip().startswith("theory")).split() == [
        "theory",
        "0.3750",
        "0.2500",
        "1",
        "of",
        "2",
    ]
    assert "    alice (user)" in text
    assert "no tie at any level of its path" in text
    # The flat rule's claims do not apply over a tree.
    for flat in ("\nlevel ", "share vector differ", "lower level", "earlier pending job"):
        assert flat not in text
    # The level, §2's: theory's 4 running CPUs and bob's job (theory's too, placed before) of 16.
    assert "  level 0.375" in text
    assert "2 another branch of the tree" not in text and "1 another branch of the tree" in text
    data = render_explanation_json(explanation)
    assert [step["path"] for step in data["tree"]][-1] == "physics/theory/user=alice"
    assert data["ahead_total"] == 2 and data["level_exact"] == "3/8"


def test_explain_counts_an_earlier_job_of_the_same_leaf_as_its_own_queue() -> None:
    jobs = [job("theory", job_id=f"p{n}", user="alice", cpu=1, submit_time=float(n)) for n in range(3)]
    jobs.append(job("lab", job_id="q", user="carol", cpu=8))
    tree = assoc("root", None) + assoc("physics", "root") + assoc("theory", "physics", "alice")
    tree += assoc("lab", "physics", "carol")
    snap = dataclasses.replace(snapshot([node(cpu=16)], jobs), associations=tuple(tree))
    plan = compute_plan(snap, config())
    explanation = explain_job(plan, snap, "p2")
    theory = next(a for a in explanation.ahead if a.account == "theory")
    assert dict(theory.reasons) == {"own_queue": 2}
    assert explanation.earlier_own == 2


def test_explain_of_a_flat_plan_has_no_tree() -> None:
    snap = dataclasses.replace(physics_snapshot(), associations=())
    plan = compute_plan(snap, config())
    explanation = explain_job(plan, snap, "p1")
    assert explanation.tree == () and "tree" not in render_explanation_json(explanation)
    assert "\nlevel " in render_explanation_text(explanation)


# --- metrics -----------------------------------------------------------------------------------


def _samples(recorder: MetricsRecorder, plan: Plan, snap: Snapshot) -> dict[SampleKey, float]:
    report = build_cycle_report(plan, snap, refusal="denied", read_seconds=0.1, seconds=0.2, deferred=0)
    recorder.on_cycle(report)
    return parse_samples(recorder.render().decode())


def _tree_paths(samples: dict[SampleKey, float], name: str = "slurm_drf_tree_weighted_share") -> dict[str, float]:
    return {dict(labels)["path"]: value for (metric, labels), value in samples.items() if metric == name}


def test_tree_metrics_show_accounts_and_not_users_by_default() -> None:
    plan, snap = physics_plan()
    samples = _samples(MetricsRecorder(), plan, snap)
    assert _tree_paths(samples) == {"chem": 0.0, "physics": 0.375, "physics/lab": 0.25, "physics/theory": 0.25}
    assert _tree_paths(samples, "slurm_drf_tree_dominant_share")["physics"] == 0.375
    assert samples[("slurm_drf_tree_series_dropped", (("pool", "default"),))] == 0
    assert not any("user=" in value for _, labels in samples for _, value in labels)


def test_tree_metrics_show_users_when_the_site_opts_in() -> None:
    plan, snap = physics_plan()
    paths = _tree_paths(_samples(MetricsRecorder(tree_users=True), plan, snap))
    assert paths["physics/theory/user=alice"] == 0.25 and "chem/user=dave" in paths
    assert len(paths) == 8


@pytest.mark.parametrize("cap", [0, 1, 3])
def test_tree_metrics_are_capped_and_the_deepest_left_out(cap: int) -> None:
    plan, snap = physics_plan()
    samples = _samples(MetricsRecorder(tree_max_paths=cap), plan, snap)
    paths = _tree_paths(samples)
    assert sorted(paths) == ["chem", "physics", "physics/lab"][:cap]
    assert samples[("slurm_drf_tree_series_dropped", (("pool", "default"),))] == 4 - cap
    assert len(_tree_paths(samples, "slurm_drf_tree_dominant_share")) == cap


def test_tree_series_of_a_node_that_leaves_are_removed() -> None:
    recorder = MetricsRecorder()
    plan, snap = physics_plan()
    _samples(recorder, plan, snap)
    smaller = dataclasses.replace(snap, jobs=tuple(j for j in snap.jobs if j.account != "lab"))
    assert sorted(_tree_paths(_samples(recorder, compute_plan(smaller, config()), smaller))) == [
        "chem",
        "physics",
        "physics/theory",
    ]
    flat = dataclasses.replace(snap, associations=())
    samples = _samples(recorder, compute_plan(flat, config()), flat)
    assert _tree_paths(samples) == {}
    assert not any(metric == "slurm_drf_tree_series_dropped" for metric, _ in samples)
