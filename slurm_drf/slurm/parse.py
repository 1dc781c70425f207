"""Slurm's JSON and text output -> the model (Node, Job), with no I/O.

Sits between the command runner and the snapshot: cli.py runs `squeue
--json`, `sinfo --json` / `scontrol show nodes --json` and `scontrol show
config`, decodes the JSON, and hands the data to the functions below, which
return model objects. Everything here is pure; a test can feed it canned
output captured from any Slurm release.

Formats covered (field names checked against Slurm's own source, see
tests/fixtures/README.md):

- 22.05, openapi/v0.0.38 (`src/plugins/openapi/v0.0.38/jobs.c`, `nodes.c`):
  plain numbers, null when unset (`nice` null when 0), `job_state` a string,
  node `state` a lower-case string plus a `state_flags` list, GRES in
  `tres_per_*` written `gres:gpu:4`.
- 23.02, data_parser/v0.0.39: numbers that can be unset are
  `{"set": bool, "infinite": bool, "number": N}`; times are plain.
- 23.11, v0.0.40: `job_state` is a list (`["RUNNING", "COMPLETING"]`),
  times are wrapped too, `tres_per_*` read `gres/gpu:2`.
- 24.05 to 25.11, v0.0.41 to v0.0.44: the same field names; the
  "complex" mode (`--json=v0.0.41+complex`) writes plain numbers, null for
  unset and "Infinity" for infinite, null for empty strings.
- Nodes: 22.05 `sinfo --json` and 23.02+ `scontrol show nodes --json` give
  one record per node under `nodes`; 23.02+ `sinfo --json` groups nodes
  under `sinfo` records (also understood, as a fallback).

A job or node record that cannot be understood is skipped with a warning
naming it; it never stops the others from being read.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from slurm_drf.errors import SlurmReadError, SnapshotError, shorten
from slurm_drf.model.codec import check_job_table, check_nodes
from slurm_drf.model.tree import build_tree
from slurm_drf.model.types import (
    HOLDING_STATES,
    MAX_TRES,
    PENDING,
    Association,
    Job,
    Node,
    Snapshot,
    Tres,
    freeze_tres,
)

logger = logging.getLogger(__name__)

# Slurm's INFINITE (uint32); a priority reported as infinite reads as this.
INFINITE_PRIORITY: Final = 2**32 - 1

# Binary unit suffixes as Slurm prints them; TRES memory is counted in MiB.
_MIB_PER_SUFFIX: Final[Mapping[str, float]] = {
    "K": 1 / 1024,
    "M": 1,
    "G": 1024,
    "T": 1024**2,
    "P": 1024**3,
}
# GRES counts may carry the same suffixes as plain multipliers (gres.c).
_COUNT_PER_SUFFIX: Final[Mapping[str, int]] = {
    "K": 1024,
    "M": 1024**2,
    "G": 1024**3,
    "T": 1024**4,
    "P": 1024**5,
}
# ASCII digits only: Slurm prints no others, and int() would read any script's.
_AMOUNT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGTP]?)\s*$", re.IGNORECASE | re.ASCII)
# An amount with more digits before the point is past MAX_TRES (19 digits) even
# in KiB; it is refused before int() or float() sees it (a float of 400 digits
# is infinite, an int of 5000 past Python's digit limit).
_MAX_AMOUNT_DIGITS: Final = 24

# Base job states (job_state_string() in src/common/slurm_protocol_defs.c).
_BASE_JOB_STATES: Final = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)
# Before 23.11 job_state is one word and a state flag wins over the base
# state. These flags only occur on jobs that hold their allocation, so they
# read as RUNNING; COMPLETING stays itself (the model counts it as holding).
_FLAG_ONLY_HOLDING: Final[Mapping[str, str]] = {
    "CONFIGURING": "RUNNING",
    "RESIZING": "RUNNING",
    "STOPPED": "RUNNING",
}

# `tres_per_*` entries that are not generic resources (23.11+ tres_per_task
# holds `cpu:4`; licenses are counted by Slurm apart from GRES).
_NOT_GRES_PREFIXES: Final = ("cpu", "mem", "node", "billing", "license", "energy", "fs/", "bb/", "vmem")


# --------------------------------------------------------------------------
# Numbers in any of Slurm's spellings


def parse_number(value: object) -> int | float | None:
    """A number from Slurm's JSON: None when unset, math.inf when infinite.

    Accepts a plain number, 23.02+'s `{"set", "infinite", "number"}` wrapper,
    and the complex mode's "Infinity"; raises ValueError for anything else.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    if isinstance(value, int | float):
        return value
    if isinstance(value, Mapping):
        if value.get("infinite") is True:
            return math.inf
        if value.get("set") is False:
            return None
        return parse_number(value.get("number"))
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("infinity", "infinite", "unlimited"):
            return math.inf
        try:
            return int(text)
        except ValueError:
            pass
    raise ValueError(f"expected a number, got {value!r}")


def _whole(value: object, key: str) -> int | None:
    """A finite whole number >= 0, or None when unset or infinite."""
    number = parse_number(value)
    if number is None or number == math.inf:
        return None
    if number < 0 or not math.isfinite(number):
        raise ValueError(f"{key}: expected a number >= 0, got {value!r}")
    return round(number)


