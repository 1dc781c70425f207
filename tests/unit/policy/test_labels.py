"""Stable values (docs/rule.md §5): the bands' guarantees and the fewest writes, by property."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_drf.model.types import BoolArray, IntArray
from slurm_drf.policy.labels import Labelling, LabelSpace, assign_labels, fewest_writes


def check_bands(result: Labelling, current: IntArray, known: BoolArray, space: LabelSpace) -> None:
    labels, exact = result.labels, result.exact
    assert len(labels) == len(current)
    assert exact == min(space.horizon, len(current), space.separable)
    assert (labels >= space.lo).all() and (labels <= space.hi).all()
    assert (np.diff(labels[:exact]) >= space.gap).all(), "the exact band rises by a gap per job"
    if exact and exact < len(labels):
        assert labels[exact:].min() >= labels[exact - 1] + space.gap, "no coarse job can outrank the band"
    assert (labels[result.kept] == current[result.kept]).all()
    assert known[result.kept].all(), "only a label this daemon wrote is kept"


def written(result: Labelling, current: IntArray, known: BoolArray) -> BoolArray:
    changed: BoolArray = ~known | (result.labels != current)
    return changed


def brute_fewest(current: IntArray, known: BoolArray, space: LabelSpace, tail: bool) -> int:
    """The fewest exact-band writes, trying every subset of jobs to keep."""
    size = len(current)
    lo, hi, gap = space.lo, space.hi, space.gap
    for keep in range(size, -1, -1):
        for chosen in itertools.combinations(range(size), keep):
            if not all(known[p] and lo + gap * p <= current[p] <= hi - gap * (size - 1 - p + tail) for p in chosen):
                continue
            if all(current[j] - current[i] >= gap * (j - i) for i, j in itertools.pairwise(chosen)):
                return size - keep
    raise AssertionError("keeping nothing always works")


spaces = st.builds(
    LabelSpace,
    lo=st.integers(-50, 50),
    hi=st.integers(60, 400),
    gap=st.integers(1, 12),
    horizon=st.integers(1, 12),
)


@settings(max_examples=400, deadline=None)
@given(spaces, st.lists(st.tuples(st.integers(-60, 420), st.booleans()), max_size=16))
def test_any_current_labels_give_both_bands_and_the_fewest_exact_writes(
    space: LabelSpace, jobs: list[tuple[int, bool]]
) -> None:
    current = np.array([c for c, _ in jobs], dtype=np.int64)
    known = np.array([k for _, k in jobs], dtype=np.bool_)
    result = assign_labels(current, known, space)
    check_bands(result, current, known, space)
    exact = result.exact
    if exact <= 9:
        # The run kept is a longest one over the band and as many coarse jobs after it, so the
        # band may give up a job for each of those it keeps in order behind it: never more.
        changed = written(result, current, known)[:exact]
        behind = int(known[exact : 2 * exact].sum())
        assert int(changed.sum()) <= brute_fewest(current[:exact], known[:exact], space, exact < len(jobs)) + behind


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 5_000),
    st.integers(5, 60),
    st.lists(
        st.tuples(st.sampled_from(["start", "submit", "move"]), st.integers(0, 10**6), st.integers(1, 6)),
        min_size=1,
        max_size=25,
    ),
)
def test_churn_keeps_the_exact_band_in_order_with_the_fewest_writes(
    gap: int, horizon: int, steps: list[tuple[str, int, int]]
) -> None:
    """A queue under random churn: head jobs start, jobs arrive anywhere, jobs move forward.
    After every cycle the exact band is in plan order a gap apart, and it wrote no more
    than the fewest writes that make the labels Slurm holds rise by a gap along it, but
    for one per coarse job kept in order right behind the band."""
    space = LabelSpace(lo=0, hi=2**31 - 2, gap=gap, horizon=horizon)
    queue: list[int] = list(range(80))  # job ids in plan order
    held: dict[int, int] = {}
    next_id = 80
    for action, where, count in steps:
        if action == "start":
            del queue[:count]
        elif action == "submit":
            for _ in range(count):
                queue.insert(where % (len(queue) + 1), next_id)
                next_id += 1
        elif queue:
            job = queue.pop(where % len(queue))
            queue.insert(max(0, where % (len(queue) + 1) - count * 10), job)
        current = np.array([held.get(j, 0) for j in queue], dtype=np.int64)
        known = np.array([j in held for j in queue], dtype=np.bool_)
        result = assign_labels(current, known, space)
        check_bands(result, current, known, space)
        exact = result.exact
        changed = written(result, current, known)
        behind = int(known[exact : 2 * exact].sum())  # see the test above
        slack = _bound_slack(current[:exact], known[:exact], space) + behind
        assert int(changed[:exact].sum()) <= fewest_writes(current[:exact], known[:exact], gap) + slack
        held = dict(zip(queue, result.labels.tolist(), strict=True))


def _bound_slack(current: IntArray, known: BoolArray, space: LabelSpace) -> int:
    """Jobs the range's ends rule out (no room below lo or above hi): a write for any labelling."""
    position = np.arange(len(current))
    outside = known & ((current < space.lo + space.gap * position) | (current > space.hi - space.gap * position[::-1]))
    return int(outside.sum())


def test_an_unchanged_queue_writes_nothing_and_a_head_start_moves_no_one() -> None:
    space = LabelSpace(lo=0, hi=10**9, gap=2_001, horizon=50)
    first = assign_labels(np.zeros(300, dtype=np.int64), np.zeros(300, dtype=np.bool_), space)
    known = np.ones(300, dtype=np.bool_)
    again = assign_labels(first.labels, known, space)
    assert again.kept.all() and (again.labels == first.labels).all()
    for started in (1, 20, 49, 51):
        after = assign_labels(first.labels[started:], known[started:], space)
        assert after.kept.all(), f"{started} head job(s) starting caused a write"


def test_a_tight_range_keeps_the_band_exact_and_puts_the_rest_at_the_top() -> None:
    """UB CCR's weights (sum 1,410,000) in nice's range: about 1,500 jobs fit a gap apart."""
    space = LabelSpace(lo=0, hi=2 * (2**31 - 3) // 2 - 1, gap=1_410_001, horizon=1_000)
    result = assign_labels(np.zeros(5_000, dtype=np.int64), np.zeros(5_000, dtype=np.bool_), space)
    check_bands(result, np.zeros(5_000, dtype=np.int64), np.zeros(5_000, dtype=np.bool_), space)
    assert result.exact == 1_000 and space.separable == 1_523
    assert (result.labels[1_000:] == space.hi).all()


def test_a_band_larger_than_the_range_stops_where_it_runs_out() -> None:
    space = LabelSpace(lo=0, hi=99, gap=10, horizon=50)
    result = assign_labels(np.zeros(30, dtype=np.int64), np.zeros(30, dtype=np.bool_), space)
    assert result.exact == 9
    check_bands(result, np.zeros(30, dtype=np.int64), np.zeros(30, dtype=np.bool_), space)


def test_fewest_writes_is_the_longest_run_in_order() -> None:
    labels = np.array([10, 20, 15, 30, 40, 35, 50], dtype=np.int64)
    assert fewest_writes(labels, np.ones(7, dtype=np.bool_)) == 2
    assert fewest_writes(labels, np.ones(7, dtype=np.bool_), gap=10) == 4  # 15, 30, 40 stay
    assert fewest_writes(labels, np.zeros(7, dtype=np.bool_)) == 7
