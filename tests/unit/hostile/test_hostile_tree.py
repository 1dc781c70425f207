"""Hostile account trees (issue 22, items 3 and 5): reserved leaf names and deep chains.

Accounts and users named like the tree's own leaves (`user=…`, `jobs=…`,
`past=…`) are escaped as names holding `/` are, in every position, through
the plan, the report, explain and the metrics. Chains of accounts far
deeper than any site's are planned without recursion, or refused in one
line at the documented limit.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurm_drf.cli.main import main
from slurm_drf.config.settings import Config, HistoryConfig, WithinAccount
from slurm_drf.errors import SlurmReadError, SnapshotError
from slurm_drf.model.account_tree import MAX_TREE_DEPTH, build_tree
from slurm_drf.model.types import Association, Job, Snapshot
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.policy.pools import DEFAULT_POOL
from slurm_drf.slurm.cli_source import AssociationReader
from slurm_drf.slurm.parse.assoc_mgr import check_associations
from slurm_drf.trail.explain import explain_job
from slurm_drf.trail.explain_render import render_explanation_json, render_explanation_text
from slurm_drf.trail.plan_output import render_plan_json, render_plan_table
from slurm_drf.trail.prometheus import MetricsRecorder
from slurm_drf.trail.share_report import REPORT_FORMATS, render_report
from tests.helpers import build_cycle_report
from tests.unit.builders import job, node, snapshot

# Names that read as the tree's own structure: its leaves' prefixes, its separator, its escapes.
RESERVED = [
    "user=",
    "user=alice",
    "user=bob",
    "jobs=",
    "jobs=x",
    "past=",
    "past=x",
    "=",
    "a=b",
    "user=%3D",
    "user%3Dalice",
    "%2F",
    "a/b",
    "%",
    "%00",
]
POSITIONS = ["top", "middle", "leaf", "user", "root"]


def tree_for(name: str, position: str) -> tuple[list[Association], list[Job]]:
    """root -> top -> middle -> leaf, `name` in one position, with users alice and bob beside it.

    Each account has users alice and bob (so user leaves `user=alice` sit
    beside a child account `user=alice`), jobs of its own, and running work.
    """
    accounts = {"root": "root", "top": "top", "middle": "middle", "leaf": "leaf"}
    users = ["alice", "bob"]
    if position == "user":
        users.append(name)
    else:
        accounts[position] = name
    root, top, middle, leaf = accounts["root"], accounts["top"], accounts["middle"], accounts["leaf"]
    chain = [(top, root), (middle, top), (leaf, middle)]
    associations = [Association(root, None, None, 1)]
    jobs: list[Job] = []
    for account, parent in chain:
        associations.append(Association(account, parent, None, 1))
    for account, _ in [(root, None), *chain]:
        for user in users:
            associations.append(Association(account, account, user, 1))
            jobs += [
                job(account, user=user, job_id=f"{account}|{user}|{n}", submit_time=float(n), cpu=1) for n in range(2)
            ]
        jobs.append(job(account, "RUNNING", user=users[-1], job_id=f"{account}|run", cpu=1))
    return associations, jobs


def planned(name: str, position: str, within: WithinAccount) -> tuple[Plan, Snapshot, list[Job]]:
    associations, jobs = tree_for(name, position)
    snap = dataclasses.replace(snapshot([node(cpu=64)], jobs), associations=tuple(associations))
    config = dataclasses.replace(
        Config(resources=("cpu",)),
        fairness_within_account=within,
        history=HistoryConfig(half_life_s=86400.0, weight=1.0),
    )
    accounts = {a.account for a in associations}
    past = {DEFAULT_POOL: {account: {"cpu": 1.0} for account in accounts}}
    return compute_plan(snap, config, past=past), snap, jobs


CASES = [(name, position) for name in RESERVED for position in POSITIONS]


@pytest.mark.parametrize("within", ["user", "slurm"])
@pytest.mark.parametrize(("name", "position"), CASES, ids=[f"{p}:{n}" for n, p in CASES])
def test_a_name_like_the_trees_own_leaves_stays_a_name(name: str, position: str, within: WithinAccount) -> None:
    plan, snap, jobs = planned(name, position, within)
    pending = [j.job_id for j in jobs if j.state == "PENDING"]
    ordered = [j.job_id for j in plan.jobs if j.order is not None]
    assert Counter(ordered) == Counter(pending)  # every pending job once, none lost to a collision
    (pool,) = plan.pools
    paths = [row.path for row in pool.tree]
    assert len(paths) == len(set(paths))
    kinds = Counter(row.kind for row in pool.tree)
    assert kinds["account"] == 4  # root's own jobs hang under a node of the root's name
    assert kinds["past"] == 4
    shown = {(row.kind, row.name) for row in pool.tree}
    if position != "user":
        assert ("account", name) in shown
    if within == "user":
        assert kinds["user"] == (12 if position == "user" else 8)
        assert position != "user" or ("user", name) in shown
    else:
        assert kinds["jobs"] == 4
    # Every output of the plan takes the name as a name.
    data = json.loads(json.dumps(render_plan_json(plan)))
    assert {(row["kind"], row["name"]) for row in data["pools"][0]["tree"]} == shown
    assert render_plan_table(plan)
    for fmt in REPORT_FORMATS:
        assert render_report(plan, fmt)
    for job_id in pending:
        explanation = explain_job(plan, snap, job_id)
        assert render_explanation_text(explanation)
        steps = render_explanation_json(explanation)["tree"]
        owner = next(j for j in jobs if j.job_id == job_id)
        leaf = steps[-1]
        if within == "user":
            assert (leaf["kind"], leaf["name"]) == ("user", owner.user)
            assert steps[-2]["name"] == owner.account
        else:
            assert leaf["kind"] == "jobs"
            assert steps[-2]["name"] == owner.account
    recorder = MetricsRecorder()
    recorder.on_cycle(
        build_cycle_report(plan, snap, refusal="denied", read_seconds=0.1, seconds=0.1, deferred=0, dry_run=True)
    )
    tree_paths = [
        sample.labels["path"]
        for family in text_string_to_metric_families(recorder.render().decode())
        if family.name == "slurm_drf_tree_weighted_share"
        for sample in family.samples
    ]
    assert sorted(tree_paths) == sorted(row.path for row in pool.tree if row.kind == "account")


@pytest.mark.parametrize("prefix", ["user=", "jobs=", "past="])
def test_sibling_accounts_named_after_every_leaf_kind_are_all_kept(prefix: str) -> None:
    """An account `user=alice` beside user alice, `jobs=` beside an account's jobs, `past=` beside its past."""
    names = [prefix, f"{prefix}alice", f"{prefix}{prefix}"]
    associations = [Association("root", None, None, 1), Association("x", "root", None, 1)]
    associations += [Association(n, "x", None, 1) for n in names]
    jobs: list[Job] = []
    for account in ["x", *names]:
        associations.append(Association(account, account, "alice", 1))
        jobs += [job(account, user="alice", job_id=f"{account}#{n}", cpu=1) for n in range(3)]
    snap = dataclasses.replace(snapshot([node(cpu=8)], jobs), associations=tuple(associations))
    withins: tuple[WithinAccount, ...] = ("user", "slurm")
    for within in withins:
        config = dataclasses.replace(
            Config(resources=("cpu",)),
            fairness_within_account=within,
            history=HistoryConfig(half_life_s=86400.0, weight=1.0),
        )
        plan = compute_plan(snap, config, past={DEFAULT_POOL: {a: {"cpu": 2.0} for a in ["x", *names]}})
        assert sorted(j.job_id for j in plan.jobs if j.order is not None) == sorted(j.job_id for j in jobs)
        shown = Counter((row.kind, row.name) for row in plan.pools[0].tree)
        assert all(shown[("account", n)] == 1 for n in ["x", *names])
        assert shown[("past", "(past)")] == 4


