"""How `explain` shows an Explanation (trail.explain): text for a person, JSON for a program. Pure."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any, Final

from slurm_drf.policy.plan_columns import AccountShare
from slurm_drf.trail.explain import Explanation, HistoryEffect, TieDetail
from slurm_drf.trail.reclaim_shown import event_json, explain_lines
from slurm_drf.trail.text import (
    format_capacity,
    format_share,
    format_tres,
    format_weight,
    node_label,
    render_table,
    terminal_text,
)

_REASON_TEXT: Final = {
    "own_queue": "earlier in its own account's queue (Slurm's order)",
    "lower_level": "lower level",
    "share_vector": "equal level, smaller share vector (next-largest share)",
    "tie_wins": "full tie, fewer recent tie wins",
    "rotation": "full tie, equal tie wins, this cycle's rotation",
    "tree_walk": "another branch of the tree, of lower weighted share where the paths part",
    "guarantee": "within its account's guarantee (docs/rule.md §9)",
    "limit": "this job is over its account's limit (docs/rule.md §9)",
}


def _fraction_text(value: Fraction) -> str:
    return f"{float(value):.6g}" + (
        f" (exactly {value})"
        if value.denominator != 1 and value.denominator < 10**6 and float(value) != round(float(value), 6)
        else ""
    )


def _inert(e: Explanation) -> Explanation:
    """The names from Slurm in `e` with control characters escaped (`terminal_text`)."""
    return replace(
        e,
        job_id=terminal_text(e.job_id),
        account=terminal_text(e.account),
        user=terminal_text(e.user),
        pool=None if e.pool is None else terminal_text(e.pool),
        reason=None if e.reason is None else terminal_text(e.reason),
        notes=tuple(terminal_text(note) for note in e.notes),
        account_share=None if e.account_share is None else replace(e.account_share, account=terminal_text(e.account)),
        tie_detail=None if e.tie_detail is None else _inert_tie(e.tie_detail),
    )


def _inert_tie(d: TieDetail) -> TieDetail:
    return replace(
        d,
        accounts=tuple(terminal_text(a) for a in d.accounts),
        wins={terminal_text(a): v for a, v in d.wins.items()},
        rotation_rank={terminal_text(a): v for a, v in d.rotation_rank.items()},
    )


def render_explanation_text(e: Explanation) -> str:
    """The explanation for a person, in a few paragraphs."""
    e = _inert(e)
    out = _job_lines(e)
    share = e.account_share
    if share is not None:
        out.extend(_account_lines(e, share))
    if e.status == "ordered" and e.tree:
        out.extend(_tree_lines(e))
    elif e.status == "ordered":
        out.extend(_level_lines(e, share))
        out.append("")
        out.extend(_ahead_lines(e))
        out.append("")
        out.extend(_tie_lines(e))
    if e.status in ("ordered", "skipped"):
        out.append("")
        out.extend(_value_lines(e))
    if e.reclaims:
        out.append("")
        out.extend(explain_lines(e.reclaim_names or (e.job_id,), e.reclaims))
    out.extend(f"note: {n}" for n in e.notes)
    return "\n".join(out) + "\n"


def _job_lines(e: Explanation) -> list[str]:
    """The job: its account, user and state, its place or why it is skipped, and what it asks for."""
    out: list[str] = []
    head = f"job {e.job_id}: account {e.account}, user {e.user}, {e.state.lower()}"
    if e.status == "ordered":
        out.append(f"{head}; place {e.order} of {e.pool_jobs} (0 is first) in pool {e.pool}'s DRF order")
    elif e.status == "skipped":
        out.append(f"{head}; skipped: {e.reason} — the daemon does not write to it")
    elif e.status == "gone":
        user = f", user {e.user}" if e.user else ""
        out.append(f"job {e.job_id}: account {e.account}{user}, pool {e.pool}; no longer in the queue")
    else:
        out.append(head)
    if e.array_tasks > 1:
        out.append(f"  a pending array of {e.array_tasks} tasks: it counts as {e.array_tasks} jobs")
    if e.demand:
        what = "holds" if e.status == "running" else "demand"
        out.append(f"  {what}: " + format_capacity(e.demand))
    return out


def _account_lines(e: Explanation, share: AccountShare) -> list[str]:
    """The job's account in its pool: weight, rank, each resource's use and share, the weighted share."""
    out = [
        "",
        f"account {share.account} in pool {share.pool}: weight {format_weight(share.weight)}, "
        f"rank {share.rank} by weighted share, {share.running_jobs} running, "
        f"{share.pending_jobs} pending",
    ]
    past = e.history is not None
    rows: list[list[object]] = [
        [
            r,
            format_tres(r, e.capacity.get(r, "-")) if e.capacity else "-",
            format_tres(r, share.usage.get(r, 0)),
            *([format_tres(r, share.past.get(r, 0))] if past else []),
            format_share(share.shares.get(r, 0.0)),
            "dominant" if r == share.dominant_resource and share.dominant_share else "",
        ]
        for r in share.usage
    ]
    headers = ["resource", "capacity", "used", *(["past"] if past else []), "share", "note"]
    out.append(_indent(render_table(headers, rows)))
    out.append(
        f"  dominant share {format_share(share.dominant_share)} / weight {format_weight(share.weight)}"
        f" = weighted share {format_share(share.weighted_share)}" + (" (used + past)" if past else "")
    )
    if e.history is not None:
        out.extend(_history_lines(e, e.history))
    return out


def _level_lines(e: Explanation, share: AccountShare | None) -> list[str]:
    """An ordered job of a flat plan: its level, from the usage before it, and the dominant resource."""
    assert e.level_exact is not None
    out = [
        "",
        f"level {_fraction_text(e.level_exact)}: the account's weighted dominant share over its "
        f"running usage{' and past' if e.history is not None else ''} plus its {e.earlier_own} "
        "earlier pending job(s) in this pool",
    ]
    rows = [
        [
            r,
            format_tres(r, e.capacity.get(r, 0)),
            format_tres(r, e.usage_before.get(r, 0)),
            format_share(e.shares_before.get(r, 0.0)),
        ]
        for r in e.usage_before
    ]
    out.append(_indent(render_table(["resource", "capacity", "usage before", "share"], rows)))
    usable = {r: s for r, s in e.shares_before.items() if e.capacity.get(r, 0) > 0}
    if usable and share is not None:
        top = max(usable, key=lambda r: usable[r])
        out.append(
            f"  dominant {top} {format_share(usable[top])} / weight {format_weight(share.weight)} "
            f"= level {float(e.level_exact):.6g}"
        )
    return out


def _tie_lines(e: Explanation) -> list[str]:
    """Whether a full tie decided the place, and how the tie rule broke it."""
    if not (e.tie and e.tie_detail is not None):
        return [
            "no tie: no other account's job has both its level and its share vector (at an equal level the "
            "smaller share vector goes first, as the table above says)"
        ]
    d = e.tie_detail
    others = [a for a in d.accounts if a != e.account]
    wins = ", ".join(f"{a} {d.wins.get(a, 0.0):.3g}" for a in d.accounts)
    ranks = ", ".join(f"{a} {d.rotation_rank[a]}" for a in sorted(d.accounts, key=lambda a: d.rotation_rank[a]))
    return [
        f"a tie decided its place: {d.jobs} jobs of {len(d.accounts)} accounts "
        f"({', '.join(others)} besides {e.account}) have exactly this level and share vector",
        f"  broken by fewer tie wins (at the tie: {wins}), then the rotation (this cycle: {ranks})",
        f"  it went after {d.lost_to} and before {d.won_against} of the other accounts' tied jobs",
    ]


def _value_lines(e: Explanation) -> list[str]:
    """The value the plan gives the job, what Slurm holds now, and the action."""
    out = []
    if e.value is not None:
        out.append(f"value: {e.mode} {e.value}{_band_text(e)}")
        if e.mode == "nice" and e.user_nice:
            out.append(f"  includes the user's own nice {e.user_nice}")
    now = "unknown" if e.current is None else str(e.current)
    out.append(
        f"Slurm has {e.mode} {now} now; action: {e.action}"
        + (" (the next cycle writes the value)" if e.action == "set" else "")
    )
    return out


def _ahead_lines(e: Explanation) -> list[str]:
    """How many jobs are ahead and behind, and per account why those ahead go first."""
    out = [f"ahead of it: {e.ahead_total} job(s); behind it: {e.behind}"]
    if e.ahead:
        rows = [[a.account, a.jobs, "; ".join(f"{n} {_REASON_TEXT[k]}" for k, n in a.reasons.items())] for a in e.ahead]
        out.append(_indent(render_table(["account", "jobs", "why they go first"], rows)))
    return out


def _tree_lines(e: Explanation) -> list[str]:
    """An ordered job of a tree plan: its path, each node's share and rank, the jobs ahead, the tie rule's part."""
    leaf = e.tree[-1].path
    out = [
        "",
        f"path {terminal_text(leaf)} in the account tree (H-DRF, docs/rule.md §7): at every level the walk "
        "takes the child of least weighted share among those with a job left",
    ]
    rows = [
        [
            "  " * (depth - 1) + terminal_text(node_label(s.name, s.kind)),
            format_share(s.share_at_placement),
            format_share(s.share_now),
            f"{s.rank} of {s.siblings}",
        ]
        for depth, s in enumerate(e.tree, start=1)
    ]
    out.append(_indent(render_table(["node", "share at placement", "share now", "rank among siblings"], rows)))
    out.append(
        "  share now: before any pending job is placed; rank: 1 + the siblings with a lower share now "
        "(a single child is one node with its chain)"
    )
    if e.level_exact is not None:
        out.append(
            f"  level {_fraction_text(e.level_exact)}: its account's weighted dominant share before it, "
            "in this order (§2's measure, shown for comparison; the walk above placed it)"
        )
    out.append("")
    out.extend(_ahead_lines(e))
    out.append("")
    if e.tie:
        out.append(
            "a tie decided at some level of its path: siblings with exactly this weighted share and share "
            "vector, broken by fewer tie wins, then this cycle's rotation (per node)"
        )
    else:
        out.append("no tie at any level of its path")
    return out


def _history_lines(e: Explanation, h: HistoryEffect) -> list[str]:
    """What history does to the job: what the past adds, the share with and without, the place without."""
    added = format_capacity(h.added) if h.added else "nothing"
    lines = [
        f"history: the decayed past adds {added} to {e.account}'s usage (weighted share "
        f"{format_share(h.present_share)} running alone, {format_share(h.weighted_share)} with the past)"
    ]
    if e.status == "ordered" and h.order_without is not None and h.level_without is not None:
        level = (
            f"level {h.level_without:.6g} either way"
            if h.level_without == e.level
            else f"level {h.level_without:.6g} instead of {e.level or 0.0:.6g}"
        )
        if h.order_without == e.order:
            lines.append(f"  without it this job would keep its place {e.order} ({level})")
        else:
            lines.append(f"  without it this job would be at place {h.order_without} instead of {e.order} ({level})")
    return lines


def _band_text(e: Explanation) -> str:
    if e.band == "exact":
        return (
            f" (exact band, the pool's first {e.exact} jobs: kept at least {e.gap} from its neighbours' values, "
            "so Slurm's other factors cannot swap them)"
            if e.gap > 1
            else f" (exact band, the pool's first {e.exact} jobs: strictly between its neighbours' values)"
        )
    if e.band == "coarse":
        return (
            f" (coarse band, after the pool's first {e.exact} jobs: roughly in place, rewritten when it "
            "comes near the exact band or its place moves far)"
        )
    return ""


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def render_explanation_json(e: Explanation) -> dict[str, Any]:
    share = e.account_share
    data: dict[str, Any] = {
        "job_id": e.job_id,
        "status": e.status,
        "state": e.state,
        "account": e.account,
        "user": e.user,
        "pool": e.pool,
        "mode": e.mode,
        "action": e.action,
        "reason": e.reason,
        "order": e.order,
        "pool_jobs": e.pool_jobs,
        "level": e.level,
        "level_exact": None if e.level_exact is None else str(e.level_exact),
        "value": e.value,
        "band": e.band,
        "current": e.current,
        "user_nice": e.user_nice,
        "array_tasks": e.array_tasks,
        "demand": dict(e.demand),
        "account_share": None
        if share is None
        else {
            "weight": float(share.weight),
            "rank": share.rank,
            "running_jobs": share.running_jobs,
            "pending_jobs": share.pending_jobs,
            "usage": dict(share.usage),
            "shares": dict(share.shares),
            "dominant_resource": share.dominant_resource,
            "dominant_share": share.dominant_share,
            "weighted_share": share.weighted_share,
        },
        "capacity": dict(e.capacity),
        "usage_before": dict(e.usage_before),
        "shares_before": dict(e.shares_before),
        "earlier_own": e.earlier_own,
        "ahead_total": e.ahead_total,
        "behind": e.behind,
        "ahead": [{"account": a.account, "jobs": a.jobs, "reasons": dict(a.reasons)} for a in e.ahead],
        "tie": e.tie,
        "tie_replayed": e.tie_replayed,
        "tie_detail": None
        if e.tie_detail is None
        else {
            "accounts": list(e.tie_detail.accounts),
            "jobs": e.tie_detail.jobs,
            "wins": dict(e.tie_detail.wins),
            "rotation_rank": dict(e.tie_detail.rotation_rank),
            "won_against": e.tie_detail.won_against,
            "lost_to": e.tie_detail.lost_to,
        },
        "notes": list(e.notes),
    }
    if e.tree:
        data["tree"] = [
            {
                "path": s.path,
                "name": s.name,
                "kind": s.kind,
                "share_at_placement": s.share_at_placement,
                "share_now": s.share_now,
                "rank": s.rank,
                "siblings": s.siblings,
            }
            for s in e.tree
        ]
    names = set(e.reclaim_names or (e.job_id,))
    data["reclaims"] = [{"role": "victim" if r.job in names else "claim", **event_json(r)} for r in e.reclaims]
    if e.history is not None:
        data["history"] = {
            "past": dict(e.history.added),
            "present_share": e.history.present_share,
            "weighted_share": e.history.weighted_share,
            "order_without": e.history.order_without,
            "level_without": e.history.level_without,
        }
    return data