def _text(value: object, key: str) -> str:
    """A string field; null (complex mode, unset) reads as ''."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{key}: expected a string, got {value!r}")
    return value


# --------------------------------------------------------------------------
# TRES and GRES strings


def _split_top_level(text: str) -> Iterator[str]:
    """Comma-separated items, ignoring commas inside parentheses (IDX:0,2)."""
    depth = 0
    start = 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            yield text[start:index]
            start = index + 1
    yield text[start:]


def _strip_parentheses(text: str) -> str:
    out: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(char)
    return "".join(out)


def _memory_amount(text: str) -> int | None:
    """MiB from `8192`, `8G`, `1.50G`, `512K`, exactly (halves to even); None when not a number.

    ValueError for a number of more digits than any amount up to MAX_TRES
    has; a smaller one past MAX_TRES is returned for the caller to refuse.
    """
    match = _AMOUNT.match(text)
    if match is None:
        return None
    digits, suffix = match.group(1), match.group(2).upper() or "M"
    _check_digits(digits, text)
    if "." not in digits and suffix != "K":
        return int(digits) * int(_MIB_PER_SUFFIX[suffix])
    return round(Fraction(digits) * Fraction(_MIB_PER_SUFFIX[suffix]))


def _count_amount(text: str) -> int | None:
    """A count from `4`, `2k`; None when not a whole number; ValueError as `_memory_amount`."""
    match = _AMOUNT.match(text)
    if match is None or "." in match.group(1):
        return None
    _check_digits(match.group(1), text)
    suffix = match.group(2).upper()
    return int(match.group(1)) * (_COUNT_PER_SUFFIX[suffix] if suffix else 1)


def _check_digits(digits: str, text: str) -> None:
    if len(digits.partition(".")[0].lstrip("0")) > _MAX_AMOUNT_DIGITS:
        raise ValueError(f"{shorten(text.strip(), 40)} is past {MAX_TRES}")


def _is_untyped_gres(key: str) -> bool:
    return key.startswith("gres/") and ":" not in key


def _combine_gres(untyped: Mapping[str, int], typed: Mapping[tuple[str, str], int]) -> dict[str, int]:
    """GRES TRES keys without double counting typed and untyped amounts.

    When a name appears untyped, that amount is its total; when only typed
    entries appear, the total is their sum.
    """
    out: dict[str, int] = {}
    names = list(dict.fromkeys([*untyped, *(name for name, _ in typed)]))
    for name in names:
        if name in untyped:
            out[f"gres/{name}"] = untyped[name]
        else:
            out[f"gres/{name}"] = sum(count for (n, _), count in typed.items() if n == name)
    for (name, gres_type), count in typed.items():
        out[f"gres/{name}:{gres_type}"] = count
    return out


# A queue of 50,000 jobs holds a few dozen distinct TRES and GRES strings: the
# pure string parsers below are cached (their dicts copied out, so a caller may
# change its own), which halves the time of reading such a queue. A string
# that raises is not cached: each job that has it is named in its own warning.
_PARSE_CACHE_SIZE: Final = 4096


def _parse_tres_entries(text: str, field: str | None = None) -> tuple[dict[str, int], frozenset[str]]:
    """`_tres_entries`, from a cache: a dict of the caller's own."""
    tres, explicit = _tres_entries(text, field)
    return dict(tres), explicit


@functools.lru_cache(maxsize=_PARSE_CACHE_SIZE)
def _tres_entries(text: str, field: str | None) -> tuple[Mapping[str, int], frozenset[str]]:
    """TRES amounts and the set of untyped GRES keys the string itself wrote.

    With `field` (a job's TRES string, named so) an entry whose value is no
    amount from 0 to MAX_TRES (negative, an unknown unit, not a number, 400
    digits) is a ValueError naming the field and the entry: the job's
    record is not what Slurm prints, and counting it without that resource
    would be wrong. Without it (nodes, sacct) such entries are left out.
    """
    plain: dict[str, int] = {}
    untyped: dict[str, int] = {}
    typed: dict[tuple[str, str], int] = {}
    for item in text.split(","):
        name, sep, raw = item.strip().rpartition("=")
        name = name.strip()
        if not sep or not name:
            continue
        try:
            amount = _memory_amount(raw)
        except ValueError:
            if field is None:
                raise
            amount = None
        if field is not None and (amount is None or amount > MAX_TRES):
            raise ValueError(
                f"{field}: {shorten(name, 40)}={shorten(raw.strip(), 40)} is not an amount from 0 to {MAX_TRES}"
            )
        if amount is None:
            continue  # only numeric resource entries count
        if name.startswith("gres/"):
            gres_name, _, gres_type = name[len("gres/") :].partition(":")
            if gres_type:
                typed[(gres_name, gres_type)] = amount
            else:
                untyped[gres_name] = amount
        else:
            plain[name] = amount
    explicit = frozenset(f"gres/{name}" for name in untyped)
    return MappingProxyType({**plain, **_combine_gres(untyped, typed)}), explicit


def parse_tres_string(text: str | None) -> dict[str, int]:
    """`cpu=2,mem=8G,node=1,billing=2,gres/gpu=2` -> {"cpu": 2, "mem": 8192, ...}.

    Memory (and any amount with a K/M/G/T/P suffix) is in MiB; entries that
    are not numbers are left out. A GPU type counted without its untyped
    total (`gres/gpu:a100=2` alone) also gives `gres/gpu` as the sum.
    """
    return _parse_tres_entries(text or "")[0]


def _parse_gres_items(text: str, skip_prefixes: tuple[str, ...] = ()) -> dict[str, int]:
    """`_gres_items`, from a cache (see `_PARSE_CACHE_SIZE`): a dict of the caller's own."""
    return dict(_gres_items(text, skip_prefixes)) if text else {}


@functools.lru_cache(maxsize=_PARSE_CACHE_SIZE)
def _gres_items(text: str, skip_prefixes: tuple[str, ...]) -> Mapping[str, int]:
    untyped: dict[str, int] = {}
    typed: dict[tuple[str, str], int] = {}
    for raw_item in _split_top_level(text):
        item = _strip_parentheses(raw_item).strip()
        if not item or item.lower() in ("(null)", "n/a", "none"):
            continue
        lowered = item.lower()
        if lowered.startswith(("gres:", "gres/")):
            item = item[len("gres:") :]
        elif skip_prefixes and lowered.startswith(skip_prefixes):
            continue
        count: int | None
        if "=" in item:  # TRES spelling gres/gpu=2 or gres/gpu:a100=2
            head, _, tail = item.rpartition("=")
            parts = [p for p in head.split(":") if p]
            count = _count_amount(tail)
        else:
            parts = [p for p in item.split(":") if p]
            count = _count_amount(parts[-1]) if len(parts) > 1 else None
            if count is not None:
                parts = parts[:-1]
            else:
                count = 1  # a GRES named without a count is one of it
        parts = [p for p in parts if p.lower() != "no_consume"]
        if count is None or not parts or len(parts) > 2:
            raise ValueError(f"cannot read GRES {raw_item.strip()!r}")
        name = parts[0]
        types = parts[1:]
        if types:
            key = (name, types[0])
            typed[key] = typed.get(key, 0) + count
        else:
            untyped[name] = untyped.get(name, 0) + count
    return MappingProxyType(_combine_gres(untyped, typed))


