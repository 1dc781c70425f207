"""The daemon's loop as Slurm sees it: values written under a cap, Slurm's priority from them.

Sits beside `policies`, which uses it for the `drf-labels` and `drf-spread`
policies; pure numpy, no simulator state. Where the `drf` policy queues
jobs in the plan's order (the idealised reference), these model what
really happens between the daemon and Slurm every cycle:

1. the DRF order is turned into nice values by a mapping: `labels`, the
   daemon's own (`policy.labels.assign_labels`, with its memory of what it
   wrote, the exact band and the coarse band), or `spread`, the mapping
   of 0.1.0 (`spread_values` here: round(scale x level) raised
   to at least its predecessor + the gap);
2. only values that differ from what Slurm holds are written, the head of
   the order first, at most `max_writes_per_cycle` of them (as
   `cycle.run.select_writes` chooses); the rest keep their old value, and
   a job submitted since the last cycle has none (nice 0);
3. Slurm's priority of a pending job is its other factors, summed and
   truncated as priority/multifactor does, minus its nice, clamped to
   [1, 2^32 - 1]: PriorityWeightAge x min(1, age / PriorityMaxAge) plus
   PriorityWeightQOS for a job in the urgent QOS (`SlurmSide.urgent` of
   the jobs, drawn once per run), and the scheduler takes jobs in that
   order (the engine's main pass stops after `queue_depth` jobs, as
   Slurm's at default_queue_depth; backfill looks at bf_max_job_test).

The daemon sees the same factors as the job's base priority: within an
account, pending jobs are taken by it (high first), then submit order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Final

import numpy as np

from slurm_drf.config.settings import SLURM_DEFAULT_QUEUE_DEPTH, Config
from slurm_drf.model.types import BoolArray, FloatArray, IntArray
from slurm_drf.policy.labels import LabelSpace, assign_labels
from slurm_drf.policy.placement import AccountEntry, PoolTable, value_range
from slurm_drf.policy.values import (
    label_space,
    labels_of,
    mode_values,
    priority_weight_sum,
    value_offset,
)

MAPPINGS: Final = ("labels", "spread")
# Slurm clamps a job's priority to [1, 2^32 - 1].
PRIORITY_MAX: Final = 2**32 - 1
DEFAULT_WEIGHT_AGE: Final = 1000
DEFAULT_WEIGHT_QOS: Final = 10_000
DEFAULT_MAX_AGE: Final = 7 * 86400.0  # Slurm's default PriorityMaxAge
DEFAULT_URGENT: Final = 0.05
# Fair share dominant over age and QOS, as the replay's Slurm has it (SPEC §8, `replay.arms`).
DEFAULT_WEIGHT_FAIRSHARE: Final = 100_000


@dataclass(frozen=True, slots=True)
class SlurmSide:
    """The site model: the Slurm around every policy, its other priority factors and how deep its schedulers look.

    Every policy of a comparison runs under the same one (docs/evaluation.md,
    *One site model*): the same jobs are urgent (`draw_urgent`), each job's
    priority has the same age and QOS terms, and the main scheduler stops
    after `queue_depth` jobs. What differs is the policy's own term: the
    fair-share factor times `weight_fairshare` (multifactor), nothing (fifo),
    or the order the daemon writes (drf and its kin). With the defaults,
    1 + the weights' sum without fair share is 11,001: the gap strict
    weighting keeps between neighbours of the exact band.
    """

    weight_age: int = DEFAULT_WEIGHT_AGE
    weight_qos: int = DEFAULT_WEIGHT_QOS
    max_age: float = DEFAULT_MAX_AGE
    urgent: float = DEFAULT_URGENT  # fraction of the jobs in the urgent QOS (factor 1; the rest 0)
    queue_depth: int = SLURM_DEFAULT_QUEUE_DEPTH  # default_queue_depth
    weight_fairshare: int = DEFAULT_WEIGHT_FAIRSHARE  # multifactor's PriorityWeightFairshare

    def priority_weights(self) -> Mapping[str, int]:
        """The PriorityWeight* the daemon reads from Slurm (fair share is 0 where the daemon runs)."""
        return MappingProxyType({"PriorityWeightAge": self.weight_age, "PriorityWeightQOS": self.weight_qos})

    def weighted(self, age: FloatArray, urgent: BoolArray) -> FloatArray:
        """Age and QOS terms of jobs that have waited `age` seconds, before Slurm truncates the sum."""
        aged: FloatArray = self.weight_age * np.minimum(1.0, np.maximum(age, 0.0) / self.max_age)
        return aged + self.weight_qos * urgent

    def factors(self, age: FloatArray, urgent: BoolArray) -> IntArray:
        """Age and QOS factors of jobs that have waited `age` seconds, summed and truncated."""
        total: IntArray = np.floor(self.weighted(age, urgent)).astype(np.int64)
        return total

    def draw_urgent(self, seed: int | None, records: int) -> BoolArray:
        """Which of a workload's `records` are in the urgent QOS: the same for every policy of one workload."""
        draw = np.random.default_rng([seed or 0, 7]).random(records)
        urgent: BoolArray = draw < self.urgent
        return urgent


