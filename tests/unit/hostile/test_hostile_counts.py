"""Silent miscounts in snapshot files (issue 22, item 8): what a snapshot says is what counts."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_drf.config.settings import Config
from slurm_drf.model.codec import parse_snapshot
from slurm_drf.model.types import node_state_flags
from slurm_drf.policy.plan import compute_plan


def snapshot_data(nodes: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "format": "slurm-drf-snapshot/1",
        "cluster": "c",
        "taken_at": "2026-12-01T00:00:00Z",
        "nodes": nodes,
        "jobs": jobs,
    }


def capacity(nodes: list[dict[str, Any]], jobs: list[dict[str, Any]] | None = None) -> dict[str, int]:
    plan = compute_plan(parse_snapshot(snapshot_data(nodes, jobs or [])), Config())
    return dict(plan.pools[0].capacity)


def gpu_node(name: str, state: str = "idle", gpus: dict[str, int] | None = None) -> dict[str, Any]:
    return {"name": name, "partitions": ["gpu"], "state": state, "tres": {"cpu": 64, "mem": 512000, **(gpus or {})}}


@pytest.mark.parametrize(
    ("state", "counts"),
    [
        ("idle", True),
        ("mix-", True),  # planned by backfill: still runs jobs
        ("alloc@", True),  # reboot requested, not yet issued
        ("down*", False),
        ("idle*", False),  # not responding
        ("idle~", False),  # powered down
        ("idle#", False),  # powering up
        ("idle%", False),  # powering down
        ("idle!", False),  # power down pending
        ("idle$", False),  # maintenance reservation
        ("mix^", False),  # reboot issued
        ("drain*", False),
        ("IDLE~", False),
        ("idle+drain", False),
        ("mix-+drain", False),
    ],
)
def test_node_states_with_slurms_suffixes(state: str, counts: bool) -> None:
    nodes = [gpu_node("a"), gpu_node("b", state)]
    assert capacity(nodes)["cpu"] == (128 if counts else 64)


def test_suffixes_spelled_out() -> None:
    assert node_state_flags("down*") == {"down", "not_responding"}
    assert node_state_flags("idle~+drain") == {"idle", "powered_down", "drain"}
    assert node_state_flags("mix-") == {"mix"}


def test_typed_gpus_alone_count_as_gpus() -> None:
    nodes = [gpu_node("a", gpus={"gres/gpu:a100": 4, "gres/gpu:v100": 2}), gpu_node("b", gpus={"gres/gpu": 8})]
    jobs = [
        {"job_id": "1", "account": "x", "partition": "gpu", "state": "RUNNING", "tres": {"cpu": 1, "gres/gpu:a100": 3}},
        {"job_id": "2", "account": "y", "partition": "gpu", "state": "RUNNING", "tres": {"cpu": 1, "gres/gpu": 2}},
        {"job_id": "3", "account": "z", "partition": "gpu", "state": "PENDING", "tres": {"cpu": 1, "gres/gpu:v100": 1}},
    ]
    plan = compute_plan(parse_snapshot(snapshot_data(nodes, jobs)), Config())
    assert plan.pools[0].capacity["gres/gpu"] == 14
    usage = {a.account: a.usage["gres/gpu"] for a in plan.accounts}
    assert usage["x"] == 3 and usage["y"] == 2
    shares = {a.account: a.dominant_share for a in plan.accounts}
    assert shares["x"] == pytest.approx(3 / 14)


def test_a_typed_total_is_not_counted_twice() -> None:
    jobs = [
        {
            "job_id": "1",
            "account": "x",
            "partition": "gpu",
            "state": "RUNNING",
            "tres": {"cpu": 1, "gres/gpu": 3, "gres/gpu:a100": 3},
        },
    ]
    plan = compute_plan(parse_snapshot(snapshot_data([gpu_node("a", gpus={"gres/gpu": 8})], jobs)), Config())
    assert plan.accounts[0].usage["gres/gpu"] == 3


def test_a_node_without_tres_is_a_node_without_capacity() -> None:
    """docs/formats.md requires only a node's name."""
    assert capacity([gpu_node("a"), {"name": "b"}])["cpu"] == 64
