"""What the simulator plays: jobs (who, when, how long, how much) and the cluster shape.

Sits at the start of the simulator's flow: `scenarios` and `importers`
build a `Workload`; `engine` plays it. Pure data and validation, no I/O.

Placement model (kept simple on purpose): every node has the same TRES
(`NodeType`). A job asks for `nodes` nodes (1 unless the source says
more) and the same `cpu`, `mem` (MiB) and `gpu` on each of them; its whole
TRES, the amount the DRF engine sees, is the per-node demand times
`nodes`. Times are seconds from the start of the workload. `limit` is the
time limit the scheduler plans its backfill reservations with; `duration`
is how long the job really runs (never more than `limit`).

Accounts are flat unless the workload has an `AccountTree`: then each
account hangs under a path of parent accounts (`physics/theory` is the
account theory under physics), internal nodes carry weights against
their siblings, and the users of an account are its leaves (equal).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from types import MappingProxyType
from typing import Final

from slurm_drf.config import durations
from slurm_drf.errors import DrfError, InputError

# The TRES the simulator models, in Slurm's names; the engine is asked to
# order by exactly these.
RESOURCES: Final = ("cpu", "mem", "gres/gpu")

# What the simulator accepts. Its cost grows with the simulated time while
# jobs run or wait (a tick every interval) and with nodes and jobs (arrays of
# each), so a trace with absurd times or sizes would never finish or never
# fit in memory: refuse it with a message instead.
MAX_NODES: Final = 1_000_000
MAX_JOBS: Final = 10_000_000
MAX_SUBMIT_SECONDS: Final = 10 * 366 * 86_400  # submissions spread over at most ten years
MAX_JOB_SECONDS: Final = 366 * 86_400  # a run time or time limit of at most a year


class WorkloadError(InputError):
    """A workload file or option that cannot be simulated (exit code 2)."""

    category = "workload"


class SimulationError(DrfError):
    """The simulator broke one of its own invariants: a bug, exit code 1."""

    category = "simulate"


@dataclass(frozen=True, slots=True)
class NodeType:
    """The TRES of one node; every simulated node is one of these."""

    cpu: int = 64
    mem: int = 512_000
    gpu: int = 8

    def tres(self) -> dict[str, int]:
        return {"cpu": self.cpu, "mem": self.mem, "gres/gpu": self.gpu}

    def render(self) -> str:
        return f"cpu={self.cpu},mem={self.mem},gres/gpu={self.gpu}"


@dataclass(frozen=True, slots=True)
class WorkloadJob:
    """One job (or one task of an array) as the simulator plays it."""

    job_id: str
    account: str
    user: str
    submit: float
    duration: float
    limit: float
    cpu: int
    mem: int
    gpu: int
    nodes: int = 1
    # Tasks of one array share `array_id` (the array's job id) and differ in
    # `array_index`; they are submitted together and ordered as one record.
    array_id: str | None = None
    array_index: int = 0

    def total(self) -> tuple[int, int, int]:
        """The whole job's TRES: what the DRF engine counts."""
        return (self.cpu * self.nodes, self.mem * self.nodes, self.gpu * self.nodes)


@dataclass(frozen=True, slots=True)
class AccountTree:
    """Where the accounts of a workload sit in a tree of accounts (docs/rule.md §7).

    `parents` maps an account to the path of its parent account
    (`"physics"`, `"research/physics"`); an account not listed hangs from the
    root. The parents are internal nodes only: they hold no jobs.
    `weights` weighs an internal node (by its path) against its siblings
    (default 1); an account's own weight is the workload's `weights`, and
    the users of an account weigh 1 each.
    """

    parents: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    weights: Mapping[str, Fraction] = field(default_factory=lambda: MappingProxyType({}))

    def path(self, account: str) -> str:
        """The account's path from the root's child down: `physics/theory`."""
        parent = self.parents.get(account, "")
        return f"{parent}{TREE_SEPARATOR}{account}" if parent else account

    def weight(self, path: str) -> Fraction:
        return self.weights.get(path, Fraction(1))


TREE_SEPARATOR: Final = "/"


@dataclass(frozen=True, slots=True)
class Workload:
    """A named set of jobs, the cluster to play them on, and account weights."""

    name: str
    description: str
    jobs: tuple[WorkloadJob, ...]
    node_count: int
    node_type: NodeType = NodeType()
    weights: Mapping[str, Fraction] = field(default_factory=lambda: MappingProxyType({}))
    seed: int | None = None
    # What an importer left out and why, for the report.
    notes: tuple[str, ...] = ()
    # None: flat accounts (every account a child of the root).
    tree: AccountTree | None = None

    @property
    def accounts(self) -> tuple[str, ...]:
        """Every account with a job, by name."""
        return tuple(sorted({j.account for j in self.jobs}))

    def weight(self, account: str) -> Fraction:
        return self.weights.get(account, Fraction(1))


