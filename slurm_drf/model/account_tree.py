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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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


def build_tree(associations: Sequence[Association]) -> AccountTree:
    """Check the associations form one tree; SnapshotError names the first that does not."""
    listed = _Listed()
    for index, association in enumerate(associations):
        if association.user is None:
            listed.add_account(association, index)
        else:
            listed.add_user(association, association.user, index)
    accounts, parents, user_index = listed.accounts, listed.parents, listed.user_index
    for name, parent in parents.items():
        if parent is not None and parent not in accounts:
            index = accounts[name]
            raise _refuse(associations[index], index, f"parent: no account association for {parent!r}")
    paths = _paths(associations, accounts, parents)
    for (name, _user), index in user_index.items():
        if name not in accounts:
            raise _refuse(associations[index], index, f"account: no account association for {name!r}")
    children: dict[str, list[str]] = {name: [] for name in accounts}
    for name, parent in parents.items():
        if parent is not None:
            children[parent].append(name)
    users: dict[str, list[str]] = {name: [] for name in accounts}
    for name, user in user_index:
        users[name].append(user)
    assert listed.root is not None or not associations
    return AccountTree(
        root=listed.root or "",
        paths=MappingProxyType(paths),
        children=MappingProxyType({name: tuple(kids) for name, kids in children.items()}),
        users=MappingProxyType({name: tuple(names) for name, names in users.items()}),
        shares=MappingProxyType({name: associations[index].shares for name, index in accounts.items()}),
        user_shares=MappingProxyType(listed.user_shares),
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
