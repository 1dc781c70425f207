"""The snapshot JSON codec (docs/formats.md): JSON-ready data to the model and back.

Pure: no files. Reading and writing snapshot files is `model.snapshot_file`'s job.
"""

from __future__ import annotations

import math
import re
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from operator import itemgetter, methodcaller
from types import MappingProxyType
from typing import Any, Final

import numpy as np

from slurm_drf.errors import SnapshotError
from slurm_drf.model.account_tree import AccountTree, AssociationColumns, build_tree, describe_association
from slurm_drf.model.types import (
    EMPTY_TRES,
    MAX_ARRAY_TASKS,
    MAX_JOB_ID,
    MAX_PRIORITY,
    MAX_TRES,
    NICE_RANGE,
    SNAPSHOT_FORMAT,
    Association,
    Coded,
    FloatArray,
    IntArray,
    Job,
    JobColumns,
    JobTable,
    Node,
    Snapshot,
    Tres,
    job_number,
    label_codes,
)

# A job id any writer can use: a plain job number, no leading zero
# (docs/formats.md). Array (`123_4`) and het (`123+1`) ids are never written.
_JOB_ID: Final = re.compile(r"[1-9][0-9]{0,9}")

# Values in messages: a hostile one (a dict 1,000 deep, a megabyte of text)
# is shown cut short, never in full and never by a repr that recurses.
_SHOWN: Final = reprlib.Repr()
_SHOWN.maxlevel = 2
_SHOWN.maxstring = 60
_SHOWN.maxother = 60


def show(value: object) -> str:
    """repr() for messages, cut short."""
    try:
        return _SHOWN.repr(value)
    except ValueError:  # an int past Python's digit limit for str()
        return "an integer of thousands of digits"


def is_job_id(text: str) -> bool:
    """Whether `text` is a job id a writer can use: 1 to MAX_JOB_ID in plain digits."""
    return _JOB_ID.fullmatch(text) is not None and int(text) <= MAX_JOB_ID


def format_time(epoch: float) -> str:
    """ISO 8601 UTC with a Z, as the snapshot format writes times."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: object, where: str) -> float:
    """Seconds since the epoch from an ISO 8601 string or a number."""
    if isinstance(value, bool):
        raise SnapshotError(f"{where}: expected a time, got {show(value)}")
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
    raise SnapshotError(f"{where}: expected an ISO 8601 time such as 2026-11-30T01:00:00Z, got {show(value)}")


def _tres(value: object, where: str, limit: int = MAX_TRES) -> Tres:
    if not isinstance(value, Mapping):
        raise SnapshotError(f"{where}: expected an object of TRES amounts, got {show(value)}")
    out: dict[str, int] = {}
    for name, amount in value.items():
        if isinstance(amount, bool) or not isinstance(amount, int | float):
            raise SnapshotError(f"{where}.{name}: expected a number, got {show(amount)}")
        if amount < 0 or not math.isfinite(amount):
            raise SnapshotError(f"{where}.{name}: expected a number >= 0, got {show(amount)}")
        if amount != int(amount):
            raise SnapshotError(f"{where}.{name}: expected a whole number, got {show(amount)}")
        if amount > limit:
            raise SnapshotError(f"{where}.{name}: expected a number <= {limit}, got {show(amount)}")
        out[str(name)] = int(amount)
    return MappingProxyType(out)


def _with_gpu_total(tres: Tres) -> Tres:
    """Typed GPUs (`gres/gpu:a100`) without a `gres/gpu` total: the total is their sum, as in
    Slurm's own TRES strings (docs/formats.md), never 0."""
    if "gres/gpu" in tres or not any(name.startswith("gres/gpu:") for name in tres):
        return tres
    return MappingProxyType({**tres, "gres/gpu": sum(v for k, v in tres.items() if k.startswith("gres/gpu:"))})


def _table_with_gpu_total(table: JobTable) -> JobTable:
    """`_with_gpu_total` for every job of a table: where a job has typed GPUs and no total."""
    typed = [column for name, column in table.tres.items() if name.startswith("gres/gpu:")]
    if not typed:
        return table
    summed = np.sum(typed, axis=0)
    total = table.tres.get("gres/gpu")
    filled = summed if total is None else np.where(total == 0, summed, total)
    if total is not None and np.array_equal(filled, total):
        return table
    return replace(table, tres=MappingProxyType({**table.tres, "gres/gpu": filled}))


