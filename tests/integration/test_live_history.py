"""The decayed past bootstrapped from the sandbox's accounting (docs/rule.md §6).

A short job runs to completion; once `sacct` reports it COMPLETED, a
HistoryPast on a fresh state directory (no history.sqlite: a new install)
with `history:` on asks the real sacct and sees that account's past, and
no past for accounts that ran nothing in its window. The daemon's query
(`sacct -P` with SLURM_TIME_FORMAT=%s) gives the job the times and TRES
slurmdbd holds, as `sacct --json` shows them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_drf.config.settings import Config, HistoryConfig
from slurm_drf.slurm.sacct import fetch_allocations
from slurm_drf.trail.past import SACCT_HALF_LIVES, HistoryPast

if TYPE_CHECKING:
    from tests.integration.conftest import SlurmSandbox

TEAMS = ("gputeam", "memteam", "cputeam", "newteam")
ACCOUNT = "newteam"
# Shorter than the config allows (1 h), so that the window (5 half-lives) holds
# little besides this test's job; HistoryConfig itself takes any half-life.
HALF_LIFE = 60.0


def _state(slurm: SlurmSandbox, job_id: str, fields: str = "State") -> str:
    out = slurm.run("sacct", "-X", "-n", "-P", "-j", job_id, "-o", fields).stdout.split()
    return out[0] if out else ""


def _accounts_that_ran(slurm: SlurmSandbox, start: float) -> set[str]:
    """Accounts sacct shows running at some time since `start`, asked independently of slurm-drf."""
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start))
    out = slurm.run("sacct", "-a", "-X", "-n", "-P", "-S", since, "-E", "now", "-s", "R", "-o", "Account").stdout
    return {line.strip() for line in out.splitlines() if line.strip()}


def test_the_pipe_query_gives_the_times_sacct_json_shows(slurm: SlurmSandbox) -> None:
    asked = time.time() - 600.0
    job_id = slurm.sbatch("-A", ACCOUNT, "-p", "cpu", "-c", "2", "--mem=1000", wrap="sleep 2")
    # slurmdbd can list a job that just ended as COMPLETED with no partition yet (22.05, measured): wait for both.
    slurm.wait_for(lambda: _state(slurm, job_id, "State,Partition") == "COMPLETED|cpu", 120, f"job {job_id} in sacct")
    record = json.loads(slurm.run("sacct", "--json", "-X", "-j", job_id).stdout)["jobs"][0]
    start, end = float(record["time"]["start"]), float(record["time"]["end"])
    assert 0 < start < end
    found = [a for a in fetch_allocations(asked) if (a.account, a.start, a.end) == (ACCOUNT, start, end)]
    assert len(found) == 1, (start, end)
    assert found[0].partition == "cpu"
    assert {r: found[0].tres.get(r) for r in ("cpu", "mem", "node")} == {"cpu": 2, "mem": 1000, "node": 1}


def test_a_fresh_install_sees_the_past_from_sacct(slurm: SlurmSandbox, tmp_path: Path) -> None:
    job_id = slurm.sbatch("-A", ACCOUNT, "-p", "cpu", "-c", "2", "--mem=1000", wrap="sleep 2")
    slurm.wait_for(lambda: _state(slurm, job_id) == "COMPLETED", 120, f"sacct to show job {job_id} COMPLETED")
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    config = Config(interval=60.0, history=HistoryConfig(half_life_s=HALF_LIFE, weight=1.0))
    reader = HistoryPast(state_dir, fetch=fetch_allocations)
    now = time.time()
    past = reader.past(config)
    assert past is not None and "default" in past, past
    accounts = past["default"]
    used = accounts.get(ACCOUNT, {})
    assert 0.0 < used.get("cpu", 0.0) <= 2.0, accounts
    assert 0.0 < used.get("mem", 0.0) <= 1000.0, accounts
    assert used.get("gres/gpu", 0.0) == 0.0
    # The accounts with no job in the window have no past (in an isolated run: every other team).
    ran = _accounts_that_ran(slurm, now - SACCT_HALF_LIVES * HALF_LIFE)
    assert ACCOUNT in ran
    for team in set(TEAMS) - ran:
        assert not any(accounts.get(team, {}).values()), (team, accounts)
    assert {a for a, amounts in accounts.items() if any(amounts.values())} <= ran
    assert not (state_dir / "history.sqlite").exists()  # the reader never writes the record
