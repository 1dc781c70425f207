"""The snapshot JSON codec (docs/formats.md): JSON-ready data to the model and back.

Pure: no files. Reading and writing snapshot files is `model.snapshot_file`'s job.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from operator import itemgetter
from types import MappingProxyType
from typing import Any, Final

import numpy as np

from slurm_drf.errors import SnapshotError
from slurm_drf.model.types import (
    EMPTY_TRES,
    SNAPSHOT_FORMAT,
    FloatArray,
    IntArray,
    Job,
    JobTable,
    Node,
    Snapshot,
    Tres,
    job_number,
)


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
        het_leaders=_job_ids(data.get("het_leaders", []), "het_leaders"),
    )


def _job_ids(value: object, where: str) -> frozenset[str]:
    """A list of job ids; numbers are taken as job_id takes them."""
    if not isinstance(value, list) or not all(
        isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)) for v in value
    ):
        raise SnapshotError(f"{where}: expected a list of job ids, got {value!r}")
    return frozenset(map(str, value))


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


def _fast_job_table(records: list[Any]) -> JobTable | None:  # noqa: C901
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
    """The snapshot as JSON-ready data (docs/formats.md)."""
    out: dict[str, Any] = {
        "format": SNAPSHOT_FORMAT,
        "cluster": snapshot.cluster,
        "taken_at": snapshot.taken_at,
    }
    if snapshot.slurm_version is not None:
        out["slurm_version"] = snapshot.slurm_version
    if snapshot.priority_type is not None:
        out["priority_type"] = snapshot.priority_type
    if snapshot.priority_weights:
        out["priority_weights"] = dict(snapshot.priority_weights)
    if snapshot.het_leaders:
        out["het_leaders"] = sorted(snapshot.het_leaders, key=lambda job_id: (job_number(job_id), job_id))
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
