"""The past bootstrapped from Slurm's accounting (docs/rule.md §6): sacct -P and --json, the fill, the record first."""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from slurm_drf.config.load import parse_config_text
from slurm_drf.config.settings import Config, HistoryConfig
from slurm_drf.cycle.run import CycleReport
from slurm_drf.errors import SlurmReadError
from slurm_drf.policy.decay import decay_weight
from slurm_drf.policy.decayed_usage import (
    Allocation,
    DecayedUsage,
    UsageByPool,
    UsageRecord,
    build_partition_pools,
    build_usage_span,
)
from slurm_drf.policy.plan import compute_plan
from slurm_drf.slurm.cli_source import build_command_env
from slurm_drf.slurm.sacct import (
    SACCT_FIELDS,
    SACCT_TIMEOUT,
    build_allocations,
    build_sacct_argv,
    build_sacct_env,
    fetch_allocations,
    parse_sacct_json,
    parse_sacct_pipe,
)
from slurm_drf.trail.history_db import AuditRecorder
from slurm_drf.trail.past import SACCT_HALF_LIVES, HistoryPast
from tests.paths import FIXTURES
from tests.unit.builders import job, node, snapshot

FIXTURES = FIXTURES / "slurm-22.05"
FIXTURE = FIXTURES / "sacct-allocations.json"
HOUR = 3600.0
# The captured jobs all started at this second (tests/fixtures/slurm-22.05/README.md).
CAPTURED_START = 1796137579.0
# The daemon's own query (sacct -P, epoch times), captured from another sandbox run.
PIPE_FIXTURE = FIXTURES / "sacct-allocations.txt"
PIPE_START = 1796140118.0


# --- sacct --parsable2: the daemon's query ---------------------------------------------


def test_captured_sacct_pipe_gives_each_allocation() -> None:
    allocations = parse_sacct_pipe(PIPE_FIXTURE.read_text(), "sacct-allocations.txt")
    s = PIPE_START
    assert [(a.account, a.partition, a.start, a.end) for a in allocations] == [
        ("gputeam", "gpu", s, s + 5),
        ("cputeam", "cpu", s, s + 8),
        ("memteam", "gpu", s, None),  # still running: End `Unknown`
        ("memteam", "gpu", s, s + 6),  # submitted to gpu,cpu: the partition it ran in
        ("gputeam", "gpu", s, s + 4),  # the three tasks of array 13 (JobIDRaw 15, 16, 13)
        ("gputeam", "gpu", s, s + 4),
        ("gputeam", "gpu", s, s + 4),
        # job 18, cancelled while held: listed with Start = End and no AllocTRES, left out
        ("newteam", "cpu", s + 44, s + 64),
    ]
    assert allocations[0].tres == {"billing": 2, "cpu": 2, "mem": 1000, "node": 1, "gres/gpu": 1}  # mem in MiB
    assert allocations[2].tres == {"billing": 1, "cpu": 1, "mem": 4000, "node": 1}


def test_sacct_pipe_and_json_of_the_same_query_give_the_same_allocations() -> None:
    # Both captured in one moment from the same sandbox, -S and -E alike: one parser per format, one answer.
    as_json = build_allocations(parse_sacct_json((FIXTURES / "sacct-allocations-as-json.json").read_bytes()))
    as_pipe = parse_sacct_pipe(PIPE_FIXTURE.read_text())
    assert len(as_pipe) == 8
    assert sorted(as_json, key=repr) == sorted(as_pipe, key=repr)


