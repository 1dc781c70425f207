"""A plan's account rows: each account present in a pool, its usage, shares, dominant resource and rank.

Pure, in the policy layer under `policy.plan`, which gathers the accounts of
each pool (`PresentAccounts`) and lists their rows (`account_shares`) in the
plan, the share report and `explain`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from slurm_drf.model.types import FloatArray, IntArray, pick_rows
from slurm_drf.policy.plan_columns import AccountColumns
from slurm_drf.policy.pools import weighted_shares


@dataclass(frozen=True, slots=True, eq=False)
class PresentAccounts:
    """The accounts with a running or pending job in a pool: names, weights, usage (A, R), job counts, past."""

    names: list[str]
    fractions: list[Fraction]
    usage: IntArray
    running_count: list[int]
    pending_count: list[int]
    past: IntArray | None = None


def account_shares(
    pool: str, present_accounts: PresentAccounts, capacity_map: Mapping[str, int], resources: Sequence[str]
) -> AccountColumns:
    """One row per account present in the pool, ranked by weighted share (lowest first).

    `rank` is 1 + the number of accounts with a strictly lower weighted
    share: equal shares share a rank, since only the tie rule (in the
    order) says which of them is served first; the rows of equal rank are
    listed by name. An account that uses none of the pool's resources has
    no dominant resource (None), not the first of a row of zeros.
    Shares are over the running usage plus what the past adds (`past`).
    """
    account_names, fractions = present_accounts.names, present_accounts.fractions
    running_count, pending_count = present_accounts.running_count, present_accounts.pending_count
    usage, past = present_accounts.usage, present_accounts.past
    running = usage
    if past is not None:
        usage = usage + past
    capacity = np.array([capacity_map[r] for r in resources], dtype=np.float64)
    usable = capacity > 0
    shares = np.divide(usage, capacity, out=np.zeros(usage.shape, dtype=np.float64), where=usable)
    masked = np.where(usable, shares, -1.0)
    count = len(account_names)
    dominant = masked.argmax(axis=1) if len(resources) else np.zeros(count, dtype=np.int64)
    weighted = weighted_shares(usage, capacity, fractions)
    present = None if past is None or not past.any() else weighted_shares(running, capacity, fractions)
    ranked = _by_share_and_name(weighted, account_names)
    in_order = weighted[ranked]
    # Equal shares share the rank of the first of them.
    first_of_equal = np.r_[True, in_order[1:] != in_order[:-1]] if count else np.zeros(0, dtype=np.bool_)
    rank = np.maximum.accumulate(np.where(first_of_equal, np.arange(1, count + 1), 0)) if count else ranked
    top = shares[ranked, dominant[ranked]] if len(resources) else np.zeros(count, dtype=np.float64)
    has_dominant = (top > 0) & bool(usable.any())
    names = list(resources)
    return AccountColumns(
        pool,
        tuple(resources),
        pick_rows(account_names, ranked),
        pick_rows(fractions, ranked),
        pick_rows(running_count, ranked),
        pick_rows(pending_count, ranked),
        running[ranked],
        shares[ranked],
        [names[d] if has else None for d, has in zip(dominant[ranked].tolist(), has_dominant.tolist(), strict=True)]
        if has_dominant.any()
        else [None] * count,
        np.where(has_dominant, top, 0.0).tolist(),
        in_order.tolist(),
        rank.tolist(),
        None if past is None else past[ranked],
        None if present is None else present[ranked].tolist(),
    )


def _by_share_and_name(weighted: FloatArray, names: Sequence[str]) -> IntArray:
    """The rows ordered by (weighted share, name): by name (a sort keyed in C), then stably by share
    in numpy, the same order as sorting the pairs (shares are never NaN here; should one be, the pairs are sorted)."""
    if np.isnan(weighted).any():
        shares: list[float] = weighted.tolist()
        return np.array(sorted(range(len(names)), key=lambda i: (shares[i], names[i])), dtype=np.int64)
    by_name = np.array(sorted(range(len(names)), key=names.__getitem__), dtype=np.int64)
    ranked: IntArray = by_name[np.argsort(weighted[by_name], kind="stable")]
    return ranked
