"""A Plan as the `plan` and `once` verbs print it: the plan JSON (docs/formats.md) and the table.

`render_plan_json` gives the plan as data; `render_plan_json_bytes` gives
the same document as the bytes orjson writes for it, with the job entries,
the account rows and a tree's rows built from the plan's columns instead
of one dict per row (100,000 dicts and their serialisation are a quarter
of a second of a `plan --format json` process; a tree of 100,000 accounts
has twice as many rows), and `render_plan_json_pieces` the same bytes in
pieces, for the CLI to write without joining them first.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

import orjson

from slurm_drf.model.types import PLAN_FORMAT
from slurm_drf.policy.plan import Plan
from slurm_drf.policy.plan_columns import (
    JOB_COLUMNS,
    TREE_JOB_COLUMNS,
    AccountColumns,
    AccountShare,
    JobPlan,
    PlanAccounts,
    PlanJobs,
)
from slurm_drf.trail.json_rows import (
    Listed,
    Nested,
    Splice,
    Value,
    dumps_spliced_pieces,
    float_each,
    object_list,
    object_list_pieces,
)

if TYPE_CHECKING:
    from slurm_drf.cycle.reclaim import Reclaimed
    from slurm_drf.policy.engine.tree_order import TreeRow

# Plan job entries: every key always present, the value under the mode's name;
# `path` and `path_shares` only in a plan over a tree (docs/formats.md).
_FLAT_FIELDS: Final = tuple(name for name in JOB_COLUMNS if name not in TREE_JOB_COLUMNS)


def entry_fields(plan: Plan) -> tuple[str, ...]:
    """The job columns the plan JSON's job entries hold, in order."""
    return tuple(JOB_COLUMNS) if plan.has_tree else _FLAT_FIELDS


def render_job_entries(
    jobs: Sequence[JobPlan], mode: str, fields: Sequence[str] = _FLAT_FIELDS
) -> list[dict[str, Any]]:
    """The plan's job entries; straight from the columns when the plan has them."""
    keys = [mode if name == "value" else name for name in fields]
    if isinstance(jobs, PlanJobs):
        rows: Any = zip(*(jobs.columns[name] for name in fields), strict=True)
    else:
        rows = ((getattr(job, name) for name in fields) for job in jobs)
    return [dict(zip(keys, row, strict=True)) for row in rows]


def ordered_job_count(plan: Plan) -> int:
    """How many pending jobs the plan orders (skipped ones left out), from the columns when it has them."""
    jobs = plan.jobs
    orders = jobs.columns["order"] if isinstance(jobs, PlanJobs) else [job.order for job in jobs]
    return sum(1 for order in orders if order is not None)


def render_plan_json(plan: Plan) -> dict[str, Any]:
    """The plan as JSON-ready data, in the contract's shape."""
    return {
        **_plan_head(plan),
        "jobs": render_job_entries(plan.jobs, plan.mode, entry_fields(plan)),
        "warnings": list(plan.warnings),
    }


def _plan_head(plan: Plan, tree: Callable[[Sequence[TreeRow]], Any] | None = None) -> dict[str, Any]:
    """Every key of the plan JSON before `jobs`, in order (`tree` as in `_plan_top`)."""
    return {
        **_plan_top(plan, tree),
        # blends_past reads every account: once, not once per account (issue 22, item 4).
        "accounts": [_account_entry(a, blends) for blends in [plan.blends_past] for a in plan.accounts],
    }


def _plan_top(plan: Plan, tree: Callable[[Sequence[TreeRow]], Any] | None = None) -> dict[str, Any]:
    """Every key of the plan JSON before `accounts`, in order. `tree`: what stands for a pool's
    tree rows (by default, one dict each)."""
    return {
        "format": PLAN_FORMAT,
        "cluster": plan.cluster,
        "taken_at": plan.taken_at,
        "mode": plan.mode,
        "epoch": plan.state.epoch,
        "resources": list(plan.resources),
        "pools": [
            {
                "name": p.name,
                "partitions": list(p.partitions),
                "nodes": p.nodes,
                "capacity": dict(p.capacity),
                "horizon": p.horizon,
                "exact": p.exact,
                "gap": p.gap,
                "separable": p.separable,
                **(
                    {"tree": [tree_row_entry(row) for row in p.tree] if tree is None else tree(p.tree)}
                    if p.tree
                    else {}
                ),
            }
            for p in plan.pools
        ],
    }


def _account_entry(a: AccountShare, with_past: bool) -> dict[str, Any]:
    """One account of the plan JSON; `past` and `present_share` only when the plan blends a past (docs/rule.md §6)."""
    entry: dict[str, Any] = {
        "account": a.account,
        "pool": a.pool,
        "weight": float(a.weight),
        "running_jobs": a.running_jobs,
        "pending_jobs": a.pending_jobs,
        "usage": dict(a.usage),
    }
    if with_past:
        entry["past"] = dict(a.past)
    entry |= {
        "shares": dict(a.shares),
        "dominant_resource": a.dominant_resource,
        "dominant_share": a.dominant_share,
    }
    if with_past:
        entry["present_share"] = present_share(a)
    entry |= {"weighted_share": a.weighted_share, "rank": a.rank}
    return entry


