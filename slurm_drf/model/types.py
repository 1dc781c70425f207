"""The data every other module speaks: TRES vectors, nodes, jobs, snapshots.

Sits at the bottom of the flow (cli -> service -> cycle -> {slurm, policy}
-> model). Everything here is frozen and free of I/O; the JSON codec is
`model.codec`, reading and writing snapshot files `model.snapshot_file`.

TRES names are Slurm's own (`cpu`, `mem` in MiB, `gres/gpu`,
`gres/gpu:a100`, `node`, `license/NAME`). Amounts are integers: Slurm counts
every TRES in whole units, and integer sums keep the engine exact.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeVar, overload

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from slurm_drf.model.account_tree import AccountTree

SNAPSHOT_FORMAT: Final = "slurm-drf-snapshot/1"


PLAN_FORMAT: Final = "slurm-drf-plan/1"


# Slurm base states in which a job holds (running) or asks for (pending)
# resources.
PENDING: Final = "PENDING"


RUNNING: Final = "RUNNING"


SUSPENDED: Final = "SUSPENDED"


HOLDING_STATES: Final = frozenset({RUNNING, SUSPENDED, "COMPLETING"})


# Node states that cannot run jobs; their resources are not capacity.
INELIGIBLE_NODE_STATES: Final = frozenset(
    {
        "down",
        "drain",
        "drained",
        "draining",
        "fail",
        "failing",
        "future",
        "powered_down",
        "power_down",
        "powering_down",
        "powering_up",
        "inval",
        "invalid",
        "invalid_reg",
        "maint",
        "maintenance",
        "reboot_issued",
        "not_responding",
        "unknown",
    }
)


# The one-character suffixes sinfo's short states carry (`down*`, `idle~`,
# `mix-`; sinfo(1), NODE STATE CODES), as the flag each stands for.
# `-` (planned by backfill) and `@` (reboot requested) leave a node usable.
NODE_STATE_SUFFIXES: Final = {
    "*": "not_responding",
    "~": "powered_down",
    "#": "powering_up",
    "%": "powering_down",
    "!": "power_down",
    "$": "maint",
    "^": "reboot_issued",
    "-": "",
    "@": "",
}


def node_state_flags(state: str) -> set[str]:
    """`idle+drain`, `down*`, `idle~`: the base state and every flag, suffixes spelled out."""
    flags: set[str] = set()
    for part in state.lower().split("+"):
        base = part.rstrip("".join(NODE_STATE_SUFFIXES))
        flags.update(NODE_STATE_SUFFIXES[suffix] for suffix in part[len(base) :])
        flags.add(base)
    flags.discard("")
    return flags


# What Slurm can hold (docs/formats.md): a snapshot outside these is refused.
# Job ids are 32-bit; the top two values are Slurm's NO_VAL and INFINITE.
MAX_JOB_ID: Final = 2**32 - 3
# Priorities are 32-bit unsigned.
MAX_PRIORITY: Final = 2**32 - 1
# nice and site factor: Slurm refuses values beyond +-(2**31 - 3).
NICE_RANGE: Final = 2**31 - 3
# MaxArraySize is at most 4000001, so no array has more tasks.
MAX_ARRAY_TASKS: Final = 4_000_001
# TRES counts are 64-bit in Slurm; the engine's sums are int64, so every
# amount, and every TRES's total over the snapshot's nodes and over its jobs
# (array tasks counted), stays within this.
MAX_TRES: Final = 2**63 - 1


Tres = Mapping[str, int]


IntArray = npt.NDArray[np.int64]


FloatArray = npt.NDArray[np.float64]


BoolArray = npt.NDArray[np.bool_]


EMPTY_TRES: Final[Tres] = MappingProxyType({})


def freeze_tres(values: Mapping[str, int]) -> Tres:
    """A read-only copy of a TRES mapping."""
    return MappingProxyType(dict(values))


@dataclass(frozen=True, slots=True)
class Node:
    """One node as Slurm reports it; `state` is lower case, flags joined by '+'."""

    name: str
    partitions: tuple[str, ...]
    state: str
    tres: Tres

    @property
    def eligible(self) -> bool:
        """Whether the node's resources count as capacity (docs/rule.md §2)."""
        return not node_state_flags(self.state) & INELIGIBLE_NODE_STATES


