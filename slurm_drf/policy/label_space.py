"""Where a pool's labels live: the value range, the gap the exact band keeps, its horizon (docs/rule.md §5).

Pure arithmetic on the config and Slurm's weights, without numpy: the plan
(`policy.labels`, `policy.values`) reads it, and so does `check-config`
(`cli.band`), which says what the exact band holds for a site's weights
and should start without the planner.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from slurm_drf.config.settings import HORIZON_MARGIN, SLURM_BF_MAX_JOB_TEST, SLURM_DEFAULT_QUEUE_DEPTH, Config


@dataclass(frozen=True, slots=True)
class LabelSpace:
    """Where one pool's labels live, and how far apart the exact band keeps them."""

    lo: int
    hi: int
    gap: int
    horizon: int

    @property
    def separable(self) -> int:
        """How many jobs the exact band can hold, one gap left above it for the coarse band."""
        return max(0, (self.hi - self.lo) // self.gap) if self.hi >= self.lo else 0


def priority_weight_sum(weights: Mapping[str, int]) -> int:
    """The most Slurm's other factors can add to a job's priority (PriorityWeight*).

    PriorityWeightTRES is counted through its per-TRES entries
    (`PriorityWeightTRES/CPU`), each factor being at most its weight.
    """
    return sum(v for k, v in weights.items() if k.startswith("PriorityWeight") and k != "PriorityWeightTRES")


def horizon(config: Config, scheduler_parameters: Mapping[str, int]) -> int:
    """Jobs per pool in the exact band: the config's, or a margin over how deep Slurm looks."""
    if config.horizon is not None:
        return config.horizon
    depth = max(
        scheduler_parameters.get("bf_max_job_test", SLURM_BF_MAX_JOB_TEST),
        scheduler_parameters.get("default_queue_depth", SLURM_DEFAULT_QUEUE_DEPTH),
    )
    return HORIZON_MARGIN * max(depth, 1)


def value_offset(config: Config) -> int:
    """The value a label of 0 is written as (`policy.values.mode_values`)."""
    return config.factor_weight if config.weighting == "factor" else config.offset


def label_space(
    config: Config, priority_weights: Mapping[str, int], scheduler_parameters: Mapping[str, int]
) -> LabelSpace:
    """Where the labels of `policy.values.mode_values` live and how far apart the exact band keeps them.

    Labels run from 0 (ours -offset, site factor or priority offset) to
    offset - 1 (ours -1, site factor or priority 1), offset being
    `factor_weight` in factor weighting: the factor adds between 1 and its
    weight. Strict weighting keeps neighbours 1 + Slurm's other weights apart.
    """
    offset = value_offset(config)
    lo = 0
    strict = config.weighting == "strict" and config.mode != "priority"
    gap = priority_weight_sum(priority_weights) + 1 if strict else 1
    return LabelSpace(lo=lo, hi=offset - 1, gap=gap, horizon=horizon(config, scheduler_parameters))
