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
  max(horizon, a quarter of its place) of its place in the plan. When the
  range cannot hold every job a gap apart, the coarse band is one label,
  `hi`, and Slurm's other factors order it.

This is order maintenance. A cycle keeps, inside the exact band, a longest
run of current labels that is already in order with room between them:
with u = label - gap x position, "label_j - label_i >= gap x (j - i)" is
"u_j >= u_i", so the run is a longest non-decreasing subsequence of u, and
the jobs off it are the fewest that must be written. (The run is taken over
the band and as many coarse jobs after it, so that a job whose label is
above its followers' is not kept at the band's end, where it would lift the
band over them; the band may so give up one job for each coarse job kept in
order behind it.) The others get labels in
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
from slurm_drf.policy.label_space import LabelSpace

# LabelSpace lives in `policy.label_space` (numpy-free); named here too.
__all__ = ["LabelSpace", "Labelling", "assign_labels", "fewest_writes"]


@dataclass(frozen=True, slots=True, eq=False)
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
    window = min(n, 2 * exact)  # the band and as many coarse jobs after it
    chain = _exact_anchors(current[:window], usable[:window], exact, lo, hi, gap, exact < n)
    kept[[p for p in chain if p < exact]] = True
    in_band = np.flatnonzero(kept)
    # Room left for the rest of the exact band and the step to the coarse band.
    last, last_label = (int(in_band[-1]), int(current[in_band[-1]])) if len(in_band) else (-1, lo - gap)
    floor = last_label + gap * (exact - last)
    if exact < n and space.separable < n:
        # Too little room to keep every job a gap apart: the coarse band is one
        # value at the top of the range, where Slurm's other factors order it,
        # and the exact band has all the room below to move in.
        kept[exact:] = usable[exact:] & (current[exact:] == hi)
        labels = _fill(current, kept, exact, lo, hi, gap)
        labels[exact:] = hi
        return Labelling(labels, exact, kept)
    if exact < n:
        kept[exact:] = _coarse_anchors(current[exact:], usable[exact:] & (current[exact:] >= floor), exact)
    labels = _fill(current, kept, exact, lo, hi, gap)
    return Labelling(labels, exact, kept)


def _exact_anchors(
    current: IntArray, usable: BoolArray, exact: int, lo: int, hi: int, gap: int, tail: bool
) -> list[int]:
    """Positions of a longest run of labels in order with room (see the module doc).

    The run is taken over the band and the coarse jobs after it (`current`
    may be longer than `exact`), which need only not fall: a job whose
    label is above the next ones' is then not kept at the band's end, where
    it would lift the band above the coarse jobs that follow.
    """
    size = len(current)
    position = np.arange(size, dtype=np.int64)
    rise = gap * np.minimum(position, exact)
    above = np.maximum(exact - 1 - position, 0) + (1 if tail else 0)
    fits = usable & (current >= lo + rise) & (current <= np.where(position < exact, hi - gap * above, hi))
    candidates = np.flatnonzero(fits)
    u = (current[candidates] - rise[candidates]).tolist()
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
    """Kept labels stay; each run of other positions is spread over the room between its kept neighbours.

    The exact band first: its runs rise by `gap` a step plus an even share
    of their room, the run that ends the band by at most `cap` more a step,
    below every kept coarse label. Then the coarse band, above the band's
    last label: a gap a step too where the room allows (so that its jobs
    enter the band in order later), never below the band, and a run
    with nothing kept after it uses half of the room left below `hi`, so
    that jobs added at the end find room too.
    """
    n = len(current)
    labels = np.where(kept, current, 0).astype(np.int64)
    cap = max(gap, (hi - lo) // (4 * max(n, 1)))
    coarse = kept[exact:]
    lowest = int(current[exact:][coarse].min()) if coarse.any() else None
    # The band leaves at least one gap for the coarse band above it.
    _fill_runs(labels, kept, _Stretch(0, exact, lo - gap, lowest), hi - gap if exact < n else hi, gap, cap)
    if exact < n:
        # The first coarse label is a gap above the band's last, whatever the room.
        top = int(labels[exact - 1]) if exact else lo - gap
        _fill_runs(labels, kept, _Stretch(exact, n, top + gap, None), hi, gap, None)
    return labels


@dataclass(frozen=True, slots=True)
class _Stretch:
    """Positions [start, stop) to fill between two virtual anchors: `before` at start - 1, `after` at `stop`."""

    start: int
    stop: int
    before: int
    after: int | None


def _fill_runs(labels: IntArray, kept: BoolArray, stretch: _Stretch, hi: int, gap: int, cap: int | None) -> None:
    """Fill the free positions of labels[start:stop] of `stretch` in place (see `_fill`).

    `before` is the label of a virtual anchor at start - 1, `after` that of
    one at `stop` (None: open to `hi`). With `cap` (the exact band) steps
    must rise by `gap`; without it (the coarse band) by `gap` where the room
    allows, by 0 otherwise, and never below `before`.
    """
    start, stop, before, after = stretch.start, stretch.stop, stretch.before, stretch.after
    free = start + np.flatnonzero(~kept[start:stop])
    if not len(free):
        return
    anchors = start + np.flatnonzero(kept[start:stop])
    anchor_labels = labels[anchors]
    floors = anchor_labels if cap is not None else np.maximum(anchor_labels, before)
    nxt = np.searchsorted(anchors, free)
    has_left = nxt > 0
    has_right = nxt < len(anchors)
    a = np.where(has_left, anchors[np.maximum(nxt - 1, 0)] if len(anchors) else 0, start - 1)
    left = np.where(has_left, floors[np.maximum(nxt - 1, 0)] if len(anchors) else 0, before)
    b = np.where(has_right, anchors[np.minimum(nxt, len(anchors) - 1)] if len(anchors) else 0, stop)
    right = np.where(has_right, anchor_labels[np.minimum(nxt, len(anchors) - 1)] if len(anchors) else 0, 0)
    closed = has_right | (after is not None)
    if after is not None:
        right = np.where(has_right, right, after)
    if cap is not None and after is not None:
        right = np.minimum(right, after)  # nothing in the band may reach the coarse band's lowest label
    steps = b - a  # to the right anchor, or to the virtual one at `stop`
    last = np.where(closed, steps, stop - 1 - a)  # steps that must rise
    room = np.where(closed, np.maximum(right, left), hi) - left
    step_gap = np.where(room >= gap * last, gap, 0) if cap is None else np.full(len(free), gap)
    spare = np.maximum(room - step_gap * last, 0)
    if cap is not None:
        spare = np.minimum(spare, cap * steps) if after is None else spare
        spare = np.where(closed & ~has_right, np.minimum(spare, cap * steps), spare)
    spare = np.where(closed, spare, spare // 2)
    filled = left + step_gap * (free - a) + (spare * (free - a)) // steps
    labels[free] = np.minimum(filled, hi)


def fewest_writes(current: IntArray, known: BoolArray, gap: int = 1) -> int:
    """The fewest of these jobs (in plan order) that must be written so that the
    current labels of the others rise by at least `gap` per position: the
    order-theoretic minimum the benchmarks compare against (gap 1: Slurm's
    order equals the plan's)."""
    candidates = np.flatnonzero(known)
    u = (current[candidates] - gap * candidates).tolist()
    return len(current) - len(_longest_non_decreasing(u))