# --- deep trees (item 5) -----------------------------------------------------------


def chain(depth: int, every_level: bool) -> tuple[list[Association], list[Job]]:
    """root -> a0 -> ... -> a{depth-1}: `depth` levels below the root, user u at the bottom (or every level)."""
    associations = [Association("root", None, None, 1)]
    associations += [Association(f"a{i}", "root" if i == 0 else f"a{i - 1}", None, 1) for i in range(depth)]
    levels = range(depth) if every_level else [depth - 1]
    associations += [Association(f"a{i}", f"a{i}", "u", 1) for i in levels]
    jobs = [job(f"a{i}", user="u", job_id=f"j{i}", cpu=1) for i in levels]
    jobs += [job(f"a{depth - 1}", "RUNNING", user="u", job_id="running", cpu=1)]
    return associations, jobs


@pytest.mark.parametrize("within", ["user", "slurm"])
@pytest.mark.parametrize("every_level", [False, True], ids=["chain", "jobs-at-every-level"])
def test_a_tree_as_deep_as_the_limit_is_planned_reported_and_explained(
    within: WithinAccount, every_level: bool
) -> None:
    associations, jobs = chain(MAX_TREE_DEPTH, every_level)
    snap = dataclasses.replace(snapshot([node(cpu=8)], jobs), associations=tuple(associations))
    config = dataclasses.replace(
        Config(resources=("cpu",)),
        fairness_within_account=within,
        history=HistoryConfig(half_life_s=86400.0, weight=1.0),
    )
    plan = compute_plan(snap, config, past={DEFAULT_POOL: {"a0": {"cpu": 1.0}, f"a{MAX_TREE_DEPTH - 1}": {"cpu": 1.0}}})
    pending = sorted(j.job_id for j in jobs if j.state == "PENDING")
    assert sorted(j.job_id for j in plan.jobs if j.order is not None) == pending
    rows = plan.pools[0].tree
    assert max(row.depth for row in rows) == MAX_TREE_DEPTH + 1  # the bottom account's user or jobs leaf
    assert max(row["depth"] for row in render_plan_json(plan)["pools"][0]["tree"]) == MAX_TREE_DEPTH + 1
    assert render_plan_table(plan)
    assert render_report(plan, "table" if every_level else "html")
    deepest = f"j{MAX_TREE_DEPTH - 1}"
    steps = render_explanation_json(explain_job(plan, snap, deepest))["tree"]
    assert len(steps) == MAX_TREE_DEPTH + 1
    assert [s["name"] for s in steps[:3]] == ["a0", "a1", "a2"]


