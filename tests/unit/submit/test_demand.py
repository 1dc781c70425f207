"""A job's demand from its description (corpus.json): what slurmctld reports for the pending job, or nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurm_drf.slurm.parse.jobs import parse_squeue_record
from tests.unit.submit.lua import HERE, LuaValue, answers, run

CORPUS: dict[str, Any] = json.loads((HERE / "corpus.json").read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = CORPUS["cases"]


def _resources(case: dict[str, Any]) -> list[str]:
    resources: list[str] = case.get("resources", CORPUS["resources"])
    return resources


def test_the_corpus_names_each_case_once_with_its_arguments_and_an_answer() -> None:
    names = [case["name"] for case in CASES]
    assert len(names) == len(set(names))
    for case in CASES:
        assert case["sbatch"] is not None and case["release"] in ("22.05", "24.11"), case["name"]
        assert (case["demand"] is None) == ("reason" in case), case["name"]
        if case["demand"] is not None:
            assert sorted(case["demand"]) == sorted(_resources(case)), case["name"]


@pytest.mark.parametrize("case", [c for c in CASES if "squeue" in c], ids=lambda c: str(c["name"]))
def test_the_expected_demand_is_what_the_daemon_reads_of_the_pending_job(case: dict[str, Any]) -> None:
    record = {"job_id": 7, "job_state": "PENDING", "account": "physics", **case["squeue"]}
    job = parse_squeue_record(record)
    assert job is not None
    assert {r: job.tres.get(r, 0) for r in _resources(case)} == case["demand"]
    assert job.array_tasks == case.get("array_tasks", 1)


def test_every_case_of_the_corpus_gets_its_demand_or_is_left_alone(lua: str, tmp_path: Path) -> None:
    steps: list[LuaValue] = []
    for index, case in enumerate(CASES):
        demand: LuaValue = {
            "op": "demand",
            "id": f"d{index}",
            "job": case["job_desc"],
            "parts": CORPUS["part_list"],
            "resources": _resources(case),
            "options": case.get("options", {}),
        }
        array: LuaValue = {"op": "array", "id": f"a{index}", "inx": case["job_desc"].get("array_inx", "")}
        steps += [demand, array]
    got = answers(run(lua, {"steps": steps}, tmp_path))
    for index, case in enumerate(CASES):
        line = got[f"d{index}"]
        if case["demand"] is None:
            assert line[0] == "nil" and case["reason"] in line[1], (case["name"], line)
        else:
            expected = [str(case["demand"][r]) for r in _resources(case)]
            assert line == ["ok", *expected], case["name"]
        assert got[f"a{index}"] == ["ok", str(case.get("array_tasks", 1))], case["name"]


@pytest.mark.parametrize(
    ("array", "tasks"),
    [
        ("", "1"),
        ("7", "1"),
        ("0-9", "10"),
        ("0-99%4", "100"),
        ("1,3,5-7", "5"),
        ("0-15:4", "4"),
        ("1-3,2-4", "4"),
        ("0-3999999", "4000000"),
        ("0-1999999,1000000-2999999", "3000000"),
        ("0-9:2,0-3", "7"),
        ("0-20:5,3-4,100,15", "8"),
        ("0-99999:2,1-99999:2", "100000"),
    ],
)
def test_an_array_counts_its_distinct_indices(lua: str, tmp_path: Path, array: str, tasks: str) -> None:
    got = answers(run(lua, {"steps": [{"op": "array", "id": "a", "inx": array}]}, tmp_path))
    assert got["a"] == ["ok", tasks]


@pytest.mark.parametrize("array", ["x", "1-", "3-1", "0-9:0", "1,,2", "0-9%", "0-3999999:2"])
def test_an_array_it_cannot_count_is_refused(lua: str, tmp_path: Path, array: str) -> None:
    got = answers(run(lua, {"steps": [{"op": "array", "id": "a", "inx": array}]}, tmp_path))
    assert got["a"][0] == "nil"


def test_memory_per_cpu_only_in_pn_min_memory_is_refused_per_node_is_read(lua: str, tmp_path: Path) -> None:
    """A release that hid min_mem_per_cpu/min_mem_per_node: the flag bit makes pn_min_memory inexact."""
    parts = CORPUS["part_list"]
    steps: list[LuaValue] = [
        {
            "op": "demand",
            "id": "cpu",
            "job": {"min_cpus": 2, "pn_min_memory": 2**63 + 1000},
            "parts": parts,
            "resources": ["mem"],
        },
        {
            "op": "demand",
            "id": "node",
            "job": {"min_cpus": 2, "pn_min_memory": 3000},
            "parts": parts,
            "resources": ["mem"],
        },
    ]
    got = answers(run(lua, {"steps": steps}, tmp_path))
    assert got["cpu"][0] == "nil" and "pn_min_memory" in got["cpu"][1]
    assert got["node"] == ["ok", "3000"]


def test_a_resource_no_description_settles_is_refused(lua: str, tmp_path: Path) -> None:
    step: LuaValue = {
        "op": "demand",
        "id": "d",
        "job": {"min_cpus": 1},
        "parts": CORPUS["part_list"],
        "resources": ["cpu", "license/matlab"],
    }
    got = answers(run(lua, {"steps": [step]}, tmp_path))
    assert got["d"][0] == "nil" and "license/matlab" in got["d"][1]