def test_jobs_that_never_started_are_left_out_of_the_pipe() -> None:
    # Captured with --jobs: two held jobs (Start and End `Unknown`, one on gpu,cpu), one cancelled while held.
    text = (FIXTURES / "sacct-unstarted.txt").read_text()
    assert len(text.splitlines()) == 3
    assert parse_sacct_pipe(text) == []
    assert parse_sacct_pipe("") == []  # nothing ran in the window
    # Typed GPUs give the total; an account-less line holds nothing.
    assert parse_sacct_pipe("5|a|p|100|None|cpu=2,gres/gpu:a100=2\n7||p|100|160|cpu=1\n") == [
        Allocation("a", "p", 100.0, None, {"cpu": 2, "gres/gpu": 2, "gres/gpu:a100": 2})
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1|a|p|100|200|cpu=1\n2|a|p|100\n", "sacct -P: line 2: 4 fields, expected 6 (JobIDRaw|Account|"),
        ("1|a|p|100|200|cpu=1|\n", "sacct -P: line 1: 7 fields, expected 6"),
        (
            "\n7|a|p|2026-12-01T15:48:38|Unknown|cpu=1\n",
            "sacct -P: line 2: job 7: Start '2026-12-01T15:48:38' is not seconds since the epoch",
        ),
        ("8|a|p|100|soon|cpu=1\n", "sacct -P: line 1: job 8: End 'soon' is not seconds since the epoch"),
    ],
)
def test_bad_sacct_pipe_lines_name_the_line(text: str, message: str) -> None:
    # As a bad record of the JSON: the whole answer is refused, and the past comes from the record alone.
    with pytest.raises(SlurmReadError, match="^" + re.escape(message)):
        parse_sacct_pipe(text, "sacct -P")


def test_one_sacct_run_with_an_argument_list_and_epoch_times() -> None:
    seen: list[tuple[list[str], float, dict[str, str] | None]] = []

    def runner(argv: Sequence[str], timeout: float, *, env: Mapping[str, str] | None = None) -> str:
        seen.append((list(argv), timeout, dict(env) if env is not None else None))
        return PIPE_FIXTURE.read_text()

    environ = {"PATH": "/usr/bin", "SACCT_FORMAT": "JobID", "SQUEUE_STATES": "all", "SLURM_CONF": "x.conf"}
    allocations = fetch_allocations(PIPE_START - 600, runner=runner, environ=environ)
    assert len(allocations) == 8
    assert len(seen) == 1
    argv, timeout, env = seen[0]
    assert timeout == SACCT_TIMEOUT
    assert argv == build_sacct_argv(PIPE_START - 600)
    assert argv[:5] == ["sacct", "--parsable2", "--noheader", "--allusers", "--allocations"]
    assert argv[-5:] == ["--endtime", "now", "--state", "RUNNING", "--format=" + ",".join(SACCT_FIELDS)]
    assert SACCT_FIELDS == ("JobIDRaw", "Account", "Partition", "Start", "End", "AllocTRES")
    # -S in local time (22.05 refuses epoch seconds there); Start and End come back as epoch seconds.
    assert argv[argv.index("--starttime") + 1] == time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(PIPE_START - 600))
    assert env == {"PATH": "/usr/bin", "SLURM_CONF": "x.conf", "SLURM_BITSTR_LEN": "0", "SLURM_TIME_FORMAT": "%s"}
    # For this command only: the other Slurm commands keep the daemon's time format, the caller's mapping is untouched.
    assert "SLURM_TIME_FORMAT" not in build_command_env(environ)
    assert "SLURM_TIME_FORMAT" not in environ
    assert build_sacct_env(environ) == env
    site = {"SLURM_TIME_FORMAT": "relative"}
    assert build_sacct_env(site)["SLURM_TIME_FORMAT"] == "%s"
    assert build_command_env(site)["SLURM_TIME_FORMAT"] == "relative"

    def broken(argv: Sequence[str], timeout: float, *, env: object = None) -> str:
        return "sacct: error: Problem talking to the database"

    with pytest.raises(SlurmReadError, match=r"^sacct --parsable2 .*: line 1: 1 fields, expected 6"):
        fetch_allocations(0.0, runner=broken, environ={})


# --- sacct --json: the simulator's importer ------------------------------------------------------------------