def _str(record: Mapping[str, Any], key: str, where: str, default: str | None = None, *, empty: bool = True) -> str:
    value = record.get(key, default)
    if value is None:
        raise SnapshotError(f"{where}: missing key '{key}'")
    if not isinstance(value, str):
        raise SnapshotError(f"{where}.{key}: expected a string, got {show(value)}")
    if not value and not empty:
        raise SnapshotError(f"{where}.{key}: expected a name, got ''")
    return value


def _job_id(record: Mapping[str, Any], where: str) -> str:
    value = record.get("job_id")
    if value is None:
        raise SnapshotError(f"{where}: missing key 'job_id'")
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    elif isinstance(value, str):
        text = value
    else:
        raise SnapshotError(f"{where}.job_id: expected a string, got {show(value)}")
    if not is_job_id(text):
        raise SnapshotError(f"{where}.job_id: expected a job number from 1 to {MAX_JOB_ID}, got {show(value)}")
    return text


def _int(
    record: Mapping[str, Any], key: str, where: str, low: int, high: int, default: int | None = None, why: str = ""
) -> int:
    """An integer from low to high; a float that is whole counts."""
    value = record.get(key, default)
    if value is None:
        if default is not None:
            return default
        raise SnapshotError(f"{where}: missing key '{key}'")
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
        raise SnapshotError(f"{where}.{key}: expected an integer, got {show(value)}")
    if value < low:
        raise SnapshotError(f"{where}.{key}: expected an integer >= {low}, got {show(value)}")
    if value > high:
        raise SnapshotError(f"{where}.{key}: expected an integer <= {high}{why}, got {show(value)}")
    return int(value)


def parse_node(record: object, index: int) -> Node:
    where = f"nodes[{index}]"
    if not isinstance(record, Mapping):
        raise SnapshotError(f"{where}: expected an object, got {show(record)}")
    name = _str(record, "name", where)
    where = f"node {name}"
    partitions = record.get("partitions", [])
    if not isinstance(partitions, list) or not all(isinstance(p, str) for p in partitions):
        raise SnapshotError(f"{where}.partitions: expected a list of partition names, got {show(partitions)}")
    return Node(
        name=name,
        partitions=tuple(partitions),
        state=_str(record, "state", where, "idle").lower(),
        tres=_with_gpu_total(_tres(record.get("tres", {}), f"{where}.tres")),
    )