def parse_gres(text: str | None) -> dict[str, int]:
    """A GRES string as TRES amounts, never counting a GPU twice.

    Reads node GRES (`gpu:a100:4(S:0-1)`, `gpu:8(IDX:0-7)`), job GRES
    (`gres:gpu:4`, `gres/gpu:2`, `gres/gpu:a100:2`) and comma lists of
    them: `gpu:a100:4(S:0-1),gpu:v100:2` -> {"gres/gpu": 6,
    "gres/gpu:a100": 4, "gres/gpu:v100": 2}. Raises ValueError for an item
    it cannot read.
    """
    return _parse_gres_items(text or "")


def parse_tres_per(text: str | None) -> dict[str, int]:
    """The GRES in a `tres_per_job/node/task/socket` string, as TRES amounts.

    23.11+ also puts `cpu:4` (cpus per task) and licenses there; those are
    not GRES and are left out.
    """
    return _parse_gres_items(text or "", skip_prefixes=_NOT_GRES_PREFIXES)


def _lenient(parse: Callable[[str | None], dict[str, int]], text: str, what: str) -> dict[str, int]:
    """GRES amounts, or none with a warning: an odd GRES string must not hide
    the rest of a node or job (its CPUs and memory still count)."""
    try:
        return parse(text)
    except ValueError as error:
        _WARNED.count += 1
        logger.warning("%s: %s; its GRES are not counted", what, error)
        return {}


def _gres_names(tres: Mapping[str, int]) -> set[str]:
    return {key[len("gres/") :].split(":", 1)[0] for key in tres if key.startswith("gres/")}


def _merge_gres(tres: dict[str, int], explicit: frozenset[str], extra: Mapping[str, int]) -> None:
    """Add GRES amounts the TRES string lacks; an untyped total it wrote wins."""
    for key, amount in extra.items():
        if key not in tres:
            tres[key] = amount
        elif _is_untyped_gres(key) and key not in explicit:
            # The total was only the sum of the types Slurm accounts for.
            tres[key] = max(tres[key], amount)


# --------------------------------------------------------------------------
# Job arrays


class ArrayTasks(NamedTuple):
    """What a pending array record's `array_task_string` says."""

    tasks: int
    throttle: int | None
    truncated: bool


def parse_array_task_string(text: str) -> ArrayTasks:
    """`0-9`, `0-99%4`, `1,3,5-7`, `0-15:4` -> the number of tasks.

    A `%N` throttle limits how many run at once, not how many are pending,
    so it does not reduce the count. Slurm shortens long strings to 64
    characters ending in `...` unless SLURM_BITSTR_LEN=0 is set; then the
    count is a lower bound and `truncated` is true. Raises ValueError for
    text that is not a task list.
    """
    body = text.strip()
    throttle: int | None = None
    if "%" in body:
        body, _, limit = body.rpartition("%")
        if not limit.strip().isdigit():
            raise ValueError(f"bad array throttle in {text!r}")
        throttle = int(limit)
    body = body.strip().strip("[]")
    truncated = "..." in body
    if truncated:
        body = body.split("...", 1)[0]
    items = [item.strip() for item in body.split(",")]
    partial = items.pop() if truncated else None
    count = 0
    for item in items:
        match = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", item)
        if match is None:
            raise ValueError(f"bad array task list {text!r}")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        step = int(match.group(3)) if match.group(3) is not None else 1
        if last < first or step < 1:
            raise ValueError(f"bad array task range {item!r} in {text!r}")
        count += (last - first) // step + 1
    if partial:
        count += 1  # the cut-off item names at least one task
    if count < 1:
        raise ValueError(f"no array tasks in {text!r}")
    return ArrayTasks(count, throttle, truncated)


# --------------------------------------------------------------------------
# Jobs


def parse_job_state(value: object) -> str:
    """Slurm's base state in upper case from a string (<= 23.02) or a list.

    COMPLETING wins over the base state, as job_state_string() does, because
    a completing job still holds its nodes.
    """
    if isinstance(value, str):
        state = value.strip().upper()
        if not state:
            raise ValueError("empty job_state")
        return _FLAG_ONLY_HOLDING.get(state, state)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        states: list[str] = [str(v).strip().upper() for v in value]
        if "COMPLETING" in states:
            return "COMPLETING"
        base = next((s for s in states if s in _BASE_JOB_STATES), None)
        if base is not None:
            return base
        return _FLAG_ONLY_HOLDING.get(states[0], states[0])
    raise ValueError(f"job_state: expected a state or a list of states, got {value!r}")


def _job_label(record: object) -> str:
    if isinstance(record, Mapping):
        job_id = record.get("job_id")
        if isinstance(job_id, int | str) and not isinstance(job_id, bool):
            return str(job_id)
    return "?"


def _positive(record: Mapping[str, Any], key: str) -> int | None:
    value = _whole(record.get(key), key)
    return value if value else None


