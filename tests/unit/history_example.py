"""The worked example of docs/rule.md §6, for the tests of what history shows.

One pool of 64 CPUs and 8 GPUs, a half-life of one day, weight 0.5.
`physics` ran the whole pool from two days ago to one day ago and nothing
since; `chemistry` ran nothing. Each submits three jobs of 4 CPUs and 1 GPU
(physics 100-102, chemistry 110-112). The past is physics 8/3 GPUs and 64/3
CPUs; it adds round(0.5 x that): 1 GPU and 11 CPUs.
"""

from __future__ import annotations

from slurm_drf.config.settings import Config, HistoryConfig
from slurm_drf.model.types import Snapshot
from slurm_drf.policy.decayed_usage import UsageByPool, UsageRecord, decayed_past
from tests.unit.builders import job, node, snapshot

DAY = 86400.0
HISTORY = HistoryConfig(half_life_s=DAY, weight=0.5)
CONFIG = Config(resources=("cpu", "gres/gpu"), history=HISTORY)
PURE = Config(resources=("cpu", "gres/gpu"))
# What the past adds to physics (docs/rule.md §6), and the share it gives: max(11/64, 1/8).
PHYSICS_PAST = {"cpu": 11, "gres/gpu": 1}
PHYSICS_SHARE = 11 / 64


def example_past() -> UsageByPool:
    records = [
        UsageRecord(0.0, {"default": {"physics": {"cpu": 64.0, "gres/gpu": 8.0}}}),
        UsageRecord(DAY, {"default": {"physics": {"cpu": 0.0, "gres/gpu": 0.0}}}),
    ]
    return decayed_past(records, 2 * DAY, DAY, max_gap=DAY)


def example_snapshot() -> Snapshot:
    return snapshot(
        [node(cpu=64, mem=256_000, gpu=8)],
        [
            job(account, job_id=str(100 + n + 10 * k), submit_time=float(n), cpu=4, gpu=1)
            for n in range(3)
            for k, account in enumerate(("physics", "chemistry"))
        ],
    )
