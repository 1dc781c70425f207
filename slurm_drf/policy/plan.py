"""The policy: pools, shares, levels, the DRF order, the tie rule, values.

Pure: `compute_plan(snapshot, config, state) -> Plan` reads no clock, file
or environment. This module orchestrates a plan; the rows it fills, kept as
columns, are `policy.plan_columns`. It sits under the daemon and the CLI and imports only the
model, the config dataclasses and numpy.

How the order is computed (docs/rule.md §2). The *level* of an account's k-th
pending job is the account's weighted dominant share over its running
usage plus the demand of its first k-1 pending jobs. Progressive filling
always serves the account with the lowest current share, so the DRF order
of all pending jobs is the order of their levels: one exclusive cumulative
sum per account and one sort, vectorised with numpy, of the levels as
whole numbers of 2**-30 of the pool (`policy.engine.fixed_point`, a tree's
arithmetic too); equal levels go to the tie rule. The textbook heap loop,
which the order must equal, is the rule itself (`policy.rule.flat_order`).

The tie rule, applied to equal levels, in turn: the accounts'
weighted share vectors sorted largest first (lexicographically, smaller
first); fewer remembered tie wins first; a key that rotates with the
epoch. An account wins a tie when it is placed while another account waits
at the same level. Wins count within the plan and carry over through
`PolicyState`, halved every `tie_half_life_cycles` epochs. The epoch advances only
when the set of running jobs changed, so replanning an unchanged cluster
gives the same order and writes nothing.

Why each job has its place is kept with the plan (`Plan.orders`, one
`PoolOrder` per pool, `policy.plan_columns`): the usage before each job, where exact levels and
share vectors change along the order, and how each tie was broken. It is
the engine's own arrays by reference, so `explain` answers from the
decision itself, and the rule lives only here and in `policy.engine.order`.

Values (docs/rule.md §5) are order labels (`policy.labels`): each pool's
first `horizon` jobs (the exact band) get labels that strictly rise, a gap
of 1 + Slurm's other PriorityWeight* apart in strict weighting, and a
cycle keeps every label Slurm already holds that is still in order with
room, so that it writes only the jobs whose place changed. nice = user's
nice + label - offset (at most -1, so Slurm's clamp of priority to >= 1
never merges two jobs); site_factor and priority = offset - label (at
least 1; priority 0 means held).
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

from slurm_drf.config.settings import NICE_LIMIT, Config
from slurm_drf.model.account_tree import AccountTree
from slurm_drf.model.types import (
    HOLDING_STATES,
    MAX_TRES,
    PENDING,
    BoolArray,
    IntArray,
    JobTable,
    Snapshot,
    pick_rows,
)
from slurm_drf.policy.account_rows import PresentAccounts, account_shares
from slurm_drf.policy.engine.order import Ordering, compute_before, order_pending
from slurm_drf.policy.label_space import LabelSpace, label_space, value_offset
from slurm_drf.policy.labels import assign_labels
from slurm_drf.policy.ownership import Recalled, adjust_for_memory
from slurm_drf.policy.plan_columns import (
    JOB_COLUMNS,
    AccountColumns,
    AccountShare,
    ColumnMaker,
    JobPlan,
    LazyColumns,
    PlanAccounts,
    PlanJobs,
    PoolOrder,
)
from slurm_drf.policy.pools import build_pools, compute_capacity
from slurm_drf.policy.state import EMPTY_STATE, PolicyState, TieBook, running_fingerprint
from slurm_drf.policy.tree_weights import TreeWeights, compute_tree_weights, resolve_account_keys
from slurm_drf.policy.values import labels_of, mode_values

# `history:` weight from which whole-node jobs get no warning: in the simulator's whole-node
# scenario it brings their account to its share (docs/evaluation.md, Whole-node jobs).
WHOLE_NODE_HISTORY_WEIGHT: Final = 2

if TYPE_CHECKING:
    # The H-DRF order (tree_order and the engines under it) is imported when a pool is ordered over a
    # tree, the decayed past when a plan blends one, guarantees and limits when a pool has some.
    from slurm_drf.policy.decayed_usage import UsageByPool
    from slurm_drf.policy.engine.tree_order import TreeOrdering, TreeRow
    from slurm_drf.policy.guarantees import Group, PoolBounds


@dataclass(frozen=True, slots=True)
class PoolPlan:
    name: str
    partitions: tuple[str, ...]
    nodes: int
    capacity: Mapping[str, int]
    # The exact band (docs/rule.md §5): its first `exact` jobs rise by `gap`
    # each; `separable` is how many the value range can hold that far apart.
    horizon: int = 0
    exact: int = 0
    gap: int = 1
    separable: int = 0
    # The pool's account tree as H-DRF sees it (docs/rule.md §7), in preorder; empty for a flat plan.
    tree: Sequence[TreeRow] = ()


@dataclass(frozen=True, slots=True)
class Plan:
    cluster: str
    mode: str
    resources: tuple[str, ...]
    pools: tuple[PoolPlan, ...]
    accounts: Sequence[AccountShare]
    jobs: Sequence[JobPlan]
    warnings: tuple[str, ...]
    state: PolicyState
    taken_at: str = ""
    # Why each ordered job has its place, one record per pool in `pools` order.
    orders: tuple[PoolOrder, ...] = field(default=(), compare=False, repr=False)

    def column(self, name: str) -> Sequence[Any]:
        """One field (a JobPlan attribute) of every job decision, in `jobs` order,
        without making 100k JobPlan objects when the plan keeps columns."""
        if isinstance(self.jobs, PlanJobs):
            return self.jobs.columns[name]
        return [getattr(job, name) for job in self.jobs]

    def job(self, index: int) -> JobPlan:
        return self.jobs.row(index) if isinstance(self.jobs, PlanJobs) else self.jobs[index]

    def placement(self, index: int) -> tuple[PoolOrder, int] | None:
        """The pool record and DRF position of `jobs[index]`; None when the plan did not order it."""
        for record in self.orders:
            if record.offset <= index < record.offset + record.size:
                return record, index - record.offset
        return None

    @property
    def has_tree(self) -> bool:
        """Whether some pool was ordered over Slurm's account tree (docs/rule.md §7)."""
        return any(p.tree for p in self.pools)

    @property
    def blends_past(self) -> bool:
        """Whether the decayed past adds to some account's usage (docs/rule.md §6); else pure DRF, bit for bit."""
        if isinstance(self.accounts, PlanAccounts):
            return any(chunk.blends_past for chunk in self.accounts.chunks)
        return any(a.past for a in self.accounts)

    def account_column(self, name: str) -> list[Any]:
        """One scalar field (an AccountShare attribute: account, rank, ...) of every account row,
        in `accounts` order, without making the rows when the plan keeps columns."""
        if isinstance(self.accounts, PlanAccounts):
            return [value for chunk in self.accounts.chunks for value in chunk.scalar(name)]
        return [getattr(a, name) for a in self.accounts]

    def account_share(self, pool: str | None, account: str) -> AccountShare | None:
        """The row of `account` in `pool`, without making every account's row."""
        if isinstance(self.accounts, PlanAccounts):
            return self.accounts.find(pool, account)
        return next((a for a in self.accounts if a.account == account and a.pool == pool), None)

    @property
    def writes(self) -> tuple[JobPlan, ...]:
        return tuple(self.job(i) for i, action in enumerate(self.column("action")) if action == "set")


