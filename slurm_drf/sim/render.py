"""A comparison as a terminal table, JSON, a PNG plot or an HTML page.

Sits at the end of the simulator's flow, after `compare`/`run_metrics`.
`render_table`, `render_json`, `render_markdown` and `render_html` are
pure; `write_plot` draws with matplotlib (the optional `plot` extra,
imported only when a plot is asked for) and writes the file atomically,
as `write_text` does for the others.

Names come from the trace (accounts, users, the file's name): a trace's
account can hold ESC, BEL or NUL, which a terminal obeys, or U+2028, which
breaks a line. Every text a table, a description, a Markdown table, an
HTML page or a plot shows passes through `terminal_text` (escaped as
`\x1b`, `\u2028`); JSON stays exact.
"""

from __future__ import annotations

import base64
import html
import io
import math
import os
import tempfile
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from slurm_drf.config.settings import Config
from slurm_drf.errors import InputError
from slurm_drf.model.escape import terminal_text
from slurm_drf.sim.compare import Comparison
from slurm_drf.sim.daemon_loop import build_space
from slurm_drf.sim.policies import HISTORY_POLICIES
from slurm_drf.sim.run_metrics import render_metrics
from slurm_drf.sim.workload import RESOURCES, Workload, WorkloadError, format_duration

SIM_FORMAT: Final = "slurm-drf-simulation/1"
# With more accounts than this, tables show the first and last few by name
# and plots draw the spread instead of one line per account.
MANY_ACCOUNTS: Final = 8
SHOWN_EACH_END: Final = 3


# Escaped: C0 and C1 control characters and DEL, the invisible format characters (category Cf: the
# bidirectional overrides, zero-width characters), the line and paragraph separators and lone surrogates.


def _fmt(value: float, digits: int = 3) -> str:
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{value:.{digits}f}"


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0%}"


# What the comparison's interval is: the simulator's policy interval, or a replay's sample interval.
POLICY_INTERVAL = "policy interval"
SAMPLE_INTERVAL = "sample interval"


def describe_workload(comparison: Comparison, interval_label: str = POLICY_INTERVAL) -> list[str]:
    workload = comparison.workload
    seed = f" (seed {workload.seed})" if workload.seed is not None else ""
    weights = {a: workload.weight(a) for a in workload.accounts}
    weighted = ", ".join(f"{a} {w}" for a, w in weights.items() if w != 1)
    lines = [
        f"{workload.name}{seed}: {len(workload.jobs)} jobs of {len(workload.accounts)} accounts on "
        f"{workload.node_count} nodes of {workload.node_type.render()}; "
        f"{interval_label} {format_duration(comparison.options.interval)}",
        workload.description,
    ]
    if weighted:
        lines.append(f"weights: {weighted} (others 1)")
    lines.extend(f"note: {n}" for n in workload.notes)
    return [terminal_text(line) for line in lines]


ACCOUNT_NOTE = (
    "Per account: mean weighted dominant share while backlogged, wait p50 / p95, finish-time fairness rho "
    "(Themis: a job's time in the cluster over its time on the account's own slice of it, 1/N of the cluster "
    "for N equal accounts; the mean over its jobs)"
)


def _summary_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    header = [
        "policy",
        "Jain",
        "Jain min",
        "share max/min",
        "longest wait",
        "mean wait",
        "rho max",
        "util cpu",
        "mem",
        "gpu",
        "makespan",
    ]
    rows = []
    for metrics in comparison.metrics:
        util = metrics.utilisation
        rows.append(
            [
                metrics.policy,
                _fmt(metrics.jain),
                _fmt(metrics.jain_min),
                _fmt(metrics.share_ratio, 2),
                f"{format_duration(metrics.longest_wait)} ({metrics.longest_wait_account})",
                format_duration(metrics.mean_wait),
                _fmt(metrics.rho_max, 2),
                _pct(util["cpu"]),
                _pct(util["mem"]),
                _pct(util["gres/gpu"]),
                format_duration(metrics.makespan),
            ]
        )
    return header, rows


