"""slurm_drf/data/slurm-drf.service passes `systemd-analyze verify` (and stays hardened).

systemd-analyze comes with Debian's `systemd` package; CI installs it
(SLURM_DRF_REQUIRE_SLURM=1 turns its absence into a failure). verify
insists that ExecStart's program exists, so the test checks a copy whose
ExecStart names the slurm-drf installed here.
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

UNIT = REPO / "slurm_drf" / "data" / "slurm-drf.service"
INSTALLED_PATH = "/usr/local/bin/slurm-drf"


def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        if os.environ.get("SLURM_DRF_REQUIRE_SLURM") == "1":
            pytest.fail("systemd-analyze is missing (Debian package: systemd)", pytrace=False)
        pytest.skip("systemd-analyze is missing (Debian package: systemd)")
    return found


def slurm_drf_program() -> str:
    found = shutil.which("slurm-drf") or str(Path(sys.executable).with_name("slurm-drf"))
    if not os.access(found, os.X_OK):
        pytest.fail(f"no slurm-drf program to put in ExecStart (looked for {found}); pip install -e .", pytrace=False)
    return found


def unit_copy(tmp_path: Path) -> Path:
    text = UNIT.read_text(encoding="utf-8")
    assert f"ExecStart={INSTALLED_PATH} daemon\n" in text
    copy = tmp_path / UNIT.name
    copy.write_text(text.replace(INSTALLED_PATH, slurm_drf_program()), encoding="utf-8")
    return copy


class _UnitParser(configparser.ConfigParser):
    """Keeps the case of the keys (systemd's are case-sensitive)."""

    def optionxform(self, optionstr: str) -> str:
        return optionstr


def parse_unit() -> dict[str, dict[str, str]]:
    parser = _UnitParser(strict=False, interpolation=None, delimiters=("=",))
    parser.read_string(UNIT.read_text(encoding="utf-8"))
    return {section: dict(parser[section]) for section in parser.sections()}


def test_systemd_analyze_verify_passes(tmp_path: Path) -> None:
    analyze = systemd_analyze()
    copy = unit_copy(tmp_path)
    result = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=120, check=False)
    # verify exits 0 even for unknown keys and bad values: it only warns,
    # naming the file. Lines about other units of this machine do not count.
    ours = [line for line in (result.stdout + result.stderr).splitlines() if copy.name in line]
    assert result.returncode == 0 and not ours, result.stdout + result.stderr


def test_systemd_exposure_stays_low(tmp_path: Path) -> None:
    analyze = systemd_analyze()
    copy = unit_copy(tmp_path)
    result = subprocess.run(
        [analyze, "security", "--offline=true", "--threshold=20", str(copy)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if "offline" in result.stderr and "unrecognized" in result.stderr:
        pytest.skip("systemd-analyze security --offline needs systemd >= 252")
    exposure = re.search(r"Overall exposure level for \S+: ([\d.]+)", result.stdout)
    assert exposure is not None, result.stdout + result.stderr
    assert result.returncode == 0, f"exposure {exposure.group(1)} > 2.0:\n{result.stdout}"


def test_the_unit_says_what_the_service_needs() -> None:
    unit = parse_unit()
    service = unit["Service"]
    assert service["Type"] == "notify"
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert service["Restart"] == "on-failure"
    assert service["RestartPreventExitStatus"] == "2"  # a bad config is not fixed by restarting
    assert service["WatchdogSec"]
    assert service["StateDirectory"] == "slurm-drf"
    assert "/var/lib/slurm-drf" in service["ReadWritePaths"].split()
    assert service["ProtectSystem"] == "strict"
    assert "PrivateNetwork" not in service  # slurmctld and munge must stay reachable
    assert set(service["RestrictAddressFamilies"].split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}
    for key in (
        "NoNewPrivileges",
        "PrivateTmp",
        "ProtectHome",
        "ProtectKernelTunables",
        "ProtectKernelModules",
        "ProtectKernelLogs",
        "ProtectControlGroups",
        "RestrictNamespaces",
        "LockPersonality",
        "MemoryDenyWriteExecute",
    ):
        assert service[key] == "yes", key
    for needed in ("slurmctld.service", "munge.service"):
        assert needed in unit["Unit"]["After"].split() and needed in unit["Unit"]["Wants"].split()
