"""Numbers the config takes, and what the code can honour (issue 22, round 2, item 7).

Every numeric and duration key of the one schema (schema.yaml, with the
duration bounds of config/checks.py) has a documented maximum: above it
check-config, the daemon's load and its reload refuse the file in one line
naming file:line and key; at it, everything that later uses the value (the
plan and its JSON, the scheduler's next start and backoff, the lease, the
history's look-back and sacct's -S, retention) works.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest

from slurm_drf.cli.main import main
from slurm_drf.config.checks import MAX_HISTORY_HALF_LIFE, MAX_INTERVAL, MAX_SLURM_TIMEOUT
from slurm_drf.config.load import load_config, parse_config_text
from slurm_drf.config.validate import load_schema
from slurm_drf.cycle.lease import Lease
from slurm_drf.cycle.run import CycleReport
from slurm_drf.errors import ConfigError
from slurm_drf.policy.plan import compute_plan
from slurm_drf.service.loop import ERROR_DELAYS, _trigger, compute_error_delay
from slurm_drf.slurm.sacct import build_sacct_argv
from slurm_drf.trail.history_db import AuditRecorder
from slurm_drf.trail.past import HistoryPast
from slurm_drf.trail.plan_output import render_plan_json_bytes
from tests.unit.builders import job, node, snapshot

BIG = "1" + "0" * 30

# (the file, the one problem it has). Above every maximum, and far above it.
ABOVE: list[tuple[str, str]] = [
    (f"horizon: {BIG}", f"c.yaml:1: horizon: expected auto or a number of jobs (1 to 2147483645), got {BIG}"),
    ("horizon: 2147483646", "c.yaml:1: horizon: expected auto or a number of jobs (1 to 2147483645), got 2147483646"),
    ("history: {half_life: 1000000000000d}", "c.yaml:1: history.half_life: '1000000000000d' is longer than 365 days"),
    ("history: {half_life: 366d}", "c.yaml:1: history.half_life: '366d' is longer than 365 days"),
    ("history: {half_life: 8761h}", "c.yaml:1: history.half_life: '8761h' is longer than 365 days"),
    ("history: {half_life: 31536001}", "c.yaml:1: history.half_life: 31536001 is longer than 365 days"),
    ("history: {half_life: " + "9" * 400 + "s}", "c.yaml:1: history.half_life: '9999"),
    ("interval: 1e15", "c.yaml:1: interval: 1000000000000000.0 is longer than 1 day"),
    ("interval: 86401", "c.yaml:1: interval: 86401 is longer than 1 day"),
    ("interval: 2d", "c.yaml:1: interval: '2d' is longer than 1 day"),
    ("interval: 1441m", "c.yaml:1: interval: '1441m' is longer than 1 day"),
    ("interval: " + "9" * 400 + "s", "c.yaml:1: interval: '99999"),
    ("interval: 10000000000000d", "c.yaml:1: interval: '10000000000000d' is longer than 1 day"),
    ("retention_days: 36501", "c.yaml:1: retention_days: 36501 is not <= 36500"),
    (f"retention_days: {BIG}", f"c.yaml:1: retention_days: {BIG} is not <= 36500"),
    (f"max_writes_per_cycle: {BIG}", f"c.yaml:1: max_writes_per_cycle: {BIG} is not <= 4294967293"),
    ("max_writes_per_cycle: 4294967294", "c.yaml:1: max_writes_per_cycle: 4294967294 is not <= 4294967293"),
    ("tie_half_life: 1e300", "c.yaml:1: tie_half_life: 1e+300 is not <= 1000000"),
    ("tie_half_life: 1000001", "c.yaml:1: tie_half_life: 1000001 is not <= 1000000"),
    # The maxima that were there already, still there.
    ("scale: 2147483645", "c.yaml:1: scale: 2147483645 is not <= 2147483644"),
    ("offset: 2147483646", "c.yaml:1: offset: 2147483646 is not <= 2147483645"),
    ("factor_weight: 2147483646", "c.yaml:1: factor_weight: 2147483646 is not <= 2147483645"),
    ("metrics_tree_max_paths: 1000001", "c.yaml:1: metrics_tree_max_paths: 1000001 is not <= 1000000"),
    ("history: {weight: 101}", "c.yaml:1: history.weight: 101 is not <= 100"),
    ("default_weight: 1000001", "c.yaml:1: default_weight: 1000001 is not between 0.000001 and 1000000"),
    ("accounts: {a: {weight: 1e7}}", "c.yaml:1: accounts.a.weight: 1e7 is not between 0.000001 and 1000000"),
    ("accounts: {a: {users: {u: 1e7}}}", "c.yaml:1: accounts.a.users.u: 1e7 is not between 0.000001 and 1000000"),
    ('metrics_address: "127.0.0.1:65536"', "c.yaml:1: metrics_address: port 65536 is not between 1 and 65535"),
    ("slurm_timeout: 601", "c.yaml:1: slurm_timeout: 601 is longer than 10 minutes"),
    ("slurm_timeout: 11m", "c.yaml:1: slurm_timeout: '11m' is longer than 10 minutes"),
    ("slurm_timeout: 1e15", "c.yaml:1: slurm_timeout: 1000000000000000.0 is longer than 10 minutes"),
    ("slurm_timeout: " + "9" * 400 + "s", "c.yaml:1: slurm_timeout: '99999"),
]


@pytest.mark.parametrize(("text", "problem"), ABOVE, ids=[a[0][:40] for a in ABOVE])
def test_a_value_above_its_maximum_is_one_problem_naming_the_line_and_key(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_text(text + "\n", "c.yaml")
    (line,) = caught.value.problems
    assert line.startswith(problem), line
    assert len(line) < 300


@pytest.mark.parametrize(("text", "problem"), ABOVE[:19], ids=[a[0][:40] for a in ABOVE[:19]])
def test_check_config_refuses_it_in_one_line_exit_2(
    text: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    path.chmod(0o600)
    assert main(["check-config", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"slurm-drf: config: {tmp_path}/{problem}")


def test_every_numeric_key_of_the_schema_has_a_maximum() -> None:
    """A new number in the schema needs a maximum too (or a check that bounds it after parsing)."""
    # Durations: config/checks.py and config/reclaim_keys.py.
    bounded_after_parsing = {
        "interval",
        "slurm_timeout",
        "history.half_life",
        "reclaim.after",
        "reclaim.min_runtime",
        "reclaim.cooldown",
    }
    bounded_by_checks = {"default_weight", "accounts.*.weight", "accounts.*.users.*"}  # weight_problems
    found: dict[str, bool] = {}

    def walk(schema: dict[str, object], path: str) -> None:
        ref = schema.get("$ref")
        if isinstance(ref, str):
            walk({**load_schema()["$defs"][ref.rsplit("/", 1)[-1]], **schema, "$ref": None}, path)
            return
        types = schema.get("type")
        kinds = {types} if isinstance(types, str) else set(types) if isinstance(types, list) else set()
        if kinds & {"number", "integer"}:
            found[path] = "maximum" in schema or "exclusiveMaximum" in schema
        for key, sub in (schema.get("properties") or {}).items():  # type: ignore[attr-defined]
            walk(sub, f"{path}.{key}" if path else key)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            walk(extra, f"{path}.*")
        for sub in schema.get("oneOf") or ():  # type: ignore[attr-defined]
            walk(sub, path)

    walk(dict(load_schema()), "")
    assert {"interval", "horizon", "retention_days", "history.half_life", "tie_half_life"} <= set(found)
    unbounded = {p for p, bounded in found.items() if not bounded} - bounded_after_parsing - bounded_by_checks
    assert unbounded == set()


# --- at the maximum, everything that uses the value works ---------------------------------------

AT_MAXIMUM = (
    "interval: 1d\nhorizon: 2147483645\nretention_days: 36500\nmax_writes_per_cycle: 4294967293\n"
    "tie_half_life: 1000000\nhistory: {half_life: 365d, weight: 100}\nscale: 2147483644\n"
    "factor_weight: 2147483645\nmetrics_tree_max_paths: 1000000\ndefault_weight: 1000000\nslurm_timeout: 10m\n"
)


def test_every_maximum_at_once_loads_and_check_config_passes(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(AT_MAXIMUM)
    path.chmod(0o600)
    config = load_config(path, private=True)
    assert (config.interval, config.slurm_timeout) == (MAX_INTERVAL, MAX_SLURM_TIMEOUT)
    assert config.history is not None and config.history.half_life_s == MAX_HISTORY_HALF_LIFE
    assert (config.horizon, config.retention_days, config.max_writes_per_cycle) == (2147483645, 36500, 4294967293)
    assert main(["check-config", str(path)]) == 0


@pytest.mark.parametrize("offset", ["", "offset: 100\n"])
def test_the_plan_and_its_json_hold_the_largest_horizon(offset: str) -> None:
    # (10**30 here made `plan --format json` fail: orjson holds no integer past 64 bits.)
    config = parse_config_text(AT_MAXIMUM + offset, "c.yaml")
    jobs = [job("a" if i % 2 else "b", job_id=str(i + 1), cpu=1, submit_time=float(i)) for i in range(300)]
    jobs.append(job("a", state="RUNNING", cpu=4))
    snap = snapshot([node(cpu=64, mem=1000, gpu=8)], jobs)
    plan = compute_plan(snap, config, past={"default": {"a": {"cpu": 1e18}}})
    data = orjson.loads(render_plan_json_bytes(plan))
    assert data["pools"][0]["horizon"] == 2147483645
    assert len(data["jobs"]) == 300
    assert [j["order"] for j in data["jobs"]] == list(range(300))


def test_the_scheduler_backoff_and_lease_hold_the_longest_interval(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    assert _trigger(MAX_INTERVAL).get_next_fire_time(None, now) is not None
    assert _trigger(MAX_INTERVAL).get_next_fire_time(now, now) == now + timedelta(days=1)
    for failures in range(1, len(ERROR_DELAYS) + 2):
        delay = compute_error_delay(failures, MAX_INTERVAL)
        assert now + timedelta(seconds=delay) > now
    lease = Lease(tmp_path, MAX_INTERVAL)
    assert lease.acquire() is None  # taken: this daemon holds it for 1.5 days
    lease.release()


def test_the_history_reads_and_asks_sacct_over_the_longest_half_life(tmp_path: Path) -> None:
    config = parse_config_text(AT_MAXIMUM + f"state_dir: {tmp_path}\n", "c.yaml")
    asked: list[list[str]] = []

    def fetch(start: float) -> list[object]:
        asked.append(build_sacct_argv(start))  # -S in local time: time.localtime of 5 half-lives back
        return []

    recorder = AuditRecorder(tmp_path, config.retention_days)
    snap = snapshot([node(cpu=64)], [job("a", state="RUNNING", cpu=8)])
    recorder.on_cycle(CycleReport(compute_plan(snap, config), snap, (), None, 0.0, 0.0, 0, False))
    past = HistoryPast(tmp_path, fetch=fetch).past(config)  # type: ignore[arg-type]
    assert past is not None and past["default"]["a"]["cpu"] == pytest.approx(8.0)
    (argv,) = asked
    start = time.mktime(time.strptime(argv[argv.index("--starttime") + 1], "%Y-%m-%dT%H:%M:%S"))
    assert start == pytest.approx(time.time() - 5 * MAX_HISTORY_HALF_LIFE, abs=120)