def tree_row_entry(row: TreeRow) -> dict[str, Any]:
    """One node of a pool's tree in the plan and report JSON (docs/formats.md)."""
    return {
        "path": row.path,
        "name": row.name,
        "depth": row.depth,
        "kind": row.kind,
        "weight": float(row.weight),
        "running_jobs": row.running_jobs,
        "pending_jobs": row.pending_jobs,
        "usage": dict(row.usage),
        "dominant_resource": row.dominant_resource,
        "dominant_share": row.dominant_share,
        "weighted_share": row.weighted_share,
        "blocked": row.blocked,
    }


def tree_row_list(rows: Sequence[TreeRow], depth: int, indent: bool) -> Splice | list[dict[str, Any]]:
    """A pool's tree rows as the value of a key `depth` levels deep in the plan or report JSON:
    written from the rows' columns where they keep them (`tree_order.TreeRows`), else one dict each."""
    columns = getattr(rows, "columns", None)
    if columns is not None and len(rows):
        of, usage = columns.of(), columns.usage
        fields: list[tuple[str, Value]] = [
            ("path", of["path"]),
            ("name", of["name"]),
            ("depth", of["depth"]),
            ("kind", of["kind"]),
            ("weight", float_each(of["weight"])),
            ("running_jobs", of["running_jobs"]),
            ("pending_jobs", of["pending_jobs"]),
            ("usage", Nested([(r, usage[:, k].tolist()) for k, r in enumerate(columns.resources)])),
            ("dominant_resource", of["dominant_resource"]),
            ("dominant_share", of["dominant_share"]),
            ("weighted_share", of["weighted_share"]),
            ("blocked", of["blocked"]),
        ]
        pieces = object_list(fields, len(rows), depth, indent)
        if pieces is not None:
            return Splice(pieces)
    return [tree_row_entry(row) for row in rows]


def present_share(account: AccountShare) -> float:
    """The account's weighted share over its running usage alone (without the past)."""
    return account.weighted_share if account.present_share is None else account.present_share


def render_plan_json_bytes(plan: Plan, *, indent: bool = True) -> bytes:
    """`orjson.dumps(render_plan_json(plan))` and a final newline, byte for byte, made faster.

    `indent`: two-space indentation (OPT_INDENT_2), as the CLI prints it;
    otherwise compact, as the report files are written.
    """
    return b"".join(render_plan_json_pieces(plan, indent=indent))


def render_plan_json_pieces(plan: Plan, *, indent: bool = True) -> Iterator[bytes | memoryview]:
    """`render_plan_json_bytes`'s text in pieces, for a writer that takes them one by one
    (the CLI: 100 MB of plan are not copied into one string first, and the account and job
    lists are laid out piece by piece as they are written: `json_rows.object_list_pieces`)."""
    option = orjson.OPT_INDENT_2 if indent else 0
    accounts = _render_account_list(plan, indent)
    head = _render_head(plan, accounts is not None, indent)
    tail = orjson.dumps({"warnings": list(plan.warnings)}, option=option)
    jobs = _render_job_list(plan.jobs, plan.mode, indent, entry_fields(plan))
    # head ends with the closing brace (after a newline when indented), tail
    # starts with the opening one (and a newline): the account and job lists
    # go between.
    between = (
        () if accounts is None else itertools.chain((b',\n  "accounts": ' if indent else b',"accounts":',), accounts)
    )
    if indent:
        return itertools.chain(
            head[:-1], (head[-1][:-2],), between, (b',\n  "jobs": ',), jobs, (b",\n", tail[2:], b"\n")
        )
    return itertools.chain(head[:-1], (head[-1][:-1],), between, (b',"jobs":',), jobs, (b",", tail[1:], b"\n"))


def _render_head(plan: Plan, top_only: bool, indent: bool) -> list[bytes | memoryview]:
    """orjson's text of `_plan_top` (`top_only`) or `_plan_head`, in pieces, the last a `bytes` that
    ends with the closing brace: each pool's tree rows written from their columns (under `pools`,
    its key three levels deep)."""
    option = orjson.OPT_INDENT_2 if indent else 0
    head = _plan_top if top_only else _plan_head
    if any(p.tree for p in plan.pools):
        spliced = dumps_spliced_pieces(head(plan, lambda rows: tree_row_list(rows, 3, indent)), option)
        if spliced is not None:
            return spliced
    return [orjson.dumps(head(plan), option=option)]


