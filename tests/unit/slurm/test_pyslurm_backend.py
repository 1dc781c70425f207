"""The pyslurm backend against a fake pyslurm built from pyslurm's own source.

No pyslurm matching the Slurm installed here (22.05) could be installed, so
these tests stand in a FAKE module. It is built faithfully from PySlurm/
pyslurm's source, one C struct (slurm_job_info_t / node_info_t fields, as
squeue/sinfo's JSON print them) behind each of pyslurm's two API shapes:

- object API: pyslurm/core/job/job.pyx (`Jobs.load`, `Job` properties:
  id, account, user_name, priority, nice, state, state_reason, cpus,
  ntasks, num_nodes, memory_per_cpu/node/gpu, gres_per_node, array_id,
  array_tasks_waiting, heterogeneous_id/offset, cluster; `Job.modify`),
  pyslurm/core/node.pyx (`Nodes.load`, `Node.total_cpus`, `real_memory`,
  `configured_gres`, `partitions`, `state`), pyslurm/core/job/submission.pyx
  (`JobSubmitDescription._create_job_submit_desc`: `if self.nice:` drops
  0), pyslurm/utils/cstr.pyx (`to_gres_dict`), pyslurm/utils/uint.pyx
  (`u32_parse`), pyslurm/utils/ctime.pyx (`_raw_time`),
  pyslurm/core/error.pyx (`RPCError(errno, msg)`), and for 25.5+
  pyslurm/db/tres.pyx (`TrackableResources`, `GPU`) -- tags v22.5.3,
  v23.11.1, v25.11.2;
- dict API: pyslurm/pyslurm.pyx at v22.5.3 (`job.get_job_ptr`,
  `node.get_node`; the same code lives on in pyslurm/deprecated.pyx up to
  v24.11.0 for nodes and v25.5.0 for jobs).

The C structs come from the captured Slurm 22.05 output in
tests/fixtures/slurm-22.05/ (squeue.json, sinfo.json), so the CLI source
reading the fixture and the pyslurm source reading the fake see the same
cluster and must give the same Snapshot.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

import pytest

from slurm_drf.config.settings import Config
from slurm_drf.cycle.run import run_cycle
from slurm_drf.cycle.store import StateStore
from slurm_drf.errors import SlurmReadError, SlurmWriteError
from slurm_drf.model.types import Job, Node, Snapshot
from slurm_drf.slurm.cli_source import CliSource
from slurm_drf.slurm.parse.jobs import parse_squeue_json
from slurm_drf.slurm.parse.nodes import parse_sinfo_json
from slurm_drf.slurm.pyslurm_source import (
    PyslurmHost,
    PyslurmSource,
    parse_pyslurm_node_state,
    pyslurm_usable,
    render_gres_dict,
)
from slurm_drf.slurm.pyslurm_write import PyslurmWriter
from slurm_drf.slurm.write import ScontrolWriter, Write
from tests.paths import FIXTURES

FIXTURES = FIXTURES / "slurm-22.05"
NOW = 1796004600.0
CONFIG = """\
ClusterName             = drftest
PriorityType            = priority/multifactor
PriorityWeightAge       = 1000
PriorityWeightFairshare = 10000
PriorityWeightTRES      = CPU=1000,Mem=2000,GRES/gpu=3000
SLURM_VERSION           = 22.05.8
"""

# slurm.h constants
NO_VAL = 0xFFFFFFFE
NO_VAL16 = 0xFFFE
NO_VAL64 = 0xFFFFFFFFFFFFFFFE
INFINITE = 0xFFFFFFFF
NICE_OFFSET = 0x80000000
MEM_PER_CPU = 0x8000000000000000


def squeue_fixture() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / "squeue.json").read_text())
    return data


def sinfo_fixture() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / "sinfo.json").read_text())
    return data


# --------------------------------------------------------------------------
# pyslurm's helpers, ported


def to_gres_dict(gres: str | None) -> dict[str, Any]:
    """pyslurm/utils/cstr.pyx to_gres_dict() (v23.11.1; v22.5.3 lacks only the count default)."""
    output: dict[str, Any] = {}
    if not gres or gres == "(null)":
        return {}
    for raw in re.split(",(?=[^,]+?:)", gres):
        item = raw
        cnt = typ = "1"
        if "gres:" in item:
            item = item.replace("gres:", "")
        split = re.split(":(?=[^:]+?)", item.replace("(", ":", 1).replace(")", ""))
        name = split[0]
        if len(split) > 1:
            typ = split[1]
        kind: str | None = typ
        if typ.isdigit():
            cnt = typ
            kind = None
        elif len(split) > 2:
            cnt = split[2]
        else:
            continue
        key = f"{name}:{kind}" if kind else name
        if "IDX" not in split:
            output[key] = int(cnt)
        else:
            output[key] = {"count": int(cnt), "indexes": split[3] if not kind else split[4]}
    return output


def u32_parse(value: int, *, on_noval: Any = None, noval: int = NO_VAL, zero_is_noval: bool = True) -> Any:
    """pyslurm/utils/uint.pyx u32_parse() (u16/u64 alike with their NO_VAL)."""
    if value == noval or (value == 0 and zero_is_noval):
        return on_noval
    if value == INFINITE:
        return "UNLIMITED"
    return value


def raw_time(value: int) -> int | None:
    """pyslurm/utils/ctime.pyx _raw_time()."""
    return None if value in (NO_VAL, 0) else value


# --------------------------------------------------------------------------
# The C structs, from the captured JSON (jobs.c/nodes.c of openapi v0.0.38
# print these fields)


@dataclass
class CJob:
    """The slurm_job_info_t fields pyslurm reads."""

    job_id: int
    account: str | None
    partition: str | None
    user_id: int
    job_state: str  # as slurm_job_state_string() renders it
    state_reason: str  # as slurm_job_reason_string() renders it
    state_desc: str | None
    priority: int
    nice: int  # NICE_OFFSET + nice
    submit_time: int
    num_cpus: int
    num_nodes: int
    num_tasks: int
    pn_min_memory: int
    sockets_per_node: int
    tres_req_str: str | None
    tres_alloc_str: str | None
    tres_per_job: str | None
    tres_per_node: str | None
    tres_per_task: str | None
    tres_per_socket: str | None
    mem_per_tres: str | None
    array_job_id: int
    array_task_id: int
    array_task_str: str | None
    array_max_tasks: int
    het_job_id: int
    het_job_offset: int
    cluster: str | None


def _null(text: object) -> str | None:
    return text if isinstance(text, str) and text else None


def c_job(record: Mapping[str, Any]) -> CJob:
    nice = record["nice"] or 0  # squeue 22.05 prints null for 0 ...
    if nice >= 2**31:
        nice -= 2**32  # ... and negative values unsigned
    if record.get("memory_per_node") is not None:
        memory = record["memory_per_node"]
    elif record.get("memory_per_cpu") is not None:
        memory = record["memory_per_cpu"] | MEM_PER_CPU
    else:
        memory = NO_VAL64
    return CJob(
        job_id=record["job_id"],
        account=_null(record["account"]),
        partition=_null(record["partition"]),
        user_id=record["user_id"],
        job_state=record["job_state"],
        state_reason=record["state_reason"],
        state_desc=_null(record.get("state_description")),
        priority=record["priority"],
        nice=NICE_OFFSET + nice,
        submit_time=record["submit_time"],
        num_cpus=record["cpus"],
        num_nodes=record["node_count"],
        num_tasks=record["tasks"],
        pn_min_memory=memory,
        sockets_per_node=NO_VAL16 if record.get("sockets_per_node") is None else record["sockets_per_node"],
        tres_req_str=_null(record["tres_req_str"]),
        tres_alloc_str=_null(record["tres_alloc_str"]),
        tres_per_job=_null(record["tres_per_job"]),
        tres_per_node=_null(record["tres_per_node"]),
        tres_per_task=_null(record["tres_per_task"]),
        tres_per_socket=_null(record["tres_per_socket"]),
        mem_per_tres=_null(record["memory_per_tres"]),
        array_job_id=record["array_job_id"] or 0,
        array_task_id=NO_VAL if record["array_task_id"] is None else record["array_task_id"],
        array_task_str=_null(record["array_task_string"]),
        array_max_tasks=record.get("array_max_tasks") or 0,
        het_job_id=record["het_job_id"] or 0,
        het_job_offset=record["het_job_offset"] or 0,
        cluster=_null(record.get("cluster")),
    )


@dataclass
class CNode:
    """The node_info_t fields pyslurm reads; the state as base + flag names."""

    name: str
    cpus: int
    real_memory: int
    gres: str | None
    partitions: str | None
    base_state: str
    state_flags: list[str]
    tres_fmt_str: str | None


def c_node(record: Mapping[str, Any]) -> CNode:
    return CNode(
        record["name"],
        record["cpus"],
        record["real_memory"],
        _null(record["gres"]),
        ",".join(record["partitions"]) or None,
        record["state"].upper(),
        [flag.upper() for flag in record.get("state_flags", [])],
        _null(record["tres"]),
    )


# --------------------------------------------------------------------------
# 25.5+ TrackableResources (pyslurm/db/tres.pyx, v25.11.2)


@dataclass
class TrackableResource:
    type: str
    count: int
    name: str | None = None


@dataclass
class GPU:
    count: int
    type: str | None = None

    @property
    def name(self) -> str:
        return f"gpu:{self.type}" if self.type else "gpu"


def dehumanize(text: str) -> int:
    """pyslurm/utils/helpers.pyx dehumanize(): '8G' -> 8192 (MiB)."""
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}
    if text[-1].upper() in units:
        return round(float(text[:-1]) * units[text[-1].upper()])
    return int(text)


@dataclass
class TrackableResources:
    cpu: TrackableResource | None = None
    mem: TrackableResource | None = None
    node: TrackableResource | None = None
    billing: TrackableResource | None = None
    energy: TrackableResource | None = None
    gres: dict[str, Any] = field(default_factory=dict)
    license: dict[str, TrackableResource] = field(default_factory=dict)

    @staticmethod
    def from_cstr(tres_str: str | None) -> TrackableResources | None:
        """from_cstr(): cstr.to_dict splits `type[/name]=count`; gres/gpu* become GPU objects."""
        if not tres_str:
            return None
        out = TrackableResources()
        for item in tres_str.split(","):
            key, _, value = item.partition("=")
            kind, _, name = key.partition("/")
            count = dehumanize(value) if kind == "mem" else int(value)
            if kind == "gres":
                if name == "gpu" or name.startswith("gpu:"):
                    gpu = GPU(count, name.split(":", 1)[1] if ":" in name else None)
                    out.gres[gpu.name] = gpu
                else:
                    out.gres[name] = TrackableResource(kind, count, name)
            elif kind == "license":
                out.license[name] = TrackableResource(kind, count, name)
            elif hasattr(out, kind):
                setattr(out, kind, TrackableResource(kind, count))
        return out


# --------------------------------------------------------------------------
# The fake module


class RPCError(Exception):
    """pyslurm/core/error.pyx RPCError(errno, msg)."""

    def __init__(self, errno: int = -1, msg: str | None = None) -> None:
        self.errno = errno
        self.msg = msg
        super().__init__(msg)


@dataclass
class FakeCluster:
    """What slurmctld holds, and what the fake pyslurm was asked to change."""

    jobs: list[CJob]
    nodes: list[CNode]
    passwd: dict[int, str] = field(default_factory=lambda: {0: "root"})
    updates: list[tuple[int, dict[str, int]]] = field(default_factory=list)
    update_errors: dict[int, RPCError] = field(default_factory=dict)
    load_error: Exception | None = None


def make_pyslurm(  # noqa: C901
    cluster: FakeCluster,
    version: str,
    *,
    dict_jobs: bool = True,
    dict_nodes: bool = True,
    object_api: bool = True,
    tres_objects: bool = False,
) -> ModuleType:
    """A pyslurm module of `version` with the chosen API shapes.

    22.5.0/22.5.1/23.2.0: dict API only; 22.5.2 to 24.11: both; 25.5: dict
    `job` only beside the objects, which gain TrackableResources; 25.11:
    objects only.
    """
    module = ModuleType("pyslurm")
    module.__version__ = version  # type: ignore[attr-defined]
    module.RPCError = RPCError  # type: ignore[attr-defined]

    class ObjectJob:
        """pyslurm.Job: properties over the C struct (pyslurm/core/job/job.pyx)."""

        def __init__(self, job_id: int, ptr: CJob | None = None) -> None:
            self.ptr = ptr
            self._id = job_id

        @property
        def id(self) -> int:
            return self._id

        def _ptr(self) -> CJob:
            assert self.ptr is not None
            return self.ptr

        account = property(lambda self: self._ptr().account)
        partition = property(lambda self: self._ptr().partition)
        cluster = property(lambda self: self._ptr().cluster)
        state = property(lambda self: self._ptr().job_state)
        user_id = property(lambda self: u32_parse(self._ptr().user_id, zero_is_noval=False))
        priority = property(lambda self: u32_parse(self._ptr().priority, zero_is_noval=False))
        submit_time = property(lambda self: raw_time(self._ptr().submit_time))
        num_nodes = property(lambda self: u32_parse(self._ptr().num_nodes))
        cpus = property(lambda self: u32_parse(self._ptr().num_cpus, on_noval=1))
        ntasks = property(lambda self: u32_parse(self._ptr().num_tasks, on_noval=1))
        sockets_per_node = property(lambda self: u32_parse(self._ptr().sockets_per_node, noval=NO_VAL16))
        gres_per_node = property(lambda self: to_gres_dict(self._ptr().tres_per_node))
        array_id = property(lambda self: u32_parse(self._ptr().array_job_id))
        array_task_id = property(lambda self: u32_parse(self._ptr().array_task_id))
        heterogeneous_id = property(lambda self: u32_parse(self._ptr().het_job_id, noval=0))
        heterogeneous_offset = property(lambda self: u32_parse(self._ptr().het_job_offset, noval=0))

        @property
        def user_name(self) -> str | None:
            uid = self._ptr().user_id
            return None if uid in (NO_VAL, INFINITE) else cluster.passwd[uid]  # KeyError as uid_to_name

        @property
        def nice(self) -> int | None:
            ptr = self._ptr()
            return None if ptr.nice == NO_VAL else ptr.nice - NICE_OFFSET

        @property
        def state_reason(self) -> str:
            ptr = self._ptr()
            return ptr.state_desc or ptr.state_reason

        @property
        def memory_per_cpu(self) -> int | None:
            memory = self._ptr().pn_min_memory
            if memory != NO_VAL64 and memory & MEM_PER_CPU:
                return u32_parse(memory & ~MEM_PER_CPU, noval=NO_VAL64)  # type: ignore[no-any-return]
            return None

        @property
        def memory_per_node(self) -> int | None:
            memory = self._ptr().pn_min_memory
            if memory != NO_VAL64 and not memory & MEM_PER_CPU:
                return u32_parse(memory, noval=NO_VAL64)  # type: ignore[no-any-return]
            return None

        @property
        def memory_per_gpu(self) -> int | None:
            ptr = self._ptr()
            if ptr.mem_per_tres and ptr.pn_min_memory == NO_VAL64:
                return int(ptr.mem_per_tres.split(":")[2])
            return None

        @property
        def array_tasks_waiting(self) -> str | None:
            task_str = self._ptr().array_task_str
            if not task_str:
                return None
            return task_str[: task_str.rindex("%")] if "%" in task_str else task_str

        def modify(self, changes: JobSubmitDescription) -> None:
            """Job.modify(): slurm_update_job() with only job_id set."""
            sent = changes._create_job_submit_desc(is_update=True)
            error = cluster.update_errors.get(self._id)
            if error is not None:
                raise error
            cluster.updates.append((self._id, sent))

    class TresJob(ObjectJob):
        """25.5+ adds requested_tres/allocated_tres (TrackableResources)."""

        requested_tres = property(lambda self: TrackableResources.from_cstr(self._ptr().tres_req_str))
        allocated_tres = property(lambda self: TrackableResources.from_cstr(self._ptr().tres_alloc_str))

    job_class = TresJob if tres_objects else ObjectJob

    class Jobs(dict[int, ObjectJob]):
        """pyslurm.Jobs (a dict up to 23.2.x, a MultiClusterMap after: both have values())."""

        @staticmethod
        def load() -> Jobs:
            if cluster.load_error is not None:
                raise cluster.load_error
            return Jobs({c.job_id: job_class(c.job_id, c) for c in cluster.jobs})

    class ObjectNode:
        """pyslurm.Node (pyslurm/core/node.pyx)."""

        def __init__(self, ptr: CNode) -> None:
            self.ptr = ptr

        name = property(lambda self: self.ptr.name)
        total_cpus = property(lambda self: u32_parse(self.ptr.cpus, on_noval=0, noval=NO_VAL16))
        real_memory = property(lambda self: u32_parse(self.ptr.real_memory, noval=NO_VAL64))
        configured_gres = property(lambda self: to_gres_dict(self.ptr.gres))
        partitions = property(lambda self: self.ptr.partitions.split(",") if self.ptr.partitions else [])
        # slurm_node_state_string_complete(): base, then "+FLAG" per flag
        state = property(lambda self: "+".join([self.ptr.base_state, *self.ptr.state_flags]))

    class Nodes(dict[str, ObjectNode]):
        @staticmethod
        def load() -> Nodes:
            return Nodes({c.name: ObjectNode(c) for c in cluster.nodes})

    class JobSubmitDescription:
        """pyslurm/core/job/submission.pyx: attributes from kwargs."""

        nice: int | None = None
        site_factor: int | None = None
        priority: int | None = None

        def __init__(self, **kwargs: int) -> None:
            for key, value in kwargs.items():
                setattr(self, key, value)

        def _create_job_submit_desc(self, is_update: bool = False) -> dict[str, int]:
            """What reaches job_desc_msg_t (NICE_OFFSET taken off again for reading)."""
            sent: dict[str, int] = {}
            if self.nice:  # the quirk: 0 is dropped
                sent["nice"] = int(self.nice)
            if self.site_factor:  # likewise
                sent["site_factor"] = int(self.site_factor)
            if self.priority is not None:  # u32(priority, zero_is_noval=False)
                sent["priority"] = int(self.priority)
            return sent

    class DictJob:
        """pyslurm.job (pyslurm/pyslurm.pyx v22.5.3, job.get_job_ptr())."""

        def get(self) -> dict[int, dict[str, Any]]:
            if cluster.load_error is not None:
                raise cluster.load_error
            out: dict[int, dict[str, Any]] = {}
            for c in cluster.jobs:
                d: dict[str, Any] = {"account": c.account}
                if c.array_job_id:
                    d["array_job_id"] = c.array_job_id
                    d["array_task_id"] = None if c.array_task_str else c.array_task_id
                    d["array_task_str"] = c.array_task_str
                    if c.array_max_tasks:
                        d["array_task_throttle"] = c.array_max_tasks
                else:
                    d.update(array_job_id=None, array_task_id=None, array_task_str=None)
                if c.het_job_id:
                    d.update(het_job_id=c.het_job_id, het_job_offset=c.het_job_offset)
                else:
                    d.update(het_job_id=None, het_job_offset=None)
                d.update(
                    job_id=c.job_id,
                    job_state=c.job_state,
                    mem_per_tres=c.mem_per_tres,
                    nice=c.nice - NICE_OFFSET,
                    num_cpus=c.num_cpus,
                    num_nodes=c.num_nodes,
                    num_tasks=c.num_tasks,
                    partition=c.partition,
                )
                if c.pn_min_memory & MEM_PER_CPU:
                    d.update(
                        mem_per_cpu=True,
                        min_memory_cpu=c.pn_min_memory & ~MEM_PER_CPU,
                        mem_per_node=False,
                        min_memory_node=None,
                    )
                else:
                    d.update(mem_per_cpu=False, min_memory_cpu=None, mem_per_node=True, min_memory_node=c.pn_min_memory)
                d.update(
                    priority=c.priority,
                    sockets_per_node=None if c.sockets_per_node == NO_VAL16 else c.sockets_per_node,
                    state_reason=c.state_desc.replace(" ", "_") if c.state_desc else c.state_reason,
                    submit_time=c.submit_time,
                    tres_alloc_str=c.tres_alloc_str,
                    tres_per_job=c.tres_per_job,
                    tres_per_node=c.tres_per_node,
                    tres_per_socket=c.tres_per_socket,
                    tres_per_task=c.tres_per_task,
                    tres_req_str=c.tres_req_str,
                    user_id=c.user_id,
                )
                out[c.job_id] = d
            return out

    class DictNode:
        """pyslurm.node (pyslurm/pyslurm.pyx v22.5.3, node.get_node())."""

        def get(self) -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {}
            for c in cluster.nodes:
                # node_state_string() of the state without DRAIN/FAIL/POWERED_DOWN/...,
                # which are appended as "+DRAIN", "+FAIL", "+POWER"
                base = c.base_state + ("*" if "NOT_RESPONDING" in c.state_flags else "")
                extra = {"DRAIN": "+DRAIN", "FAIL": "+FAIL", "POWERED_DOWN": "+POWER", "COMPLETING": "+COMPLETING"}
                state = base + "".join(extra[f] for f in c.state_flags if f in extra)
                out[c.name] = {
                    "name": c.name,
                    "cpus": c.cpus,
                    "real_memory": c.real_memory,
                    "gres": c.gres.split(",") if c.gres else [],
                    "partitions": c.partitions.split(",") if c.partitions else [],
                    "tres_fmt_str": c.tres_fmt_str,
                    "state": state,
                }
            return out

    if dict_jobs:
        module.job = DictJob  # type: ignore[attr-defined]
    if dict_nodes:
        module.node = DictNode  # type: ignore[attr-defined]
    if object_api:
        module.Job = job_class  # type: ignore[attr-defined]
        module.Jobs = Jobs  # type: ignore[attr-defined]
        module.Node = ObjectNode  # type: ignore[attr-defined]
        module.Nodes = Nodes  # type: ignore[attr-defined]
        module.JobSubmitDescription = JobSubmitDescription  # type: ignore[attr-defined]
    return module


def fake_cluster(squeue: Mapping[str, Any], sinfo: Mapping[str, Any]) -> FakeCluster:
    return FakeCluster([c_job(r) for r in squeue["jobs"]], [c_node(r) for r in sinfo["nodes"]])


def replay(squeue: Mapping[str, Any], sinfo: Mapping[str, Any]) -> Callable[..., str]:
    """A command runner answering squeue, sinfo, scontrol show config and the association tree."""
    outputs: dict[tuple[str, ...], str] = {
        ("squeue", "--json", "--all"): json.dumps(squeue),
        ("sinfo", "--json", "--all"): json.dumps(sinfo),
        ("scontrol", "show", "config"): CONFIG,
        ("scontrol", "show", "assoc_mgr", "flags=assoc"): (FIXTURES / "scontrol-show-assoc-mgr.txt").read_text(),
    }

    def run(argv: Sequence[str], timeout: float, *, env: Mapping[str, str] | None = None) -> str:
        return outputs[tuple(argv)]

    return run


def cli_snapshot(squeue: Mapping[str, Any], sinfo: Mapping[str, Any]) -> Snapshot:
    return CliSource(runner=replay(squeue, sinfo), environ={}, clock=lambda: NOW).fetch_snapshot()


def pyslurm_source(
    module: ModuleType, squeue: Mapping[str, Any], sinfo: Mapping[str, Any], **kwargs: Any
) -> PyslurmSource:
    host = PyslurmHost(replay(squeue, sinfo), {}, lambda: NOW, {0: "root"}.__getitem__)
    return PyslurmSource(module, host=host, **kwargs)


def without(snapshot: Snapshot, name: str) -> Snapshot:
    """The snapshot with one TRES left out of every node and job."""
    nodes = tuple(
        Node(n.name, n.partitions, n.state, MappingProxyType({k: v for k, v in n.tres.items() if k != name}))
        for n in snapshot.nodes
    )
    jobs = tuple(
        replace(j, tres=MappingProxyType({k: v for k, v in j.tres.items() if k != name})) for j in snapshot.jobs
    )
    return replace(snapshot, nodes=nodes, jobs=jobs)


# Versions and the shapes they carry (see make_pyslurm).
DICT_ONLY: dict[str, Any] = {"version": "22.5.0", "object_api": False}
BOTH: dict[str, Any] = {"version": "22.5.3"}
OBJECTS_ONLY: dict[str, Any] = {"version": "22.5.3", "dict_jobs": False, "dict_nodes": False}
OBJECTS_25: dict[str, Any] = {"version": "25.11.2", "dict_jobs": False, "dict_nodes": False, "tres_objects": True}


# --------------------------------------------------------------------------
# Reading: the same Snapshot as the CLI


def test_the_fixture_has_what_the_comparison_needs() -> None:
    cli = cli_snapshot(squeue_fixture(), sinfo_fixture())
    assert {j.state for j in cli.jobs} == {"RUNNING", "PENDING"}
    assert any(j.held for j in cli.jobs) and any(j.tres.get("gres/gpu") for j in cli.jobs)
    assert [n.name for n in cli.nodes] == ["vm"]


@pytest.mark.parametrize("shape", [DICT_ONLY, BOTH], ids=["dict-22.5.0", "both-22.5.3"])
def test_dict_api_gives_the_cli_snapshot_exactly(shape: dict[str, Any]) -> None:
    squeue, sinfo = squeue_fixture(), sinfo_fixture()
    module = make_pyslurm(fake_cluster(squeue, sinfo), **shape)
    assert pyslurm_source(module, squeue, sinfo).fetch_snapshot() == cli_snapshot(squeue, sinfo)


def test_object_api_gives_the_cli_snapshot_but_billing() -> None:
    """Up to 24.11 the objects carry no TRES strings, hence no billing TRES;
    every job id, account, state, priority, nice, hold, CPU, memory, node and
    GPU amount is the CLI's."""
    squeue, sinfo = squeue_fixture(), sinfo_fixture()
    module = make_pyslurm(fake_cluster(squeue, sinfo), **OBJECTS_ONLY)
    got = pyslurm_source(module, squeue, sinfo).fetch_snapshot()
    want = cli_snapshot(squeue, sinfo)
    assert not any("billing" in j.tres for j in got.jobs) and "billing" not in got.nodes[0].tres
    assert got == without(want, "billing")
    assert [j.job_id for j in got.jobs] == [j.job_id for j in want.jobs]


