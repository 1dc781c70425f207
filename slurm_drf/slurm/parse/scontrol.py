"""`scontrol show config`: priority weights and type, SchedulerParameters, the cluster's name,
and what reclaim needs of Slurm (JobRequeue, PreemptType and PreemptMode, SlurmUser).

The `Key = value` text both sources read; what the snapshot keeps of it is
chosen in `slurm.parse.snapshot`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slurm_drf.slurm.parse.lines import split_lines


def parse_scontrol_config(text: str) -> dict[str, str]:
    """`Key = value` lines of `scontrol show config` (first occurrence wins)."""
    out: dict[str, str] = {}
    for line in split_lines(text):
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key or " " in key:
            continue
        out.setdefault(key, value.strip())
    return out


def _config_value(text: str, key: str) -> str | None:
    value = parse_scontrol_config(text).get(key)
    return value if value and value != "(null)" else None


def parse_priority_weights(text: str) -> dict[str, int]:
    """PriorityWeight* of `scontrol show config` -> {"PriorityWeightAge": 100, ...}.

    Only whole-number weights are kept. PriorityWeightTRES (`CPU=1000,
    Mem=2000,GRES/gpu=3000`) is spread over `PriorityWeightTRES/CPU`, ... so
    that every factor that can add to a job's priority has its own integer
    weight. priority/basic prints no weights: the result is then empty.
    """
    weights: dict[str, int] = {}
    for key, value in parse_scontrol_config(text).items():
        if not key.startswith("PriorityWeight"):
            continue
        if key == "PriorityWeightTRES":
            for item in value.split(","):
                name, sep, amount = item.partition("=")
                try:
                    number = float(amount)
                except ValueError:
                    continue
                if sep and name.strip() and math.isfinite(number):
                    weights[f"PriorityWeightTRES/{name.strip()}"] = round(number)
        elif value.isdigit():
            weights[key] = int(value)
    return weights


def parse_scheduler_parameters(text: str) -> dict[str, int]:
    """The whole-number items of SchedulerParameters (`bf_max_job_test=1000,...`)."""
    out: dict[str, int] = {}
    for item in (_config_value(text, "SchedulerParameters") or "").split(","):
        name, sep, value = item.partition("=")
        if sep and name.strip() and value.strip().isdigit():
            out[name.strip()] = int(value.strip())
    return out


def parse_priority_type(text: str) -> str | None:
    """`priority/multifactor` or `priority/basic` from `scontrol show config`."""
    return _config_value(text, "PriorityType")


def parse_cluster_name(text: str) -> str | None:
    """ClusterName from `scontrol show config`."""
    return _config_value(text, "ClusterName")


@dataclass(frozen=True, slots=True)
class RequeueSettings:
    """What slurm.conf says of requeuing and cancelling others' jobs; None where it prints nothing.

    `job_requeue`: JobRequeue (1, Slurm's default: a batch job may be
    requeued unless submitted with --no-requeue; 0: only with --requeue).
    `slurm_user` and `slurm_uid`: SlurmUser, printed `slurm(64030)`.
    """

    job_requeue: bool | None = None
    preempt_type: str | None = None
    preempt_mode: str | None = None
    slurm_user: str | None = None
    slurm_uid: int | None = None


def parse_requeue_settings(text: str) -> RequeueSettings:
    """JobRequeue, PreemptType, PreemptMode and SlurmUser of `scontrol show config`."""
    settings = {
        key: value
        for key, value in parse_scontrol_config(text).items()
        if key in ("JobRequeue", "PreemptType", "PreemptMode", "SlurmUser") and value and value != "(null)"
    }
    requeue = settings.get("JobRequeue", "")
    user, _, uid = settings.get("SlurmUser", "").partition("(")
    uid = uid.removesuffix(")")
    return RequeueSettings(
        job_requeue=(requeue != "0") if requeue.isdigit() else None,
        preempt_type=settings.get("PreemptType"),
        preempt_mode=settings.get("PreemptMode"),
        slurm_user=user.strip() or None,
        slurm_uid=int(uid) if uid.isdigit() else None,
    )
