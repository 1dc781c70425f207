"""What each arm of a replay runs, and the Slurm it runs against. Pure.

An arm is Slurm alone (`slurm`) or slurm-drf's daemon beside it with one
config (`drf`, `drf-factor`, `drf-history`, `hdrf`, `drf-reclaim`). Every arm runs
against the same Slurm: the strongest native approximation of DRF a
careful administrator would configure (SPEC §8, `build_slurm_lines`), so
the only difference between arms is the daemon. Each arm names the
simulator policy that predicts it (the calibration).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from slurm_drf.config.durations import parse_duration
from slurm_drf.config.reclaim_keys import DEFAULT_POOL, MIN_AFTER
from slurm_drf.config.settings import DEFAULT_HISTORY_HALF_LIFE, DEFAULT_HISTORY_WEIGHT
from slurm_drf.model.types import Node
from slurm_drf.replay.trace import ReplayInputError

# Slurm's default PriorityDecayHalfLife, and what the replay scales.
SLURM_HALF_LIFE: Final = 7 * 86400.0
# Fair share dominant over age (SPEC §8); the daemon's strict nice is larger than both together.
WEIGHT_FAIRSHARE: Final = 100_000
WEIGHT_AGE: Final = 1_000
# The daemon's interval in trace time: its default, 60 s.
TRACE_INTERVAL: Final = 60.0
# PriorityCalcPeriod: whole minutes, at least 1 (SPEC §8), so one wall minute at any compression.
SLURM_CALC_PERIOD_WALL: Final = 60.0
# drf-reclaim's `reclaim:` in trace time, as the simulator's drf-reclaim has it (sim.reclaim): a claim
# waits 10 minutes, no job is requeued before 10 minutes of run, at most 4 a cycle; the cooldown is the
# daemon's default day (the simulator's: never twice), longer than any replay at the compressions it allows.
RECLAIM_AFTER: Final = 600.0
RECLAIM_MIN_RUNTIME: Final = 600.0
RECLAIM_COOLDOWN: Final = 86400.0
RECLAIM_MAX_PER_CYCLE: Final = 4


@dataclass(frozen=True, slots=True)
class Arm:
    name: str
    summary: str
    # The daemon's config keys beside the defaults; None: Slurm alone, no daemon.
    daemon: Mapping[str, Any] | None
    # The simulator policy that predicts this arm.
    predicted_by: str
    tree: bool = False
    # The cluster's job_submit/lua script places jobs at submission with this arm's table (docs/rule.md §8).
    placed: bool = False
    # Guarantees (each account its weighted fair share) and reclaim over the default pool (docs/rule.md §9).
    reclaim: bool = False


ARMS: Final = {
    arm.name: arm
    for arm in (
        Arm("slurm", "Slurm alone: multifactor, Fair Tree, MAX_TRES, normalised billing", None, "multifactor"),
        Arm("drf", "the daemon, strict nice mode", {"mode": "nice", "weighting": "strict"}, "drf-labels"),
        Arm(
            "drf-placed",
            "the daemon, strict nice mode, placing jobs at submission (job_submit/lua)",
            {"mode": "nice", "weighting": "strict"},
            "drf-placed",
            placed=True,
        ),
        Arm(
            "drf-factor",
            "the daemon, nice mode weighted as one factor",
            {"mode": "nice", "weighting": "factor"},
            "drf-labels",
        ),
        Arm(
            "drf-history", "the daemon with memory of past use", {"mode": "nice", "weighting": "strict"}, "drf-history"
        ),
        Arm(
            "hdrf",
            "the daemon over the account tree (H-DRF)",
            {"mode": "nice", "weighting": "strict"},
            "hdrf",
            tree=True,
        ),
        Arm(
            "drf-reclaim",
            "the daemon with guarantees and reclaim",
            {"mode": "nice", "weighting": "strict"},
            "drf-reclaim",
            reclaim=True,
        ),
    )
}


def parse_arm(name: str) -> Arm:
    arm = ARMS.get(name)
    if arm is None:
        raise ReplayInputError(f"--arm: unknown arm {name!r}; choose one of {', '.join(ARMS)}")
    return arm


def _duration(seconds: float) -> str:
    """A whole number of seconds for the daemon's config, at least 1."""
    return f"{max(1, round(seconds))}s"


def build_daemon_config(
    arm: Arm, compression: float, state_dir: str, base: Mapping[str, Any], placement_table: str | None = None
) -> dict[str, Any]:
    """The daemon's config for `arm`: `base` (the user's config keys) with the arm's and the replay's over it.

    `placement_table` is where the cluster's job_submit script reads its table: the placing arm
    writes it there, every other arm none (so that no job of theirs is placed at submission).
    """
    assert arm.daemon is not None
    if arm.placed and not placement_table:
        raise ReplayInputError(
            f"--arm {arm.name}: needs --placement-table, where the cluster's job_submit.lua reads its table "
            "(docs/submit.md; the sandbox's: $SLURM_SANDBOX_PLACEMENT)"
        )
    config = dict(base)
    config.update(arm.daemon)
    config["interval"] = _duration(TRACE_INTERVAL / compression)
    config["state_dir"] = state_dir
    config["hierarchy"] = "tree" if arm.tree else "flat"
    config.pop("report_dir", None)
    config.pop("lease_dir", None)
    # Only drf-reclaim requeues: its `reclaim:` is the replay's, whatever the user's config says.
    config.pop("reclaim", None)
    if arm.reclaim:
        config["reclaim"] = build_reclaim_keys(compression)
    config["dry_run"] = False
    config["placement"] = {"path": placement_table} if arm.placed else None
    # Only drf-history remembers past use: the user's `history:` sets its weight and half-life.
    history = config.pop("history", None)
    if arm.name == "drf-history":
        config["history"] = _compressed_history(history, compression)
    return config