DEFAULT_SLURM_SIDE: Final = SlurmSide()


def build_space(config: Config, slurm: SlurmSide, backfill_depth: int) -> LabelSpace:
    """The label space the daemon would use against this Slurm (its weights and depths)."""
    parameters = {"bf_max_job_test": backfill_depth, "default_queue_depth": slurm.queue_depth}
    return label_space(config, slurm.priority_weights(), parameters)


def compute_values(
    mapping: str,
    level_sorted: FloatArray,
    current: IntArray,
    known: BoolArray,
    config: Config,
    space: LabelSpace,
    strict_gap: int,
) -> IntArray:
    """The nice values the daemon wants for jobs in plan order (users' own nice 0).

    `current` is the nice Slurm holds, `known` whether it is one the daemon
    wrote (the daemon's memory); `labels` keeps what it can in `space`,
    `spread` maps levels afresh, `strict_gap` (1 + Slurm's other weights)
    apart, whatever the config's weighting: it knew no other.
    """
    zeros = np.zeros(len(level_sorted), dtype=np.int64)
    if mapping == "labels":
        offset = value_offset(config)
        labelling = assign_labels(labels_of("nice", current, offset), known, space)
        return mode_values("nice", labelling.labels, offset, zeros)
    if mapping == "spread":
        # As 0.1.0 wrote them: one band, always strict, its default scale and the config's offset.
        spread = spread_values(level_sorted, SPREAD_SCALE, strict_gap)
        return mode_values("nice", spread, config.offset, zeros)
    raise ValueError(f"unknown mapping {mapping!r}; choose from {', '.join(MAPPINGS)}")


# 0.1.0's `scale` (its default; the key is ignored now): round(scale x level) made its values.
SPREAD_SCALE: Final = 1_000_000


def spread_values(level_sorted: FloatArray, scale: int, step: int = 1) -> IntArray:
    """The values of 0.1.0, before the order labels, kept for `drf-spread` and the benchmarks that compare with it.

    round(scale x level), each raised to at least its predecessor + `step`:
    spread by rank, so when `step` is large one job leaving the head moves
    every label behind it.
    """
    raw = np.floor(level_sorted * scale + 0.5)
    raw = np.minimum(raw, float(2**62)).astype(np.int64)
    index = np.arange(len(raw), dtype=np.int64) * step
    values: IntArray = np.maximum.accumulate(raw - index) + index
    return values


def strict_gap(slurm: SlurmSide) -> int:
    """1 + the most Slurm's other factors add: how far apart strict weighting keeps neighbours."""
    return priority_weight_sum(slurm.priority_weights()) + 1


def select_writes(values: IntArray, current: IntArray, known: BoolArray, limit: int) -> IntArray:
    """Positions (in plan order) to write this cycle: changed values, the head first, at most `limit`."""
    changed = np.flatnonzero(~known | (values != current))
    chosen: IntArray = changed[:limit]
    return chosen


def slurm_priority(factors: IntArray, nice: IntArray) -> IntArray:
    """Slurm's priority: the other factors minus the nice, clamped to [1, 2^32 - 1]."""
    priority: IntArray = np.clip(factors - nice, 1, PRIORITY_MAX)
    return priority


def placement_pool(
    usage: IntArray,
    weights: Sequence[Fraction],
    names: Sequence[str],
    capacity: IntArray,
    order: tuple[FloatArray, IntArray],
    space: LabelSpace,
    offset: int,
) -> PoolTable:
    """What the script reads after a cycle: the one pool of the simulated cluster as a placement table.

    `usage` (accounts, resources) is each account's usage before its next job, `order` the cycle's
    levels in DRF order and the nice values Slurm holds for those jobs (the k-th best with the k-th
    level, as `policy.placement.build_table` pairs them).
    """
    levels, values = order
    best, worst = value_range("nice", offset)
    return PoolTable(
        name="sim",
        partitions=("sim",),
        capacity=tuple(int(c) for c in capacity),
        default_weight=Fraction(1),
        best=best,
        worst=worst,
        gap=space.gap,
        accounts={name: AccountEntry(weights[a], tuple(int(u) for u in usage[a])) for a, name in enumerate(names)},
        excluded=frozenset(),
        levels=tuple(levels.tolist()),
        values=tuple(np.sort(values).tolist()),
    )