def compute_plan(
    snapshot: Snapshot, config: Config, state: PolicyState = EMPTY_STATE, past: UsageByPool | None = None
) -> Plan:
    """The whole decision for one snapshot: shares, order and values.

    `past` is each account's decayed average allocation per pool and
    resource (policy.decayed_usage); it counts only when `config.history` is set
    with a weight above 0, so without it the plan is pure DRF.
    """
    table = snapshot.table
    pools = build_pools(snapshot, config)
    jobs = _classify(snapshot, config, pools)
    warnings = list(jobs.warnings)
    fingerprint = running_fingerprint([table.job_id[i] for i in np.flatnonzero(jobs.holding).tolist()])
    ties = TieBook.open(state, fingerprint, config.tie_half_life_cycles)
    groups = _groups(snapshot, config)

    space = label_space(config, snapshot.priority_weights, snapshot.scheduler_parameters)
    wide = _PlanWide(
        table=table, weights=jobs.weights, config=config, state=state, ties=ties, space=space, tree=jobs.tree
    )
    columns = LazyColumns()
    pool_plans: list[PoolPlan] = []
    account_rows: list[AccountColumns] = []
    orders: list[PoolOrder] = []
    for number, (name, partitions) in enumerate(pools):
        capacity_map, node_count, largest = compute_capacity(
            snapshot, partitions, config.resources, config.include_unavailable_nodes
        )
        in_pool = (jobs.pool == number) & ~jobs.excluded
        running_rows = np.flatnonzero(in_pool & jobs.holding)
        pending_rows = np.flatnonzero(in_pool & jobs.pending & ~jobs.held)
        warnings.extend(_whole_node_warnings(name, table, pending_rows, largest, config))
        if not any(capacity_map.values()) and (len(running_rows) or len(pending_rows)):
            warnings.append(
                f"pool {name}: no capacity in {', '.join(config.resources)}; its jobs are "
                "ordered by tie rule and Slurm's order only"
            )
        bounds, bound_warnings = _bounds(
            name, groups, jobs.weights, table, (running_rows, pending_rows), capacity_map, config
        )
        warnings.extend(f"pool {name}: {w}" for w in bound_warnings)
        pool = _Pool(
            name=name,
            capacity_map=capacity_map,
            running_rows=running_rows,
            pending_rows=pending_rows,
            past=past_usage(past, name, config, table.accounts, table),
            offset=columns.size,
            bounds=bounds if bounds is not None and bounds.active else None,
        )
        result = _plan_pool(wide, pool)
        columns.add(result.size, result.makers)
        orders.append(result.order)
        warnings.extend(result.warnings)
        account_rows.append(result.accounts)
        pool_plans.append(_pool_plan(partitions, node_count, capacity_map, space, result.order))

    columns.add(*_skipped_rows(table, jobs, pools, config.mode, state))

    next_state = ties.state(state.jobs)
    return Plan(
        cluster=snapshot.cluster,
        mode=config.mode,
        resources=tuple(config.resources),
        pools=tuple(pool_plans),
        accounts=PlanAccounts(account_rows),
        jobs=PlanJobs(columns),
        warnings=tuple(warnings),
        state=next_state,
        taken_at=snapshot.taken_at,
        orders=tuple(orders),
    )