@dataclass(frozen=True, slots=True)
class Job:
    """A running or pending job; `tres` is the whole job, one array task.

    `partition` may be a comma list (a job pending in several partitions).
    `submit_time` is seconds since the epoch. `array_tasks` is how many
    pending tasks a pending array record stands for.
    """

    job_id: str
    account: str
    user: str
    partition: str
    state: str
    priority: int
    nice: int
    held: bool
    submit_time: float
    array_tasks: int
    tres: Tres
    site_factor: int | None = None

    @property
    def partitions(self) -> tuple[str, ...]:
        return tuple(p for p in self.partition.split(",") if p)

    @property
    def pending(self) -> bool:
        return self.state == PENDING

    @property
    def holding(self) -> bool:
        return self.state in HOLDING_STATES


def job_number(job_id: str) -> int:
    """The numeric part of a job id (array and het suffixes dropped); 0 when it is no 32-bit number in ASCII digits."""
    head = job_id.split("_", 1)[0].split("+", 1)[0]
    return int(head) if head.isascii() and head.isdigit() and len(head) <= 10 else 0


def job_numbers(job_ids: Sequence[str]) -> IntArray:
    """`job_number` of every id; plain numeric ids (the usual case) in one numpy call."""
    # int() alone would take more than job_number does ("1234_5" as 12345, " 12", "+5",
    # non-ASCII digits, more than 10 digits): the one call is only for ids that are all
    # ASCII digits, at most 10 each, checked in C loops over the joined ids.
    joined = "".join(job_ids)
    if joined.isascii() and joined.isdigit():
        lengths = np.fromiter(map(len, job_ids), dtype=np.int64, count=len(job_ids))
        if lengths.min() >= 1 and lengths.max() <= 10:  # no empty id (int() would refuse it)
            # int() of each id, from the joined digits: each digit times its power of ten, summed per id.
            digits = np.frombuffer(joined.encode("ascii"), dtype=np.uint8).astype(np.int64) - ord("0")
            ends = np.cumsum(lengths)
            power = np.repeat(ends, lengths) - 1 - np.arange(len(digits))
            numbers: IntArray = np.add.reduceat(digits * _POWERS_OF_TEN[power], ends - lengths)
            return numbers
    return np.fromiter(map(job_number, job_ids), dtype=np.int64, count=len(job_ids))


_POWERS_OF_TEN: Final = np.array([10**k for k in range(19)], dtype=np.int64)


def plain_number(job_id: str) -> int:
    """The job id as a number when it is written as one (digits, no leading zero), else 0."""
    if job_id.isascii() and job_id.isdigit() and job_id[0] != "0" and len(job_id) <= 18:
        return int(job_id)
    return 0


def plain_numbers(job_ids: Sequence[str], numbers: IntArray) -> IntArray:
    """`plain_number` of every id, given their `job_numbers`: each number kept where the id
    is exactly its digits (as many characters, ASCII), else 0; in C loops."""
    if not len(job_ids):
        return np.zeros(0, dtype=np.int64)
    # A number's digits are how many powers of ten are at most it. An ASCII id holds at least
    # the digits of its number (int() and job_number take signs, spaces, underscores,
    # leading zeros and suffixes: each a character more), so when all the ids together are
    # as long as their numbers' digits, every one is plain (a snapshot file's always are).
    digits = np.searchsorted(_POWERS_OF_TEN, numbers, side="right")
    joined = "".join(job_ids)
    if joined.isascii() and len(joined) == int(digits.sum()) and numbers.min() > 0 and int(digits.max()) <= 18:
        return numbers
    lengths = np.fromiter(map(len, job_ids), dtype=np.int64, count=len(job_ids))
    ascii_ = np.fromiter(map(str.isascii, job_ids), dtype=np.bool_, count=len(job_ids))
    plain = ascii_ & (numbers > 0) & (lengths == digits) & (lengths <= 18)
    out: IntArray = np.where(plain, numbers, 0)
    return out


