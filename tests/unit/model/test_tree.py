"""The association tree: model.account_tree, the snapshot's `associations`, and reading it from Slurm.

The Slurm side replays `scontrol show assoc_mgr flags=assoc` captured from
the sandbox (tests/fixtures/slurm-22.05/scontrol-show-assoc-mgr.txt).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_drf.config.load import parse_config_text
from slurm_drf.errors import SlurmReadError, SnapshotError
from slurm_drf.model.account_tree import EMPTY_TREE, build_tree
from slurm_drf.model.codec import parse_snapshot, render_snapshot
from slurm_drf.model.types import Association, Snapshot
from slurm_drf.policy.tree_weights import TreeWeights, compute_tree_weights
from slurm_drf.slurm.cli_source import TREE_MAX_AGE, AssociationReader, build_assoc_mgr_argv
from slurm_drf.slurm.parse.assoc_mgr import check_associations, parse_assoc_mgr
from tests.paths import FIXTURES

FIXTURE = FIXTURES / "slurm-22.05" / "scontrol-show-assoc-mgr.txt"


def sandbox_tree() -> tuple[Association, ...]:
    return parse_assoc_mgr(FIXTURE.read_text(), "drftest")


def test_the_sandbox_capture_reads_as_its_tree() -> None:
    associations = sandbox_tree()
    tree = build_tree(associations)
    assert tree.root == "root"
    assert tree.path("theory") == ("physics", "theory")
    assert tree.path("lab") == ("physics", "lab")
    assert tree.path("gputeam") == ("research", "gputeam")
    assert tree.path("root") == ()
    assert tree.children["research"] == ("cputeam", "gputeam", "memteam", "newteam")
    assert tree.children["root"] == ("physics", "research")
    assert tree.children["physics"] == ("lab", "theory")
    assert tree.users["theory"] == ("drfalice", "drfbob", "root")
    assert tree.users["lab"] == ("drfcarol", "root")
    # RawShares: theory 2, lab 1; drfbob's fairshare=parent prints 2147483647.
    assert (tree.shares["theory"], tree.shares["lab"]) == (2, 1)
    assert tree.user_shares[("theory", "drfbob")] is None
    assert tree.user_shares[("theory", "drfalice")] == 1
    assert tree.parent("theory") == "physics" and tree.parent("research") == "root" and tree.parent("root") is None
    assert tree.user_parent("theory", "drfalice") == "theory"
    assert tree.user_parent("lab", "drfalice") is None
    # User associations' parent is their account (scontrol prints ParentAccount= for them).
    assert all(a.parent == a.account for a in associations if a.user is not None)


def test_other_clusters_are_left_out() -> None:
    assert parse_assoc_mgr(FIXTURE.read_text(), "othercluster") == ()
    assert parse_assoc_mgr(FIXTURE.read_text(), None) == sandbox_tree()


def test_partition_associations_collapse_and_unreadable_records_are_skipped(caplog: pytest.LogCaptureFixture) -> None:
    text = """Current Association Manager state

Association Records

ClusterName=c Account=root UserName= Partition= Priority=0 ID=1
    SharesRaw/Norm/Level/Factor=1/0.00/1/0.00
    ParentAccount= Lft=1 DefAssoc=No
ClusterName=c Account=physics UserName= Partition= Priority=0 ID=2
    SharesRaw/Norm/Level/Factor=5/0.00/1/0.00
    ParentAccount=root(1) Lft=2 DefAssoc=No
ClusterName=c Account=physics UserName=alice(1001) Partition=gpu Priority=0 ID=3
    SharesRaw/Norm/Level/Factor=3/0.00/1/0.00
    ParentAccount= Lft=3 DefAssoc=No
ClusterName=c Account=physics UserName=alice(1001) Partition=cpu Priority=0 ID=4
    SharesRaw/Norm/Level/Factor=4/0.00/1/0.00
    ParentAccount= Lft=4 DefAssoc=No
ClusterName=c Account=physics UserName=bob(1002) Partition= Priority=0 ID=5
    SharesRaw/Norm/Level/Factor=?/0.00/1/0.00
    ParentAccount= Lft=5 DefAssoc=No