def _groups(snapshot: Snapshot, config: Config) -> list[Group]:
    """The config's guarantees and limits resolved against the snapshot's accounts (none: none)."""
    if not config.guarantees and not config.limits:
        return []
    from slurm_drf.policy.guarantees import resolve_groups  # noqa: PLC0415  (only with guarantees or limits)

    tree = snapshot.account_tree if snapshot.associations else None
    return resolve_groups(config.guarantees, config.limits, snapshot.table.accounts, tree)


def _bounds(
    pool: str,
    groups: Sequence[Group],
    weights: Sequence[Fraction],
    table: JobTable,
    rows: tuple[IntArray, IntArray],
    capacity_map: Mapping[str, int],
    config: Config,
) -> tuple[PoolBounds | None, list[str]]:
    """The pool's guarantees and limits (docs/rule.md §9), `reclaim.share_floor`'s among them where it acts;
    None when there are none (policy.guarantees is then not imported: a plan without them does not need it)."""
    reclaim = config.reclaim
    floor = reclaim is not None and pool in reclaim.pools and bool(reclaim.share_floor)
    if not groups and not floor:
        return None, []
    from slurm_drf.policy.guarantees import floor_groups, pool_bounds  # noqa: PLC0415  (as in _groups)

    if reclaim is not None and floor:
        present = np.unique(table.account[np.concatenate(rows)]).tolist()
        groups = floor_groups(groups, present, weights, reclaim.share_floor)
    capacity = [capacity_map[r] for r in config.resources]
    return pool_bounds(groups, len(table.accounts), capacity, config.resources)