def _job_gres(record: Mapping[str, Any], nodes: int, tasks: int, holding: bool) -> dict[str, int]:  # noqa: C901
    """GRES the job asks for (or holds), from the fields beside the TRES string.

    A running job's `gres_detail` (one entry per allocated node; filled when
    squeue asks for details, as 22.05 does) is what it holds. Otherwise
    `tres_per_job` is the whole job, `tres_per_node` counts per node,
    `tres_per_task` per task, `tres_per_socket` per socket; for each GRES
    name the first of these that mentions it decides.
    """
    label = f"job {_job_label(record)}"
    if holding:
        detail = record.get("gres_detail")
        if isinstance(detail, list) and detail and all(isinstance(d, str) for d in detail):
            total: dict[str, int] = {}
            for entry in detail:
                for key, amount in _lenient(parse_gres, entry, f"{label} gres_detail").items():
                    total[key] = total.get(key, 0) + amount
            if total:
                return total
    sockets_per_node = _positive(record, "sockets_per_node")
    sources: list[tuple[str, int | None]] = [
        ("tres_per_job", 1),
        ("tres_per_node", nodes),
        ("tres_per_task", tasks),
        ("tres_per_socket", sockets_per_node * nodes if sockets_per_node else None),
    ]
    out: dict[str, int] = {}
    covered: set[str] = set()
    for key, factor in sources:
        per = _lenient(parse_tres_per, _text(record.get(key), key), f"{label} {key}")
        names = _gres_names(per) - covered
        if not names:
            continue
        if factor is None:
            _WARNED.count += 1
            logger.warning(
                "%s: %s=%s without sockets_per_node; GRES per socket not counted", label, key, record.get(key)
            )
            continue
        for entry, amount in per.items():
            if entry[len("gres/") :].split(":", 1)[0] in names:
                out[entry] = amount * factor
        covered |= names
    return out


def _job_memory(record: Mapping[str, Any], nodes: int, cpus: int | None, gpus: int | None) -> int | None:
    """Whole-job memory in MiB from the per-node, per-CPU or per-GPU request.

    `--mem=0` (all of a node's memory) gives 0 per node here: nothing can be
    computed, so the caller keeps what the TRES string says.
    """
    per_node = _whole(record.get("memory_per_node"), "memory_per_node")
    if per_node:
        return per_node * nodes
    per_cpu = _whole(record.get("memory_per_cpu"), "memory_per_cpu")
    if per_cpu and cpus:
        return per_cpu * cpus
    per_tres = _lenient(
        parse_tres_per,
        _text(record.get("memory_per_tres"), "memory_per_tres"),
        f"job {_job_label(record)} memory_per_tres",
    )
    per_gpu = per_tres.get("gres/gpu")
    if per_gpu and gpus:
        return per_gpu * gpus
    return None


class _Warnings:
    """How many warnings the job TRES parsers logged: a result that warned is not cached."""

    count = 0


_WARNED: Final = _Warnings()
# What `_job_tres` reads of a record (`job_resources` only without `node_count`: then it is not cached).
_TRES_FIELDS: Final = (
    "tres_req_str",
    "tres_alloc_str",
    "node_count",
    "tasks",
    "cpus",
    "sockets_per_node",
    "tres_per_job",
    "tres_per_node",
    "tres_per_task",
    "tres_per_socket",
    "memory_per_node",
    "memory_per_cpu",
    "memory_per_tres",
    "gres_detail",
)
_TRES_CACHE: dict[tuple[object, ...], Tres] = {}


def _frozen(value: object) -> object:
    """A hashable stand-in for a JSON value; scalars keep their type (1, 1.0 and True differ)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return (dict, tuple((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (list, tuple(_frozen(v) for v in value))
    return (type(value), value)


def _job_tres_frozen(record: Mapping[str, Any], state: str) -> Tres:
    """`_job_tres` as a read-only mapping, shared by the jobs whose fields are the same.

    A queue of 50,000 jobs has a few dozen distinct shapes: each is parsed
    once (per `_PARSE_CACHE_SIZE` shapes). A record that raises or warns
    is parsed every time, so each such job is named in its own line.
    """
    try:
        counted = _positive(record, "node_count") is not None  # else job_resources is read too
    except (TypeError, ValueError):
        counted = False  # _job_tres says what is wrong
    key = (state in HOLDING_STATES, *(_frozen(record.get(f)) for f in _TRES_FIELDS)) if counted else None
    if key is not None:
        hit = _TRES_CACHE.get(key)
        if hit is not None:
            return hit
    warned = _WARNED.count
    tres = freeze_tres(_job_tres(record, state))
    if key is not None and _WARNED.count == warned:
        if len(_TRES_CACHE) >= _PARSE_CACHE_SIZE:
            _TRES_CACHE.clear()
        _TRES_CACHE[key] = tres
    return tres


def _job_tres(record: Mapping[str, Any], state: str) -> dict[str, int]:
    holding = state in HOLDING_STATES
    request = _text(record.get("tres_req_str"), "tres_req_str")
    allocated = _text(record.get("tres_alloc_str"), "tres_alloc_str")
    field = (
        ("tres_alloc_str" if allocated else "tres_req_str")
        if holding
        else ("tres_req_str" if request else "tres_alloc_str")
    )
    text = (allocated or request) if holding else (request or allocated)
    tres, explicit = _parse_tres_entries(text, field)

    nodes = _positive(record, "node_count")
    if nodes is None:
        resources = record.get("job_resources")
        if isinstance(resources, Mapping):
            nested = resources.get("nodes")
            nodes = _positive(nested, "count") if isinstance(nested, Mapping) else None
            nodes = nodes or _positive(resources, "allocated_hosts")
    nodes = nodes or tres.get("node") or 1
    tasks = _positive(record, "tasks") or 1
    cpus = tres.get("cpu") or _positive(record, "cpus")

    _merge_gres(tres, explicit, _job_gres(record, nodes, tasks, holding))
    if "cpu" not in tres and cpus:
        tres["cpu"] = cpus
    if "node" not in tres:
        tres["node"] = nodes
    if "mem" not in tres:
        memory = _job_memory(record, nodes, cpus, tres.get("gres/gpu"))
        if memory is not None:
            tres["mem"] = memory
    for name, amount in tres.items():
        # Counts times nodes or tasks, memory per node times nodes: each fits, the product may not.
        if amount > MAX_TRES:
            raise ValueError(
                f"{name} {shorten(str(amount), 40)} (from {field} and the per-node, per-task and "
                f"memory fields) is past {MAX_TRES}"
            )
    return tres


def _priority(record: Mapping[str, Any]) -> tuple[int, bool]:
    """(priority, reported as zero)."""
    value = parse_number(record.get("priority"))
    if value is None:
        return 0, False
    if value == math.inf:
        return INFINITE_PRIORITY, False
    return round(value), value == 0


def parse_squeue_record(record: object, *, include_finished: bool = False) -> Job | None:  # noqa: C901
    """One `squeue --json` job record as a Job.

    Returns None for a job that neither holds nor waits for resources
    (completed, cancelled, ...) unless `include_finished`. Raises ValueError
    (or TypeError) when the record cannot be read.

    The job id is the one to write to: a pending array record is written
    through its array job id (updating every pending task), a pending
    heterogeneous job component through its leader (`het_job_id`); each
    component keeps its own resources, so a pending het job appears as
    several records sharing the leader's id. Running array tasks and running
    het components keep their own job ids.
    """
    if not isinstance(record, Mapping):
        raise TypeError(f"expected a job object, got {type(record).__name__}")
    raw_id = _whole(record.get("job_id"), "job_id")
    if raw_id is None:
        raise ValueError("missing job_id")
    state = parse_job_state(record.get("job_state"))
    if not include_finished and state != PENDING and state not in HOLDING_STATES:
        logger.debug("job %s: state %s neither holds nor waits for resources; left out", raw_id, state)
        return None
    account = _text(record.get("account"), "account").strip()
    if not account:
        raise ValueError("no account")

    job_id = raw_id
    array_tasks = 1
    task_string = _text(record.get("array_task_string"), "array_task_string").strip()
    if state == PENDING and task_string:
        tasks = parse_array_task_string(task_string)
        if tasks.truncated:
            logger.warning(
                "job %s: array_task_string %r is cut short (set SLURM_BITSTR_LEN=0); "
                "counting at least %d pending tasks",
                raw_id,
                task_string,
                tasks.tasks,
            )
        array_tasks = tasks.tasks
        job_id = _positive(record, "array_job_id") or raw_id
    het_leader = _pending_het_leader(record, state)
    if het_leader is not None:
        job_id = het_leader

    priority, priority_zero = _priority(record)
    nice = parse_number(record.get("nice"))
    if nice is None or nice == math.inf or not math.isfinite(nice):
        nice = 0
    elif nice >= 2**31:
        # Slurm 22.05's JSON prints nice as an unsigned 32-bit number: -5 arrives
        # as 4294967291 (measured on the sandbox); squeue's text output is signed.
        nice -= 2**32
    reason = _text(record.get("state_reason"), "state_reason")
    held = priority_zero or reason.startswith("JobHeld") or record.get("hold") is True

    user = _text(record.get("user_name"), "user_name")
    if not user:
        user_id = _whole(record.get("user_id"), "user_id")
        user = "" if user_id is None else str(user_id)
    submit = parse_number(record.get("submit_time"))
    submit_time = float(submit) if submit is not None and math.isfinite(submit) else 0.0

    return Job(
        job_id=str(job_id),
        account=account,
        user=user,
        partition=_text(record.get("partition"), "partition"),
        state=state,
        priority=priority,
        nice=round(nice),
        held=held,
        submit_time=submit_time,
        array_tasks=array_tasks,
        tres=_job_tres_frozen(record, state),
    )


def _pending_het_leader(record: Mapping[str, Any], state: str) -> int | None:
    """The leader's id when the record is a pending het job component other than the leader."""
    leader = _positive(record, "het_job_id")
    if state == PENDING and leader and _positive(record, "het_job_offset"):
        return leader
    return None


