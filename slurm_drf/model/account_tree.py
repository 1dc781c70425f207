"""Slurm's association tree, checked: each account's path from the root, its children and users.

Pure, beside the codec in the model layer: the snapshot parser
(`model.codec`) and the Slurm readers (`slurm.parse`) check associations
with `build_tree`, and the policy asks the tree for paths, children, users
and RawShares. An empty list of associations is no tree: one flat level of
accounts, as before the tree was read.

A tree has one root (the account association without a parent, Slurm's
`root`); every other account association names an existing parent account,
and following parents from any account reaches the root (no cycles). A
user association hangs under its own account, which must exist. Each
(account, user) pair is listed once. Paths leave the root out: the path of
`theory` under research -> physics is ("research", "physics", "theory").
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from types import MappingProxyType
from typing import Final

from slurm_drf.errors import SnapshotError
from slurm_drf.model.types import Association

# A config key names a tree node by its path, the names joined by this.
PATH_SEPARATOR: Final = "/"

# The deepest account tree accepted: levels below the root (the root's children are at 1).
# Real sites have a handful; each level costs every row and job below it a
# longer path, so a deeper tree is refused in one line (docs/rule.md §7).
MAX_TREE_DEPTH: Final = 1000


def describe_association(association: Association, index: int | None = None) -> str:
    """`associations[3] (account theory, user alice)`: how messages name one."""
    who = f"account {association.account}"
    if association.user is not None:
        who += f", user {association.user}"
    return f"associations[{index}] ({who})" if index is not None else f"association ({who})"


@dataclass(frozen=True, slots=True)
class AccountTree:
    """A checked association tree (`build_tree`); every mapping is keyed by account name."""

    root: str
    # Each account's path from the root, the root itself left out (the root's is ()).
    paths: Mapping[str, tuple[str, ...]]
    # Each account's child accounts, in the order the associations were listed.
    children: Mapping[str, tuple[str, ...]]
    # Each account's user associations' user names, in listed order.
    users: Mapping[str, tuple[str, ...]]
    # RawShares of each account association (None: "parent", it uses its parent's).
    shares: Mapping[str, int | None]
    # RawShares of each user association, keyed by (account, user).
    user_shares: Mapping[tuple[str, str], int | None]

    def path(self, account: str) -> tuple[str, ...] | None:
        """The account's path from the root (root left out); None for an account not in the tree."""
        return self.paths.get(account)

    def parent(self, account: str) -> str | None:
        """The account's parent account; None for the root and for accounts not in the tree."""
        path = self.paths.get(account)
        if not path:
            return None
        return path[-2] if len(path) > 1 else self.root

    def user_parent(self, account: str, user: str) -> str | None:
        """The account a user association hangs under (its own); None when there is no such association."""
        return account if (account, user) in self.user_shares else None

    def find(self, key: str) -> str | None:
        """The account a config key names: a bare name, or a path such as `physics/theory`.

        A bare name is the account of that name wherever it is (Slurm's
        account names are unique). A path names its last account and must
        match the end of that account's path from the root (`research/
        physics/theory`, `physics/theory` and `theory` all name theory); a
        leading `root/` anchors it at the root (`root/physics/theory` is the
        whole path). None when nothing in the tree matches.
        """
        names = tuple(key.split(PATH_SEPARATOR))
        anchored = len(names) > 1 and names[0] == self.root
        if anchored:
            names = names[1:]
        path = self.paths.get(names[-1])
        if path is None:
            return None
        if names == (self.root,):
            return self.root
        matches = path == names if anchored else path[len(path) - len(names) :] == names
        return names[-1] if matches else None


def _refuse(association: Association, index: int, message: str) -> SnapshotError:
    return SnapshotError(f"{describe_association(association, index)}: {message}")


@dataclass(slots=True)
class _Listed:
    """The associations as listed, each checked on its own: accounts and (account, user) pairs by index."""

    accounts: dict[str, int] = field(default_factory=dict)
    parents: dict[str, str | None] = field(default_factory=dict)
    user_index: dict[tuple[str, str], int] = field(default_factory=dict)
    user_shares: dict[tuple[str, str], int | None] = field(default_factory=dict)
    root: str | None = None

    def add_account(self, association: Association, index: int) -> None:
        name = association.account
        if name in self.accounts:
            raise _refuse(association, index, f"listed twice (associations[{self.accounts[name]}] and [{index}])")
        if association.parent is None:
            if self.root is not None:
                raise _refuse(
                    association,
                    index,
                    f"parent: a second root (account {self.root} has no parent either); "
                    "every account but the root needs one",
                )
            self.root = name
        self.accounts[name] = index
        self.parents[name] = association.parent

    def add_user(self, association: Association, user: str, index: int) -> None:
        name = association.account
        pair = (name, user)
        if pair in self.user_index:
            raise _refuse(association, index, f"listed twice (associations[{self.user_index[pair]}] and [{index}])")
        if association.parent is not None and association.parent != name:
            raise _refuse(
                association,
                index,
                f"parent: a user association hangs under its own account {name!r}, got {association.parent!r}",
            )
        self.user_index[pair] = index
        self.user_shares[pair] = association.shares


@dataclass(frozen=True, slots=True)
class AssociationColumns:
    """The associations' fields as columns (one entry per association, in listed order)."""

    account: Sequence[str]
    parent: Sequence[str | None]
    user: Sequence[str | None]
    shares: Sequence[int | None]

    @classmethod
    def of(cls, associations: Sequence[Association]) -> AssociationColumns:
        return cls(
            [a.account for a in associations],
            [a.parent for a in associations],
            [a.user for a in associations],
            [a.shares for a in associations],
        )