def test_captured_sacct_json_gives_each_allocation() -> None:
    jobs = parse_sacct_json(FIXTURE.read_bytes(), "sacct-allocations.json")
    assert [(j.job_id, j.account, j.partition, j.state) for j in jobs] == [
        ("1", "gputeam", "gpu", "COMPLETED"),
        ("2", "cputeam", "cpu", "COMPLETED"),
        ("3", "memteam", "gpu", "RUNNING"),
    ]
    assert jobs[0].allocated == {"cpu": 2, "mem": 1000, "node": 1, "billing": 2, "gres/gpu": 1}
    assert (jobs[0].start, jobs[0].end) == (CAPTURED_START, CAPTURED_START + 5)
    assert jobs[2].end is None  # still running when captured: sacct writes end 0
    assert [(a.account, a.start, a.end, a.tres["cpu"]) for a in build_allocations(jobs)] == [
        ("gputeam", CAPTURED_START, CAPTURED_START + 5, 2),
        ("cputeam", CAPTURED_START, CAPTURED_START + 8, 4),
        ("memteam", CAPTURED_START, None, 1),
    ]


def test_allocations_leave_out_what_never_ran() -> None:
    text = b"""{"jobs": [
      {"job_id": 7, "account": "a", "partition": "p", "state": {"current": "PENDING"},
       "time": {"start": 0, "end": 0}, "tres": {"allocated": []}},
      {"job_id": 8, "account": "a", "partition": "p", "state": {"current": ["CANCELLED"]},
       "time": {"start": {"set": true, "infinite": false, "number": 100}, "end": 100},
       "tres": {"allocated": [{"type": "cpu", "count": 2}]}},
      {"job_id": 9, "account": "a", "partition": "p", "state": {"current": ["COMPLETED"]},
       "array": {"job_id": 5, "task_id": 3},
       "time": {"start": 100, "end": 160},
       "tres": {"allocated": [{"type": "gres", "name": "gpu:a100", "count": 2}, {"type": "cpu", "count": 2}]}}
    ]}"""
    jobs = parse_sacct_json(text)
    assert jobs[2].job_id == "5_3"
    assert jobs[2].allocated == {"cpu": 2, "gres/gpu": 2, "gres/gpu:a100": 2}  # typed GPUs give the total
    # The pending job and the one that ended as it started hold nothing.
    assert build_allocations(jobs) == [Allocation("a", "p", 100.0, 160.0, jobs[2].allocated)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"{not json", "sacct --json -a: not JSON"),
        (b"[]", "sacct --json -a: expected an object with a 'jobs' list"),
        (b'{"jobs": [3]}', "sacct --json -a: jobs[0]: expected an object"),
        (b'{"jobs": [{"account": "a"}]}', "sacct --json -a: jobs[0]: missing job_id"),
    ],
)
def test_bad_sacct_json_names_what_is_wrong(text: bytes, message: str) -> None:
    with pytest.raises(SlurmReadError, match="^" + re.escape(message)):
        parse_sacct_json(text, "sacct --json -a")


# --- allocations -> usage records ------------------------------------------------------