def test_object_api_with_25x_tres_objects_gives_the_cli_snapshot_exactly() -> None:
    squeue, sinfo = squeue_fixture(), sinfo_fixture()
    module = make_pyslurm(fake_cluster(squeue, sinfo), **OBJECTS_25)
    got = pyslurm_source(module, squeue, sinfo).fetch_snapshot()
    want = cli_snapshot(squeue, sinfo)
    assert got.jobs == want.jobs  # billing from requested/allocated_tres
    assert got == replace(without(want, "billing"), jobs=want.jobs)  # nodes have no TRES object


def test_forcing_the_object_api_when_both_exist() -> None:
    squeue, sinfo = squeue_fixture(), sinfo_fixture()
    module = make_pyslurm(fake_cluster(squeue, sinfo), **BOTH)
    got = pyslurm_source(module, squeue, sinfo, api="object").fetch_snapshot()
    assert got == without(cli_snapshot(squeue, sinfo), "billing")


def test_fields_the_comparison_covers_match_the_parsers_of_the_fixture() -> None:
    """Spelled out: ids, accounts, states, TRES, array tasks and holds."""
    squeue, sinfo = squeue_fixture(), sinfo_fixture()
    want_jobs = parse_squeue_json(squeue)
    want_nodes = parse_sinfo_json(sinfo)
    for shape in (DICT_ONLY, OBJECTS_ONLY):
        got = pyslurm_source(make_pyslurm(fake_cluster(squeue, sinfo), **shape), squeue, sinfo).fetch_snapshot()
        for mine, theirs in zip(got.jobs, want_jobs, strict=True):
            assert (
                mine.job_id,
                mine.account,
                mine.user,
                mine.partition,
                mine.state,
                mine.priority,
                mine.nice,
                mine.held,
                mine.submit_time,
                mine.array_tasks,
            ) == (
                theirs.job_id,
                theirs.account,
                theirs.user,
                theirs.partition,
                theirs.state,
                theirs.priority,
                theirs.nice,
                theirs.held,
                theirs.submit_time,
                theirs.array_tasks,
            )
            assert {k: v for k, v in mine.tres.items() if k != "billing"} == {
                k: v for k, v in theirs.tres.items() if k != "billing"
            }
        assert [(n.name, n.partitions, n.state) for n in got.nodes] == [
            (n.name, n.partitions, n.state) for n in want_nodes
        ]
    held = {j.job_id for j in want_jobs if j.held}
    assert held == {"19", "20"}


