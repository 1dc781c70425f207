"""A ClusterSource that reads the cluster through pyslurm, in process.

Sits beside cli_source.py between the daemon and Slurm, and gives the same
Snapshot: pyslurm's job and node data are turned into records shaped like
`squeue --json` / `sinfo --json` records (pure `build_*` functions below),
then read by the very parsers the CLI source uses (`parse_squeue_json`,
`parse_sinfo_json`), so TRES, GRES, arrays, het jobs, holds and node states
mean the same thing whichever backend read them. The dict API's plain jobs
(most of a queue) skip the record: `DictJobReader` makes them directly,
with what the parser made of the first job of the same shape.

pyslurm builds only against the Slurm release whose major.minor it carries
(pyslurm 22.5.x for Slurm 22.05, 23.2.x for 23.02, ...), so it is used only
when its version matches the running Slurm's (`pyslurm_usable`). Note the
spelling: pyslurm writes the minor without the zero (22.5.3), Slurm with it
(22.05.8); releases are compared as numbers.

Two API shapes exist in pyslurm's releases (read from PySlurm/pyslurm's
source at tags v22.5.0 to v25.11.2):

- the dict API, `pyslurm.job().get()` and `pyslurm.node().get()`
  (pyslurm/pyslurm.pyx up to 23.2.0, pyslurm/deprecated.pyx after):
  `job` in every release from 22.5.0 to 25.5.x, `node` up to 24.11.x. Its
  records carry Slurm's raw strings (tres_req_str, tres_alloc_str,
  tres_per_job/node/task/socket, the node's tres_fmt_str): exactly what
  squeue's JSON is built from.
- the object API, `pyslurm.Jobs.load()` and `pyslurm.Nodes.load()`
  (pyslurm/core/job/job.pyx, pyslurm/core/node.pyx; from 22.5.2). Up to
  24.11 a job shows its GRES only as `gres_per_node` (no TRES strings, no
  tres_per_job/tres_per_task, so `--gpus` and `--gpus-per-task` requests are
  invisible and there is no billing); 25.5 adds `requested_tres` and
  `allocated_tres` objects, which are read when present.

For jobs and for nodes separately, the dict API is used when the module has
it (it is complete), the object API otherwise. The configuration
(ClusterName, PriorityType, PriorityWeight*) is read with `scontrol show
config`, as the CLI source does: pyslurm's config API differs in every
release, scontrol's text does not. So is the association tree (`scontrol
show assoc_mgr flags=assoc`, `cli_source.AssociationReader`): pyslurm's
`db.Associations.load()` (22.5 and 24.11) asks slurmdbd, while slurmctld's
cache is what its scheduler uses and costs no database round trip.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
import operator
import os
import pwd
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final, Literal

from slurm_drf.config.settings import DEFAULT_SLURM_TIMEOUT
from slurm_drf.errors import SlurmReadError
from slurm_drf.model.codec import format_time
from slurm_drf.model.types import (
    HOLDING_STATES,
    PENDING,
    Job,
    JobTableBuilder,
    Node,
    Snapshot,
    Tres,
)
from slurm_drf.slurm.cli_source import AssociationReader, CommandRunner, build_command_env, build_scontrol_config_argv
from slurm_drf.slurm.execute import run_command
from slurm_drf.slurm.parse.amounts import WARNINGS
from slurm_drf.slurm.parse.envelope import parse_version_tuple
from slurm_drf.slurm.parse.jobs import (
    built_jobs,
    parse_het_leaders,
    parse_job_state,
    parse_record_or_warn,
    parse_squeue_json,
)
from slurm_drf.slurm.parse.nodes import parse_sinfo_json
from slurm_drf.slurm.parse.scontrol import parse_cluster_name, parse_priority_type, parse_scontrol_config
from slurm_drf.slurm.parse.snapshot import SnapshotHeader, build_snapshot

logger = logging.getLogger(__name__)

Api = Literal["auto", "dict", "object"]

# slurm.h: nice travels as NICE_OFFSET + nice; the dict API subtracts the
# offset, so an unset nice (NO_VAL) arrives as NO_VAL - NICE_OFFSET.
_NICE_OFFSET: Final = 0x80000000
_NO_VAL: Final = 0xFFFFFFFE
_UNSET_NICE: Final = _NO_VAL - _NICE_OFFSET
# Numbers this large are Slurm's NO_VAL64/INFINITE64 leaking through raw.
_NO_VAL64_FLOOR: Final = 2**63

# Suffixes node_state_string() (src/common/slurm_protocol_defs.c) appends to
# a base state, as the names node_state_flag_string() gives the same flags
# (and `sinfo --json` prints in state_flags).
_STATE_SUFFIX_FLAGS: Final[Mapping[str, str]] = {
    "*": "not_responding",
    "~": "powered_down",
    "#": "powering_up",
    "%": "powering_down",
    "!": "power_down",
    "$": "maintenance",
    "@": "reboot_requested",
    "^": "reboot_issued",
}
# "+POWER" is how the dict API's node().get() spells POWERED_DOWN.
_DICT_STATE_WORDS: Final[Mapping[str, str]] = {"power": "powered_down"}


# --------------------------------------------------------------------------
# Is pyslurm usable here?


def fetch_slurm_release(timeout: float = 10) -> tuple[str | None, str]:
    """The installed Slurm's version from `sinfo --version` ("slurm 22.05.8",
    Debian: "slurm-wlm 22.05.8") and where it came from, or None and why not.

    sinfo prints its own version without asking slurmctld, but only once it
    has a configuration: without slurm.conf it retries for a minute, and a
    configless client fetches one from slurmctld. Hence the timeout.
    """
    sinfo = shutil.which("sinfo")
    if sinfo is None:
        return None, "no sinfo on PATH"
    try:
        done = subprocess.run([sinfo, "--version"], capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, f"sinfo --version gave no answer within {timeout:g} s"
    except (OSError, subprocess.SubprocessError) as error:
        return None, f"sinfo --version: {error}"
    match = re.search(r"\d+\.\d+(?:\.\d+)?", done.stdout)
    if match:
        return match.group(0), "sinfo --version"
    said = done.stderr.strip().splitlines()
    return None, f"sinfo --version: {said[-1] if said else f'exit {done.returncode}'}"


def _slurm_release() -> str | None:
    """The installed Slurm's version (`fetch_slurm_release`), or None."""
    return fetch_slurm_release()[0]


