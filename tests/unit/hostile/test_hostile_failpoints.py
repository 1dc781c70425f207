"""Hostile round 3: `SLURM_DRF_FAILPOINT` says so when it is armed, and the docs list every failpoint.

A failpoint left set on a head node kills the daemon in the middle of
every cycle; it used to do so without a word, and one point
(`compaction_commit`) was missing from docs/operations.md. The list in the
docs, the one in slurm_drf/failpoints.py and the points the code reaches
are compared here, so that they cannot drift apart again.
"""

from __future__ import annotations

import ast
import logging
import os
import re
import signal

import pytest

from slurm_drf import failpoints
from tests.paths import REPO

DOCS = REPO / "docs" / "operations.md"


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that has not looked at the variable yet."""
    monkeypatch.setattr(failpoints, "_announced", False)


@pytest.mark.usefixtures("fresh")
def test_an_armed_failpoint_is_one_warning_naming_it_and_where_the_process_dies(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(failpoints.VARIABLE, "saved")
    killed: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append((pid, sig)))
    with caplog.at_level(logging.WARNING, logger="slurm_drf.failpoints"):
        failpoints.reached("read")
        assert not failpoints.armed("mid_writes")
        failpoints.reached("saved")
        failpoints.reached("history_commit")
    assert killed == [(os.getpid(), signal.SIGKILL)]  # at `saved` alone
    messages = [r.getMessage() for r in caplog.records if r.name == "slurm_drf.failpoints"]
    assert messages == [
        f"SLURM_DRF_FAILPOINT=saved is set: this process (pid {os.getpid()}) kills itself with SIGKILL "
        "at the failpoint 'saved' (the new memory is saved, nothing written to Slurm yet); it is for the fault "
        "tier only, never a head node"
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records if r.name == "slurm_drf.failpoints")


@pytest.mark.usefixtures("fresh")
def test_a_failpoint_that_names_no_point_says_so_and_kills_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(failpoints.VARIABLE, "sved")
    monkeypatch.setattr(os, "kill", lambda pid, sig: pytest.fail("killed for a point nobody has"))
    for point in failpoints.POINTS:
        failpoints.reached(point)
    messages = [r.getMessage() for r in caplog.records if r.name == "slurm_drf.failpoints"]
    assert messages == [
        "SLURM_DRF_FAILPOINT='sved' is set but names no failpoint (they are read, saved, mid_writes, "
        "history_commit, compaction_commit); it does nothing, and is for the fault tier only"
    ]


@pytest.mark.usefixtures("fresh")
def test_unset_it_says_nothing(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv(failpoints.VARIABLE, raising=False)
    for point in failpoints.POINTS:
        assert not failpoints.armed(point)
    assert [r for r in caplog.records if r.name == "slurm_drf.failpoints"] == []


def points_in_docs() -> list[str]:
    """The failpoints docs/operations.md lists after `SLURM_DRF_FAILPOINT` (`slurm_drf/failpoints.py`: ...)."""
    text = " ".join(DOCS.read_text(encoding="utf-8").split())
    found = re.findall(r"`SLURM_DRF_FAILPOINT` \(`slurm_drf/failpoints\.py`: ([^)]*)\)", text)
    assert len(found) == 1, found
    return re.findall(r"`([a-z_]+)`", found[0])


def points_in_code() -> set[str]:
    """Every point the code reaches or asks about: `failpoints.reached("x")`, `failpoints.armed("x")`."""
    points: set[str] = set()
    for path in (REPO / "slurm_drf").rglob("*.py"):
        for call in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and isinstance(call.func.value, ast.Name)
                and call.func.value.id == "failpoints"
                and call.func.attr in ("reached", "armed")
            ):
                argument = call.args[0]
                assert isinstance(argument, ast.Constant), f"{path}: a failpoint named by a constant"
                points.add(str(argument.value))
    return points


def test_the_docs_list_every_failpoint_the_code_has_and_no_other() -> None:
    assert points_in_docs() == list(failpoints.POINTS)  # in cycle order
    assert points_in_code() == set(failpoints.POINTS)
    assert list(failpoints.WHERE) == list(failpoints.POINTS) and all(failpoints.WHERE.values())


def test_the_docs_show_the_warning_an_armed_failpoint_gives() -> None:
    text = " ".join(DOCS.read_text(encoding="utf-8").split())
    shown = failpoints.describe_armed("saved").replace(str(os.getpid()), "4242")
    assert f"slurm-drf: WARNING: {shown}" in text
