"""The weight of every node of Slurm's account tree, from the config and from RawShares.

Pure; sits between the config and the hierarchical order: it resolves the
config's account keys (bare names or tree paths, `model.account_tree.AccountTree.find`)
against the tree read from Slurm and gives each account its weight among
its siblings and each user its weight among its account's users
(docs/configuration.md, `accounts`, `weights`):

- `weights: config`: an account listed under `accounts` has its `weight`,
  every other account `default_weight`; users weigh 1 unless
  `accounts.KEY.users` says otherwise (the users of an account are equal
  by default).
- `weights: slurm`: an account or user not given a weight in the YAML has
  its RawShares. Only siblings are compared, so the raw number serves.
  RawShares "parent" (None) and 0 fall back to the default (`default_weight`
  for accounts, 1 for users): a weight is always > 0.

A key naming nothing in the tree, and two keys naming one account (`theory`
and `physics/theory`), are warnings; of two keys, the longer path wins.

A key names an account (`resolve_key`) by its path where Slurm's tree knows
the account, and by the path's last name where it does not: under
`hierarchy: flat`, before the first tree is read, or for an account the
tree lacks. So an exclusion holds at every moment and in every mode, and a
weight keyed by path weighs its account in a flat plan
(`resolve_account_keys`, docs/rule.md §7).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Final

from slurm_drf.config.settings import Config
from slurm_drf.model.account_tree import PATH_SEPARATOR, AccountTree

ONE: Final = Fraction(1)


@dataclass(frozen=True, slots=True)
class TreeWeights:
    """Weights of a tree's nodes (`compute_tree_weights`)."""

    # Every account of the tree -> its weight among its siblings (the root's is 1).
    accounts: Mapping[str, Fraction]
    # Every user association (account, user) -> its weight among the account's users.
    users: Mapping[tuple[str, str], Fraction]
    # Accounts the config excludes, keys resolved against the tree.
    excluded: frozenset[str]
    # Config keys the tree does not resolve, or that name an account twice.
    warnings: tuple[str, ...]


def _slurm_weight(shares: int | None, default: Fraction) -> Fraction:
    return Fraction(shares) if shares else default


def _where(config: Config, *path: str) -> str:
    """`config.yaml:12: accounts.physics/theory`, as the config's own warnings begin."""
    # Imported for a warning only: config.yaml_tree brings the YAML reader, which a plan does not need.
    from slurm_drf.config.yaml_tree import format_path  # noqa: PLC0415

    key = format_path(("accounts", *path))
    line = config.lines.get(format_path(("accounts", path[0])))
    source = config.source_path or "config"
    return f"{source}:{line}: {key}" if line else f"{source}: {key}"


def last_name(key: str) -> str:
    """The account a path ends in (`physics/theory` -> `theory`); a bare name is itself."""
    return key.rpartition(PATH_SEPARATOR)[2]


def resolve_key(key: str, tree: AccountTree | None) -> str | None:
    """The account a config key names: by its path where the tree knows that account, else by its last name.

    None only where the tree knows the last name and the path does not
    match it (`chemistry/theory` for theory under physics).
    """
    name = last_name(key)
    if tree is None or name not in tree.paths:
        return name
    return tree.find(key)


def _resolve(config: Config, tree: AccountTree | None, keys: list[str], warnings: list[str]) -> dict[str, str]:
    """account -> the key that names it; the longer path wins when two keys name one account.

    Where a tree is known, a key it does not resolve is a warning (a key
    by path or name of an account the tree lacks still names it by name).
    """
    named: dict[str, str] = {}
    for key in sorted(keys, key=lambda k: (k.count(PATH_SEPARATOR), k)):
        found = None if tree is None else tree.find(key)
        if tree is not None and found is None:
            warnings.append(f"{_where(config, key)}: Slurm's account tree has no account or path {key!r}")
        # `resolve_key`, the tree asked once: by path where the tree knows the last name, else by that name.
        name = last_name(key)
        account = name if tree is None or name not in tree.paths else found
        if account is None:
            continue
        if account in named:
            warnings.append(
                f"{_where(config, key)}: names account {account!r}, as accounts.{named[account]} does; "
                f"the longer path {key!r} is used"
            )
        named[account] = key
    return named


