"""Memory of past use (docs/rule.md §6): the decay, the blend, the record it comes from."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from slurm_drf.config.load import load_config, parse_config_text
from slurm_drf.config.settings import Config, HistoryConfig
from slurm_drf.cycle.run import CycleReport
from slurm_drf.errors import ConfigError
from slurm_drf.model.snapshot_file import SnapshotFileSource
from slurm_drf.model.types import Snapshot
from slurm_drf.policy.decay import decay_weight
from slurm_drf.policy.decayed_usage import DecayedUsage, UsageByPool, UsageRecord, decayed_past, past_term
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.slurm.parse.jobs import parse_squeue_json
from slurm_drf.slurm.parse.nodes import parse_sinfo_json
from slurm_drf.trail.history_db import AuditRecorder
from slurm_drf.trail.past import HistoryPast
from slurm_drf.trail.plan_output import render_plan_json
from tests.paths import FIXTURES
from tests.unit.builders import job, node, snapshot

DAY = 86400.0
ON = HistoryConfig(half_life_s=DAY, weight=0.5)


# --- the decay, by hand -----------------------------------------------------------


def test_decay_weight_is_the_integral_of_the_decay() -> None:
    # One half-life ending now: h/ln2 x (1 - 1/2).
    assert decay_weight(0.0, DAY, DAY, DAY) == pytest.approx(DAY / math.log(2) * 0.5, rel=1e-12)
    # Split anywhere, it weighs the same.
    whole = decay_weight(0.0, 3 * DAY, 5 * DAY, DAY)
    assert decay_weight(0.0, 1234.5, 5 * DAY, DAY) + decay_weight(1234.5, 3 * DAY, 5 * DAY, DAY) == pytest.approx(
        whole, rel=1e-12
    )
    assert decay_weight(2.0, 1.0, 5.0, DAY) == 0.0


def test_worked_example_of_the_rule_doc() -> None:
    # docs/rule.md §6: 8 GPUs for a day, then none for a day; half-life one day.
    records = [
        UsageRecord(0.0, {"default": {"physics": {"gres/gpu": 8.0, "cpu": 64.0}}}),
        UsageRecord(DAY, {"default": {"physics": {"gres/gpu": 0.0, "cpu": 0.0}}}),
    ]
    past = decayed_past(records, 2 * DAY, DAY, max_gap=DAY)
    # (8 x (1/2 - 1/4)) / ((1/2 - 1/4) + (1 - 1/2)) = 8/3
    assert past["default"]["physics"]["gres/gpu"] == pytest.approx(8 / 3, rel=1e-12)
    assert past["default"]["physics"]["cpu"] == pytest.approx(64 / 3, rel=1e-12)
    # w = 0.5: 4/3 of a GPU rounds to 1, 32/3 CPUs to 11.
    assert past_term(past["default"], 0.5, ("cpu", "gres/gpu")) == {"physics": {"cpu": 11, "gres/gpu": 1}}


def test_a_gap_is_unknown_not_zero() -> None:
    h = DAY
    records = [
        UsageRecord(0.0, {"p": {"a": {"cpu": 8.0}}}),
        UsageRecord(DAY, {"p": {"a": {"cpu": 4.0}}}),
        # The daemon was down for two days: [1d, 3d) is a gap (max_gap 1.5 d).
        UsageRecord(3 * DAY, {"p": {"a": {"cpu": 0.0}}}),
    ]
    now = 3.5 * DAY
    known = [(0.0, DAY, 8.0), (3 * DAY, now, 0.0)]
    numerator = sum(u * decay_weight(a, b, now, h) for a, b, u in known)
    denominator = sum(decay_weight(a, b, now, h) for a, b, _ in known)
    past = decayed_past(records, now, h, max_gap=1.5 * DAY)
    assert past["p"]["a"]["cpu"] == pytest.approx(numerator / denominator, rel=1e-12)
    # Counting the gap as zero use would give less.
    zero = decayed_past([*records[:2], UsageRecord(2 * DAY, {}), records[2]], now, h, max_gap=1.5 * DAY)
    assert zero["p"]["a"]["cpu"] < past["p"]["a"]["cpu"]


def test_an_account_absent_from_a_record_used_nothing_then() -> None:
    records = [
        UsageRecord(0.0, {"p": {"a": {"cpu": 6.0}}}),
        UsageRecord(DAY, {"p": {}}),  # a cycle with no jobs at all
    ]
    past = decayed_past(records, 2 * DAY, DAY, max_gap=DAY)
    assert past["p"]["a"]["cpu"] == pytest.approx(6 / 3, rel=1e-12)


def test_no_known_past_is_empty() -> None:
    assert decayed_past([], 10.0, DAY, max_gap=120.0) == {}
    # One record long ago, beyond the gap: nothing is known.
    assert decayed_past([UsageRecord(0.0, {"p": {"a": {"cpu": 1.0}}})], 10 * DAY, DAY, max_gap=120.0) == {}
    with pytest.raises(ValueError, match="must be > 0"):
        DecayedUsage(0.0, 1.0)


def test_adding_one_by_one_equals_all_at_once() -> None:
    records = [UsageRecord(60.0 * i, {"p": {"a": {"cpu": float(i % 7)}, "b": {"cpu": 3.0}}}) for i in range(500)]
    usage = DecayedUsage(DAY, 120.0)
    halfway = usage.past_at(0.0)
    assert halfway == {}
    for record in records:
        usage.add(record)
    assert usage.past_at(30_000.0) == decayed_past(records, 30_000.0, DAY, 120.0)


# --- the blend: w = 0 is today's plan ------------------------------------------------


def _fixtures() -> list[tuple[Snapshot, Config]]:
    report = SnapshotFileSource(FIXTURES / "report" / "snapshot.json").fetch_snapshot()
    squeue = json.loads((FIXTURES / "slurm-22.05" / "squeue.json").read_text())
    sinfo = json.loads((FIXTURES / "slurm-22.05" / "sinfo.json").read_text())
    captured = Snapshot(
        "drftest", "2026-11-30T02:00:00Z", tuple(parse_sinfo_json(sinfo)), tuple(parse_squeue_json(squeue))
    )
    return [(report, load_config(FIXTURES / "report" / "config.yaml")), (captured, Config())]


def _heavy_past(snap: Snapshot, plan: Plan) -> UsageByPool:
    """A past in which every account of the snapshot ran a whole pool, unevenly."""
    accounts = sorted(set(snap.table.accounts))
    return {
        pool.name: {
            a: {r: float(c) * (i + 1) / len(accounts) for r, c in pool.capacity.items()} for i, a in enumerate(accounts)
        }
        for pool in plan.pools
    }


def _same_plan(one: Plan, other: Plan) -> None:
    assert render_plan_json(one) == render_plan_json(other)
    assert list(one.jobs) == list(other.jobs)
    assert one.accounts == other.accounts
    assert one.state == other.state
    for a, b in zip(one.orders, other.orders, strict=True):
        assert (a.before == b.before).all()
        assert (a.ordering.level == b.ordering.level).all()


@pytest.mark.parametrize("case", [0, 1])
def test_history_off_or_weight_zero_is_todays_plan(case: int) -> None:
    snap, config = _fixtures()[case]
    base = compute_plan(snap, config)
    assert base.jobs, "the fixture has pending jobs"
    past = _heavy_past(snap, base)
    off = dataclasses.replace(config, history=HistoryConfig(half_life_s=DAY, weight=0.0))
    _same_plan(base, compute_plan(snap, config, past=past))  # history absent: the past is ignored
    _same_plan(base, compute_plan(snap, off, past=past))  # weight 0
    _same_plan(base, compute_plan(snap, dataclasses.replace(config, history=ON)))  # no past known
    # And the heavy past does change this plan once it counts.
    blended = compute_plan(snap, dataclasses.replace(config, history=ON), past=past)
    assert [a.weighted_share for a in blended.accounts] != [a.weighted_share for a in base.accounts]


# --- the blend changes the order ------------------------------------------------------


def _two_equal_accounts() -> Snapshot:
    return snapshot(
        [node(cpu=64, mem=256_000, gpu=8)],
        [
            job(a, job_id=str(n + 10 * k), submit_time=float(n), cpu=4, gpu=1)
            for n in range(3)
            for k, a in enumerate(("physics", "chemistry"))
        ],
    )


def test_heavy_past_goes_after_an_equal_account_with_none() -> None:
    snap = _two_equal_accounts()
    config = Config(history=ON)
    past = {"default": {"physics": {"cpu": 32.0, "gres/gpu": 4.0}}}
    plan = compute_plan(snap, config, past=past)
    order = [j.account for j in plan.jobs]
    # physics carries 16 CPUs and 2 GPUs of past (0.5 x): its first level is 2/8, which
    # chemistry reaches only at its third job, and there the share vectors put chemistry first.
    assert order == ["chemistry"] * 3 + ["physics"] * 3
    # Without the past they alternate: the first two jobs are of different accounts.
    pure = [j.account for j in compute_plan(snap, Config(), past=past).jobs]
    assert set(pure[:2]) == {"physics", "chemistry"}
    # The report keeps the running usage apart from what the past adds.
    physics = next(a for a in plan.accounts if a.account == "physics")
    assert physics.usage == {"cpu": 0, "mem": 0, "gres/gpu": 0}
    assert physics.past == {"cpu": 16, "gres/gpu": 2}
    assert physics.weighted_share == pytest.approx(2 / 8)
    chemistry = next(a for a in plan.accounts if a.account == "chemistry")
    assert chemistry.past == {} and chemistry.rank == 1 and physics.rank == 2


def test_past_of_another_pool_or_account_is_ignored() -> None:
    snap = _two_equal_accounts()
    base = compute_plan(snap, Config())
    past = {"elsewhere": {"physics": {"gres/gpu": 8.0}}, "default": {"nobody": {"gres/gpu": 8.0}}}
    _same_plan(base, compute_plan(snap, Config(history=ON), past=past))


# --- from the history file, across a restart ------------------------------------------


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _cycle(clock: Clock, recorder: AuditRecorder, running_gpus: int) -> None:
    jobs = [job("physics", state="RUNNING", cpu=2, gpu=1) for _ in range(running_gpus)]
    jobs.append(job("chemistry", state="RUNNING", cpu=1, gpu=1))
    snap = snapshot([node(cpu=64, mem=256_000, gpu=8)], jobs)
    plan = compute_plan(snap, Config())
    recorder.on_cycle(CycleReport(plan, snap, (), None, 0.0, 0.0, 0, False))


def test_a_restart_in_the_middle_gives_the_same_decayed_totals(tmp_path: Path) -> None:
    config = Config(interval=60.0, history=HistoryConfig(half_life_s=3600.0, weight=1.0))
    clock = Clock(1_800_000_000.0)
    recorder = AuditRecorder(tmp_path, None, clock=clock)
    live = HistoryPast(tmp_path, clock=clock)
    assert live.past(config) == {}  # no history file yet
    restarted: HistoryPast | None = None
    seen: list[UsageRecord] = []
    for step in range(120):
        _cycle(clock, recorder, step % 5)
        seen.append(
            UsageRecord(
                clock.now,
                {
                    "default": {
                        "physics": {"cpu": 2.0 * (step % 5), "gres/gpu": float(step % 5)},
                        "chemistry": {"cpu": 1.0, "gres/gpu": 1.0},
                    }
                },
            )
        )
        clock.now += 60.0
        got = live.past(config)
        if step == 70:
            restarted = HistoryPast(tmp_path, clock=clock)  # a new process reads the file
        if restarted is not None:
            assert _close(restarted.past(config), got)
    assert restarted is not None
    final = live.past(config)
    assert final is not None
    # Exactly the integral of what was recorded (mem included, at 0).
    expected = decayed_past(seen, clock.now, 3600.0, 120.0)
    for account, amounts in expected["default"].items():
        for resource, amount in amounts.items():
            assert final["default"][account][resource] == pytest.approx(amount, rel=1e-9, abs=1e-12)
    assert final["default"]["chemistry"]["gres/gpu"] == pytest.approx(1.0, rel=1e-12)
    assert 0.0 < final["default"]["physics"]["gres/gpu"] < 4.0


def test_history_off_reads_nothing(tmp_path: Path) -> None:
    assert HistoryPast(tmp_path).past(Config()) is None
    assert HistoryPast(tmp_path).past(Config(history=HistoryConfig(weight=0.0))) is None


def test_an_unreadable_history_is_logged_and_the_cycle_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "history.sqlite").write_bytes(b"not a database at all" * 100)
    assert HistoryPast(tmp_path).past(Config(history=ON)) == {}
    assert "cannot read past usage" in caplog.text


def _close(one: UsageByPool | None, other: UsageByPool | None) -> bool:
    if one is None or other is None or set(one) != set(other):
        return False
    for pool, accounts in one.items():
        if set(accounts) != set(other[pool]):
            return False
        for account, amounts in accounts.items():
            for resource, amount in amounts.items():
                if not math.isclose(amount, other[pool][account][resource], rel_tol=1e-9, abs_tol=1e-12):
                    return False
    return True


# --- the config ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("history: {half_life: 30m}\n", "c.yaml:1: history.half_life: '30m' is shorter than 1 hour"),
        ("history: {half_life: 1e400}\n", "c.yaml:1: history.half_life:"),
        ("history: {weight: 101}\n", "c.yaml:1: history.weight: 101 is not <= 100"),
        ("history: {weight: -1}\n", "c.yaml:1: history.weight: -1 is not >= 0"),
        ("history: {halflife: 7d}\n", "c.yaml:1: history.halflife: unknown key"),
        ("history: {half_life: 7 days}\n", "c.yaml:1: history.half_life: '7 days' is not a duration"),
        ("history: 3\n", "c.yaml:1: history: expected a mapping"),
    ],
)
def test_history_config_errors_name_the_key(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_text(text, "c.yaml")
    assert any(line.startswith(problem) for line in caught.value.problems), caught.value.problems


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", None),
        ("history: null\n", None),
        ("history: {}\n", HistoryConfig(14 * DAY, 0.5)),
        ("history: {half_life: 7d, weight: 2}\n", HistoryConfig(7 * DAY, 2.0)),
        ("history:\n  half_life: 1h\n  weight: 0\n", HistoryConfig(3600.0, 0.0)),
    ],
)
def test_history_config(text: str, expected: Any) -> None:
    assert parse_config_text(text, "c.yaml").history == expected


def test_worked_example_order_of_the_rule_doc() -> None:
    # docs/rule.md §6: physics ran the whole pool the day before yesterday, nothing since.
    records = [
        UsageRecord(0.0, {"default": {"physics": {"cpu": 64.0, "gres/gpu": 8.0}}}),
        UsageRecord(DAY, {"default": {"physics": {"cpu": 0.0, "gres/gpu": 0.0}}}),
    ]
    past = decayed_past(records, 2 * DAY, DAY, max_gap=DAY)
    snap = snapshot(
        [node(cpu=64, mem=256_000, gpu=8)],
        [
            job(a, job_id=str(100 + n + 10 * k), submit_time=float(n), cpu=4, gpu=1)
            for n in range(3)
            for k, a in enumerate(("physics", "chemistry"))
        ],
    )
    plan = compute_plan(snap, Config(resources=("cpu", "gres/gpu"), history=ON), past=past)
    assert [(j.account, j.level) for j in plan.jobs] == [
        ("chemistry", 0.0),
        ("chemistry", 0.125),
        ("physics", 0.171875),
        ("chemistry", 0.25),  # a tie at 1/4: chemistry's second share (1/8) is below physics' (15/64)
        ("physics", 0.25),
        ("physics", 0.375),
    ]
