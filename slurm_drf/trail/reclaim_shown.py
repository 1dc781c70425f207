"""Reclaims as `explain` and the share report show them (docs/rule.md §9). Pure.

A reclaim is a running job (the *victim*) requeued, or cancelled, to make
room for a job waiting within its account's guarantee (the *claim*). The
cycle's step hands its victims over as `cycle.reclaim.Reclaimed`; the
history keeps one `reclaims` row each (`audit reclaims` reads them as
records, trail.audit_query). Both become a `ReclaimEvent` here, and this
module says them: a few lines for `explain` of either job, a section of
the share report (text, markdown, HTML, JSON) with the count and the
resource-hours lost.
"""

from __future__ import annotations

import html
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from slurm_drf.model.codec import show
from slurm_drf.trail.text import format_share, render_table, terminal_text

if TYPE_CHECKING:
    from slurm_drf.cycle.reclaim import Reclaimed

logger = logging.getLogger(__name__)

# Outcomes of a victim that lost its work: Slurm requeued or cancelled it (or, in a dry run, would).
MOVED: Final = ("requeued", "cancelled", "would")

_VICTIM_VERB: Final = {
    "requeued": "requeued",
    "cancelled": "cancelled",
    "would": "would be requeued",
    "gone": "chosen, but it had ended already,",
    "failed": "chosen, but Slurm refused,",
}


@dataclass(frozen=True, slots=True)
class ReclaimEvent:
    """One victim: the job moved, the job it made room for, both accounts' weighted shares before, the work lost.

    `time` as `audit` shows it (UTC); None for the cycle just run. `lost`:
    resource-hours by resource (`mem` in MiB-hours, as Slurm counts it).
    """

    time: str | None
    pool: str
    job: str
    account: str
    user: str
    for_job: str
    for_account: str
    share: float
    for_share: float
    nodes: tuple[str, ...]
    lost: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    outcome: str = "requeued"
    message: str = ""

    @property
    def moved(self) -> bool:
        """Whether the victim lost its run (requeued or cancelled; or would, in a dry run)."""
        return self.outcome in MOVED


def from_reclaimed(r: Reclaimed, time: str | None = None) -> ReclaimEvent:
    """The cycle step's record of a victim as an event."""
    return ReclaimEvent(
        time,
        r.pool,
        r.victim,
        r.victim_account,
        r.victim_user,
        r.claim,
        r.claim_account,
        float(r.victim_share),
        float(r.claim_share),
        tuple(r.nodes),
        MappingProxyType(dict(r.lost_hours)),
        r.outcome,
        r.message,
    )


def from_records(records: Iterable[Mapping[str, Any]], source: str = "history") -> tuple[ReclaimEvent, ...]:
    """`audit reclaims`' records (trail.audit_query) as events; a record whose shares are no numbers is
    left out and logged (audit has already left out times that are no dates and lost hours that are no object)."""
    events: list[ReclaimEvent] = []
    for record in records:
        shares = (record.get("share"), record.get("for_share"))
        if not all(isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s) for s in shares):
            logger.warning(
                "%s: a reclaims row of job %s holds shares that are no numbers; left out",
                source,
                show(record.get("job")),
            )
            continue
        nodes = record.get("nodes")
        events.append(
            ReclaimEvent(
                str(record.get("time")),
                str(record.get("pool")),
                str(record.get("job")),
                str(record.get("account")),
                str(record.get("user")),
                str(record.get("for_job")),
                str(record.get("for_account")),
                float(shares[0]),  # type: ignore[arg-type]
                float(shares[1]),  # type: ignore[arg-type]
                tuple(n for n in str(nodes).split(",") if n) if nodes else (),
                MappingProxyType({str(k): float(v) for k, v in dict(record.get("lost") or {}).items()}),
                str(record.get("outcome")),
                "" if record.get("message") is None else str(record.get("message")),
            )
        )
    return tuple(events)


def lost_in_all(events: Iterable[ReclaimEvent]) -> dict[str, float]:
    """The resource-hours the moved victims had done, per resource (one that failed or had ended lost nothing)."""
    total: dict[str, float] = {}
    for event in events:
        if event.moved:
            for resource, hours in event.lost.items():
                total[resource] = total.get(resource, 0.0) + hours
    return total


def lost_text(lost: Mapping[str, float]) -> str:
    """`20.0 gres/gpu-hours, 80.0 cpu-hours, 312.5 mem GiB-hours` (memory in GiB-hours; nothing: `nothing`)."""
    parts = [
        f"{hours / 1024:.1f} mem GiB-hours" if resource == "mem" else f"{hours:.1f} {terminal_text(resource)}-hours"
        for resource, hours in lost.items()
        if hours
    ]
    return ", ".join(parts) or "nothing"


def event_json(e: ReclaimEvent) -> dict[str, Any]:
    """One event in JSON (explain's `reclaims`, the report's `reclaims.jobs`): the columns as audit names them."""
    return {
        "time": e.time,
        "pool": e.pool,
        "job": e.job,
        "account": e.account,
        "user": e.user,
        "for_job": e.for_job,
        "for_account": e.for_account,
        "share": e.share,
        "for_share": e.for_share,
        "nodes": list(e.nodes),
        "lost": dict(e.lost),
        "outcome": e.outcome,
        "message": e.message or None,
    }


# --------------------------------------------------------------------------
# explain