"""
    with caplog.at_level(logging.WARNING):
        associations = parse_assoc_mgr(text, "c")
    assert associations == (
        Association("root", None, None, 1),
        Association("physics", "root", None, 5),
        Association("physics", "physics", "alice", 3),
    )
    assert [r.getMessage() for r in caplog.records] == [
        "skipping association (account physics, user bob(1002), id 5): SharesRaw '?' is not a number"
    ]


def test_a_broken_tree_from_slurm_is_a_read_error_naming_the_association() -> None:
    with pytest.raises(SlurmReadError, match=r"associations\[1\] \(account a\): parent: no account association"):
        check_associations((Association("root", None), Association("a", "b")))


def test_empty_is_no_tree() -> None:
    assert build_tree(()) == EMPTY_TREE
    assert EMPTY_TREE.paths == {} and EMPTY_TREE.find("physics") is None


@pytest.mark.parametrize(
    ("key", "account"),
    [
        ("theory", "theory"),
        ("physics/theory", "theory"),
        ("root/physics/theory", "theory"),
        ("research/physics/theory", None),  # physics is not under research
        ("root", "root"),
        ("research", "research"),
        ("lab/theory", None),  # a path that is not in the tree
        ("root/theory", None),  # skips a level
        ("chemistry", None),
        ("physics/", None),
    ],
)
def test_config_keys_name_tree_nodes(key: str, account: str | None) -> None:
    assert build_tree(sandbox_tree()).find(key) == account


def test_the_tree_round_trips_through_the_snapshot_format() -> None:
    snapshot = Snapshot("drftest", "2026-11-30T02:00:00Z", (), (), associations=sandbox_tree())
    data = render_snapshot(snapshot)
    assert data["associations"][0] == {"account": "root", "parent": None, "user": None, "shares": 1}
    assert parse_snapshot(data).associations == sandbox_tree()
    # No tree: no key, as before the tree was read.
    assert "associations" not in render_snapshot(Snapshot("drftest", "", (), ()))


def test_a_user_association_without_parent_hangs_under_its_account() -> None:
    data = {
        "format": "slurm-drf-snapshot/1",
        "nodes": [],
        "jobs": [],
        "associations": [{"account": "root", "parent": None}, {"account": "root", "user": "alice", "shares": 2}],
    }
    assert parse_snapshot(data).associations[1] == Association("root", "root", "alice", 2)


@st.composite
def _random_tree(draw: st.DrawFn) -> tuple[list[Association], dict[str, tuple[str, ...]]]:
    """A random tree and each account's expected path, listed in a random order."""
    size = draw(st.integers(0, 30))
    parents = [draw(st.integers(0, i)) for i in range(size)]  # account i+1 hangs under an earlier one
    names = ["root", *(f"a{i + 1}" for i in range(size))]
    expected: dict[str, tuple[str, ...]] = {"root": ()}
    associations = [Association("root", None)]
    for i, parent in enumerate(parents):
        expected[names[i + 1]] = (*expected[names[parent]], names[i + 1])
        associations.append(Association(names[i + 1], names[parent], shares=draw(st.none() | st.integers(0, 9))))
    return draw(st.permutations(associations)), expected


@given(_random_tree())
def test_paths_of_a_random_tree_in_any_order(case: tuple[list[Association], dict[str, tuple[str, ...]]]) -> None:
    associations, expected = case
    tree = build_tree(associations)
    assert dict(tree.paths) == expected
    for account, path in expected.items():
        assert tree.find("/".join(path) or "root") == account
        for child in tree.children[account]:
            assert tree.paths[child][:-1] == path


@given(_random_tree(), st.data())
def test_a_cycle_anywhere_is_refused(
    case: tuple[list[Association], dict[str, tuple[str, ...]]], data: st.DataObject
) -> None:
    associations, expected = case
    below_root = [a for a in associations if a.parent is not None]
    if not below_root:
        return
    # Hang an account under one of its own descendants (or itself).
    moved = data.draw(st.sampled_from(below_root))
    descendants = [name for name, path in expected.items() if moved.account in path]
    target = data.draw(st.sampled_from(descendants))
    changed = [Association(a.account, target, a.user, a.shares) if a == moved else a for a in associations]
    with pytest.raises(SnapshotError, match=r"parent: a cycle \(.*\) never reaches the root"):
        build_tree(changed)


class FakeRun:
    def __init__(self, answers: Sequence[str | SlurmReadError]) -> None:
        self.answers = list(answers)
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> str:
        self.calls.append(list(argv))
        answer = self.answers.pop(0)
        if isinstance(answer, SlurmReadError):
            raise answer
        return answer


