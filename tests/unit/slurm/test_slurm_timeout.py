"""`slurm_timeout`: the source a config makes bounds every Slurm read by it, and a read that
takes more than half of it is warned of, once an hour per command."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeVar

import pytest

from slurm_drf.config.load import parse_config_text
from slurm_drf.config.settings import Config
from slurm_drf.cycle import backends
from slurm_drf.cycle.backends import make_source
from slurm_drf.slurm.cli_source import (
    SLOW_READ_WARN_EVERY,
    CliSource,
    build_assoc_mgr_argv,
    build_scontrol_config_argv,
    build_sinfo_argv,
    build_squeue_argv,
)
from slurm_drf.slurm.pyslurm_source import PyslurmSource
from tests.unit.cycle.test_lease import Clock
from tests.unit.slurm.test_slurm_parse import Replay, complete_2205

SQUEUE = " ".join(build_squeue_argv())
T = TypeVar("T")


def test_make_source_bounds_the_cli_reads_by_slurm_timeout() -> None:
    source = make_source(parse_config_text("backend: cli\nslurm_timeout: 5m\n", "c.yaml"))
    assert isinstance(source, CliSource)
    assert (source.timeout, source.slow_reads.timeout) == (300.0, 300.0)
    default = make_source(Config(backend="cli"))
    assert isinstance(default, CliSource) and default.timeout == 120.0


def test_make_source_bounds_pyslurm_s_scontrol_reads_by_slurm_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "pyslurm_usable", lambda: (True, ""))
    source = make_source(parse_config_text("backend: pyslurm\nslurm_timeout: 45s\n", "c.yaml"))
    assert isinstance(source, PyslurmSource) and source.timeout == 45.0


def test_every_read_command_is_given_the_timeout() -> None:
    replay = Replay(complete_2205())
    CliSource(timeout=250.0, runner=replay, environ={}).fetch_snapshot()
    assert [call[0] for call in replay.calls] == [
        build_squeue_argv(),
        build_sinfo_argv(),
        build_scontrol_config_argv(),
        build_assoc_mgr_argv(),
    ]
    assert {call[1] for call in replay.calls} == {250.0}


class SlowReplay(Replay):
    """Replay, each command taking `seconds[its first word + second word]` (else 1 s) on `clock`."""

    def __init__(self, clock: Clock, seconds: Mapping[str, float]) -> None:
        super().__init__(complete_2205())
        self.clock = clock
        self.seconds = dict(seconds)

    def __call__(self, argv: Sequence[str], timeout: float, *, env: Mapping[str, str] | None = None) -> str:
        self.clock.now += self.seconds.get(" ".join(argv[:2]), 1.0)
        return super().__call__(argv, timeout, env=env)


def slow_read_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "slurm_timeout" in r.getMessage()
    ]


def test_a_read_past_half_the_timeout_warns_once_an_hour(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock(1000.0)
    replay = SlowReplay(clock, {"squeue --json": 61.0})
    source = CliSource(timeout=120.0, runner=replay, environ={}, monotonic=clock)
    with caplog.at_level(logging.WARNING):
        source.fetch_snapshot()
    assert slow_read_warnings(caplog) == [
        f"{SQUEUE} took 61.0 s, more than half of slurm_timeout (120 s): raise slurm_timeout in the config "
        "before the cycles fail with no answer (warned at most once an hour)"
    ]

    # Every cycle of the next hour is as slow: no more lines.
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        while clock.now < 1000.0 + SLOW_READ_WARN_EVERY - 120.0:
            source.fetch_snapshot()
            clock.now += 60.0
    assert slow_read_warnings(caplog) == []

    # An hour after the warning, the next slow read warns again.
    clock.now = 1000.0 + 61.0 + SLOW_READ_WARN_EVERY
    with caplog.at_level(logging.WARNING):
        source.fetch_snapshot()
    assert len(slow_read_warnings(caplog)) == 1


def test_squeue_read_as_it_arrives_is_timed_to_its_last_record(caplog: pytest.LogCaptureFixture) -> None:
    """squeue's answer is parsed while it streams: the time is the command's and the reading's, as its timeout's."""
    clock = Clock(0.0)
    replay = SlowReplay(clock, {"squeue --json": 0.0, "sinfo --json": 0.0, "scontrol show": 0.0})
    answer = complete_2205()[tuple(build_squeue_argv())]
    assert isinstance(answer, str)

    def streamer(
        argv: Sequence[str],
        timeout: float,
        consume: Callable[[Iterator[str]], T],
        *,
        env: Mapping[str, str] | None = None,
    ) -> T:
        def pieces() -> Iterator[str]:
            for start in range(0, len(answer), 4096):
                clock.now += 0.5
                yield answer[start : start + 4096]

        return consume(pieces())

    streamed = -(-len(answer) // 4096) * 0.5  # the seconds the whole answer takes to arrive
    # Only the reading takes time, a second past half the timeout.
    source = CliSource(timeout=2 * streamed - 2, runner=replay, environ={}, streamer=streamer, monotonic=clock)
    with caplog.at_level(logging.WARNING):
        source.fetch_snapshot()
    assert [line.split(" took ")[0] for line in slow_read_warnings(caplog)] == [SQUEUE]


@pytest.mark.parametrize("seconds", [0.0, 30.0, 60.0])
def test_a_read_within_half_the_timeout_does_not_warn(seconds: float, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock(0.0)
    timed = {"squeue --json": seconds, "sinfo --json": seconds, "scontrol show": seconds}
    source = CliSource(timeout=120.0, runner=SlowReplay(clock, timed), environ={}, monotonic=clock)
    with caplog.at_level(logging.WARNING):
        source.fetch_snapshot()
    assert slow_read_warnings(caplog) == []


def test_each_command_is_warned_of_on_its_own(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock(0.0)
    replay = SlowReplay(clock, {"squeue --json": 7.0, "sinfo --json": 6.0, "scontrol show": 1.0})
    source = CliSource(timeout=10.0, runner=replay, environ={}, monotonic=clock)
    with caplog.at_level(logging.WARNING):
        source.fetch_snapshot()
        source.fetch_snapshot()
    warned = slow_read_warnings(caplog)
    assert [line.split(" took ")[0] for line in warned] == [SQUEUE, " ".join(build_sinfo_argv())]
    assert warned[1].startswith("sinfo --json --all took 6.0 s, more than half of slurm_timeout (10 s)")
