"""The policy: pools, shares, levels, the DRF order, the tie rule, values.

Pure: `compute_plan(snapshot, config, state) -> Plan` reads no clock, file
or environment. It sits under the daemon and the CLI and imports only the
model, the config dataclasses and numpy.

How the order is computed (SPEC §2). The *level* of an account's k-th
pending job is the account's weighted dominant share over its running
usage plus the demand of its first k-1 pending jobs. Progressive filling
always serves the account with the lowest current share, so the DRF order
of all pending jobs is the order of their levels: one exclusive cumulative
sum per account and one sort, vectorised with numpy. Floats only find the
candidates for a tie: runs of levels within a relative 1e-9 of each other
are re-sorted with exact fractions, and exactly equal levels go to the tie
rule. `reference_order` below is the textbook heap loop on exact fractions,
kept as the oracle the tests and benchmarks compare against.

The tie rule, applied to exactly equal levels, in turn: the accounts'
weighted share vectors sorted largest first (lexicographically, smaller
first); fewer remembered tie wins first; a key that rotates with the
epoch. An account wins a tie when it is placed while another account waits
at the same level. Wins count within the plan and carry over through
`PolicyState`, halved every `tie_half_life` epochs. The epoch advances only
when the set of running jobs changed, so replanning an unchanged cluster
gives the same order and writes nothing.

Values (SPEC §5): raw = round(scale x level); along the DRF order every
job's value is raised to at least one more than its predecessor's, so the
order is strict even for tied levels, and Slurm never falls back to submit
order. nice = user's nice + value - offset (at most -1, so Slurm's clamp of
priority to >= 1 never merges two jobs); site_factor and priority =
offset - value (at least 1; priority 0 means held).
"""

from __future__ import annotations

import functools
import hashlib
import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Final, overload

import numpy as np
import numpy.typing as npt

from slurm_drf.config import NICE_LIMIT, Config
from slurm_drf.model import HOLDING_STATES, PENDING, BoolArray, FloatArray, IntArray, JobTable, Snapshot

DEFAULT_POOL: Final = "default"
# Relative distance under which two float levels are compared exactly.
TIE_RTOL: Final = 1e-9


# --------------------------------------------------------------------------
# State carried between plans


@dataclass(frozen=True, slots=True)
class JobMemory:
    """What the daemon remembers of one job it wrote to."""

    user_nice: int
    written: int
    mode: str


@dataclass(frozen=True, slots=True)
class PolicyState:
    """The engine's memory between cycles; the daemon persists it.

    `tie_wins` are the committed, decayed win counts; `plan_wins` the wins
    the last plan counted, committed when the epoch next advances.
    """

    epoch: int = 0
    fingerprint: str = ""
    tie_wins: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    plan_wins: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    jobs: Mapping[str, JobMemory] = field(default_factory=lambda: MappingProxyType({}))


EMPTY_STATE: Final = PolicyState()


# --------------------------------------------------------------------------
# The plan


@dataclass(frozen=True, slots=True)
class PoolPlan:
    name: str
    partitions: tuple[str, ...]
    nodes: int
    capacity: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class AccountShare:
    account: str
    pool: str
    weight: Fraction
    running_jobs: int
    pending_jobs: int
    usage: Mapping[str, int]
    shares: Mapping[str, float]
    dominant_resource: str | None
    dominant_share: float
    weighted_share: float
    rank: int


@dataclass(frozen=True, slots=True)
class JobPlan:
    """One pending job's decision. `order` is None for skipped jobs."""

    job_id: str
    account: str
    user: str
    pool: str | None
    order: int | None
    level: float | None
    value: int | None
    current: int | None
    action: str
    reason: str | None = None
    tie: bool = False
    user_nice: int = 0
    array_tasks: int = 1


@dataclass(frozen=True, slots=True)
class Plan:
    cluster: str
    mode: str
    scale: int
    resources: tuple[str, ...]
    pools: tuple[PoolPlan, ...]
    accounts: tuple[AccountShare, ...]
    jobs: Sequence[JobPlan]
    warnings: tuple[str, ...]
    state: PolicyState
    taken_at: str = ""

    def column(self, name: str) -> Sequence[Any]:
        """One field (a JobPlan attribute) of every job decision, in `jobs` order,
        without making 100k JobPlan objects when the plan keeps columns."""
        if isinstance(self.jobs, PlanJobs):
            return self.jobs.columns[name]
        return [getattr(job, name) for job in self.jobs]

    def job(self, index: int) -> JobPlan:
        return self.jobs.row(index) if isinstance(self.jobs, PlanJobs) else self.jobs[index]

    @property
    def writes(self) -> tuple[JobPlan, ...]:
        return tuple(self.job(i) for i, action in enumerate(self.column("action")) if action == "set")