def parse_api_shapes(module: object) -> tuple[bool, bool, bool, bool]:
    """(dict jobs, dict nodes, object jobs, object nodes) the module offers."""
    return (
        callable(getattr(module, "job", None)),
        callable(getattr(module, "node", None)),
        callable(getattr(getattr(module, "Jobs", None), "load", None)),
        callable(getattr(getattr(module, "Nodes", None), "load", None)),
    )


def pyslurm_usable(
    *, importer: Callable[[str], ModuleType] = importlib.import_module, slurm_release: str | None = None
) -> tuple[bool, str]:
    """Whether pyslurm imports, matches the running Slurm's major.minor and
    offers an API this backend reads; the reason either way.

    `importer` and `slurm_release` are for tests; by default pyslurm is
    imported and the release read from `sinfo --version`.
    """
    try:
        module = importer("pyslurm")
    except Exception as error:  # a mismatched libslurm fails in many ways at import
        return False, f"pyslurm does not import ({type(error).__name__}: {error})"
    version = str(getattr(module, "__version__", "") or "")
    pyslurm_release = parse_version_tuple(version)
    if pyslurm_release is None:
        return False, f"pyslurm reports no readable version ({version!r})"
    release = slurm_release if slurm_release is not None else _slurm_release()
    slurm = parse_version_tuple(release)
    if slurm is None:
        return False, "cannot tell the Slurm release (sinfo --version)"
    if pyslurm_release != slurm:
        return False, (
            f"pyslurm {version} is built for Slurm {pyslurm_release[0]}.{pyslurm_release[1]:02d}, "
            f"but Slurm here is {release}: install the pyslurm whose major.minor matches"
        )
    dict_jobs, dict_nodes, object_jobs, object_nodes = parse_api_shapes(module)
    if not ((dict_jobs or object_jobs) and (dict_nodes or object_nodes)):
        return False, f"pyslurm {version} has neither job()/node() nor Jobs.load()/Nodes.load()"
    return True, f"pyslurm {version} matches Slurm {release}"


