"""From the order to the values written to Slurm: strictly increasing, within Slurm's clamps."""

from __future__ import annotations

import numpy as np

from slurm_drf.config.settings import NICE_LIMIT
from slurm_drf.model.types import IntArray
from slurm_drf.policy.label_space import horizon, label_space, priority_weight_sum, value_offset

# The label space's arithmetic is `policy.label_space` (numpy-free, for check-config); named here too.
__all__ = [
    "horizon",
    "label_space",
    "labels_of",
    "mode_values",
    "priority_weight_sum",
    "value_offset",
]


def labels_of(mode: str, our_part: IntArray, offset: int) -> IntArray:
    """The labels that our parts of the values last written (`adjust_for_memory`) were made from."""
    if mode == "nice":
        return our_part + offset
    return offset - our_part


def mode_values(mode: str, values: IntArray, offset: int, user_nice: IntArray) -> IntArray:
    """The numbers written to Slurm in `mode` for these labels (docs/rule.md §5), vectorised.

    nice: the user's nice plus ours (label - offset), ours at most -1 so
    that Slurm's clamp of priority to >= 1 never merges two jobs;
    site_factor and priority: offset - label, at least 1 (priority 0
    would hold the job).
    """
    if mode == "nice":
        ours = np.minimum(values - offset, -1)
        return np.clip(user_nice + ours, -NICE_LIMIT, NICE_LIMIT)
    return np.clip(offset - values, 1, NICE_LIMIT)
