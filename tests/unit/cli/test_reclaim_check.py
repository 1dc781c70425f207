"""check-config's account of what `reclaim:` needs of Slurm (docs/operations.md, Guarantees and reclaim).

`scontrol show config` is canned here, in 22.05's layout (`Key = value`,
SlurmUser as `name(uid)`); the 24.11 fixture prints neither JobRequeue nor SlurmUser.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from slurm_drf.cli import band, reclaim_check
from slurm_drf.cli import main as cli_main
from slurm_drf.cli.reclaim_check import build_admin_level_argv, parse_admin_level, reclaim_lines
from slurm_drf.config.load import load_config
from slurm_drf.config.settings import Config
from slurm_drf.errors import DrfError, SlurmReadError
from slurm_drf.slurm.parse.scontrol import RequeueSettings, parse_priority_weights, parse_requeue_settings
from tests.paths import FIXTURES

# As 22.05 prints them (a few of its lines), Slurm's defaults for requeue and preemption.
SHOW_CONFIG = """\
Configuration data as of 2026-12-01T10:00:00
ClusterName             = drftest
JobRequeue              = 1
MaxBatchRequeue         = 5
PreemptMode             = OFF
PreemptType             = preempt/none
PreemptExemptTime       = 00:00:00
PriorityWeightAge       = 100
PriorityWeightFairShare = 1000
SlurmUser               = slurm(64030)
SlurmdUser              = root(0)
"""

OPERATOR = ("drfsvc", 1001)


def _show_config(**changed: str) -> str:
    lines = []
    for line in SHOW_CONFIG.splitlines():
        key = line.split("=")[0].strip()
        lines.append(f"{key:<23} = {changed[key]}" if key in changed else line)
    return "\n".join(lines) + "\n"


def _config(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    path.chmod(0o600)
    return load_config(str(path), private=True)


RECLAIM = "pools:\n  - {name: gpu, partitions: [gpu]}\nreclaim:\n  pools: [gpu]\n"


def _level(level: str | None) -> Any:
    def read(user: str) -> str | None:
        assert user == "drfsvc"
        return level

    return read


def _never(user: str) -> str | None:
    raise AssertionError("sacctmgr asked")


def test_the_settings_are_read_from_show_config() -> None:
    assert parse_requeue_settings(SHOW_CONFIG) == RequeueSettings(
        job_requeue=True, preempt_type="preempt/none", preempt_mode="OFF", slurm_user="slurm", slurm_uid=64030
    )
    assert parse_requeue_settings(_show_config(JobRequeue="0")).job_requeue is False
    # The weights are read from the same text, as before.
    assert parse_priority_weights(SHOW_CONFIG) == {"PriorityWeightAge": 100, "PriorityWeightFairShare": 1000}


def test_a_show_config_without_the_keys_gives_nothing_to_say(tmp_path: Path) -> None:
    text = (FIXTURES / "slurm-24.11" / "scontrol-show-config.txt").read_text()
    settings = parse_requeue_settings(text)
    assert settings.job_requeue is None and settings.slurm_user is None and settings.preempt_type == "preempt/none"
    assert reclaim_lines(_config(tmp_path, RECLAIM), text, ("root", 0), _never) == []


def test_slurms_defaults_run_as_slurmuser_or_root_say_nothing(tmp_path: Path) -> None:
    config = _config(tmp_path, RECLAIM)
    assert reclaim_lines(config, SHOW_CONFIG, ("slurm", 64030), _never) == []
    assert reclaim_lines(config, SHOW_CONFIG, ("root", 0), _never) == []
    assert reclaim_lines(config, SHOW_CONFIG, OPERATOR, _level("Operator")) == []
    assert reclaim_lines(config, SHOW_CONFIG, OPERATOR, _level("Administrator")) == []


def test_without_reclaim_nothing_is_checked(tmp_path: Path) -> None:
    config = _config(tmp_path, "mode: nice\n")
    bad = _show_config(JobRequeue="0", PreemptType="preempt/qos", PreemptMode="REQUEUE")
    assert reclaim_lines(config, bad, OPERATOR, _never) == []
    assert reclaim_lines(config, SlurmReadError("down"), OPERATOR, _never) == []


def test_job_requeue_0_with_way_requeue_is_a_warning_naming_the_key(tmp_path: Path) -> None:
    config = _config(tmp_path, RECLAIM)
    lines = reclaim_lines(config, _show_config(JobRequeue="0"), ("root", 0), _never)
    assert lines == [
        f"warning: {config.source_path}:3: reclaim: slurm.conf JobRequeue=0: a batch job may be requeued only if "
        "submitted with --requeue, so reclaim can requeue only those, and frees nothing in a pool where none runs; "
        "add JobRequeue=1 to slurm.conf (then scontrol reconfigure; jobs already submitted keep theirs), "
        "or set reclaim.way: cancel"
    ]


def test_job_requeue_0_with_way_cancel_is_a_note_on_the_work_lost(tmp_path: Path) -> None:
    config = _config(tmp_path, RECLAIM + "  after: 10m\n  way: cancel\n")
    lines = reclaim_lines(config, _show_config(JobRequeue="0"), ("root", 0), _never)
    assert lines == [
        f"note: {config.source_path}:6: reclaim.way: cancel with slurm.conf JobRequeue=0: every victim not "
        "submitted with --requeue is cancelled, its work lost for good; add JobRequeue=1 to slurm.conf "
        "(then scontrol reconfigure; jobs already submitted keep theirs) to requeue them instead"
    ]


@pytest.mark.parametrize(
    ("kind", "mode", "within"),
    [("preempt/qos", "REQUEUE,WITHIN", True), ("preempt/partition_prio", "CANCEL", False)],
)
def test_slurms_own_preemption_is_a_warning(tmp_path: Path, kind: str, mode: str, within: bool) -> None:
    config = _config(tmp_path, RECLAIM)
    (line,) = reclaim_lines(config, _show_config(PreemptType=kind, PreemptMode=mode), ("root", 0), _never)
    assert line.startswith(
        f"warning: {config.source_path}:3: reclaim: slurm.conf PreemptType={kind} (PreemptMode={mode}): "
        "Slurm's own preemption requeues, cancels or suspends running jobs too"
    )
    assert line.endswith(
        "set PreemptType=preempt/none in slurm.conf, or keep Slurm's preemption out of the reclaim pools (gpu)"
    )
    assert ("every nice the daemon writes can become an order to preempt" in line) is within


def test_a_user_slurmctld_would_refuse_is_a_warning_with_the_command(tmp_path: Path) -> None:
    config = _config(tmp_path, RECLAIM)
    (line,) = reclaim_lines(config, SHOW_CONFIG, OPERATOR, _level("None"))
    assert line == (
        f"warning: {config.source_path}:3: reclaim: user drfsvc is not root, SlurmUser (slurm) or an Operator "
        "(AdminLevel None): slurmctld refuses its scontrol requeue of other users' jobs; run: sacctmgr modify "
        "user name=drfsvc set adminlevel=Operator (check-config checks the user running it: run it as the "
        "daemon's user)"
    )
    cancel = _config(tmp_path, RECLAIM + "  way: cancel\n")
    (line,) = reclaim_lines(cancel, SHOW_CONFIG, OPERATOR, _level(None))
    assert "(not a user in Slurm's database)" in line and "its scontrol requeue and scancel of" in line


def test_an_admin_level_that_cannot_be_read_is_a_note(tmp_path: Path) -> None:
    def failing(user: str) -> str | None:
        raise SlurmReadError("sacctmgr: error: slurmdbd: Connection refused")

    config = _config(tmp_path, RECLAIM)
    assert reclaim_lines(config, SHOW_CONFIG, OPERATOR, failing) == [
        f"note: {config.source_path}:3: reclaim: user drfsvc's AdminLevel unknown (sacctmgr: error: slurmdbd: "
        "Connection refused); to scontrol requeue other users' jobs it must be root, SlurmUser (slurm), or "
        "AdminLevel Operator"
    ]


def test_sacctmgr_is_asked_for_the_level_alone() -> None:
    assert build_admin_level_argv("drfsvc") == [
        "sacctmgr", "--noheader", "--parsable2", "show", "user", "name=drfsvc", "format=AdminLevel",
    ]  # fmt: skip
    assert parse_admin_level("Operator\n") == "Operator"
    assert parse_admin_level("") is None


def _fake_slurm(monkeypatch: pytest.MonkeyPatch, show_config: str | None, level: str = "None") -> list[list[str]]:
    """scontrol and sacctmgr as check-config runs them; the argv of every call."""
    calls: list[list[str]] = []

    def run(argv: Sequence[str], timeout: float, **kwargs: Any) -> str:
        calls.append(list(argv))
        if argv[0] == "sacctmgr":
            return level + "\n"
        if show_config is None:
            raise SlurmReadError("scontrol show config: exit status 1: Unable to contact slurm controller")
        return show_config

    monkeypatch.setattr(band, "run_command", run)
    monkeypatch.setattr(band, "refused", lambda: None)  # whatever slurm.conf this machine has
    monkeypatch.setattr(reclaim_check, "run_command", run)
    monkeypatch.setattr(cli_main, "_this_user", lambda: OPERATOR)
    return calls


def test_check_config_reads_show_config_once_and_prints_the_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _fake_slurm(monkeypatch, _show_config(JobRequeue="0"), level="Operator")
    config = _config(tmp_path, RECLAIM)
    assert cli_main.main(["check-config", str(config.source_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(": OK (mode nice, 0 weighted account(s), resources cpu, mem, gres/gpu)")
    assert out[1].startswith("exact band:")
    assert out[-1].startswith(f"warning: {config.source_path}:3: reclaim: slurm.conf JobRequeue=0:")
    assert not [line for line in out if "AdminLevel" in line]
    assert calls == [["scontrol", "show", "config"], build_admin_level_argv("drfsvc")]


def test_check_config_without_slurm_says_so_and_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _fake_slurm(monkeypatch, None)
    config = _config(tmp_path, RECLAIM)
    assert cli_main.main(["check-config", str(config.source_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("note: Slurm's weights unknown (scontrol show config: exit status 1:")
    assert out[2:] == [
        f"note: {config.source_path}:3: reclaim: slurm.conf not checked for what reclaim needs (JobRequeue, "
        "PreemptType, this user's right to requeue): scontrol show config failed"
    ]
    assert calls == [["scontrol", "show", "config"]]


def test_check_config_without_reclaim_prints_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _fake_slurm(monkeypatch, _show_config(JobRequeue="0", PreemptType="preempt/qos"))
    config = _config(tmp_path, "mode: nice\n")
    assert cli_main.main(["check-config", str(config.source_path)]) == 0
    out = capsys.readouterr().out
    assert "reclaim" not in out and "warning" not in out
    assert calls == [["scontrol", "show", "config"]]


def test_check_config_on_a_snapshot_says_slurm_conf_was_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _fake_slurm(monkeypatch, SHOW_CONFIG)
    config = _config(tmp_path, RECLAIM)
    snapshot = tmp_path / "snap.json"
    snapshot.write_text(
        json.dumps(
            {
                "format": "slurm-drf-snapshot/1",
                "cluster": "c",
                "taken_at": "2026-12-01T00:00:00Z",
                "priority_weights": {"PriorityWeightAge": 100},
                "scheduler_parameters": {},
                "nodes": [],
                "jobs": [],
            }
        )
    )
    assert cli_main.main(["check-config", str(config.source_path), "--snapshot", str(snapshot)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (
        f"note: {config.source_path}:3: reclaim: slurm.conf not checked for reclaim (a snapshot holds no "
        "JobRequeue or PreemptType); run check-config without --snapshot where scontrol reaches slurmctld"
    )
    assert calls == []


def test_a_failed_read_is_passed_on_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_slurm(monkeypatch, None)
    assert isinstance(band.read_slurm_config(), DrfError)
