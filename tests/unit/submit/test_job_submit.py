"""The standalone job_submit.lua: every submission and update accepted, whatever happens inside."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.unit.submit.lua import MODULE, NICE_OFFSET, SCRIPT, LuaValue, answers, logs, run
from tests.unit.submit.tables import PARTS, WRITTEN, gpu_job, pool, table, text

NOW = int(WRITTEN) + 10


def _table(tmp_path: Path) -> Path:
    path = tmp_path / "placement.txt"
    path.write_text(text(table(pool(levels=(0.5,), values=(-500,)))), encoding="ascii")
    return path


def test_a_submission_is_placed_and_accepted_an_update_passes_untouched(lua: str, tmp_path: Path) -> None:
    steps: list[LuaValue] = [
        {"op": "submit", "id": "submit", "job": gpu_job("physics"), "parts": PARTS},
        {"op": "modify", "id": "modify", "job": gpu_job("physics", nice=NICE_OFFSET - 5), "parts": PARTS},
        {"op": "submit", "id": "own nice", "job": gpu_job("physics", nice=NICE_OFFSET + 3), "parts": PARTS},
    ]
    case: dict[str, LuaValue] = {"script": str(SCRIPT), "time": NOW, "configure": {"table": str(_table(tmp_path))}}
    lines = run(lua, {**case, "steps": steps}, tmp_path)
    got = answers(lines)
    assert got["submit"] == ["0", f"nice={NICE_OFFSET - 1_000_000 + 10}"]
    assert got["modify"] == ["0", "unchanged"]
    assert got["own nice"] == ["0", "unchanged"]
    assert logs(lines) == []


def test_an_error_inside_is_caught_logged_and_the_job_accepted(lua: str, tmp_path: Path) -> None:
    steps: list[LuaValue] = [
        {"op": "submit", "id": f"raises on {field}", "job": gpu_job(), "parts": PARTS, "raise_on": field}
        for field in ("nice", "account", "min_cpus", "tres_per_job")
    ]
    steps.append({"op": "place", "id": "place", "job": gpu_job(), "parts": PARTS, "raise_on": "partition"})
    case: dict[str, LuaValue] = {"script": str(SCRIPT), "time": NOW, "configure": {"table": str(_table(tmp_path))}}
    lines = run(lua, {**case, "steps": steps}, tmp_path)
    got = answers(lines)
    for field in ("nice", "account", "min_cpus", "tres_per_job"):
        assert got[f"raises on {field}"] == ["0", "unchanged"]
    assert got["place"] == ["-", "unchanged"]  # place itself returns nothing and never raises
    ((level, message),) = logs(lines)  # one line a minute
    assert level == "error" and "internal error" in message and "job_desc.nice raised" in message


def test_without_its_module_the_script_still_accepts_everything(lua: str, tmp_path: Path) -> None:
    for module in (None, "error('a broken install')\n", "return 42\n"):
        directory = tmp_path / f"etc-{len(module or '')}"
        directory.mkdir()
        script = directory / "job_submit.lua"
        shutil.copy(SCRIPT, script)
        if module is not None:
            (directory / MODULE.name).write_text(module, encoding="ascii")
        steps: list[LuaValue] = [
            {"op": "submit", "id": "submit", "job": gpu_job(), "parts": PARTS},
            {"op": "modify", "id": "modify", "job": gpu_job(), "parts": PARTS},
        ]
        lines = run(lua, {"module_dir": str(directory), "script": str(script), "steps": steps}, tmp_path)
        got = answers(lines)
        assert got["submit"] == ["0", "unchanged"] and got["modify"] == ["0", "unchanged"]
        ((level, message),) = logs(lines)
        assert level == "error" and "cannot load slurm_drf_submit.lua" in message, module


def test_the_module_defines_no_global_and_the_script_only_its_two_functions(lua: str, tmp_path: Path) -> None:
    module = answers(run(lua, {"steps": []}, tmp_path))
    script = answers(run(lua, {"script": str(SCRIPT), "steps": []}, tmp_path))
    assert module["globals"] == []
    assert script["globals"] == ["slurm_job_modify", "slurm_job_submit"]


def test_the_scripts_two_settings_lines_reach_the_module(lua: str, tmp_path: Path) -> None:
    """SETTINGS (the table) and MEMORY (slurm.conf's global memory defaults), as a site edits them."""
    text = SCRIPT.read_text(encoding="ascii")
    table_line = 'local SETTINGS = { table = "/var/lib/slurm-drf/placement.txt" }'
    assert text.count(table_line) == 1 and text.count("local MEMORY = {}") == 1
    text = text.replace(table_line, f'local SETTINGS = {{ table = "{_table(tmp_path)}" }}')
    text = text.replace("local MEMORY = {}", "local MEMORY = { def_mem_per_cpu = 1000 }")
    script = tmp_path / "job_submit.lua"
    script.write_text(text, encoding="ascii")
    parts: dict[str, LuaValue] = {"gpu": {"flag_default": 1, "def_mem_per_node": 0, "max_share": 1}}
    job = gpu_job("physics")
    del job["min_mem_per_node"]  # no --mem: the global DefMemPerCPU counts
    steps: list[LuaValue] = [{"op": "submit", "id": "submit", "job": job, "parts": parts}]
    lines = run(lua, {"script": str(script), "time": NOW, "steps": steps}, tmp_path)
    assert answers(lines)["submit"] == ["0", f"nice={NICE_OFFSET - 1_000_000 + 10}"] and logs(lines) == []
