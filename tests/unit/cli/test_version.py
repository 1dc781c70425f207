"""`slurm-drf --version`: the one version (slurm_drf/__init__.py, which setup.cfg reads), the Slurm
release `sinfo --version` gives within a short timeout, and the backend `backend: auto` would pick.

A fake `sinfo` on PATH stands for Slurm's; scripts/check-dist compares the
installed wheel's `--version` with the wheel's own version.
"""

from __future__ import annotations

import configparser
import os
import stat
import time
from pathlib import Path

import pytest

from slurm_drf import __version__
from slurm_drf.cli import main as cli_main
from slurm_drf.cli import version
from slurm_drf.cli.version import render_version
from slurm_drf.slurm.pyslurm_source import fetch_slurm_release
from tests.paths import REPO


def _fake_sinfo(folder: Path, body: str) -> None:
    """A `sinfo` in `folder` running the shell `body`, first on PATH."""
    script = folder / "sinfo"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_setup_cfg_takes_the_version_from_the_package() -> None:
    metadata = configparser.ConfigParser()
    metadata.read(REPO / "setup.cfg")
    assert metadata["metadata"]["version"] == "attr: slurm_drf.__version__"
    assert metadata["metadata"]["license_files"] == "LICENSE"
    assert (REPO / "LICENSE").read_text().startswith("MIT License\n\nCopyright (c) the slurm-drf authors\n")


def test_version_prints_the_package_version_first_and_exits_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(version, "fetch_slurm_release", lambda timeout: ("24.11.5", "sinfo --version"))
    monkeypatch.setattr(version, "pyslurm_usable", lambda slurm_release: (False, "pyslurm does not import"))
    with pytest.raises(SystemExit) as exit_:
        cli_main.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == (
        f"slurm-drf {__version__}\n"
        "Slurm 24.11.5 (sinfo --version)\n"
        "backend auto: cli, Slurm's commands (pyslurm not usable: pyslurm does not import)\n"
    )


@pytest.mark.parametrize(
    ("release", "source", "backend", "lines"),
    [
        (
            "22.05.8",
            "sinfo --version",
            (True, "pyslurm 22.5.3 matches Slurm 22.05.8"),
            ["Slurm 22.05.8 (sinfo --version)", "backend auto: pyslurm (pyslurm 22.5.3 matches Slurm 22.05.8)"],
        ),
        (
            None,
            "no sinfo on PATH",
            (False, "cannot tell the Slurm release (sinfo --version)"),
            [
                "Slurm: unknown (no sinfo on PATH)",
                "backend auto: cli, Slurm's commands (pyslurm not usable: cannot tell the Slurm release "
                "(sinfo --version))",
            ],
        ),
    ],
)
def test_render_version(release: str | None, source: str, backend: tuple[bool, str], lines: list[str]) -> None:
    assert render_version("1.2.3", release, source, backend).splitlines() == ["slurm-drf 1.2.3", *lines]


def test_the_slurm_release_from_sinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_sinfo(tmp_path, 'echo "slurm-wlm 22.05.8"')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert fetch_slurm_release(timeout=5) == ("22.05.8", "sinfo --version")


def test_a_sinfo_without_a_configuration_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_sinfo(tmp_path, 'echo "sinfo: fatal: Could not establish a configuration source" >&2; exit 1')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert fetch_slurm_release(timeout=5) == (
        None,
        "sinfo --version: sinfo: fatal: Could not establish a configuration source",
    )


def test_a_sinfo_that_waits_is_given_up_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without slurm.conf sinfo retries for a minute: --version waits its timeout, no longer."""
    _fake_sinfo(tmp_path, "exec sleep 60")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    start = time.monotonic()
    assert fetch_slurm_release(timeout=0.3) == (None, "sinfo --version gave no answer within 0.3 s")
    assert time.monotonic() - start < 5


def test_no_sinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert fetch_slurm_release(timeout=5) == (None, "no sinfo on PATH")


def test_the_debian_changelog_says_the_package_version() -> None:
    """debian/changelog's top entry is the .deb's version (debian/rules and scripts/build-deb refuse a
    build where it differs)."""
    first = (REPO / "debian" / "changelog").read_text().splitlines()[0]
    assert first.startswith(f"slurm-drf ({__version__}) "), first
