"""The share report in every format (table, JSON, CSV, markdown,
self-contained HTML with an SVG chart). Pure.

A plan over Slurm's account tree (docs/rule.md §7) adds, per pool, the
tree: one row per node in preorder, indented two spaces per level like
`sshare`, with its weight, usage, dominant share, H-DRF weighted share and
jobs (`policy.engine.tree_order.TreeRow`). The flat accounts table stays as it is.

Sits under the CLI and the daemon's observers; takes a Plan, returns data
or text. Writing files (atomically, `files.write_atomic`) is left to the
callers, as prometheus_client's `generate_latest` leaves it to
`write_to_textfile`.
"""

from __future__ import annotations

import csv
import html
import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import orjson

from slurm_drf.model.types import LazyRows
from slurm_drf.policy.engine.tree_order import TreeRow
from slurm_drf.policy.plan import Plan, PoolPlan
from slurm_drf.policy.plan_columns import AccountColumns, AccountShare, PlanAccounts
from slurm_drf.trail.json_rows import Nested, Splice, Value, dumps_spliced, float_each, object_list
from slurm_drf.trail.plan_output import present_share, tree_row_entry, tree_row_list
from slurm_drf.trail.reclaim_shown import ReclaimSection, report_html, report_json, report_lines, report_markdown
from slurm_drf.trail.text import (
    csv_cell,
    format_capacity,
    format_share,
    format_tres,
    format_weight,
    markdown_cell,
    node_label,
    terminal_text,
)

REPORT_FORMAT: Final = "slurm-drf-report/1"


REPORT_FORMATS: Final = ("table", "json", "csv", "markdown", "html")


