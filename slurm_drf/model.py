"""The data every other module speaks: TRES vectors, nodes, jobs, snapshots.

Sits at the bottom of the flow (cli -> daemon -> {slurm, drf, report} ->
model). Everything here is frozen and free of I/O except the two functions
that turn a snapshot into JSON-ready data and back (`parse_snapshot`,
`render_snapshot`); reading and writing the files is left to callers.

TRES names are Slurm's own (`cpu`, `mem` in MiB, `gres/gpu`,
`gres/gpu:a100`, `node`, `license/NAME`). Amounts are integers: Slurm counts
every TRES in whole units, and integer sums keep the engine exact.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import itemgetter
from types import MappingProxyType
from typing import Any, Final, overload

import numpy as np
import numpy.typing as npt

from slurm_drf.errors import SnapshotError

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
        """Whether the node's resources count as capacity (SPEC §2)."""
        return not any(part in INELIGIBLE_NODE_STATES for part in self.state.lower().split("+"))


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
    """The numeric part of a job id (array and het suffixes dropped)."""
    head = job_id.split("_", 1)[0].split("+", 1)[0]
    return int(head) if head.isdigit() else 0


def job_numbers(job_ids: Sequence[str]) -> IntArray:
    """`job_number` of every id; plain numeric ids (the usual case) in one numpy call."""
    try:
        numbers = np.fromiter(map(int, job_ids), dtype=np.int64, count=len(job_ids))
    except ValueError:  # array or het ids such as 1234_5
        return np.fromiter(map(job_number, job_ids), dtype=np.int64, count=len(job_ids))
    if len(numbers) and numbers.min() < 0:  # int() takes "-5"; job_number does not
        return np.fromiter(map(job_number, job_ids), dtype=np.int64, count=len(job_ids))
    return numbers


def _codes(values: Sequence[str]) -> tuple[IntArray, tuple[str, ...]]:
    """Dictionary encoding: an int code per value and the distinct values."""
    distinct = tuple(dict.fromkeys(values))
    index = {v: i for i, v in enumerate(distinct)}
    codes = np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))
    return codes, distinct


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

    def __len__(self) -> int:
        return len(self.job_id)

    def column(self, name: str) -> IntArray:
        """The TRES column `name`, zeros when no job has it."""
        found = self.tres.get(name)
        return found if found is not None else np.zeros(len(self), dtype=np.int64)

    def job(self, i: int) -> Job:
        tres = {name: int(col[i]) for name, col in self.tres.items() if col[i]}
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
            MappingProxyType(tres),
            self.site_factor[i],
        )

    @classmethod
    def build(
        cls,
        job_id: Sequence[str],
        account: Sequence[str],
        user: Sequence[str],
        partition: Sequence[str],
        state: Sequence[str],
        priority: Sequence[int] | IntArray,
        nice: Sequence[int] | IntArray,
        held: Sequence[bool] | BoolArray,
        submit_time: Sequence[float] | FloatArray,
        array_tasks: Sequence[int] | IntArray,
        site_factor: Sequence[int | None],
        tres: Mapping[str, IntArray],
    ) -> JobTable:
        account_codes, accounts = _codes(account)
        partition_codes, partitions = _codes(partition)
        state_codes, states = _codes(state)
        return cls(
            job_id,
            job_numbers(job_id),
            account_codes,
            accounts,
            user,
            partition_codes,
            partitions,
            state_codes,
            states,
            np.asarray(priority, dtype=np.int64),
            np.asarray(nice, dtype=np.int64),
            np.asarray(held, dtype=np.bool_),
            np.asarray(submit_time, dtype=np.float64),
            np.asarray(array_tasks, dtype=np.int64),
            site_factor,
            tres,
        )

    @classmethod
    def from_jobs(cls, jobs: Sequence[Job]) -> JobTable:
        names: dict[str, None] = {}
        for job in jobs:
            names.update(dict.fromkeys(job.tres))
        tres = {
            name: np.fromiter((j.tres.get(name, 0) for j in jobs), dtype=np.int64, count=len(jobs)) for name in names
        }
        return cls.build(
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


class LazyJobs(Sequence[Job]):
    """A snapshot's jobs made into Job objects only when somebody asks."""

    __slots__ = ("_jobs", "_table")

    def __init__(self, table: JobTable) -> None:
        self._table = table
        self._jobs: tuple[Job, ...] | None = None

    def _all(self) -> tuple[Job, ...]:
        if self._jobs is None:
            self._jobs = tuple(self._table.job(i) for i in range(len(self._table)))
        return self._jobs

    def __len__(self) -> int:
        return len(self._table)

    @overload
    def __getitem__(self, index: int) -> Job: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Job]: ...
    def __getitem__(self, index: int | slice) -> Job | Sequence[Job]:
        return self._all()[index]

    def __iter__(self) -> Iterator[Job]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What was read from Slurm at one moment.

    `table` holds the same jobs as columns; it is built from `jobs` on
    first use, or given directly by the fast snapshot-file parser.
    """

    cluster: str
    taken_at: str
    nodes: tuple[Node, ...]
    jobs: Sequence[Job]
    slurm_version: str | None = None
    priority_weights: Mapping[str, int] = field(default_factory=lambda: EMPTY_TRES)
    priority_type: str | None = None
    # Derived from `jobs`; init=False so dataclasses.replace(jobs=...) never
    # carries a stale table over.
    _table: JobTable | None = field(default=None, init=False, compare=False, repr=False)

    @classmethod
    def from_table(cls, table: JobTable, **fields: Any) -> Snapshot:
        """A snapshot whose jobs are the table's (made into Job objects lazily)."""
        snapshot = cls(jobs=LazyJobs(table), **fields)
        object.__setattr__(snapshot, "_table", table)
        return snapshot

    @property
    def table(self) -> JobTable:
        if self._table is None:
            object.__setattr__(self, "_table", JobTable.from_jobs(tuple(self.jobs)))
        assert self._table is not None
        return self._table