def parse_job(record: object, index: int) -> Job:
    where = f"jobs[{index}]"
    if not isinstance(record, Mapping):
        raise SnapshotError(f"{where}: expected an object, got {show(record)}")
    job_id = _job_id(record, where)
    where = f"job {job_id}"
    held = record.get("held", False)
    if not isinstance(held, bool):
        raise SnapshotError(f"{where}.held: expected true or false, got {show(held)}")
    array_tasks = _int(record, "array_tasks", where, 1, MAX_ARRAY_TASKS, 1, " (the largest MaxArraySize)")
    site_factor = record.get("site_factor")
    if site_factor is not None:
        site_factor = _int(record, "site_factor", where, -NICE_RANGE, NICE_RANGE)
    priority = _int(record, "priority", where, 0, MAX_PRIORITY, 0)
    return Job(
        job_id=job_id,
        account=_str(record, "account", where, empty=False),
        user=_str(record, "user", where, ""),
        partition=_str(record, "partition", where, empty=False),
        state=_str(record, "state", where).upper(),
        priority=priority,
        nice=_int(record, "nice", where, -NICE_RANGE, NICE_RANGE, 0),
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
    weights = _object(data, "priority_weights")
    version = data.get("slurm_version")
    priority_type = data.get("priority_type")
    parsed_nodes = tuple(parse_node(n, i) for i, n in enumerate(nodes))
    check_nodes(parsed_nodes)
    table = parse_job_table(jobs)
    # In the order the keys were always checked in, so that a file with several faults names the same first.
    priority_weights = _tres(weights, "priority_weights", MAX_PRIORITY)  # Slurm's PriorityWeight* are 32-bit.
    het_leaders = _job_ids(data.get("het_leaders", []), "het_leaders")
    scheduler_parameters = _tres(_object(data, "scheduler_parameters"), "scheduler_parameters", MAX_PRIORITY)
    associations, tree = _association_tree(data.get("associations", []))
    return Snapshot.from_table(
        table,
        tree=tree,
        cluster=str(data.get("cluster", "")),
        taken_at=str(data.get("taken_at", "")),
        nodes=parsed_nodes,
        slurm_version=str(version) if version is not None else None,
        priority_weights=priority_weights,
        priority_type=str(priority_type) if priority_type is not None else None,
        het_leaders=het_leaders,
        scheduler_parameters=scheduler_parameters,
        associations=associations,
        controller_started=_text_or_none(data.get("controller_started"), "controller_started"),
    )


def _text_or_none(value: object, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 100:
        raise SnapshotError(f"{key}: expected a short string, got {show(value)}")
    return value


# RawShares are 32-bit unsigned in Slurm.
MAX_SHARES: Final = 2**32 - 1


def _association_name(record: Mapping[str, Any], key: str, where: str, *, optional: bool) -> str | None:
    value = record.get(key)
    if value is None:
        if optional:
            return None
        raise SnapshotError(f"{where}: missing key '{key}'")
    if not isinstance(value, str) or not value:
        null = " or null" if optional else ""
        raise SnapshotError(f"{where}.{key}: expected a name{null}, got {show(value)}")
    return value


def parse_association(record: object, index: int) -> Association:
    """One `associations` entry (docs/formats.md); the tree is checked by `parse_associations`."""
    where = f"associations[{index}]"
    if not isinstance(record, Mapping):
        raise SnapshotError(f"{where}: expected an object, got {show(record)}")
    account = _association_name(record, "account", where, optional=False)
    assert account is not None
    user = _association_name(record, "user", where, optional=True)
    where = describe_association(Association(account, None, user), index)
    parent = _association_name(record, "parent", where, optional=True)
    shares = record.get("shares")
    if shares is not None:
        shares = _int(record, "shares", where, 0, MAX_SHARES, why=" (RawShares are 32-bit)")
    # A user association's parent is its account, written or not.
    return Association(account, account if user is not None and parent is None else parent, user, shares)


def parse_associations(value: object) -> tuple[Association, ...]:
    """The snapshot's association tree, checked (`model.account_tree.build_tree`); [] is no tree."""
    return _association_tree(value)[0]


def _association_tree(value: object) -> tuple[tuple[Association, ...], AccountTree]:
    """`parse_associations`, and the tree it checked them with."""
    if not isinstance(value, list):
        raise SnapshotError(f"associations: expected a list, got {show(value)}")
    fast = _fast_associations(value)
    if fast is None:
        associations = tuple(parse_association(record, index) for index, record in enumerate(value))
        return associations, build_tree(associations)
    return fast[0], build_tree(*fast)


def _fast_associations(records: list[Any]) -> tuple[tuple[Association, ...], AssociationColumns] | None:
    """The associations `parse_association` makes of `records`, key by key over all of them, and
    their columns; None when any record needs the careful path (which then names the first bad one)."""
    if not _types(records) <= {dict}:
        return None
    accounts, parents, users, shares = (list(map(methodcaller("get", key), records)) for key in _ASSOCIATION_KEYS)
    names = {str, type(None)}
    if not (_types(accounts) <= {str} and _types(parents) <= names and _types(users) <= names):
        return None
    if "" in set(accounts) or "" in set(parents) or "" in set(users):
        return None
    # RawShares: an int in range or null (a whole float, a bool: the careful path).
    given = [value for value in shares if value is not None]
    if not _types(given) <= {int} or (given and (min(given) < 0 or max(given) > MAX_SHARES)):
        return None
    # A user association's parent is its account, written or not (as parse_association).
    parents = [
        account if user is not None and parent is None else parent
        for account, parent, user in zip(accounts, parents, users, strict=True)
    ]
    return tuple(map(Association, accounts, parents, users, shares)), AssociationColumns(
        accounts, parents, users, shares
    )


_ASSOCIATION_KEYS: Final = ("account", "parent", "user", "shares")


def render_association(association: Association) -> dict[str, Any]:
    return {
        "account": association.account,
        "parent": association.parent,
        "user": association.user,
        "shares": association.shares,
    }


def _object(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, Mapping):
        raise SnapshotError(f"{key}: expected an object")
    return value


def _job_ids(value: object, where: str) -> frozenset[str]:
    """A list of job ids; numbers are taken as job_id takes them."""
    if not isinstance(value, list) or not all(
        isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)) for v in value
    ):
        raise SnapshotError(f"{where}: expected a list of job ids, got {show(value)}")
    for index, item in enumerate(value):
        if not is_job_id(str(item)):
            raise SnapshotError(f"{where}[{index}]: expected a job number from 1 to {MAX_JOB_ID}, got {show(item)}")
    return frozenset(map(str, value))