def _with_extra_jobs(squeue: dict[str, Any]) -> dict[str, Any]:
    """The fixture plus a throttled pending array (0-9%4), a pending het job
    of two components, and a user-set negative nice (printed unsigned)."""
    base = next(r for r in squeue["jobs"] if r["job_id"] == 3)
    array = {
        **base,
        "job_id": 30,
        "array_job_id": 30,
        "array_task_string": "0-9%4",
        "array_max_tasks": 4,
        "tres_per_node": "",
        "tres_req_str": "cpu=1,mem=2G,node=1,billing=1",
        "memory_per_node": 2048,
        "cpus": 1,
    }
    leader = {
        **base,
        "job_id": 40,
        "het_job_id": 40,
        "het_job_offset": 0,
        "tres_per_node": "gres:gpu:a100:1",
        "tres_req_str": "cpu=1,mem=1G,node=1,billing=1,gres/gpu=1,gres/gpu:a100=1",
        "memory_per_node": 1024,
        "cpus": 1,
    }
    component = {
        **leader,
        "job_id": 41,
        "het_job_offset": 1,
        "tres_per_node": "",
        "tres_req_str": "cpu=4,mem=4G,node=1,billing=4",
        "memory_per_node": 4096,
        "cpus": 4,
    }
    negative = {
        **base,
        "job_id": 50,
        "nice": 2**32 - 5,
        "tres_per_node": "",
        "tres_req_str": "cpu=1,mem=1G,node=1,billing=1",
        "memory_per_node": 1024,
        "cpus": 1,
    }
    return {**squeue, "jobs": [*squeue["jobs"], array, leader, component, negative]}


