"""run_cycle's housekeeping at scale: the cyclic collector paused for a cycle and given back,
the snapshot kept as its table, the writes chosen from the plan's columns."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from slurm_drf.config.settings import Config
from slurm_drf.cycle.run import collector_paused, run_cycle, select_writes
from slurm_drf.cycle.store import StateStore
from slurm_drf.model.types import LazyRows, Snapshot
from slurm_drf.policy.plan import compute_plan
from slurm_drf.policy.state import PolicyState
from slurm_drf.slurm.write import Write, WriteResult
from tests.unit.builders import job, node, snapshot


class Cluster:
    """A source and writer that says whether the collector ran while it was read and written to."""

    name = "cluster"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.collector_on: list[bool] = []
        self.written: list[Write] = []

    def fetch_snapshot(self) -> Snapshot:
        self.collector_on.append(gc.isenabled())
        if self.fail:
            raise RuntimeError("slurmctld went away")
        jobs = [job(("gpu", "mem")[k % 2], job_id=str(100 + k), cpu=1 + k % 3, submit_time=float(k)) for k in range(30)]
        return snapshot([node(cpu=64, mem=64000)], jobs)

    def apply(self, writes: Sequence[Write]) -> WriteResult:
        self.collector_on.append(gc.isenabled())
        self.written.extend(writes)
        return WriteResult(applied=tuple(w.job_id for w in writes))

    def run_lines(self, lines: Sequence[str]) -> tuple[dict[str, str], list[str]]:
        return {}, []


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


@pytest.mark.usefixtures("collector_on")
def test_a_cycle_runs_without_the_collector_and_gives_it_back(tmp_path: Path) -> None:
    cluster = Cluster()
    report = run_cycle(cluster, cluster, Config(resources=("cpu", "mem")), StateStore(tmp_path))
    assert cluster.collector_on == [False, False]  # read and written with it paused
    assert gc.isenabled()
    assert report.result is not None and report.result.count == 30


@pytest.mark.usefixtures("collector_on")
def test_a_failed_cycle_gives_the_collector_back(tmp_path: Path) -> None:
    cluster = Cluster(fail=True)
    with pytest.raises(RuntimeError, match="went away"):
        run_cycle(cluster, cluster, Config(), StateStore(tmp_path))
    assert gc.isenabled()


def test_a_paused_collector_stays_paused_after_the_block() -> None:
    was = gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()


def test_the_cycle_keeps_the_snapshot_as_its_table_and_its_jobs_unchanged(tmp_path: Path) -> None:
    cluster = Cluster()
    read = cluster.fetch_snapshot()
    report = run_cycle(cluster, cluster, Config(resources=("cpu", "mem")), StateStore(tmp_path), dry_run=True)
    assert isinstance(report.snapshot.jobs, LazyRows)
    assert tuple(report.snapshot.jobs) == tuple(read.jobs)
    assert report.snapshot.columns_only() is report.snapshot
    assert report.snapshot == read


def test_select_writes_takes_the_head_of_the_order_and_counts_the_rest() -> None:
    plan = compute_plan(Cluster().fetch_snapshot(), Config(resources=("cpu", "mem")), PolicyState())
    chosen, deferred = select_writes(plan, 7)
    assert deferred == 30 - 7
    orders = dict(zip(plan.column("job_id"), plan.column("order"), strict=True))
    assert sorted(orders[c.job_id] for c in chosen) == list(range(7))
    values = dict(zip(plan.column("job_id"), plan.column("value"), strict=True))
    assert all(c.value == values[c.job_id] and c.current == 0 and c.user_nice == 0 for c in chosen)
