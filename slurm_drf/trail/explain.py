"""Why a job has its value: `slurm-drf explain JOBID`.

Sits beside the report, under the CLI: `explain_job(plan, snapshot, job_id)`
is pure and reads, from the record the engine keeps on the plan
(`Plan.orders`, one `PoolOrder` per pool), what it decided for one job
(docs/rule.md §2): the usage its level is computed over (its account's running
usage plus the demand of the account's earlier pending jobs), the level,
and for every job ahead of it in the pool the rule that put it there:

- `own_queue`: an earlier job of the same account (Slurm's own order);
- `lower_level`: a strictly lower level (exact fractions decide);
- `share_vector`: an equal level, but a smaller sorted share vector;
- `tie_wins` / `rotation`: equal level and share vector, a tie the
  account won through fewer recent tie wins, or through the per-cycle
  rotation key when the wins were equal too.

Over Slurm's account tree (docs/rule.md §7) a job's place comes from the
H-DRF walk, not from one level per account: the explanation gives its
leaf's path and, per node of it, the node's weighted share when the job
was placed (the plan's `path_shares`) and now (before any pending job,
the plan's tree rows) and its rank among its siblings now; a job ahead is
`own_queue` (an earlier job of the same leaf) or `tree_walk` (placed from
another branch, which had the lower weighted share where the paths part).
The flat reasons (levels, share vectors, tie groups) are not claimed; the
job's level (§2's, its account's share before it in the plan's order) is
shown for comparison only.

Nothing here recomputes the policy: the order, the levels and the ties
are the engine's (`policy.order`). The snapshot only supplies what the
plan does not hold: a job's demand, its state, and jobs the plan leaves out.

With a decayed past in the plan (docs/rule.md §6), `explain_planned` also
plans the snapshot once more without it (pure DRF, the same state), only
then, and the explanation says how much of the job's place comes from
history: what the past adds to its account, its share with and without,
and the place it would have without.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Final

from slurm_drf.config.settings import Config
from slurm_drf.errors import InputError, shorten
from slurm_drf.model.account_tree import PATH_SEPARATOR
from slurm_drf.model.codec import is_job_id
from slurm_drf.model.types import MAX_JOB_ID, PENDING, Snapshot, job_number
from slurm_drf.policy.decayed_usage import UsageByPool
from slurm_drf.policy.order import TieRecord
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.policy.plan_columns import AccountShare, JobPlan, PoolOrder
from slurm_drf.policy.state import EMPTY_STATE, PolicyState
from slurm_drf.policy.tree_order import TreeRow
from slurm_drf.trail.plan_output import present_share
from slurm_drf.trail.text import (
    format_capacity,
    format_share,
    format_tres,
    format_weight,
    node_label,
    render_table,
    terminal_text,
)

REASONS: Final = ("own_queue", "lower_level", "share_vector", "tie_wins", "rotation", "tree_walk")


@dataclass(frozen=True, slots=True)
class AheadCount:
    """Jobs of one account ahead of the explained job, by the rule that put them there."""

    account: str
    jobs: int
    reasons: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class TieDetail:
    """The group of exactly equal (level, share vector) the job was ordered in."""

    accounts: tuple[str, ...]
    jobs: int
    # Tie wins of each account when the group was broken, and its rotation key's rank (1 first).
    wins: Mapping[str, float]
    rotation_rank: Mapping[str, int]
    won_against: int
    lost_to: int


@dataclass(frozen=True, slots=True)
class TreeStep:
    """One node of an ordered job's path in the account tree (docs/rule.md §7), the root's child first."""

    path: str
    name: str
    kind: str
    share_at_placement: float
    share_now: float
    rank: int  # among its siblings by weighted share now: 1 + the siblings with a lower one
    siblings: int  # the node's siblings, itself included


@dataclass(frozen=True, slots=True)
class HistoryEffect:
    """How much of a job's place comes from the decayed past (docs/rule.md §6).

    `added` is what the past adds to the account's usage; the shares are the
    account's weighted share over its running usage alone and with the past.
    `order_without` / `level_without`: the job's place and level when the
    same snapshot is planned without the past (None when it is not ordered).
    """

    added: Mapping[str, int]
    present_share: float
    weighted_share: float
    order_without: int | None = None
    level_without: float | None = None


@dataclass(frozen=True, slots=True)
class Explanation:
    job_id: str
    status: str  # ordered | skipped | running | other
    state: str
    account: str
    user: str
    pool: str | None
    mode: str
    action: str | None = None
    reason: str | None = None
    order: int | None = None
    pool_jobs: int = 0
    level: float | None = None
    level_exact: Fraction | None = None
    band: str | None = None  # exact | coarse
    exact: int = 0  # the pool's exact band: its first `exact` jobs
    gap: int = 1  # how far apart the exact band keeps neighbours
    value: int | None = None
    current: int | None = None
    user_nice: int = 0
    array_tasks: int = 1
    demand: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    account_share: AccountShare | None = None
    capacity: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    usage_before: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    shares_before: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    earlier_own: int = 0
    ahead: tuple[AheadCount, ...] = ()
    ahead_total: int = 0
    behind: int = 0
    tie: bool = False
    tie_detail: TieDetail | None = None
    # Always true since explain reads the engine's own record of its ties
    # (it once replayed them); kept so that the JSON keeps its shape.
    tie_replayed: bool = True
    notes: tuple[str, ...] = ()
    # Only when the plan blends a past: what history does to this job.
    history: HistoryEffect | None = None
    # Only over a tree: the job's leaf path, node by node.
    tree: tuple[TreeStep, ...] = ()


def find_job_index(plan: Plan, snapshot: Snapshot, job_id: str) -> tuple[int | None, int | None]:
    """(index in the plan's jobs, row in the snapshot's table) of a job id; a task id finds its array."""
    ids = plan.column("job_id")
    table = snapshot.table
    wanted = job_id.strip()
    plan_index = next((i for i, j in enumerate(ids) if j == wanted), None)
    row = next((i for i, j in enumerate(table.job_id) if j == wanted), None)
    if plan_index is None and row is None:
        number = job_number(wanted)
        if number:
            # `123_4` or `123_[0-9]`: the pending array record 123 the plan writes.
            plan_index = next((i for i, j in enumerate(ids) if job_number(j) == number), None)
            pending = [
                i
                for i, n in enumerate(table.job_number.tolist())
                if n == number and table.states[table.state[i]] == PENDING
            ]
            row = (
                pending[0]
                if pending
                else next((i for i, n in enumerate(table.job_number.tolist()) if n == number), None)
            )
    if plan_index is not None and row is None:
        plan_id = ids[plan_index]
        row = next((i for i, j in enumerate(table.job_id) if j == plan_id), None)
    return plan_index, row


def explain_planned(
    snapshot: Snapshot,
    config: Config,
    job_id: str,
    state: PolicyState = EMPTY_STATE,
    past: UsageByPool | None = None,
) -> Explanation:
    """Plan `snapshot` (with `past`) and explain `job_id`; when the plan blends a past,
    plan it again without (and only then) to tell what history does to the job."""
    plan = compute_plan(snapshot, config, state, past)
    pure = compute_plan(snapshot, config, state) if plan.blends_past else None
    return explain_job(plan, snapshot, job_id, pure)


def explain_job(plan: Plan, snapshot: Snapshot, job_id: str, pure: Plan | None = None) -> Explanation:
    """Why `job_id` has its place and value in `plan` (computed from `snapshot`).

    `pure`: the same snapshot planned without the past, when `plan` blends
    one; then the explanation carries its `history` effect.
    InputError when the snapshot does not hold the job.
    """
    explanation = _explain(plan, snapshot, job_id)
    if not plan.blends_past or explanation.account_share is None:
        return explanation
    return replace(explanation, history=_history_effect(explanation, pure))


def _history_effect(e: Explanation, pure: Plan | None) -> HistoryEffect:
    share = e.account_share
    assert share is not None
    order = level = None
    if pure is not None and e.status == "ordered":
        ids = pure.column("job_id")
        index = next((i for i, j in enumerate(ids) if j == e.job_id), None)
        if index is not None:
            job = pure.job(index)
            order, level = job.order, job.level
    return HistoryEffect(MappingProxyType(dict(share.past)), present_share(share), share.weighted_share, order, level)


def check_job_id(job_id: str) -> None:
    """InputError unless `job_id` names a job: a job number (1 to MAX_JOB_ID), with a task or het suffix."""
    head = job_id.strip().split("_", 1)[0].split("+", 1)[0]
    if not is_job_id(head):
        raise InputError(
            f"job {shorten(job_id, 60)}: not a job id: expected a job number from 1 to {MAX_JOB_ID} "
            "(or an array task such as 1234_5)"
        )


def _explain(plan: Plan, snapshot: Snapshot, job_id: str) -> Explanation:
    plan_index, row = find_job_index(plan, snapshot, job_id)
    table = snapshot.table
    if plan_index is None and row is None:
        check_job_id(job_id)  # what no job can be named is said so
        raise InputError(
            f"job {shorten(job_id, 60)}: not in the queue of cluster {snapshot.cluster} "
            "(neither pending nor running when it was read)"
        )
    resources = tuple(plan.resources)
    if plan_index is None:
        assert row is not None
        state = table.states[table.state[row]]
        account = table.accounts[table.account[row]]
        demand = {r: int(table.column(r)[row]) for r in resources}
        status = "running" if state != PENDING else "other"
        note = (
            "running jobs are not ordered: this one counts in its account's usage"
            if status == "running"
            else f"state {state}: the daemon orders pending jobs only"
        )
        partitions = set(table.partitions[table.partition[row]].split(","))
        pool = next((p for p in plan.pools if partitions.intersection(p.partitions)), None)
        share = None if pool is None else plan.account_share(pool.name, account)
        return Explanation(
            table.job_id[row],
            status,
            state,
            account,
            table.user[row],
            None if pool is None else pool.name,
            plan.mode,
            demand=MappingProxyType(demand),
            array_tasks=int(table.array_tasks[row]),
            account_share=share,
            capacity=MappingProxyType({} if pool is None else dict(pool.capacity)),
            notes=(note,),
        )
    job = plan.job(plan_index)
    state = table.states[table.state[row]] if row is not None else PENDING
    demand = {r: int(table.column(r)[row]) * job.array_tasks for r in resources} if row is not None else {}
    share = plan.account_share(job.pool, job.account)
    common: dict[str, Any] = {
        "job_id": job.job_id,
        "state": state,
        "account": job.account,
        "user": job.user,
        "pool": job.pool,
        "mode": plan.mode,
        "action": job.action,
        "reason": job.reason,
        "value": job.value,
        "current": job.current,
        "user_nice": int(job.user_nice),
        "array_tasks": int(job.array_tasks),
        "demand": MappingProxyType(demand),
        "account_share": share,
        "capacity": MappingProxyType(next((dict(p.capacity) for p in plan.pools if p.name == job.pool), {})),
    }
    if job.order is None:
        return Explanation(
            status="skipped", **common, notes=(f"skipped ({job.reason}): the daemon leaves this job's value alone",)
        )
    return _explain_ordered(plan, job, plan_index, common)


def _explain_ordered(plan: Plan, job: JobPlan, plan_index: int, common: dict[str, Any]) -> Explanation:
    placement = plan.placement(plan_index)
    if placement is None:
        raise InputError(f"job {common['job_id']}: the plan keeps no record of why it has its place")
    record, position = placement
    if record.tree is not None:
        return _explain_over_tree(plan, job, record, position, common)
    resources = tuple(plan.resources)
    accounts = plan.column("account")[record.offset : record.offset + record.size]
    our_account = accounts[position]
    level_start, vector_start = record.level_start(position), record.vector_start(position)
    tie = record.tie(position)
    won_by = {} if tie is None else _tie_winners(tie, accounts, position)
    counts: dict[str, dict[str, int]] = {}
    for ahead, account in enumerate(accounts[:position]):
        if account == our_account:
            why = "own_queue"
        elif ahead < level_start:
            why = "lower_level"
        elif ahead < vector_start:
            why = "share_vector"
        else:  # the same (level, share vector), another account: the tie rule placed it first
            why = won_by[ahead]
        counts.setdefault(account, dict.fromkeys(REASONS, 0))[why] += 1
    ahead_counts = _ahead_counts(counts)
    before = record.usage_before(position)
    level_exact = record.level_exact(position)
    shares_before = {r: (u / c if c else 0.0) for r, u, c in zip(resources, before, record.capacity, strict=True)}
    return Explanation(
        status="ordered",
        **common,
        order=position,
        pool_jobs=record.size,
        level=job.level,
        level_exact=level_exact,
        band=job.band,
        exact=record.exact,
        gap=next((p.gap for p in plan.pools if p.name == job.pool), 1),
        usage_before=MappingProxyType(dict(zip(resources, before, strict=True))),
        shares_before=MappingProxyType(shares_before),
        earlier_own=counts.get(our_account, {}).get("own_queue", 0),
        ahead=ahead_counts,
        ahead_total=position,
        behind=record.size - position - 1,
        tie=job.tie,
        tie_detail=None if tie is None else _tie_detail(tie, accounts, position),
    )


def _ahead_counts(counts: Mapping[str, Mapping[str, int]]) -> tuple[AheadCount, ...]:
    """Per account, the jobs ahead and their reasons; the accounts with most jobs ahead first."""
    return tuple(
        sorted(
            (
                AheadCount(a, sum(c.values()), MappingProxyType({k: v for k, v in c.items() if v}))
                for a, c in counts.items()
            ),
            key=lambda x: (-x.jobs, x.account),
        )
    )


def _explain_over_tree(
    plan: Plan, job: JobPlan, record: PoolOrder, position: int, common: dict[str, Any]
) -> Explanation:
    """An ordered job of a pool ordered over the tree: its path, and why each job ahead went first."""
    window = slice(record.offset, record.offset + record.size)
    accounts, paths = plan.column("account")[window], plan.column("path")[window]
    ours = paths[position]
    counts: dict[str, dict[str, int]] = {}
    for account, path in zip(accounts[:position], paths[:position], strict=True):
        why = "own_queue" if path == ours else "tree_walk"
        counts.setdefault(account, dict.fromkeys(REASONS, 0))[why] += 1
    before = record.usage_before(position)
    capacity = record.capacity
    resources = tuple(plan.resources)
    pool = next(p for p in plan.pools if p.name == job.pool)
    return Explanation(
        status="ordered",
        **common,
        order=position,
        pool_jobs=record.size,
        level=job.level,
        level_exact=record.level_exact(position),
        band=job.band,
        exact=record.exact,
        gap=pool.gap,
        usage_before=MappingProxyType(dict(zip(resources, before, strict=True))),
        shares_before=MappingProxyType(
            {r: (u / c if c else 0.0) for r, u, c in zip(resources, before, capacity, strict=True)}
        ),
        earlier_own=counts.get(job.account, {}).get("own_queue", 0),
        ahead=_ahead_counts(counts),
        ahead_total=position,
        behind=record.size - position - 1,
        tie=job.tie,
        tree=_tree_steps(pool.tree, ours, job.path_shares or ()),
    )


def _tree_steps(rows: Sequence[TreeRow], leaf: str, shares: Sequence[float]) -> tuple[TreeStep, ...]:
    """The nodes of `leaf`'s path with their shares at placement and now, and their rank among their siblings."""
    by_path = {row.path: row for row in rows}
    names = leaf.split(PATH_SEPARATOR)
    out: list[TreeStep] = []
    for depth, share in zip(range(1, len(names) + 1), shares, strict=True):
        path = PATH_SEPARATOR.join(names[:depth])
        parent = PATH_SEPARATOR.join(names[: depth - 1])
        row = by_path[path]
        siblings = [r for r in rows if r.depth == depth and r.path.rpartition(PATH_SEPARATOR)[0] == parent]
        rank = 1 + sum(1 for r in siblings if r.weighted_share < row.weighted_share)
        out.append(TreeStep(path, row.name, row.kind, share, row.weighted_share, rank, len(siblings)))
    return tuple(out)


