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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Final

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
    {"down", "drain", "drained", "draining", "fail", "failing", "future",
     "powered_down", "power_down", "powering_down", "powering_up",
     "inval", "invalid", "maint", "reboot_issued", "not_responding",
     "unknown"}
)

Tres = Mapping[str, int]
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


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What was read from Slurm at one moment."""

    cluster: str
    taken_at: str
    nodes: tuple[Node, ...]
    jobs: tuple[Job, ...]
    slurm_version: str | None = None
    priority_weights: Mapping[str, int] = field(default_factory=lambda: EMPTY_TRES)


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
    return Snapshot(
        cluster=str(data.get("cluster", "")),
        taken_at=str(data.get("taken_at", "")),
        nodes=tuple(parse_node(n, i) for i, n in enumerate(nodes)),
        jobs=tuple(parse_job(j, i) for i, j in enumerate(jobs)),
        slurm_version=str(version) if version is not None else None,
        priority_weights=_tres(weights, "priority_weights"),
    )


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
