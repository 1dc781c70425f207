"""`slurm-drf job-submit`: the installed script, and the status an administrator reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_drf.cli import submit
from slurm_drf.cli.main import main
from slurm_drf.errors import InputError, SlurmError
from slurm_drf.service.job_submit import (
    MODULE,
    STANDALONE,
    install_script,
    memory_finding,
    memory_settings,
    plugin_finding,
    script_finding,
    shipped,
    standalone_for,
    table_finding,
)
from slurm_drf.slurm.parse.scontrol import parse_scontrol_config


def test_the_standalone_reads_the_table_it_is_installed_for() -> None:
    text = standalone_for("/srv/drf/placement.txt").decode()
    assert 'local SETTINGS = { table = "/srv/drf/placement.txt" }' in text
    assert text.count("local SETTINGS") == 1


@pytest.mark.parametrize("bad", ["relative/table.txt", '/srv/"x".txt', "/srv/a\\b", "/srv/a\nb"])
def test_a_table_path_the_script_cannot_hold_is_refused_in_one_line(bad: str) -> None:
    with pytest.raises(InputError, match="--table"):
        standalone_for(bad)


def test_install_writes_both_files_readable_by_slurmctld(tmp_path: Path) -> None:
    written = install_script(tmp_path, "/var/lib/slurm-drf/placement.txt")
    assert sorted(p.name for p in written) == sorted([MODULE, STANDALONE])
    assert (tmp_path / MODULE).read_bytes() == shipped(MODULE)
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in written)
    assert script_finding(tmp_path).ok


def test_a_sites_own_job_submit_lua_is_kept_unless_forced(tmp_path: Path) -> None:
    own = tmp_path / STANDALONE
    own.write_text("function slurm_job_submit(j, p, u) return slurm.SUCCESS end\n")
    with pytest.raises(InputError, match="of the site's own") as caught:
        install_script(tmp_path, "/t.txt")
    assert 'require("slurm_drf_submit")' in str(caught.value) and "\n" not in str(caught.value)
    assert own.read_text().startswith("function slurm_job_submit")
    assert not script_finding(tmp_path).ok
    install_script(tmp_path, "/t.txt", force=True)
    assert script_finding(tmp_path).ok


def _no_slurm(argv: list[str], timeout: float) -> str:
    raise SlurmError("scontrol: not found")


def test_install_and_module_only_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(submit, "run_command", _no_slurm)
    assert main(["job-submit", "install", str(tmp_path), "--table", "/srv/t.txt"]) == 0
    assert '"/srv/t.txt"' in (tmp_path / STANDALONE).read_text()
    (tmp_path / MODULE).write_text("-- an older release\n")
    assert not script_finding(tmp_path).ok
    assert main(["job-submit", "install", "--module-only", str(tmp_path)]) == 0
    assert script_finding(tmp_path).ok
    out = capsys.readouterr().out
    assert "JobSubmitPlugins=lua" in out and "DefMemPerCPU is not written in" in out
    assert "local MEMORY = {}" in (tmp_path / STANDALONE).read_text()


@pytest.mark.parametrize(
    ("lines", "memory"),
    [
        (["DefMemPerCPU = 2048", "MaxMemPerCPU = 4096"], {"def_mem_per_cpu": 2048, "max_mem_per_cpu": 4096}),
        (["DefMemPerNode = 8192", "MaxMemPerNode = UNLIMITED"], {"def_mem_per_node": 8192}),
        (["DefMemPerNode = UNLIMITED", "MaxMemPerNode = UNLIMITED"], {}),
        (["DefMemPerCPU = 0"], {}),
        ([], {}),
    ],
)
def test_slurm_confs_global_memory_defaults_go_into_the_installed_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: list[str], memory: dict[str, int]
) -> None:
    text = "Configuration data as of 2026-12-04T05:00:00\n" + "".join(f"{line}\n" for line in lines)
    assert memory_settings(parse_scontrol_config(text)) == memory
    monkeypatch.setattr(submit, "run_command", lambda argv, timeout: text)
    assert main(["job-submit", "install", str(tmp_path), "--table", "/srv/t.txt"]) == 0
    script = (tmp_path / STANDALONE).read_text()
    assert script.count("local MEMORY = ") == 1
    if memory:
        assert all(f"{name} = {value}" in script for name, value in memory.items())
    assert memory_finding(tmp_path, memory).ok
    # slurm.conf changed since: status says so, naming the command that writes it again.
    changed = memory_finding(tmp_path, {**memory, "def_mem_per_cpu": 1000})
    assert not changed.ok and "job-submit install" in changed.text


@pytest.mark.parametrize(
    ("line", "ok"),
    [
        ("JobSubmitPlugins       = lua", True),
        ("JobSubmitPlugins       = job_submit/lua,pbs", True),
        ("JobSubmitPlugins       = (null)", False),
        ("JobSubmitPlugins       = pbs", False),
        ("", False),
    ],
)
def test_the_plugin_is_read_from_scontrol_show_config(line: str, ok: bool) -> None:
    text = f"Configuration data as of 2026-12-04T05:00:00\nJobAcctGatherType = jobacct_gather/none\n{line}\n"
    assert plugin_finding(text).ok is ok


def test_the_table_is_fresh_stale_missing_or_not_a_table(tmp_path: Path) -> None:
    table = tmp_path / "placement.txt"
    assert not table_finding(table).ok and "No such file" in table_finding(table).text
    table.write_text("slurm-drf-placement/1\nwritten 1000\nstale_after 180\nmode nice\n")
    assert table_finding(table, now=1100).ok
    stale = table_finding(table, now=1200)
    assert not stale.ok and "stale" in stale.text
    table.write_text("something else\n")
    assert not table_finding(table, now=1100).ok
