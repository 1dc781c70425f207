"""A job's place at submission (docs/rule.md §8): placed with the table of the last cycle, a job lands
where the next cycle puts it, and that cycle need not write it again."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_drf.config.settings import Config, Mode
from slurm_drf.cycle.recall import Recall
from slurm_drf.cycle.reset import reset_jobs
from slurm_drf.cycle.run import CycleReport, run_cycle
from slurm_drf.cycle.store import StateStore
from slurm_drf.model.types import Job
from slurm_drf.policy.placement import Placer, build_table
from tests.unit.builders import job, node
from tests.unit.controller import Controller

RESOURCES = ("cpu", "mem", "gres/gpu")
FACTORS = 1000
NODES = [node(f"g{i}", cpu=64, mem=512_000, gpu=8) for i in range(4)]


class Slurmctld(Controller):
    """The in-memory controller, with Slurm's priority: the same factors for every job, minus its nice."""

    def __init__(self, jobs: list[Job]) -> None:
        super().__init__([replace(j, priority=FACTORS - j.nice) for j in jobs], NODES)

    def run_lines(self, lines: Sequence[str]) -> tuple[dict[str, str], list[str]]:
        answer = super().run_lines(lines)
        self.jobs = {i: replace(j, priority=FACTORS - j.nice) for i, j in self.jobs.items()}
        return answer


def _queue() -> list[Job]:
    running = [job("vision", state="RUNNING", job_id=str(10 + k), cpu=8, mem=64_000, gpu=4) for k in range(4)]
    running += [job("nlp", state="RUNNING", job_id=str(20 + k), cpu=8, mem=64_000, gpu=4) for k in range(2)]
    pending = [
        job(("vision", "nlp")[k % 2], job_id=str(100 + k), submit_time=float(k), cpu=8, mem=64_000, gpu=1)
        for k in range(40)
    ]
    return running + pending


def _cycle(controller: Controller, tmp_path: Path, mode: Mode = "nice") -> CycleReport:
    config = Config(resources=RESOURCES, hierarchy="flat", mode=mode, state_dir=str(tmp_path))
    return run_cycle(controller, controller, config, StateStore(tmp_path))


def _submit(controller: Controller, placer: Placer, account: str, count: int, first_id: int) -> list[str]:
    """`count` 1-GPU jobs of `account`, each placed at submission as the script places it."""
    ids = []
    for k in range(count):
        value = placer.place(["main"], account, [8, 64_000, 1])
        assert value is not None
        job_id = str(first_id + k)
        controller.jobs[job_id] = job(
            account,
            job_id=job_id,
            submit_time=100.0 + k,
            nice=value,
            priority=FACTORS - value,
            cpu=8,
            mem=64_000,
            gpu=1,
        )
        ids.append(job_id)
    return ids


def _slurm_order(controller: Controller) -> list[str]:
    """Slurm's order of the pending jobs: priority, then submit time, then job id."""
    pending = [j for j in controller.jobs.values() if j.state == "PENDING"]
    return [j.job_id for j in sorted(pending, key=lambda j: (-j.priority, j.submit_time, int(j.job_id)))]


def test_a_newcomer_placed_at_submission_is_first_in_slurms_order_and_not_written_again(tmp_path: Path) -> None:
    controller = Slurmctld(_queue())
    _cycle(controller, tmp_path)
    settled = _cycle(controller, tmp_path)
    assert not settled.writes  # nothing changed: the second cycle writes nothing
    placer = Placer(build_table(settled.plan, Config(resources=RESOURCES), 0.0))
    (newcomer,) = _submit(controller, placer, "bio", 1, 500)
    assert _slurm_order(controller)[0] == newcomer  # before any further cycle
    after = _cycle(controller, tmp_path)
    assert after.plan.column("job_id")[0] == newcomer
    assert newcomer not in {w.job_id for w in after.writes}