def _whole_node_warnings(
    pool: str, table: JobTable, pending_rows: IntArray, largest: Mapping[str, int], config: Config
) -> list[str]:
    """Advice when pending jobs need whole nodes and the past does not count enough to even them out.

    Such a job starts only on a drained node. Pure DRF keeps its account's
    next one behind everyone while one runs (a node lifts it at once), so
    the account is served one drain at a time and stays below its share;
    `history:` at weight 2 or more brings it to its share over time
    (docs/evaluation.md, *Whole-node jobs*). One warning per pool, naming
    up to three accounts, so that the daemon logs it once, not every cycle.
    """
    if (config.history is not None and config.history.weight >= WHOLE_NODE_HISTORY_WEIGHT) or not len(pending_rows):
        return []
    whole = np.zeros(len(pending_rows), dtype=bool)
    for name in config.resources:
        if largest.get(name, 0) > 0:
            whole |= table.column(name)[pending_rows] >= largest[name]
    if not whole.any():
        return []
    names = sorted({table.accounts[a] for a in table.account[pending_rows[whole]].tolist()})
    listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return [
        f"pool {pool}: pending jobs of {listed} each need a whole node; pure DRF serves such an account one "
        f"drained node at a time, below its share: set history: {{weight: {WHOLE_NODE_HISTORY_WEIGHT}}} "
        "(docs/evaluation.md, Whole-node jobs)"
    ]


def _pool_plan(
    partitions: Sequence[str], node_count: int, capacity_map: Mapping[str, int], space: LabelSpace, record: PoolOrder
) -> PoolPlan:
    """The plan's summary of one pool (its tree's rows where it was ordered over a tree)."""
    return PoolPlan(
        record.pool,
        tuple(partitions),
        node_count,
        MappingProxyType(dict(capacity_map)),
        space.horizon,
        record.exact,
        space.gap,
        space.separable,
        record.tree.rows if record.tree is not None else (),
    )


@dataclass(frozen=True, slots=True, eq=False)
class _JobClasses:
    """What `compute_plan` knows of every job of the snapshot before it plans a pool.

    `pool` is each job's pool (-1: no managed partition); `holding` (running
    or holding its allocation), `pending`, `excluded` (its account is) and
    `held` are per job. `weights` are the accounts' (by code), `tree` Slurm's
    account tree when the plan orders over it.
    """

    pool: IntArray
    holding: BoolArray
    pending: BoolArray
    excluded: BoolArray
    held: BoolArray
    weights: list[Fraction]
    tree: _TreeContext | None
    warnings: tuple[str, ...]


def _classify(snapshot: Snapshot, config: Config, pools: Sequence[tuple[str, tuple[str, ...]]]) -> _JobClasses:
    """Each job's pool and state, each account's weight and exclusion (by path over a tree, §7)."""
    table = snapshot.table
    pool_index: dict[str, int] = {}
    for number, (_, partitions) in enumerate(pools):
        for partition in partitions:
            pool_index.setdefault(partition, number)
    pool_of_code = np.array(
        [next((pool_index[p] for p in text.split(",") if p in pool_index), -1) for text in table.partitions] or [-1],
        dtype=np.int64,
    )
    job_pool = pool_of_code[table.partition] if len(table) else np.zeros(0, dtype=np.int64)
    holding = np.isin(table.state, [i for i, s in enumerate(table.states) if s in HOLDING_STATES])
    pending = np.isin(table.state, [i for i, s in enumerate(table.states) if s == PENDING])
    known = snapshot.account_tree if snapshot.associations else None
    tree = (
        None
        if known is None or config.hierarchy == "flat"
        else _TreeContext(known, compute_tree_weights(config, known))
    )
    warnings: list[str] = []
    if tree is not None:
        # An account's weight among its siblings (docs/rule.md §7); the config's where the tree lacks it.
        by_tree = tree.weights.accounts
        weights = [w if (w := by_tree.get(a)) is not None else config.weight(a) for a in table.accounts]
        skipped_accounts = tree.weights.excluded
        warnings.extend(tree.weights.warnings)
    else:
        # No tree to order over: each key still names its account, by path where a tree was read, else by name.
        keys = resolve_account_keys(config, known)
        weights = list(map(keys.weights.get, table.accounts, itertools.repeat(config.default_weight)))
        skipped_accounts = keys.excluded
        warnings.extend(keys.warnings)
    excluded = (
        np.fromiter(map(skipped_accounts.__contains__, table.accounts), dtype=np.bool_, count=len(table.accounts))[
            table.account
        ]
        if len(table)
        else np.zeros(0, dtype=np.bool_)
    )
    held = table.held | (table.priority == 0)

    return _JobClasses(job_pool, holding, pending, excluded, held, weights, tree, tuple(warnings))