def build_reclaim_keys(compression: float) -> dict[str, Any]:
    """drf-reclaim's `reclaim:`: the simulator's settings (`RECLAIM_*`, trace time) compressed.

    Each account is guaranteed its weighted fair share of the pool (`share_floor: 1`, no account
    named: policy.guarantees.floor_groups), as the simulator's drf-reclaim guarantees it. The daemon
    takes no `after` below a wall minute (config.reclaim_keys.MIN_AFTER): at a compression that
    would need one, the arm is refused, naming the largest compression that works.
    """
    after = RECLAIM_AFTER / compression
    if round(after) < MIN_AFTER:
        largest = RECLAIM_AFTER / MIN_AFTER
        raise ReplayInputError(
            f"--arm drf-reclaim: reclaim.after ({RECLAIM_AFTER / 60:g} trace minutes) would be {after:g} wall "
            f"seconds at --compress {compression:g}, and the daemon waits at least {MIN_AFTER:g} "
            f"(reclaim.after >= 1 minute): use --compress {largest:g} or less"
        )
    return {
        "pools": [DEFAULT_POOL],
        "after": _duration(after),
        "min_runtime": _duration(RECLAIM_MIN_RUNTIME / compression),
        "cooldown": _duration(RECLAIM_COOLDOWN / compression),
        "max_per_cycle": RECLAIM_MAX_PER_CYCLE,
        "share_floor": 1,
    }


def _compressed_history(given: Any, compression: float) -> dict[str, Any]:
    """drf-history's `history:`: the user's weight and half-life (in trace time), defaults 0.5 and 14 days."""
    given = given if isinstance(given, Mapping) else {}
    raw = given.get("half_life")
    trace_half_life_s = DEFAULT_HISTORY_HALF_LIFE if raw is None else parse_duration(raw)
    weight = given.get("weight")
    return {
        "half_life": _duration(trace_half_life_s / compression),
        "weight": DEFAULT_HISTORY_WEIGHT if weight is None else weight,
    }


def _minutes(seconds: float) -> int:
    return max(1, math.ceil(seconds / 60))


def build_billing_weights(nodes: Sequence[Node]) -> str:
    """TRESBillingWeights under which a whole node bills the same whatever fills it (SPEC §8).

    CPU weighs 1; memory and GPUs weigh so that a node's memory or GPUs
    bill as much as its CPUs (64 CPUs, 500 GiB, 8 GPUs: CPU=1.0,Mem=0.128G,GRES/gpu=8.0).
    """
    eligible = [n for n in nodes if n.eligible]
    if not eligible:
        raise ReplayInputError("the cluster has no node that can run jobs")
    return billing_weights(max(eligible, key=lambda n: int(n.tres.get("cpu", 0))).tres)


def billing_weights(tres: Mapping[str, float]) -> str:
    """`build_billing_weights` for one node's TRES (cpu, mem in MiB, gres/gpu)."""
    cpu = int(tres.get("cpu", 0))
    mem_gib = int(tres.get("mem", 0)) / 1024
    gpu = int(tres.get("gres/gpu", 0))
    parts = ["CPU=1.0"]
    if mem_gib > 0:
        parts.append(f"Mem={cpu / mem_gib:.6g}G")
    if gpu > 0:
        parts.append(f"GRES/gpu={cpu / gpu:.6g}")
    return ",".join(parts)


def build_slurm_lines(compression: float) -> list[str]:
    """slurm.conf's priority lines every arm runs against, with the decay half-life compressed.

    PriorityCalcPeriod is in whole minutes and at least 1 (SPEC §8): it
    cannot be compressed, so in trace time Slurm recalculates fair share
    every `compression` minutes. The replay's result says so.
    """
    return [
        "PriorityType=priority/multifactor",
        "PriorityFlags=MAX_TRES",
        f"PriorityCalcPeriod={round(SLURM_CALC_PERIOD_WALL / 60)}",
        f"PriorityDecayHalfLife={_minutes(SLURM_HALF_LIFE / compression)}",
        f"PriorityMaxAge={_minutes(SLURM_HALF_LIFE / compression)}",
        f"PriorityWeightFairshare={WEIGHT_FAIRSHARE}",
        f"PriorityWeightAge={WEIGHT_AGE}",
        "PriorityWeightJobSize=0",
        "PriorityWeightPartition=0",
        "PriorityWeightQOS=0",
    ]