@pytest.mark.parametrize("shape", [DICT_ONLY, OBJECTS_ONLY, OBJECTS_25], ids=["dict", "object", "object-25"])
def test_arrays_het_jobs_and_negative_nice_read_alike(shape: dict[str, Any]) -> None:
    squeue, sinfo = _with_extra_jobs(squeue_fixture()), sinfo_fixture()
    source = pyslurm_source(make_pyslurm(fake_cluster(squeue, sinfo), **shape), squeue, sinfo)
    got = source.fetch_snapshot()
    want = cli_snapshot(squeue, sinfo)
    assert without(got, "billing") == without(want, "billing")
    by_id: dict[str, list[Job]] = {}
    for job in got.jobs:
        by_id.setdefault(job.job_id, []).append(job)
    assert by_id["30"][0].array_tasks == 10  # the throttle does not reduce the count
    [het] = by_id["40"]  # both components under the leader's id, summed (slurm.parse.jobs)
    assert (het.tres["cpu"], het.tres["gres/gpu"], het.tres["gres/gpu:a100"]) == (5, 1, 1)
    assert by_id["50"][0].nice == -5
    assert got.het_leaders == want.het_leaders == frozenset({"40"})


def test_partitions_are_selected_as_the_cli_does() -> None:
    squeue, sinfo = squeue_fixture(), sinfo_fixture()
    module = make_pyslurm(fake_cluster(squeue, sinfo), **BOTH)
    assert pyslurm_source(module, squeue, sinfo, partitions=["other"]).fetch_snapshot().jobs == ()
    assert len(pyslurm_source(module, squeue, sinfo, partitions="main").fetch_snapshot().jobs) == 20