def test_the_reader_reads_at_most_every_max_age_and_keeps_the_last_tree(caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    fixture = FIXTURE.read_text()
    run = FakeRun([SlurmReadError("scontrol: exit status 1"), fixture, SlurmReadError("slurmctld down"), fixture])
    reader = AssociationReader(run, lambda: now[0])
    with caplog.at_level(logging.WARNING):
        assert reader.fetch("drftest") == ()  # failed before any read: flat
        now[0] += 1
        assert reader.fetch("drftest") == sandbox_tree()  # a failure is retried at the next fetch
        now[0] += TREE_MAX_AGE - 2
        assert reader.fetch("drftest") == sandbox_tree()  # cached: no command
        assert len(run.calls) == 2
        now[0] += 2
        assert reader.fetch("drftest") == sandbox_tree()  # stale: read again, failed, kept
        assert len(run.calls) == 3
    assert [r.getMessage() for r in caplog.records] == [
        "association tree unknown (flat): scontrol: exit status 1",
        f"association tree unknown (keeping the tree read {TREE_MAX_AGE:.0f}s ago): slurmctld down",
    ]
    assert run.calls[0] == build_assoc_mgr_argv() == ["scontrol", "show", "assoc_mgr", "flags=assoc"]


def test_a_tree_slurm_prints_broken_is_a_warning_not_a_failed_cycle(caplog: pytest.LogCaptureFixture) -> None:
    broken = FIXTURE.read_text().replace("ParentAccount=physics(12)", "ParentAccount=gone(99)", 1)
    reader = AssociationReader(FakeRun([broken]), lambda: 0.0)
    with caplog.at_level(logging.WARNING):
        assert reader.fetch("drftest") == ()
    (message,) = [r.getMessage() for r in caplog.records]
    assert message == (
        "association tree unknown (flat): Slurm's association tree: "
        "associations[3] (account lab): parent: no account association for 'gone'"
    )


# --- weights of the tree's nodes (policy.tree_weights) ---------------------------------------


def _weights(text: str) -> TreeWeights:
    return compute_tree_weights(parse_config_text(text, "c.yaml"), build_tree(sandbox_tree()))


def test_by_default_every_node_weighs_default_weight_and_users_are_equal() -> None:
    weights = _weights("default_weight: 3\n")
    assert weights.accounts["root"] == 1
    assert {weights.accounts[a] for a in ("research", "physics", "theory", "lab", "gputeam")} == {Fraction(3)}
    assert set(weights.users.values()) == {Fraction(1)}
    assert set(weights.users) == set(build_tree(sandbox_tree()).user_shares)
    assert weights.warnings == ()


def test_paths_and_names_set_weights_and_the_longer_path_wins() -> None:
    weights = _weights(
        "accounts:\n  physics/theory: {weight: 2, users: {drfalice: 4}}\n  theory: {weight: 5}\n"
        "  root/physics/lab: {weight: 0.5}\n  lab/theory: {weight: 9}\n  gputeam: {exclude: true}\n"
    )
    assert (weights.accounts["theory"], weights.accounts["lab"]) == (Fraction(2), Fraction(1, 2))
    assert weights.users[("theory", "drfalice")] == 4 and weights.users[("theory", "drfbob")] == 1
    assert weights.excluded == {"gputeam"}
    assert weights.warnings == (
        "c.yaml:5: accounts.lab/theory: Slurm's account tree has no account or path 'lab/theory'",
        "c.yaml:2: accounts.physics/theory: names account 'theory', as accounts.theory does; "
        "the longer path 'physics/theory' is used",
    )


def test_slurm_shares_are_weights_and_yaml_still_wins() -> None:
    weights = _weights("weights: slurm\ndefault_weight: 7\naccounts:\n  lab: {weight: 3, users: {drfcarol: 5}}\n")
    # RawShares: theory 2; lab 1 but the YAML says 3; drfbob's "parent" is the default (users: 1).
    assert (weights.accounts["theory"], weights.accounts["lab"], weights.accounts["physics"]) == (
        Fraction(2),
        Fraction(3),
        Fraction(1),
    )
    assert weights.users[("theory", "drfbob")] == 1 and weights.users[("lab", "drfcarol")] == 5
    zero = compute_tree_weights(
        parse_config_text("weights: slurm\ndefault_weight: 7\n", "c"),
        build_tree((Association("root", None), Association("a", "root", None, 0), Association("b", "root"))),
    )
    # RawShares 0 and "parent" fall back to default_weight: never a weight of 0.
    assert (zero.accounts["a"], zero.accounts["b"]) == (Fraction(7), Fraction(7))


def test_a_user_weight_for_a_user_slurm_does_not_have_warns() -> None:
    weights = _weights("accounts:\n  theory:\n    users: {drfdave: 2}\n")
    assert weights.users[("theory", "drfdave")] == 2
    assert weights.warnings == (
        "c.yaml:2: accounts.theory.users.drfdave: Slurm has no association of user 'drfdave' in account "
        "'theory'; the weight has no effect until it exists",
    )