def check_nodes(nodes: Iterable[Node]) -> None:
    """Refuse a node listed twice (its capacity would count twice) and TRES totals past MAX_TRES."""
    seen: dict[str, int] = {}
    totals: dict[str, int] = {}
    for index, node in enumerate(nodes):
        first = seen.setdefault(node.name, index)
        if first != index:
            raise SnapshotError(
                f"node {node.name}: listed twice (nodes[{first}] and nodes[{index}]); "
                "list a node once, with all its partitions"
            )
        for name, amount in node.tres.items():
            totals[name] = totals.get(name, 0) + amount
            if totals[name] > MAX_TRES:
                raise SnapshotError(f"node {node.name}.tres.{name}: the nodes' total {name} passes {MAX_TRES} here")


def check_job_table(table: JobTable) -> None:
    """Refuse a job listed twice (two plan rows for one job) and TRES totals past MAX_TRES.

    Both parser paths end here, and so can a snapshot read from Slurm.
    """
    numbers = table.job_number
    if len(numbers) > 1:
        ordered = np.sort(numbers)  # values alike whatever the sort: any kind finds the duplicates
        if (ordered[1:] == ordered[:-1]).any():
            _raise_duplicate(table.job_id)
    if not len(numbers):
        return
    tasks = table.array_tasks.astype(np.float64)
    for name, column in table.tres.items():
        # A float total is close enough to find the snapshots worth an exact look.
        if float(column.astype(np.float64) @ tasks) >= 2.0**62:
            _check_total(table, name, column)


def _raise_duplicate(job_ids: Sequence[str]) -> None:
    first: dict[str, int] = {}
    for index, job_id in enumerate(job_ids):
        seen = first.setdefault(job_id, index)
        if seen != index:
            raise SnapshotError(
                f"job {job_id}: listed twice (jobs[{seen}] and jobs[{index}]); a snapshot has one record per job"
            )


def _check_total(table: JobTable, name: str, column: IntArray) -> None:
    total = 0
    for index, (amount, tasks) in enumerate(zip(column.tolist(), table.array_tasks.tolist(), strict=True)):
        total += amount * tasks
        if total > MAX_TRES:
            raise SnapshotError(
                f"job {table.job_id[index]}.tres.{name}: the jobs' total {name} (array tasks counted) "
                f"passes {MAX_TRES} here"
            )


def parse_job_table(records: list[Any]) -> JobTable:
    """Job records straight into columns; the careful per-record parser
    (`parse_job`) runs only to name the first bad record, or for records
    that need conversions the fast path does not make."""
    try:
        table = _fast_job_table(records)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        table = None
    if table is None:
        table = JobTable.from_jobs([parse_job(record, i) for i, record in enumerate(records)])
    table = _table_with_gpu_total(table)
    check_job_table(table)
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


class _Records:
    """The job records, read a column (one key of every record) at a time.

    Each pass over 100,000 records costs (they are scattered in memory), so
    an optional key no record has is found with one pass for all such keys:
    when every record has as many keys as the keys every record was found to
    have, no record has another one.
    """

    def __init__(self, records: list[Any]) -> None:
        self.records = records
        self._everywhere: set[str] = set()
        self._sizes: set[int] | None = None

    def column(self, key: str) -> list[Any]:
        """records[*][key]; the default for a missing optional key, KeyError for a required one."""
        try:
            column = list(map(itemgetter(key), self.records))
        except KeyError:
            if key not in _JOB_DEFAULTS:
                raise
            if self._only_keys_found():
                return [_JOB_DEFAULTS[key]] * len(self.records)
            return list(map(methodcaller("get", key, _JOB_DEFAULTS[key]), self.records))
        self._everywhere.add(key)
        return column

    def _only_keys_found(self) -> bool:
        """Whether every record has exactly the keys found in every record so far."""
        if self._sizes is None:
            self._sizes = set(map(len, self.records))
        return self._sizes == {len(self._everywhere)}


