"""Write a state directory as a release of slurm-drf leaves it, for test_upgrade.py beside it.

Run with the *older* release's tree first on the path, so that its cycle
writes the files (the state, the history, the past, the placement table):

    PYTHONPATH=OLD_TREE python3 tests/unit/cycle/upgrade_state.py tests/fixtures/upgrade/RELEASE-COMMIT

Three cycles over `upgrade_queue()` against the in-memory controller of
tests/unit/controller.py (the one the older tree has); DIR/controller.json
keeps the nice each job then holds and what a fourth cycle of that release
writes (on a copy: the tie rule rotates tied accounts, so some values move).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from slurm_drf.config.settings import Config
from slurm_drf.cycle.recall import Recall
from slurm_drf.cycle.run import CycleHistory, run_cycle
from slurm_drf.cycle.store import StateStore
from slurm_drf.model.types import Job
from slurm_drf.trail.history_db import AuditRecorder, HistoryLedger
from tests.unit.builders import job
from tests.unit.controller import Controller

# Hand-set nices, as sites have them: the new release must give each back.
OWN = (0, 5, 0, 100, 0, 7)


def upgrade_queue() -> list[Job]:
    """Eighteen pending jobs of three accounts, some with their users' own nice."""
    accounts = ("gpu", "mem", "cpu")
    return [
        job(accounts[k % 3], job_id=str(2000 + k), nice=OWN[k % len(OWN)], submit_time=float(k), cpu=1 + k % 4, mem=100)
        for k in range(18)
    ]


def upgrade_config(state_dir: Path) -> Config:
    return Config(resources=("cpu", "mem"), mode="nice", state_dir=str(state_dir))


def cycle(controller: Controller, state_dir: Path) -> dict[str, int]:
    """One cycle as `slurm-drf once` runs it; the values it wrote."""
    recall = Recall(HistoryLedger(state_dir))
    config = upgrade_config(state_dir)
    report = run_cycle(controller, controller, config, StateStore(state_dir), history=CycleHistory(recall=recall))
    AuditRecorder(state_dir, None).on_cycle(report)
    return {w.job_id: w.value for w in report.writes}


def main(out: Path) -> None:
    """Three cycles into `out`; then what a fourth, on a copy, would write (ties rotate: some move)."""
    out.mkdir(parents=True, exist_ok=True)
    controller = Controller(upgrade_queue())
    for _ in range(3):
        cycle(controller, out)
    held = controller.nices()
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "state"
        shutil.copytree(out, copy)
        fourth = cycle(controller, copy)
    record = {"held": held, "fourth_cycle_writes": fourth}
    (out / "controller.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