def test_a_span_adds_the_exact_integral_of_its_step_function() -> None:
    allocations = [
        Allocation("a", "gpu", 50.0, 150.0, {"cpu": 2, "gres/gpu": 1, "billing": 9}),
        Allocation("a", "gpu", 120.0, None, {"cpu": 1}),  # still running
        Allocation("b", "cpu,gpu", 100.0, 130.0, {"cpu": 4}),  # the first managed partition decides
        Allocation("c", "gpu", 110.0, 140.0, {"cpu": 8}),  # excluded
        Allocation("d", "debug", 100.0, 200.0, {"cpu": 8}),  # unmanaged partition
        Allocation("a", "gpu", 10.0, 90.0, {"cpu": 64}),  # ended before the span
    ]
    config = parse_config_text("pools: [{name: g, partitions: [gpu]}, {name: c, partitions: [cpu]}]\n", "c.yaml")
    pool_of = build_partition_pools(config)
    assert (pool_of("gpu"), pool_of("cpu,gpu"), pool_of("debug")) == ("g", "c", None)
    h = 300.0
    span = build_usage_span(allocations, 100.0, 200.0, h, pool_of, ("cpu", "gres/gpu"), frozenset({"c"}))

    def d(a: float, b: float) -> float:
        return decay_weight(a, b, 200.0, h)

    assert span.integrals == {
        "g": {"a": {"cpu": pytest.approx(2 * d(100, 150) + d(120, 200)), "gres/gpu": pytest.approx(d(100, 150))}},
        "c": {"b": {"cpu": pytest.approx(4 * d(100, 130)), "gres/gpu": 0.0}},
    }
    assert span.running == {"g": {"a": {"cpu": 1.0, "gres/gpu": 0.0}}, "c": {}}
    # The same as the step function written out as records, one where the usage changes.
    b4 = {"b": {"cpu": 4.0, "gres/gpu": 0.0}}
    steps = [
        UsageRecord(100.0, {"g": {"a": {"cpu": 2.0, "gres/gpu": 1.0}}, "c": b4}),
        UsageRecord(120.0, {"g": {"a": {"cpu": 3.0, "gres/gpu": 1.0}}, "c": b4}),
        UsageRecord(130.0, {"g": {"a": {"cpu": 3.0, "gres/gpu": 1.0}}}),
        UsageRecord(150.0, {"g": {"a": {"cpu": 1.0, "gres/gpu": 0.0}}}),
        UsageRecord(200.0, {"g": {"a": {"cpu": 1.0, "gres/gpu": 0.0}}}),
    ]
    by_steps, by_span = DecayedUsage(h, max_gap=60.0), DecayedUsage(h, max_gap=60.0)
    by_steps.extend(steps)
    by_span.add_span(span)
    for now in (200.0, 250.0):  # at the span's end, and with what still ran holding after it
        assert _flat(by_span.past_at(now)) == pytest.approx(_flat(by_steps.past_at(now)), rel=1e-12, abs=1e-15)
    # Without pools or partitions every partition is the default pool, as in build_pools.
    assert build_partition_pools(Config())("anything") == "default"
    with pytest.raises(ValueError, match="another half-life"):
        DecayedUsage(2 * h, max_gap=60.0).add_span(span)


# --- the bootstrap, by hand ----------------------------------------------------------------