def _fast_job_table(records: list[Any]) -> JobTable | None:  # noqa: C901
    """None when any record needs the careful path."""
    read = _Records(records)
    raw_ids = read.column("job_id")
    if not _types(raw_ids) <= {str}:
        if not _types(raw_ids) <= {str, int}:
            return None
        raw_ids = [str(v) for v in raw_ids]
    account = read.column("account")
    partition = read.column("partition")
    state = read.column("state")
    user = read.column("user")
    if not _types(user) <= {str}:
        return None
    # Encoded here, each in one pass (JobTable.build takes the codes): their
    # types and an empty name are then looked for among the distinct values
    # (a value that is not a str equals none that is, so it is one of them).
    accounts, partitions, states = label_codes(account), label_codes(partition), label_codes(state)
    if not (_types(accounts[1]) | _types(partitions[1]) | _types(states[1])) <= {str}:
        return None
    coded = {"account": accounts, "partition": partitions, "state": _upper_codes(states)}
    if "" in coded["account"][1] or "" in coded["partition"][1]:
        return None
    priority = _fast_ints(read.column("priority"), 0, MAX_PRIORITY)
    nice = _fast_ints(read.column("nice"), -NICE_RANGE, NICE_RANGE)
    # The keys snapshots always have, before the optional ones they may all lack (`_Records`).
    submit = _fast_times(read.column("submit_time"))
    tres_records = read.column("tres")
    tasks = _fast_ints(read.column("array_tasks"), 1, MAX_ARRAY_TASKS)
    if priority is None or nice is None or tasks is None:
        return None
    held = read.column("held")
    if not _types(held) <= {bool}:
        return None
    site_factor = read.column("site_factor")
    site_types = _types(site_factor)
    if not site_types <= {type(None), int}:
        return None
    if int in site_types and _fast_ints([v for v in site_factor if v is not None], -NICE_RANGE, NICE_RANGE) is None:
        return None
    if submit is None:
        return None
    if not _types(tres_records) <= {dict, MappingProxyType}:
        return None
    tres: dict[str, IntArray] = {}
    for name, values in _tres_values(tres_records).items():
        column = _fast_ints(values, 0, MAX_TRES)
        if column is None:
            return None
        tres[name] = column
    table = JobTable.build(
        JobColumns(raw_ids, account, user, partition, state, priority, nice, held, submit, tasks, site_factor, tres),
        coded,
    )
    return table if _fast_job_ids(table) else None


def _upper_codes(states: Coded) -> Coded:
    """`label_codes` of the states in upper case (Slurm's names of them), from their codes as written (`states`)."""
    codes, written = states
    upper_codes, upper = label_codes([text.upper() for text in written])
    merged: IntArray = upper_codes[codes]
    return merged, upper