def test_fetch_asks_libslurm_for_whole_array_task_lists() -> None:
    squeue, sinfo = squeue_fixture(), sinfo_fixture()
    environ: dict[str, str] = {"SLURM_BITSTR_LEN": "64"}
    source = PyslurmSource(
        make_pyslurm(fake_cluster(squeue, sinfo), **BOTH),
        host=PyslurmHost(replay(squeue, sinfo), environ, lambda: NOW),
    )
    source.fetch_snapshot()
    assert environ["SLURM_BITSTR_LEN"] == "0"


@pytest.mark.parametrize(
    "error",
    [
        RPCError(1800, "Unable to contact slurm controller (connect failure)"),
        ValueError("Unable to contact slurm controller (connect failure)", 1800),
    ],
)
def test_load_failure_is_one_slurm_read_error(error: Exception) -> None:
    squeue, sinfo = squeue_fixture(), sinfo_fixture()
    cluster = fake_cluster(squeue, sinfo)
    cluster.load_error = error
    shape = OBJECTS_ONLY if isinstance(error, RPCError) else DICT_ONLY
    with pytest.raises(SlurmReadError, match=r"^pyslurm: loading jobs failed: Unable to contact slurm controller"):
        pyslurm_source(make_pyslurm(cluster, **shape), squeue, sinfo).fetch_snapshot()


