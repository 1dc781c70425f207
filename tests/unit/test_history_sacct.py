"""The past bootstrapped from Slurm's accounting (docs/rule.md §6): sacct --json, the fill, the record's precedence."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from builders import job, node, snapshot

from slurm_drf.config.load import parse_config_text
from slurm_drf.config.settings import Config, HistoryConfig
from slurm_drf.cycle.run import CycleReport
from slurm_drf.errors import SlurmReadError
from slurm_drf.policy.history import (
    Allocation,
    DecayedUsage,
    UsageByPool,
    UsageRecord,
    build_partition_pools,
    build_usage_span,
    decay_weight,
)
from slurm_drf.policy.plan import compute_plan
from slurm_drf.slurm.sacct import (
    SACCT_TIMEOUT,
    build_allocations,
    build_sacct_argv,
    fetch_allocations,
    parse_sacct_json,
)
from slurm_drf.trail.history import AuditRecorder
from slurm_drf.trail.past import SACCT_HALF_LIVES, HistoryPast

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-22.05" / "sacct-allocations.json"
HOUR = 3600.0
# The captured jobs all started at this second (tests/fixtures/slurm-22.05/README.md).
CAPTURED_START = 1796137579.0


# --- sacct --json ------------------------------------------------------------------


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


def test_one_sacct_run_with_an_argument_list() -> None:
    seen: list[tuple[list[str], float]] = []

    def runner(argv: Sequence[str], timeout: float, *, env: object = None) -> str:
        seen.append((list(argv), timeout))
        return FIXTURE.read_text()

    allocations = fetch_allocations(CAPTURED_START - 600, runner=runner)
    assert len(allocations) == 3
    argv, timeout = seen[0]
    assert timeout == SACCT_TIMEOUT
    assert argv == build_sacct_argv(CAPTURED_START - 600)
    assert argv[:4] == ["sacct", "--json", "--allusers", "--allocations"]
    assert argv[-4:] == ["--endtime", "now", "--state", "RUNNING"]
    assert len(seen) == 1

    def broken(argv: Sequence[str], timeout: float, *, env: object = None) -> str:
        return "sacct: error: Problem talking to the database"

    with pytest.raises(SlurmReadError, match=r"^sacct --json .*: not JSON"):
        fetch_allocations(0.0, runner=broken)


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


def _hand_integral(intervals: Sequence[tuple[float, float, float]], now: float, half_life: float) -> float:
    """sum u x D / sum D with D = H/ln 2 (2^-(now-b)/H - 2^-(now-a)/H), written out."""

    def weight(a: float, b: float) -> float:
        return half_life / math.log(2) * (2 ** (-(now - b) / half_life) - 2 ** (-(now - a) / half_life))

    return sum(u * weight(a, b) for a, b, u in intervals) / sum(weight(a, b) for a, b, _ in intervals)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _captured(start: float) -> list[Allocation]:
    allocations = build_allocations(parse_sacct_json(FIXTURE.read_bytes()))
    return [a for a in allocations if a.end is None or a.end > start]


def test_a_fresh_install_starts_from_the_captured_sacct(tmp_path: Path) -> None:
    # No history.sqlite at all; ten minutes after the three captured jobs started.
    now = CAPTURED_START + 600.0
    asked: list[float] = []

    def fetch(start: float) -> list[Allocation]:
        asked.append(start)
        return _captured(start)

    config = Config(interval=60.0, history=HistoryConfig(half_life=HOUR, weight=1.0))
    past = HistoryPast(tmp_path, clock=Clock(now), fetch=fetch).past(config)
    assert asked == [now - SACCT_HALF_LIVES * HOUR]
    assert past is not None
    accounts = past["default"]
    s = CAPTURED_START
    # Known from the first allocation on: [s, now). gputeam 2 CPUs and 1 GPU for 5 s,
    # cputeam 4 CPUs for 8 s, memteam 1 CPU and 4000 MiB throughout (still running).
    assert accounts["gputeam"]["cpu"] == pytest.approx(_hand_integral([(s, s + 5, 2), (s + 5, now, 0)], now, HOUR))
    assert accounts["gputeam"]["gres/gpu"] == pytest.approx(_hand_integral([(s, s + 5, 1), (s + 5, now, 0)], now, HOUR))
    assert accounts["cputeam"]["cpu"] == pytest.approx(_hand_integral([(s, s + 8, 4), (s + 8, now, 0)], now, HOUR))
    assert accounts["memteam"] == pytest.approx({"cpu": 1.0, "mem": 4000.0, "gres/gpu": 0.0})
    # Numerically: 2 x (2^(-595/3600) - 2^(-600/3600)) / (1 - 2^(-600/3600)).
    assert accounts["gputeam"]["cpu"] == pytest.approx(0.015730, abs=5e-7)

    # The same capture with one pool per partition: each job counts in its own.
    pools = parse_config_text(
        "interval: 60s\nhistory: {half_life: 1h, weight: 1}\n"
        "pools: [{name: gpus, partitions: [gpu]}, {name: cpus, partitions: [cpu]}]\n",
        "c.yaml",
    )
    split = HistoryPast(tmp_path, clock=Clock(now), fetch=fetch).past(pools)
    assert split is not None
    assert set(split["gpus"]) == {"gputeam", "memteam"}
    assert set(split["cpus"]) == {"cputeam"}
    assert split["cpus"]["cputeam"]["cpu"] == pytest.approx(accounts["cputeam"]["cpu"], rel=1e-12)


# --- with the daemon's own record --------------------------------------------------------------

CONFIG = Config(interval=60.0, history=HistoryConfig(half_life=HOUR, weight=1.0))


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
        raise SlurmReadError("sacct --json --allusers: no answer within 60 s")

    with_sacct = HistoryPast(tmp_path, clock=clock, fetch=fetch)
    alone = HistoryPast(tmp_path, clock=clock, fetch=None)
    caplog.set_level(logging.DEBUG, logger="slurm_drf.trail.past")
    for step in range(40):
        if step == 20:
            clock.now += 1800.0  # a pause: sacct is asked again when the next record comes
        _cycle(recorder, step % 4)
        clock.now += 60.0
        assert with_sacct.past(CONFIG) == alone.past(CONFIG)
    assert len(calls) == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "past usage from the history only, sacct failed: sacct --json --allusers: no answer within 60 s"
    ]