def _render_account_list(plan: Plan, indent: bool) -> Iterator[bytes | memoryview] | None:
    """The value of `accounts` from the plan's account columns; None when the plan has none
    (or a past, whose entries hold only the resources it adds to: those are written as dicts)."""
    accounts = plan.accounts
    if not isinstance(accounts, PlanAccounts) or plan.blends_past:
        return None
    chunks = [chunk for chunk in accounts.chunks if len(chunk)]
    fields = _account_fields(chunks, plan.resources)
    return object_list_pieces(fields, len(accounts), 1, indent)


def _account_fields(chunks: Sequence[AccountColumns], resources: Sequence[str]) -> list[tuple[str, Value]]:
    """The keys and columns of the plan JSON's account entries (without a past), pool after pool."""

    def joined(name: str) -> list[Any]:
        return list(itertools.chain.from_iterable(getattr(chunk, name) for chunk in chunks))

    def per_resource(name: str) -> Nested:
        return Nested(
            [
                (r, list(itertools.chain.from_iterable(getattr(chunk, name)[:, k].tolist() for chunk in chunks)))
                for k, r in enumerate(resources)
            ]
        )

    return [
        ("account", joined("account")),
        ("pool", list(itertools.chain.from_iterable([chunk.pool] * len(chunk) for chunk in chunks))),
        ("weight", float_each(joined("weight"))),
        ("running_jobs", joined("running_jobs")),
        ("pending_jobs", joined("pending_jobs")),
        ("usage", per_resource("usage")),
        ("shares", per_resource("shares")),
        ("dominant_resource", joined("dominant_resource")),
        ("dominant_share", joined("dominant_share")),
        ("weighted_share", joined("weighted_share")),
        ("rank", joined("rank")),
    ]


def _render_job_list(
    jobs: Sequence[JobPlan], mode: str, indent: bool, fields: Sequence[str]
) -> Iterable[bytes | memoryview]:
    """The value of `jobs` as orjson writes it one level deep, in pieces: from the columns when it can."""
    if not jobs:
        return (b"[]",)
    columns = (
        [jobs.columns[name] for name in fields]
        if isinstance(jobs, PlanJobs)
        else [[getattr(job, name) for job in jobs] for name in fields]
    )
    keys = [mode if name == "value" else name for name in fields]
    # A tree plan's `path_shares` are lists: a column of them.
    values: list[Value] = [Listed(c) if name == "path_shares" else c for name, c in zip(fields, columns, strict=True)]
    text = object_list_pieces(list(zip(keys, values, strict=True)), len(jobs), 1, indent)
    if text is not None:
        return text
    # The plain way, for values the columns cannot be cut into: the list inside
    # an object, so that orjson indents it one level deep.
    wrapped = orjson.dumps(
        {"jobs": render_job_entries(jobs, mode, fields)}, option=orjson.OPT_INDENT_2 if indent else 0
    )
    return (wrapped[len(b'{\n  "jobs": ') : -2] if indent else wrapped[len(b'{"jobs":') : -1],)


def render_plan_table(plan: Plan, limit: int = 20) -> str:
    """Accounts by share and the head of each pool's order, for a terminal."""
    # The text helpers are imported by what writes text: the JSON plan needs none of them.
    from slurm_drf.trail.text import format_capacity, render_table, terminal_text  # noqa: PLC0415

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
    bands = ", ".join(
        f"{terminal_text(p.name)}'s first {p.exact} of up to {p.horizon}, neighbours {p.gap} apart"
        for p in plan.pools
        if p.exact
    )
    held = f"; held in exactly this order whatever Slurm's other factors add (the exact band, `horizon`): {bands}"
    out.append(f"{writes} write(s) needed, mode {plan.mode}" + (held if bands else ""))
    out.extend(f"warning: {terminal_text(w)}" for w in plan.warnings)
    return "\n".join(out)


def reclaim_lines(reclaimed: Sequence[Reclaimed]) -> list[str]:
    """`once`'s lines for the reclaim step (docs/rule.md §9): each victim, whom for, both shares, the work lost."""
    from slurm_drf.trail.text import terminal_text  # noqa: PLC0415  (as in render_plan_table)

    lines: list[str] = []
    for r in reclaimed:
        verb = {"would": "would requeue" if r.requeueable else "would cancel"}.get(r.outcome, r.outcome)
        lost = ", ".join(f"{hours:.1f} {terminal_text(name)}-hours" for name, hours in r.lost_hours.items() if hours)
        said = f": {terminal_text(r.message)}" if r.message else ""
        lines.append(
            f"reclaim: {verb} job {terminal_text(r.victim)} ({terminal_text(r.victim_account)}, "
            f"{terminal_text(r.victim_user)}, on {terminal_text(','.join(r.nodes))}, weighted share "
            f"{r.victim_share:.4f}) for job {terminal_text(r.claim)} ({terminal_text(r.claim_account)}, "
            f"{r.claim_share:.4f}), within its guarantee; lost {lost or 'nothing'}{said}"
        )
    return lines