def explain_lines(job_ids: Sequence[str], events: Sequence[ReclaimEvent]) -> list[str]:
    """What the history says reclaims did to one job (named by any of `job_ids`): as the victim, each
    time it was moved and for whom; as the claim, the jobs moved for it. No events: no lines."""
    if not events:
        return []
    ours = set(job_ids)
    out = ["reclaim (docs/rule.md §9), from the history:"]
    for e in events:
        when = terminal_text(e.time or "this cycle")
        shares = (
            f"weighted shares before: {terminal_text(e.account)} {format_share(e.share)}, "
            f"{terminal_text(e.for_account)} {format_share(e.for_share)}"
        )
        said = f" ({terminal_text(e.message)})" if e.message else ""
        nodes = terminal_text(",".join(e.nodes) or "-")
        if e.job in ours:
            out.append(
                f"  {when}: {_VICTIM_VERB.get(e.outcome, terminal_text(e.outcome))}{said} on {nodes} to make room for "
                f"job {terminal_text(e.for_job)} of account {terminal_text(e.for_account)} (within its guarantee)"
            )
            out.append(f"    {shares}; work lost: {lost_text(e.lost) if e.moved else 'nothing'}")
        else:
            out.append(
                f"  {when}: job {terminal_text(e.job)} of account {terminal_text(e.account)} (user "
                f"{terminal_text(e.user)}) {_VICTIM_VERB.get(e.outcome, terminal_text(e.outcome))}{said} on {nodes} "
                "to make room for this job"
            )
            out.append(f"    {shares}; work lost: {lost_text(e.lost) if e.moved else 'nothing'}")
    claimed = [e for e in events if e.job not in ours and e.moved]
    if len(claimed) > 1:
        out.append(f"  in all {len(claimed)} job(s) moved for this job; work lost: {lost_text(lost_in_all(claimed))}")
    return out


# --------------------------------------------------------------------------
# The share report


@dataclass(frozen=True, slots=True)
class ReclaimSection:
    """The report's reclaims: the last cycle's (`since` None), or the history's since `since` (UTC, as shown)."""

    events: tuple[ReclaimEvent, ...] = ()
    since: str | None = None

    @property
    def moved(self) -> int:
        return sum(1 for e in self.events if e.moved)

    @property
    def lost(self) -> dict[str, float]:
        return lost_in_all(self.events)

    def heading(self) -> str:
        """`reclaims in the last cycle (…): moved 2 job(s) for jobs within their guarantees; work lost: …`."""
        where = "in the last cycle" if self.since is None else f"since {self.since}"
        verb = "would move" if any(e.outcome == "would" for e in self.events) else "moved"
        head = f"reclaims {where} (docs/rule.md §9): {verb} {self.moved} job(s) for jobs within their guarantees"
        failed = len(self.events) - self.moved
        return (
            head
            + (f", {failed} chosen but not moved" if failed else "")
            + (f"; work lost: {lost_text(self.lost)}" if self.moved else "")
        )


REPORT_HEADERS: Final = ("time", "pool", "job", "account", "for job", "for account", "shares before", "outcome", "lost")


def report_rows(section: ReclaimSection) -> list[list[str]]:
    """One row per event, newest last, for the text, markdown and HTML reports (names made inert)."""
    return [
        [
            terminal_text(e.time or "this cycle"),
            terminal_text(e.pool),
            terminal_text(e.job),
            terminal_text(e.account),
            terminal_text(e.for_job),
            terminal_text(e.for_account),
            f"{format_share(e.share)} / {format_share(e.for_share)}",
            terminal_text(e.outcome) + (f": {terminal_text(e.message)}" if e.message else ""),
            lost_text(e.lost) if e.moved else "nothing",
        ]
        for e in section.events
    ]


def report_lines(section: ReclaimSection) -> list[str]:
    """The text report's lines: the heading, then one aligned row per event."""
    out = ["", section.heading()]
    if section.events:
        out.append(render_table(list(REPORT_HEADERS), report_rows(section)))
    return out


def report_markdown(section: ReclaimSection, cell: Callable[[str], str]) -> list[str]:
    """The markdown report's lines; `cell` escapes a cell (share_report's markdown_cell)."""
    out = ["", "## Reclaims", "", cell(section.heading())]
    if section.events:
        out += ["", "| " + " | ".join(REPORT_HEADERS) + " |", "|" + "|".join(":---" for _ in REPORT_HEADERS) + "|"]
        out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in report_rows(section)]
    return out


def report_html(section: ReclaimSection) -> str:
    """The HTML report's section: the heading, then a table of the events."""
    esc = html.escape
    out = [
        '<section class="reclaims" id="reclaims">',
        "<h2>Reclaims</h2>",
        f'<p class="meta">{esc(section.heading())}</p>',
    ]
    if section.events:
        out.append('<table class="shares reclaims"><thead><tr>')
        out.extend(f'<th class="text" scope="col">{esc(h)}</th>' for h in REPORT_HEADERS)
        out.append("</tr></thead><tbody>")
        out.extend(
            "<tr>" + "".join(f'<td class="text">{esc(c)}</td>' for c in row) + "</tr>" for row in report_rows(section)
        )
        out.append("</tbody></table>")
    out.append("</section>")
    return "\n".join(out)


def report_json(section: ReclaimSection) -> dict[str, Any]:
    """The report JSON's `reclaims`: the window, the count moved, the hours lost in all, every event."""
    return {
        "since": section.since,
        "moved": section.moved,
        "lost": section.lost,
        "jobs": [event_json(e) for e in section.events],
    }