def _writes_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]] | None:
    """Jain beside writes per cycle, for the policies that write and the drf reference; None if none writes."""
    if all(m.writes is None for m in comparison.metrics):
        return None
    header = ["policy", "Jain", "writes/cycle mean", "median", "max", "total", "cycles"]
    rows = []
    for metrics in comparison.metrics:
        writes = metrics.writes
        if writes is None:
            if metrics.policy == "drf":
                rows.append([metrics.policy, _fmt(metrics.jain), "-", "-", "-", "-", "-"])
            continue
        rows.append(
            [
                metrics.policy,
                _fmt(metrics.jain),
                _fmt(writes.mean, 1),
                f"{writes.median:g}",
                str(writes.max),
                str(writes.total),
                str(writes.cycles),
            ]
        )
    return header, rows


def _history_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]] | None:
    """Fairness over time beside Jain, when drf-history is compared; None otherwise."""
    if not any(m.policy in HISTORY_POLICIES for m in comparison.metrics):
        return None
    accounts = [a.account for a in comparison.metrics[0].accounts]
    shown = [a for a in shown_accounts(accounts) if a is not None]
    header = ["policy", "Jain", "Jain over time", *(f"to date {a}" for a in shown)]
    rows = []
    for metrics in comparison.metrics:
        by_account = {a.account: a for a in metrics.accounts}
        rows.append(
            [
                metrics.policy,
                _fmt(metrics.jain),
                _fmt(metrics.jain_over_time),
                *(_fmt(by_account[a].share_to_date) for a in shown),
            ]
        )
    return header, rows


def _level_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]] | None:
    """Jain per depth of the account tree beside Jain, when the workload has a tree; None otherwise."""
    levels = comparison.metrics[0].levels if comparison.metrics else ()
    if not levels:
        return None
    header = ["policy", "Jain", *(f"Jain depth {level.depth} ({level.nodes})" for level in levels)]
    rows = [[m.policy, _fmt(m.jain), *(_fmt(level.jain) for level in m.levels)] for m in comparison.metrics]
    return header, rows


LEVEL_NOTE: Final = (
    "Jain depth k: mean Jain's index of the weighted dominant shares of backlogged siblings at depth k of "
    "the account tree (a node's share: its subtree's running allocation), averaged over the parents with "
    ">= 2 backlogged children."
)


HISTORY_NOTE: Final = (
    "Jain over time: mean Jain's index of the waiting accounts' shares to date (weighted dominant share "
    "averaged from the start of the run); to date: each account's share to date at the end of contention "
    "(the last sample where >= 2 accounts wait)."
)


def describe_site(comparison: Comparison) -> str:
    """The site model every row ran under, in one paragraph."""
    slurm = comparison.slurm
    options = comparison.options
    return (
        f"Site model, the same for every row: Slurm's priority = the policy's term + age (PriorityWeightAge "
        f"{slurm.weight_age}, PriorityMaxAge {format_duration(slurm.max_age)}) + QOS (PriorityWeightQOS "
        f"{slurm.weight_qos} for {slurm.urgent:.0%} urgent jobs, the same jobs in every row); the term is "
        f"PriorityWeightFairshare {slurm.weight_fairshare} x the fair-share factor for multifactor, none for "
        "fifo, the plan's order for drf and its kin (beyond the other factors, as strict weighting writes "
        "it: age and QOS order only jobs not yet planned, and each account's own jobs); the main scheduler "
        f"stops after {slurm.queue_depth} jobs, {options.backfill} backfill looks at {options.backfill_depth}."
    )


def describe_loop(comparison: Comparison) -> str:
    """What the loop policies wrote, in one paragraph (the site is `describe_site`'s)."""
    config = comparison.config or Config()
    space = build_space(config, comparison.slurm, comparison.options.backfill_depth)
    weighting = (
        f"factor weighting, factor_weight {config.factor_weight}"
        if config.weighting == "factor"
        else f"strict weighting, neighbours {space.gap} apart"
    )
    return (
        f"The daemon's loop: every {format_duration(comparison.options.interval)} the plan's order is "
        f"written as nice values, at most {config.max_writes_per_cycle} per cycle, head first ({weighting}, "
        f"exact for the first {space.horizon} jobs); Slurm's priority = -nice + age + QOS. drf-labels writes "
        "the daemon's order labels, drf-spread the values of 0.1.0 (spread by rank); drf, the reference, "
        "queues in plan order and writes nothing."
    )


