"""Placement tables written by the daemon's own renderer, and the jobs and partitions the tests submit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from fractions import Fraction

from slurm_drf.policy.placement import AccountEntry, PlacementTable, PoolTable
from slurm_drf.trail.placement import render_placement
from tests.unit.submit.lua import LuaValue

RESOURCES = ("cpu", "mem", "gres/gpu")
CAPACITY = (256, 2_048_000, 32)
WRITTEN = 1_000_000.0
STALE_AFTER = 180.0

# What the plugin shows of the partitions (src/plugins/job_submit/lua: _part_rec_field).
PARTS: Mapping[str, LuaValue] = {
    "gpu": {"flag_default": 1, "def_mem_per_cpu": 1000, "max_mem_per_node": 0, "max_share": 1},
    "cpu": {"flag_default": 0, "def_mem_per_cpu": 1000, "max_mem_per_node": 0, "max_share": 1},
    "debug": {"flag_default": 0, "def_mem_per_cpu": 1000, "max_mem_per_node": 0, "max_share": 1},
    "other": {"flag_default": 0, "def_mem_per_cpu": 1000, "max_mem_per_node": 0, "max_share": 1},
}


def pool(
    levels: Sequence[float] = (),
    values: Sequence[int] = (),
    accounts: Mapping[str, AccountEntry] | None = None,
    **changes: object,
) -> PoolTable:
    """The `main` pool (partitions gpu and cpu) with `vision` (weight 2) and `nlp` listed, `ops` excluded."""
    base = PoolTable(
        name="main",
        partitions=("gpu", "cpu"),
        capacity=CAPACITY,
        default_weight=Fraction(1),
        best=-1_000_000,
        worst=-1,
        gap=10,
        accounts=accounts
        if accounts is not None
        else {
            "nlp": AccountEntry(Fraction(1), (16, 128_000, 4)),
            "vision": AccountEntry(Fraction(2), (64, 512_000, 16)),
        },
        excluded=frozenset({"ops"}),
        levels=tuple(levels),
        values=tuple(values),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def table(*pools: PoolTable, mode: str = "nice", written: float = WRITTEN) -> PlacementTable:
    return PlacementTable(written, STALE_AFTER, mode, RESOURCES, pools)


def text(placement: PlacementTable) -> str:
    """The table as the daemon writes it."""
    return render_placement(placement).decode("ascii")


def gpu_job(account: str | None = "vision", gpus: int = 1, **fields: LuaValue) -> dict[str, LuaValue]:
    """A job of 8 CPUs, 64,000 MiB and `gpus` GPUs, as the plugin shows `sbatch -c 8 --mem=64000 --gpus=N`."""
    job: dict[str, LuaValue] = {
        "min_cpus": 8,
        "cpus_per_task": 8,
        "min_mem_per_node": 64_000,
        "tres_per_job": f"gres:gpu:{gpus}",
    }
    if account is not None:
        job["account"] = account
    job.update(fields)
    return job


GPU_DEMAND = (8, 64_000, 1)
