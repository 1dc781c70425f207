"""Stable values: the fewest writes that make Slurm's order the plan's (docs/rule.md §5).

Pure numpy and bisect. Each pool's ordered jobs get *labels*: integers in
[lo, hi], lower first. The value written to Slurm is a fixed function of the
label (`values.mode_values`), so a job whose label stays keeps its value and
is not written.

Two bands along the plan's order:

- the *exact* band, the first `horizon` positions: labels strictly increase
  with at least `gap` between neighbours (gap = 1 + the sum of Slurm's other
  PriorityWeight* in strict weighting, so no other factor can swap two of
  them; 1 in factor weighting). Every job after the band has a label at
  least `gap` above the band's last one.
- the *coarse* band, the rest: labels roughly in order. A coarse job keeps
  its label while its rank among the coarse labels is within
  max(horizon, a quarter of its place) of its place in the plan.

This is order maintenance. A cycle keeps, inside the exact band, a longest
run of current labels that is already in order with room between them:
with u = label - gap x position, "label_j - label_i >= gap x (j - i)" is
"u_j >= u_i", so the run is a longest non-decreasing subsequence of u, and
the jobs off it are the fewest that must be written. Those get labels in
the gaps between their kept neighbours, spread evenly so that later
insertions find room; a region is relabelled only when it has none. A job
leaving the head changes no other label; an unchanged cluster changes
none.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from slurm_drf.model.types import BoolArray, IntArray


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


@dataclass(frozen=True, slots=True)
class Labelling:
    labels: IntArray
    exact: int  # positions [0, exact) are the exact band
    kept: BoolArray  # the label is the job's current one


def assign_labels(current: IntArray, known: BoolArray, space: LabelSpace) -> Labelling:
    """Labels for one pool's jobs in plan order, keeping as many `current` ones as the bands allow.

    `known[p]` says `current[p]` is a label this daemon wrote and Slurm
    still holds; other entries of `current` are ignored.
    """
    n = len(current)
    lo, hi, gap = space.lo, space.hi, space.gap
    exact = max(0, min(space.horizon, n, space.separable))
    usable = known & (current >= lo) & (current <= hi)
    kept = np.zeros(n, dtype=np.bool_)
    kept[_exact_anchors(current[:exact], usable[:exact], lo, hi, gap, exact < n)] = True
    anchors = np.flatnonzero(kept)
    # Room left for the rest of the exact band and the step to the coarse band.
    last, last_label = (int(anchors[-1]), int(current[anchors[-1]])) if len(anchors) else (-1, lo - gap)
    floor = last_label + gap * (exact - last)
    if exact < n and space.separable < n:
        # Too little room to keep every job a gap apart: the coarse band is one
        # value at the top of the range, where Slurm's other factors order it,
        # and the exact band has all the room below to move in.
        kept[exact:] = usable[exact:] & (current[exact:] == hi)
        labels = _fill(current, kept, exact, lo, hi - gap, gap)
        labels[exact:] = hi
        return Labelling(labels, exact, kept)
    if exact < n:
        kept[exact:] = _coarse_anchors(current[exact:], usable[exact:] & (current[exact:] >= floor), exact)
    labels = _fill(current, kept, exact, lo, hi, gap)
    return Labelling(labels, exact, kept)


def _exact_anchors(current: IntArray, usable: BoolArray, lo: int, hi: int, gap: int, tail: bool) -> list[int]:
    """Positions of a longest run of exact-band labels in order with room (see the module doc)."""
    size = len(current)
    position = np.arange(size, dtype=np.int64)
    above = size - 1 - position + (1 if tail else 0)
    fits = usable & (current >= lo + gap * position) & (current <= hi - gap * above)
    candidates = np.flatnonzero(fits)
    u = (current[candidates] - gap * candidates).tolist()
    return [int(candidates[i]) for i in _longest_non_decreasing(u)]


def _longest_non_decreasing(values: list[int]) -> list[int]:
    """Indices of one longest non-decreasing subsequence (patience sorting, O(n log n))."""
    tails: list[int] = []  # smallest last value of a run of each length
    ends: list[int] = []  # index of that last value
    previous = [-1] * len(values)
    for i, value in enumerate(values):
        length = bisect.bisect_right(tails, value)
        if length == len(tails):
            tails.append(value)
            ends.append(i)
        else:
            tails[length] = value
            ends[length] = i
        previous[i] = ends[length - 1] if length else -1
    out: list[int] = []
    i = ends[-1] if ends else -1
    while i >= 0:
        out.append(i)
        i = previous[i]
    return out[::-1]


def _coarse_anchors(current: IntArray, usable: BoolArray, horizon: int) -> BoolArray:
    """Coarse-band jobs whose label's rank is near their place: they keep it."""
    candidates = np.flatnonzero(usable)
    keep = np.zeros(len(current), dtype=np.bool_)
    if not len(candidates):
        return keep
    place = np.arange(len(candidates), dtype=np.int64)
    rank = np.empty_like(place)
    rank[np.argsort(current[candidates], kind="stable")] = place
    tolerance = np.maximum(max(horizon, 1), (candidates + horizon) // 4)
    keep[candidates[np.abs(rank - place) <= tolerance]] = True
    return keep


def _fill(current: IntArray, kept: BoolArray, exact: int, lo: int, hi: int, gap: int) -> IntArray:
    """Kept labels stay; every run of other positions is spread over the room between its kept neighbours.

    A run after kept label A (position a) and before kept label B (position b)
    gets A + its exact-band steps x gap + an even share of the spare room; a
    run with no kept job after it uses at most half of what is left below
    `hi`, or what gives its coarse jobs a gap each, so that jobs added at the
    end find room too. Coarse labels never go below any earlier label.
    """
    n = len(current)
    labels = np.where(kept, current, 0).astype(np.int64)
    if kept.all():
        return labels
    anchors = np.flatnonzero(kept)
    # Step k (from position k-1 to k) must rise by `gap` inside the exact band and
    # into the coarse band; a virtual anchor at -1 with label lo - gap puts position 0 at lo or above.
    step = np.where(np.arange(n) <= exact, gap, 0).astype(np.int64)
    rise = np.concatenate(([0], np.cumsum(step)))  # rise[k + 1] = sum of steps 0..k
    anchor_labels = np.maximum.accumulate(labels[anchors]) if len(anchors) else labels[anchors]
    free = np.flatnonzero(~kept)
    after = np.searchsorted(anchors, free)  # index of the next anchor, len(anchors) when none
    a = np.where(after > 0, anchors[np.maximum(after - 1, 0)] if len(anchors) else -1, -1)
    left = np.where(after > 0, anchor_labels[np.maximum(after - 1, 0)] if len(anchors) else 0, lo - gap)
    has_right = after < len(anchors)
    b = np.where(has_right, anchors[np.minimum(after, len(anchors) - 1)] if len(anchors) else n, n)
    right = np.where(has_right, labels[anchors][np.minimum(after, len(anchors) - 1)] if len(anchors) else 0, 0)
    if kept[exact:].any():
        # The run that ends the exact band stops below every coarse label, not only the next one.
        lowest = int(current[exact:][kept[exact:]].min())
        right = np.where(has_right & (a < exact), np.minimum(right, lowest), right)
    needed = rise[np.minimum(b, n - 1) + 1] - rise[a + 1]
    spare_end = hi - left - (rise[n] - rise[a + 1])
    wanted = gap * (n - a)  # enough for a gap at every step to the end
    spare_open = np.clip(np.maximum(spare_end // 2, np.minimum(wanted, spare_end)), 0, None)
    spare = np.where(has_right, np.maximum(np.maximum(right, left) - left - needed, 0), spare_open)
    steps = b - a
    filled = left + (rise[free + 1] - rise[a + 1]) + (spare * (free - a)) // steps
    labels[free] = np.minimum(filled, hi)
    return labels


def fewest_writes(current: IntArray, known: BoolArray, gap: int = 1) -> int:
    """The fewest of these jobs (in plan order) that must be written so that the
    current labels of the others rise by at least `gap` per position: the
    order-theoretic minimum the benchmarks compare against (gap 1: Slurm's
    order equals the plan's)."""
    candidates = np.flatnonzero(known)
    u = (current[candidates] - gap * candidates).tolist()
    return len(current) - len(_longest_non_decreasing(u))
