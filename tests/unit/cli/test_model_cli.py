"""Snapshot contract (docs/formats.md) and the `plan` / `check-config` verbs (the README's verbs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurm_drf.cli.main import list_ids, main
from slurm_drf.errors import SnapshotError
from slurm_drf.model.codec import parse_snapshot, render_snapshot
from slurm_drf.model.types import SNAPSHOT_FORMAT
from tests.paths import FIXTURES


def good_snapshot() -> dict[str, Any]:
    return {
        "format": SNAPSHOT_FORMAT,
        "cluster": "drftest",
        "taken_at": "2026-11-30T02:00:00Z",
        "nodes": [
            {
                "name": "gpu01",
                "partitions": ["gpu"],
                "state": "idle",
                "tres": {"cpu": 64, "mem": 512000, "gres/gpu": 8, "gres/gpu:a100": 8},
            }
        ],
        "jobs": [
            {
                "job_id": "1234",
                "account": "physics",
                "user": "alice",
                "partition": "gpu",
                "state": "RUNNING",
                "priority": 1000,
                "nice": 0,
                "held": False,
                "submit_time": "2026-11-30T01:00:00Z",
                "array_tasks": 1,
                "tres": {"cpu": 8, "mem": 65536, "gres/gpu": 2},
            },
            {
                "job_id": "1240",
                "account": "physics",
                "user": "alice",
                "partition": "gpu",
                "state": "PENDING",
                "priority": 1000,
                "nice": 0,
                "held": False,
                "submit_time": "2026-11-30T01:30:00Z",
                "array_tasks": 4,
                "tres": {"cpu": 8, "mem": 65536, "gres/gpu": 2},
            },
            {
                "job_id": "1241",
                "account": "chemistry",
                "user": "bob",
                "partition": "gpu",
                "state": "PENDING",
                "priority": 900,
                "nice": 0,
                "held": False,
                "submit_time": "2026-11-30T01:40:00Z",
                "array_tasks": 1,
                "tres": {"cpu": 2, "mem": 400000},
            },
        ],
    }


def test_snapshot_round_trip_keeps_every_field() -> None:
    data = good_snapshot()
    snapshot = parse_snapshot(data)
    assert render_snapshot(snapshot)["jobs"] == data["jobs"]
    assert snapshot.jobs[1].array_tasks == 4
    assert snapshot.nodes[0].tres["gres/gpu"] == 8


def test_snapshot_round_trip_keeps_the_top_level_keys() -> None:
    data = {
        **good_snapshot(),
        "slurm_version": "22.05.8",
        "priority_type": "priority/multifactor",
        "priority_weights": {"PriorityWeightAge": 1000},
        "het_leaders": ["1240"],
    }
    snapshot = parse_snapshot(data)
    assert snapshot.priority_type == "priority/multifactor"
    assert snapshot.het_leaders == frozenset({"1240"})
    rendered = render_snapshot(snapshot)
    assert rendered == data
    assert parse_snapshot(rendered) == snapshot


def test_het_leaders_are_optional_and_checked() -> None:
    assert parse_snapshot(good_snapshot()).het_leaders == frozenset()
    assert "het_leaders" not in render_snapshot(parse_snapshot(good_snapshot()))
    assert parse_snapshot({**good_snapshot(), "het_leaders": [1240]}).het_leaders == frozenset({"1240"})
    with pytest.raises(SnapshotError, match="het_leaders: expected a list of job ids"):
        parse_snapshot({**good_snapshot(), "het_leaders": "1240"})


def test_fast_and_careful_parsers_agree() -> None:
    data = good_snapshot()
    fast = parse_snapshot(data)
    data["jobs"][0]["priority"] = 1000.0  # a float that is whole: only the careful path takes it
    careful = parse_snapshot(data)
    assert list(fast.jobs) == list(careful.jobs)


def test_unknown_keys_are_ignored_and_optional_keys_default() -> None:
    data = good_snapshot()
    data["extra"] = {"anything": 1}
    for key in ("user", "nice", "held", "array_tasks", "priority"):
        del data["jobs"][2][key]
    data["jobs"][2]["comment"] = "ignored"
    job = parse_snapshot(data).jobs[2]
    assert (job.user, job.nice, job.held, job.array_tasks, job.priority) == ("", 0, False, 1, 0)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(format="other/1"), "format: expected 'slurm-drf-snapshot/1', got 'other/1'"),
        (lambda d: d.update(jobs={}), "jobs: expected a list, got dict"),
        (lambda d: d["jobs"][1].pop("account"), "job 1240: missing key 'account'"),
        (lambda d: d["jobs"][1].pop("job_id"), "jobs[1]: missing key 'job_id'"),
        (lambda d: d["jobs"][1].update(state=7), "job 1240.state: expected a string, got 7"),
        (lambda d: d["jobs"][1]["tres"].update(cpu=-1), "job 1240.tres.cpu: expected a number >= 0, got -1"),
        (lambda d: d["jobs"][1]["tres"].update(cpu="8"), "job 1240.tres.cpu: expected a number, got '8'"),
        (lambda d: d["jobs"][1]["tres"].update(cpu=1.5), "job 1240.tres.cpu: expected a whole number, got 1.5"),
        (lambda d: d["jobs"][2].update(array_tasks=0), "job 1241.array_tasks: expected an integer >= 1, got 0"),
        (lambda d: d["jobs"][2].update(held="no"), "job 1241.held: expected true or false, got 'no'"),
        (
            lambda d: d["jobs"][2].update(submit_time="yesterday"),
            "job 1241.submit_time: expected an ISO 8601 time such as 2026-11-30T01:00:00Z, got 'yesterday'",
        ),
        (lambda d: d["nodes"][0]["tres"].update(mem=None), "node gpu01.tres.mem: expected a number, got None"),
        (lambda d: d["nodes"][0].pop("name"), "nodes[0]: missing key 'name'"),
    ],
)
def test_contract_breaches_name_the_job_or_node_and_key(mutate: Any, message: str) -> None:
    data = good_snapshot()
    mutate(data)
    with pytest.raises(SnapshotError) as caught:
        parse_snapshot(data)
    assert str(caught.value) == message


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_plan_json_has_the_contract_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "snap.json", good_snapshot())
    code, out, _ = run_cli(["plan", "--snapshot", str(path), "--format", "json", "--config", "/dev/null"], capsys)
    assert code == 0
    plan = json.loads(out)
    assert plan["format"] == "slurm-drf-plan/1"
    assert plan["pools"] == [
        {
            "name": "default",
            "partitions": ["gpu"],
            "nodes": 1,
            "capacity": {"cpu": 64, "mem": 512000, "gres/gpu": 8},
            "horizon": 1000,
            "exact": 2,
            "gap": 1,
            "separable": 2147483644,
        }
    ]
    physics = next(a for a in plan["accounts"] if a["account"] == "physics")
    assert physics["dominant_resource"] == "gres/gpu"
    assert physics["dominant_share"] == 0.25
    assert physics["usage"] == {"cpu": 8, "mem": 65536, "gres/gpu": 2}
    # chemistry has no usage: its job goes first, physics' array second.
    assert [(j["job_id"], j["order"], j["action"]) for j in plan["jobs"]] == [("1241", 0, "set"), ("1240", 1, "set")]
    assert plan["jobs"][1]["array_tasks"] == 4
    assert plan["jobs"][0]["nice"] < plan["jobs"][1]["nice"] < 0


def test_plan_table_names_accounts_and_jobs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "snap.json", good_snapshot())
    code, out, _ = run_cli(["plan", "--snapshot", str(path), "--config", "/dev/null"], capsys)
    assert code == 0
    assert "physics" in out and "chemistry" in out and "2 write(s) needed" in out


def test_bad_snapshot_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = good_snapshot()
    del data["jobs"][1]["partition"]
    path = write(tmp_path, "snap.json", data)
    code, out, err = run_cli(["plan", "--snapshot", str(path), "--config", "/dev/null"], capsys)
    assert code == 2
    assert out == ""
    assert err == f"slurm-drf: snapshot: {path}: job 1240: missing key 'partition'\n"


def test_invalid_json_names_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "snap.json", '{"format": "slurm-drf-snapshot/1",\n "nodes": [}')
    code, _, err = run_cli(["plan", "--snapshot", str(path)], capsys)
    assert code == 2
    assert err.startswith(f"slurm-drf: snapshot: {path}:2:") and "invalid JSON" in err
    assert len(err.splitlines()) == 1


def test_missing_snapshot_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["plan", "--snapshot", str(tmp_path / "nope.json")], capsys)
    assert code == 2
    assert "nope.json: cannot read" in err


def test_check_config_good_and_bad(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path, "good.yaml", "mode: site_factor\naccounts:\n  physics: {weight: 2}\n")
    code, out, _ = run_cli(["check-config", str(good)], capsys)
    assert code == 0 and "OK" in out
    bad = write(tmp_path, "bad.yaml", "mode: nice\naccounts:\n  physics: {weight: -1}\n")
    code, _, err = run_cli(["check-config", str(bad)], capsys)
    assert code == 2
    assert err == f"slurm-drf: config: {bad}:3: accounts.physics.weight: -1 is not > 0\n"


def test_plan_uses_config_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write(tmp_path, "c.yaml", "accounts:\n  chemistry: {weight: 0.5}\n  physics: {weight: 4}\n")
    path = write(tmp_path, "snap.json", good_snapshot())
    code, out, _ = run_cli(["plan", "--snapshot", str(path), "--config", str(config), "--format", "json"], capsys)
    assert code == 0
    plan = json.loads(out)
    physics = next(a for a in plan["accounts"] if a["account"] == "physics")
    assert physics["weight"] == 4.0 and physics["weighted_share"] == 0.0625


def test_captured_fixture_snapshot_plans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The engine on the real 22.05 capture, through the CLI parser."""
    from slurm_drf.slurm.parse.jobs import parse_squeue_json
    from slurm_drf.slurm.parse.nodes import parse_sinfo_json

    squeue = json.loads((FIXTURES / "slurm-22.05" / "squeue.json").read_text())
    sinfo = json.loads((FIXTURES / "slurm-22.05" / "sinfo.json").read_text())
    from slurm_drf.model.codec import render_snapshot as render
    from slurm_drf.model.types import Snapshot

    snap = Snapshot("drftest", "2026-11-30T02:00:00Z", tuple(parse_sinfo_json(sinfo)), tuple(parse_squeue_json(squeue)))
    path = write(tmp_path, "snap.json", render(snap))
    code, out, _ = run_cli(["plan", "--snapshot", str(path), "--format", "json", "--config", "/dev/null"], capsys)
    assert code == 0
    plan = json.loads(out)
    skipped = {j["job_id"]: j["reason"] for j in plan["jobs"] if j["action"] == "skip"}
    assert skipped == {"19": "held", "20": "held"}
    ordered = [j["account"] for j in plan["jobs"] if j["order"] is not None]
    # memteam holds 400 of 500 GiB and gputeam all 8 GPUs: both at high shares; cputeam has nothing pending.
    assert sorted(ordered) == ["gputeam", "gputeam", "memteam"]


def test_replacing_the_jobs_of_a_planned_snapshot_plans_the_new_jobs() -> None:
    from dataclasses import replace

    from slurm_drf.config.settings import Config
    from slurm_drf.policy.plan import compute_plan

    snapshot = parse_snapshot(good_snapshot())
    assert len(compute_plan(snapshot, Config()).jobs) == 2
    fewer = replace(snapshot, jobs=tuple(snapshot.jobs)[:2])
    assert [j.job_id for j in compute_plan(fewer, Config()).jobs] == ["1240"]


def test_a_long_list_of_job_ids_is_cut_to_its_head_and_a_count() -> None:
    ids = [str(n) for n in range(1000, 1000 + 50_000)]
    assert list_ids(ids[:3]) == "1000, 1001, 1002"
    assert list_ids(ids[:20]) == ", ".join(ids[:20])
    line = list_ids(ids)
    assert line == ", ".join(ids[:20]) + " and 49980 more"
    assert len(line) < 200