def parse_het_leaders(records: Iterable[object]) -> frozenset[str]:
    """Leader ids of pending het jobs with a pending component besides the leader.

    The records are squeue-shaped (`squeue --json`'s `jobs`, or the pyslurm
    source's). These are the ids `merge_pending_components` sums components
    under; the Snapshot keeps them (`het_leaders`) because a write to one
    must reach every component: `scontrol update jobid=LEADER` does,
    slurm_update_job() (pyslurm's Job.modify) changes only the named record.
    """
    leaders: set[str] = set()
    for record in records:
        if not isinstance(record, Mapping):
            continue
        try:
            leader = _pending_het_leader(record, parse_job_state(record.get("job_state")))
        except (TypeError, ValueError):
            continue  # parse_squeue_json warns about the record
        if leader is not None:
            leaders.add(str(leader))
    return frozenset(leaders)


def _error_message(error: object) -> str:
    """One entry of the JSON `errors` list as text a person can act on.

    With slurmctld down, 22.05's squeue exits 0 and says only `{"description":
    "Failed while looking for jobs", "error": "Unspecified error", "source":
    "slurm_load_jobs"}` (measured): the failed call is named, and the one
    likely cause and how to check it are added.
    """
    if not isinstance(error, Mapping):
        return str(error)
    description = str(error.get("description") or "").strip()
    detail = str(error.get("error") or "").strip()
    source = str(error.get("source") or "").strip()
    message = description or detail or "no description"
    if detail and detail != message and detail.lower() != "unspecified error":
        message += f": {detail}"
    if source:
        message += f" (in {source})"
        if source.startswith("slurm_load_"):
            message += "; is slurmctld running? `scontrol ping` tells"
    return message


def _check_errors(data: Mapping[str, Any], what: str, has_records: bool) -> None:
    errors = data.get("errors")
    if not isinstance(errors, list) or not errors:
        return
    message = _error_message(errors[0])
    if not has_records:
        raise SlurmReadError(f"{what} reported an error: {message}")
    logger.warning("%s reported %d error(s), the first: %s", what, len(errors), message)


def _records(data: object, key: str, what: str) -> list[Any]:
    if not isinstance(data, Mapping):
        raise SlurmReadError(f"{what}: expected a JSON object, got {type(data).__name__}")
    records = data.get(key)
    _check_errors(data, what, isinstance(records, list) and bool(records))
    if not isinstance(records, list):
        raise SlurmReadError(f"{what}: no '{key}' list in the output")
    return records


