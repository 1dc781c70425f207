"""Why a job has its value: `slurm-drf explain JOBID`.

Sits beside the report, under the CLI: `explain_job(plan, snapshot, job_id)`
is pure and rebuilds, from the plan and the snapshot it was computed from,
what the engine decided for one job (SPEC §2): the usage its level is
computed over (its account's running usage plus the demand of the
account's earlier pending jobs), the level, and for every job ahead of it
in the pool the rule that put it there:

- `own_queue`: an earlier job of the same account (Slurm's own order);
- `lower_level`: a strictly lower level (exact fractions decide);
- `share_vector`: an equal level, but a smaller sorted share vector;
- `tie_wins` / `rotation`: equal level and share vector, a tie the
  account won through fewer recent tie wins, or through the per-cycle
  rotation key when the wins were equal too.

Ties are replayed the way the engine breaks them (`drf._break_ties`): every
group of exactly equal (level, share vector) in plan order, from the tie
wins the plan started with. `tie_replayed` says whether the replay
reproduced the plan's order; when it does not (a plan from another
version), the tie reasons are reported as `tie` without the detail.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Final

from slurm_drf.errors import InputError
from slurm_drf.model.types import PENDING, Snapshot, job_number
from slurm_drf.policy.plan import AccountShare, Plan, PlanJobs
from slurm_drf.policy.pools import share_vector
from slurm_drf.policy.state import rotation_key
from slurm_drf.trail.text import format_share, format_weight, render_table

REASONS: Final = ("own_queue", "lower_level", "share_vector", "tie_wins", "rotation", "tie")


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
class Explanation:
    job_id: str
    status: str  # ordered | skipped | running | other
    state: str
    account: str
    user: str
    pool: str | None
    mode: str
    scale: int
    action: str | None = None
    reason: str | None = None
    order: int | None = None
    pool_jobs: int = 0
    level: float | None = None
    level_exact: Fraction | None = None
    scaled_level: int | None = None
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
    tie_replayed: bool = True
    notes: tuple[str, ...] = ()


def _columns(plan: Plan) -> Mapping[str, Sequence[Any]]:
    jobs = plan.jobs
    if isinstance(jobs, PlanJobs):
        return jobs.columns
    names = (
        "job_id",
        "account",
        "user",
        "pool",
        "order",
        "level",
        "value",
        "current",
        "action",
        "reason",
        "tie",
        "user_nice",
        "array_tasks",
    )
    return {name: [getattr(job, name) for job in jobs] for name in names}


def find_job_index(plan: Plan, snapshot: Snapshot, job_id: str) -> tuple[int | None, int | None]:
    """(index in the plan's jobs, row in the snapshot's table) of a job id; a task id finds its array."""
    ids = _columns(plan)["job_id"]
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


def explain_job(plan: Plan, snapshot: Snapshot, job_id: str) -> Explanation:
    """Why `job_id` has its place and value in `plan` (computed from `snapshot`).

    InputError when the snapshot does not hold the job.
    """
    plan_index, row = find_job_index(plan, snapshot, job_id)
    table = snapshot.table
    if plan_index is None and row is None:
        raise InputError(
            f"job {job_id}: not in the queue of cluster {snapshot.cluster} "
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
        share = (
            None
            if pool is None
            else next((a for a in plan.accounts if a.account == account and a.pool == pool.name), None)
        )
        return Explanation(
            table.job_id[row],
            status,
            state,
            account,
            table.user[row],
            None if pool is None else pool.name,
            plan.mode,
            plan.scale,
            demand=MappingProxyType(demand),
            array_tasks=int(table.array_tasks[row]),
            account_share=share,
            capacity=MappingProxyType({} if pool is None else dict(pool.capacity)),
            notes=(note,),
        )
    columns = _columns(plan)
    job = {name: columns[name][plan_index] for name in columns}
    state = table.states[table.state[row]] if row is not None else PENDING
    demand = {r: int(table.column(r)[row]) * int(job["array_tasks"]) for r in resources} if row is not None else {}
    share = next((a for a in plan.accounts if a.account == job["account"] and a.pool == job["pool"]), None)
    common: dict[str, Any] = {
        "job_id": job["job_id"],
        "state": state,
        "account": job["account"],
        "user": job["user"],
        "pool": job["pool"],
        "mode": plan.mode,
        "scale": plan.scale,
        "action": job["action"],
        "reason": job["reason"],
        "value": job["value"],
        "current": job["current"],
        "user_nice": int(job["user_nice"]),
        "array_tasks": int(job["array_tasks"]),
        "demand": MappingProxyType(demand),
        "account_share": share,
        "capacity": MappingProxyType(next((dict(p.capacity) for p in plan.pools if p.name == job["pool"]), {})),
    }
    if job["order"] is None:
        return Explanation(
            status="skipped", **common, notes=(f"skipped ({job['reason']}): the daemon leaves this job's value alone",)
        )
    return _explain_ordered(plan, snapshot, columns, plan_index, common)


def _explain_ordered(
    plan: Plan, snapshot: Snapshot, columns: Mapping[str, Sequence[Any]], plan_index: int, common: dict[str, Any]
) -> Explanation:
    resources = tuple(plan.resources)
    pools = {pool.name: pool for pool in plan.pools}
    our_pool = columns["pool"][plan_index]
    capacity = [int(pools[our_pool].capacity.get(r, 0)) for r in resources]
    weights = {(a.pool, a.account): a.weight for a in plan.accounts}
    usage = {(a.pool, a.account): [int(a.usage.get(r, 0)) for r in resources] for a in plan.accounts}

    # Usage before each ordered job: its account's running usage plus the
    # demand of the account's earlier pending jobs (plan order keeps each
    # account's Slurm order).
    table = snapshot.table
    rows = {job_id: i for i, job_id in enumerate(table.job_id)}
    tres = [table.column(r) for r in resources]
    ordered = [i for i, o in enumerate(columns["order"]) if o is not None]
    by_pool: dict[str, list[int]] = {}
    for i in ordered:
        by_pool.setdefault(columns["pool"][i], []).append(i)
    for indices in by_pool.values():
        indices.sort(key=lambda i: columns["order"][i])
    before: dict[int, list[int]] = {}
    for pool, indices in by_pool.items():
        running = {key[1]: list(value) for key, value in usage.items() if key[0] == pool}
        for i in indices:
            account = columns["account"][i]
            current = running.setdefault(account, [0] * len(resources))
            before[i] = list(current)
            row = rows.get(columns["job_id"][i])
            if row is not None:
                tasks = int(columns["array_tasks"][i])
                running[account] = [c + int(col[row]) * tasks for c, col in zip(current, tres, strict=True)]

    cache: dict[int, tuple[Fraction, ...]] = {}

    def vector(i: int) -> tuple[Fraction, ...]:
        """The exact sorted weighted share vector the engine ordered job i by."""
        if i not in cache:
            pool_capacity = [int(pools[columns["pool"][i]].capacity.get(r, 0)) for r in resources]
            weight = weights.get((columns["pool"][i], columns["account"][i]), Fraction(1))
            cache[i] = share_vector(before[i], pool_capacity, weight) or (Fraction(0),)
        return cache[i]

    def float_vector(i: int) -> tuple[float, ...]:
        # As the engine computes it: one correctly rounded division per share.
        pool_capacity = [int(pools[columns["pool"][i]].capacity.get(r, 0)) for r in resources]
        weight = weights.get((columns["pool"][i], columns["account"][i]), Fraction(1))
        return tuple(
            sorted(
                (
                    u * weight.denominator / (c * weight.numerator)
                    for u, c in zip(before[i], pool_capacity, strict=True)
                    if c > 0
                ),
                reverse=True,
            )
        )

    def same(i: int, j: int) -> bool:
        """Whether jobs i and j have exactly equal share vectors; exact fractions only when floats cannot tell."""
        if before[i] == before[j] and weights.get((columns["pool"][i], columns["account"][i])) == weights.get(
            (columns["pool"][j], columns["account"][j])
        ):
            return True
        # Equal fractions round to equal floats: different floats prove different vectors.
        if float_vector(i) != float_vector(j):
            return False
        return vector(i) == vector(j)

    replay = _replay_ties(plan, columns, by_pool, same, (our_pool, plan_index))
    ours = vector(plan_index)
    our_level = columns["level"][plan_index]
    our_account = columns["account"][plan_index]
    pool_indices = by_pool[our_pool]
    position = pool_indices.index(plan_index)
    counts: dict[str, dict[str, int]] = {}
    for i in pool_indices[:position]:
        account = columns["account"][i]
        if account == our_account:
            why = "own_queue"
        elif columns["level"][i] < our_level:
            # A smaller float level proves a smaller exact one (rounding is monotonic).
            why = "lower_level"
        else:
            theirs = vector(i)
            if theirs[0] < ours[0]:
                why = "lower_level"
            elif theirs < ours:
                why = "share_vector"
            else:
                why = replay.reasons.get((i, plan_index), "tie") if replay.ok else "tie"
        counts.setdefault(account, dict.fromkeys(REASONS, 0))[why] += 1
    ahead = tuple(
        sorted(
            (
                AheadCount(a, sum(c.values()), MappingProxyType({k: v for k, v in c.items() if v}))
                for a, c in counts.items()
            ),
            key=lambda x: (-x.jobs, x.account),
        )
    )
    usage_before = dict(zip(resources, before[plan_index], strict=True))
    shares_before = {r: (u / c if c else 0.0) for r, u, c in zip(resources, before[plan_index], capacity, strict=True)}
    level = columns["level"][plan_index]
    notes: list[str] = []
    if not replay.ok:
        notes.append("the tie replay did not reproduce this plan's order; tie reasons are given without detail")
    return Explanation(
        status="ordered",
        **common,
        order=columns["order"][plan_index],
        pool_jobs=len(pool_indices),
        level=level,
        level_exact=ours[0],
        scaled_level=int(Fraction(plan.scale) * ours[0] + Fraction(1, 2)),
        usage_before=MappingProxyType(usage_before),
        shares_before=MappingProxyType(shares_before),
        earlier_own=sum(1 for i in pool_indices[:position] if columns["account"][i] == our_account),
        ahead=ahead,
        ahead_total=position,
        behind=len(pool_indices) - position - 1,
        tie=bool(columns["tie"][plan_index]),
        tie_detail=replay.details.get(plan_index),
        tie_replayed=replay.ok,
        notes=tuple(notes),
    )


@dataclass
class _Replay:
    ok: bool = True
    # (job ahead, job behind) -> "tie_wins" | "rotation", for jobs of different accounts in one group.
    reasons: dict[tuple[int, int], str] = field(default_factory=dict)
    details: dict[int, TieDetail] = field(default_factory=dict)


def _replay_ties(
    plan: Plan,
    columns: Mapping[str, Sequence[Any]],
    by_pool: Mapping[str, list[int]],
    same: Callable[[int, int], bool],
    until: tuple[str, int],
) -> _Replay:
    """Break the tie groups again as the engine does, in its order (pools in plan order, then
    positions), up to the group of job `until`; say who won each comparison, and why.

    The tie wins carry from group to group and from pool to pool, so every
    group before the job's matters; none after it does.
    """
    replay = _Replay()
    wins = dict(plan.state.tie_wins)
    epoch = plan.state.epoch
    last_pool, last_job = until
    for pool in (p.name for p in plan.pools):
        indices = by_pool.get(pool, [])
        start = 0
        while start < len(indices):
            stop = start + 1
            level = columns["level"][indices[start]]
            # Exactly equal vectors have equal float levels: floats find the candidates.
            while stop < len(indices) and columns["level"][indices[stop]] == level:
                stop += 1
            if stop - start > 1:
                for group in _split_equal(indices[start:stop], same):
                    if len({columns["account"][i] for i in group}) > 1:
                        replay.ok &= _replay_group(group, columns, wins, epoch, replay)
            if pool == last_pool and last_job in indices[start:stop]:
                return replay
            start = stop
        if pool == last_pool:
            break
    return replay


def _split_equal(indices: list[int], same: Callable[[int, int], bool]) -> list[list[int]]:
    groups: list[list[int]] = [[indices[0]]]
    for i in indices[1:]:
        if same(groups[-1][-1], i):
            groups[-1].append(i)
        else:
            groups.append([i])
    return [g for g in groups if len(g) > 1]


def _replay_group(
    group: list[int], columns: Mapping[str, Sequence[Any]], wins: dict[str, float], epoch: int, replay: _Replay
) -> bool:
    """One tie group through the engine's heap; False when the replay's order is not the plan's."""
    accounts = [columns["account"][i] for i in group]
    queues: dict[str, list[int]] = {}
    for i, account in zip(group, accounts, strict=True):
        queues.setdefault(account, []).append(i)
    start_wins = {a: wins.get(a, 0.0) for a in queues}
    ranks = {a: k for k, a in enumerate(sorted(queues, key=lambda a: rotation_key(epoch, a)), start=1)}
    heap = [(wins.get(a, 0.0), rotation_key(epoch, a), a) for a in queues]
    heapq.heapify(heap)
    placed: list[int] = []
    ahead_of: dict[int, list[tuple[int, str]]] = {}
    while heap:
        key = heapq.heappop(heap)
        account = key[2]
        if heap:
            wins[account] = wins.get(account, 0.0) + 1.0
        job = queues[account].pop(0)
        # Every account still waiting lost this comparison; say why.
        for other in heap:
            why = "tie_wins" if key[0] < other[0] else "rotation"
            for waiting in queues[other[2]]:
                ahead_of.setdefault(waiting, []).append((job, why))
        placed.append(job)
        if queues[account]:
            heapq.heappush(heap, (wins.get(account, 0.0), rotation_key(epoch, account), account))
    if placed != group:
        return False
    for behind, items in ahead_of.items():
        for job, why in items:
            replay.reasons[(job, behind)] = why
    for i in group:
        mine = columns["account"][i]
        position = group.index(i)
        replay.details[i] = TieDetail(
            accounts=tuple(queues),
            jobs=len(group),
            wins=MappingProxyType(start_wins),
            rotation_rank=MappingProxyType(ranks),
            won_against=sum(1 for j in group[position + 1 :] if columns["account"][j] != mine),
            lost_to=sum(1 for j in group[:position] if columns["account"][j] != mine),
        )
    return True