def _tie_winners(tie: TieRecord, accounts: Sequence[str], position: int) -> dict[int, str]:
    """Why each other account's job ahead of `position` in its tie went first: `tie_wins` or `rotation`.

    When a job of account X was placed, the explained job's account waited
    with the key it was next placed with (its wins change only when it
    wins), so walking back from `position`, the key of its latest job seen
    is its key at that moment. X was the heap's smallest: fewer wins, or
    equal wins and the rotation.
    """
    ours = accounts[position]
    our_wins = tie.placed_wins[position - tie.start]
    out: dict[int, str] = {}
    for ahead in range(position - 1, tie.start - 1, -1):
        wins = tie.placed_wins[ahead - tie.start]
        if accounts[ahead] == ours:
            our_wins = wins
        else:
            out[ahead] = "tie_wins" if wins < our_wins else "rotation"
    return out


def _tie_detail(tie: TieRecord, accounts: Sequence[str], position: int) -> TieDetail:
    group = accounts[tie.start : tie.stop]
    names = tuple(dict.fromkeys(group))  # in the order of their first job in the group
    ours = accounts[position]
    here = position - tie.start
    return TieDetail(
        accounts=names,
        jobs=len(group),
        wins=MappingProxyType({a: tie.wins[a] for a in names}),
        rotation_rank=MappingProxyType(
            {a: k for k, a in enumerate(sorted(names, key=lambda a: tie.rotation[a]), start=1)}
        ),
        won_against=sum(1 for a in group[here + 1 :] if a != ours),
        lost_to=sum(1 for a in group[:here] if a != ours),
    )


# --------------------------------------------------------------------------
# Rendering (pure)

_REASON_TEXT: Final = {
    "own_queue": "earlier in its own account's queue (Slurm's order)",
    "lower_level": "lower level",
    "share_vector": "equal level, smaller share vector (next-largest share)",
    "tie_wins": "full tie, fewer recent tie wins",
    "rotation": "full tie, equal tie wins, this cycle's rotation",
    "tree_walk": "another branch of the tree, of lower weighted share where the paths part",
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
        return ["no tie: its level and share vector differ from every other account's job"]
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
    if e.history is not None:
        data["history"] = {
            "past": dict(e.history.added),
            "present_share": e.history.present_share,
            "weighted_share": e.history.weighted_share,
            "order_without": e.history.order_without,
            "level_without": e.history.level_without,
        }
    return data
