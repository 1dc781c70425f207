"""The job_submit/lua script on a head node: installing it, and whether placement at submission works.

`install_script` writes the two Lua files the package ships
(`slurm_drf/data/`: the standalone `job_submit.lua` and the module
`slurm_drf_submit.lua` it loads) beside slurm.conf, the standalone with
the table's path and slurm.conf's global memory defaults written in (the
plugin shows a script only a partition's own: `memory_settings` reads
the global ones from `scontrol show config`). The findings answer what an
administrator asks before trusting it (docs/submit.md): does slurm.conf
load the plugin, is our script where slurmctld looks, is the table fresh.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Final

from slurm_drf.errors import InputError
from slurm_drf.files import write_atomic
from slurm_drf.trail.placement import FORMAT

STANDALONE: Final = "job_submit.lua"
MODULE: Final = "slurm_drf_submit.lua"
# The standalone's one setting: the line `install_script` writes the table's path into.
_SETTINGS: Final = re.compile(r'^local SETTINGS = \{ table = "[^"\n]*" \}$', re.MULTILINE)
# The standalone's memory line: slurm.conf's global DefMemPerCPU, DefMemPerNode and MaxMemPerCPU.
_MEMORY: Final = re.compile(r"^local MEMORY = \{[^\n]*\}$", re.MULTILINE)
_MEMORY_KEYS: Final = {
    "DefMemPerCPU": "def_mem_per_cpu",
    "DefMemPerNode": "def_mem_per_node",
    "MaxMemPerCPU": "max_mem_per_cpu",
}
# What marks a job_submit.lua as ours (or as one that calls ours).
MARKER: Final = "slurm_drf_submit"
# Enough of the table for its first lines (the format, `written`, `stale_after`).
_HEAD_BYTES: Final = 256


def shipped(name: str) -> bytes:
    """One of the Lua files the package ships."""
    return resources.files("slurm_drf").joinpath("data", name).read_bytes()


def memory_settings(config: Mapping[str, str]) -> dict[str, int]:
    """slurm.conf's global memory defaults in `scontrol show config` (parsed), as the module's settings.

    Only whole numbers of MiB count: Slurm shows an unset one as
    UNLIMITED (or 0), and DefMemPerCPU and DefMemPerNode exclude each other.
    """
    out: dict[str, int] = {}
    for key, name in _MEMORY_KEYS.items():
        value = config.get(key, "").strip()
        if value.isdigit() and int(value) > 0:
            out[name] = int(value)
    return out


def memory_line(memory: Mapping[str, int]) -> str:
    """The standalone's MEMORY line for `memory` (`memory_settings`)."""
    fields = ", ".join(f"{name} = {memory[name]}" for name in sorted(memory))
    return f"local MEMORY = {{ {fields} }}" if fields else "local MEMORY = {}"


def standalone_for(table: str, memory: Mapping[str, int] | None = None) -> bytes:
    """The standalone job_submit.lua reading the placement table at `table`, with `memory` (`memory_settings`)."""
    if not os.path.isabs(table) or any(c in table for c in '"\\\n\r'):
        raise InputError(f"--table: {table!r}: expected an absolute path without quotes, backslashes or newlines")
    text = shipped(STANDALONE).decode()
    written, count = _SETTINGS.subn(f'local SETTINGS = {{ table = "{table}" }}', text)
    written, lines = _MEMORY.subn(memory_line(memory or {}), written)
    if count != 1 or lines != 1:
        raise InputError(f"{STANDALONE}: the shipped script lacks its SETTINGS or MEMORY line (a broken install?)")
    return written.encode()


def install_script(
    directory: Path, table: str, memory: Mapping[str, int] | None = None, *, force: bool = False
) -> list[Path]:
    """Write the module and the standalone script into `directory` (slurm.conf's); the files written.

    A job_submit.lua that does not load ours is the site's own: kept unless
    `force`, with the one line it needs said in the error.
    """
    target = directory / STANDALONE
    if target.exists() and not force:
        current = target.read_text(errors="replace")
        if MARKER not in current:
            raise InputError(
                f"{target}: a job_submit.lua of the site's own is there; add to its slurm_job_submit "
                f'pcall(function() require("{MARKER}").place(job_desc, part_list, submit_uid) end) '
                "and install only the module (--module-only), or replace it (--force)"
            )
    module = directory / MODULE
    write_atomic(module, shipped(MODULE), mode=0o644)
    write_atomic(target, standalone_for(table, memory), mode=0o644)
    return [module, target]


