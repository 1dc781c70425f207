"""A plan's rows, kept as columns: the job decisions, the account rows and each pool's order record.

Pure, in the policy layer beside `policy.plan`, which orchestrates a plan
and fills these: `JobPlan` and `AccountShare` are the rows, `PlanJobs` and
`PlanAccounts` keep them as columns (`LazyColumns`: each job column made
the first time it is read), and `PoolOrder` is why the engine placed each
of a pool's jobs, the engine's own arrays by reference, which `explain`
reads.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from fractions import Fraction
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

from slurm_drf.model.types import FloatArray, IntArray, LazyRows
from slurm_drf.policy.engine.order import Ordering, TieRecord
from slurm_drf.policy.rule import weighted_share

if TYPE_CHECKING:
    from slurm_drf.policy.engine.tree_order import TreeOrdering
    from slurm_drf.policy.guarantees import PoolBounds


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
    # What the decayed past adds to `usage` (docs/rule.md §6): shares, weighted
    # share and rank are over usage + past; `usage` itself is the running
    # allocation alone (the history integrates that, never its own blend).
    past: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # The weighted share over `usage` alone (what pure DRF would see) when the
    # past adds something in the pool; None otherwise, where it is `weighted_share`.
    present_share: float | None = None


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
    band: str | None = None  # "exact" or "coarse" for ordered jobs
    # Over a tree (docs/rule.md §7) only: the job's leaf key and the weighted
    # share of each node of it when the job was placed (root's child first).
    path: str | None = None
    path_shares: tuple[float, ...] | None = None


@dataclass(frozen=True, slots=True, eq=False)
class PoolOrder:
    """Why the engine placed each of one pool's ordered jobs: the record `explain` reads.

    The pool's ordered jobs are `plan.jobs[offset : offset + size]`, the
    job at position p of the DRF order (its `order`) at offset + p. The
    arrays are the engine's own, kept by reference: recording adds no work
    per job, and a question about one job costs a few array reads.
    """

    pool: str
    offset: int
    capacity: tuple[int, ...]  # by plan resource
    weights: Sequence[Fraction]  # by account code
    before: IntArray  # (J, R) usage before each job, by row (jobs in Slurm's order)
    account_of: IntArray  # account code by row
    ordering: Ordering
    exact: int = 0  # positions [0, exact) are the exact band
    # The H-DRF record when the pool was ordered over a tree (docs/rule.md §7); None for §2's order.
    tree: TreeOrdering | None = None
    # §2's order only: each account's usage before its next job (running, the past's blend and the
    # demand of all its pending jobs in the pool), (A, R) by account code, named by `accounts`.
    next_usage: IntArray | None = None
    accounts: Sequence[str] = ()
    # With guarantees or limits (docs/rule.md §9): each job's part (policy.guarantees WITHIN,
    # ORDINARY, OVER) by row, and each position's place in the DRF order before they moved it.
    parts: npt.NDArray[np.int8] | None = None
    drf_position: IntArray | None = None
    bounds: PoolBounds | None = None

    @property
    def size(self) -> int:
        return len(self.ordering.order)

    def usage_before(self, position: int) -> tuple[int, ...]:
        """The usage the job's level is computed over: its account's running usage
        plus the demand of the account's earlier pending jobs in the pool."""
        return tuple(int(x) for x in self.before[self.ordering.order[position]])

    def level_exact(self, position: int) -> Fraction:
        """The job's level, exactly (the engine compared it rounded down to whole 2**-SHARE_BITS)."""
        weight = self.weights[int(self.account_of[self.ordering.order[position]])]
        return weighted_share(self.usage_before(position), self.capacity, weight)

    def level_start(self, position: int) -> int:
        """The first position whose level (as the engine compared it) equals this one's; every job before it
        has a lower level."""
        return int(np.flatnonzero(self.ordering.new_level[: position + 1])[-1])

    def vector_start(self, position: int) -> int:
        """The first position whose (level, share vector), as the engine compared them, equals this one's."""
        return int(np.flatnonzero(self.ordering.new_vector[: position + 1])[-1])

    def tie(self, position: int) -> TieRecord | None:
        """The tie the rule broke at this position, if any."""
        ties = self.ordering.ties
        found = bisect.bisect_right(ties, position, key=lambda tie: tie.start) - 1
        return ties[found] if found >= 0 and position < ties[found].stop else None


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