def test_a_tree_one_level_deeper_than_the_limit_is_refused_naming_depth_and_limit() -> None:
    associations, _ = chain(MAX_TREE_DEPTH + 1, False)
    with pytest.raises(SnapshotError) as raised:
        build_tree(associations)
    assert str(raised.value) == (
        f"associations[{MAX_TREE_DEPTH + 1}] (account a{MAX_TREE_DEPTH}): the account tree is "
        f"{MAX_TREE_DEPTH + 1} levels deep here, more than the limit of {MAX_TREE_DEPTH}"
    )
    with pytest.raises(SlurmReadError, match=f"more than the limit of {MAX_TREE_DEPTH}"):
        check_associations(tuple(associations))


def test_a_tree_read_from_slurm_too_deep_leaves_the_daemon_flat_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    associations, _ = chain(MAX_TREE_DEPTH + 5, False)
    text = "Current Association Manager state\n\nAssociation Records\n\n" + "".join(
        f"ClusterName=c Account={a.account} UserName={a.user or ''} Partition= Priority=0 ID={n + 1}\n"
        "    SharesRaw/Norm/Level/Factor=1/0.00/1/0.00\n"
        f"    ParentAccount={f'{a.parent}(1)' if a.parent else ''} Lft={n + 1} DefAssoc=No\n"
        for n, a in enumerate(associations)
    )
    reader = AssociationReader(lambda argv: text, lambda: 0.0)
    with caplog.at_level(logging.WARNING):
        assert reader.fetch("c") == ()
    assert any(f"more than the limit of {MAX_TREE_DEPTH}" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("verb", [["plan"], ["plan", "--format", "json"], ["report"], ["explain", "1"]])
def test_a_chain_of_100000_accounts_is_refused_in_one_line_exit_2(
    verb: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    depth = 100_000
    associations = [{"account": "root", "parent": None}]
    associations += [{"account": f"a{i}", "parent": "root" if i == 0 else f"a{i - 1}"} for i in range(depth)]
    associations.append({"account": f"a{depth - 1}", "user": "u"})
    data = {
        "format": "slurm-drf-snapshot/1",
        "cluster": "c",
        "taken_at": "2026-11-30T02:00:00Z",
        "nodes": [{"name": "n", "partitions": ["p"], "state": "idle", "tres": {"cpu": 8}}],
        "jobs": [
            {"job_id": "1", "account": f"a{depth - 1}", "user": "u", "partition": "p", "state": "PENDING",
             "priority": 1, "nice": 0, "submit_time": "2026-11-30T01:00:00Z", "tres": {"cpu": 1}}
        ],
        "associations": associations,
    }  # fmt: skip
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(data))
    code = main([verb[0], "--snapshot", str(path), "--config", "/dev/null", *verb[1:]])
    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"slurm-drf: snapshot: {path}: associations[{depth}] (account a{depth - 1}): the account tree is "
        f"{depth} levels deep here, more than the limit of {MAX_TREE_DEPTH}\n"
    )