def validate_workload(workload: Workload) -> Workload:
    """The workload with jobs in submit order; WorkloadError for what cannot run.

    A job that cannot fit even on an empty cluster would wait forever and
    hold the whole queue behind its reservation: refuse it with a message
    that names it.
    """
    if workload.node_count < 1:
        raise WorkloadError(f"{workload.name}: the cluster needs at least one node, got {workload.node_count}")
    check_sizes(workload.name, workload.node_count, len(workload.jobs))
    node = workload.node_type
    if min(node.cpu, node.mem, node.gpu) < 0 or max(node.cpu, node.mem, node.gpu) == 0:
        raise WorkloadError(f"node type {node.render()}: expected non-negative TRES, not all zero")
    if not workload.jobs:
        raise WorkloadError(f"{workload.name}: no jobs to simulate")
    seen: set[str] = set()
    for job in workload.jobs:
        if job.job_id in seen:
            raise WorkloadError(f"{workload.name}: job {job.job_id}: duplicate job id")
        seen.add(job.job_id)
        _check_job(workload, job)
    for account, weight in workload.weights.items():
        if weight <= 0:
            raise WorkloadError(f"account {account}: weight must be > 0, got {weight}")
    if workload.tree is not None:
        check_tree(workload.name, workload.tree, workload.accounts)
    ordered = tuple(sorted(workload.jobs, key=lambda j: (j.submit, j.array_id or j.job_id, j.array_index)))
    return replace(workload, jobs=ordered)


def _check_job(workload: Workload, job: WorkloadJob) -> None:
    """Refuse a job that cannot run: times that are no numbers or out of range, no TRES, or more
    than an empty cluster of the workload's nodes holds."""
    where = f"{workload.name}: job {job.job_id}"
    node = workload.node_type
    if not (math.isfinite(job.submit) and math.isfinite(job.duration) and math.isfinite(job.limit)):
        raise WorkloadError(f"{where}: submit, duration and limit must be finite numbers")
    if job.duration <= 0 or job.limit < job.duration:
        raise WorkloadError(
            f"{where}: expected 0 < duration <= limit, got duration {job.duration} and limit {job.limit}"
        )
    _check_times(where, job)
    if min(job.cpu, job.mem, job.gpu) < 0 or job.nodes < 1:
        raise WorkloadError(f"{where}: expected non-negative TRES and at least one node")
    if job.cpu == job.mem == job.gpu == 0:
        raise WorkloadError(f"{where}: asks for no cpu, mem or gres/gpu")
    if job.nodes > workload.node_count or job.cpu > node.cpu or job.mem > node.mem or job.gpu > node.gpu:
        raise WorkloadError(
            f"{where}: needs {job.nodes} node(s) with cpu={job.cpu},mem={job.mem},gres/gpu={job.gpu} "
            f"each; the cluster has {workload.node_count} node(s) of {node.render()} "
            "(use --nodes or --node-tres)"
        )


def check_tree(name: str, tree: AccountTree, accounts: Sequence[str]) -> None:
    """Refuse a tree whose paths cannot be walked: empty names, accounts that are also parents, bad weights."""
    internal: set[str] = set()
    for account, parent in tree.parents.items():
        parts = parent.split(TREE_SEPARATOR)
        if not account or TREE_SEPARATOR in account or not all(parts):
            raise WorkloadError(
                f"{name}: tree: account {account!r} under {parent!r}: expected a name without "
                f"{TREE_SEPARATOR!r} under a path of non-empty names"
            )
        internal.update(TREE_SEPARATOR.join(parts[: i + 1]) for i in range(len(parts)))
    # Slurm's account names are unique in the whole tree: a parent is no account with jobs.
    parent_names = {path.rsplit(TREE_SEPARATOR, 1)[-1] for path in internal}
    for account in accounts:
        if account in parent_names:
            raise WorkloadError(f"{name}: tree: account {account} has jobs and is also a parent account")
    for path, weight in tree.weights.items():
        if path not in internal:
            raise WorkloadError(f"{name}: tree: weight of {path!r}, which is not a parent account")
        if weight <= 0:
            raise WorkloadError(f"{name}: tree: {path}: weight must be > 0, got {weight}")


def check_sizes(name: str, nodes: int, jobs: int) -> None:
    """Refuse a cluster or a job count the simulator could not hold (before anything is allocated)."""
    if nodes > MAX_NODES:
        raise WorkloadError(f"{name}: {nodes} nodes; the simulator takes at most {MAX_NODES:,}")
    if jobs > MAX_JOBS:
        raise WorkloadError(f"{name}: {jobs} jobs; the simulator takes at most {MAX_JOBS:,}")


