"""From the order to the values written to Slurm: strictly increasing, within Slurm's clamps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

import numpy as np

from slurm_drf.config.settings import MODES, NICE_LIMIT
from slurm_drf.model.types import BoolArray, IntArray
from slurm_drf.policy.label_space import horizon, label_space, priority_weight_sum, value_offset
from slurm_drf.policy.state import LABEL_NICE_BELOW, Recalled

# The label space's arithmetic is `policy.label_space` (numpy-free, for check-config); named here too.
__all__ = [
    "ValueParts",
    "adjust_for_memory",
    "horizon",
    "label_space",
    "labels_of",
    "mode_values",
    "priority_weight_sum",
    "value_offset",
]


# The codes of `Recalled.mode`: the index of the mode that wrote the value remembered.
_NICE: Final = MODES.index("nice")
_PRIORITY: Final = MODES.index("priority")


class ValueParts(NamedTuple):
    """Whose each part of what Slurm shows of some pending jobs is (`adjust_for_memory`), per job."""

    base: IntArray
    """Slurm's priority with this daemon's adjustment taken out."""
    own_nice: IntArray
    """The user's own nice: what the job had before we first wrote it."""
    current: list[int | None]
    """The value Slurm has now in this mode (a site factor: the one we remember writing)."""
    our_part: IntArray
    """Our part of the value this mode last wrote: the nice without the user's, the site factor, the priority."""
    ours: BoolArray
    """Whether Slurm shows a value of ours (else `our_part` is 0 and means nothing)."""


def adjust_for_memory(
    priority: IntArray,
    nice: IntArray,
    site_factor: Sequence[int | None],
    mode: str,
    recalled: Recalled,
) -> ValueParts:
    """Per job: base priority, the user's own nice, the value Slurm has now,
    our part of the value this mode last wrote (the nice without the user's,
    the site factor, the priority), and whether there is one (`ValueParts`).

    Base priority is Slurm's with this daemon's adjustment removed. The
    user's nice is what the job had before we first wrote it. A job's nice
    is never taken for its own while it is one of ours (docs/rule.md §5,
    "Whose value it is"): the value we last wrote, or any nice below
    LABEL_NICE_BELOW, which no person sets (an older value of ours that a
    restarted slurmctld brought back, or a label of an earlier install).
    Such a job keeps the own nice we remember (0 when we remember none) and
    is written again as needed. Any other nice than ours is somebody's new choice
    (the user's or an admin's): it becomes the job's own, and our label is
    written again beside it. site_factor cannot be read back from squeue,
    so its current value is the one we remember writing. A priority
    somebody else changed is not ours any more.
    """
    # In priority mode the daemon owns the order: Slurm's own priority is
    # gone once written, so within an account submit order decides, for
    # touched and untouched jobs alike (else the first write would reorder).
    base = priority.copy() if mode != "priority" else np.zeros_like(priority)
    own = nice.copy()
    if mode == "nice":
        current: list[int | None] = nice.tolist()
    elif mode == "priority":
        current = priority.tolist()
    else:
        current = list(site_factor)
    ours = np.zeros(len(priority), dtype=np.bool_)
    our_part = np.zeros(len(priority), dtype=np.int64)
    label = nice < LABEL_NICE_BELOW
    if not len(recalled.at):
        _not_own(label, own, base, mode, nice)
        return ValueParts(base, own, current, our_part, ours)
    at, user, written, by = recalled.at, recalled.user_nice, recalled.written, recalled.mode
    # The user's nice, whatever mode wrote last: nice mode's value is ours
    # while Slurm shows it or an older label of ours; priority mode made
    # Slurm zero the nice.
    shows_ours = nice[at] == written
    restore = ((by == _NICE) & shows_ours) | label[at] | (by == _PRIORITY)
    own[at[restore]] = user[restore]
    label[at[restore]] = False
    _not_own(label, own, base, mode, nice)
    # Another mode's value is undone before this mode writes: only this mode's count here.
    same = by == MODES.index(mode)
    at, written, user = at[same], written[same], user[same]
    if mode == "nice":
        base[at] = priority[at] + (nice[at] - own[at])
        # Our part of what we last wrote: its label is kept, and a job that
        # shows anything else (a new own nice, an older value of ours) is
        # written again with it.
        our_part[at] = written - user
        ours[at] = True
    elif mode == "site_factor":
        for k, value in zip(at.tolist(), written.tolist(), strict=True):
            if current[k] is None:
                current[k] = value
            ours[k] = current[k] == value
        base[at] -= written
        our_part[at] = written
    else:
        ours[at] = priority[at] == written
        our_part[at] = written
    return ValueParts(base, own, current, our_part, ours)


def _not_own(label: BoolArray, own: IntArray, base: IntArray, mode: str, nice: IntArray) -> None:
    """Jobs holding a label nobody remembers writing: own nice 0, our adjustment out of the base."""
    if not label.any():
        return
    own[label] = 0
    if mode != "priority":
        base[label] += nice[label]


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