def shown_accounts(accounts: Sequence[str]) -> list[str | None]:
    """Accounts to list in a table; None marks the ones left out."""
    if len(accounts) <= MANY_ACCOUNTS:
        return list(accounts)
    return [*accounts[:SHOWN_EACH_END], None, *accounts[-SHOWN_EACH_END:]]


def _account_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    header = ["account", "weight", "jobs", *(m.policy for m in comparison.metrics)]
    accounts = [a.account for a in comparison.metrics[0].accounts]
    by_policy = [{a.account: a for a in m.accounts} for m in comparison.metrics]
    rows = []
    for account in shown_accounts(accounts):
        if account is None:
            rows.append([f"... {len(accounts) - 2 * SHOWN_EACH_END} more", "", "", *([""] * len(by_policy))])
            continue
        first = by_policy[0][account]
        cells = [account, f"{first.weight:g}", str(first.jobs)]
        # Beyond four policies, narrower cells keep the table within a wide terminal.
        space, slash = ("  ", " / ") if len(by_policy) <= 4 else (" ", "/")
        for table in by_policy:
            row = table[account]
            waits = f"{format_duration(row.wait_p50)}{slash}{format_duration(row.wait_p95)}"
            cells.append(f"{_fmt(row.mean_share)}{space}{waits}{space}rho {_fmt(row.rho, 2)}")
        rows.append(cells)
    return header, rows