def pick_rows(items: Sequence[Any], rows: IntArray) -> list[Any]:
    """items[r] for r in rows, at C speed."""
    if len(rows) == 0:
        return []
    if len(rows) == 1:
        return [items[int(rows[0])]]
    return list(operator.itemgetter(*rows.tolist())(items))


def label_codes(values: Sequence[str]) -> tuple[IntArray, tuple[str, ...]]:
    """Dictionary encoding: an int code per value and the distinct values, in order of first appearance.

    One pass over the values (each one looked up once: a snapshot's 100,000
    labels are scattered in memory, and every pass over them costs): each
    value's first position, then the codes from those in numpy.
    """
    first: dict[str, int] = {}
    at = np.fromiter(map(first.setdefault, values, itertools.count()), dtype=np.int64, count=len(values))
    code_at = np.zeros(len(values), dtype=np.int64)
    code_at[np.fromiter(first.values(), dtype=np.int64, count=len(first))] = np.arange(len(first))
    codes: IntArray = code_at[at]
    return codes, tuple(first)


Coded: TypeAlias = tuple[IntArray, tuple[str, ...]]


@dataclass(frozen=True, slots=True, eq=False)
class JobColumns:
    """The jobs' fields as read, one sequence each in the same order: what `JobTable.build` encodes."""

    job_id: Sequence[str]
    account: Sequence[str]
    user: Sequence[str]
    partition: Sequence[str]
    state: Sequence[str]
    priority: Sequence[int] | IntArray
    nice: Sequence[int] | IntArray
    held: Sequence[bool] | BoolArray
    submit_time: Sequence[float] | FloatArray
    array_tasks: Sequence[int] | IntArray
    site_factor: Sequence[int | None]
    tres: Mapping[str, IntArray]


@dataclass(frozen=True, slots=True, eq=False)
class JobTable:
    """The jobs of a snapshot as columns, for the vectorised engine.

    Accounts, partitions and states are dictionary-encoded (`account[i]`
    indexes `accounts`). `tres` holds a column for every TRES name any job
    has, zero where a job has none.
    """

    job_id: Sequence[str]
    job_number: IntArray
    account: IntArray
    accounts: tuple[str, ...]
    user: Sequence[str]
    partition: IntArray
    partitions: tuple[str, ...]
    state: IntArray
    states: tuple[str, ...]
    priority: IntArray
    nice: IntArray
    held: BoolArray
    submit_time: FloatArray
    array_tasks: IntArray
    site_factor: Sequence[int | None]
    tres: Mapping[str, IntArray]
    # Derived from job_id and job_number on first use (`plain_number`).
    _plain: IntArray | None = field(default=None, init=False, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.job_id)

    @property
    def plain_number(self) -> IntArray:
        """Per job, `plain_number` of its id: how the daemon's memory (policy.ownership.JobMemories) finds it."""
        if self._plain is None:
            object.__setattr__(self, "_plain", plain_numbers(self.job_id, self.job_number))
        assert self._plain is not None
        return self._plain

    def column(self, name: str) -> IntArray:
        """The TRES column `name`, zeros when no job has it."""
        found = self.tres.get(name)
        return found if found is not None else np.zeros(len(self), dtype=np.int64)

    def job(self, i: int, tres: Tres | None = None) -> Job:
        """Job `i`; its TRES from the columns (the non-zero ones) unless given."""
        if tres is None:
            tres = MappingProxyType({name: int(col[i]) for name, col in self.tres.items() if col[i]})
        return Job(
            self.job_id[i],
            self.accounts[self.account[i]],
            self.user[i],
            self.partitions[self.partition[i]],
            self.states[self.state[i]],
            int(self.priority[i]),
            int(self.nice[i]),
            bool(self.held[i]),
            float(self.submit_time[i]),
            int(self.array_tasks[i]),
            tres,
            self.site_factor[i],
        )

    @classmethod
    def build(cls, columns: JobColumns, coded: Mapping[str, Coded] | None = None) -> JobTable:
        """The table of `columns`: labels dictionary-encoded, numbers as arrays.

        `coded` holds the label columns (account, partition, state) the caller
        has encoded already (`label_codes`), by name: those columns of
        `columns` are not read.
        """
        coded = coded or {}
        account_codes, accounts = coded.get("account") or label_codes(columns.account)
        partition_codes, partitions = coded.get("partition") or label_codes(columns.partition)
        state_codes, states = coded.get("state") or label_codes(columns.state)
        return cls(
            columns.job_id,
            job_numbers(columns.job_id),
            account_codes,
            accounts,
            columns.user,
            partition_codes,
            partitions,
            state_codes,
            states,
            np.asarray(columns.priority, dtype=np.int64),
            np.asarray(columns.nice, dtype=np.int64),
            np.asarray(columns.held, dtype=np.bool_),
            np.asarray(columns.submit_time, dtype=np.float64),
            np.asarray(columns.array_tasks, dtype=np.int64),
            columns.site_factor,
            columns.tres,
        )

    @classmethod
    def from_jobs(cls, jobs: Sequence[Job]) -> JobTable:
        tres = tres_columns([j.tres for j in jobs])
        return cls.build(
            JobColumns(
                [j.job_id for j in jobs],
                [j.account for j in jobs],
                [j.user for j in jobs],
                [j.partition for j in jobs],
                [j.state for j in jobs],
                [j.priority for j in jobs],
                [j.nice for j in jobs],
                [j.held for j in jobs],
                [j.submit_time for j in jobs],
                [j.array_tasks for j in jobs],
                [j.site_factor for j in jobs],
                tres,
            )
        )