def _hand_integral(intervals: Sequence[tuple[float, float, float]], now: float, half_life_s: float) -> float:
    """sum u x D / sum D with D = H/ln 2 (2^-(now-b)/H - 2^-(now-a)/H), written out."""

    def weight(a: float, b: float) -> float:
        return half_life_s / math.log(2) * (2 ** (-(now - b) / half_life_s) - 2 ** (-(now - a) / half_life_s))

    return sum(u * weight(a, b) for a, b, u in intervals) / sum(weight(a, b) for a, b, _ in intervals)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_fresh_install_starts_from_the_captured_sacct(tmp_path: Path) -> None:
    # No history.sqlite at all; ten minutes after the captured jobs started. The daemon's
    # own fetch, its sacct replaced by the capture (what ran after -S: all of it).
    now = PIPE_START + 600.0
    asked: list[list[str]] = []

    def replay(argv: Sequence[str], timeout: float, *, env: Mapping[str, str] | None = None) -> str:
        asked.append(list(argv))
        assert env is not None and env["SLURM_TIME_FORMAT"] == "%s"
        return PIPE_FIXTURE.read_text()

    def fetch(start: float) -> list[Allocation]:
        return fetch_allocations(start, runner=replay, environ={})

    config = Config(interval=60.0, history=HistoryConfig(half_life_s=HOUR, weight=1.0))
    past = HistoryPast(tmp_path, clock=Clock(now), fetch=fetch).past(config)
    assert asked == [build_sacct_argv(now - SACCT_HALF_LIVES * HOUR)]
    assert past is not None
    accounts = past["default"]
    s = PIPE_START
    # Known from the first allocation on: [s, now). gputeam 2 CPUs and 1 GPU for 5 s and an
    # array of three 1-CPU tasks for 4 s; cputeam 4 CPUs for 8 s; memteam 1 CPU and 4000 MiB
    # throughout (still running) and 2 CPUs, 800 MiB for 6 s; newteam 1 CPU, 100 MiB for 20 s from s + 44.
    assert accounts["gputeam"]["cpu"] == pytest.approx(
        _hand_integral([(s, s + 4, 5), (s + 4, s + 5, 2), (s + 5, now, 0)], now, HOUR)
    )
    assert accounts["gputeam"]["gres/gpu"] == pytest.approx(_hand_integral([(s, s + 5, 1), (s + 5, now, 0)], now, HOUR))
    assert accounts["cputeam"]["cpu"] == pytest.approx(_hand_integral([(s, s + 8, 4), (s + 8, now, 0)], now, HOUR))
    assert accounts["memteam"]["mem"] == pytest.approx(
        _hand_integral([(s, s + 6, 4800), (s + 6, now, 4000)], now, HOUR)
    )
    assert accounts["newteam"]["cpu"] == pytest.approx(
        _hand_integral([(s, s + 44, 0), (s + 44, s + 64, 1), (s + 64, now, 0)], now, HOUR)
    )
    # Numerically: (2^(-595/3600) - 2^(-600/3600)) / (1 - 2^(-600/3600)).
    assert accounts["gputeam"]["gres/gpu"] == pytest.approx(0.0078650, abs=5e-7)

    # The same capture with one pool per partition: each job counts in its own.
    pools = parse_config_text(
        "interval: 60s\nhistory: {half_life: 1h, weight: 1}\n"
        "pools: [{name: gpus, partitions: [gpu]}, {name: cpus, partitions: [cpu]}]\n",
        "c.yaml",
    )
    split = HistoryPast(tmp_path, clock=Clock(now), fetch=fetch).past(pools)
    assert split is not None
    assert set(split["gpus"]) == {"gputeam", "memteam"}
    assert set(split["cpus"]) == {"cputeam", "newteam"}
    assert split["cpus"]["cputeam"]["cpu"] == pytest.approx(accounts["cputeam"]["cpu"], rel=1e-12)


# --- with the daemon's own record --------------------------------------------------------------

CONFIG = Config(interval=60.0, history=HistoryConfig(half_life_s=HOUR, weight=1.0))


def _cycle(recorder: AuditRecorder, gpus: int) -> None:
    jobs = [job("physics", state="RUNNING", cpu=2, gpu=1) for _ in range(gpus)]
    jobs.append(job("chemistry", state="RUNNING", cpu=1, gpu=1))
    snap = snapshot([node(cpu=64, mem=256_000, gpu=8)], jobs)
    recorder.on_cycle(CycleReport(compute_plan(snap, Config()), snap, (), None, 0.0, 0.0, 0, False))


def _recorded(gpus: int) -> dict[str, dict[str, float]]:
    return {
        "physics": {"cpu": 2.0 * gpus, "mem": 0.0, "gres/gpu": float(gpus)},
        "chemistry": {"cpu": 1.0, "mem": 0.0, "gres/gpu": 1.0},
    }


def _fake_sacct(truth: Sequence[Allocation], clock: Clock, asked: list[float]) -> Callable[[float], list[Allocation]]:
    """What sacct answers at the clock's time: what ran after `start`, running jobs without an end."""

    def fetch(start: float) -> list[Allocation]:
        asked.append(start)
        now = clock.now
        return [
            Allocation(a.account, a.partition, a.start, a.end if a.end is not None and a.end <= now else None, a.tres)
            for a in truth
            if a.start < now and (a.end is None or a.end > start)
        ]

    return fetch


