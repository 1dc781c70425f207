"""squeue's answer read as it arrives (slurm.parse.json_stream, slurm.execute.stream_command).

However the answer is cut into pieces, the records, the members around
them and every error are those of reading it whole; a command's answer is
read from its pipe, and its failures are one line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from slurm_drf.errors import SlurmReadError
from slurm_drf.model.types import JobRows
from slurm_drf.slurm.execute import stream_command
from slurm_drf.slurm.parse.jobs import parse_het_leaders, parse_squeue_json, read_squeue_answer
from slurm_drf.slurm.parse.json_stream import JsonAnswer
from tests.paths import FIXTURES


def _pieces(text: str, size: int) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


def _read(text: str, size: int) -> tuple[list[Any], dict[str, Any], int | None]:
    answer = JsonAnswer(_pieces(text, size), "jobs", "squeue")
    records = list(answer.records())
    return records, answer.envelope, answer.count


def _error(text: str, size: int) -> str:
    with pytest.raises(SlurmReadError) as raised:
        _read(text, size)
    return str(raised.value)


SIZES = [1, 2, 7, 64, 10**9]


@pytest.mark.parametrize("release", ["22.05", "23.11", "24.11"])
@pytest.mark.parametrize("size", SIZES)
def test_the_records_and_the_members_around_them_are_the_whole_answers(release: str, size: int) -> None:
    text = (FIXTURES / f"slurm-{release}" / "squeue.json").read_text()
    whole = json.loads(text)
    records, envelope, count = _read(text, size)
    assert records == whole["jobs"] and count == len(whole["jobs"])
    assert envelope == {key: value for key, value in whole.items() if key != "jobs"}


@pytest.mark.parametrize("size", SIZES)
def test_numbers_at_a_piece_boundary_are_read_whole(size: int) -> None:
    text = '{"last_update": 1700000000123, "jobs": [{"n": 18446744073709551614}], "big": 2e300, "t": true}'
    records, envelope, _ = _read(text, size)
    assert records == [{"n": 18446744073709551614}]
    assert envelope == {"last_update": 1700000000123, "big": 2e300, "t": True}


BROKEN = [
    '{"jobs": [{"job_id": 1}, {"job_id": 2}',
    '{"jobs": [{"job_id": 1}, {"name": "cut',
    '{"meta": {"plugin": ',
    '{"jobs": [{"job_id": 1},,]}',
    '{"jobs": [{"job_id": 1}]}\nx',
    '{"jobs": [{"job_id": tru }]}',
    '{"jobs": [], "jobs": []}',
    '{"jobs": [{"job_id": -Infinity}]}',
    "  \n ",
    "",
    '"jobs"',
]


@pytest.mark.parametrize("text", BROKEN)
def test_an_error_is_one_line_and_the_same_however_the_answer_arrives(text: str) -> None:
    messages = {_error(text, size) for size in SIZES}
    assert len(messages) == 1, messages
    message = messages.pop()
    assert message.startswith("squeue: ") and "\n" not in message


def test_cut_short_says_where_and_how_much_arrived() -> None:
    text = '{"jobs": [\n  {"job_id": 1},\n  {"name": "cu'
    assert _error(text, 5) == (
        f"squeue: answer cut short: its JSON stops at line 3 column 15 after {len(text)} characters, incomplete"
    )


def test_a_long_value_costs_linear_time_not_one_decode_per_piece() -> None:
    """A 2 MB string in one-character pieces: the held text doubles each time a value is not whole yet."""
    calls = 0

    def counted(text: str) -> Iterator[str]:
        nonlocal calls
        for piece in _pieces(text, 1):
            calls += 1
            yield piece

    long = "x" * 2_000_000
    answer = JsonAnswer(counted(json.dumps({"jobs": [{"comment": long}]})), "jobs", "squeue")
    assert [record["comment"] for record in answer.records()] == [long]
    assert calls >= 2_000_000  # every piece was taken; the decodes (about log2 of them) are not counted


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_command_answer_is_read_from_its_pipe() -> None:
    # 2 MB: many pieces, a two-byte character split across some of them.
    jobs = [{"job_id": i, "name": "\u00e9" * 50} for i in range(20_000)]
    code = (
        "import json, sys\n"
        "jobs = [{'job_id': i, 'name': '\\u00e9' * 50} for i in range(20_000)]\n"
        "sys.stdout.buffer.write(json.dumps({'jobs': jobs}, ensure_ascii=False).encode())"
    )

    def consume(pieces: Iterator[str]) -> list[Any]:
        return list(JsonAnswer(pieces, "jobs", "cmd").records())

    assert stream_command(_python(code), 30, consume) == jobs


def test_a_failed_command_is_named_with_its_exit_status_and_stderr_before_its_half_answer() -> None:
    code = (
        "import sys; print('{\"jobs\": [', flush=True); sys.exit('squeue: error: Unable to contact slurm controller')"
    )
    with pytest.raises(SlurmReadError) as raised:
        stream_command(_python(code), 30, lambda pieces: list(JsonAnswer(pieces, "jobs", "cmd").records()))
    message = str(raised.value)
    assert "exit status 1: squeue: error: Unable to contact slurm controller; is slurmctld running?" in message


def test_a_command_that_does_not_answer_in_time_is_killed_and_named() -> None:
    code = "import sys, time; print('{\"jobs\": [', flush=True); time.sleep(60)"
    with pytest.raises(SlurmReadError, match=r"no answer within 0\.5 s$"):
        stream_command(_python(code), 0.5, lambda pieces: list(JsonAnswer(pieces, "jobs", "cmd").records()))


def test_a_consumer_that_stops_early_kills_the_command_and_its_error_is_kept() -> None:
    code = "import sys\nsys.stdout.write('{\"jobs\": [1 2')\nwhile True: sys.stdout.write(' ' * 65536)"
    with pytest.raises(SlurmReadError, match=r"^cmd: invalid JSON at line 1 column 13: expected '\]'$"):
        stream_command(_python(code), 30, lambda pieces: list(JsonAnswer(pieces, "jobs", "cmd").records()))


def test_a_missing_command_is_one_line() -> None:
    with pytest.raises(SlurmReadError, match=r"^no-such-squeue: no-such-squeue not found \(is Slurm installed"):
        stream_command(["no-such-squeue"], 30, list)


def test_an_interrupted_read_leaves_no_command_running() -> None:
    code = "import sys\nwhile True: sys.stdout.write(' ' * 65536)"
    started: list[int] = []

    def interrupted(pieces: Iterator[str]) -> None:
        next(pieces)
        started.append(1)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stream_command(_python(code), 30, interrupted)
    assert started == [1]  # it ran, was interrupted, and stream_command came back (the command killed, reaped)


@pytest.mark.parametrize("release", ["22.05", "23.11", "24.11"])
def test_the_jobs_read_as_they_arrive_are_the_whole_answers_into_their_table(release: str) -> None:
    text = (FIXTURES / f"slurm-{release}" / "squeue.json").read_text()
    answer = read_squeue_answer(JsonAnswer(_pieces(text, 64), "jobs", "squeue"))
    whole = parse_squeue_json(json.loads(text))
    assert list(answer.jobs) == whole
    if isinstance(answer.jobs, JobRows):  # no het job's components merged: no Job kept while reading
        assert answer.jobs.table.job_id == [job.job_id for job in whole]
        assert answer.jobs.table.nice.tolist() == [job.nice for job in whole]
    else:  # a pending het job: its components summed under the leader
        assert parse_het_leaders(json.loads(text)["jobs"])