def build_tree(associations: Sequence[Association], columns: AssociationColumns | None = None) -> AccountTree:
    """Check the associations form one tree; SnapshotError names the first that does not.

    `columns`: the associations' fields as columns, where the caller has them (the snapshot parser).
    """
    columns = AssociationColumns.of(associations) if columns is None else columns
    listed = _listed_at_once(columns)
    if listed is None:  # something is wrong: one by one, to name the first that is
        listed = _Listed()
        for index, association in enumerate(associations):
            if association.user is None:
                listed.add_account(association, index)
            else:
                listed.add_user(association, association.user, index)
    accounts, parents, user_index = listed.accounts, listed.parents, listed.user_index
    _check_parents(associations, listed)
    paths = _paths(associations, accounts, parents)
    _check_user_accounts(associations, listed)
    children: dict[str, list[str]] = {name: [] for name in accounts}
    for name, parent in parents.items():
        if parent is not None:
            children[parent].append(name)
    users: dict[str, list[str]] = {name: [] for name in accounts}
    for name, user in user_index:
        users[name].append(user)
    assert listed.root is not None or not associations
    shares = columns.shares
    return AccountTree(
        root=listed.root or "",
        paths=MappingProxyType(paths),
        children=MappingProxyType(dict(zip(children, map(tuple, children.values()), strict=True))),
        users=MappingProxyType(dict(zip(users, map(tuple, users.values()), strict=True))),
        shares=MappingProxyType(dict(zip(accounts, map(shares.__getitem__, accounts.values()), strict=True))),
        user_shares=MappingProxyType(listed.user_shares),
    )


def _check_parents(associations: Sequence[Association], listed: _Listed) -> None:
    """Refuse the first account association whose parent is no account association."""
    accounts = listed.accounts
    if set(listed.parents.values()).difference((None,)) <= accounts.keys():
        return
    for name, parent in listed.parents.items():
        if parent is not None and parent not in accounts:
            index = accounts[name]
            raise _refuse(associations[index], index, f"parent: no account association for {parent!r}")


def _check_user_accounts(associations: Sequence[Association], listed: _Listed) -> None:
    """Refuse the first user association of an account that has no account association."""
    accounts = listed.accounts
    if {name for name, _ in listed.user_index} <= accounts.keys():
        return
    for (name, _user), index in listed.user_index.items():
        if name not in accounts:
            raise _refuse(associations[index], index, f"account: no account association for {name!r}")


def _listed_at_once(columns: AssociationColumns) -> _Listed | None:
    """What `_Listed` makes of the associations added one by one, made in C loops over the columns
    (a tree of 100,000 accounts); None when one of them would refuse an association."""
    own = [user is None for user in columns.user]
    theirs = list(map(operator.not_, own))
    own_accounts = list(compress(columns.account, own))
    own_parents = list(compress(columns.parent, own))
    accounts = dict(zip(own_accounts, compress(range(len(own)), own), strict=False))
    pairs = list(zip(compress(columns.account, theirs), compress(columns.user, theirs), strict=True))
    user_index = dict(zip(pairs, compress(range(len(own)), theirs), strict=False))
    roots = own_parents.count(None)
    if len(accounts) != len(own_accounts) or len(user_index) != len(pairs) or roots > 1:
        return None  # an account or a pair listed twice, or a second root
    if not all(map(operator.eq, compress(columns.parent, theirs), compress(columns.account, theirs))):
        return None  # a user association under another account (or of no written parent: one by one)
    return _Listed(
        accounts,
        dict(zip(own_accounts, own_parents, strict=True)),
        user_index,  # type: ignore[arg-type]  # every user of `pairs` is a name: `theirs` has no None
        dict(zip(pairs, compress(columns.shares, theirs), strict=False)),  # type: ignore[arg-type]
        own_accounts[own_parents.index(None)] if roots else None,
    )


def _paths(
    associations: Sequence[Association], accounts: Mapping[str, int], parents: Mapping[str, str | None]
) -> dict[str, tuple[str, ...]]:
    """Each account's path from the root, each found once; a cycle, or a tree deeper than MAX_TREE_DEPTH, is refused.

    The depths come first (O(accounts), no path built), so a refused chain
    of any length costs no more than reading it.
    """
    depths: dict[str, int] = {}
    for start in accounts:
        # The usual case first: the parent's depth is known (or it is the root).
        parent = parents[start]
        if parent is None:
            depths[start] = 0
            continue
        above = depths.get(parent)
        if above is not None:
            depths[start] = above + 1
            continue
        chain: list[str] = []
        on_chain: set[str] = set()
        name: str | None = start
        while name is not None and name not in depths:
            if name in on_chain:
                index = accounts[name]
                loop = " -> ".join([*chain[chain.index(name) :], name])
                raise _refuse(associations[index], index, f"parent: a cycle ({loop}) never reaches the root")
            chain.append(name)
            on_chain.add(name)
            name = parents[name]
        # Now name is None (the chain ended at the root, whose depth is 0) or has a known depth.
        depth = -1 if name is None else depths[name]
        for member in reversed(chain):
            depth += 1
            depths[member] = depth
    deepest = max(depths, key=depths.__getitem__, default=None)
    if deepest is not None and depths[deepest] > MAX_TREE_DEPTH:
        index = accounts[deepest]
        raise _refuse(
            associations[index],
            index,
            f"the account tree is {depths[deepest]} levels deep here, more than the limit of {MAX_TREE_DEPTH}",
        )
    paths: dict[str, tuple[str, ...]] = {}
    # Shallowest first: every parent's path is known before its children's.
    for name in sorted(depths, key=depths.__getitem__):
        parent = parents[name]
        paths[name] = () if parent is None else (*paths[parent], name)
    return paths


EMPTY_TREE: Final = build_tree(())
