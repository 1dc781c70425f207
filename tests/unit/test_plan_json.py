"""The plan JSON as the CLI and the report files write it: the fast renderer against the plain one.

`render_plan_json_bytes` builds the job entries from the plan's columns;
it must give exactly the bytes `orjson.dumps(render_plan_json(plan))`
gives, indented or compact, whatever the names, modes and skipped jobs.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import orjson
import pytest
import yaml
from builders import job, node, snapshot

import slurm_drf.config.load as load_module
from slurm_drf.config.load import resolve_config
from slurm_drf.config.settings import Config, Mode, default_config
from slurm_drf.config.validate import SCHEMA_RESOURCE, load_schema
from slurm_drf.errors import ConfigError
from slurm_drf.model.types import Snapshot
from slurm_drf.policy.plan import Plan, PlanJobs, compute_plan
from slurm_drf.trail.plan_output import _cells, render_plan_json, render_plan_json_bytes
from tests.helpers import load_report_plan

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