# --------------------------------------------------------------------------
# pyslurm data -> squeue/sinfo-shaped records (pure)


def _get(obj: object, name: str) -> Any:
    """An object-API attribute, or None when this release lacks it or its
    property raises (several do on odd input, e.g. `user_name` for an
    unknown uid, `memory_per_gpu` on 23.11's `gres/gpu:N` spelling)."""
    try:
        return getattr(obj, name)
    except Exception:  # pyslurm properties raise KeyError, IndexError, ValueError, ...
        return None


def _text(value: object) -> str:
    """A string field; pyslurm gives None for a NULL char*."""
    return value if isinstance(value, str) else ""


def _count(value: object) -> int | None:
    """A whole count from an int, a digit string, or to_gres_dict's
    {"count": ..., "indexes": ...} form; None when unset."""
    if type(value) is int:  # the common case first: a cycle reads 50,000 jobs' dozen numbers
        return value
    if isinstance(value, Mapping):
        value = value.get("count")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return round(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _raw_number(value: object) -> int | None:
    """A number the dict API passes through raw: NO_VAL64 and friends read as unset."""
    number = value if type(value) is int else _count(value)
    return None if number is None or number >= _NO_VAL64_FLOOR else number


def render_gres_dict(gres: object) -> str:
    """A GRES string from pyslurm's `to_gres_dict()` form.

    {"gpu": 4} -> "gpu:4"; {"gpu:a100": 2} -> "gpu:a100:2"; 23.11's
    "gres/gpu:2" parses there to {"gres/gpu": 2} -> "gres/gpu:2".
    """
    if not isinstance(gres, Mapping):
        return ""
    items = []
    for name, value in gres.items():
        amount = _count(value)
        if isinstance(name, str) and name and amount is not None:
            items.append(f"{name}:{amount}")
    return ",".join(items)


def _tres_amount(value: object) -> int | None:
    return _count(_get(value, "count")) if value is not None else None


def render_tres_object(tres: object) -> str:
    """A TRES string (`cpu=2,mem=8192M,node=1,gres/gpu=2`) from 25.5+'s
    TrackableResources (pyslurm/db/tres.pyx): built-in TRES are attributes
    holding a TrackableResource (`.count`; mem in MiB), GRES and licenses
    dicts of them keyed by name ("gpu", "gpu:a100")."""
    if tres is None:
        return ""
    items = []
    for name in ("cpu", "mem", "node", "billing"):
        amount = _tres_amount(_get(tres, name))
        if amount is not None:
            items.append(f"{name}={amount}{'M' if name == 'mem' else ''}")
    for kind in ("gres", "license"):
        group = _get(tres, kind)
        if isinstance(group, Mapping):
            for key, value in group.items():
                amount = _tres_amount(value)
                if isinstance(key, str) and key and amount is not None:
                    items.append(f"{kind}/{key}={amount}")
    return ",".join(items)


def build_job_record_from_dict(job: Mapping[str, Any], user_name: Callable[[int], str]) -> dict[str, Any]:
    """An `squeue --json`-shaped record from one dict-API job
    (`pyslurm.job().get()`, get_job_ptr() in pyslurm.pyx / deprecated.pyx).

    The dict API keeps Slurm's raw strings, so the record is nearly a
    renaming; `nice` arrives signed (NICE_OFFSET already taken off) and the
    user only as a uid.
    """
    get = job.get  # 50,000 jobs of 28 fields each: the lookups are the cost
    nice = get("nice")
    if not isinstance(nice, int) or isinstance(nice, bool) or nice == _UNSET_NICE:
        nice = None
    user_id = _count(get("user_id"))
    record: dict[str, Any] = {name: _text(get(key)) for name, key in _DICT_TEXT_FIELDS}
    record.update({name: _raw_number(get(key)) for name, key in _DICT_NUMBER_FIELDS})
    record.update(
        job_id=get("job_id"),
        job_state=get("job_state"),
        user_id=user_id,
        user_name=user_name(user_id) if user_id is not None else "",
        priority=get("priority"),
        nice=nice,
        submit_time=get("submit_time"),
        array_job_id=get("array_job_id") or 0,
        array_task_id=get("array_task_id"),
        het_job_id=get("het_job_id") or 0,
        het_job_offset=get("het_job_offset") or 0,
    )
    return record


# squeue's name of a dict-API string field, and pyslurm's.
_DICT_TEXT_FIELDS: Final = (
    ("state_reason", "state_reason"),
    ("account", "account"),
    ("partition", "partition"),
    ("array_task_string", "array_task_str"),
    ("tres_req_str", "tres_req_str"),
    ("tres_alloc_str", "tres_alloc_str"),
    ("tres_per_job", "tres_per_job"),
    ("tres_per_node", "tres_per_node"),
    ("tres_per_task", "tres_per_task"),
    ("tres_per_socket", "tres_per_socket"),
    ("memory_per_tres", "mem_per_tres"),
)
# ... and of a number it passes through raw (NO_VAL64 and friends read as unset).
_DICT_NUMBER_FIELDS: Final = (
    ("memory_per_node", "min_memory_node"),
    ("memory_per_cpu", "min_memory_cpu"),
    ("cpus", "num_cpus"),
    ("node_count", "num_nodes"),
    ("tasks", "num_tasks"),
    ("sockets_per_node", "sockets_per_node"),
)


# The dict API's fields a job's TRES are read from (`_DICT_TEXT_FIELDS` and
# `_DICT_NUMBER_FIELDS` rename them; parse.jobs reads them as `_TRES_FIELDS`).
_DICT_TRES_KEYS: Final = (
    "tres_req_str",
    "tres_alloc_str",
    "tres_per_job",
    "tres_per_node",
    "tres_per_task",
    "tres_per_socket",
    "mem_per_tres",
    "min_memory_node",
    "min_memory_cpu",
    "num_cpus",
    "num_nodes",
    "num_tasks",
    "sockets_per_node",
)
_HOLDING: Final = frozenset(HOLDING_STATES)
# One C call for the fields a plain job is made of, one for those its TRES come from.
_DICT_PLAIN: Final = operator.itemgetter(
    "job_id",
    "job_state",
    "account",
    "user_id",
    "submit_time",
    "priority",
    "nice",
    "het_job_id",
    "array_task_str",
    "state_reason",
    "partition",
)
_DICT_TRES: Final = operator.itemgetter(*_DICT_TRES_KEYS)
# A submit time float() takes exactly, as parse_squeue_record reads it; past it the parser decides.
_FLOAT_SAFE: Final = 2**53


class DictJobReader:
    """Jobs straight from the dict API's dicts: what `parse_squeue_record` makes of
    `build_job_record_from_dict`, without the squeue-shaped record in between.

    A queue of 50,000 jobs is a few dozen shapes of request: a job whose
    fields are all of the plain kinds pyslurm gives (ints, strings) and that
    is no pending array or het job is made here, its TRES read once per
    distinct set of the raw fields they come from. Every other job, and the
    first of each shape, goes the whole way (record, then parser), so its
    warnings and what it means are the parser's; a shape whose reading
    warned is not kept, so each such job is named in a warning of its own.
    One reader serves one read: the shapes it keeps are this read's.
    """

    def __init__(self, user_name: Callable[[int], str]) -> None:
        self._names: dict[int, str] = {}
        self._user_name = user_name
        self._states: dict[str, str] = {}
        self._shapes: dict[tuple[object, ...], Tres] = {}
        #: The records of het jobs (for `parse_het_leaders`).
        self.het_records: list[dict[str, Any]] = []
        #: How many jobs went the whole way (record, then parser).
        self.whole = 0

    def name(self, uid: int) -> str:
        """The user's name, looked up once per uid."""
        found = self._names.get(uid)
        if found is None:
            found = self._names[uid] = self._user_name(uid)
        return found

    def read(self, loaded: Iterable[Any]) -> Sequence[Job]:
        """The running and pending jobs among `loaded`, in order; an unreadable one skipped with a warning.

        The jobs come as `JobRows`, read straight into their table
        (`JobTableBuilder`), unless pending jobs share an id (a het job's
        components, summed under its leader by `merge_pending_components`)
        or a number of one is past 64 bits: then as a list of Jobs.
        """
        builder = JobTableBuilder()
        add = builder.add
        fast = self._fast
        for job in loaded:
            made = fast(job) if type(job) is dict else _SLOW
            if made is _SLOW:
                whole = self._whole(job)
                if whole is not None:
                    builder.add_job(whole)
            elif made is not None:
                add(made)  # type: ignore[arg-type]
        return built_jobs(builder)

    def _fast(self, job: dict[str, Any]) -> tuple[Any, ...] | object | None:
        """A plain record's Job, as its fields in order; None for a finished job, `_SLOW` when
        the parser must read it."""
        try:
            job_id, raw_state, account, uid, submit, priority, nice, het, tasks, reason, partition = _DICT_PLAIN(job)
            values = _DICT_TRES(job)
        except KeyError:  # a field the dict API always has is missing: the parser reads it as unset
            return _SLOW
        state = self._states.get(raw_state) if type(raw_state) is str else None
        if type(job_id) is not int or job_id < 0 or state is None:
            return _SLOW  # the parser names what is wrong; a state not seen yet is read by it once
        if state != PENDING and state not in _HOLDING:
            return None
        if not (
            type(account) is str
            and type(uid) is int
            and uid >= 0
            and type(submit) is int
            and -_FLOAT_SAFE < submit < _FLOAT_SAFE
            and (priority is None or type(priority) is int)
            and (nice is None or type(nice) is int)
            and not het
            and type(partition) is str
        ):
            return _SLOW
        account = account.strip()
        if not account or (state == PENDING and _text(tasks).strip()):
            return _SLOW
        try:
            tres = self._shapes.get((state in _HOLDING, values, tuple(map(type, values))))
        except TypeError:  # an unhashable field: not a shape pyslurm gives
            return _SLOW
        user = self.name(uid)
        if tres is None or type(user) is not str or not user:
            return _SLOW
        if nice is None or nice == _UNSET_NICE:
            nice = 0
        elif nice >= 2**31:  # as parse_squeue_record reads an unsigned nice
            nice -= 2**32
        held = priority == 0 or (isinstance(reason, str) and reason.startswith("JobHeld"))
        intern = sys.intern
        return (
            str(job_id),
            intern(account),
            user,
            intern(partition),
            state,
            priority or 0,
            nice,
            held,
            float(submit),
            1,
            tres,
            None,
        )

    def _whole(self, job: Any) -> Job | None:
        """The job read the whole way: its record, then the parser; its shape kept for the next."""
        self.whole += 1
        try:
            record = build_job_record_from_dict(job, self.name)
        except Exception as error:  # one odd record must not hide the others
            logger.warning("pyslurm job skipped: %s", error)
            return None
        if record.get("het_job_id"):
            self.het_records.append(record)
        warned = WARNINGS.count
        parsed = parse_record_or_warn(record)
        raw_state = record["job_state"]
        if type(raw_state) is str and raw_state not in self._states:
            with contextlib.suppress(ValueError):  # the parser said what is wrong with it
                self._states[raw_state] = parse_job_state(raw_state)
        if parsed is not None and WARNINGS.count == warned:
            values = tuple(map(job.get, _DICT_TRES_KEYS))
            with contextlib.suppress(TypeError):  # an unhashable field: not kept
                self._shapes[(parsed.holding, values, tuple(map(type, values)))] = parsed.tres
        return parsed


_SLOW: Final = object()


def build_job_record_from_object(job: object) -> dict[str, Any]:
    """An `squeue --json`-shaped record from one object-API job
    (`pyslurm.Jobs.load()`, pyslurm/core/job/job.pyx).

    Before 25.5 there are no TRES strings: CPUs, memory and nodes come from
    `cpus`, `memory_per_cpu`/`memory_per_node` and `num_nodes`, GPUs from
    `gres_per_node` (the parsers multiply by the node count). `Job.memory`
    is not used: in 22.5.x it returns None for per-node memory.
    """
    user_id = _count(_get(job, "user_id"))
    user = _text(_get(job, "user_name")) or ("" if user_id is None else str(user_id))
    per_gpu = _count(_get(job, "memory_per_gpu"))
    record: dict[str, Any] = {
        "job_id": _get(job, "id"),
        "job_state": _get(job, "state"),
        "state_reason": _text(_get(job, "state_reason")),
        "account": _text(_get(job, "account")),
        "partition": _text(_get(job, "partition")),
        "cluster": _text(_get(job, "cluster")),
        "user_id": user_id,
        "user_name": user,
        "priority": _get(job, "priority"),
        "nice": _get(job, "nice"),
        "submit_time": _get(job, "submit_time"),
        "array_job_id": _count(_get(job, "array_id")) or 0,
        "array_task_string": _text(_get(job, "array_tasks_waiting")),
        "het_job_id": _count(_get(job, "heterogeneous_id")) or 0,
        "het_job_offset": _count(_get(job, "heterogeneous_offset")) or 0,
        "tres_req_str": render_tres_object(_get(job, "requested_tres")),
        "tres_alloc_str": render_tres_object(_get(job, "allocated_tres")),
        "tres_per_node": render_gres_dict(_get(job, "gres_per_node")),
        "memory_per_tres": f"gres:gpu:{per_gpu}" if per_gpu else "",
        "memory_per_node": _get(job, "memory_per_node"),
        "memory_per_cpu": _get(job, "memory_per_cpu"),
        "cpus": _get(job, "cpus"),
        "node_count": _get(job, "num_nodes"),
        "tasks": _get(job, "ntasks"),
        "sockets_per_node": _get(job, "sockets_per_node"),
    }
    return record


def parse_pyslurm_node_state(state: object) -> str:
    """`MIXED`, `IDLE+DRAIN` (object API), `IDLE*+DRAIN`, `DOWN+POWER` (dict
    API) -> the CLI's spelling: lower case, flags joined by '+'
    (`idle+not_responding+drain`)."""
    if not isinstance(state, str) or not state.strip():
        return "unknown"
    words: list[str] = []
    for part in state.strip().split("+"):
        word = part.strip()
        flags = []
        while word and word[-1] in _STATE_SUFFIX_FLAGS:
            flags.append(_STATE_SUFFIX_FLAGS[word[-1]])
            word = word[:-1]
        if word:
            lowered = word.lower()
            words.append(_DICT_STATE_WORDS.get(lowered, lowered) if words else lowered)
        words.extend(reversed(flags))
    return "+".join(dict.fromkeys(words)) or "unknown"


def build_node_record_from_dict(node: Mapping[str, Any]) -> dict[str, Any]:
    """An `sinfo --json`-shaped record from one dict-API node (`pyslurm.node().get()`)."""
    gres = node.get("gres")
    partitions = node.get("partitions")
    return {
        "name": _text(node.get("name")),
        "partitions": [p for p in partitions if isinstance(p, str) and p] if isinstance(partitions, list) else [],
        "state": parse_pyslurm_node_state(node.get("state")),
        "tres": _text(node.get("tres_fmt_str")),
        "cpus": _raw_number(node.get("cpus")),
        "real_memory": _raw_number(node.get("real_memory")),
        # listOrNone(record.gres, ','): the GRES string split at commas
        "gres": ",".join(g for g in gres if isinstance(g, str)) if isinstance(gres, list) else _text(gres),
    }


def build_node_record_from_object(node: object) -> dict[str, Any]:
    """An `sinfo --json`-shaped record from one object-API node
    (`pyslurm.Nodes.load()`, pyslurm/core/node.pyx); no TRES string there."""
    partitions = _get(node, "partitions")
    return {
        "name": _text(_get(node, "name")),
        "partitions": [p for p in partitions if isinstance(p, str) and p] if isinstance(partitions, list) else [],
        "state": parse_pyslurm_node_state(_get(node, "state")),
        "tres": "",
        "cpus": _count(_get(node, "total_cpus")),
        "real_memory": _count(_get(node, "real_memory")),
        "gres": render_gres_dict(_get(node, "configured_gres")),
    }


def _values(collection: object) -> list[Any]:
    """The items of pyslurm's collections: a dict (dict API; object API
    up to 23.2.x) or a MultiClusterMap, whose values() spans all clusters."""
    values = getattr(collection, "values", None)
    if not callable(values):
        raise SlurmReadError(f"pyslurm returned {type(collection).__name__}, not a collection")
    return list(values())


def _build_records(items: Iterable[Any], build: Callable[[Any], dict[str, Any]], what: str) -> list[dict[str, Any]]:
    records = []
    for item in items:
        try:
            records.append(build(item))
        except Exception as error:  # one odd record must not hide the others
            logger.warning("%s skipped: %s", what, error)
    return records


# --------------------------------------------------------------------------
# The source


def _passwd_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


@dataclass(frozen=True)
class PyslurmHost:
    """What the source takes from the machine it runs on, a test's fakes in its place.

    `runner` runs scontrol (for the configuration and the tree) in `environ`
    (os.environ when None); `clock` stamps the snapshot; `user_name` maps
    uids for the dict API, which gives no names.
    """

    runner: CommandRunner = run_command
    environ: MutableMapping[str, str] | None = None
    clock: Callable[[], float] = time.time
    user_name: Callable[[int], str] = _passwd_name


class PyslurmSource:
    """Reads the cluster through pyslurm; one Snapshot per fetch.

    `module` is pyslurm (imported on first use when None; tests pass a
    fake). `api` forces one shape ("dict" or "object") instead of the best
    available. `host` is the machine around it (`PyslurmHost`).
    """

    def __init__(
        self,
        module: ModuleType | None = None,
        *,
        partitions: Iterable[str] | None = None,
        api: Api = "auto",
        timeout: float = DEFAULT_SLURM_TIMEOUT,
        host: PyslurmHost = PyslurmHost(),
    ) -> None:
        self.name = "pyslurm"
        self._module = module
        if isinstance(partitions, str):
            partitions = [partitions]
        self.partitions = tuple(partitions) if partitions is not None else None
        self.api = api
        self.timeout = timeout
        self._runner = host.runner
        self._environ = os.environ if host.environ is None else host.environ
        self._clock = host.clock
        self._user_name = host.user_name
        #: PriorityType from the last fetch.
        self.priority_type: str | None = None
        # The tree through scontrol, as the CLI backend reads it: pyslurm's
        # db.Associations asks slurmdbd, not slurmctld's cache (docs/pyslurm.md).
        self.associations = AssociationReader(self._run_command, host.clock)

    def _run_command(self, argv: Sequence[str]) -> str:
        return self._runner(argv, self.timeout, env=build_command_env(self._environ))

    def _pyslurm(self) -> ModuleType:
        if self._module is None:
            try:
                self._module = importlib.import_module("pyslurm")
            except Exception as error:
                raise SlurmReadError(f"pyslurm does not import ({type(error).__name__}: {error})") from error
        return self._module

    def _use_dict(self, has_dict: bool, has_object: bool, kind: str) -> bool:
        """Whether to read `kind` ("job" or "node") through the dict API."""
        if self.api == "dict" or (self.api == "auto" and has_dict):
            if not has_dict:
                raise SlurmReadError(f"pyslurm has no dict API for {kind}s (pyslurm.{kind}().get())")
            return True
        if not has_object:
            raise SlurmReadError(f"pyslurm has no object API for {kind}s (pyslurm.{kind.capitalize()}s.load())")
        return False

    def _load(self, load: Callable[[], object], what: str) -> list[Any]:
        try:
            return _values(load())
        except SlurmReadError:
            raise
        except Exception as error:  # RPCError (object API), ValueError(message, errno) (dict API)
            detail = error.args[0] if isinstance(error, ValueError) and error.args else error
            # As the CLI backend says it (slurm.parse.envelope._error_message): the likely cause and how to check.
            raise SlurmReadError(
                f"pyslurm: loading {what} failed: {detail}; is slurmctld running? `scontrol ping` tells"
            ) from error

    def fetch_jobs(self) -> tuple[Sequence[Job], frozenset[str], str | None]:
        """The running and pending jobs, the leaders of pending het jobs, the cluster the jobs name."""
        module = self._pyslurm()
        dict_jobs, _, object_jobs, _ = parse_api_shapes(module)
        # libslurm cuts a pending array's task list to 64 characters unless
        # SLURM_BITSTR_LEN says otherwise (xlate_array_task_str() reads it in
        # this process, as it does in squeue's).
        self._environ["SLURM_BITSTR_LEN"] = "0"
        if self._use_dict(dict_jobs, object_jobs, "job"):
            reader = DictJobReader(self._user_name)
            jobs = reader.read(self._load(lambda: module.job().get(), "jobs"))
            return jobs, parse_het_leaders(reader.het_records), None
        records = _build_records(self._load(module.Jobs.load, "jobs"), build_job_record_from_object, "pyslurm job")
        cluster = next((r["cluster"] for r in records if r.get("cluster")), None)
        return parse_squeue_json({"jobs": records}), parse_het_leaders(records), cluster

    def fetch_node_records(self) -> list[dict[str, Any]]:
        """Every node as an sinfo-shaped record."""
        module = self._pyslurm()
        _, dict_nodes, _, object_nodes = parse_api_shapes(module)
        if self._use_dict(dict_nodes, object_nodes, "node"):
            loaded = self._load(lambda: module.node().get(), "nodes")
            return _build_records(loaded, build_node_record_from_dict, "pyslurm node")
        loaded = self._load(module.Nodes.load, "nodes")
        return _build_records(loaded, build_node_record_from_object, "pyslurm node")

    def _fetch_config(self) -> str:
        try:
            return self._run_command(build_scontrol_config_argv())
        except SlurmReadError as error:
            # Weights only feed a warning; the cycle can go on without them.
            logger.warning("priority weights unknown: %s", error)
            return ""

    def fetch_snapshot(self) -> Snapshot:
        """Read jobs, nodes and configuration now; SlurmReadError when Slurm cannot be read."""
        jobs, het_leaders, cluster = self.fetch_jobs()
        nodes: list[Node] = parse_sinfo_json({"nodes": self.fetch_node_records()})
        config = self._fetch_config()
        self.priority_type = parse_priority_type(config)
        version = parse_scontrol_config(config).get("SLURM_VERSION") or None
        cluster = cluster or parse_cluster_name(config) or ""
        associations = self.associations.fetch(cluster)
        logger.debug("read %d nodes and %d jobs through pyslurm", len(nodes), len(jobs))
        taken_at = format_time(self._clock())
        header = SnapshotHeader(cluster, taken_at, version)
        return build_snapshot(header, nodes, jobs, self.partitions, config, het_leaders, associations)