def tres_columns(tres: Sequence[Tres]) -> dict[str, IntArray]:
    """A column per TRES name of the jobs' TRES mappings, zero where a job has none.

    Jobs of one shape of request share one mapping (slurm.parse.jobs): each
    distinct mapping is read once, its amounts spread to its jobs by index.
    """
    shape_of: dict[int, int] = {}
    shapes: list[Tres] = []
    codes = []
    for mapping in tres:
        code = shape_of.get(id(mapping))
        if code is None:
            code = shape_of[id(mapping)] = len(shapes)
            shapes.append(mapping)
        codes.append(code)
    index = np.array(codes, dtype=np.int64)
    names: dict[str, None] = {}
    for shape in shapes:
        names.update(dict.fromkeys(shape))
    return {
        name: np.fromiter((shape.get(name, 0) for shape in shapes), dtype=np.int64, count=len(shapes))[index]
        for name in names
    }


RowT = TypeVar("RowT")


class LazyRows(Sequence[RowT]):
    """Rows kept as columns, made into objects only when somebody asks.

    `row(i)` makes one; indexing, slicing or iterating makes them all, once
    (`make_all` when the columns can do it faster than row by row). A
    snapshot's jobs and a plan's job decisions (`policy.plan_columns.PlanJobs`)
    are both this.
    """

    __slots__ = ("_make_all", "_make_row", "_rows", "_size")

    def __init__(
        self, size: int, make_row: Callable[[int], RowT], make_all: Callable[[], Iterable[RowT]] | None = None
    ) -> None:
        self._size = size
        self._make_row = make_row
        self._make_all = make_all
        self._rows: tuple[RowT, ...] | None = None

    def _all(self) -> tuple[RowT, ...]:
        if self._rows is None:
            self._rows = tuple(self._make_all() if self._make_all else map(self._make_row, range(self._size)))
        return self._rows

    def __len__(self) -> int:
        return self._size

    def row(self, index: int) -> RowT:
        """One row, without making all of them into objects."""
        return self._rows[index] if self._rows is not None else self._make_row(index)

    @overload
    def __getitem__(self, index: int) -> RowT: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[RowT]: ...
    def __getitem__(self, index: int | slice) -> RowT | Sequence[RowT]:
        return self._all()[index]

    def __iter__(self) -> Iterator[RowT]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())