class PlanJobs(LazyRows[JobPlan]):
    """A plan's job decisions as columns; JobPlan objects made on demand."""

    __slots__ = ("columns",)

    def __init__(self, columns: LazyColumns) -> None:
        super().__init__(
            columns.size,
            lambda index: JobPlan(*(columns[name][index] for name in JOB_COLUMNS)),
            lambda: itertools.starmap(JobPlan, zip(*(columns[name] for name in JOB_COLUMNS), strict=True)),
        )
        self.columns = columns


@dataclass(frozen=True, eq=False)  # no slots: `find` caches its index in the instance
class AccountColumns:
    """One pool's AccountShare rows as columns, in the rows' order (rank, then name).

    `usage`, `shares` and `past` are (accounts, resources) arrays, `past`
    None for pure DRF; `present_share` None unless the past adds something.
    Renderers read the columns (`trail.plan_output`); `row` makes one row.
    """

    pool: str
    resources: tuple[str, ...]
    account: list[str]
    weight: list[Fraction]
    running_jobs: list[int]
    pending_jobs: list[int]
    usage: IntArray
    shares: FloatArray
    dominant_resource: list[str | None]
    dominant_share: list[float]
    weighted_share: list[float]
    rank: list[int]
    past: IntArray | None = None
    present_share: list[float] | None = None

    def __len__(self) -> int:
        return len(self.account)

    @property
    def blends_past(self) -> bool:
        return self.past is not None and bool(self.past.any())

    @functools.cached_property
    def _position(self) -> dict[str, int]:
        return {name: k for k, name in enumerate(self.account)}

    def scalar(self, name: str) -> Sequence[Any]:
        """The column of one scalar field of the rows (`pool` included)."""
        if name == "pool":
            return [self.pool] * len(self)
        if name not in _SCALAR_ACCOUNT_FIELDS:
            raise KeyError(name)
        if name == "present_share" and self.present_share is None:  # the past adds nothing in the pool
            return [None] * len(self)
        column: Sequence[Any] = getattr(self, name)
        return column

    def find(self, account: str) -> int | None:
        """The position of `account`'s row, if the pool has one."""
        return self._position.get(account)

    def rows(self, positions: Sequence[int] | None = None) -> list[AccountShare]:
        """The rows at `positions` (all by default) as AccountShare objects."""
        chosen = range(len(self)) if positions is None else positions
        picked = list(chosen)
        if not picked:
            return []
        usage, shares = self.usage[picked].tolist(), self.shares[picked].tolist()
        past = self.past[picked].tolist() if self.past is not None else None
        resources = self.resources
        empty: Mapping[str, int] = MappingProxyType({})
        return [
            AccountShare(
                self.account[i],
                self.pool,
                self.weight[i],
                self.running_jobs[i],
                self.pending_jobs[i],
                MappingProxyType(dict(zip(resources, usage[k], strict=True))),
                MappingProxyType(dict(zip(resources, shares[k], strict=True))),
                self.dominant_resource[i],
                self.dominant_share[i],
                self.weighted_share[i],
                self.rank[i],
                empty
                if past is None
                else MappingProxyType({r: a for r, a in zip(resources, past[k], strict=True) if a}),
                None if self.present_share is None else self.present_share[i],
            )
            for k, i in enumerate(picked)
        ]


# The AccountShare fields that are one value per row, kept as lists (`pool` is one per chunk;
# usage, shares and past are mappings per resource).
_SCALAR_ACCOUNT_FIELDS: Final = frozenset(f.name for f in fields(AccountShare)) - {"pool", "usage", "shares", "past"}


class PlanAccounts(LazyRows[AccountShare]):
    """A plan's account rows, pool after pool, kept as columns (`chunks`, one per pool);
    AccountShare objects made on demand."""

    __slots__ = ("chunks",)

    def __init__(self, chunks: Sequence[AccountColumns]) -> None:
        self.chunks = tuple(chunks)
        starts = list(itertools.accumulate((len(c) for c in self.chunks), initial=0))

        def one(index: int) -> AccountShare:
            chunk = bisect.bisect_right(starts, index) - 1
            return self.chunks[chunk].rows([index - starts[chunk]])[0]

        super().__init__(starts[-1], one, lambda: itertools.chain.from_iterable(c.rows() for c in self.chunks))

    def find(self, pool: str | None, account: str) -> AccountShare | None:
        for chunk in self.chunks:
            if chunk.pool == pool:
                position = chunk.find(account)
                return None if position is None else chunk.rows([position])[0]
        return None


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
    "band",
    "path",
    "path_shares",
)
# The job columns only a plan over a tree fills (None elsewhere); the plan JSON has them only then.
TREE_JOB_COLUMNS: Final = ("path", "path_shares")