@dataclass(frozen=True, slots=True, eq=False)
class _PlanWide:
    """What every pool of one plan reads, made once: the snapshot's job table, each account's weight,
    the config, the state, the book of tie wins, the label space and the account tree (None: flat)."""

    table: JobTable
    weights: Sequence[Fraction]
    config: Config
    state: PolicyState
    ties: TieBook
    space: LabelSpace
    tree: _TreeContext | None


@dataclass(frozen=True, slots=True, eq=False)
class _Pool:
    """One pool to plan: its name and capacity, its rows of the job table (running; pending, the
    ones it orders), what the decayed past adds to each account (A, R) or None, where its jobs start
    in the plan's job columns, and its guarantees and limits (docs/rule.md §9; None: none)."""

    name: str
    capacity_map: Mapping[str, int]
    running_rows: IntArray
    pending_rows: IntArray
    past: IntArray | None
    offset: int
    bounds: PoolBounds | None


@dataclass(frozen=True, slots=True, eq=False)
class _PoolResult:
    """One pool's plan: its account rows, its job columns (`size` rows, made when read), its order record."""

    accounts: AccountColumns
    size: int
    makers: Mapping[str, ColumnMaker]
    order: PoolOrder
    warnings: tuple[str, ...]


@dataclass(frozen=True, slots=True, eq=False)
class _PoolJobs:
    """A pool's pending jobs in Slurm's order (`rows`), with what the values need, and its running usage."""

    rows: IntArray
    slurm_order: IntArray  # positions into the pool's pending_rows
    account_of: IntArray
    demand: IntArray  # (J, R) each job's whole demand: TRES x array tasks
    usage: IntArray  # (A, R) the running allocation per account
    running_count: IntArray
    capacity: IntArray
    own_nice: IntArray
    current: list[Any]
    our_part: IntArray
    ours: BoolArray


def _plan_pool(wide: _PlanWide, pool: _Pool) -> _PoolResult:
    """Order one pool's pending jobs (docs/rule.md §2, or §7 over a tree) and label them (§5)."""
    config, mode = wide.config, wide.config.mode
    jobs = _pool_jobs(wide, pool)
    before, ordering, by_tree = _order_pool(wide, pool, jobs)
    part, drf_position = None, None
    if pool.bounds is not None:
        from slurm_drf.policy.guarantees import arrange, arranged_ordering  # noqa: PLC0415  (as in _groups)

        arranged, part = arrange(ordering.order, jobs.account_of, jobs.demand, jobs.usage, pool.bounds)
        if arranged is not ordering.order:
            drf_position = np.empty(len(arranged), dtype=np.int64)
            drf_position[ordering.order] = np.arange(len(arranged))
            drf_position = drf_position[arranged]
            ordering = arranged_ordering(ordering, arranged, part)
    order = ordering.order
    taken = jobs.slurm_order[order]  # positions into the pool's pending_rows / ids / adjustments
    own = jobs.own_nice[taken]
    offset = value_offset(config)
    labelling = assign_labels(labels_of(mode, jobs.our_part[taken], offset), jobs.ours[taken], wide.space)
    warnings: list[str] = []
    if labelling.exact < min(wide.space.horizon, len(order)):
        warnings.append(_band_warning(pool.name, config, wide.space, labelling.exact))
    written = mode_values(mode, labelling.labels, offset, own)
    if mode == "nice":
        clipped = int(np.count_nonzero(written != own + np.minimum(labelling.labels - offset, -1)))
        if clipped:
            warnings.append(
                f"pool {pool.name}: {clipped} job(s) carry a nice of their own that does not fit beside "
                f"ours in Slurm's range (+/-{NICE_LIMIT}); their values were clipped and may tie"
            )
    record = PoolOrder(
        pool.name,
        pool.offset,
        tuple(jobs.capacity.tolist()),
        wide.weights,
        before,
        jobs.account_of,
        ordering,
        labelling.exact,
        by_tree,
        None if by_tree is not None else _next_usage(jobs, pool.past),
        wide.table.accounts,
        part,
        drf_position,
        pool.bounds,
    )
    makers = _job_makers(wide.table, jobs, record, pick_rows(jobs.current, taken), (written.tolist(), own))
    accounts = len(wide.table.accounts)
    pending_count = np.bincount(jobs.account_of, minlength=accounts)
    present = np.flatnonzero((jobs.running_count > 0) | (pending_count > 0))
    rows = PresentAccounts(
        pick_rows(wide.table.accounts, present),
        pick_rows(wide.weights, present),
        jobs.usage[present],
        jobs.running_count[present].tolist(),
        pending_count[present].tolist(),
        None if pool.past is None else pool.past[present],
    )
    shares = account_shares(pool.name, rows, pool.capacity_map, config.resources)
    return _PoolResult(shares, len(order), makers, record, tuple(warnings))