class JobRows(LazyRows[Job]):
    """Jobs read straight into their table (`table`), each Job made when asked from the
    table's columns and its own TRES mapping: the same Job as the one that was read."""

    __slots__ = ("table",)

    def __init__(self, table: JobTable, tres: Sequence[Tres]) -> None:
        super().__init__(len(table), lambda i: table.job(i, tres[i]))
        self.table = table


# What the table's int64 columns hold (priority, nice, array tasks).
INT64: Final = range(-(2**63), 2**63)
# A Job's fields in order, as `Job(*fields)` takes them.
JobFields = tuple[str, str, str, str, str, int, int, bool, float, int, Tres, "int | None"]


class JobTableBuilder:
    """Jobs read one at a time into growing columns, no object kept per job.

    A read of 50,000 jobs parses 50,000 records, each a few hundred
    objects dropped as soon as it is read. A Job kept per record lives
    among them, and its memory's neighbours cannot go back to the system:
    the read's peak stays the process's size. Here a job is its place in a
    dozen columns: arrays of numbers, and lists of the strings, each
    account, user, partition, state and TRES mapping shared by the jobs
    that have it.
    """

    __slots__ = ("_factor", "_held", "_jobs", "_numbers", "_submit", "_text", "_tres")

    def __init__(self) -> None:
        self._text: tuple[list[str], ...] = ([], [], [], [], [])  # job id, account, user, partition, state
        self._numbers = (array("q"), array("q"), array("q"))  # priority, nice, array tasks
        self._held = bytearray()
        self._submit = array("d")
        self._tres: list[Tres] = []
        self._factor: list[int | None] = []
        # Once a number does not fit its column: Jobs from then on (build_snapshot names the job).
        self._jobs: list[Job] | None = None

    def add(self, fields: JobFields) -> None:
        """One job, its fields in `Job`'s order."""
        job_id, account, user, partition, state, priority, nice, held, submit_time, tasks, tres, factor = fields
        if self._jobs is None and priority in INT64 and nice in INT64 and tasks in INT64:
            ids, accounts, users, partitions, states = self._text
            priorities, nices, array_tasks = self._numbers
            ids.append(job_id)
            accounts.append(account)
            users.append(user)
            partitions.append(partition)
            states.append(state)
            priorities.append(priority)
            nices.append(nice)
            array_tasks.append(tasks)
            self._held.append(held)
            self._submit.append(submit_time)
            self._tres.append(tres)
            self._factor.append(factor)
            return
        if self._jobs is None:
            self._jobs = list(self._rows())
        self._jobs.append(Job(*fields))

    def add_job(self, job: Job) -> None:
        self.add(
            (
                job.job_id,
                job.account,
                job.user,
                job.partition,
                job.state,
                job.priority,
                job.nice,
                job.held,
                job.submit_time,
                job.array_tasks,
                job.tres,
                job.site_factor,
            )
        )

    def _rows(self) -> JobRows:
        job_id, account, user, partition, state = self._text
        priority, nice, tasks = self._numbers
        columns = JobColumns(
            job_id,
            account,
            user,
            partition,
            state,
            np.frombuffer(priority, dtype=np.int64) if priority else (),
            np.frombuffer(nice, dtype=np.int64) if nice else (),
            np.frombuffer(self._held, dtype=np.bool_) if self._held else (),
            np.frombuffer(self._submit, dtype=np.float64) if self._submit else (),
            np.frombuffer(tasks, dtype=np.int64) if tasks else (),
            self._factor,
            tres_columns(self._tres),
        )
        return JobRows(JobTable.build(columns), self._tres)

    def jobs(self) -> Sequence[Job]:
        """The jobs added, in order: as `JobRows` over their table; as a list of Jobs when
        pending jobs share an id (a het job's components, for the caller to merge) or a
        number of one is past 64 bits (for `build_snapshot` to name it). Call it once."""
        if self._jobs is not None:
            return self._jobs
        job_id, state = self._text[0], self._text[4]
        pending = [job_id[i] for i, s in enumerate(state) if s == PENDING]
        if len(set(pending)) < len(pending):
            return list(self._rows())
        return self._rows()