def _align(header: list[str], rows: list[list[str]]) -> list[str]:
    """Aligned columns, every cell through `terminal_text` (names come from the trace)."""
    header = [terminal_text(cell) for cell in header]
    rows = [[terminal_text(cell) for cell in row] for row in rows]
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    out.extend("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)
    return out


def render_aligned(header: list[str], rows: list[list[str]]) -> str:
    """A table of plain text columns, as the terminal tables are, ending in an empty line."""
    return "\n".join(_align(header, rows)) + "\n"


# The rows that model what the daemon does on a real Slurm (its loop writing values; `drf` is its order queued
# directly, writing nothing: the reference), marked in the terminal table.
DAEMON_ROWS: Final = frozenset({"drf-labels", "drf-placed", "drf-history", "hdrf", "drf-reclaim"})
DAEMON_NOTE: Final = (
    "* the daemon: drf-labels is its loop writing the plan's order to Slurm as nice values, what it does by "
    "default; drf-placed adds placement at submission, drf-history its memory of past use, hdrf its order over "
    "the account tree, drf-reclaim guarantees and reclaim. drf is the plan's order queued directly, writing "
    "nothing (the reference); drf-naive the textbook loop that breaks ties by name; fifo and multifactor are "
    "Slurm alone."
)


def render_table(
    comparison: Comparison,
    timings: bool = True,
    loop: bool = True,
    interval_label: str = POLICY_INTERVAL,
    site: bool = True,
) -> str:
    """The comparison for a terminal: one line per policy, then per account.

    `loop`: describe the simulator's model of the daemon's loop above the writes (not for a replay,
    whose daemon was the real one); `interval_label`: what the interval is (a replay's: its samples');
    `site`: describe the site model every row ran under (not for a replay's arms, which ran on Slurm).
    """
    lines = describe_workload(comparison, interval_label)
    lines.append("")
    header, rows = _summary_rows(comparison)
    if timings:
        header.append("run")
        for row, seconds in zip(rows, comparison.seconds, strict=True):
            row.append(f"{seconds:.1f}s")
    daemon = [row for row in rows if row[0] in DAEMON_ROWS]
    for row in daemon:
        row[0] += " *"
    lines.extend(_align(header, rows))
    lines.append("")
    if daemon and site:
        lines.extend(textwrap.wrap(DAEMON_NOTE, width=118))
    lines.append(
        "Jain: mean Jain's index of weighted dominant shares over the samples where >= 2 accounts "
        "wait; share max/min: of each"
    )
    lines.append(
        "account's mean share while it waits; rho max: the largest account's finish-time fairness (below); "
        "util: allocated /"
    )
    lines.append("capacity while jobs wait.")
    if site:
        lines.extend(textwrap.wrap(describe_site(comparison), width=118))
    lines.append("")
    writes = _writes_rows(comparison)
    if writes is not None:
        if loop:
            lines.extend(textwrap.wrap(describe_loop(comparison), width=118))
        lines.extend(_align(*writes))
        lines.append("")
    history = _history_rows(comparison)
    if history is not None:
        lines.extend(textwrap.wrap(HISTORY_NOTE, width=118))
        lines.extend(_align(*history))
        lines.append("")
    levels = _level_rows(comparison)
    if levels is not None:
        lines.extend(textwrap.wrap(LEVEL_NOTE, width=118))
        lines.extend(_align(*levels))
        lines.append("")
    lines.extend(textwrap.wrap(ACCOUNT_NOTE, width=118))
    header, rows = _account_rows(comparison)
    lines.extend(_align(header, rows))
    return "\n".join(lines) + "\n"


def render_markdown(comparison: Comparison) -> str:
    """The two tables as Markdown (for docs/evaluation.md)."""
    out = []
    writes = _writes_rows(comparison)
    history = _history_rows(comparison)
    tables = [_summary_rows(comparison), _account_rows(comparison)]
    tables.extend(t for t in (writes, history, _level_rows(comparison)) if t is not None)
    for header, rows in tables:
        out.append("| " + " | ".join(_markdown_cell(h) for h in header) + " |")
        out.append("|" + "|".join(" --- " for _ in header) + "|")
        out.extend("| " + " | ".join(_markdown_cell(c) for c in row) + " |" for row in rows)
        out.append("")
    return "\n".join(out)


def _markdown_cell(text: str) -> str:
    return terminal_text(text).replace("|", "\\|")


def _series(values: Any) -> list[float | None]:
    return [None if not math.isfinite(v) else round(float(v), 4) for v in values]


def render_json(comparison: Comparison, series: bool = True) -> dict[str, Any]:
    """JSON-ready data; the same run gives the same bytes (no wall-clock times)."""
    workload = comparison.workload
    policies = []
    for result, metrics in zip(comparison.results, comparison.metrics, strict=True):
        entry = render_metrics(metrics)
        if series:
            capacity = np.maximum(np.array(result.capacity, dtype=np.float64), 1)
            used = result.sample_used / capacity
            entry["series"] = {
                "time_s": [round(float(t), 1) for t in result.sample_time],
                "weighted_share": {a: _series(result.sample_share[:, i]) for i, a in enumerate(result.accounts)},
                "pending_jobs": {
                    a: [int(x) for x in result.sample_pending[:, i]] for i, a in enumerate(result.accounts)
                },
                "jain": _series(metrics.jain_series),
                "utilisation": {r: _series(used[:, i]) for i, r in enumerate(RESOURCES)},
            }
        policies.append(entry)
    return {
        "format": SIM_FORMAT,
        "workload": render_workload(workload),
        "interval_s": comparison.options.interval,
        "backfill_depth": comparison.options.backfill_depth,
        "backfill": comparison.options.backfill,
        "slurm": render_slurm(comparison),
        "policies": policies,
    }


def render_slurm(comparison: Comparison) -> dict[str, Any]:
    """The site model every policy ran under (Slurm's factors and depths), and the loop's cap and band."""
    config = comparison.config or Config()
    slurm = comparison.slurm
    space = build_space(config, slurm, comparison.options.backfill_depth)
    return {
        "priority_weight_fairshare": slurm.weight_fairshare,
        "priority_weight_age": slurm.weight_age,
        "priority_weight_qos": slurm.weight_qos,
        "priority_max_age_s": slurm.max_age,
        "urgent_fraction": slurm.urgent,
        "default_queue_depth": slurm.queue_depth,
        "bf_max_job_test": comparison.options.backfill_depth,
        "max_writes_per_cycle": config.max_writes_per_cycle,
        "weighting": config.weighting,
        "horizon": space.horizon,
        "gap": space.gap,
    }


def render_workload(workload: Workload) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for job in workload.jobs:
        counts[job.account] = counts.get(job.account, 0) + 1
    return {
        "name": workload.name,
        "description": workload.description,
        "seed": workload.seed,
        "jobs": len(workload.jobs),
        "nodes": workload.node_count,
        "node_tres": workload.node_type.tres(),
        "accounts": [{"account": a, "weight": float(workload.weight(a)), "jobs": counts[a]} for a in workload.accounts],
        "tree": None
        if workload.tree is None
        else {
            "paths": {a: workload.tree.path(a) for a in workload.accounts},
            "weights": {p: float(w) for p, w in workload.tree.weights.items()},
        },
        "notes": list(workload.notes),
    }


# --------------------------------------------------------------------------
# Plots (matplotlib, optional)


def check_plotting(option: str) -> None:
    """Refuse `option` (exit 2, naming the `[plot]` extra) when matplotlib cannot be imported."""
    try:
        _pyplot()
    except WorkloadError as error:
        raise InputError(
            f"{option} needs matplotlib: pip install 'slurm-drf[plot]' (or pip install matplotlib)"
        ) from error


def _pyplot() -> Any:
    try:
        import matplotlib  # noqa: PLC0415 - optional extra, imported only for a plot

        matplotlib.use("Agg")
        from matplotlib import pyplot  # noqa: PLC0415
    except ImportError as error:
        raise WorkloadError(
            "plots need matplotlib: pip install 'slurm-drf[plot]' (or pip install matplotlib)"
        ) from error
    return pyplot


def render_plot_png(comparison: Comparison, title: str = "slurm-drf simulate") -> bytes:
    """One panel per policy: weighted dominant share of each account over time; then Jain over time."""
    pyplot = _pyplot()
    panels = len(comparison.results) + 1
    figure, axes = pyplot.subplots(panels, 1, figsize=(10, 2.3 * panels), sharex=True, squeeze=False)
    colours = pyplot.get_cmap("tab10")
    for row, (result, metrics) in enumerate(zip(comparison.results, comparison.metrics, strict=True)):
        axis = axes[row][0]
        hours = result.sample_time / 3600
        if len(result.accounts) <= MANY_ACCOUNTS:
            for index, account in enumerate(result.accounts):
                axis.plot(
                    hours, result.sample_share[:, index], lw=1.1, color=colours(index % 10), label=_plotted(account)
                )
        else:
            shares = result.sample_share
            axis.fill_between(hours, shares.min(axis=1), shares.max(axis=1), color="0.85", label="min-max")
            axis.plot(hours, np.median(shares, axis=1), lw=1.0, color="0.4", label="median")
            first, last = _plotted(result.accounts[0]), _plotted(result.accounts[-1])
            axis.plot(hours, shares[:, 0], lw=1.0, color=colours(0), label=f"{first} (first)")
            axis.plot(hours, shares[:, -1], lw=1.2, color=colours(3), label=f"{last} (last)")
        axis.set_title(
            f"{_plotted(metrics.policy)}: Jain {_fmt(metrics.jain)}, share max/min {_fmt(metrics.share_ratio, 2)}",
            fontsize=10,
            loc="left",
        )
        axis.set_ylabel("weighted\ndominant share", fontsize=8)
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        if row == 0:
            axis.legend(fontsize=7, ncol=min(5, len(result.accounts) + 1), loc="upper right")
    axis = axes[-1][0]
    for index, (result, metrics) in enumerate(zip(comparison.results, comparison.metrics, strict=True)):
        fair = ~np.isnan(metrics.jain_series)
        axis.plot(
            result.sample_time[fair] / 3600,
            metrics.jain_series[fair],
            lw=0.9,
            color=colours(index),
            label=_plotted(metrics.policy),
        )
    axis.axhline(0.95, color="0.5", lw=0.8, ls="--")
    axis.set_ylim(0, 1.02)
    axis.set_title("Jain's index of backlogged accounts' weighted shares", fontsize=10, loc="left")
    axis.set_xlabel("simulated hours")
    axis.legend(fontsize=7, ncol=len(comparison.results), loc="lower right")
    axis.grid(alpha=0.3)
    workload = comparison.workload
    figure.suptitle(
        f"{title}: {_plotted(workload.name)}, {len(workload.jobs)} jobs on {workload.node_count} nodes", fontsize=11
    )
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    pyplot.close(figure)
    return buffer.getvalue()


def _plotted(text: str) -> str:
    """A name for a plot's label: escaped (`terminal_text`), and `$` taken literally, not as mathtext
    (an account named `$\\x$` would stop the drawing)."""
    return terminal_text(text).replace("$", "\\$")


def html_text(text: str) -> str:
    """Text for an HTML page: control characters escaped (`terminal_text`), then HTML's own."""
    return html.escape(terminal_text(text))


def html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """One HTML table, every cell escaped."""
    head = "".join(f"<th>{html_text(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html_text(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(
    comparison: Comparison,
    png: bytes,
    title: str = "slurm-drf simulate",
    loop: bool = True,
    extra: str = "",
    interval_label: str = POLICY_INTERVAL,
) -> str:
    """A self-contained page: description, both tables, the plot inline.

    `loop`: describe the simulator's site model and its model of the daemon's loop (a simulation, not
    a replay's arms, which ran on Slurm); `extra`: HTML
    placed before the plot (a replay's own figures); `interval_label` as for `render_table`.
    """
    summary_header, summary_rows = _summary_rows(comparison)
    account_header, account_rows = _account_rows(comparison)
    table = html_table
    writes = _writes_rows(comparison)
    described = f"<p>{html_text(describe_loop(comparison))}</p>\n" if loop else ""
    loop_section = f"<h2>Writes</h2>\n{described}{table(*writes)}\n" if writes is not None else ""
    history = _history_rows(comparison)
    over_time = (
        f"<h2>Fairness over time</h2>\n<p>{html.escape(HISTORY_NOTE)}</p>\n{table(*history)}\n"
        if history is not None
        else ""
    )
    lines = describe_workload(comparison, interval_label)
    if loop:  # a simulation: every row ran under the site model
        lines.append(describe_site(comparison))
    description = "".join(f"<p>{html_text(line)}</p>" for line in lines)
    image = base64.b64encode(png).decode("ascii")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{html_text(title)}: {html_text(comparison.workload.name)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 70em; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; font-size: 0.9em; }}
th {{ background: #f0f0f0; }}
img {{ max-width: 100%; }}
</style></head><body>
<h1>{html_text(title)}: {html_text(comparison.workload.name)}</h1>
{description}
<h2>Policies</h2>
{table(summary_header, summary_rows)}
<p>Jain: mean Jain's index of weighted dominant shares over the samples where at least two accounts wait.
Share max/min: of each account's mean weighted share while it waits. Utilisation: allocated / capacity
while jobs wait.</p>
<h2>Accounts</h2>
<p>{html.escape(ACCOUNT_NOTE)}; rho max: the largest account's.</p>
{table(account_header, account_rows)}
{loop_section}{over_time}{extra}<h2>Shares over time</h2>
<img alt="weighted dominant share per account over time, per policy" src="data:image/png;base64,{image}">
</body></html>
"""


def write_bytes(path: str, data: bytes) -> None:
    """Write atomically: a temporary file in the same directory, then rename."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path()
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=directory)
        os.fchmod(handle, 0o644)  # a report, not a secret (mkstemp makes 0600)
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.replace(temporary, target)
    except OSError as error:
        raise WorkloadError(f"{path}: cannot write: {error.strerror or error}") from error


def write_text(path: str, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))
