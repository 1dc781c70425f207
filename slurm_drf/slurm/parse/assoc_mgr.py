"""Slurm's account tree: `scontrol show assoc_mgr flags=assoc` -> Associations.

Read by both sources; the tree they form is built and checked by
`model.account_tree.build_tree` (`check_associations`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from typing import Final

from slurm_drf.errors import SlurmReadError, SnapshotError
from slurm_drf.model.account_tree import build_tree
from slurm_drf.model.types import Association
from slurm_drf.slurm.parse.lines import split_lines

logger = logging.getLogger(__name__)


# RawShares of an association whose fairshare is "parent" (SLURMDB_FS_USE_PARENT).
SHARES_USE_PARENT: Final = 0x7FFFFFFF


# `name(id)` as scontrol prints a user (`alice(1001)`) or a parent account (`physics(12)`).
_NAME_WITH_ID: Final = re.compile(r"^(.*?)\(\d+\)$")


def _without_id(value: str) -> str:
    found = _NAME_WITH_ID.match(value)
    return found.group(1) if found else value


# The lines of a record that say what the tree needs; the limits (Grp*, Max*)
# are a dozen more lines per association, not looked at.
_ASSOC_MGR_LINES: Final = ("ClusterName=", "SharesRaw", "ParentAccount=")
_BLANKS: Final = re.compile(r"[ \t]+")


def _assoc_mgr_records(text: str) -> Iterator[dict[str, str]]:
    """The key=value pairs of each record; a record starts at a `ClusterName=` line."""
    record: dict[str, str] | None = None
    for raw in split_lines(text):
        # Slurm pads with spaces (and tabs): a name may hold U+2028, U+0085 or \x1c, which str.split() splits at.
        line = raw.lstrip(" \t")
        if not line.startswith(_ASSOC_MGR_LINES):
            continue
        if line.startswith("ClusterName="):
            if record is not None:
                yield record
            record = {}
        if record is None:
            continue
        for token in _BLANKS.split(line):
            key, equals, value = token.partition("=")
            if equals:
                record.setdefault(key, value)
    if record is not None:
        yield record


def _assoc_mgr_association(record: Mapping[str, str]) -> Association:
    """One association from its record; ValueError for one that cannot be read."""
    account = record.get("Account", "")
    if not account:
        raise ValueError("no Account")
    user = _without_id(record.get("UserName", "")) or None
    parent = _without_id(record.get("ParentAccount", "")) or None
    shares_text = record.get("SharesRaw/Norm/Level/Factor", "").split("/", 1)[0]
    if not shares_text.isdigit():
        raise ValueError(f"SharesRaw {shares_text!r} is not a number")
    shares: int | None = int(shares_text)
    if shares == SHARES_USE_PARENT:
        shares = None
    return Association(account, account if user is not None else parent, user, shares)


def parse_assoc_mgr(text: str, cluster: str | None = None) -> tuple[Association, ...]:
    """The associations in `scontrol show assoc_mgr flags=assoc` (22.05 to 25.11 print the same).

    Each record's first line reads `ClusterName=C Account=A UserName=U(uid)
    Partition=P ...`, an indented line `SharesRaw/Norm/Level/Factor=R/...`
    and one `ParentAccount=NAME(id) ...` (empty for the root and for user
    associations, whose parent is their account). RawShares 2147483647 is
    fairshare=parent (None). Records of other clusters than `cluster`
    (when given) are left out; a user's partition associations collapse into
    the first one listed (the tree has one node per user and account). A
    record that cannot be read is skipped with a warning naming it; the
    tree is checked by `check_associations`.
    """
    associations: list[Association] = []
    seen: set[tuple[str, str | None]] = set()
    for record in _assoc_mgr_records(text):
        if cluster and record.get("ClusterName", cluster) != cluster:
            continue
        try:
            association = _assoc_mgr_association(record)
        except ValueError as error:
            logger.warning(
                "skipping association (account %s, user %s, id %s): %s",
                record.get("Account", "?"),
                record.get("UserName", "") or "none",
                record.get("ID", "?"),
                error,
            )
            continue
        key = (association.account, association.user)
        if association.user is not None and key in seen:
            continue
        seen.add(key)
        associations.append(association)
    return tuple(associations)


def check_associations(associations: tuple[Association, ...]) -> tuple[Association, ...]:
    """The associations when they form one tree (`model.account_tree.build_tree`);
    SlurmReadError names the first bad one."""
    try:
        build_tree(associations)
    except SnapshotError as error:
        raise SlurmReadError(f"Slurm's association tree: {error}") from error
    return associations
