"""The snapshot parser's fast paths against the careful ones: submit times, TRES names, defaults, job numbers.

`_plain_stamps` reads 'YYYY-MM-DDTHH:MM:SSZ' with integer arithmetic; it
must give what `parse_time` (datetime.fromisoformat) gives for every real
time, and decline (None) anything else, which then takes the older paths. `_tres_values` takes the names of the
first job's TRES when every job has as many, and must notice when they
are not the same names.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_drf.errors import SnapshotError
from slurm_drf.model.codec import _fast_times, _plain_stamps, parse_snapshot, parse_time
from slurm_drf.model.types import SNAPSHOT_FORMAT, job_number, job_numbers

EDGES = [
    "1970-01-01T00:00:00Z",
    "1969-12-31T23:59:59Z",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "2000-02-29T12:00:00Z",
    "1900-03-01T00:00:00Z",
    "2024-02-29T23:59:59Z",
    "2026-11-30T01:00:00Z",
    "2100-12-31T00:00:00Z",
]


def test_edges_equal_python_parser() -> None:
    fast = _plain_stamps(EDGES)
    assert fast is not None
    assert fast.tolist() == [parse_time(text, "t") for text in EDGES]


@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)))
def test_any_real_time_equals_python_parser(moment: datetime) -> None:
    text = moment.replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = text.rjust(20, "0")  # strftime writes year 1 as "1" on some platforms
    fast = _plain_stamps([text, "2026-11-30T01:00:00Z"])
    assert fast is not None
    assert fast[0] == parse_time(text, "t")


@pytest.mark.parametrize(
    "text",
    [
        "2023-02-29T00:00:00Z",  # no such day
        "1900-02-29T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-00-10T00:00:00Z",
        "2026-01-00T00:00:00Z",
        "2026-01-01T24:00:00Z",
        "2026-01-01T23:60:00Z",
        "2026-01-01T23:59:60Z",  # a leap second
        "0000-01-01T00:00:00Z",
        "2026-01-01 00:00:00Z",
        "2026-01-01T00:00:00z",
        "2026-01-01T00:00:00+",
        "2026-1-01T00:00:000Z",
        "2026-01-01T00:00:00",
        "2026-01-01T00:00:00Zx",
        "\uff12\uff10\uff12\uff16-01-01T00:00:00Z",  # full-width digits: not ASCII
        "20a6-01-01T00:00:00Z",
    ],
)
def test_anything_else_is_declined(text: str) -> None:
    assert _plain_stamps(["2026-11-30T01:00:00Z", text]) is None


def test_lengths_that_add_up_are_still_declined() -> None:
    # 19 + 21 characters: the joined text has the right length and, cut in
    # twenties, two well-formed stamps.
    assert _plain_stamps(["2026-11-30T01:00:00", "Z2026-11-30T01:00:00Z"]) is None
    assert _plain_stamps([]) is None


def test_fast_times_agrees_with_numpy_for_a_week_of_seconds() -> None:
    start = datetime(2026, 11, 27, tzinfo=UTC)
    moments = [start + timedelta(seconds=s) for s in np.random.default_rng(7).integers(0, 7 * 86_400, 2000).tolist()]
    texts = [m.strftime("%Y-%m-%dT%H:%M:%SZ") for m in moments]
    via_numpy = np.array([t[:-1] for t in texts], dtype="datetime64[s]").astype(np.int64).astype(np.float64)
    fast = _fast_times(list(texts))
    assert fast is not None
    assert fast.tolist() == via_numpy.tolist() == [m.timestamp() for m in moments]


def test_a_snapshot_with_a_day_that_does_not_exist_is_still_refused() -> None:
    record = {
        "job_id": "7",
        "account": "a",
        "partition": "p",
        "state": "PENDING",
        "submit_time": "2023-02-29T00:00:00Z",
        "tres": {"cpu": 1},
    }
    data = {"format": SNAPSHOT_FORMAT, "nodes": [], "jobs": [record]}
    with pytest.raises(SnapshotError, match=r"job 7\.submit_time: expected an ISO 8601 time"):
        parse_snapshot(data)


def _record(job_id: str, tres: dict[str, int], **extra: object) -> dict[str, object]:
    return {"job_id": job_id, "account": "a", "partition": "p", "state": "PENDING", "tres": tres, **extra}


def test_jobs_with_as_many_but_other_tres_names_keep_every_name() -> None:
    records = [
        _record("1", {"cpu": 1, "mem": 2}),
        _record("2", {"mem": 3, "gres/gpu": 1}, site_factor=5),
        _record("3", {"cpu": 4, "mem": 5}),
    ]
    table = parse_snapshot({"format": SNAPSHOT_FORMAT, "nodes": [], "jobs": records}).table
    assert {name: column.tolist() for name, column in table.tres.items()} == {
        "cpu": [1, 0, 4],
        "mem": [2, 3, 5],
        "gres/gpu": [0, 1, 0],
    }
    assert list(table.site_factor) == [None, 5, None]


def test_jobs_with_the_same_tres_names_in_another_order() -> None:
    records = [_record("1", {"cpu": 1, "mem": 2}), _record("2", {"mem": 3, "cpu": 4})]
    table = parse_snapshot({"format": SNAPSHOT_FORMAT, "nodes": [], "jobs": records}).table
    assert {name: column.tolist() for name, column in table.tres.items()} == {"cpu": [1, 4], "mem": [2, 3]}


# What int() takes and job_number does not: underscores, spaces, signs, other digits, length.
ID_TEXTS = ["1234_5", "12_34", " 12", "12 ", "+5", "-5", "\u0663", "12345678901", "", "0012", "7", "4294967295"]


@pytest.mark.parametrize("odd", ID_TEXTS)
def test_job_numbers_equal_job_number_beside_plain_ids(odd: str) -> None:
    ids = ["101", odd, "102"]
    assert job_numbers(ids).tolist() == [job_number(text) for text in ids]


@given(st.lists(st.one_of(st.sampled_from(ID_TEXTS), st.integers(0, 10**12).map(str), st.text(max_size=6))))
def test_job_numbers_equal_job_number_for_any_ids(ids: list[str]) -> None:
    assert job_numbers(ids).tolist() == [job_number(text) for text in ids]