def parse_squeue_json(data: Mapping[str, Any], *, include_finished: bool = False) -> list[Job]:
    """Every job in `squeue --json` output (Slurm 22.05 to 25.x) as a Job.

    A record that cannot be read is skipped with a warning naming the job
    and the problem. Raises SlurmReadError only when the output as a whole
    is not squeue's (no `jobs` list, or only errors).
    """
    jobs: list[Job] = []
    for record in _records(data, "jobs", "squeue --json"):
        try:
            job = parse_squeue_record(record, include_finished=include_finished)
        except Exception as error:  # one bad record must not stop the rest
            logger.warning("job %s skipped: %s", _job_label(record), error)
            continue
        if job is not None:
            jobs.append(job)
    return merge_pending_components(jobs)


def merge_pending_components(jobs: list[Job]) -> list[Job]:
    """One record per pending het job: its components summed under the leader's id.

    Slurm schedules a het job as a whole and `scontrol update` takes the
    leader, so the plan must see one job with the whole demand, not one
    per component (which would write the leader once per component). Which
    ids are such leaders goes into the Snapshot (`parse_het_leaders`).
    """
    first: dict[str, int] = {}
    out: list[Job] = []
    for job in jobs:
        if not job.pending:
            out.append(job)
            continue
        index = first.get(job.job_id)
        if index is None:
            first[job.job_id] = len(out)
            out.append(job)
            continue
        merged = out[index]
        tres = dict(merged.tres)
        for name, amount in job.tres.items():
            tres[name] = tres.get(name, 0) + amount
        out[index] = replace(merged, tres=freeze_tres(tres), held=merged.held or job.held)
    return out


# --------------------------------------------------------------------------
# Nodes


def parse_node_state(state: object, flags: object = None) -> str:
    """`mixed` + `["DRAIN"]` (22.05) or `["IDLE", "DRAIN"]` (23.02+) -> `mixed+drain`."""
    parts: list[str]
    if isinstance(state, str):
        parts = state.split("+")
    elif isinstance(state, list) and all(isinstance(s, str) for s in state):
        parts = list(state)
    elif state is None:
        parts = []
    else:
        raise ValueError(f"state: expected a state or a list of states, got {state!r}")
    if isinstance(flags, list):
        parts.extend(str(flag) for flag in flags)
    words = [part.strip().lower() for part in parts if part.strip()]
    return "+".join(dict.fromkeys(words)) or "unknown"


def _node_tres(name: str, tres_text: str, cpus: int | None, memory: int | None, gres_text: str) -> dict[str, int]:
    """Node TRES from its `tres` string, filled in from cpus, memory and GRES."""
    tres, explicit = _parse_tres_entries(tres_text)
    if "cpu" not in tres and cpus is not None:
        tres["cpu"] = cpus
    if "mem" not in tres and memory is not None:
        tres["mem"] = memory
    _merge_gres(tres, explicit, _lenient(parse_gres, gres_text, f"node {name} gres"))
    return tres


def _partition_list(value: object, key: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [p for p in value.split(",") if p]
    if isinstance(value, list) and all(isinstance(p, str) for p in value):
        return list(value)
    raise ValueError(f"{key}: expected a list of partitions, got {value!r}")


def parse_node_record(record: object) -> Node:
    """One node record (22.05 `sinfo --json`, 23.02+ `scontrol show nodes --json`)."""
    if not isinstance(record, Mapping):
        raise TypeError(f"expected a node object, got {type(record).__name__}")
    name = _text(record.get("name"), "name")
    if not name:
        raise ValueError("missing name")
    return Node(
        name=name,
        partitions=tuple(_partition_list(record.get("partitions"), "partitions")),
        state=parse_node_state(record.get("state"), record.get("state_flags")),
        tres=freeze_tres(
            _node_tres(
                name,
                _text(record.get("tres"), "tres"),
                _whole(record.get("cpus"), "cpus"),
                _whole(record.get("real_memory"), "real_memory"),
                _text(record.get("gres"), "gres"),
            )
        ),
    )


def _nested(record: Mapping[str, Any], path: str) -> object:
    value: object = record
    for part in path.split("/"):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _sinfo_group_nodes(record: object) -> list[Node]:
    """The nodes of one 23.02+ `sinfo --json` record (a group of alike nodes)."""
    if not isinstance(record, Mapping):
        raise TypeError(f"expected an sinfo object, got {type(record).__name__}")
    names = _nested(record, "nodes/nodes")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"nodes.nodes: expected a list of node names, got {names!r}")
    partition = _nested(record, "partition/name")
    partitions = (partition.rstrip("*"),) if isinstance(partition, str) and partition else ()
    values: dict[str, int | None] = {}
    for what in ("cpus", "memory"):
        low = _whole(_nested(record, f"{what}/minimum"), f"{what}.minimum")
        high = _whole(_nested(record, f"{what}/maximum"), f"{what}.maximum")
        if low is not None and high is not None and low != high:
            logger.warning(
                "sinfo group %s: %s range %d-%d; counting %d per node", ",".join(names), what, low, high, low
            )
        values[what] = low if low is not None else high
    state = parse_node_state(_nested(record, "node/state"))
    gres = _nested(record, "gres/total")
    tres = freeze_tres(
        _node_tres(",".join(names), "", values["cpus"], values["memory"], gres if isinstance(gres, str) else "")
    )
    return [Node(name=name, partitions=partitions, state=state, tres=tres) for name in names]


def _merge_nodes(nodes: Iterable[Node]) -> list[Node]:
    """One Node per name; a node listed once per partition gets them all."""
    merged: dict[str, Node] = {}
    for node in nodes:
        seen = merged.get(node.name)
        if seen is None:
            merged[node.name] = node
        else:
            partitions = tuple(dict.fromkeys([*seen.partitions, *node.partitions]))
            merged[node.name] = Node(seen.name, partitions, seen.state, seen.tres)
    return list(merged.values())