def compute_tree_weights(config: Config, tree: AccountTree) -> TreeWeights:
    """Each account's and each user's weight among its siblings, by the config's `weights:` rule."""
    from_slurm = config.weight_source == "slurm"
    warnings: list[str] = []
    default = config.default_weight
    accounts: dict[str, Fraction] = (
        {account: _slurm_weight(tree.shares.get(account), default) for account in tree.paths}
        if from_slurm
        else dict.fromkeys(tree.paths, default)
    )
    if tree.root in accounts:
        accounts[tree.root] = ONE  # the root has no siblings
    for account, key in _resolve(config, tree, list(config.weights), warnings).items():
        accounts[account] = config.weights[key]
    users: dict[tuple[str, str], Fraction] = {
        pair: _slurm_weight(shares, ONE) if from_slurm else ONE for pair, shares in tree.user_shares.items()
    }
    for account, key in _resolve(config, tree, list(config.user_weights), warnings).items():
        for user, weight in config.user_weights[key].items():
            if (account, user) not in users:
                warnings.append(
                    f"{_where(config, key, 'users', user)}: Slurm has no association of user {user!r} "
                    f"in account {account!r}; the weight has no effect until it exists"
                )
            users[(account, user)] = weight
    return TreeWeights(
        accounts=MappingProxyType(accounts),
        users=MappingProxyType(users),
        excluded=excluded_accounts(config, tree, warnings),
        warnings=tuple(dict.fromkeys(warnings)),
    )


def excluded_accounts(config: Config, tree: AccountTree | None, warnings: list[str]) -> frozenset[str]:
    """The accounts the config excludes: each key as written, and the account it names (`resolve_key`).

    Where a tree is known, a key it does not resolve is a warning, as for weights.
    """
    excluded = set(config.exclude_accounts)
    for key in sorted(config.exclude_accounts):
        if tree is not None and tree.find(key) is None:
            warnings.append(f"{_exclude_where(config, key)}: Slurm's account tree has no account or path {key!r}")
        account = resolve_key(key, tree)
        if account is not None:
            excluded.add(account)
    return frozenset(excluded)


def _exclude_where(config: Config, key: str) -> str:
    """Where an exclusion was written: `accounts.KEY.exclude`, or the `exclude_accounts` list."""
    from slurm_drf.config.yaml_tree import format_path  # noqa: PLC0415  (as in `_where`)

    source = config.source_path or "config"
    path = format_path(("accounts", key, "exclude"))
    line = config.lines.get(path)
    if line is None:
        path = "exclude_accounts"
        line = config.lines.get(path)
    return f"{source}:{line}: {path}" if line else f"{source}: {path}"


@dataclass(frozen=True, slots=True)
class AccountKeys:
    """The config's account keys resolved for a flat plan (no tree to order over)."""

    # Account name -> its weight, for the accounts some key names.
    weights: Mapping[str, Fraction]
    excluded: frozenset[str]
    warnings: tuple[str, ...]


def resolve_account_keys(config: Config, tree: AccountTree | None) -> AccountKeys:
    """Weights and exclusions of a flat plan: each key names its account (`resolve_key`).

    `tree` is Slurm's tree where one was read (`hierarchy: flat` resolves
    paths against it), None before any was read.
    """
    warnings: list[str] = []
    weights = {
        account: config.weights[key] for account, key in _resolve(config, tree, list(config.weights), warnings).items()
    }
    excluded = excluded_accounts(config, tree, warnings)
    return AccountKeys(MappingProxyType(weights), excluded, tuple(dict.fromkeys(warnings)))