def install_module(directory: Path) -> list[Path]:
    """The module alone, for a site whose own job_submit.lua calls it."""
    module = directory / MODULE
    write_atomic(module, shipped(MODULE), mode=0o644)
    return [module]


@dataclass(frozen=True, slots=True)
class Finding:
    ok: bool
    text: str


def plugin_finding(config_text: str) -> Finding:
    """Whether `scontrol show config` says slurmctld loads job_submit/lua."""
    found = re.search(r"^JobSubmitPlugins\s*=\s*(.*)$", config_text, re.MULTILINE)
    plugins = [p.strip() for p in (found.group(1) if found else "").split(",") if p.strip()]
    if any(p in ("lua", "job_submit/lua") for p in plugins):
        return Finding(True, f"slurmctld loads job_submit/lua (JobSubmitPlugins={','.join(plugins)})")
    shown = ",".join(plugins) or "(null)"
    return Finding(False, f"slurmctld does not load job_submit/lua (JobSubmitPlugins={shown}): add lua to it")


def script_finding(directory: Path) -> Finding:
    """Whether slurm.conf's directory holds a job_submit.lua that places jobs, and the module it loads."""
    script, module = directory / STANDALONE, directory / MODULE
    try:
        text = script.read_text(errors="replace")
    except OSError as error:
        return Finding(False, f"{script}: {error.strerror or error}: `slurm-drf job-submit install {directory}`")
    if MARKER not in text:
        return Finding(False, f"{script} does not call slurm_drf_submit (docs/submit.md: the one line to add)")
    if not module.is_file():
        return Finding(False, f"{module} is missing: `slurm-drf job-submit install --module-only {directory}`")
    if module.read_bytes() != shipped(MODULE):
        return Finding(
            False, f"{module} is not this release's: `slurm-drf job-submit install --module-only {directory}`"
        )
    return Finding(True, f"{script} places jobs with {module} (this release's)")


def memory_finding(directory: Path, memory: Mapping[str, int]) -> Finding:
    """Whether the standalone script carries slurm.conf's global memory defaults (`memory_settings`)."""
    script = directory / STANDALONE
    try:
        text = script.read_text(errors="replace")
    except OSError as error:
        return Finding(False, f"{script}: {error.strerror or error}")
    found = _MEMORY.search(text)
    wanted = memory_line(memory)
    if found is None:
        if not memory:
            return Finding(True, f"{script}: slurm.conf sets no global memory default the script needs")
        return Finding(
            False, f"{script} is the site's own: its configure call needs {wanted.removeprefix('local MEMORY = ')}"
        )
    if found.group(0) != wanted:
        return Finding(
            False, f"{script} has `{found.group(0)}`, slurm.conf `{wanted}`: `slurm-drf job-submit install {directory}`"
        )
    return Finding(True, f"{script} has slurm.conf's global memory defaults (`{wanted}`)")


def table_finding(path: Path, now: float | None = None) -> Finding:
    """Whether the placement table is there and fresh: the script's own test (docs/formats.md)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(_HEAD_BYTES).decode("ascii", errors="replace").split("\n")
    except OSError as error:
        return Finding(False, f"{path}: {error.strerror or error} (is the daemon running with placement:?)")
    fields = dict(line.split(" ", 1) for line in head[1:3] if " " in line)
    try:
        written, stale_after = float(fields["written"]), float(fields["stale_after"])
    except (KeyError, ValueError):
        return Finding(False, f"{path}: not a placement table ({FORMAT})")
    if head[0] != FORMAT:
        return Finding(False, f"{path}: format {head[0]!r}, expected {FORMAT!r}")
    age = (time.time() if now is None else now) - written
    if age > stale_after:
        return Finding(False, f"{path} is stale: written {age:.0f} s ago, trusted for {stale_after:.0f} s")
    return Finding(True, f"{path} is fresh: written {max(age, 0):.0f} s ago, trusted for {stale_after:.0f} s")
