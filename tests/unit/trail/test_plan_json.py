"""The plan JSON as the CLI and the report files write it: the fast renderer against the plain one.

Also what else makes `plan --format json` cheap: a run without a config
file does not import the validator, and the console script ends a `plan`
process without tearing its heap down.

`render_plan_json_bytes` builds the job entries from the plan's columns;
it must give exactly the bytes `orjson.dumps(render_plan_json(plan))`
gives, indented or compact, whatever the names, modes and skipped jobs.
"""

from __future__ import annotations

import ast
import dataclasses
import gc
import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import orjson
import pytest
import yaml

import slurm_drf.cli.main as cli_main
import slurm_drf.cli.options as cli_options
import slurm_drf.config.load as load_module
from slurm_drf.config.load import resolve_config
from slurm_drf.config.settings import Config, Mode, default_config
from slurm_drf.config.validate import SCHEMA_RESOURCE, load_schema
from slurm_drf.errors import ConfigError
from slurm_drf.model.snapshot_file import SnapshotFileSource, render_snapshot_bytes
from slurm_drf.model.types import Snapshot
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.policy.plan_columns import PlanJobs
from slurm_drf.trail.json_rows import cells as _cells
from slurm_drf.trail.plan_output import render_plan_json, render_plan_json_bytes
from tests.helpers import load_report_plan
from tests.unit.builders import job, node, snapshot

HOSTILE_NAMES = (
    "plain",
    'quote"inside',
    "back\\slash",
    "new\nline",
    "tab\tand\rreturn",
    "nul\x00byte",
    "comma,\n  and indent",
    "été",
    "line\u2028separator",
    "emoji\U0001f600",
    "",
)


def _reference(plan: Plan, *, indent: bool) -> bytes:
    option = orjson.OPT_APPEND_NEWLINE | (orjson.OPT_INDENT_2 if indent else 0)
    return orjson.dumps(render_plan_json(plan), option=option)


def _hostile_snapshot() -> Snapshot:
    jobs = [job("physics", "RUNNING", cpu=4, mem=1000, gpu=1)]
    for index, name in enumerate(HOSTILE_NAMES):
        jobs.append(job(name or "empty-user", user=name, priority=1000 + index, cpu=1 + index, mem=100))
    jobs.append(job("physics", held=True, cpu=1))
    jobs.append(job("physics", partition="elsewhere", cpu=1))
    jobs.append(job("chemistry", array_tasks=5, cpu=2, mem=10))
    return snapshot([node("n1", ("main",), cpu=64, mem=512000, gpu=8)], jobs)


@pytest.mark.parametrize("mode", ["nice", "site_factor", "priority"])
@pytest.mark.parametrize("indent", [True, False])
def test_bytes_equal_orjson_of_the_plan_data(mode: Mode, indent: bool) -> None:
    plan = compute_plan(_hostile_snapshot(), Config(mode=mode, partitions=("main",)))
    assert isinstance(plan.jobs, PlanJobs)
    assert {"skip", "set"} <= set(plan.column("action"))  # skipped jobs: None in order, level, value
    rendered = render_plan_json_bytes(plan, indent=indent)
    assert rendered == _reference(plan, indent=indent)
    data = json.loads(rendered)
    assert all(mode in entry and "value" not in entry for entry in data["jobs"])
    assert {entry["user"] for entry in data["jobs"]} >= set(HOSTILE_NAMES)


@pytest.mark.parametrize("indent", [True, False])
def test_bytes_equal_for_the_report_fixture_and_for_plain_job_rows(indent: bool) -> None:
    plan, _ = load_report_plan()
    assert render_plan_json_bytes(plan, indent=indent) == _reference(plan, indent=indent)
    # A plan whose jobs are JobPlan objects, not columns (as a test or a caller may build one).
    rows = dataclasses.replace(plan, jobs=tuple(plan.jobs))
    assert not isinstance(rows.jobs, PlanJobs)
    assert render_plan_json_bytes(rows, indent=indent) == _reference(plan, indent=indent)


@pytest.mark.parametrize("indent", [True, False])
def test_a_plan_without_jobs_or_with_warnings(indent: bool) -> None:
    empty = compute_plan(snapshot([node("n1", ("main",), cpu=8, mem=1000)], []), default_config())
    assert render_plan_json(empty)["jobs"] == []
    assert render_plan_json_bytes(empty, indent=indent) == _reference(empty, indent=indent)
    warned = dataclasses.replace(empty, warnings=("one", 'two "quoted"'))
    assert render_plan_json_bytes(warned, indent=indent) == _reference(warned, indent=indent)


@pytest.mark.parametrize("indent", [True, False])
def test_one_very_long_name_takes_the_plain_way_with_the_same_bytes(indent: bool) -> None:
    # Padding every row to a 100,000-character user name would cost far more
    # memory than the text: the renderer falls back to one dict per job.
    jobs = [job(f"a{i % 7}", user="x" * 100_000 if i == 3 else f"u{i}", cpu=1, mem=1) for i in range(300)]
    plan = compute_plan(snapshot([node("n1", ("main",), cpu=64, mem=512000)], jobs), default_config())
    assert render_plan_json_bytes(plan, indent=indent) == _reference(plan, indent=indent)


def test_cells_cut_one_value_a_row_and_refuse_nested_values() -> None:
    cut = _cells(["a", None, 1.5, True, -12])
    assert cut is not None
    cells, lengths = cut
    assert [bytes(row[:n]) for row, n in zip(cells, lengths, strict=True)] == [
        b'"a"',
        b"null",
        b"1.5",
        b"true",
        b"-12",
    ]
    assert cells.shape == (5, 4) and not cells[0, 3] and not cells[2, 3]
    assert _cells([[1, 2], 3]) is None
    assert _cells([{"a": 1}]) is None