def test_a_burst_interleaves_with_the_others_as_the_next_cycle_orders_it(tmp_path: Path) -> None:
    controller = Slurmctld(_queue())
    _cycle(controller, tmp_path)
    settled = _cycle(controller, tmp_path)
    placer = Placer(build_table(settled.plan, Config(resources=RESOURCES), 0.0))
    burst = _submit(controller, placer, "bio", 30, 500)
    placed = _slurm_order(controller)
    after = _cycle(controller, tmp_path)
    planned = list(after.plan.column("job_id"))
    # bio holds nothing: the greedy loop serves it until its share passes the others' (16 and 8 of 32 GPUs).
    assert placed == planned
    first_other = min(placed.index(j) for j in placed if j not in burst)
    assert 0 < first_other < len(burst)  # interleaved, not all first
    rewritten = {w.job_id for w in after.writes} & set(burst)
    assert not rewritten


@pytest.mark.parametrize("mode", ["nice", "site_factor"])
def test_the_table_has_a_pool_in_the_placed_modes_only(tmp_path: Path, mode: Mode) -> None:
    controller = Slurmctld(_queue())
    report = _cycle(controller, tmp_path, mode)
    table = build_table(report.plan, Config(resources=RESOURCES, mode=mode), 0.0)
    (pool,) = table.pools
    assert pool.best == (-2147483645 if mode == "nice" else 2147483645)
    assert pool.worst == (-1_000_001 if mode == "nice" else 1)
    priority = _cycle(Slurmctld(_queue()), tmp_path / "p", "priority")
    assert build_table(priority.plan, Config(resources=RESOURCES, mode="priority"), 0.0).pools == ()


def test_a_job_placed_at_submission_is_remembered_as_ours_and_reset_gives_it_nice_0(tmp_path: Path) -> None:
    controller = Slurmctld(_queue())
    settled = _cycle(controller, tmp_path)
    placer = Placer(build_table(settled.plan, Config(resources=RESOURCES), 0.0))
    (placed,) = _submit(controller, placer, "bio", 1, 500)
    _cycle(controller, tmp_path)
    memory = StateStore(tmp_path).load().jobs[placed]
    assert (memory.user_nice, memory.own_known, memory.written) == (0, True, controller.jobs[placed].nice)
    report = reset_jobs(controller, controller, StateStore(tmp_path), recall=Recall(None))
    assert placed in report.reset and controller.jobs[placed].nice == 0


def test_a_label_on_a_job_older_than_the_last_cycle_stays_of_unknown_own_nice(tmp_path: Path) -> None:
    """Not placed at submission (an earlier install's label): reset leaves it alone, as before."""
    controller = Slurmctld(_queue())
    _cycle(controller, tmp_path)
    old = job("bio", job_id="600", submit_time=5.0, nice=-2_000_000_000, cpu=8, mem=64_000, gpu=1)
    controller.jobs["600"] = replace(old, priority=FACTORS - old.nice)
    _cycle(controller, tmp_path)
    assert not StateStore(tmp_path).load().jobs["600"].own_known


def test_no_pool_where_a_placed_nice_could_not_be_told_from_a_users_own(tmp_path: Path) -> None:
    """Factor weighting writes our part between -factor_weight and -1: above LABEL_NICE_BELOW, so a
    placed value would pass for the user's own nice at the next cycle. Nothing is placed there."""
    config = Config(resources=RESOURCES, hierarchy="flat", weighting="factor", state_dir=str(tmp_path))
    report = run_cycle(Slurmctld(_queue()), Slurmctld(_queue()), config, StateStore(tmp_path))
    assert build_table(report.plan, config, 0.0).pools == ()


def test_a_place_past_worst_is_left_to_the_next_cycle(tmp_path: Path) -> None:
    settled = _cycle(Slurmctld(_queue()), tmp_path)
    table = build_table(settled.plan, Config(resources=RESOURCES), 0.0)
    (pool,) = table.pools
    # Every job at the top of the range (-1, as a coarse band that runs out of room holds them): a job after
    # them would get a nice no cycle could tell from a user's own.
    crowded = replace(pool, values=(-1,) * len(pool.values))
    placer = Placer(replace(table, pools=(crowded,)))
    assert placer.place(["main"], "vision", [8, 64_000, 1]) is None  # its level is past every point