def _pool_jobs(wide: _PlanWide, pool: _Pool) -> _PoolJobs:
    """The pool's running usage per account and its pending jobs in Slurm's order, with what Slurm holds."""
    table, resources, mode = wide.table, wide.config.resources, wide.config.mode
    running_rows, pending_rows = pool.running_rows, pool.pending_rows
    accounts = len(table.accounts)
    tres = [table.column(r) for r in resources]
    usage = np.zeros((accounts, len(resources)), dtype=np.int64)
    running_account = table.account[running_rows]
    for col, values in enumerate(tres):
        np.add.at(usage[:, col], running_account, values[running_rows])
    # Site factors only when they can matter (site_factor mode).
    site_factors = pick_rows(table.site_factor, pending_rows) if mode == "site_factor" else []
    parts = adjust_for_memory(
        table.priority[pending_rows],
        table.nice[pending_rows],
        site_factors,
        mode,
        _recall(table, pending_rows, wide.state),
    )
    slurm_order = np.lexsort(
        (table.job_number[pending_rows], table.submit_time[pending_rows], -parts.base, table.account[pending_rows])
    )
    rows = pending_rows[slurm_order]
    demand = _tres_rows(tres, rows) * table.array_tasks[rows][:, None]
    return _PoolJobs(
        rows,
        slurm_order,
        table.account[rows],
        demand,
        usage,
        np.bincount(running_account, minlength=accounts),
        np.array([pool.capacity_map[r] for r in resources], dtype=np.int64),
        parts.own_nice,
        parts.current,
        parts.our_part,
        parts.ours,
    )


def _next_usage(jobs: _PoolJobs, past: IntArray | None) -> IntArray:
    """(A, R) each account's usage before its next job: §2's usage with every pending job of its own counted."""
    usage = jobs.usage.copy() if past is None else jobs.usage + past
    np.add.at(usage, jobs.account_of, jobs.demand)
    return usage


def _tres_rows(tres: Sequence[IntArray], rows: IntArray) -> IntArray:
    """(rows, R) the TRES columns at `rows`."""
    if not len(tres):
        return np.zeros((len(rows), 0), dtype=np.int64)
    stacked: IntArray = np.stack([values[rows] for values in tres], axis=1)
    return stacked


def _order_pool(wide: _PlanWide, pool: _Pool, jobs: _PoolJobs) -> tuple[IntArray, Ordering, TreeOrdering | None]:
    """The pool's DRF order: §2's engine, or H-DRF over Slurm's tree (§7); each job's usage before it."""
    table, past = wide.table, pool.past
    if wide.tree is None:
        before = compute_before(jobs.demand, jobs.account_of, jobs.usage if past is None else jobs.usage + past)
        ordering = order_pending(before, jobs.account_of, jobs.capacity, wide.weights, table.accounts, wide.ties)
        return before, ordering, None
    from slurm_drf.policy.engine.tree_order import RunningJobs, TreeRequest, order_tree  # noqa: PLC0415  (only over a tree)

    running_rows = pool.running_rows
    allocation = _tres_rows([table.column(r) for r in wide.config.resources], running_rows)
    running_users = list(map(table.user.__getitem__, running_rows.tolist()))
    request = TreeRequest(
        wide.tree.tree,
        wide.tree.weights,
        wide.config.fairness_within_account,
        table.accounts,
        wide.weights,
        jobs.account_of,
        list(map(table.user.__getitem__, jobs.rows.tolist())),
        jobs.demand,
        RunningJobs(table.account[running_rows], running_users, allocation),
        jobs.usage,
        past,
        jobs.capacity,
        wide.ties,
        wide.config.resources,
    )
    by_tree = order_tree(request)
    return by_tree.before, by_tree.ordering, by_tree