def _flat(past: UsageByPool | None) -> dict[tuple[str, str, str], float]:
    assert past is not None
    return {(p, a, r): v for p, accounts in past.items() for a, amounts in accounts.items() for r, v in amounts.items()}


def test_the_record_wins_where_both_exist(tmp_path: Path) -> None:
    clock = Clock(1_800_000_000.0)
    t0 = clock.now
    recorder = AuditRecorder(tmp_path, None, clock=clock)
    for step in range(60):
        _cycle(recorder, step % 3)
        clock.now += 60.0
    # sacct tells another story for the recorded hour (a crowd on physics, an account the
    # record never saw) and the true one for the hour before the record starts.
    truth = [
        Allocation("physics", "main", t0 + 600.0, t0 + 1800.0, {"cpu": 64, "gres/gpu": 8}),
        Allocation("ghost", "main", t0 + 60.0, None, {"cpu": 32}),
        Allocation("biology", "main", t0 - HOUR, t0 - 0.5 * HOUR, {"cpu": 16, "gres/gpu": 2}),
    ]
    asked: list[float] = []
    past = HistoryPast(tmp_path, clock=clock, fetch=_fake_sacct(truth, clock, asked)).past(CONFIG)
    assert asked == [clock.now - SACCT_HALF_LIVES * HOUR]
    assert past is not None
    now = clock.now
    assert "ghost" not in past["default"]
    # biology from sacct before the record, [t0 - 1h, t0 - 30 min); then only what the record says.
    records = [(t0 - HOUR, t0 - 0.5 * HOUR, 2.0), (t0 - 0.5 * HOUR, t0, 0.0)]
    records += [(t0 + 60.0 * i, t0 + 60.0 * (i + 1), float(i % 3)) for i in range(60)]
    assert past["default"]["physics"]["gres/gpu"] == pytest.approx(
        _hand_integral([(a, b, 0.0 if b <= t0 else u) for a, b, u in records], now, HOUR), rel=1e-9
    )
    assert past["default"]["biology"]["gres/gpu"] == pytest.approx(
        _hand_integral([(a, b, u if b <= t0 else 0.0) for a, b, u in records], now, HOUR), rel=1e-9
    )
    # The record alone, for contrast: no biology, and physics averaged over the recorded hour only.
    alone = HistoryPast(tmp_path, clock=clock, fetch=None).past(CONFIG)
    assert alone is not None
    assert "biology" not in alone["default"]
    assert alone["default"]["physics"]["gres/gpu"] > past["default"]["physics"]["gres/gpu"]


