"""The reclaim's moves written before they are made (cycle/reclaim_moves.py): the cooldown across a crash.

Slurm's requeue is a stand-in here (`apply_reclaim` replaced); the real one
is tested live (tests/integration/test_live_requeue.py).
"""

from __future__ import annotations

import json
import logging
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType

import pytest

from slurm_drf.config.settings import Config, ReclaimConfig
from slurm_drf.cycle import reclaim as reclaim_module
from slurm_drf.cycle.reclaim import SlurmReclaimer
from slurm_drf.cycle.reclaim_moves import MOVES_FILE, ReclaimMoves
from slurm_drf.slurm.parse.running import RunningJob
from slurm_drf.slurm.running import Outcome, Result, Way

NOW = time.time()
DAY = 86400.0


def _running(job_id: str) -> RunningJob:
    return RunningJob(
        job_id, "hog", "hogger", "gpu", "normal", NOW - 3600, True, MappingProxyType({"g1": (16, 64_000, 4)}), job_id
    )


def _config(cooldown: float = DAY) -> Config:
    return Config(reclaim=ReclaimConfig(pools=("gpu",), cooldown=cooldown))


def _no_history(since: float) -> dict[str, float]:
    return {}


class Killed(BaseException):
    """The daemon killed while scontrol requeue runs (a SIGKILL, an OOM kill): nothing after it runs."""


def test_moves_are_kept_and_read_back(tmp_path: Path) -> None:
    moves = ReclaimMoves(tmp_path)
    assert moves.moved_since(0.0) == {}
    moves.about_to_move(["11", "12"], NOW, DAY)
    assert moves.moved_since(NOW - 1) == {"11": NOW, "12": NOW}
    assert moves.moved_since(NOW + 1) == {}
    assert stat.S_IMODE((tmp_path / MOVES_FILE).stat().st_mode) == 0o600
    moves.not_moved(["12"])
    assert ReclaimMoves(tmp_path).moved_since(0.0) == {"11": NOW}


def test_moves_older_than_the_cooldown_are_dropped_on_the_next_write(tmp_path: Path) -> None:
    moves = ReclaimMoves(tmp_path)
    moves.about_to_move(["11"], NOW - 2 * DAY, DAY)
    moves.about_to_move(["12"], NOW - 0.5 * DAY, DAY)
    moves.about_to_move(["13"], NOW, DAY)
    data = json.loads((tmp_path / MOVES_FILE).read_text())
    assert sorted(data["moves"]) == ["12", "13"]


def test_a_requeue_the_daemon_was_killed_in_counts_after_the_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The history never got the row (the cycle did not end); the file has the move, so no second requeue."""

    def killed(victims: Sequence[RunningJob], way: Way, timeout: float) -> list[Outcome]:
        raise Killed

    monkeypatch.setattr(reclaim_module, "apply_reclaim", killed)
    with pytest.raises(Killed):
        SlurmReclaimer(_config(), _no_history, ReclaimMoves(tmp_path)).apply([_running("21")], "requeue")
    restarted = SlurmReclaimer(_config(), _no_history, ReclaimMoves(tmp_path))
    assert set(restarted.moved_since(time.time() - DAY)) == {"21"}
    # Without the file (as before it), the restarted daemon knew of no move.
    assert SlurmReclaimer(_config(), _no_history).moved_since(time.time() - DAY) == {}


def test_only_what_slurm_moved_counts_once_it_answered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def answered(victims: Sequence[RunningJob], way: Way, timeout: float) -> list[Outcome]:
        results: dict[str, Result] = {"31": "done", "32": "gone", "33": "refused"}
        return [Outcome(v.job_id, results[v.job_id], "" if v.job_id == "31" else "no") for v in victims]

    monkeypatch.setattr(reclaim_module, "apply_reclaim", answered)
    reclaimer = SlurmReclaimer(_config(), _no_history, ReclaimMoves(tmp_path))
    reclaimer.apply([_running(j) for j in ("31", "32", "33")], "requeue")
    assert set(reclaimer.moved_since(time.time() - 60)) == {"31"}


def test_the_later_of_the_history_and_the_file_counts(tmp_path: Path) -> None:
    ReclaimMoves(tmp_path).about_to_move(["41", "42"], NOW - 100, DAY)

    def history(since: float) -> dict[str, float]:
        return {"41": NOW - 50, "43": NOW - 10}

    moved = SlurmReclaimer(_config(), history, ReclaimMoves(tmp_path)).moved_since(NOW - DAY)
    assert moved == {"41": NOW - 50, "42": NOW - 100, "43": NOW - 10}


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"{not json", "not JSON"),
        (b'{"format": "other/1", "moves": {}}', "not a slurm-drf-reclaim-moves/1 file"),
        (b'{"format": "slurm-drf-reclaim-moves/1", "moves": []}', "expected a mapping"),
        (b'{"format": "slurm-drf-reclaim-moves/1", "moves": {"x;y": 1.0}}', "expected a job id and a time"),
        (b'{"format": "slurm-drf-reclaim-moves/1", "moves": {"5": true}}', "expected a job id and a time"),
        (b'{"format": "slurm-drf-reclaim-moves/1", "moves": {"5": 1e999}}', "not a finite number"),
    ],
)
def test_a_broken_file_is_said_once_and_counts_as_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, said: str
) -> None:
    path = tmp_path / MOVES_FILE
    path.write_bytes(content)
    path.chmod(0o600)
    moves = ReclaimMoves(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert moves.moved_since(0.0) == {}
        assert moves.moved_since(0.0) == {}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert str(path) in warnings[0] and said in warnings[0]
    # The next move writes a good file again.
    moves.about_to_move(["7"], NOW, DAY)
    assert ReclaimMoves(tmp_path).moved_since(0.0) == {"7": NOW}


def test_a_file_others_may_write_is_not_trusted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ReclaimMoves(tmp_path).about_to_move(["8"], NOW, DAY)
    (tmp_path / MOVES_FILE).chmod(0o666)
    with caplog.at_level(logging.WARNING):
        assert ReclaimMoves(tmp_path).moved_since(0.0) == {}
    assert any(MOVES_FILE in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