def _job_makers(
    table: JobTable,
    jobs: _PoolJobs,
    record: PoolOrder,
    now: list[Any],
    values: tuple[list[Any], IntArray],
) -> dict[str, ColumnMaker]:
    """The pool's job columns, each made when read: `now` what Slurm holds, `values` (written, own nice)."""
    ordering, by_tree, exact, pool = record.ordering, record.tree, record.exact, record.pool
    order = ordering.order
    written_list, own = values
    rows_sorted = jobs.rows[order]
    count = len(rows_sorted)
    job_ids, users, names = table.job_id, table.user, table.accounts
    account_of = jobs.account_of
    moved = record.drf_position
    parts = record.parts

    def by_drf_position(column: Callable[[], Sequence[Any]]) -> ColumnMaker:
        """A column the tree record keeps by position in the DRF order, in the arranged order."""
        return lambda: pick_rows(column(), moved) if moved is not None else list(column())

    return {
        "job_id": lambda: pick_rows(job_ids, rows_sorted),
        "account": lambda: pick_rows(names, account_of[order]),
        "user": lambda: pick_rows(users, rows_sorted),
        "pool": lambda: [pool] * count,
        "order": lambda: list(range(count)),
        "level": ordering.level[order].tolist,
        "value": lambda: written_list,
        "current": lambda: now,
        "action": lambda: list(map(_ACTIONS.__getitem__, map(operator.eq, now, written_list))),
        "reason": lambda: [None] * count if parts is None else _part_reasons(parts[order]),
        "tie": ordering.tied[order].tolist,
        "user_nice": own.tolist,
        "array_tasks": table.array_tasks[rows_sorted].tolist,
        "band": lambda: ["exact"] * exact + ["coarse"] * (count - exact),
        "path": (lambda: [None] * count) if by_tree is None else by_drf_position(lambda: by_tree.leaf_keys),
        "path_shares": (lambda: [None] * count) if by_tree is None else by_drf_position(by_tree.all_path_shares),
    }


# A job's `action`, by whether Slurm holds the value written already (False: "set", True: "keep").
_ACTIONS: Final = ("set", "keep")


def _part_reasons(parts: npt.NDArray[np.int8]) -> list[str | None]:
    """The `reason` of each job of an order arranged by guarantees and limits, by its part."""
    from slurm_drf.policy.guarantees import PART_REASONS  # noqa: PLC0415  (as in _groups)

    return [PART_REASONS[p] for p in parts.tolist()]


@dataclass(frozen=True, slots=True, eq=False)
class _TreeContext:
    """Slurm's account tree of the snapshot and its nodes' weights, when the snapshot has one."""

    tree: AccountTree
    weights: TreeWeights


def past_usage(
    past: UsageByPool | None,
    pool: str,
    config: Config,
    account_names: Sequence[str],
    jobs: JobTable | None = None,
) -> IntArray | None:
    """(A, R) what the decayed past adds to each account's usage in the pool; None for pure DRF.

    With `jobs` (the snapshot's), at most what int64 has left above their
    total of each resource: a past read from a damaged record can be any
    size, and usage + past + an account's pending demand must not wrap
    round to a negative share.
    """
    history = config.history
    if past is None or history is None or not history.active:
        return None
    from slurm_drf.policy.decayed_usage import past_term  # noqa: PLC0415  (only with a past)

    added = past_term(past.get(pool, {}), history.weight, config.resources)
    out = np.zeros((len(account_names), len(config.resources)), dtype=np.int64)
    if not added:
        return out
    room = [MAX_TRES if jobs is None else _room_above_jobs(jobs, r) for r in config.resources]
    codes = {name: code for code, name in enumerate(account_names)}
    for account, amounts in added.items():
        code = codes.get(account)
        if code is not None:
            out[code] = [min(amounts.get(r, 0), most) for r, most in zip(config.resources, room, strict=True)]
    return out