def test_a_restart_in_the_middle_gives_the_same_decayed_totals_with_sacct(tmp_path: Path) -> None:
    clock = Clock(1_800_000_000.0)
    t0 = clock.now
    gap_start, gap_end = t0 + 69 * 60.0, t0 + 69 * 60.0 + 1800.0  # cycles failed for half an hour
    truth = [
        Allocation("biology", "main", t0 - 2 * HOUR, t0 - HOUR, {"cpu": 16, "gres/gpu": 2}),
        Allocation("physics", "main", gap_start + 300.0, gap_start + 1200.0, {"cpu": 24, "gres/gpu": 3}),
        Allocation("physics", "main", t0 + 60.0, t0 + 600.0, {"cpu": 99, "gres/gpu": 99}),  # recorded time: ignored
    ]
    asked: list[float] = []
    live = HistoryPast(tmp_path, clock=clock, fetch=_fake_sacct(truth, clock, asked))
    recorder = AuditRecorder(tmp_path, None, clock=clock)
    first = live.past(CONFIG)  # the first start: nothing recorded, sacct over the window
    assert first is not None and set(first["default"]) == {"biology"}
    intervals: list[tuple[float, float, dict[str, dict[str, float]]]] = [
        (t0 - 2 * HOUR, t0 - HOUR, {"biology": {"cpu": 16.0, "gres/gpu": 2.0}}),
        (t0 - HOUR, t0, {}),
    ]
    restarted: HistoryPast | None = None
    restarted_asked: list[float] = []
    for step in range(120):
        if step == 70:
            clock.now = gap_end  # the pause: no cycle recorded, the live reader asked meanwhile
            assert live.past(CONFIG) is not None
            intervals += [
                (gap_start, gap_start + 300.0, {}),
                (gap_start + 300.0, gap_start + 1200.0, {"physics": {"cpu": 24.0, "gres/gpu": 3.0}}),
                (gap_start + 1200.0, gap_end, {}),
            ]
        _cycle(recorder, step % 5)
        if step != 69:  # the record of step 69 holds for no time: the pause follows it
            intervals.append((clock.now, clock.now + 60.0, _recorded(step % 5)))
        clock.now += 60.0
        got = live.past(CONFIG)
        if step == 75:
            restarted = HistoryPast(tmp_path, clock=clock, fetch=_fake_sacct(truth, clock, restarted_asked))
        if restarted is not None:
            assert _flat(restarted.past(CONFIG)) == pytest.approx(_flat(got), rel=1e-9, abs=1e-12)
    assert restarted is not None
    # sacct was asked once at each start and once for the pause, never every cycle.
    assert asked == [t0 - SACCT_HALF_LIVES * HOUR, gap_start]
    assert len(restarted_asked) == 1
    final = live.past(CONFIG)
    assert final is not None
    now = clock.now
    for account in ("physics", "chemistry", "biology"):
        for resource in ("cpu", "gres/gpu"):
            expected = _hand_integral(
                [(a, b, usage.get(account, {}).get(resource, 0.0)) for a, b, usage in intervals], now, HOUR
            )
            assert final["default"][account][resource] == pytest.approx(expected, rel=1e-9), (account, resource)


def test_a_failing_sacct_leaves_the_record_alone_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock(1_800_000_000.0)
    recorder = AuditRecorder(tmp_path, None, clock=clock)
    calls: list[float] = []

    def fetch(start: float) -> list[Allocation]:
        calls.append(start)
        raise SlurmReadError("sacct --parsable2 --noheader --allusers: no answer within 60 s")

    with_sacct = HistoryPast(tmp_path, clock=clock, fetch=fetch)
    alone = HistoryPast(tmp_path, clock=clock, fetch=None)
    caplog.set_level(logging.DEBUG, logger="slurm_drf.trail.past")
    for step in range(40):
        if step == 20:
            clock.now += 1800.0  # a pause: sacct is asked again when the next record comes
        _cycle(recorder, step % 4)
        clock.now += 60.0
        assert with_sacct.past(CONFIG) == alone.past(CONFIG)
    # Asked at the start, then again every SACCT_RETRY_INTERVALS intervals while it fails (not every cycle).
    assert len(calls) == 4
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "past usage from the history only, sacct failed: sacct --parsable2 --noheader --allusers: no answer within 60 s"
    ]


def test_a_sacct_back_after_failing_fills_the_past_on_its_own(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """slurmdbd down at start: the past is the record's alone; once sacct answers, it is read afresh with sacct."""
    clock = Clock(1_800_000_000.0)
    recorder = AuditRecorder(tmp_path, None, clock=clock)
    answers: list[bool] = []

    def fetch(start: float) -> list[Allocation]:
        answers.append(len(answers) > 0)
        if len(answers) == 1:
            raise SlurmReadError("sacct: slurmdbd: Connection refused")
        return []

    past = HistoryPast(tmp_path, clock=clock, fetch=fetch)
    caplog.set_level(logging.WARNING, logger="slurm_drf.trail.past")
    for step in range(12):
        _cycle(recorder, step % 4)
        clock.now += 60.0
        past.past(CONFIG)
    assert answers == [False, True]
    assert "sacct answers again" in caplog.text