# --------------------------------------------------------------------------
# Pools and capacity


def build_pools(snapshot: Snapshot, config: Config) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(name, partitions) of every pool; the default pool holds every managed partition."""
    if config.pools:
        return tuple((p.name, p.partitions) for p in config.pools)
    if config.partitions is not None:
        return ((DEFAULT_POOL, config.partitions),)
    seen: dict[str, None] = {}
    for node in snapshot.nodes:
        seen.update(dict.fromkeys(node.partitions))
    for text in snapshot.table.partitions:
        seen.update(dict.fromkeys(p for p in text.split(",") if p))
    return ((DEFAULT_POOL, tuple(seen)),)


def compute_capacity(
    snapshot: Snapshot, partitions: Iterable[str], resources: Sequence[str], include_unavailable: bool = False
) -> tuple[dict[str, int], int]:
    """Summed node TRES over the pool's nodes (each node once) and the node count."""
    wanted = set(partitions)
    capacity = dict.fromkeys(resources, 0)
    count = 0
    for node in snapshot.nodes:
        if not wanted.intersection(node.partitions):
            continue
        if not include_unavailable and not node.eligible:
            continue
        count += 1
        for name in resources:
            capacity[name] += node.tres.get(name, 0)
    return capacity, count


# --------------------------------------------------------------------------
# Shares


def weighted_share(usage: Sequence[int], capacity: Sequence[int], weight: Fraction) -> Fraction:
    """Exact max_r(usage_r / capacity_r) / weight; capacity-0 resources ignored."""
    best = Fraction(0)
    for used, cap in zip(usage, capacity, strict=True):
        if cap > 0:
            share = Fraction(used, cap)
            best = max(best, share)
    return best / weight


def share_vector(usage: Sequence[int], capacity: Sequence[int], weight: Fraction) -> tuple[Fraction, ...]:
    """Weighted shares, largest first: the tie rule's lexicographic key."""
    return tuple(sorted((Fraction(u, c) / weight for u, c in zip(usage, capacity, strict=True) if c > 0), reverse=True))


