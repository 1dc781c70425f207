"""Runs the job_submit/lua module through Debian's Lua interpreters (harness.lua) and reads its lines.

A case is a dict the harness reads as a Lua table constructor; each step prints
one tab-separated line (`ID ok ...`, `ID nil REASON`, `ID RET WRITES`), and
each log line the module writes prints `log LEVEL MESSAGE` where it happens.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeAlias

import pytest

import slurm_drf

INTERPRETERS = ("lua5.1", "lua5.2", "lua5.3", "lua5.4")
HERE = Path(__file__).resolve().parent
HARNESS = HERE / "harness.lua"
DATA = Path(slurm_drf.__file__).resolve().parent / "data"
MODULE = DATA / "slurm_drf_submit.lua"
SCRIPT = DATA / "job_submit.lua"

NO_VAL = 0xFFFFFFFE
NO_VAL16 = 0xFFFE
NICE_OFFSET = 0x80000000

LuaValue: TypeAlias = "bool | int | float | str | Sequence[LuaValue] | Mapping[str, LuaValue] | None"
Line: TypeAlias = list[str]


def interpreter(name: str) -> str:
    """The interpreter's path; a missing one fails under SLURM_DRF_REQUIRE_SLURM=1 (CI), else skips."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (apt-get install {name})"
        if os.environ.get("SLURM_DRF_REQUIRE_SLURM") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


def to_lua(value: LuaValue) -> str:
    """`value` as a Lua expression; integers past 2^53 as the doubles the plugin would push."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if abs(value) < 2**53 else repr(float(value))
    if isinstance(value, float):
        if math.isnan(value):
            return "(0/0)"
        if math.isinf(value):
            return "(1/0)" if value > 0 else "(-1/0)"
        return repr(value)
    if isinstance(value, str):
        return _lua_string(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"[{_lua_string(k)}] = {to_lua(v)}" for k, v in value.items()) + "}"
    return "{" + ", ".join(to_lua(v) for v in value) + "}"


def _lua_string(text: str) -> str:
    """A Lua string literal of `text`'s bytes (decimal escapes: valid on 5.1 to 5.4)."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        out.append(char if 32 <= byte < 127 and char not in '"\\' else f"\\{byte:03d}")
    return '"' + "".join(out) + '"'


def run(lua: str, case: Mapping[str, LuaValue], directory: Path) -> list[Line]:
    """Runs the harness on `case` (module_dir defaults to the package's data) and returns its lines."""
    case = {"module_dir": str(DATA), **case}
    path = directory / "case.lua"
    path.write_text("return " + to_lua(case) + "\n", encoding="ascii")
    done = subprocess.run([lua, str(HARNESS), str(path)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [line.split("\t") for line in done.stdout.splitlines()]


def answers(lines: Sequence[Line]) -> dict[str, Line]:
    """Each step's line by its id (log lines left out)."""
    return {line[0]: line[1:] for line in lines if line[0] != "log"}


def logs(lines: Sequence[Line]) -> list[tuple[str, str]]:
    """The (level, message) of every log line, in order."""
    return [(line[1], line[2]) for line in lines if line[0] == "log"]