def test_an_unreadable_job_is_skipped_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    squeue, sinfo = squeue_fixture(), sinfo_fixture()
    cluster = fake_cluster(squeue, sinfo)
    cluster.jobs[0].account = None  # a job without account cannot be charged to anyone
    got = pyslurm_source(make_pyslurm(cluster, **OBJECTS_ONLY), squeue, sinfo).fetch_snapshot()
    assert "1" not in {j.job_id for j in got.jobs} and len(got.jobs) == 19
    assert "job 1 skipped" in caplog.text


@pytest.mark.parametrize("shape", [DICT_ONLY, BOTH, OBJECTS_25], ids=["dict-22.5.0", "both-22.5.3", "objects-25.11"])
@pytest.mark.parametrize("cpu", ["-2", "99999999999999999999", "9" * 400])
def test_a_bad_tres_amount_skips_the_job_as_the_cli_does(
    shape: dict[str, Any], cpu: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The records pyslurm gives go through the CLI's parser: the same job skipped, the same one line."""
    squeue, sinfo = squeue_fixture(), sinfo_fixture()
    squeue["jobs"][0]["tres_alloc_str"] = f"cpu={cpu},mem=8192M,node=1"
    cluster = fake_cluster(squeue, sinfo)
    got = pyslurm_source(make_pyslurm(cluster, **shape), squeue, sinfo).fetch_snapshot()
    assert got.jobs == cli_snapshot(squeue, sinfo).jobs
    assert "1" not in {j.job_id for j in got.jobs} and len(got.jobs) == 19
    lines = [r.getMessage() for r in caplog.records if "job 1 skipped" in r.getMessage()]
    assert len(lines) == 2  # once through pyslurm, once through the CLI
    assert lines[0] == lines[1] and lines[0].startswith("job 1 skipped: tres_alloc_str: cpu=")


def test_an_unknown_uid_falls_back_to_the_number() -> None:
    squeue, sinfo = squeue_fixture(), sinfo_fixture()
    cluster = fake_cluster(squeue, sinfo)
    cluster.passwd = {}  # uid_to_name() raises KeyError
    got = pyslurm_source(make_pyslurm(cluster, **OBJECTS_ONLY), squeue, sinfo).fetch_snapshot()
    assert {j.user for j in got.jobs} == {"0"}


@pytest.mark.parametrize(
    ("pyslurm_state", "sinfo_state", "flags"),
    [
        ("MIXED", "mixed", []),
        ("IDLE+DRAIN", "idle", ["DRAIN"]),  # object API
        ("IDLE*+DRAIN", "idle", ["NOT_RESPONDING", "DRAIN"]),  # dict API
        ("IDLE+NOT_RESPONDING+DRAIN", "idle", ["NOT_RESPONDING", "DRAIN"]),
        ("DOWN+POWER", "down", ["POWERED_DOWN"]),
        ("IDLE~", "idle", ["POWERED_DOWN"]),
        ("INVAL", "inval", []),
    ],
)
def test_node_states_read_as_sinfo_json_states(pyslurm_state: str, sinfo_state: str, flags: list[str]) -> None:
    record = {**sinfo_fixture()["nodes"][0], "state": sinfo_state, "state_flags": flags}
    assert parse_pyslurm_node_state(pyslurm_state) == parse_sinfo_json({"nodes": [record]})[0].state


def test_drained_node_is_left_out_of_capacity_by_both_shapes() -> None:
    squeue, sinfo = squeue_fixture(), sinfo_fixture()
    cluster = fake_cluster(squeue, sinfo)
    cluster.nodes[0].base_state, cluster.nodes[0].state_flags = "IDLE", ["DRAIN"]
    for shape in (DICT_ONLY, OBJECTS_ONLY):
        node = pyslurm_source(make_pyslurm(cluster, **shape), squeue, sinfo).fetch_snapshot().nodes[0]
        assert node.state == "idle+drain" and not node.eligible


@pytest.mark.parametrize(
    ("gres", "text", "tres"),
    [
        ("gpu:8", "gpu:8", {"gres/gpu": 8}),
        (
            "gpu:a100:4(S:0-1),gpu:v100:2",
            "gpu:a100:4,gpu:v100:2",
            {"gres/gpu": 6, "gres/gpu:a100": 4, "gres/gpu:v100": 2},
        ),
        ("gpu:8(IDX:0-7)", "gpu:8", {"gres/gpu": 8}),
        ("gres/gpu:2", "gres/gpu:2", {"gres/gpu": 2}),  # 23.11+ spelling
    ],
)
def test_gres_dicts_read_like_gres_strings(gres: str, text: str, tres: dict[str, int]) -> None:
    from slurm_drf.slurm.parse.amounts import parse_gres

    assert render_gres_dict(to_gres_dict(gres)) == text
    assert parse_gres(text) == tres == parse_gres(gres)


# --------------------------------------------------------------------------
# pyslurm_usable


def _importer(module: ModuleType | None) -> Callable[[str], ModuleType]:
    def load(name: str) -> ModuleType:
        if module is None:
            raise ModuleNotFoundError("No module named 'pyslurm'")
        return module

    return load


def test_usable_when_the_release_matches_despite_the_spelling() -> None:
    """pyslurm says 22.5.3, Slurm says 22.05.8: the same release."""
    module = make_pyslurm(FakeCluster([], []), **BOTH)
    usable, why = pyslurm_usable(importer=_importer(module), slurm_release="22.05.8")
    assert usable, why


def test_not_usable_when_missing() -> None:
    usable, why = pyslurm_usable(importer=_importer(None), slurm_release="22.05.8")
    assert not usable
    assert why == "pyslurm does not import (ModuleNotFoundError: No module named 'pyslurm')"


@pytest.mark.parametrize(("version", "release"), [("23.2.3", "22.05.8"), ("22.5.3", "23.02.7"), ("24.11.0", "24.05.4")])
def test_not_usable_when_major_minor_differs(version: str, release: str) -> None:
    module = make_pyslurm(FakeCluster([], []), version=version)
    usable, why = pyslurm_usable(importer=_importer(module), slurm_release=release)
    assert not usable
    assert f"pyslurm {version}" in why and f"Slurm here is {release}" in why and "major.minor" in why


def test_not_usable_when_the_import_itself_fails() -> None:
    def broken(name: str) -> ModuleType:
        raise OSError("libslurm.so.38: cannot open shared object file")

    usable, why = pyslurm_usable(importer=broken, slurm_release="22.05.8")
    assert not usable and "libslurm.so.38" in why


def test_not_usable_without_a_version_or_an_api() -> None:
    bare = ModuleType("pyslurm")
    assert pyslurm_usable(importer=_importer(bare), slurm_release="22.05.8") == (
        False,
        "pyslurm reports no readable version ('')",
    )
    bare.__version__ = "22.5.3"  # type: ignore[attr-defined]
    usable, why = pyslurm_usable(importer=_importer(bare), slurm_release="22.05.8")
    assert not usable and "neither job()/node() nor Jobs.load()/Nodes.load()" in why


def test_not_usable_when_the_slurm_release_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("slurm_drf.slurm.pyslurm_source._slurm_release", lambda: None)
    module = make_pyslurm(FakeCluster([], []), **BOTH)
    assert pyslurm_usable(importer=_importer(module)) == (False, "cannot tell the Slurm release (sinfo --version)")


# --------------------------------------------------------------------------
# Writing


class RecordingScontrol(ScontrolWriter):
    """A ScontrolWriter whose scontrol is a fake: records the lines it would feed."""

    def __init__(self, errors: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.errors = dict(errors or {})

    def run_lines(self, lines: Sequence[str]) -> tuple[dict[str, str], list[str]]:
        self.lines.extend(lines)
        return {job: message for job, message in self.errors.items() if f"jobid={job} " in " ".join(lines)}, []


def writer_for(
    cluster: FakeCluster, shape: dict[str, Any] | None = None, **kwargs: Any
) -> tuple[PyslurmWriter, RecordingScontrol]:
    scontrol = RecordingScontrol()
    return PyslurmWriter(make_pyslurm(cluster, **(shape or BOTH)), scontrol=scontrol, **kwargs), scontrol


def test_the_fake_drops_zero_as_pyslurm_does() -> None:
    """The reason for the scontrol path: nice=0 through pyslurm sends nothing."""
    module = make_pyslurm(FakeCluster([], []), **BOTH)
    assert module.JobSubmitDescription(nice=0)._create_job_submit_desc(is_update=True) == {}
    assert module.JobSubmitDescription(site_factor=0)._create_job_submit_desc(is_update=True) == {}
    assert module.JobSubmitDescription(nice=-3)._create_job_submit_desc(is_update=True) == {"nice": -3}


@pytest.mark.parametrize("mode", ["nice", "site_factor"])
def test_zero_goes_through_scontrol_and_the_rest_through_pyslurm(mode: str) -> None:
    cluster = FakeCluster([], [])
    writer, scontrol = writer_for(cluster)
    result = writer.apply([Write("3", mode, -2000), Write("6", mode, 0), Write("7", mode, 4000)])
    assert cluster.updates == [(3, {mode: -2000}), (7, {mode: 4000})]
    keyword = {"nice": "nice", "site_factor": "sitefactor"}[mode]
    assert scontrol.lines == [f"update jobid=6 {keyword}=0"]
    assert result.applied == ("3", "6", "7") and not result.gone and not result.failed


def test_priority_goes_through_pyslurm_and_zero_is_never_written() -> None:
    cluster = FakeCluster([], [])
    writer, scontrol = writer_for(cluster)
    assert writer.apply([Write("3", "priority", 5000)]).applied == ("3",)
    assert cluster.updates == [(3, {"priority": 5000})]
    with pytest.raises(SlurmWriteError, match="refusing to write priority 0"):
        writer.apply([Write("7", "priority", 4000), Write("6", "priority", 0)])
    assert cluster.updates == [(3, {"priority": 5000})] and scontrol.lines == []  # nothing of the batch left


def test_bad_job_ids_and_values_are_refused_before_anything_is_written() -> None:
    cluster = FakeCluster([], [])
    writer, scontrol = writer_for(cluster)
    for bad in (Write("8_3", "nice", 10), Write("9", "nice", 2**31), Write("9", "bogus", 1)):
        with pytest.raises(SlurmWriteError):
            writer.apply([Write("3", "nice", 10), bad])
    assert cluster.updates == [] and scontrol.lines == []


def test_a_job_that_ended_is_gone_and_another_error_fails_only_that_job() -> None:
    cluster = FakeCluster([], [])
    cluster.update_errors = {
        6: RPCError(2017, "Invalid job id specified"),
        7: RPCError(2020, "Job/step already completing or completed"),
        9: RPCError(2048, "Requested partition configuration not available now"),
    }
    writer, _ = writer_for(cluster)
    result = writer.apply([Write(str(i), "nice", 100 + i) for i in (3, 6, 7, 9)])
    assert result.applied == ("3",)
    assert set(result.gone) == {"6", "7"}
    assert dict(result.failed) == {"9": "Requested partition configuration not available now"}


@pytest.mark.parametrize(
    "error",
    [
        RPCError(1800, "Unable to contact slurm controller (connect failure)"),
        RPCError(2002, "Access/permission denied"),
        RPCError(5004, "Socket timed out on send/recv operation"),
    ],
)
def test_controller_trouble_raises_as_the_scontrol_writer_does(error: RPCError) -> None:
    cluster = FakeCluster([], [])
    cluster.update_errors = {3: error}
    writer, _ = writer_for(cluster)
    with pytest.raises(SlurmWriteError, match=re.escape(f"pyslurm update of job 3: {error.msg}")):
        writer.apply([Write("3", "nice", 10)])


def test_het_leaders_go_through_scontrol() -> None:
    cluster = FakeCluster([], [])
    writer, scontrol = writer_for(cluster)
    result = writer.apply([Write("40", "nice", 10, het_leader=True), Write("3", "nice", 20)])
    assert scontrol.lines == ["update jobid=40 nice=10"] and cluster.updates == [(3, {"nice": 20})]
    assert result.applied == ("40", "3")


def test_a_cycle_sends_the_het_leader_of_its_own_snapshot_through_scontrol(tmp_path: Path) -> None:
    squeue, sinfo = _with_extra_jobs(squeue_fixture()), sinfo_fixture()
    cluster = fake_cluster(squeue, sinfo)
    module = make_pyslurm(cluster, **BOTH)
    source = pyslurm_source(module, squeue, sinfo)
    scontrol = RecordingScontrol()
    report = run_cycle(source, PyslurmWriter(module, scontrol=scontrol), Config(), StateStore(tmp_path))
    assert report.snapshot.het_leaders == frozenset({"40"})
    assert [w.job_id for w in report.writes if w.het_leader] == ["40"]
    assert [line for line in scontrol.lines if "jobid=40 " in line] == [
        f"update jobid=40 nice={w.value}" for w in report.writes if w.job_id == "40"
    ]
    assert cluster.updates and 40 not in {job for job, _ in cluster.updates}  # the others through pyslurm


def test_scontrol_errors_merge_into_the_result() -> None:
    cluster = FakeCluster([], [])
    scontrol = RecordingScontrol({"6": "Invalid job id specified", "8": "Job violates accounting policy"})
    writer = PyslurmWriter(make_pyslurm(cluster, **BOTH), scontrol=scontrol)
    result = writer.apply([Write("6", "nice", 0), Write("8", "nice", 0), Write("3", "nice", 5)])
    assert result.applied == ("3",) and result.gone == ("6",)
    assert dict(result.failed) == {"8": "Job violates accounting policy"}


def test_dict_only_pyslurm_writes_everything_through_scontrol() -> None:
    cluster = FakeCluster([], [])
    writer, scontrol = writer_for(cluster, DICT_ONLY)
    assert writer.apply([Write("3", "nice", 10), Write("6", "site_factor", 0)]).applied == ("3", "6")
    assert scontrol.lines == ["update jobid=3 nice=10", "update jobid=6 sitefactor=0"] and cluster.updates == []


def test_run_lines_and_empty_apply() -> None:
    cluster = FakeCluster([], [])
    writer, scontrol = writer_for(cluster)
    assert writer.apply([]).applied == () and scontrol.lines == []
    assert writer.run_lines(["hold 6", "release 6", "update jobid=6 nice=0"]) == ({}, [])
    assert scontrol.lines == ["hold 6", "release 6", "update jobid=6 nice=0"] and cluster.updates == []
