"""Exclusions hold in every mode and at every moment (issue 22, item 1).

An excluded account's jobs are never ordered and never written: by path
where Slurm's tree is known (under `hierarchy: flat` too), by the path's
last name where it is not (no tree read yet: daemon start). Keys that name
nothing Slurm's tree knows warn, and weights keyed by path weigh their
account in a flat plan.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import pytest

from slurm_drf.config.load import parse_config_text
from slurm_drf.config.settings import Config
from slurm_drf.cycle.store import StateStore
from slurm_drf.errors import ConfigError
from slurm_drf.model.types import Association, Job, Snapshot
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.service.loop import Service, ServiceOptions, ServiceParts
from slurm_drf.slurm.write import Write, WriteResult
from tests.unit.builders import job, node, snapshot

MODES = ("nice", "site_factor", "priority")
HIERARCHIES = ("tree", "flat")


def assoc(account: str, parent: str | None, *users: str) -> list[Association]:
    return [Association(account, parent, None, 1)] + [Association(account, account, u, 1) for u in users]


# root -> physics -> {theory, lab}; root -> chemistry; physics has jobs of its own.
TREE = (
    assoc("root", None)
    + assoc("physics", "root", "pat")
    + assoc("theory", "physics", "alice", "bob")
    + assoc("lab", "physics", "carol")
    + assoc("chemistry", "root", "dan")
)


def jobs_of(account: str, user: str, count: int = 3) -> list[Job]:
    return [job(account, user=user, job_id=f"{account}-{user}-{n}", submit_time=float(n), cpu=1) for n in range(count)]


JOBS = (
    jobs_of("physics", "pat")
    + jobs_of("theory", "alice")
    + jobs_of("theory", "bob")
    + jobs_of("lab", "carol")
    + jobs_of("chemistry", "dan")
    + [job("theory", "RUNNING", user="alice", job_id="theory-running", cpu=2)]
)


def cluster(tree_known: bool) -> Snapshot:
    snap = snapshot([node(cpu=8)], JOBS)
    return dataclasses.replace(snap, associations=tuple(TREE)) if tree_known else snap


def config_for(text: str, mode: str, hierarchy: str) -> Config:
    return parse_config_text(f"mode: {mode}\nhierarchy: {hierarchy}\nresources: [cpu]\n{text}", "c.yaml")


def excluded_ids(plan: Plan) -> set[str]:
    return {j.job_id for j in plan.jobs if j.reason == "account excluded"}


def ordered_accounts(plan: Plan) -> set[str]:
    return {j.account for j in plan.jobs if j.order is not None}


def pending_ids(account: str) -> set[str]:
    return {j.job_id for j in JOBS if j.account == account and j.state == "PENDING"}


# (config text, the accounts it excludes). Each key is a path or a name, in `accounts` or the list.
EXCLUSIONS = [
    ("accounts:\n  physics/theory: {exclude: true}\n", {"theory"}),
    ("accounts:\n  root/physics/theory: {exclude: true}\n", {"theory"}),
    ("accounts:\n  theory: {exclude: true}\n", {"theory"}),
    ("accounts:\n  physics/theory: {weight: 2, exclude: true}\n", {"theory"}),
    ("exclude_accounts: [physics/theory]\n", {"theory"}),
    ("exclude_accounts: [root/physics/lab]\n", {"lab"}),
    ("exclude_accounts: [physics/lab, chemistry]\n", {"lab", "chemistry"}),
    ("exclude_accounts: [root/physics]\n", {"physics"}),
    ("accounts:\n  root/chemistry: {exclude: true}\nexclude_accounts: [physics/theory]\n", {"chemistry", "theory"}),
]


@pytest.mark.parametrize("tree_known", [True, False], ids=["tree-known", "no-tree"])
@pytest.mark.parametrize("hierarchy", HIERARCHIES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("text", "accounts"), EXCLUSIONS, ids=[f"exclusion{n}" for n in range(len(EXCLUSIONS))])
def test_an_excluded_account_is_never_ordered_nor_written(
    text: str, accounts: set[str], mode: str, hierarchy: str, tree_known: bool
) -> None:
    plan = compute_plan(cluster(tree_known), config_for(text, mode, hierarchy))
    wanted = set().union(*(pending_ids(a) for a in accounts))
    assert excluded_ids(plan) == wanted
    assert not ordered_accounts(plan) & accounts
    assert not {w.job_id for w in plan.writes} & wanted
    # Every other account is still ordered, and written.
    others = {"physics", "theory", "lab", "chemistry"} - accounts
    assert ordered_accounts(plan) == others
    assert {w.account for w in plan.writes} == others


@pytest.mark.parametrize("hierarchy", HIERARCHIES)
def test_a_path_that_does_not_match_the_known_tree_excludes_nothing_and_warns(hierarchy: str) -> None:
    plan = compute_plan(cluster(True), config_for("exclude_accounts: [chemistry/theory]\n", "nice", hierarchy))
    assert excluded_ids(plan) == set()
    assert [w for w in plan.warnings if "exclude_accounts" in w] == [
        "c.yaml:4: exclude_accounts: Slurm's account tree has no account or path 'chemistry/theory'"
    ]


@pytest.mark.parametrize("hierarchy", HIERARCHIES)
@pytest.mark.parametrize(
    ("text", "where", "key"),
    [
        ("exclude_accounts: [nobody]\n", "c.yaml:4: exclude_accounts", "nobody"),
        ("exclude_accounts: [physics/nobody]\n", "c.yaml:4: exclude_accounts", "physics/nobody"),
        ("accounts:\n  nobody: {exclude: true}\n", "c.yaml:5: accounts.nobody.exclude", "nobody"),
        ("accounts:\n  lab/theory: {exclude: true}\n", "c.yaml:5: accounts.lab/theory.exclude", "lab/theory"),
    ],
)
def test_an_exclusion_key_that_names_nothing_in_the_tree_warns(hierarchy: str, text: str, where: str, key: str) -> None:
    plan = compute_plan(cluster(True), config_for(text, "nice", hierarchy))
    assert f"{where}: Slurm's account tree has no account or path {key!r}" in plan.warnings
    assert excluded_ids(plan) == set()


def test_an_account_the_tree_lacks_is_excluded_by_the_last_name_of_a_path() -> None:
    stray = [job("stray", user="eve", job_id=f"stray-{n}", cpu=1) for n in range(2)]
    snap = dataclasses.replace(snapshot([node(cpu=8)], [*JOBS, *stray]), associations=tuple(TREE))
    for hierarchy in HIERARCHIES:
        plan = compute_plan(snap, config_for("exclude_accounts: [physics/stray]\n", "nice", hierarchy))
        assert excluded_ids(plan) == {"stray-0", "stray-1"}
        assert any("'physics/stray'" in w for w in plan.warnings)


def test_exclusion_paths_must_be_paths_of_names() -> None:
    for bad in ("physics/", "/theory", "a//b"):
        with pytest.raises(ConfigError, match=r"c\.yaml:1: exclude_accounts\[0\]: "):
            parse_config_text(f"exclude_accounts: [{bad!r}]\n", "c.yaml")


# --- weights keyed by path without a tree to order over ------------------------


def head_counts(plan: Plan, size: int) -> dict[str, int]:
    ordered = sorted((j for j in plan.jobs if j.order is not None), key=lambda j: j.order or 0)
    counts: dict[str, int] = {}
    for j in ordered[:size]:
        counts[j.account] = counts.get(j.account, 0) + 1
    return counts


def weighted_cluster(tree_known: bool) -> Snapshot:
    jobs = jobs_of("theory", "alice", 8) + jobs_of("chemistry", "dan", 8)
    snap = snapshot([node(cpu=8)], jobs)
    return dataclasses.replace(snap, associations=tuple(TREE)) if tree_known else snap


@pytest.mark.parametrize("tree_known", [True, False], ids=["tree-known", "no-tree"])
@pytest.mark.parametrize("key", ["physics/theory", "root/physics/theory", "theory"])
def test_a_path_weight_weighs_its_account_in_a_flat_plan(key: str, tree_known: bool) -> None:
    hierarchy = "flat" if tree_known else "tree"  # no tree read: a tree config plans flat
    plan = compute_plan(
        weighted_cluster(tree_known), config_for(f"accounts:\n  {key}: {{weight: 3}}\n", "nice", hierarchy)
    )
    assert head_counts(plan, 8) == {"theory": 6, "chemistry": 2}
    assert {a.account: a.weight for a in plan.accounts}["theory"] == Fraction(3)
    assert not plan.warnings


def test_of_two_keys_naming_one_account_in_a_flat_plan_the_longer_path_wins_with_a_warning() -> None:
    text = "accounts:\n  theory: {weight: 1}\n  physics/theory: {weight: 3}\n"
    plan = compute_plan(weighted_cluster(True), config_for(text, "nice", "flat"))
    assert {a.account: a.weight for a in plan.accounts}["theory"] == Fraction(3)
    assert any("the longer path 'physics/theory' is used" in w for w in plan.warnings)


def test_a_path_weight_that_does_not_match_the_tree_warns_in_a_flat_plan() -> None:
    plan = compute_plan(weighted_cluster(True), config_for("accounts:\n  lab/theory: {weight: 3}\n", "nice", "flat"))
    assert {a.account: a.weight for a in plan.accounts}["theory"] == Fraction(1)
    assert plan.warnings == ("c.yaml:5: accounts.lab/theory: Slurm's account tree has no account or path 'lab/theory'",)


# --- the daemon: from its first cycle, before any tree is read --------------------


class Script:
    """A source replaying snapshots (the last one again), and a writer recording writes."""

    name = "script"

    def __init__(self, snapshots: Sequence[Snapshot]) -> None:
        self.snapshots = list(snapshots)
        self.calls = itertools.count()
        self.writes: list[Write] = []

    def fetch_snapshot(self) -> Snapshot:
        return self.snapshots[min(next(self.calls), len(self.snapshots) - 1)]

    def apply(self, writes: Sequence[Write]) -> WriteResult:
        self.writes.extend(writes)
        return WriteResult(applied=tuple(w.job_id for w in writes))

    def run_lines(self, lines: Sequence[str]) -> tuple[dict[str, str], list[str]]:
        return {}, []


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("hierarchy", HIERARCHIES)
def test_the_daemon_never_writes_an_excluded_account_before_or_after_the_tree_is_read(
    tmp_path: Path, mode: str, hierarchy: str
) -> None:
    config = dataclasses.replace(
        config_for("exclude_accounts: [physics/theory]\naccounts:\n  physics/lab: {exclude: true}\n", mode, hierarchy),
        state_dir=str(tmp_path / "state"),
    )
    # The first cycle has no tree yet, the second has it, the third lost it again.
    script = Script([cluster(False), cluster(True), cluster(False)])
    service = Service(
        config,
        StateStore(config.state_dir),
        options=ServiceOptions(keep_log_level=True),
        parts=ServiceParts(lambda c: script, lambda s: script, lambda c: []),
    )
    for _ in range(3):
        assert service.run_once() is None
    written = {w.job_id for w in script.writes}
    assert written  # the others are written
    assert not written & (pending_ids("theory") | pending_ids("lab"))


def test_the_daemon_does_not_call_a_path_the_tree_resolves_unknown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = dataclasses.replace(
        config_for("exclude_accounts: [physics/theory, physics/nobody]\n", "nice", "tree"),
        state_dir=str(tmp_path / "state"),
    )
    script = Script([cluster(True)])
    service = Service(
        config,
        StateStore(config.state_dir),
        options=ServiceOptions(keep_log_level=True),
        parts=ServiceParts(lambda c: script, lambda s: script, lambda c: []),
    )
    with caplog.at_level(logging.WARNING):
        assert service.run_once() is None
    messages = [r.getMessage() for r in caplog.records]
    assert not any("'physics/theory'" in m for m in messages)
    assert sum("'physics/nobody'" in m for m in messages) >= 1