# --- the config: defaults without the validator, a given file still validated ------------


def test_loading_module_leaves_the_validator_to_the_functions_that_use_it() -> None:
    tree = ast.parse(Path(load_module.__file__).read_text(encoding="utf-8"))
    top_level = {
        alias.name if isinstance(statement, ast.Import) else statement.module
        for statement in tree.body
        if isinstance(statement, ast.Import | ast.ImportFrom)
        for alias in statement.names
    }
    heavy = {"yaml", "jsonschema", "slurm_drf.config.validate", "slurm_drf.config.checks", "slurm_drf.config.yaml_tree"}
    assert not top_level & heavy


def test_no_config_file_gives_the_defaults(tmp_path: Path) -> None:
    assert resolve_config(None, {}, default_path=str(tmp_path / "missing.yaml")) == default_config()


def test_a_given_config_file_is_still_validated(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("mode: nicer\naccounts:\n  physics: {weight: -1}\n")
    with pytest.raises(ConfigError) as caught:
        resolve_config(str(bad), {}, default_path=str(tmp_path / "missing.yaml"))
    message = str(caught.value)
    assert f"{bad}:1: mode: 'nicer' is not one of nice, site_factor, priority" in message
    assert f"{bad}:3: accounts.physics.weight:" in message


def test_the_schema_reads_the_same_with_either_yaml_loader() -> None:
    text = (Path(load_module.__file__).parent / SCHEMA_RESOURCE).read_text(encoding="utf-8")
    assert load_schema() == yaml.safe_load(text)


# --- the console script: `plan` ends with os._exit, other verbs exit normally -----------


class _Exited(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@pytest.fixture
def console(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """`run` as the console script runs it, with os._exit and logging.shutdown caught; gc restored."""
    calls: list[str] = []

    def fake_exit(code: int) -> NoReturn:
        raise _Exited(code)

    monkeypatch.setattr(os, "_exit", fake_exit)
    monkeypatch.setattr(logging, "shutdown", lambda: calls.append("logging.shutdown"))
    monkeypatch.setattr(cli_options, "_left_to_exit", None)
    try:
        yield calls
    finally:
        gc.enable()


def _snapshot_file(tmp_path: Path) -> Path:
    path = tmp_path / "snap.json"
    path.write_bytes(render_snapshot_bytes(_hostile_snapshot()))
    return path


def test_run_plan_prints_what_main_prints_then_exits_without_teardown(
    tmp_path: Path, console: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _snapshot_file(tmp_path)
    argv = ["plan", "--snapshot", str(path), "--format", "json", "--config", "/dev/null"]
    assert cli_main.main(argv) == 0
    expected = capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["slurm-drf", *argv])
    with pytest.raises(_Exited) as exited:
        cli_main.run()
    assert exited.value.code == 0
    assert capsys.readouterr().out == expected
    assert console == ["logging.shutdown"]
    assert not gc.isenabled()
    # What the verb made is left to the exit, the decoded JSON included.
    kept = cli_options.left_to_exit()
    assert kept is not None
    sources = [item for item in kept if isinstance(item, SnapshotFileSource)]
    assert len(sources) == 1 and isinstance(sources[0].decoded, dict)


@pytest.mark.parametrize(
    "verb", [["report", "--format", "json"], ["report", "--color", "never"], ["explain", "1"], ["explain", "999999"]]
)
def test_run_report_and_explain_print_what_main_prints_then_exit_without_teardown(
    verb: list[str],
    tmp_path: Path,
    console: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = _snapshot_file(tmp_path)
    argv = [*verb, "--snapshot", str(path), "--config", "/dev/null"]
    code = cli_main.main(argv)
    expected = capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["slurm-drf", *argv])
    with pytest.raises(_Exited) as exited:
        cli_main.run()
    assert exited.value.code == code  # 0, or 2 for a job the snapshot does not hold
    assert capsys.readouterr() == expected
    assert console == ["logging.shutdown"] and not gc.isenabled()
    kept = cli_options.left_to_exit()
    assert kept is not None
    sources = [item for item in kept if isinstance(item, SnapshotFileSource)]
    assert len(sources) == 1 and isinstance(sources[0].decoded, dict)


def test_run_plan_keeps_the_exit_code_of_bad_input(
    tmp_path: Path, console: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["slurm-drf", "plan", "--snapshot", str(tmp_path / "missing.json")])
    with pytest.raises(_Exited) as exited:
        cli_main.run()
    assert exited.value.code == 2
    assert "missing.json: cannot read" in capsys.readouterr().err


def test_run_other_verbs_exit_normally(
    tmp_path: Path, console: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("mode: nice\n")
    monkeypatch.setattr(sys, "argv", ["slurm-drf", "check-config", str(config)])
    with pytest.raises(SystemExit) as exited:
        cli_main.run()
    assert exited.value.code == 0
    assert "OK" in capsys.readouterr().out
    assert console == [] and gc.isenabled() and cli_options.left_to_exit() is None


def test_a_source_frees_its_decoded_json_unless_asked(tmp_path: Path) -> None:
    path = _snapshot_file(tmp_path)
    assert SnapshotFileSource(path).fetch_snapshot().jobs
    source = SnapshotFileSource(path)
    source.fetch_snapshot()
    assert source.decoded is None
