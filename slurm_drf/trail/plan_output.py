"""A Plan as the `plan` and `once` verbs print it: the plan JSON (docs/formats.md) and the table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slurm_drf.model.types import PLAN_FORMAT
from slurm_drf.policy.plan import JOB_COLUMNS, JobPlan, Plan, PlanJobs
from slurm_drf.trail.text import format_capacity, render_table, terminal_text

# Plan job entries: every key always present, the value under the mode's name.
_ENTRY_FIELDS = JOB_COLUMNS


def render_job_entries(jobs: Sequence[JobPlan], mode: str) -> list[dict[str, Any]]:
    """The plan's job entries; straight from the columns when the plan has them."""
    keys = [mode if name == "value" else name for name in _ENTRY_FIELDS]
    if isinstance(jobs, PlanJobs):
        rows: Any = zip(*(jobs.columns[name] for name in _ENTRY_FIELDS), strict=True)
    else:
        rows = ((getattr(job, name) for name in _ENTRY_FIELDS) for job in jobs)
    return [dict(zip(keys, row, strict=True)) for row in rows]


def ordered_job_count(plan: Plan) -> int:
    """How many pending jobs the plan orders (skipped ones left out), from the columns when it has them."""
    jobs = plan.jobs
    orders = jobs.columns["order"] if isinstance(jobs, PlanJobs) else [job.order for job in jobs]
    return sum(1 for order in orders if order is not None)


def render_plan_json(plan: Plan) -> dict[str, Any]:
    """The plan as JSON-ready data, in the contract's shape."""
    return {
        "format": PLAN_FORMAT,
        "cluster": plan.cluster,
        "taken_at": plan.taken_at,
        "mode": plan.mode,
        "scale": plan.scale,
        "epoch": plan.state.epoch,
        "resources": list(plan.resources),
        "pools": [
            {"name": p.name, "partitions": list(p.partitions), "nodes": p.nodes, "capacity": dict(p.capacity)}
            for p in plan.pools
        ],
        "accounts": [
            {
                "account": a.account,
                "pool": a.pool,
                "weight": float(a.weight),
                "running_jobs": a.running_jobs,
                "pending_jobs": a.pending_jobs,
                "usage": dict(a.usage),
                "shares": dict(a.shares),
                "dominant_resource": a.dominant_resource,
                "dominant_share": a.dominant_share,
                "weighted_share": a.weighted_share,
                "rank": a.rank,
            }
            for a in plan.accounts
        ],
        "jobs": render_job_entries(plan.jobs, plan.mode),
        "warnings": list(plan.warnings),
    }


def render_plan_table(plan: Plan, limit: int = 20) -> str:
    """Accounts by share and the head of each pool's order, for a terminal."""
    pools, orders, actions = (plan.column(name) for name in ("pool", "order", "action"))
    out: list[str] = []
    for pool in plan.pools:
        out.append(f"pool {terminal_text(pool.name)}: {pool.nodes} node(s), {format_capacity(pool.capacity)}")
        accounts = [a for a in plan.accounts if a.pool == pool.name]
        out.append(
            render_table(
                ["rank", "account", "weight", "running", "pending", *plan.resources, "dominant", "share"],
                [
                    [
                        a.rank,
                        a.account,
                        float(a.weight),
                        a.running_jobs,
                        a.pending_jobs,
                        *(a.shares[r] for r in plan.resources),
                        a.dominant_resource,
                        a.weighted_share,
                    ]
                    for a in accounts
                ],
            )
        )
        indices = [
            i
            for i, (name, order) in enumerate(zip(pools, orders, strict=True))
            if name == pool.name and order is not None
        ]
        shown = indices[:limit] if limit > 0 else indices
        # Only the columns shown: the user of each of 100,000 jobs is not needed here.
        job_id, tie, account, level, value, current, action = (
            plan.column(name) for name in ("job_id", "tie", "account", "level", "value", "current", "action")
        )
        out.append("")
        out.append(
            render_table(
                ["order", "job", "account", "level", plan.mode, "current", "action"],
                [
                    [
                        orders[i],
                        job_id[i] + (" (tie)" if tie[i] else ""),
                        account[i],
                        level[i],
                        value[i],
                        current[i],
                        action[i],
                    ]
                    for i in shown
                ],
            )
        )
        if len(shown) < len(indices):
            out.append(f"... {len(indices) - len(shown)} more pending job(s) in pool {terminal_text(pool.name)}")
        out.append("")
    reasons: dict[str, int] = {}
    reason = plan.column("reason")
    for i, action in enumerate(actions):
        if action == "skip":
            key = reason[i] or "skipped"
            reasons[key] = reasons.get(key, 0) + 1
    if reasons:
        out.append("skipped: " + terminal_text(", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))))
    writes = sum(1 for action in actions if action == "set")
    out.append(f"{writes} write(s) needed, mode {plan.mode}, scale {plan.scale}")
    out.extend(f"warning: {terminal_text(w)}" for w in plan.warnings)
    return "\n".join(out)