@dataclass(frozen=True, slots=True)
class Association:
    """One Slurm association: an account's own (`user` None) or a user's in an account.

    `parent` is the parent account: None only for the root account; a user
    association's parent is its own account. `shares` is Slurm's RawShares
    (fairshare), None when it is "parent" (the association uses its
    parent's). `model.account_tree.build_tree` checks a set of them is one tree.
    """

    account: str
    parent: str | None
    user: str | None = None
    shares: int | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What was read from Slurm at one moment.

    `table` holds the same jobs as columns; it is built from `jobs` on
    first use, or given directly by the fast snapshot-file parser.
    `het_leaders` are the ids of the pending jobs that are heterogeneous
    jobs' leaders (their components are summed into the leader's record):
    a write to one must reach every component (docs/rule.md §5).
    `associations` is the account tree (`model.account_tree.build_tree`).
    """

    cluster: str
    taken_at: str
    nodes: tuple[Node, ...]
    jobs: Sequence[Job]
    slurm_version: str | None = None
    priority_weights: Mapping[str, int] = field(default_factory=lambda: EMPTY_TRES)
    priority_type: str | None = None
    het_leaders: frozenset[str] = frozenset()
    # The integer SchedulerParameters (bf_max_job_test, default_queue_depth, ...);
    # what Slurm did not print takes Slurm's default where it is read.
    scheduler_parameters: Mapping[str, int] = field(default_factory=lambda: EMPTY_TRES)
    # Slurm's association tree (docs/formats.md); empty when unknown, which
    # means one flat level of accounts.
    associations: tuple[Association, ...] = ()
    # slurmctld's BOOT_TIME as Slurm printed it; a new one means slurmctld
    # restarted (and may have come back from older state). None: unknown.
    controller_started: str | None = None
    # Derived from `jobs`; init=False so dataclasses.replace(jobs=...) never
    # carries a stale table over.
    _table: JobTable | None = field(default=None, init=False, compare=False, repr=False)
    # Derived from `associations` the same way (`account_tree`).
    _tree: AccountTree | None = field(default=None, init=False, compare=False, repr=False)

    @classmethod
    def from_table(
        cls, table: JobTable, rows: Sequence[Job] | None = None, *, tree: AccountTree | None = None, **fields: Any
    ) -> Snapshot:
        """A snapshot whose jobs are the table's: `rows` when given (`JobRows`), else Job
        objects made lazily from the table alone. `tree`: what `build_tree` made of
        `associations` when the reader checked them (so that the plan need not again)."""
        snapshot = cls(jobs=LazyRows(len(table), table.job) if rows is None else rows, **fields)
        object.__setattr__(snapshot, "_table", table)
        object.__setattr__(snapshot, "_tree", tree)
        return snapshot

    @property
    def account_tree(self) -> AccountTree:
        """`associations` as the checked tree (`model.account_tree.build_tree`), built once."""
        if self._tree is None:
            from slurm_drf.model.account_tree import build_tree  # noqa: PLC0415  (it imports this module)

            object.__setattr__(self, "_tree", build_tree(self.associations))
        assert self._tree is not None
        return self._tree

    def columns_only(self) -> Snapshot:
        """The same snapshot with its jobs kept only as the table (Job objects made when asked).

        A cycle reads the table alone: letting the 50,000 Job objects of a
        read go before the plan is made lowers the daemon's peak memory.
        """
        if isinstance(self.jobs, LazyRows):
            return self
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init and f.name != "jobs"}
        return Snapshot.from_table(self.table, tree=self._tree, **fields)

    @property
    def table(self) -> JobTable:
        if self._table is None:
            object.__setattr__(self, "_table", JobTable.from_jobs(tuple(self.jobs)))
        assert self._table is not None
        return self._table
