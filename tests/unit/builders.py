"""Small builders of snapshots for the engine's tests."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from slurm_drf.model.types import EMPTY_TRES, Job, Node, Snapshot, freeze_tres

_ids = itertools.count(1)


def node(name: str = "n1", partitions: Sequence[str] = ("main",), state: str = "idle", **tres: int) -> Node:
    return Node(name, tuple(partitions), state, freeze_tres(_names(tres)))


def job(
    account: str,
    state: str = "PENDING",
    partition: str = "main",
    job_id: str | None = None,
    priority: int = 1000,
    nice: int = 0,
    held: bool = False,
    submit_time: float = 0.0,
    array_tasks: int = 1,
    user: str = "u",
    **tres: int,
) -> Job:
    return Job(
        job_id or str(next(_ids)),
        account,
        user,
        partition,
        state,
        priority,
        nice,
        held,
        submit_time,
        array_tasks,
        freeze_tres(_names(tres)),
    )


def _names(tres: Mapping[str, int]) -> dict[str, int]:
    """Keyword-friendly names: gpu -> gres/gpu."""
    return {("gres/gpu" if k == "gpu" else k): v for k, v in tres.items()}


def snapshot(
    nodes: Sequence[Node],
    jobs: Sequence[Job],
    *,
    slurm_version: str | None = None,
    priority_weights: Mapping[str, int] = EMPTY_TRES,
    priority_type: str | None = None,
    scheduler_parameters: Mapping[str, int] = EMPTY_TRES,
) -> Snapshot:
    return Snapshot(
        "test",
        "2026-11-30T00:00:00Z",
        tuple(nodes),
        tuple(jobs),
        slurm_version=slurm_version,
        priority_weights=priority_weights,
        priority_type=priority_type,
        scheduler_parameters=scheduler_parameters,
    )
