"""Rendering of plans: JSON (SPEC §3) and aligned text tables. Pure.

Sits under the CLI and the daemon; takes a Plan, returns data or text.
Writing files (atomically) is left to the callers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slurm_drf.drf import JobPlan, Plan, PlanJobs
from slurm_drf.model import PLAN_FORMAT

# Plan job entries: every key always present, the value under the mode's name.
_ENTRY_FIELDS = ("job_id", "account", "user", "pool", "order", "level", "value", "current", "action", "reason",
                 "tie", "user_nice", "array_tasks")


def render_job_entries(jobs: Sequence[JobPlan], mode: str) -> list[dict[str, Any]]:
    """The plan's job entries; straight from the columns when the plan has them."""
    keys = [mode if name == "value" else name for name in _ENTRY_FIELDS]
    if isinstance(jobs, PlanJobs):
        rows: Any = zip(*(jobs.columns[name] for name in _ENTRY_FIELDS), strict=True)
    else:
        rows = ((getattr(job, name) for name in _ENTRY_FIELDS) for job in jobs)
    return [dict(zip(keys, row, strict=True)) for row in rows]


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


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns aligned; numbers to the right, text to the left."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    numeric = [all(_is_number(row[i]) for row in rows) and bool(rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(headers)), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def _column(jobs: Sequence[JobPlan], name: str) -> Sequence[Any]:
    if isinstance(jobs, PlanJobs):
        return jobs.columns[name]
    return [getattr(job, name) for job in jobs]


def _row(jobs: Sequence[JobPlan], index: int) -> JobPlan:
    return jobs.row(index) if isinstance(jobs, PlanJobs) else jobs[index]


def render_plan_table(plan: Plan, limit: int = 20) -> str:
    """Accounts by share and the head of each pool's order, for a terminal."""
    pools, orders, actions = (_column(plan.jobs, name) for name in ("pool", "order", "action"))
    out: list[str] = []
    for pool in plan.pools:
        capacity = ", ".join(f"{k}={v}" for k, v in pool.capacity.items())
        out.append(f"pool {pool.name}: {pool.nodes} node(s), {capacity}")
        accounts = [a for a in plan.accounts if a.pool == pool.name]
        out.append(render_table(
            ["rank", "account", "weight", "running", "pending", *plan.resources, "dominant", "share"],
            [[a.rank, a.account, float(a.weight), a.running_jobs, a.pending_jobs,
              *(a.shares[r] for r in plan.resources), a.dominant_resource, a.weighted_share]
             for a in accounts]))
        indices = [i for i, (name, order) in enumerate(zip(pools, orders, strict=True))
                   if name == pool.name and order is not None]
        shown = [_row(plan.jobs, i) for i in (indices[:limit] if limit > 0 else indices)]
        out.append("")
        out.append(render_table(
            ["order", "job", "account", "level", plan.mode, "current", "action"],
            [[j.order, j.job_id + (" (tie)" if j.tie else ""), j.account, j.level, j.value, j.current, j.action]
             for j in shown]))
        if len(shown) < len(indices):
            out.append(f"... {len(indices) - len(shown)} more pending job(s) in pool {pool.name}")
        out.append("")
    reasons: dict[str, int] = {}
    for i, action in enumerate(actions):
        if action == "skip":
            key = _row(plan.jobs, i).reason or "skipped"
            reasons[key] = reasons.get(key, 0) + 1
    if reasons:
        out.append("skipped: " + ", ".join(f"{n} {r}" for r, n in sorted(reasons.items())))
    writes = sum(1 for action in actions if action == "set")
    out.append(f"{writes} write(s) needed, mode {plan.mode}, scale {plan.scale}")
    out.extend(f"warning: {w}" for w in plan.warnings)
    return "\n".join(out)