def _tres_values(tres_records: list[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Each TRES name any record has, and its amount in every record (0 where a record has none)."""
    first = tres_records[0] if tres_records else {}
    # The usual case, every job with the same names (snapshots write cpu,
    # mem and gres/gpu for all): as many names each, all of them the first's.
    if set(map(len, tres_records)) <= {len(first)}:
        try:
            return {name: list(map(itemgetter(name), tres_records)) for name in first}
        except KeyError:
            pass
    names: dict[str, None] = {}
    for keys in set(map(tuple, tres_records)):
        names.update(dict.fromkeys(keys))
    return {name: [t.get(name, 0) for t in tres_records] for name in names}


def _fast_ints(values: list[Any], low: int, high: int) -> IntArray | None:
    """int64 of values that are all ints from low to high (never bools, which numpy would take as 0 and 1)."""
    column = np.array(values)
    if len(values) and (column.dtype.kind != "i" or not _types(values) <= {int}):
        return None
    if len(values) and (column.min() < low or column.max() > high):
        return None
    return column.astype(np.int64, copy=False)


def _fast_job_ids(table: JobTable) -> bool:
    """Whether every id is what `is_job_id` takes: ASCII digits, 1 to MAX_JOB_ID, no leading zero."""
    if not len(table):
        return True
    joined = "".join(table.job_id)
    numbers = table.job_number  # int() of each id; 0 when an id has no number
    if not (joined.isascii() and joined.isdigit()) or numbers.min() < 1 or numbers.max() > MAX_JOB_ID:
        return False
    # All digits: an id is as long as its number's digits exactly when it has
    # no leading zero, and never shorter, so the lengths add up only if none has.
    digits = np.searchsorted(_POWERS_OF_TEN, numbers, side="right") + 1
    return int(digits.sum()) == len(joined)


_POWERS_OF_TEN: Final = 10 ** np.arange(1, 19, dtype=np.int64)


def _fast_times(values: list[object]) -> FloatArray | None:
    """Epoch seconds of ISO 8601 'YYYY-MM-DDTHH:MM:SSZ' strings or numbers, vectorised."""
    kinds = _types(values)
    if kinds <= {int, float}:
        return np.array(values, dtype=np.float64)
    if not kinds <= {str}:
        return None
    texts: list[str] = values  # type: ignore[assignment]  # all str, checked above
    plain = _plain_stamps(texts)
    if plain is not None:
        return plain
    # Only the one shape snapshots are written in; others take the careful path.
    if not all(len(v) == 20 and v[-1] == "Z" for v in texts):
        return None
    stamps = np.array([v[:-1] for v in texts], dtype="datetime64[s]")
    return stamps.astype(np.int64).astype(np.float64)


# 'YYYY-MM-DDTHH:MM:SSZ': where the punctuation is, and the digits.
_STAMP_MARKS_AT: Final = np.array([4, 7, 10, 13, 16, 19])
_STAMP_MARKS: Final = np.frombuffer(b"--T::Z", dtype=np.uint8)
_STAMP_DIGITS_AT: Final = np.array([0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18])
_MONTH_DAYS: Final = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])


def _plain_stamps(texts: list[str]) -> FloatArray | None:
    """Epoch seconds of 'YYYY-MM-DDTHH:MM:SSZ' strings naming real UTC times, from their digits.

    The shape every snapshot is written in, read with integer arithmetic on
    one byte array instead of numpy's date parser over one string per job
    (a tenth of a second for 150,000 jobs). None when any text is not
    exactly that (another length or form, a day that does not exist, a leap
    second): the caller's slower parsers then decide, as before.
    """
    joined = "".join(texts)
    if not texts or len(joined) != 20 * len(texts) or not joined.isascii() or set(map(len, texts)) != {20}:
        return None
    chars = np.frombuffer(joined.encode("ascii"), dtype=np.uint8).reshape(-1, 20)
    if not (chars[:, _STAMP_MARKS_AT] == _STAMP_MARKS).all():
        return None
    digits = chars[:, _STAMP_DIGITS_AT].astype(np.int64) - ord("0")
    if ((digits < 0) | (digits > 9)).any():
        return None
    year = digits[:, 0] * 1000 + digits[:, 1] * 100 + digits[:, 2] * 10 + digits[:, 3]
    month, day, hour, minute, second = (digits[:, k] * 10 + digits[:, k + 1] for k in range(4, 14, 2))
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    last_day = _MONTH_DAYS[np.clip(month - 1, 0, 11)] + (leap & (month == 2))
    real = (year >= 1) & (month >= 1) & (month <= 12) & (day >= 1) & (day <= last_day)
    if not (real & (hour <= 23) & (minute <= 59) & (second <= 59)).all():
        return None
    # Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
    # days_from_civil), years counted from March so that leap days come last.
    march_year = year - (month <= 2)
    era = march_year // 400
    year_of_era = march_year - era * 400
    day_of_year = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    days = era * 146_097 + day_of_era - 719_468
    seconds: FloatArray = (days * 86_400 + hour * 3600 + minute * 60 + second).astype(np.float64)
    return seconds


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
    if snapshot.scheduler_parameters:
        out["scheduler_parameters"] = dict(snapshot.scheduler_parameters)
    if snapshot.controller_started is not None:
        out["controller_started"] = snapshot.controller_started
    if snapshot.het_leaders:
        out["het_leaders"] = sorted(snapshot.het_leaders, key=lambda job_id: (job_number(job_id), job_id))
    out["nodes"] = [
        {"name": n.name, "partitions": list(n.partitions), "state": n.state, "tres": dict(n.tres)}
        for n in snapshot.nodes
    ]
    out["jobs"] = [render_job(j) for j in snapshot.jobs]
    if snapshot.associations:
        out["associations"] = [render_association(a) for a in snapshot.associations]
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
