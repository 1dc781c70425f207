"""Associations read and checked column by column (issue 40: a tree of 100,000 accounts) are what the
careful path makes of them, record by record: the same associations, the same tree, the same first error."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

import slurm_drf.model.account_tree as account_tree
import slurm_drf.model.codec as codec
from slurm_drf.errors import SnapshotError
from slurm_drf.model.account_tree import AccountTree, build_tree
from slurm_drf.model.types import Association


def _records(rng: random.Random) -> list[Any]:
    """Associations as a snapshot may hold them, now and then broken the ways the checks name."""
    names = [f"a{i}" for i in range(rng.randint(0, 12))]
    records: list[Any] = [{"account": "root", "parent": None, "user": None, "shares": 1}] if names else []
    placed = ["root"]
    for name in names:
        records.append({"account": name, "parent": rng.choice(placed), "shares": rng.choice([1, 0, None, 7])})
        placed.append(name)
        for user in rng.sample(["u", "v", "w"], rng.randint(0, 2)):
            record: dict[str, Any] = {"account": name, "user": user, "shares": rng.choice([1, None])}
            if rng.random() < 0.5:
                record["parent"] = name
            records.append(record)
    rng.shuffle(records) if rng.random() < 0.2 else None
    if records and rng.random() < 0.5:
        broken = dict(rng.choice(records))
        key, value = rng.choice(
            [
                ("account", ""), ("account", 5), ("user", ""), ("parent", "nowhere"), ("parent", None),
                ("shares", -1), ("shares", 2**32), ("shares", True), ("shares", 2.0), ("shares", 2.5),
                ("parent", "a0"), ("user", None), ("account", "a0"),
            ]
        )  # fmt: skip
        broken[key] = value
        records.insert(rng.randint(0, len(records)), broken)
    if rng.random() < 0.05:
        records.append("not an object")
    return records


def _outcome(call: Any) -> Any:
    try:
        return call()
    except SnapshotError as error:
        return f"error: {error}"


def _careful(records: list[Any]) -> Any:
    """Record by record, then `_Listed` association by association."""
    associations = tuple(codec.parse_association(record, index) for index, record in enumerate(records))
    original = account_tree._listed_at_once
    account_tree._listed_at_once = lambda columns: None
    try:
        return associations, build_tree(associations)
    finally:
        account_tree._listed_at_once = original


def test_associations_by_columns_are_the_careful_paths() -> None:
    rng = random.Random(40)
    outcomes: set[str] = set()
    for _ in range(1500):
        records = _records(rng)
        fast = _outcome(lambda records=records: codec._association_tree(records))
        careful = _outcome(lambda records=records: _careful(records))
        assert fast == careful
        outcomes.add(re.sub(r"\[\d+\]|a\d+|'[^']*'", "", fast)[-30:] if isinstance(fast, str) else "tree")
    assert "tree" in outcomes and len(outcomes) > 8  # trees and many kinds of refusal


def test_a_tree_from_associations_or_their_columns_is_one_tree() -> None:
    associations = (
        Association("root", None, None, 1),
        Association("physics", "root", None, 2),
        Association("physics", "physics", "alice", None),
        Association("theory", "physics", None, None),
    )
    tree = build_tree(associations)
    assert isinstance(tree, AccountTree)
    assert tree == build_tree(associations, account_tree.AssociationColumns.of(associations))
    assert dict(tree.paths) == {"root": (), "physics": ("physics",), "theory": ("physics", "theory")}
    assert dict(tree.children) == {"root": ("physics",), "physics": ("theory",), "theory": ()}
    assert dict(tree.users) == {"root": (), "physics": ("alice",), "theory": ()}
    assert dict(tree.shares) == {"root": 1, "physics": 2, "theory": None}
    assert dict(tree.user_shares) == {("physics", "alice"): None}


@pytest.mark.parametrize(
    ("associations", "message"),
    [
        ((Association("a", "b"), Association("b", "a")), "a cycle"),
        (
            (
                Association("root", None),
                Association("x", "root"),
                Association("x", "x", "u"),
                Association("x", "x", "u"),
            ),
            "twice",
        ),
        ((Association("root", None), Association("x", "root", "u", 1)), "hangs under its own account"),
        ((Association("root", None), Association("x", "nowhere")), "no account association for 'nowhere'"),
    ],
)
def test_refusals_name_the_first_faulty_association(associations: tuple[Association, ...], message: str) -> None:
    with pytest.raises(SnapshotError, match=message):
        build_tree(associations)