def parse_sinfo_json(data: Mapping[str, Any]) -> list[Node]:
    """Nodes from `sinfo --json` (22.05) or `scontrol show nodes --json` (23.02+).

    Both give one record per node under `nodes`. 23.02+'s `sinfo --json`
    output (node groups under `sinfo`) is read too, one Node per host name.
    A record that cannot be read is skipped with a warning naming it.
    """
    if not isinstance(data, Mapping):
        raise SlurmReadError(f"node list: expected a JSON object, got {type(data).__name__}")
    nodes: list[Node] = []
    if "nodes" in data or "sinfo" not in data:
        for record in _records(data, "nodes", "node list"):
            try:
                nodes.append(parse_node_record(record))
            except Exception as error:  # one bad record must not stop the rest
                label = record.get("name", "?") if isinstance(record, Mapping) else "?"
                logger.warning("node %s skipped: %s", label, error)
        return _merge_nodes(nodes)
    for index, record in enumerate(_records(data, "sinfo", "sinfo --json")):
        try:
            nodes.extend(_sinfo_group_nodes(record))
        except Exception as error:  # one bad record must not stop the rest
            logger.warning("sinfo record %d skipped: %s", index, error)
    return _merge_nodes(nodes)


parse_nodes_json = parse_sinfo_json


# --------------------------------------------------------------------------
# Versions, cluster name, configuration


def parse_slurm_version(data: Mapping[str, Any]) -> str | None:
    """`22.05.8` from the JSON meta (`meta.Slurm` up to 23.02, `meta.slurm` after)."""
    meta = data.get("meta") if isinstance(data, Mapping) else None
    if not isinstance(meta, Mapping):
        return None
    slurm = meta.get("slurm") or meta.get("Slurm")
    if not isinstance(slurm, Mapping):
        return None
    release = slurm.get("release")
    if isinstance(release, str) and release.strip():
        return release.strip()
    version = slurm.get("version")
    if isinstance(version, Mapping):
        try:
            major, minor, micro = (int(version[k]) for k in ("major", "minor", "micro"))
        except (KeyError, TypeError, ValueError):
            return None
        return f"{major}.{minor:02d}.{micro}"
    return None


