"""Pools and their capacity, and accounts' weighted shares as floats (docs/rule.md §2; exact: `policy.rule`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Final, NamedTuple

import numpy as np

from slurm_drf.config.settings import Config
from slurm_drf.model.types import FloatArray, IntArray, Snapshot

DEFAULT_POOL: Final = "default"


def build_pools(snapshot: Snapshot, config: Config) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(name, partitions) of every pool; the default pool holds every managed partition."""
    if config.pools:
        return tuple((p.name, p.partitions) for p in config.pools)
    if config.partitions is not None:
        return ((DEFAULT_POOL, config.partitions),)
    seen: dict[str, None] = {}
    for node in snapshot.nodes:
        seen.update(dict.fromkeys(node.partitions))
    for text in snapshot.table.partitions:
        seen.update(dict.fromkeys(p for p in text.split(",") if p))
    return ((DEFAULT_POOL, tuple(seen)),)


class PoolCapacity(NamedTuple):
    """A pool's summed node TRES (each node once), its node count, and its largest node's TRES."""

    total: dict[str, int]
    nodes: int
    largest: dict[str, int]


def compute_capacity(
    snapshot: Snapshot, partitions: Iterable[str], resources: Sequence[str], include_unavailable: bool = False
) -> PoolCapacity:
    """The pool's capacity: summed node TRES over its nodes, their count, the most of each TRES one node has."""
    wanted = set(partitions)
    capacity = dict.fromkeys(resources, 0)
    largest = dict.fromkeys(resources, 0)
    count = 0
    for node in snapshot.nodes:
        if not wanted.intersection(node.partitions):
            continue
        if not include_unavailable and not node.eligible:
            continue
        count += 1
        for name in resources:
            amount = node.tres.get(name, 0)
            capacity[name] += amount
            largest[name] = max(largest[name], amount)
    return PoolCapacity(capacity, count, largest)


def weighted_shares(
    usage: IntArray, capacity: IntArray | FloatArray, fractions: Sequence[Fraction], of: IntArray | None = None
) -> FloatArray:
    """Each row's dominant share over the usable resources divided by its weight, as floats.

    The weight of row i is `fractions[i]`, or `fractions[of[i]]` when `of`
    maps the rows to the weights (each account's, say). One correctly
    rounded division per share (u*q / (c*p)): shares equal as fractions
    are equal floats. What is shown; the order compares whole numbers
    (`policy.engine.fixed_point`).
    """
    usable = capacity > 0
    rows = len(fractions) if of is None else len(of)
    weighted = np.zeros(rows, dtype=np.float64)
    if usable.any() and rows:
        p, q = fraction_parts(fractions)
        if of is not None:
            p, q = p[of], q[of]
        weighted = ((usage[:, usable] * q[:, None]) / (capacity[usable][None, :] * p[:, None])).max(axis=1)
    return weighted


def fraction_parts(fractions: Sequence[Fraction]) -> tuple[FloatArray, FloatArray]:
    """The numerators and denominators of `fractions` as float64 arrays.

    Each distinct object is read once: the accounts of a large site share a
    few weight objects, and a Fraction's parts are Python-level properties.
    """
    by_object = dict(zip(map(id, fractions), fractions, strict=True))
    slot = {key: k for k, key in enumerate(by_object)}
    index = np.fromiter(map(slot.__getitem__, map(id, fractions)), dtype=np.int64, count=len(fractions))
    numerators = np.array([f.numerator for f in by_object.values()], dtype=np.float64).reshape(-1)
    denominators = np.array([f.denominator for f in by_object.values()], dtype=np.float64).reshape(-1)
    return numerators[index], denominators[index]