# --------------------------------------------------------------------------
# Snapshot JSON <-> model


def format_time(epoch: float) -> str:
    """ISO 8601 UTC with a Z, as the snapshot format writes times."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: object, where: str) -> float:
    """Seconds since the epoch from an ISO 8601 string or a number."""
    if isinstance(value, bool):
        raise SnapshotError(f"{where}: expected a time, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            return parsed.timestamp()
    raise SnapshotError(f"{where}: expected an ISO 8601 time such as 2026-11-30T01:00:00Z, got {value!r}")


def _tres(value: object, where: str) -> Tres:
    if not isinstance(value, Mapping):
        raise SnapshotError(f"{where}: expected an object of TRES amounts, got {value!r}")
    out: dict[str, int] = {}
    for name, amount in value.items():
        if isinstance(amount, bool) or not isinstance(amount, int | float):
            raise SnapshotError(f"{where}.{name}: expected a number, got {amount!r}")
        if amount < 0 or not math.isfinite(amount):
            raise SnapshotError(f"{where}.{name}: expected a number >= 0, got {amount!r}")
        if amount != int(amount):
            raise SnapshotError(f"{where}.{name}: expected a whole number, got {amount!r}")
        out[str(name)] = int(amount)
    return MappingProxyType(out)


def _str(record: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = record.get(key, default)
    if value is None:
        raise SnapshotError(f"{where}: missing key '{key}'")
    if isinstance(value, int) and not isinstance(value, bool) and key == "job_id":
        return str(value)
    if not isinstance(value, str):
        raise SnapshotError(f"{where}.{key}: expected a string, got {value!r}")
    return value


def _int(record: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = record.get(key, default)
    if value is None:
        if default is not None:
            return default
        raise SnapshotError(f"{where}: missing key '{key}'")
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise SnapshotError(f"{where}.{key}: expected an integer, got {value!r}")
    return value


def parse_node(record: object, index: int) -> Node:
    where = f"nodes[{index}]"
    if not isinstance(record, Mapping):
        raise SnapshotError(f"{where}: expected an object, got {record!r}")
    name = _str(record, "name", where)
    where = f"node {name}"
    partitions = record.get("partitions", [])
    if not isinstance(partitions, list) or not all(isinstance(p, str) for p in partitions):
        raise SnapshotError(f"{where}.partitions: expected a list of partition names, got {partitions!r}")
    return Node(
        name=name,
        partitions=tuple(partitions),
        state=_str(record, "state", where, "idle").lower(),
        tres=_tres(record.get("tres"), f"{where}.tres"),
    )


def parse_job(record: object, index: int) -> Job:
    where = f"jobs[{index}]"
    if not isinstance(record, Mapping):
        raise SnapshotError(f"{where}: expected an object, got {record!r}")
    job_id = _str(record, "job_id", where)
    where = f"job {job_id}"
    held = record.get("held", False)
    if not isinstance(held, bool):
        raise SnapshotError(f"{where}.held: expected true or false, got {held!r}")
    array_tasks = _int(record, "array_tasks", where, 1)
    if array_tasks < 1:
        raise SnapshotError(f"{where}.array_tasks: expected an integer >= 1, got {array_tasks!r}")
    site_factor = record.get("site_factor")
    if site_factor is not None:
        site_factor = _int(record, "site_factor", where)
    priority = _int(record, "priority", where, 0)
    return Job(
        job_id=job_id,
        account=_str(record, "account", where),
        user=_str(record, "user", where, ""),
        partition=_str(record, "partition", where),
        state=_str(record, "state", where).upper(),
        priority=priority,
        nice=_int(record, "nice", where, 0),
        held=held,
        submit_time=parse_time(record.get("submit_time", 0), f"{where}.submit_time"),
        array_tasks=array_tasks,
        tres=_tres(record.get("tres", {}), f"{where}.tres"),
        site_factor=site_factor,
    )


def parse_snapshot(data: object) -> Snapshot:
    """A Snapshot from decoded snapshot JSON; SnapshotError names job/node and key."""
    if not isinstance(data, Mapping):
        raise SnapshotError("expected a JSON object at the top level")
    fmt = data.get("format")
    if fmt != SNAPSHOT_FORMAT:
        raise SnapshotError(f"format: expected '{SNAPSHOT_FORMAT}', got {fmt!r}")
    nodes = data.get("nodes")
    jobs = data.get("jobs")
    if not isinstance(nodes, list):
        raise SnapshotError(f"nodes: expected a list, got {type(nodes).__name__}")
    if not isinstance(jobs, list):
        raise SnapshotError(f"jobs: expected a list, got {type(jobs).__name__}")
    weights = data.get("priority_weights", {})
    if not isinstance(weights, Mapping):
        raise SnapshotError("priority_weights: expected an object")
    version = data.get("slurm_version")
    priority_type = data.get("priority_type")
    return Snapshot.from_table(
        parse_job_table(jobs),
        cluster=str(data.get("cluster", "")),
        taken_at=str(data.get("taken_at", "")),
        nodes=tuple(parse_node(n, i) for i, n in enumerate(nodes)),
        slurm_version=str(version) if version is not None else None,
        priority_weights=_tres(weights, "priority_weights"),
        priority_type=str(priority_type) if priority_type is not None else None,
    )


def parse_job_table(records: list[Any]) -> JobTable:
    """Job records straight into columns; the careful per-record parser
    (`parse_job`) runs only to name the first bad record, or for records
    that need conversions the fast path does not make."""
    try:
        table = _fast_job_table(records)
    except (KeyError, TypeError, ValueError, AttributeError):
        table = None
    if table is None:
        return JobTable.from_jobs([parse_job(record, i) for i, record in enumerate(records)])
    return table


def _types(values: Iterable[object]) -> set[type]:
    return set(map(type, values))


_JOB_DEFAULTS: Final[Mapping[str, object]] = MappingProxyType(
    {
        "user": "",
        "priority": 0,
        "nice": 0,
        "held": False,
        "submit_time": 0,
        "array_tasks": 1,
        "site_factor": None,
        "tres": EMPTY_TRES,
    }
)


def _column(records: list[Any], key: str) -> list[Any]:
    """records[*][key]; the default for a missing optional key, KeyError for a required one."""
    try:
        return list(map(itemgetter(key), records))
    except KeyError:
        if key not in _JOB_DEFAULTS:
            raise
        default = _JOB_DEFAULTS[key]
        return [r.get(key, default) for r in records]


def _fast_job_table(records: list[Any]) -> JobTable | None:
    """None when any record needs the careful path."""
    raw_ids = _column(records, "job_id")
    if not _types(raw_ids) <= {str}:
        if not _types(raw_ids) <= {str, int}:
            return None
        raw_ids = [str(v) for v in raw_ids]
    account = _column(records, "account")
    partition = _column(records, "partition")
    state = _column(records, "state")
    user = _column(records, "user")
    if not (_types(account) | _types(partition) | _types(state) | _types(user)) <= {str}:
        return None
    if "" in set(account) or "" in set(partition):
        return None
    priority = np.array(_column(records, "priority"))
    nice = np.array(_column(records, "nice"))
    tasks = np.array(_column(records, "array_tasks"))
    held = _column(records, "held")
    if records and not (priority.dtype.kind == nice.dtype.kind == tasks.dtype.kind == "i"):
        return None
    if not _types(held) <= {bool} or (len(tasks) and tasks.min() < 1):
        return None
    site_factor = _column(records, "site_factor")
    if not _types(site_factor) <= {type(None), int}:
        return None
    submit = _fast_times(_column(records, "submit_time"))
    if submit is None:
        return None
    tres_records = _column(records, "tres")
    if not _types(tres_records) <= {dict, MappingProxyType}:
        return None
    names: dict[str, None] = {}
    for keys in set(map(tuple, tres_records)):
        names.update(dict.fromkeys(keys))
    tres: dict[str, IntArray] = {}
    for name in names:
        try:
            values = list(map(itemgetter(name), tres_records))
        except KeyError:
            values = [t.get(name, 0) for t in tres_records]
        column = np.array(values)
        if column.dtype.kind != "i" or (len(column) and column.min() < 0):
            return None
        tres[name] = column.astype(np.int64, copy=False)
    state_upper = {text: text.upper() for text in set(state)}
    return JobTable.build(
        raw_ids,
        account,
        user,
        partition,
        [state_upper[t] for t in state],
        priority,
        nice,
        held,
        submit,
        tasks,
        site_factor,
        tres,
    )


def _fast_times(values: list[object]) -> FloatArray | None:
    """Epoch seconds of ISO 8601 'YYYY-MM-DDTHH:MM:SSZ' strings or numbers, vectorised."""
    kinds = _types(values)
    if kinds <= {int, float}:
        return np.array(values, dtype=np.float64)
    if not kinds <= {str}:
        return None
    texts: list[str] = values  # type: ignore[assignment]  # all str, checked above
    # Only the one shape snapshots are written in; others take the careful path.
    if not all(len(v) == 20 and v[-1] == "Z" for v in texts):
        return None
    stamps = np.array([v[:-1] for v in texts], dtype="datetime64[s]")
    return stamps.astype(np.int64).astype(np.float64)


def render_snapshot(snapshot: Snapshot) -> dict[str, Any]:
    """The snapshot as JSON-ready data (SPEC §3)."""
    out: dict[str, Any] = {
        "format": SNAPSHOT_FORMAT,
        "cluster": snapshot.cluster,
        "taken_at": snapshot.taken_at,
    }
    if snapshot.slurm_version is not None:
        out["slurm_version"] = snapshot.slurm_version
    if snapshot.priority_weights:
        out["priority_weights"] = dict(snapshot.priority_weights)
    out["nodes"] = [
        {"name": n.name, "partitions": list(n.partitions), "state": n.state, "tres": dict(n.tres)}
        for n in snapshot.nodes
    ]
    out["jobs"] = [render_job(j) for j in snapshot.jobs]
    return out


def render_job(job: Job) -> dict[str, Any]:
    out: dict[str, Any] = {
        "job_id": job.job_id,
        "account": job.account,
        "user": job.user,
        "partition": job.partition,
        "state": job.state,
        "priority": job.priority,
        "nice": job.nice,
        "held": job.held,
        "submit_time": format_time(job.submit_time),
        "array_tasks": job.array_tasks,
        "tres": dict(job.tres),
    }
    if job.site_factor is not None:
        out["site_factor"] = job.site_factor
    return out


def sum_tres(vectors: Iterable[Tres]) -> dict[str, int]:
    total: dict[str, int] = {}
    for vector in vectors:
        for name, amount in vector.items():
            total[name] = total.get(name, 0) + amount
    return total