# Resource colours of the HTML chart, in the order of the plan's resources.
RESOURCE_COLOURS: Final = ("#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


# Background of the HTML tables' header row.
TABLE_HEADER_COLOUR: Final = "#243b55"


_ANSI_RESET: Final = "\x1b[0m"


_ANSI_BOLD: Final = "\x1b[1m"


_ANSI_DOMINANT: Final = "\x1b[1;33m"


_ANSI_NEXT: Final = "\x1b[32m"


@dataclass(frozen=True, slots=True)
class PoolReport:
    """One pool of the report: its capacity and its accounts, lowest share (rank 1) first.

    `next_account` owns order 0 of the pool's DRF order: the account served
    next, the lowest share among the accounts with jobs to order (an account
    of lower rank may have none pending). `next_by_tie`: several accounts
    had that share, and the tie rule, not a name, chose it. None when
    nothing in the pool is pending.
    """

    pool: PoolPlan
    accounts: Sequence[AccountShare]
    next_account: str | None = None
    next_by_tie: bool = False
    # The plan's columns of `accounts`, when it keeps them: the JSON is written from them.
    columns: AccountColumns | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ShareReport:
    cluster: str
    taken_at: str
    resources: tuple[str, ...]
    pools: tuple[PoolReport, ...]
    warnings: tuple[str, ...]
    # The plan blends a decayed past (docs/rule.md §6): every format shows it
    # apart from the running usage; otherwise the report is pure DRF's.
    with_past: bool = False
    # The reclaims to show (docs/rule.md §9): the last cycle's, or the history's; None: no section.
    reclaims: ReclaimSection | None = None


def build_report(plan: Plan, reclaims: ReclaimSection | None = None) -> ShareReport:
    """The report's data: every pool of the plan with its accounts by rank, and who is served next
    (and `reclaims`, when given, in every format but CSV).

    An account that uses nothing has no dominant resource (None, as in the plan).
    """
    served_next = next_accounts(plan)
    chunks = {chunk.pool: chunk for chunk in plan.accounts.chunks} if isinstance(plan.accounts, PlanAccounts) else {}
    pools = tuple(
        _pool_report(
            pool, *_pool_accounts(plan, pool, chunks.get(pool.name)), served_next.get(pool.name, (None, False))
        )
        for pool in plan.pools
    )
    return ShareReport(
        plan.cluster, plan.taken_at, tuple(plan.resources), pools, tuple(plan.warnings), plan.blends_past, reclaims
    )


def _pool_report(
    pool: PoolPlan, accounts: Sequence[AccountShare], columns: AccountColumns | None, served: tuple[str | None, bool]
) -> PoolReport:
    return PoolReport(pool, accounts, served[0], served[1], columns)


def _pool_accounts(
    plan: Plan, pool: PoolPlan, chunk: AccountColumns | None
) -> tuple[Sequence[AccountShare], AccountColumns | None]:
    """A pool's accounts by rank, and their columns: from the plan's columns (rows made only when
    read; they are in rank order already), else from its rows."""
    if chunk is None:
        return tuple(sorted((a for a in plan.accounts if a.pool == pool.name), key=lambda a: a.rank)), None
    return LazyRows(len(chunk), lambda i: chunk.rows([i])[0], chunk.rows), chunk


def next_accounts(plan: Plan) -> dict[str, tuple[str, bool]]:
    """Pool -> (account of the job at order 0 of its DRF order, whether a tie placed it); pools with pending jobs."""
    found: dict[str, tuple[str, bool]] = {}
    columns = (plan.column(name) for name in ("pool", "order", "account", "tie"))
    for pool, order, account, tie in zip(*columns, strict=True):
        if order == 0 and pool is not None:
            found[pool] = (account, bool(tie))
    return found


def report_columns(resources: Sequence[str], with_past: bool = False) -> list[str]:
    """The CSV header: one column per field, usage and share per resource (and the past, with history)."""
    return [
        "pool",
        "rank",
        "account",
        "weight",
        "running_jobs",
        "pending_jobs",
        *(f"usage:{r}" for r in resources),
        *(f"past:{r}" for r in resources if with_past),
        *(f"share:{r}" for r in resources),
        "dominant_resource",
        "dominant_share",
        *(["present_share"] if with_past else []),
        "weighted_share",
    ]


def render_report_json(
    report: ShareReport,
    accounts: Callable[[PoolReport], Any] | None = None,
    tree: Callable[[Sequence[TreeRow]], Any] | None = None,
) -> dict[str, Any]:
    """The report as JSON-ready data; shares are exact floats. `accounts`, `tree`: what stands for a
    pool's accounts and tree rows (by default, one dict each)."""
    return {
        "format": REPORT_FORMAT,
        "cluster": report.cluster,
        "taken_at": report.taken_at,
        "resources": list(report.resources),
        "pools": [
            {
                "name": p.pool.name,
                "partitions": list(p.pool.partitions),
                "nodes": p.pool.nodes,
                "capacity": dict(p.pool.capacity),
                "next_account": p.next_account,
                "accounts": [_account_json(a, report) for a in p.accounts] if accounts is None else accounts(p),
                **(
                    {"tree": [tree_row_entry(row) for row in p.pool.tree] if tree is None else tree(p.pool.tree)}
                    if p.pool.tree
                    else {}
                ),
            }
            for p in report.pools
        ],
        **({} if report.reclaims is None else {"reclaims": report_json(report.reclaims)}),
        "warnings": list(report.warnings),
    }


def render_report_json_bytes(report: ShareReport) -> bytes:
    """The text of `render_report_json(report)` as the CLI prints it (indented, a final newline), byte for byte:
    each pool's accounts written from the plan's columns when it keeps them."""
    option = orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE
    data = render_report_json(
        report, lambda pool: _account_list(pool, report), lambda rows: tree_row_list(rows, 3, indent=True)
    )
    spliced = dumps_spliced(data, option)
    return orjson.dumps(render_report_json(report), option=option) if spliced is None else spliced


def _account_list(pool: PoolReport, report: ShareReport) -> Splice | list[dict[str, Any]]:
    """A pool's accounts in the report JSON: from its columns (one level under the pool, its key
    three deep), else one dict each."""
    columns = pool.columns
    if columns is not None:
        fields: list[tuple[str, Value]] = [
            ("rank", columns.rank),
            ("account", columns.account),
            ("weight", float_each(columns.weight)),
            ("running_jobs", columns.running_jobs),
            ("pending_jobs", columns.pending_jobs),
            ("usage", _per_resource(columns.usage, report.resources)),
        ]
        if report.with_past:
            past = columns.past if columns.past is not None else np.zeros_like(columns.usage)
            fields.append(("past", _per_resource(past, report.resources)))
        fields += [
            ("shares", _per_resource(columns.shares, report.resources)),
            ("dominant_resource", columns.dominant_resource),
            ("dominant_share", columns.dominant_share),
        ]
        if report.with_past:
            present = columns.present_share
            fields.append(("present_share", columns.weighted_share if present is None else present))
        fields.append(("weighted_share", columns.weighted_share))
        pieces = object_list(fields, len(columns), 3, indent=True)
        if pieces is not None:
            return Splice(pieces)
    return [_account_json(a, report) for a in pool.accounts]


def _per_resource(values: npt.NDArray[Any], resources: Sequence[str]) -> Nested:
    """An (accounts, resources) array as the object of every resource in each account's entry."""
    return Nested([(r, values[:, k].tolist()) for k, r in enumerate(resources)])


def _account_json(a: AccountShare, report: ShareReport) -> dict[str, Any]:
    """One account of the report JSON; `past` and `present_share` only when the plan blends a past."""
    resources = report.resources
    entry: dict[str, Any] = {
        "rank": a.rank,
        "account": a.account,
        "weight": float(a.weight),
        "running_jobs": a.running_jobs,
        "pending_jobs": a.pending_jobs,
        "usage": {r: a.usage.get(r, 0) for r in resources},
    }
    if report.with_past:
        entry["past"] = {r: a.past.get(r, 0) for r in resources}
    entry |= {
        "shares": {r: a.shares.get(r, 0.0) for r in resources},
        "dominant_resource": a.dominant_resource,
        "dominant_share": a.dominant_share,
    }
    if report.with_past:
        entry["present_share"] = present_share(a)
    entry["weighted_share"] = a.weighted_share
    return entry


def render_report_csv(report: ShareReport) -> str:
    """One row per (pool, account); floats in full precision (repr), so they read back exactly."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    with_past = report.with_past
    writer.writerow(report_columns(report.resources, with_past))
    for pool in report.pools:
        for a in pool.accounts:
            writer.writerow(
                [
                    csv_cell(pool.pool.name),
                    a.rank,
                    csv_cell(a.account),
                    format_weight(a.weight),
                    a.running_jobs,
                    a.pending_jobs,
                    *(a.usage.get(r, 0) for r in report.resources),
                    *(a.past.get(r, 0) for r in report.resources if with_past),
                    *(repr(a.shares.get(r, 0.0)) for r in report.resources),
                    csv_cell(a.dominant_resource or ""),
                    repr(a.dominant_share),
                    *([repr(present_share(a))] if with_past else []),
                    repr(a.weighted_share),
                ]
            )
    if any(pool.pool.tree for pool in report.pools):
        # A second table, after an empty line: the account tree (docs/formats.md).
        writer.writerow([])
        writer.writerow(tree_columns(report.resources))
        for pool in report.pools:
            for row in pool.pool.tree:
                writer.writerow(
                    [
                        csv_cell(pool.pool.name),
                        csv_cell(row.path),
                        row.depth,
                        row.kind,
                        format_weight(row.weight),
                        row.running_jobs,
                        row.pending_jobs,
                        *(row.usage.get(r, 0) for r in report.resources),
                        csv_cell(row.dominant_resource or ""),
                        repr(row.dominant_share),
                        repr(row.weighted_share),
                        int(row.blocked),
                    ]
                )
    return out.getvalue()


def tree_columns(resources: Sequence[str]) -> list[str]:
    """The header of the CSV's tree table (a plan over a tree only)."""
    return [
        "pool",
        "path",
        "depth",
        "kind",
        "weight",
        "running_jobs",
        "pending_jobs",
        *(f"usage:{r}" for r in resources),
        "dominant_resource",
        "dominant_share",
        "weighted_share",
        "blocked",
    ]


# The tree table of the human formats: each node indented under its parent.
TREE_TITLE: Final = (
    "account tree (H-DRF, docs/rule.md §7): used is the subtree's running allocation (and its past); "
    "weighted share is the node's share as the order starts, rescaled among its siblings"
)


def _tree_headers(resources: Sequence[str]) -> list[str]:
    return [
        "node",
        "weight",
        *(f"{r} used" for r in resources),
        "dominant share",
        "weighted share",
        "running",
        "pending",
    ]


def _tree_cells(row: TreeRow, resources: Sequence[str], indent: str = "  ") -> list[str]:
    """One node's row as text; `indent` once per level below the first."""
    return [
        indent * (row.depth - 1) + terminal_text(node_label(row.name, row.kind)),
        format_weight(row.weight),
        *(format_tres(r, row.usage.get(r, 0)) for r in resources),
        format_share(row.dominant_share),
        format_share(row.weighted_share),
        str(row.running_jobs),
        str(row.pending_jobs),
    ]


def _display_headers(resources: Sequence[str]) -> list[str]:
    return [
        "rank",
        "account",
        "weight",
        "running",
        "pending",
        *(f"{r} used" for r in resources),
        *(f"{r} share" for r in resources),
        "dominant",
        "dominant share",
        "weighted share",
    ]


def _display_cells(account: AccountShare, resources: Sequence[str]) -> list[str]:
    """One account's row as text: the same cells in the table, markdown and HTML."""
    return [
        str(account.rank),
        terminal_text(account.account),
        format_weight(account.weight),
        str(account.running_jobs),
        str(account.pending_jobs),
        *(format_tres(r, account.usage.get(r, 0)) for r in resources),
        *(format_share(account.shares.get(r, 0.0)) for r in resources),
        terminal_text(account.dominant_resource or "-"),
        format_share(account.dominant_share),
        format_share(account.weighted_share),
    ]


# The second table of each pool when the plan blends a past (docs/rule.md §6),
# and what it means: the first table's `used` stays the running allocation.
PAST_TITLE: Final = (
    "history: used (above) is the running allocation; past is what the decayed past adds to it. "
    "Shares, dominant and weighted share and rank (above) are over used + past; "
    "present share is the weighted share over used alone"
)


def _past_headers(resources: Sequence[str]) -> list[str]:
    return ["account", *(f"{r} past" for r in resources), "present share", "weighted share"]


def _past_cells(account: AccountShare, resources: Sequence[str]) -> list[str]:
    """One account's row of the history table: what the past adds, its share without and with it."""
    return [
        terminal_text(account.account),
        *(format_tres(r, account.past.get(r, 0)) for r in resources),
        format_share(present_share(account)),
        format_share(account.weighted_share),
    ]


# Columns that hold text (left-aligned); every other column holds numbers.
_TEXT_COLUMNS: Final = frozenset({"account", "dominant", "node"})


def _capacity_text(pool: PoolPlan) -> str:
    partitions = terminal_text(",".join(pool.partitions) or "-")
    return f"{pool.nodes} node(s), partitions {partitions}; capacity {format_capacity(pool.capacity)}"


def render_report_table(report: ShareReport, *, color: bool = False) -> str:
    """Aligned columns per pool; with `color`, ANSI styles (the caller decides: a TTY, NO_COLOR unset).

    The dominant resource's share is highlighted and the account served
    next (order 0's, see PoolReport) is green. Padding is computed on the
    plain text, so the columns line up with or without colour.
    """
    headers = _display_headers(report.resources)
    width_of_resources = len(report.resources)
    first_share = 5 + width_of_resources
    out: list[str] = [terminal_text(f"cluster {report.cluster}, taken at {report.taken_at or '-'}")]
    for pool in report.pools:
        out.append("")
        title = f"pool {terminal_text(pool.pool.name)}: {_capacity_text(pool.pool)}"
        out.append(f"{_ANSI_BOLD}{title}{_ANSI_RESET}" if color else title)
        rows = [_display_cells(a, report.resources) for a in pool.accounts]
        header_line, rule, padded = _aligned(headers, rows)
        out.append(f"{_ANSI_BOLD}{header_line}{_ANSI_RESET}" if color else header_line)
        out.append(rule)
        for account, styled in zip(pool.accounts, padded, strict=True):
            if color:
                if account.dominant_resource in report.resources:
                    k = first_share + report.resources.index(account.dominant_resource)
                    styled[k] = f"{_ANSI_DOMINANT}{styled[k]}{_ANSI_RESET}"
                if account.account == pool.next_account:
                    styled[1] = f"{_ANSI_NEXT}{styled[1]}{_ANSI_RESET}"
            out.append("  ".join(styled).rstrip())
        if not rows:
            out.append("(no running or pending jobs)")
        out.append(_next_text(pool))
        if report.with_past and rows:
            past_line, past_rule, past_rows = _aligned(
                _past_headers(report.resources), [_past_cells(a, report.resources) for a in pool.accounts]
            )
            out += ["", PAST_TITLE, past_line, past_rule, *("  ".join(r).rstrip() for r in past_rows)]
        if pool.pool.tree:
            tree_line, tree_rule, tree_rows = _aligned(
                _tree_headers(report.resources), [_tree_cells(row, report.resources) for row in pool.pool.tree]
            )
            out += ["", TREE_TITLE, tree_line, tree_rule, *("  ".join(r).rstrip() for r in tree_rows)]
    if report.reclaims is not None:
        out += report_lines(report.reclaims)
    out.extend(f"warning: {terminal_text(w)}" for w in report.warnings)
    return "\n".join(out) + "\n"


def _aligned(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> tuple[str, str, list[list[str]]]:
    """The header line, the rule under it, and each row's cells padded: text left, numbers right."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def pad(index: int, text: str) -> str:
        return text.ljust(widths[index]) if headers[index] in _TEXT_COLUMNS else text.rjust(widths[index])

    header_line = "  ".join(pad(i, h) for i, h in enumerate(headers)).rstrip()
    return header_line, "  ".join("-" * w for w in widths), [[pad(i, c) for i, c in enumerate(r)] for r in rows]


_markdown_cell = markdown_cell


def _next_text(pool: PoolReport) -> str:
    """`served next: B (order 0 of the DRF order; a tie decided)`, for the human formats."""
    if pool.next_account is None:
        return "served next: none (nothing pending)"
    how = "; a tie between equal shares decided" if pool.next_by_tie else ""
    return f"served next: {terminal_text(pool.next_account)} (order 0 of the DRF order{how})"


def render_report_markdown(report: ShareReport) -> str:
    """A GitHub-flavoured markdown table per pool (numbers right-aligned)."""
    headers = _display_headers(report.resources)
    out = [
        f"# Share report: {_markdown_cell(report.cluster)}",
        "",
        f"Taken at {_markdown_cell(report.taken_at or '-')}; resources {_markdown_cell(', '.join(report.resources))}.",
    ]
    for pool in report.pools:
        out += ["", f"## Pool {_markdown_cell(pool.pool.name)}", "", _markdown_cell(_capacity_text(pool.pool)), ""]
        out += _markdown_table(headers, [_display_cells(a, report.resources) for a in pool.accounts])
        out += ["", _markdown_cell(_next_text(pool))]
        if report.with_past and pool.accounts:
            past_rows = [_past_cells(a, report.resources) for a in pool.accounts]
            out += ["", _markdown_cell(PAST_TITLE), "", *_markdown_table(_past_headers(report.resources), past_rows)]
        if pool.pool.tree:
            # Markdown drops leading spaces: no-break spaces keep the indentation.
            tree_rows = [_tree_cells(row, report.resources, "\u00a0\u00a0") for row in pool.pool.tree]
            out += ["", _markdown_cell(TREE_TITLE), "", *_markdown_table(_tree_headers(report.resources), tree_rows)]
    if report.reclaims is not None:
        out += report_markdown(report.reclaims, _markdown_cell)
    if report.warnings:
        out += ["", *(f"- warning: {_markdown_cell(w)}" for w in report.warnings)]
    return "\n".join(out) + "\n"


def _markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a markdown table: text columns left-aligned, numbers right."""
    return [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(":---" if h in _TEXT_COLUMNS else "---:" for h in headers) + "|",
        *("| " + " | ".join(_markdown_cell(c) for c in cells) + " |" for cells in rows),
    ]


_CSS: Final = f"""
body {{ font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px; color: #1b1f24;
       background: #ffffff; }}
h1 {{ font-size: 22px; margin: 0 0 4px 0; }}
h2 {{ font-size: 18px; margin: 28px 0 4px 0; }}
p.meta {{ color: #57606a; margin: 0 0 12px 0; }}
svg.chart {{ display: block; margin: 8px 0 16px 0; }}
svg.chart text {{ font-size: 12px; fill: #1b1f24; }}
table.shares {{ border-collapse: collapse; font-size: 13px; }}
table.shares th {{ background: {TABLE_HEADER_COLOUR}; color: #ffffff; padding: 6px 10px; text-align: right; }}
table.shares td {{ padding: 4px 10px; border-bottom: 1px solid #d0d7de; text-align: right;
                   font-variant-numeric: tabular-nums; }}
table.shares th.text, table.shares td.text {{ text-align: left; }}
table.shares td.dominant {{ font-weight: bold; background: #fff3bf; }}
table.shares tr.next td.account {{ color: #1a7f37; font-weight: bold; }}
ul.warnings {{ color: #9a6700; }}
"""


# The HTML chart's geometry, in pixels.
_LABEL_WIDTH: Final = 170
_PLOT_WIDTH: Final = 620
_BAR_HEIGHT: Final = 12
_BAR_GAP: Final = 2
_GROUP_GAP: Final = 12
_TOP: Final = 34
_BOTTOM: Final = 34
_MARK_WIDTH: Final = 80


def resource_colour(index: int) -> str:
    return RESOURCE_COLOURS[index % len(RESOURCE_COLOURS)]


def chart_scale(accounts: Sequence[AccountShare], resources: Sequence[str]) -> float:
    """The share at the right end of the axis: the largest share rounded up to a tenth (at least 0.1)."""
    largest = max((a.shares.get(r, 0.0) for a in accounts for r in resources), default=0.0)
    return max(0.1, math.ceil(largest * 10 - 1e-9) / 10)


def _render_chart_legend(resources: Sequence[str], colour: Mapping[str, str], width: int) -> list[str]:
    """The legend at the top: one swatch per resource, the dominant marker, and "weighted" at the right."""
    parts = []
    lx = _LABEL_WIDTH
    for resource in resources:
        parts.append(
            f'<rect x="{lx}" y="8" width="12" height="12" fill="{colour[resource]}"/>'
            f'<text x="{lx + 16}" y="18">{html.escape(resource)}</text>'
        )
        lx += 32 + 7 * len(resource)
    parts.append(
        f'<rect x="{lx}" y="8" width="12" height="12" fill="#ffffff" stroke="#111111" '
        f'stroke-width="2"/><text x="{lx + 16}" y="18">dominant (&#9664;)</text>'
    )
    parts.append(f'<text x="{width - 6}" y="18" text-anchor="end">weighted</text>')
    return parts


def _render_chart_axis(scale: float, bottom: int, x_of: Callable[[float], float]) -> list[str]:
    """Grid and axis: five ticks from 0 to `scale`, and the axis' title."""
    parts = []
    for tick in range(6):
        share = scale * tick / 5
        x = x_of(share)
        parts.append(
            f'<line x1="{x:.1f}" y1="{_TOP - 4}" x2="{x:.1f}" y2="{bottom}" stroke="#d0d7de"/>'
            f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">{share:.2f}</text>'
        )
    parts.append(
        f'<text x="{_LABEL_WIDTH + _PLOT_WIDTH / 2:.1f}" y="{bottom + 30}" text-anchor="middle">'
        "share of the pool&#8217;s capacity</text>"
    )
    return parts


def render_share_chart_svg(pool: PoolReport, all_resources: Sequence[str]) -> str:
    """Horizontal bars: per account (rank order) one bar per resource; the dominant one outlined and marked.

    Resources the pool has none of are left out (they count for no share);
    colours follow the resource's place in the plan, the same in every pool.
    The weighted share is written at the right.
    """
    accounts = pool.accounts
    colour = {r: resource_colour(i) for i, r in enumerate(all_resources)}
    resources = [r for r in all_resources if pool.pool.capacity.get(r, 0) > 0] or list(all_resources)
    group = len(resources) * (_BAR_HEIGHT + _BAR_GAP) - _BAR_GAP
    height = _TOP + _BOTTOM + max(1, len(accounts)) * (group + _GROUP_GAP)
    width = _LABEL_WIDTH + _PLOT_WIDTH + _MARK_WIDTH + 10
    scale = chart_scale(accounts, resources)
    x0 = _LABEL_WIDTH

    def x_of(share: float) -> float:
        return x0 + _PLOT_WIDTH * min(max(share, 0.0), scale) / scale

    parts = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="share of each resource per account in pool {html.escape(pool.pool.name)}">'
    ]
    parts.extend(_render_chart_legend(resources, colour, width))
    bottom = height - _BOTTOM
    parts.extend(_render_chart_axis(scale, bottom, x_of))
    for row, account in enumerate(accounts):
        top = _TOP + row * (group + _GROUP_GAP)
        label = terminal_text(account.account)
        name = label if len(label) <= 22 else label[:21] + "\u2026"
        parts.append(
            f'<text x="{x0 - 8}" y="{top + group / 2 + 4:.1f}" text-anchor="end">'
            f"<title>{html.escape(label)}</title>{html.escape(name)}</text>"
        )
        parts.append(
            f'<text class="weighted" x="{width - 6}" y="{top + group / 2 + 4:.1f}" text-anchor="end">'
            f"{account.weighted_share:.3f}</text>"
        )
        for index, resource in enumerate(resources):
            share = account.shares.get(resource, 0.0)
            y = top + index * (_BAR_HEIGHT + _BAR_GAP)
            bar = max(x_of(share) - x0, 0.0)
            dominant = resource == account.dominant_resource
            outline = ' stroke="#111111" stroke-width="2"' if dominant else ""
            tip = f"{label} {resource}: {format_share(share)}" + (" (dominant)" if dominant else "")
            parts.append(
                f'<rect class="bar{" dominant" if dominant else ""}" x="{x0}" y="{y}" '
                f'width="{bar:.1f}" height="{_BAR_HEIGHT}" fill="{colour[resource]}"{outline}>'
                f"<title>{html.escape(tip)}</title></rect>"
            )
            if dominant:
                mx = x0 + bar + 4
                parts.append(
                    f'<path class="dominant-mark" d="M{mx:.1f},{y + _BAR_HEIGHT / 2:.1f} '
                    f'l10,-6 l0,12 z" fill="#111111"/>'
                )
    parts.append(f'<line x1="{x0}" y1="{_TOP - 4}" x2="{x0}" y2="{bottom}" stroke="#1b1f24"/>')
    parts.append("</svg>")
    return "".join(parts)


def render_report_html(report: ShareReport) -> str:
    """One self-contained page: inline CSS, per pool an SVG chart and the table. No scripts, no links."""
    esc = html.escape
    headers = _display_headers(report.resources)
    first_share = 5 + len(report.resources)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>slurm-drf share report: {esc(report.cluster)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Share report: {esc(report.cluster)}</h1>",
        f'<p class="meta">Taken at {esc(report.taken_at or "-")}; resources '
        f"{esc(', '.join(report.resources))}. Rank is the place by weighted dominant share (1: lowest; "
        "equal shares share a rank). The account served next owns the first job of the pool&#8217;s "
        "DRF order: the lowest share among accounts with pending jobs, and when several have it, the "
        "one the tie rule chose. It is marked in green.</p>",
    ]
    for pool in report.pools:
        out.append(f'<section class="pool" id="pool-{esc(pool.pool.name)}">')
        out.append(f"<h2>Pool {esc(pool.pool.name)}</h2>")
        out.append(f'<p class="meta">{esc(_capacity_text(pool.pool))}</p>')
        out.append(render_share_chart_svg(pool, report.resources))
        out.append('<table class="shares"><thead><tr>')
        out.extend(_html_headers(headers))
        out.append("</tr></thead><tbody>")
        for account in pool.accounts:
            cells = _display_cells(account, report.resources)
            dominant = (
                first_share + report.resources.index(account.dominant_resource)
                if account.dominant_resource in report.resources
                else -1
            )
            row_class = ' class="next"' if account.account == pool.next_account else ""
            out.append(f"<tr{row_class}>")
            for index, (header, cell) in enumerate(zip(headers, cells, strict=True)):
                classes = [
                    c
                    for c, on in (
                        ("text", header in _TEXT_COLUMNS),
                        ("account", header == "account"),
                        ("dominant", index == dominant),
                    )
                    if on
                ]
                attribute = f' class="{" ".join(classes)}"' if classes else ""
                out.append(f"<td{attribute}>{esc(cell)}</td>")
            out.append("</tr>")
        out.append(f'</tbody></table><p class="meta">{esc(_next_text(pool))}</p>')
        if report.with_past and pool.accounts:
            out.append(_html_past_table(pool, report.resources))
        if pool.pool.tree:
            out.append(_html_tree_table(pool.pool.tree, report.resources))
        out.append("</section>")
    if report.reclaims is not None:
        out.append(report_html(report.reclaims))
    if report.warnings:
        out.append('<ul class="warnings">' + "".join(f"<li>{esc(w)}</li>" for w in report.warnings) + "</ul>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _html_past_table(pool: PoolReport, resources: Sequence[str]) -> str:
    """The history table of one pool: what the past adds to each account, its share without and with it."""
    esc = html.escape
    headers = _past_headers(resources)
    out = [f'<p class="meta">{esc(PAST_TITLE)}</p>', '<table class="shares history"><thead><tr>']
    out.extend(_html_headers(headers))
    out.append("</tr></thead><tbody>")
    account_class = ' class="text account"'
    for account in pool.accounts:
        cells = zip(headers, _past_cells(account, resources), strict=True)
        out.append("<tr>" + "".join(f"<td{account_class if h == 'account' else ''}>{esc(c)}</td>" for h, c in cells))
        out.append("</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _html_tree_table(rows: Sequence[TreeRow], resources: Sequence[str]) -> str:
    """The account tree of one pool: the node's name indented by its depth (CSS padding), then its numbers."""
    esc = html.escape
    out = [f'<p class="meta">{esc(TREE_TITLE)}</p>', '<table class="shares tree"><thead><tr>']
    out.extend(_html_headers(_tree_headers(resources)))
    out.append("</tr></thead><tbody>")
    for row in rows:
        name, *numbers = _tree_cells(row, resources, "")
        indent = 10 + 16 * (row.depth - 1)
        out.append(
            f'<tr class="{esc(row.kind)}"><td class="text node" style="padding-left: {indent}px">{esc(name)}</td>'
            + "".join(f"<td>{esc(c)}</td>" for c in numbers)
            + "</tr>"
        )
    out.append("</tbody></table>")
    return "\n".join(out)


def _html_headers(headers: Sequence[str]) -> list[str]:
    text_class = ' class="text"'
    return [f'<th{text_class if h in _TEXT_COLUMNS else ""} scope="col">{html.escape(h)}</th>' for h in headers]


def render_report(plan: Plan, fmt: str, *, color: bool = False, reclaims: ReclaimSection | None = None) -> str:
    """The share report of a plan (and `reclaims`, when given) in one of REPORT_FORMATS, as text."""
    report = build_report(plan, reclaims)
    renderers: dict[str, Callable[[ShareReport], str]] = {
        "json": lambda r: render_report_json_bytes(r).decode(),
        "csv": render_report_csv,
        "markdown": render_report_markdown,
        "html": render_report_html,
    }
    if fmt == "table":
        return render_report_table(report, color=color)
    if fmt not in renderers:
        raise ValueError(f"unknown report format {fmt!r}; expected one of {', '.join(REPORT_FORMATS)}")
    return renderers[fmt](report)
