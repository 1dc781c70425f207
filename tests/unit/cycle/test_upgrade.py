"""An upgrade reads what the release before left (issue 37): the state directory of an older release.

tests/fixtures/upgrade/RELEASE-COMMIT/ holds the files three cycles of that
release wrote (`upgrade_state.py` beside this file, run with that release's
tree) and the nice each job then held in Slurm. This release takes them over: it knows
every job's own nice, rewrites nothing that is already right, migrates the
history, and `reset` gives every job its own nice back.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from slurm_drf.cycle.recall import Recall
from slurm_drf.cycle.reset import reset_jobs
from slurm_drf.cycle.store import StateStore
from slurm_drf.policy.ownership import is_label_nice
from slurm_drf.policy.plan import compute_plan
from slurm_drf.trail.history_db import SCHEMA_VERSION, HistoryLedger
from tests.unit.controller import Controller
from tests.unit.cycle.upgrade_state import OWN, cycle, upgrade_config, upgrade_queue

FIXTURES = Path(__file__).parents[2] / "fixtures" / "upgrade"
RELEASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def _taken_over(release: str, tmp_path: Path) -> tuple[Controller, Path]:
    """The older release's state directory, and a controller whose jobs hold what it wrote."""
    state_dir = tmp_path / "state"
    shutil.copytree(FIXTURES / release, state_dir)
    state_dir.chmod(0o700)
    held = json.loads((state_dir / "controller.json").read_text())["held"]
    controller = Controller(upgrade_queue())
    for job_id, nice in held.items():
        controller.run_lines([f"update jobid={job_id} nice={nice}"])
    return controller, state_dir


@pytest.mark.parametrize("release", RELEASES)
def test_the_state_of_the_release_before_is_taken_over(release: str, tmp_path: Path) -> None:
    controller, state_dir = _taken_over(release, tmp_path)
    assert all(is_label_nice(n) for n in controller.nices().values())  # the older release's values
    own = {j.job_id: j.nice for j in upgrade_queue()}
    store = StateStore(state_dir)
    state, _ = Recall(HistoryLedger(state_dir)).reconcile(controller.fetch_snapshot(), store.load())
    plan = compute_plan(controller.fetch_snapshot(), upgrade_config(state_dir), state)
    assert dict(zip(plan.column("job_id"), plan.column("user_nice"), strict=True)) == own
    # A cycle of this release writes what the older one's next cycle would have, and no more (no rewrite
    # storm after an upgrade); the history is migrated to this schema.
    expected = json.loads((state_dir / "controller.json").read_text())["fourth_cycle_writes"]
    assert cycle(controller, state_dir) == expected
    with sqlite3.connect(state_dir / "history.sqlite") as db:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    # And the way back: every job its own nice.
    reset_jobs(controller, controller, StateStore(state_dir), recall=Recall(HistoryLedger(state_dir)))
    assert controller.nices() == own
    assert set(own.values()) == set(OWN)