def parse_version_tuple(version: str | None) -> tuple[int, int] | None:
    """(23, 2) from `23.02.5`; None when there is no readable version."""
    if not version:
        return None
    match = re.match(r"^\s*(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def parse_json_cluster(data: Mapping[str, Any]) -> str | None:
    """The cluster name from 23.11+'s `meta.slurm.cluster` or a job's `cluster`."""
    meta = data.get("meta") if isinstance(data, Mapping) else None
    if isinstance(meta, Mapping):
        slurm = meta.get("slurm") or meta.get("Slurm")
        if isinstance(slurm, Mapping) and isinstance(slurm.get("cluster"), str) and slurm["cluster"]:
            return str(slurm["cluster"])
    jobs = data.get("jobs") if isinstance(data, Mapping) else None
    if isinstance(jobs, list):
        for job in jobs:
            if isinstance(job, Mapping) and isinstance(job.get("cluster"), str) and job["cluster"]:
                return str(job["cluster"])
    return None


def parse_scontrol_config(text: str) -> dict[str, str]:
    """`Key = value` lines of `scontrol show config` (first occurrence wins)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key or " " in key:
            continue
        out.setdefault(key, value.strip())
    return out


def _config_value(text: str, key: str) -> str | None:
    value = parse_scontrol_config(text).get(key)
    return value if value and value != "(null)" else None


def parse_priority_weights(text: str) -> dict[str, int]:
    """PriorityWeight* of `scontrol show config` -> {"PriorityWeightAge": 100, ...}.

    Only whole-number weights are kept. PriorityWeightTRES (`CPU=1000,
    Mem=2000,GRES/gpu=3000`) is spread over `PriorityWeightTRES/CPU`, ... so
    that every factor that can add to a job's priority has its own integer
    weight. priority/basic prints no weights: the result is then empty.
    """
    weights: dict[str, int] = {}
    for key, value in parse_scontrol_config(text).items():
        if not key.startswith("PriorityWeight"):
            continue
        if key == "PriorityWeightTRES":
            for item in value.split(","):
                name, sep, amount = item.partition("=")
                try:
                    number = float(amount)
                except ValueError:
                    continue
                if sep and name.strip() and math.isfinite(number):
                    weights[f"PriorityWeightTRES/{name.strip()}"] = round(number)
        elif value.isdigit():
            weights[key] = int(value)
    return weights


def parse_scheduler_parameters(text: str) -> dict[str, int]:
    """The whole-number items of SchedulerParameters (`bf_max_job_test=1000,...`)."""
    out: dict[str, int] = {}
    for item in (_config_value(text, "SchedulerParameters") or "").split(","):
        name, sep, value = item.partition("=")
        if sep and name.strip() and value.strip().isdigit():
            out[name.strip()] = int(value.strip())
    return out


def parse_priority_type(text: str) -> str | None:
    """`priority/multifactor` or `priority/basic` from `scontrol show config`."""
    return _config_value(text, "PriorityType")


def parse_cluster_name(text: str) -> str | None:
    """ClusterName from `scontrol show config`."""
    return _config_value(text, "ClusterName")


# RawShares of an association whose fairshare is "parent" (SLURMDB_FS_USE_PARENT).
SHARES_USE_PARENT: Final = 0x7FFFFFFF


# `name(id)` as scontrol prints a user (`alice(1001)`) or a parent account (`physics(12)`).
_NAME_WITH_ID: Final = re.compile(r"^(.*?)\(\d+\)$")


def _without_id(value: str) -> str:
    found = _NAME_WITH_ID.match(value)
    return found.group(1) if found else value


# The lines of a record that say what the tree needs; the limits (Grp*, Max*)
# are a dozen more lines per association, not looked at.
_ASSOC_MGR_LINES: Final = ("ClusterName=", "SharesRaw", "ParentAccount=")


def _assoc_mgr_records(text: str) -> Iterator[dict[str, str]]:
    """The key=value pairs of each record; a record starts at a `ClusterName=` line."""
    record: dict[str, str] | None = None
    for raw in text.splitlines():
        line = raw.lstrip()
        if not line.startswith(_ASSOC_MGR_LINES):
            continue
        if line.startswith("ClusterName="):
            if record is not None:
                yield record
            record = {}
        if record is None:
            continue
        for token in line.split():
            key, equals, value = token.partition("=")
            if equals:
                record.setdefault(key, value)
    if record is not None:
        yield record


def _assoc_mgr_association(record: Mapping[str, str]) -> Association:
    """One association from its record; ValueError for one that cannot be read."""
    account = record.get("Account", "")
    if not account:
        raise ValueError("no Account")
    user = _without_id(record.get("UserName", "")) or None
    parent = _without_id(record.get("ParentAccount", "")) or None
    shares_text = record.get("SharesRaw/Norm/Level/Factor", "").split("/", 1)[0]
    if not shares_text.isdigit():
        raise ValueError(f"SharesRaw {shares_text!r} is not a number")
    shares: int | None = int(shares_text)
    if shares == SHARES_USE_PARENT:
        shares = None
    return Association(account, account if user is not None else parent, user, shares)


def parse_assoc_mgr(text: str, cluster: str | None = None) -> tuple[Association, ...]:
    """The associations in `scontrol show assoc_mgr flags=assoc` (22.05 to 25.11 print the same).

    Each record's first line reads `ClusterName=C Account=A UserName=U(uid)
    Partition=P ...`, an indented line `SharesRaw/Norm/Level/Factor=R/...`
    and one `ParentAccount=NAME(id) ...` (empty for the root and for user
    associations, whose parent is their account). RawShares 2147483647 is
    fairshare=parent (None). Records of other clusters than `cluster`
    (when given) are left out; a user's partition associations collapse into
    the first one listed (the tree has one node per user and account). A
    record that cannot be read is skipped with a warning naming it; the
    tree is checked by `check_associations`.
    """
    associations: list[Association] = []
    seen: set[tuple[str, str | None]] = set()
    for record in _assoc_mgr_records(text):
        if cluster and record.get("ClusterName", cluster) != cluster:
            continue
        try:
            association = _assoc_mgr_association(record)
        except ValueError as error:
            logger.warning(
                "skipping association (account %s, user %s, id %s): %s",
                record.get("Account", "?"),
                record.get("UserName", "") or "none",
                record.get("ID", "?"),
                error,
            )
            continue
        key = (association.account, association.user)
        if association.user is not None and key in seen:
            continue
        seen.add(key)
        associations.append(association)
    return tuple(associations)


def check_associations(associations: tuple[Association, ...]) -> tuple[Association, ...]:
    """The associations when they form one tree (`model.tree.build_tree`); SlurmReadError names the first bad one."""
    try:
        build_tree(associations)
    except SnapshotError as error:
        raise SlurmReadError(f"Slurm's association tree: {error}") from error
    return associations


def select_partitions(
    nodes: Sequence[Node], jobs: Sequence[Job], partitions: Iterable[str] | None
) -> tuple[list[Node], list[Job]]:
    """Nodes and jobs in any of `partitions` (all of them when None).

    A job pending in several partitions stays when one of them is wanted.
    """
    if partitions is None:
        return list(nodes), list(jobs)
    wanted = set(partitions)
    return (
        [n for n in nodes if wanted.intersection(n.partitions)],
        [j for j in jobs if wanted.intersection(j.partitions)],
    )


def build_snapshot(
    cluster: str,
    taken_at: str,
    nodes: Sequence[Node],
    jobs: Sequence[Job],
    partitions: Sequence[str] | None,
    version: str | None,
    config_text: str,
    het_leaders: Iterable[str] = (),
    associations: tuple[Association, ...] = (),
) -> Snapshot:
    """The Snapshot every source hands the daemon, from what it read.

    `config_text` is `scontrol show config`: priority weights and type, and
    the SchedulerParameters that set how deep Slurm looks into the queue.
    `het_leaders` (`parse_het_leaders`) are kept for the pending jobs the
    snapshot holds. `associations` is the checked tree
    (`check_associations`), or () when it is unknown.
    """
    warn_max_job_count(jobs, config_text)
    nodes, jobs = select_partitions(list(nodes), list(jobs), partitions)
    pending = {job.job_id for job in jobs if job.pending}
    snapshot = Snapshot(
        cluster=cluster,
        taken_at=taken_at,
        nodes=tuple(nodes),
        jobs=tuple(jobs),
        slurm_version=version,
        priority_weights=freeze_tres(parse_priority_weights(config_text)),
        priority_type=parse_priority_type(config_text),
        het_leaders=frozenset(het_leaders) & pending,
        scheduler_parameters=freeze_tres(parse_scheduler_parameters(config_text)),
        associations=associations,
        controller_started=parse_scontrol_config(config_text).get("BOOT_TIME") or None,
    )
    check_snapshot(snapshot)
    return snapshot


def warn_max_job_count(jobs: Sequence[Job], config_text: str) -> int | None:
    """One warning line when slurmctld holds at least its MaxJobCount jobs; that limit, if known.

    slurmctld then refuses every new job (sbatch: "Slurm temporarily unable
    to accept job"), but answers squeue and job updates as before: a
    lowered MaxJobCount even keeps every job it already holds. The read is
    whole, so the cycle goes on and writes; what has to change is Slurm's.
    Jobs are counted as slurmctld counts them: a pending array is its tasks.
    """
    text = _config_value(config_text, "MaxJobCount")
    if text is None or not text.isdigit():
        return None
    limit = int(text)
    held = sum(max(job.array_tasks, 1) for job in jobs)
    if limit and held >= limit:
        logger.warning(
            "slurmctld holds %d jobs, at or past its MaxJobCount %d: sbatch refuses new jobs until some "
            "end (raise MaxJobCount in slurm.conf); the cycle goes on with the jobs read",
            held,
            limit,
        )
    return limit


def check_snapshot(snapshot: Snapshot) -> None:
    """The consistency checks of a snapshot file (`model.codec`), for what Slurm said.

    A node listed twice would double the pool's capacity, a job listed
    twice give two plan rows for one job: the same refusal as for a file,
    as a SlurmReadError, since what Slurm said is no input of the user's
    (the daemon skips the cycle and backs off, `once` exits 1).
    """
    try:
        check_nodes(snapshot.nodes)
        check_job_table(snapshot.table)  # the table is kept: the plan uses it
    except SnapshotError as error:
        raise SlurmReadError(f"inconsistent data from Slurm: {error}") from error