# --------------------------------------------------------------------------
# Rendering (pure)

_REASON_TEXT: Final = {
    "own_queue": "earlier in its own account's queue (Slurm's order)",
    "lower_level": "lower level",
    "share_vector": "equal level, smaller share vector (next-largest share)",
    "tie_wins": "full tie, fewer recent tie wins",
    "rotation": "full tie, equal tie wins, this cycle's rotation",
    "tie": "full tie (tie wins, then rotation)",
}


def _fraction_text(value: Fraction) -> str:
    return f"{float(value):.6g}" + (
        f" (exactly {value})"
        if value.denominator != 1 and value.denominator < 10**6 and float(value) != round(float(value), 6)
        else ""
    )


def render_explanation_text(e: Explanation) -> str:
    """The explanation for a person, in a few paragraphs."""
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
        out.append(f"  {what}: " + ", ".join(f"{r}={v}" for r, v in e.demand.items()))
    share = e.account_share
    if share is not None:
        out.append("")
        out.append(
            f"account {share.account} in pool {share.pool}: weight {format_weight(share.weight)}, "
            f"rank {share.rank} by weighted share, {share.running_jobs} running, "
            f"{share.pending_jobs} pending"
        )
        rows = [
            [
                r,
                e.capacity.get(r, "-") if e.capacity else "-",
                share.usage.get(r, 0),
                format_share(share.shares.get(r, 0.0)),
                "dominant" if r == share.dominant_resource and share.dominant_share else "",
            ]
            for r in share.usage
        ]
        out.append(_indent(render_table(["resource", "capacity", "used", "share", "note"], rows)))
        out.append(
            f"  dominant share {format_share(share.dominant_share)} / weight {format_weight(share.weight)}"
            f" = weighted share {format_share(share.weighted_share)}"
        )
    if e.status == "ordered":
        assert e.level_exact is not None
        out.append("")
        out.append(
            f"level {_fraction_text(e.level_exact)}: the account's weighted dominant share over its "
            f"running usage plus its {e.earlier_own} earlier pending job(s) in this pool"
        )
        rows = [
            [r, e.capacity.get(r, 0), e.usage_before.get(r, 0), format_share(e.shares_before.get(r, 0.0))]
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
        out.append("")
        out.append(f"ahead of it: {e.ahead_total} job(s); behind it: {e.behind}")
        if e.ahead:
            rows = [
                [a.account, a.jobs, "; ".join(f"{n} {_REASON_TEXT[k]}" for k, n in a.reasons.items())] for a in e.ahead
            ]
            out.append(_indent(render_table(["account", "jobs", "why they go first"], rows)))
        out.append("")
        if e.tie and e.tie_detail is not None:
            d = e.tie_detail
            others = [a for a in d.accounts if a != e.account]
            wins = ", ".join(f"{a} {d.wins.get(a, 0.0):.3g}" for a in d.accounts)
            ranks = ", ".join(f"{a} {d.rotation_rank[a]}" for a in sorted(d.accounts, key=lambda a: d.rotation_rank[a]))
            out.append(
                f"a tie decided its place: {d.jobs} jobs of {len(d.accounts)} accounts "
                f"({', '.join(others)} besides {e.account}) have exactly this level and share vector"
            )
            out.append(f"  broken by fewer tie wins (at the tie: {wins}), then the rotation (this cycle: {ranks})")
            out.append(f"  it went after {d.lost_to} and before {d.won_against} of the other accounts' tied jobs")
        elif e.tie:
            out.append("a tie decided its place (equal level and share vector with another account's job)")
        else:
            out.append("no tie: its level and share vector differ from every other account's job")
    if e.status in ("ordered", "skipped"):
        out.append("")
        if e.value is not None:
            scaled = f"; round(scale {e.scale} x level) = {e.scaled_level}" if e.scaled_level is not None else ""
            out.append(f"value: {e.mode} {e.value}{scaled}")
            if e.mode == "nice" and e.user_nice:
                out.append(f"  includes the user's own nice {e.user_nice}")
        now = "unknown" if e.current is None else str(e.current)
        out.append(
            f"Slurm has {e.mode} {now} now; action: {e.action}"
            + (" (the next cycle writes the value)" if e.action == "set" else "")
        )
    out.extend(f"note: {n}" for n in e.notes)
    return "\n".join(out) + "\n"


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
            "dominant_resource": share.dominant_resource if share.dominant_share else None,
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
    return data