def _room_above_jobs(table: JobTable, resource: str) -> int:
    """MAX_TRES less the jobs' total of `resource` (array tasks counted), or 2**62 when that total is far below."""
    column = table.column(resource)
    # A float total is close enough to tell the snapshots worth an exact sum (as check_job_table does).
    if float(column.astype(np.float64) @ table.array_tasks.astype(np.float64)) < 2.0**61:
        return 2**62
    amounts: list[int] = column.tolist()
    tasks: list[int] = table.array_tasks.tolist()
    return max(0, MAX_TRES - sum(a * t for a, t in zip(amounts, tasks, strict=True)))


def _recall(table: JobTable, rows: IntArray, state: PolicyState) -> Recalled:
    """What the state remembers of the jobs `rows`, joined by job number (policy.ownership.JobMemories)."""
    memory = state.memory
    if not memory:
        return memory.recall(np.zeros(len(rows), dtype=np.int64), list)
    return memory.recall(table.plain_number[rows], lambda: pick_rows(table.job_id, rows))


def _band_warning(pool: str, config: Config, space: LabelSpace, exact: int) -> str:
    """Why the exact band is shorter than the horizon: the value range holds no more jobs that far apart."""
    if config.weighting == "factor":
        why = f"factor_weight {config.factor_weight} gives only {space.separable} distinct values below the top"
        fix = "raise factor_weight"
    else:
        why = (
            f"Slurm's PriorityWeight* sum to {space.gap - 1}, so neighbours are kept {space.gap} apart, "
            f"and the range below offset {config.offset} holds {space.separable} jobs that far apart"
        )
        fix = "use weighting: factor, or lower Slurm's PriorityWeight*"
    return (
        f"pool {pool}: only the first {exact} of horizon {space.horizon} jobs have exact values: {why}; "
        f"later jobs are in the coarse band, where Slurm's other factors can reorder them ({fix})"
    )


def _skipped_rows(
    table: JobTable,
    jobs: _JobClasses,
    pools: Sequence[tuple[str, tuple[str, ...]]],
    mode: str,
    state: PolicyState,
) -> tuple[int, dict[str, ColumnMaker]]:
    """Pending jobs the plan leaves alone, each with its reason: their job columns (count, makers)."""
    job_pool, pending, excluded, held = jobs.pool, jobs.pending, jobs.excluded, jobs.held
    rows = np.flatnonzero(pending & ((job_pool < 0) | excluded | held))
    indexes: list[int] = rows.tolist()
    parts = adjust_for_memory(
        table.priority[rows], table.nice[rows], pick_rows(table.site_factor, rows), mode, _recall(table, rows, state)
    )
    own, current = parts.own_nice, parts.current
    reasons = [
        "partition not managed" if job_pool[i] < 0 else "account excluded" if excluded[i] else "held" for i in indexes
    ]
    count = len(indexes)
    nothing: list[Any] = [None] * count
    columns: dict[str, list[Any]] = {
        "job_id": pick_rows(table.job_id, rows),
        "account": [table.accounts[a] for a in table.account[rows].tolist()],
        "user": pick_rows(table.user, rows),
        "pool": [pools[p][0] if p >= 0 else None for p in job_pool[rows].tolist()],
        "current": current,
        "action": ["skip"] * count,
        "reason": reasons,
        "tie": [False] * count,
        "user_nice": own.tolist(),
        "array_tasks": table.array_tasks[rows].tolist(),
    }
    made = [columns.get(name, nothing) for name in JOB_COLUMNS]
    return count, {name: functools.partial(list, column) for name, column in zip(JOB_COLUMNS, made, strict=True)}


def plan_order_pairs(plan: Plan, pool: str) -> list[tuple[str, int]]:
    """(account, index within the account's Slurm order) of a pool's ordered jobs."""
    counters: dict[str, int] = {}
    ordered = sorted(
        (j for j in plan.jobs if j.pool == pool and j.order is not None),
        key=lambda j: j.order if j.order is not None else -1,
    )
    # Index within account follows Slurm order, which the plan's order keeps per account.
    out = []
    for job in ordered:
        index = counters.get(job.account, 0)
        counters[job.account] = index + 1
        out.append((job.account, index))
    return out
