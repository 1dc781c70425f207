"""The plan's advice when pending jobs need whole nodes and the past does not count enough (issue 34)."""

from __future__ import annotations

import pytest

from slurm_drf.config.settings import Config, HistoryConfig
from slurm_drf.model.types import Job
from slurm_drf.policy.plan import WHOLE_NODE_HISTORY_WEIGHT, compute_plan
from tests.unit.builders import job, node, snapshot

RESOURCES = ("cpu", "mem", "gres/gpu")
NODES = [node(f"g{i}", cpu=64, mem=512_000, gpu=8) for i in range(4)] + [node("small", cpu=32, mem=256_000, gpu=4)]


def _warnings(jobs: list[Job], history: HistoryConfig | None = None) -> list[str]:
    config = Config(resources=RESOURCES, history=history)
    plan = compute_plan(snapshot(NODES, jobs), config)
    return [w for w in plan.warnings if "whole node" in w]


def test_a_pending_job_as_large_as_the_largest_node_is_named_with_the_remedy() -> None:
    jobs = [job("small0", cpu=8, gpu=1), job("wholenode", cpu=64, mem=512_000, gpu=8), job("small1", cpu=8, gpu=1)]
    (warning,) = _warnings(jobs)
    assert warning.startswith("pool default: pending jobs of wholenode each need a whole node")
    assert f"history: {{weight: {WHOLE_NODE_HISTORY_WEIGHT}}}" in warning


@pytest.mark.parametrize(
    "big", [job("big", cpu=64), job("big", mem=512_000), job("big", gpu=16), job("big", cpu=8, gpu=8)]
)
def test_any_resource_at_a_whole_node_counts_and_multi_node_jobs_too(big: Job) -> None:
    assert len(_warnings([big])) == 1


def test_a_job_that_fills_only_a_smaller_node_or_is_running_or_held_gives_none() -> None:
    # 4 GPUs fill the small node but not the largest: it need not wait for a drain there.
    assert _warnings([job("half", cpu=32, gpu=4)]) == []
    assert _warnings([job("run", state="RUNNING", cpu=64, gpu=8), job("x", cpu=1)]) == []
    assert _warnings([job("held", held=True, cpu=64, gpu=8), job("x", cpu=1)]) == []


def test_history_at_the_weight_that_evens_it_out_silences_it_and_a_lower_weight_does_not() -> None:
    jobs = [job("wholenode", cpu=64, gpu=8)]
    assert _warnings(jobs, HistoryConfig(weight=WHOLE_NODE_HISTORY_WEIGHT)) == []
    assert len(_warnings(jobs, HistoryConfig(weight=1))) == 1


def test_one_warning_per_pool_names_three_accounts_by_name_then_a_count() -> None:
    jobs = [job(f"acct{i}", cpu=64, gpu=8) for i in (4, 2, 0, 1, 3)]
    (warning,) = _warnings(jobs)
    assert "pending jobs of acct0, acct1, acct2 and 2 more each need" in warning
