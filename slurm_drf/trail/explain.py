"""Why a job has its value: `slurm-drf explain JOBID`.

Sits beside the report, under the CLI: `explain_job(plan, snapshot, job_id)`
is pure and reads, from the record the engine keeps on the plan
(`Plan.orders`, one `PoolOrder` per pool), what it decided for one job
(docs/rule.md §2): the usage its level is computed over (its account's running
usage plus the demand of the account's earlier pending jobs), the level,
and for every job ahead of it in the pool the rule that put it there:

- `own_queue`: an earlier job of the same account (Slurm's own order);
- `lower_level`: a strictly lower level (in whole numbers of 2**-30 of
  the pool, as the order compares them: docs/rule.md §2, "Equal shares");
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
are the engine's (`policy.engine.order`). The snapshot only supplies what the
plan does not hold: a job's demand, its state, and jobs the plan leaves out.

With a decayed past in the plan (docs/rule.md §6), `explain_planned` also
plans the snapshot once more without it (pure DRF, the same state), only
then, and the explanation says how much of the job's place comes from
history: what the past adds to its account, its share with and without,
and the place it would have without.

With a history of reclaims (docs/rule.md §9; `reclaims`, a lookup the CLI
makes over the history read-only), the explanation also carries every
reclaim that names the job: as the victim (requeued for which job of which
account, when, both shares, the work lost) or as the claim (the jobs
requeued for it). A job no longer in the queue that the history names so
is explained from those rows alone (status `gone`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
from slurm_drf.policy.engine.order import TieRecord
from slurm_drf.policy.engine.tree_order import TreeRow
from slurm_drf.policy.guarantees import OVER, WITHIN
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.policy.plan_columns import AccountShare, JobPlan, PoolOrder
from slurm_drf.policy.state import EMPTY_STATE, PolicyState
from slurm_drf.trail.plan_output import present_share
from slurm_drf.trail.reclaim_shown import ReclaimEvent

# The reclaims the history holds naming any of the given job ids, oldest first.
ReclaimLookup = Callable[[Sequence[str]], Sequence[ReclaimEvent]]

REASONS: Final = ("own_queue", "lower_level", "share_vector", "tie_wins", "rotation", "tree_walk", "guarantee", "limit")


@dataclass(frozen=True, slots=True)
class AheadCount:
    """Jobs of one account ahead of the explained job, by the rule that put them there."""

    account: str
    jobs: int
    reasons: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class TieDetail:
    """The group of equal (level, share vector) the job was ordered in."""

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
    status: str  # ordered | skipped | running | other | gone (not in the queue; only its reclaims)
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
    # The history's reclaims naming the job, as the victim or as the claim (docs/rule.md §9).
    reclaims: tuple[ReclaimEvent, ...] = ()
    # The ids the reclaims were looked up by (the one asked, the one found): a row naming one as its
    # `job` is of this job as the victim, else as the claim.
    reclaim_names: tuple[str, ...] = ()


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
    reclaims: ReclaimLookup | None = None,
) -> Explanation:
    """Plan `snapshot` (with `past`) and explain `job_id`; when the plan blends a past,
    plan it again without (and only then) to tell what history does to the job."""
    plan = compute_plan(snapshot, config, state, past)
    pure = compute_plan(snapshot, config, state) if plan.blends_past else None
    return explain_job(plan, snapshot, job_id, pure, reclaims=reclaims)


def explain_job(
    plan: Plan, snapshot: Snapshot, job_id: str, pure: Plan | None = None, *, reclaims: ReclaimLookup | None = None
) -> Explanation:
    """Why `job_id` has its place and value in `plan` (computed from `snapshot`).

    `pure`: the same snapshot planned without the past, when `plan` blends
    one; then the explanation carries its `history` effect. `reclaims`: the
    history's reclaims naming a job (the explanation carries them).
    InputError when the snapshot does not hold the job and no reclaim names it.
    """
    if reclaims is not None and find_job_index(plan, snapshot, job_id) == (None, None):
        gone = _gone(plan, job_id, reclaims)
        if gone is not None:
            return gone
    explanation = _explain(plan, snapshot, job_id)
    if reclaims is not None:
        named = tuple(dict.fromkeys((job_id.strip(), explanation.job_id)))
        explanation = replace(explanation, reclaims=tuple(reclaims(named)), reclaim_names=named)
    if not plan.blends_past or explanation.account_share is None:
        return explanation
    return replace(explanation, history=_history_effect(explanation, pure))


def _gone(plan: Plan, job_id: str, reclaims: ReclaimLookup) -> Explanation | None:
    """A job no longer in the queue, told from the reclaims the history holds of it; None when it holds none."""
    wanted = job_id.strip()
    check_job_id(wanted)
    events = tuple(reclaims((wanted,)))
    if not events:
        return None
    last = events[-1]
    account, user = (last.account, last.user) if last.job == wanted else (last.for_account, "")
    note = f"not in the queue of cluster {plan.cluster} now: what the history's reclaims say of it"
    return Explanation(
        wanted, "gone", "", account, user, last.pool, plan.mode, notes=(note,), reclaims=events, reclaim_names=(wanted,)
    )


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
        bound = _bound_reason(record, ahead, position)
        if bound is not None:
            why = bound
        elif account == our_account:
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


def _bound_reason(record: PoolOrder, ahead: int, position: int) -> str | None:
    """`guarantee` when the job ahead is within its guarantee and this one is not; `limit` when
    this one is over its account's limit and the one ahead is not (docs/rule.md §9)."""
    if record.parts is None:
        return None
    order = record.ordering.order
    theirs, ours = int(record.parts[order[ahead]]), int(record.parts[order[position]])
    if theirs == WITHIN != ours:
        return "guarantee"
    if ours == OVER != theirs:
        return "limit"
    return None


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
    for ahead, (account, path) in enumerate(zip(accounts[:position], paths[:position], strict=True)):
        why = _bound_reason(record, ahead, position) or ("own_queue" if path == ours else "tree_walk")
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