def _check_times(where: str, job: WorkloadJob) -> None:
    if not 0 <= job.submit <= MAX_SUBMIT_SECONDS:
        raise WorkloadError(
            f"{where}: submitted {job.submit:g} s after the first job; the simulator takes "
            f"submissions within {MAX_SUBMIT_SECONDS} s ({format_duration(MAX_SUBMIT_SECONDS)})"
        )
    if job.limit > MAX_JOB_SECONDS:
        what, value = ("run time", job.duration) if job.duration > MAX_JOB_SECONDS else ("time limit", job.limit)
        raise WorkloadError(
            f"{where}: {what} {value:g} s; the simulator takes at most "
            f"{MAX_JOB_SECONDS} s ({format_duration(MAX_JOB_SECONDS)})"
        )


def fit_node_type(jobs: Sequence[WorkloadJob], node: NodeType) -> NodeType:
    """`node`, grown where a job's per-node demand exceeds it (for imported traces)."""
    if not jobs:
        return node
    return NodeType(
        cpu=max(node.cpu, *(j.cpu for j in jobs)),
        mem=max(node.mem, *(j.mem for j in jobs)),
        gpu=max(node.gpu, *(j.gpu for j in jobs)),
    )


def nodes_for_load(jobs: Sequence[WorkloadJob], node: NodeType, load: float) -> int:
    """How many nodes make the jobs' offered load `load` in their busiest resource.

    Offered load of resource r = (sum of demand_r x duration) / (capacity_r x
    span of submit times, plus the mean duration).
    """
    if not jobs:
        return 1
    span = max(j.submit for j in jobs) - min(j.submit for j in jobs)
    span += sum(j.duration for j in jobs) / len(jobs)
    needed = 1.0
    for index, per_node in enumerate((node.cpu, node.mem, node.gpu)):
        if per_node <= 0:
            continue
        work = sum(j.total()[index] * j.duration for j in jobs)
        needed = max(needed, work / (per_node * span * load))
    largest = max(j.nodes for j in jobs)
    return max(largest, math.ceil(needed))


# --------------------------------------------------------------------------
# Small parsers shared by the CLI and the importers


def parse_duration(text: str) -> float:
    """Seconds from `90`, `90s`, `15m`, `12h` or `2d` (units in capitals too)."""
    try:
        return durations.parse_duration(text, durations.SIMULATE_SYNTAX)
    except ValueError:
        raise WorkloadError(f"expected a duration such as 90s, 15m, 12h or 2d, got {text!r}") from None


_MEM_UNITS: Final = {"": 1.0, "k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0**2, "p": 1024.0**3}
_MEM = re.compile(r"^(\d+(?:\.\d+)?)([kmgtp]?)b?$")


def parse_mem(text: str) -> int:
    """MiB from Slurm's memory notation: `4000`, `4000M`, `64G`, `1.5T` (no unit: MiB)."""
    match = _MEM.match(text.strip().lower())
    if match is None:
        raise WorkloadError(f"expected a memory size such as 4000M or 64G, got {text!r}")
    return math.ceil(float(match.group(1)) * _MEM_UNITS[match.group(2)])


def parse_node_type(text: str) -> NodeType:
    """A NodeType from `cpu=64,mem=512G,gres/gpu=8` (`gpu=` accepted too)."""
    values = {"cpu": 0, "mem": 0, "gpu": 0}
    for part in (p for p in text.split(",") if p.strip()):
        name, _, amount = part.partition("=")
        name = name.strip().lower()
        try:
            if name == "cpu":
                values["cpu"] = int(amount)
            elif name == "mem":
                values["mem"] = parse_mem(amount)
            elif name in ("gpu", "gres/gpu"):
                values["gpu"] = int(amount)
            else:
                raise WorkloadError(f"--node-tres: unknown TRES {name!r} (expected cpu, mem, gres/gpu)")
        except ValueError as error:
            raise WorkloadError(f"--node-tres: {part.strip()!r} is not a whole number") from error
    node = NodeType(**values)
    if min(node.cpu, node.mem, node.gpu) < 0 or max(node.cpu, node.mem, node.gpu) == 0:
        raise WorkloadError(f"--node-tres: expected cpu=N,mem=SIZE,gres/gpu=N, got {text!r}")
    return node


def format_duration(seconds: float) -> str:
    """A short human duration: `45s`, `12m`, `3h05m`, `2d04h`."""
    if not math.isfinite(seconds):
        return "-"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"