def rotation_key(epoch: int, account: str) -> int:
    """A per-epoch pseudo-random rank of an account; not its name's order."""
    digest = hashlib.blake2b(f"{epoch}\0{account}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def decay_factor(half_life: float) -> float:
    return float(0.5 ** (1.0 / half_life))


def running_fingerprint(running_ids: Iterable[str]) -> str:
    """Identifies the set of running jobs: the epoch advances when it changes."""
    return hashlib.blake2b("\n".join(sorted(running_ids)).encode(), digest_size=16).hexdigest()


def advance_state(state: PolicyState, fingerprint: str, half_life: float) -> tuple[int, dict[str, float]]:
    """The epoch and committed tie wins this plan starts from."""
    if state.fingerprint == fingerprint:
        return state.epoch, dict(state.tie_wins)
    factor = decay_factor(half_life)
    merged: dict[str, float] = {}
    for account in set(state.tie_wins) | set(state.plan_wins):
        value = (state.tie_wins.get(account, 0.0) + state.plan_wins.get(account, 0.0)) * factor
        if value > 1e-6:
            merged[account] = value
    return state.epoch + 1, merged


# --------------------------------------------------------------------------
# Slurm's own order of an account's pending jobs


def adjust_for_memory(
    job_ids: Sequence[str],
    priority: IntArray,
    nice: IntArray,
    site_factor: Sequence[int | None],
    mode: str,
    memory: Mapping[str, JobMemory],
) -> tuple[IntArray, IntArray, list[int | None]]:
    """Per job: base priority, the user's own nice, and the value Slurm has now.

    Base priority is Slurm's with this daemon's adjustment removed. The
    user's nice is what the job had before we first wrote it; if the job's
    nice is no longer what we wrote, somebody changed it since, and that is
    the user's (or an admin's) new choice. site_factor cannot be read back
    from squeue, so its current value is the one we remember writing.
    """
    # In priority mode the daemon owns the order: Slurm's own priority is
    # gone once written, so within an account submit order decides, for
    # touched and untouched jobs alike (else the first write would reorder).
    base = priority.copy() if mode != "priority" else np.zeros_like(priority)
    own = nice.copy()
    if mode == "nice":
        current: list[int | None] = nice.tolist()
    elif mode == "priority":
        current = priority.tolist()
    else:
        current = list(site_factor)
    if not memory:
        return base, own, current
    for k, job_id in enumerate(job_ids):
        remembered = memory.get(job_id)
        if remembered is None:
            continue
        # The user's nice, whatever mode wrote last: nice mode's value is ours
        # while Slurm still shows it; priority mode made Slurm zero the nice.
        if (remembered.mode == "nice" and int(nice[k]) == remembered.written) or remembered.mode == "priority":
            own[k] = remembered.user_nice
        if remembered.mode != mode:
            continue  # another mode wrote it; that is undone before this mode writes
        if mode == "nice":
            base[k] = priority[k] + (nice[k] - own[k])
        elif mode == "site_factor":
            if current[k] is None:
                current[k] = remembered.written
            base[k] = priority[k] - remembered.written
    return base, own, current


def compute_before(demand: IntArray, account_of: IntArray, usage: IntArray) -> IntArray:
    """Each job's account usage before it: running usage plus the demand of
    the account's earlier pending jobs.

    Rows are grouped by account, in Slurm's order within each; `demand` is
    (J, R) whole records (an array record's TRES times its tasks); `usage`
    is (A, R) running usage indexed by account.
    """
    count = len(account_of)
    if not count:
        return np.zeros_like(demand)
    exclusive = np.cumsum(demand, axis=0) - demand
    starts = np.flatnonzero(np.r_[True, account_of[1:] != account_of[:-1]])
    exclusive -= np.repeat(exclusive[starts], np.diff(np.r_[starts, count]), axis=0)
    before: IntArray = exclusive + usage[account_of]
    return before


@dataclass(frozen=True, slots=True)
class Ordering:
    """The DRF order of one pool's pending jobs.

    `order` indexes the jobs as given; `level` is each job's weighted
    dominant share (float, for display and values); `tied` marks jobs whose
    place a tie decided (equal level and share vector as another account's).
    """

    order: IntArray
    level: FloatArray
    tied: npt.NDArray[np.bool_]


def order_pending(
    before: IntArray,
    account_of: IntArray,
    capacity: IntArray,
    weights: Sequence[Fraction],
    account_names: Sequence[str],
    epoch: int,
    wins: dict[str, float],
    plan_wins: dict[str, float],
) -> Ordering:
    """Sort jobs by (level, share vector), exactly; break full ties by wins, rotation.

    Floats (one correctly rounded division u*q / (c*p) per share, w = p/q)
    sort everything; adjacent rows whose deciding components are within
    TIE_RTOL of each other without being the very same (usage, resource,
    weight) are re-sorted with exact fractions. `wins` (committed plus this
    plan's) and `plan_wins` are updated in place.
    """
    count = len(account_of)
    usable = np.flatnonzero(capacity > 0)
    numerators = np.array([w.numerator for w in weights], dtype=np.float64)
    denominators = np.array([w.denominator for w in weights], dtype=np.float64)
    if len(usable) == 0:
        usable_before = np.zeros((count, 1), dtype=np.int64)
        shares = np.zeros((count, 1), dtype=np.float64)
    else:
        usable_before = before[:, usable]
        shares = (usable_before * denominators[account_of, None]) / (
            capacity[usable].astype(np.float64)[None, :] * numerators[account_of, None]
        )
    columns = np.argsort(-shares, axis=1, kind="stable")
    vector = np.take_along_axis(shares, columns, axis=1)  # largest first
    amounts = np.take_along_axis(usable_before, columns, axis=1)
    width = vector.shape[1]
    index = np.arange(count, dtype=np.int64)
    order = np.lexsort([index, *(vector[:, k] for k in reversed(range(width)))]) if count else index
    tied = np.zeros(count, dtype=np.bool_)
    if count < 2:
        return Ordering(order, vector[:, 0].copy(), tied)

    # Compare each row of the order with the one before it.
    weight_id = _weight_ids(weights)[account_of[order]]
    v, a, c = vector[order], amounts[order], columns[order]
    near = np.abs(v[1:] - v[:-1]) <= TIE_RTOL * np.maximum(np.abs(v[1:]), 1e-300)
    same = (a[1:] == a[:-1]) & (c[1:] == c[:-1]) & (weight_id[1:] == weight_id[:-1])[:, None]
    # Close components that are not the very same (usage, resource, weight)
    # are most often exactly equal rationals (8 of 64,000 CPUs is 1 of 8,000
    # GPUs): u1*q1*c2*p2 == u2*q2*c1*p1 in Python integers settles them, and
    # only pairs that really differ go to the exact re-sort below.
    pairs = np.flatnonzero((near & ~same).any(axis=1))
    if len(pairs) and len(usable):
        caps = capacity[usable].astype(object)
        p = np.array([w.numerator for w in weights], dtype=object)[account_of[order]]
        q = np.array([w.denominator for w in weights], dtype=object)[account_of[order]]
        current, previous = pairs + 1, pairs
        exactly = (
            a[current].astype(object) * q[current, None] * caps[c[previous]] * p[previous, None]
            == a[previous].astype(object) * q[previous, None] * caps[c[current]] * p[current, None]
        )
        same[pairs] |= exactly.astype(np.bool_) & near[pairs]
    far = ~near
    first_far = np.where(far.any(axis=1), far.argmax(axis=1), width)
    in_prefix = np.arange(width)[None, :] < first_far[:, None]
    suspicious = (in_prefix & ~same).any(axis=1)
    equal_prev = np.r_[False, (first_far == width) & same.all(axis=1)]

    if suspicious.any():
        exact = _ExactShares(before, account_of, capacity, weights)
        for start, stop in _runs_around(np.flatnonzero(suspicious) + 1, near[:, 0]):
            rows = sorted(order[start:stop].tolist(), key=lambda i: (exact.vector(i), i))
            order[start:stop] = rows
            equal_prev[start] = False
            for position in range(start + 1, stop):
                equal_prev[position] = exact.vector(rows[position - start]) == exact.vector(rows[position - start - 1])

    group_starts = np.flatnonzero(~equal_prev)
    group_stops = np.r_[group_starts[1:], count]
    multi = np.flatnonzero(group_stops - group_starts > 1)
    for g in multi.tolist():
        start, stop = int(group_starts[g]), int(group_stops[g])
        rows = order[start:stop].tolist()
        if len({int(account_of[i]) for i in rows}) < 2:
            continue
        order[start:stop] = _break_ties(rows, account_of, account_names, epoch, wins, plan_wins)
        tied[rows] = True
    return Ordering(order, vector[:, 0].copy(), tied)


def _weight_ids(weights: Sequence[Fraction]) -> IntArray:
    ids: dict[Fraction, int] = {}
    return np.array([ids.setdefault(w, len(ids)) for w in weights], dtype=np.int64)


def _runs_around(positions: IntArray, near_level: npt.NDArray[np.bool_]) -> list[tuple[int, int]]:
    """Maximal [start, stop) ranges of rows chained by near levels that hold `positions`."""
    runs: list[tuple[int, int]] = []
    for position in positions.tolist():
        if runs and position < runs[-1][1]:
            continue
        start = position - 1
        while start > 0 and near_level[start - 1]:
            start -= 1
        stop = position + 1
        while stop - 1 < len(near_level) and near_level[stop - 1]:
            stop += 1
        runs.append((start, stop))
    return runs


class _ExactShares:
    """Exact sorted share vectors of single rows, computed on demand."""

    def __init__(self, before: IntArray, account_of: IntArray, capacity: IntArray, weights: Sequence[Fraction]) -> None:
        self._before = before
        self._account_of = account_of
        self._capacity = [int(x) for x in capacity]
        self._weights = weights
        self._cache: dict[int, tuple[Fraction, ...]] = {}

    def vector(self, row: int) -> tuple[Fraction, ...]:
        if row not in self._cache:
            self._cache[row] = share_vector(
                [int(x) for x in self._before[row]], self._capacity, self._weights[int(self._account_of[row])]
            ) or (Fraction(0),)
        return self._cache[row]


def _break_ties(
    rows: list[int],
    account_of: IntArray,
    account_names: Sequence[str],
    epoch: int,
    wins: dict[str, float],
    plan_wins: dict[str, float],
) -> list[int]:
    """Order rows of equal level and share vector: fewer tie wins first, then rotation.

    Rows come in index order, so each account's rows are in Slurm's order.
    An account wins a tie when it is placed while another account waits.
    """
    queues: dict[int, list[int]] = {}
    for row in rows:
        queues.setdefault(int(account_of[row]), []).append(row)
    for queue in queues.values():
        queue.reverse()  # pop() takes the next row

    def entry(account: int) -> tuple[float, int, str, int]:
        name = account_names[account]
        return (wins.get(name, 0.0), rotation_key(epoch, name), name, account)

    heap = [entry(account) for account in queues]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        *_, account = heapq.heappop(heap)
        if heap:
            name = account_names[account]
            wins[name] = wins.get(name, 0.0) + 1.0
            plan_wins[name] = plan_wins.get(name, 0.0) + 1.0
        queue = queues[account]
        out.append(queue.pop())
        if queue:
            heapq.heappush(heap, entry(account))
    return out


def map_values(level_sorted: FloatArray, scale: int, step: int = 1) -> tuple[IntArray, int]:
    """Increasing values along the order, and how many pairs of distinct levels collided.

    raw = round(scale x level); each value is at least its predecessor +
    `step`. With step = 1 + the sum of Slurm's other priority weights, those
    factors (each between 0 and its weight) can never swap two neighbours.
    """
    raw = np.floor(level_sorted * scale + 0.5)
    raw = np.minimum(raw, float(2**62)).astype(np.int64)
    index = np.arange(len(raw), dtype=np.int64) * step
    values: IntArray = np.maximum.accumulate(raw - index) + index
    collisions = 0
    if len(raw) > 1:
        distinct = level_sorted[1:] != level_sorted[:-1]
        collisions = int(np.count_nonzero(distinct & (raw[1:] <= raw[:-1])))
    return values, collisions


def priority_weight_sum(weights: Mapping[str, int]) -> int:
    """The most Slurm's other factors can add to a job's priority (PriorityWeight*).

    PriorityWeightTRES is counted through its per-TRES entries
    (`PriorityWeightTRES/CPU`), each factor being at most its weight.
    """
    return sum(v for k, v in weights.items() if k.startswith("PriorityWeight") and k != "PriorityWeightTRES")


def mode_values(mode: str, values: IntArray, offset: int, user_nice: IntArray) -> IntArray:
    """The numbers written to Slurm in `mode` (SPEC §5), vectorised.

    nice: the user's nice plus ours, ours at most -1 so that Slurm's clamp
    of priority to >= 1 never merges two jobs; site_factor and priority:
    offset - value, at least 1 (priority 0 would hold the job).
    """
    if mode == "nice":
        ours = np.minimum(values - offset, -1)
        return np.clip(user_nice + ours, -NICE_LIMIT, NICE_LIMIT)
    return np.clip(offset - values, 1, NICE_LIMIT)


def mode_value(mode: str, value: int, offset: int, nice: int) -> int:
    """`mode_values` for one job."""
    return int(mode_values(mode, np.array([value], dtype=np.int64), offset, np.array([nice], dtype=np.int64))[0])


# --------------------------------------------------------------------------
# The plan


ColumnMaker = Callable[[], list[Any]]


class LazyColumns(Mapping[str, list[Any]]):
    """A plan's job columns, each made into a list the first time it is read.

    Pools add chunks of column makers; a terminal table that shows twenty
    jobs never pays for the job ids and users of a hundred thousand.
    """

    def __init__(self) -> None:
        self._chunks: list[Mapping[str, ColumnMaker]] = []
        self._made: dict[str, list[Any]] = {}
        self.size = 0

    def add(self, size: int, makers: Mapping[str, ColumnMaker]) -> None:
        assert set(makers) == set(JOB_COLUMNS)
        self._chunks.append(makers)
        self.size += size
        self._made.clear()

    def __getitem__(self, name: str) -> list[Any]:
        if name not in self._made:
            if name not in JOB_COLUMNS:
                raise KeyError(name)
            column: list[Any] = []
            for chunk in self._chunks:
                column.extend(chunk[name]())
            self._made[name] = column
        return self._made[name]

    def __iter__(self) -> Iterator[str]:
        return iter(JOB_COLUMNS)

    def __len__(self) -> int:
        return len(JOB_COLUMNS)


class PlanJobs(Sequence[JobPlan]):
    """A plan's job decisions as columns; JobPlan objects made on demand."""

    def __init__(self, columns: LazyColumns) -> None:
        self.columns = columns
        self._rows: tuple[JobPlan, ...] | None = None

    def _all(self) -> tuple[JobPlan, ...]:
        if self._rows is None:
            c = self.columns
            self._rows = tuple(
                JobPlan(*row)
                for row in zip(
                    c["job_id"],
                    c["account"],
                    c["user"],
                    c["pool"],
                    c["order"],
                    c["level"],
                    c["value"],
                    c["current"],
                    c["action"],
                    c["reason"],
                    c["tie"],
                    c["user_nice"],
                    c["array_tasks"],
                    strict=True,
                )
            )
        return self._rows

    def __len__(self) -> int:
        return self.columns.size

    def row(self, index: int) -> JobPlan:
        """One decision, without making all of them into objects."""
        if self._rows is not None:
            return self._rows[index]
        return JobPlan(*(self.columns[name][index] for name in JOB_COLUMNS))

    @overload
    def __getitem__(self, index: int) -> JobPlan: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[JobPlan]: ...
    def __getitem__(self, index: int | slice) -> JobPlan | Sequence[JobPlan]:
        return self._all()[index]

    def __iter__(self) -> Iterator[JobPlan]:
        return iter(self._all())


JOB_COLUMNS: Final = (
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


def compute_plan(snapshot: Snapshot, config: Config, state: PolicyState = EMPTY_STATE) -> Plan:
    """The whole decision for one snapshot: shares, order and values."""
    table = snapshot.table
    pools = build_pools(snapshot, config)
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
    excluded = (
        np.array([a in config.exclude_accounts for a in table.accounts] or [False])[table.account]
        if len(table)
        else np.zeros(0, dtype=np.bool_)
    )
    held = table.held | (table.priority == 0)

    fingerprint = running_fingerprint([table.job_id[i] for i in np.flatnonzero(holding).tolist()])
    epoch, wins = advance_state(state, fingerprint, config.tie_half_life)
    committed = dict(wins)  # what this plan starts from; `wins` also counts its own
    plan_wins: dict[str, float] = {}

    weights = [config.weight(a) for a in table.accounts]
    # Absolute priorities leave Slurm no factors to add; nice and site
    # factor are added to them.
    step = 1 if config.mode == "priority" else priority_weight_sum(snapshot.priority_weights) + 1
    columns = LazyColumns()
    warnings: list[str] = []
    pool_plans: list[PoolPlan] = []
    account_rows: list[AccountShare] = []
    for number, (name, partitions) in enumerate(pools):
        capacity_map, node_count = compute_capacity(
            snapshot, partitions, config.resources, config.include_unavailable_nodes
        )
        pool_plans.append(PoolPlan(name, tuple(partitions), node_count, MappingProxyType(capacity_map)))
        in_pool = (job_pool == number) & ~excluded
        running_rows = np.flatnonzero(in_pool & holding)
        pending_rows = np.flatnonzero(in_pool & pending & ~held)
        if not any(capacity_map.values()) and (len(running_rows) or len(pending_rows)):
            warnings.append(
                f"pool {name}: no capacity in {', '.join(config.resources)}; its jobs are "
                "ordered by tie rule and Slurm's order only"
            )
        account_rows.extend(
            _plan_pool(
                name,
                capacity_map,
                table,
                running_rows,
                pending_rows,
                weights,
                config,
                state,
                epoch,
                wins,
                plan_wins,
                step,
                columns,
                warnings,
            )
        )

    _skipped_rows(table, job_pool, pending, excluded, held, pools, config.mode, state, columns)

    weight_sum = priority_weight_sum(snapshot.priority_weights)
    if weight_sum and weight_sum * 100 > config.scale and config.mode != "priority":
        warnings.append(
            f"Slurm's PriorityWeight* sum to {weight_sum}: neighbours in the order are kept "
            f"{weight_sum + 1} apart so that they cannot swap, which is more than scale "
            f"{config.scale} gives a level difference under {(weight_sum + 1) / config.scale:.3g}; "
            f"raise scale to {weight_sum * 100} or more to keep values proportional to levels"
        )

    next_state = PolicyState(
        epoch=epoch,
        fingerprint=fingerprint,
        tie_wins=MappingProxyType(committed),
        plan_wins=MappingProxyType(plan_wins),
        jobs=state.jobs,
    )
    return Plan(
        cluster=snapshot.cluster,
        mode=config.mode,
        scale=config.scale,
        resources=tuple(config.resources),
        pools=tuple(pool_plans),
        accounts=tuple(account_rows),
        jobs=PlanJobs(columns),
        warnings=tuple(warnings),
        state=next_state,
        taken_at=snapshot.taken_at,
    )


def _plan_pool(
    pool: str,
    capacity_map: Mapping[str, int],
    table: JobTable,
    running_rows: IntArray,
    pending_rows: IntArray,
    weights: Sequence[Fraction],
    config: Config,
    state: PolicyState,
    epoch: int,
    wins: dict[str, float],
    plan_wins: dict[str, float],
    step: int,
    columns: LazyColumns,
    warnings: list[str],
) -> list[AccountShare]:
    resources = config.resources
    mode = config.mode
    accounts = len(table.accounts)
    tres = [table.column(r) for r in resources]
    usage = np.zeros((accounts, len(resources)), dtype=np.int64)
    running_account = table.account[running_rows]
    for col, values in enumerate(tres):
        np.add.at(usage[:, col], running_account, values[running_rows])
    running_count = np.bincount(running_account, minlength=accounts)
    capacity = np.array([capacity_map[r] for r in resources], dtype=np.int64)

    # Job ids and site factors only when they can matter (memory, site_factor mode).
    ids = [table.job_id[i] for i in pending_rows.tolist()] if state.jobs else []
    site_factors = [table.site_factor[i] for i in pending_rows.tolist()] if mode == "site_factor" else []
    base, own_nice, current = adjust_for_memory(
        ids, table.priority[pending_rows], table.nice[pending_rows], site_factors, mode, state.jobs
    )
    slurm_order = np.lexsort(
        (table.job_number[pending_rows], table.submit_time[pending_rows], -base, table.account[pending_rows])
    )
    rows = pending_rows[slurm_order]
    account_of = table.account[rows]
    demand = (
        np.stack([values[rows] for values in tres], axis=1)
        if len(resources)
        else np.zeros((len(rows), 0), dtype=np.int64)
    )
    demand = demand * table.array_tasks[rows][:, None]
    before = compute_before(demand, account_of, usage)
    ordering = order_pending(before, account_of, capacity, weights, table.accounts, epoch, wins, plan_wins)
    order = ordering.order
    level_sorted = ordering.level[order]
    values, collisions = map_values(level_sorted, config.scale, step)
    if collisions:
        warnings.append(
            f"pool {pool}: scale {config.scale} cannot separate {collisions} pair(s) of distinct "
            "levels; their values were spread apart to keep the order strict (raise scale)"
        )
    # nice: value - offset <= -1; site_factor, priority: offset - value >= 1.
    saturated = int(np.count_nonzero(values > config.offset - 1))
    if saturated:
        warnings.append(
            f"pool {pool}: {saturated} job(s) have levels beyond what scale {config.scale} and "
            f"offset {config.offset} can express; they share the last value"
        )
    taken = slurm_order[order]  # positions into the pool's pending_rows / ids / adjustments
    own = own_nice[taken]
    written = mode_values(mode, values, config.offset, own)
    if mode == "nice":
        clipped = int(np.count_nonzero(written != own + np.minimum(values - config.offset, -1)))
        if clipped:
            warnings.append(
                f"pool {pool}: {clipped} job(s) carry a nice of their own that does not fit beside "
                f"ours in Slurm's range (+/-{NICE_LIMIT}); their values were clipped and may tie"
            )
    now = [current[k] for k in taken.tolist()]
    written_list = written.tolist()
    rows_sorted = rows[order]
    count = len(rows_sorted)
    job_ids, users, names = table.job_id, table.user, table.accounts
    columns.add(
        count,
        {
            "job_id": lambda: [job_ids[i] for i in rows_sorted.tolist()],
            "account": lambda: [names[a] for a in account_of[order].tolist()],
            "user": lambda: [users[i] for i in rows_sorted.tolist()],
            "pool": lambda: [pool] * count,
            "order": lambda: list(range(count)),
            "level": level_sorted.tolist,
            "value": lambda: written_list,
            "current": lambda: now,
            "action": lambda: ["keep" if c == w else "set" for c, w in zip(now, written_list, strict=True)],
            "reason": lambda: [None] * count,
            "tie": ordering.tied[order].tolist,
            "user_nice": own.tolist,
            "array_tasks": table.array_tasks[rows_sorted].tolist,
        },
    )

    pending_count = np.bincount(account_of, minlength=accounts)
    present = np.flatnonzero((running_count > 0) | (pending_count > 0))
    return _account_shares(
        pool,
        [table.accounts[a] for a in present.tolist()],
        [weights[a] for a in present.tolist()],
        usage[present],
        capacity_map,
        resources,
        running_count[present].tolist(),
        pending_count[present].tolist(),
    )


def _skipped_rows(
    table: JobTable,
    job_pool: IntArray,
    pending: BoolArray,
    excluded: BoolArray,
    held: BoolArray,
    pools: Sequence[tuple[str, tuple[str, ...]]],
    mode: str,
    state: PolicyState,
    columns: LazyColumns,
) -> None:
    """Pending jobs the plan leaves alone, each with its reason."""
    skip = pending & ((job_pool < 0) | excluded | held)
    rows: list[tuple[Any, ...]] = []
    for i in np.flatnonzero(skip).tolist():
        reason = "partition not managed" if job_pool[i] < 0 else "account excluded" if excluded[i] else "held"
        _, own, current = adjust_for_memory(
            [table.job_id[i]],
            table.priority[i : i + 1],
            table.nice[i : i + 1],
            [table.site_factor[i]],
            mode,
            state.jobs,
        )
        row = (
            table.job_id[i],
            table.accounts[table.account[i]],
            table.user[i],
            pools[job_pool[i]][0] if job_pool[i] >= 0 else None,
            None,
            None,
            None,
            current[0],
            "skip",
            reason,
            False,
            int(own[0]),
            int(table.array_tasks[i]),
        )
        rows.append(row)
    made: list[list[Any]] = [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in JOB_COLUMNS]
    columns.add(
        len(rows), {name: functools.partial(list, column) for name, column in zip(JOB_COLUMNS, made, strict=True)}
    )


def _account_shares(
    pool: str,
    account_names: list[str],
    fractions: list[Fraction],
    usage: IntArray,
    capacity_map: Mapping[str, int],
    resources: Sequence[str],
    running_count: list[int],
    pending_count: list[int],
) -> list[AccountShare]:
    """One row per account present in the pool, ranked by weighted share (lowest first)."""
    capacity = np.array([capacity_map[r] for r in resources], dtype=np.float64)
    usable = capacity > 0
    shares = np.divide(usage, capacity, out=np.zeros(usage.shape, dtype=np.float64), where=usable)
    masked = np.where(usable, shares, -1.0)
    dominant = masked.argmax(axis=1) if len(resources) else np.zeros(len(account_names), dtype=np.int64)
    # One correctly rounded division per share (u*q / (c*p)): equal shares compare equal.
    weighted = np.zeros(len(account_names), dtype=np.float64)
    if usable.any() and account_names:
        p = np.array([f.numerator for f in fractions], dtype=np.float64)
        q = np.array([f.denominator for f in fractions], dtype=np.float64)
        weighted = ((usage[:, usable] * q[:, None]) / (capacity[usable][None, :] * p[:, None])).max(axis=1)
    ranking = sorted(range(len(account_names)), key=lambda i: (weighted[i], account_names[i]))
    rows = []
    for rank, i in enumerate(ranking, start=1):
        has_dominant = bool(usable.any())
        resource = resources[int(dominant[i])] if has_dominant else None
        rows.append(
            AccountShare(
                account_names[i],
                pool,
                fractions[i],
                running_count[i],
                pending_count[i],
                MappingProxyType(dict(zip(resources, usage[i].tolist(), strict=True))),
                MappingProxyType(dict(zip(resources, shares[i].tolist(), strict=True))),
                resource,
                float(shares[i, dominant[i]]) if has_dominant else 0.0,
                float(weighted[i]),
                rank,
            )
        )
    return rows


# --------------------------------------------------------------------------
# The reference oracle: textbook progressive filling with a heap


def reference_order(
    pending_by_account: Mapping[str, Sequence[Sequence[int]]],
    usage: Mapping[str, Sequence[int]],
    capacity: Sequence[int],
    weights: Mapping[str, Fraction],
    epoch: int = 1,
    wins: Mapping[str, float] | None = None,
) -> list[tuple[str, int]]:
    """The DRF order by the greedy loop: always serve the lowest current share.

    `pending_by_account[a]` lists the demand vectors of a's pending jobs in
    Slurm's order (an array record's demand already multiplied by its
    tasks). Returns (account, index in its list) in order. Exact fractions,
    same tie rule as `order_pending`. O(J log A).
    """
    tie_wins = dict(wins or {})
    current = {a: [int(x) for x in usage.get(a, [0] * len(capacity))] for a in pending_by_account}
    taken = dict.fromkeys(pending_by_account, 0)

    def entry(account: str) -> tuple[Fraction, tuple[Fraction, ...], float, int, str]:
        weight = weights.get(account, Fraction(1))
        return (
            weighted_share(current[account], capacity, weight),
            share_vector(current[account], capacity, weight),
            tie_wins.get(account, 0.0),
            rotation_key(epoch, account),
            account,
        )

    heap = [entry(a) for a, jobs in pending_by_account.items() if jobs]
    heapq.heapify(heap)
    out: list[tuple[str, int]] = []
    while heap:
        level, vector, *_, account = heapq.heappop(heap)
        if heap and heap[0][:2] == (level, vector):
            tie_wins[account] = tie_wins.get(account, 0.0) + 1.0
        index = taken[account]
        out.append((account, index))
        demand = pending_by_account[account][index]
        current[account] = [c + int(d) for c, d in zip(current[account], demand, strict=True)]
        taken[account] = index + 1
        if taken[account] < len(pending_by_account[account]):
            heapq.heappush(heap, entry(account))
    return out


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
