"""A workload as timed submissions to a real Slurm. Pure.

Sits at the start of a replay: `check_trace` refuses, before anything
reaches Slurm, what no replay may hand to its tools (below) and what
`simulate` refuses (`sim.workload.validate_workload`, the one validation
of times and sizes both share); `build_submissions` compresses the
workload's times (a job submitted at trace time t is submitted t /
compression wall seconds after the replay starts and sleeps its run time
/ compression), bounded as the simulator bounds trace times; the other
`check_*` refuse what cannot be replayed faithfully, and
`build_sbatch_argv` and `build_job_script` say exactly what is handed to
sbatch (an argv list and a script on stdin; nothing goes through a shell
on our side), as the user `users.plan_users` picked.

Names. Every name a replay hands to sbatch, sacctmgr, useradd or runuser
(an account, a parent account, a user, a partition, the cluster) follows
one rule, `SLURM_NAME`: letters, digits, `.`, `_` and `-`, starting with a
letter, a digit or `_`, at most 64 characters. A name outside it is
refused, never escaped: `--help` is an option to every tool, sacctmgr
reads `a,b` as two accounts and `cluster=prod` as a field of its own, and
no argument holds a NUL. A trace job's id may also hold `+` (a component
of a heterogeneous job, `1234+0`); it reaches sbatch only in the job's
comment and, made plain, in its name.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Final

from slurm_drf.errors import InputError, shorten
from slurm_drf.model.types import Node
from slurm_drf.sim.workload import (
    MAX_JOB_SECONDS,
    MAX_SUBMIT_SECONDS,
    TREE_SEPARATOR,
    NodeType,
    Workload,
    WorkloadJob,
    validate_workload,
)

# Every job a replay submits is named so; `squeue` and `sacct` show it.
JOB_NAME_PREFIX: Final = "drf-replay-"
# Slurm's defaults where SchedulerParameters leaves them out.
DEFAULT_SCHED_INTERVAL: Final = 60
DEFAULT_BF_INTERVAL: Final = 30
# A job shorter than this many wall seconds measures process start-up, not scheduling.
MIN_JOB_SECONDS: Final = 1.0
# Seconds added to each job's time limit: the sleep ends on its own, never killed at its limit.
LIMIT_MARGIN: Final = 5.0
# The memory of a job that asks for none (an SWF job without memory): Slurm's smallest request. Slurm reads
# --mem=0, and no --mem at all where slurm.conf sets no DefMemPerCPU or DefMemPerNode, as all of each node's
# memory; the simulator counts such a job as holding no memory.
MIN_MEM_MIB: Final = 1

# The one rule for a name handed to Slurm's tools (the module docstring says why).
MAX_NAME_LENGTH: Final = 64
SLURM_NAME: Final = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9._-]{{0,{MAX_NAME_LENGTH - 1}}}")
NAME_RULE: Final = (
    f"letters, digits, '.', '_' and '-', starting with a letter, a digit or '_', at most {MAX_NAME_LENGTH} characters"
)
# A trace job's id: a name, or a heterogeneous job's component (`1234+0`).
_JOB_ID: Final = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9._+-]{{0,{MAX_NAME_LENGTH - 1}}}")


class ReplayInputError(InputError):
    """A trace, option or cluster that cannot be replayed (exit code 2)."""

    category = "replay"


def shown(text: str) -> str:
    """`text` quoted for a message: control characters escaped, a long one cut (`errors.shorten`)."""
    return shorten(repr(text), 80)


def is_slurm_name(text: str) -> bool:
    return SLURM_NAME.fullmatch(text) is not None


def check_name(text: str, what: str) -> str:
    """`text` if it follows the one rule for a name handed to Slurm's tools; else ReplayInputError, `what`
    saying where it comes from (`trace.swf: job 12: account`)."""
    if SLURM_NAME.fullmatch(text) is None:
        raise ReplayInputError(f"{what} {shown(text)} is not a name Slurm's tools take as one word ({NAME_RULE})")
    return text


def check_job(job: WorkloadJob, where: str) -> None:
    """Refuse a job whose id, account or user breaks the rule for names (`where`: the trace's name)."""
    if _JOB_ID.fullmatch(job.job_id) is None:
        raise ReplayInputError(f"{where}: job {shown(job.job_id)}: the job id is not {NAME_RULE} (or '+')")
    check_name(job.account, f"{where}: job {job.job_id}: account")
    if job.user:  # none: `users.plan_users` says whether the job can be submitted all the same
        check_name(job.user, f"{where}: job {job.job_id}: user")


def check_trace(workload: Workload) -> None:
    """Refuse, in one line naming the trace, the job and the field, a name no replay may hand to Slurm's
    tools (`check_job`, `check_name`), then whatever `simulate` refuses of the same workload
    (`validate_workload`: times, sizes, ids): before anything is created or submitted, and before Slurm
    is asked anything."""
    for job in workload.jobs:
        check_job(job, workload.name)
    if workload.tree is not None:
        for account, parent in sorted(workload.tree.parents.items()):
            for name in parent.split(TREE_SEPARATOR):
                check_name(name, f"{workload.name}: tree: parent of account {account}")
    validate_workload(workload)


@dataclass(frozen=True, slots=True)
class Submission:
    """One trace job as the replay submits it; times in wall seconds from the replay's start."""

    index: int  # into workload.jobs
    job: WorkloadJob
    at: float
    sleep: float
    limit: float


def build_submissions(workload: Workload, compression: float) -> tuple[Submission, ...]:
    """Every job of `workload`, `compression` times faster, in submission order."""
    if not (compression > 0 and math.isfinite(compression)):
        raise ReplayInputError(f"--compress must be a number > 0, got {compression}")
    subs = [
        Submission(
            index=index,
            job=job,
            at=job.submit / compression,
            sleep=job.duration / compression,
            limit=max(job.limit, job.duration) / compression + LIMIT_MARGIN,
        )
        for index, job in enumerate(workload.jobs)
    ]
    for sub in subs:
        _check_wall_times(sub, compression, workload.name)
    return tuple(sorted(subs, key=lambda s: (s.at, s.index)))


def _check_wall_times(sub: Submission, compression: float, name: str) -> None:
    """Refuse a submission whose wait, sleep or time limit is no number or past the simulator's bounds on
    trace times (`MAX_SUBMIT_SECONDS`, `MAX_JOB_SECONDS`), now in wall seconds: what reaches a sleep or
    sbatch's --time stays a number of a few digits whatever the trace or --compress said."""
    where = f"{name}: job {sub.job.job_id}: --compress {compression:g}"
    if not 0 <= sub.at <= MAX_SUBMIT_SECONDS:
        raise ReplayInputError(
            f"{where} would submit it {sub.at:g} s after the replay starts; a replay submits within "
            f"{MAX_SUBMIT_SECONDS} s"
        )
    limit = max(sub.job.limit, sub.job.duration) / compression
    if not (sub.sleep > 0 and limit <= MAX_JOB_SECONDS):
        raise ReplayInputError(
            f"{where} would make it run {sub.sleep:g} s with a time limit of {limit:g} s; a replay runs a job "
            f"for more than 0 and at most {MAX_JOB_SECONDS} s"
        )


def eligible_shapes(nodes: Sequence[Node]) -> list[NodeType]:
    """The CPUs, memory and GPUs of every node that can run jobs; refused when there is none."""
    shapes = [
        NodeType(int(n.tres.get("cpu", 0)), int(n.tres.get("mem", 0)), int(n.tres.get("gres/gpu", 0)))
        for n in nodes
        if n.eligible
    ]
    if not shapes:
        raise ReplayInputError("the cluster has no node that can run jobs (every node down, drained or powered down)")
    return shapes


def check_fits(workload: Workload, nodes: Sequence[Node]) -> None:
    """Refuse the first job no set of the cluster's nodes can hold, naming it."""
    capacity = [(shape.cpu, shape.mem, shape.gpu) for shape in eligible_shapes(nodes)]
    largest = max(capacity, key=lambda c: (c[0], c[1], c[2]))
    for job in workload.jobs:
        fitting = sum(1 for cpu, mem, gpu in capacity if cpu >= job.cpu and mem >= job.mem and gpu >= job.gpu)
        if fitting < job.nodes:
            raise ReplayInputError(
                f"trace job {job.job_id} (account {job.account}) needs {job.nodes} node(s) of "
                f"cpu={job.cpu},mem={job.mem},gres/gpu={job.gpu}; {fitting} of the cluster's nodes can hold it "
                f"(the largest: cpu={largest[0]},mem={largest[1]},gres/gpu={largest[2]})"
            )


def on_cluster(workload: Workload, nodes: Sequence[Node]) -> tuple[Workload, str | None]:
    """`workload` described on the cluster it is replayed on: its eligible nodes' count and shape.

    A trace's own node count (its header's, or the offered-load rule's) is
    another cluster; the simulator's prediction of a replay must run on this
    one. The simulator's nodes are all alike: on a cluster of several
    shapes they are the most common one's, which the note (else None) says.
    """
    shapes = eligible_shapes(nodes)
    counted = Counter(shapes)
    shape = max(counted, key=lambda t: (counted[t], t.cpu, t.mem, t.gpu))
    note = None
    if len(counted) > 1:
        note = (
            f"the cluster's nodes have {len(counted)} shapes; the prediction models all {len(shapes)} as "
            f"{shape.render()}, the most common"
        )
    return replace(workload, node_count=len(shapes), node_type=shape), note


def scheduling_interval(parameters: Mapping[str, int]) -> int:
    """The longest of Slurm's main and backfill scheduling intervals, in seconds."""
    return max(
        parameters.get("sched_interval", DEFAULT_SCHED_INTERVAL), parameters.get("bf_interval", DEFAULT_BF_INTERVAL)
    )


def check_compression(subs: Sequence[Submission], compression: float, interval: int) -> None:
    """Refuse a compression that makes a job shorter than Slurm's scheduling interval (or than a second)."""
    if not subs:
        raise ReplayInputError("the trace has no job to replay")
    floor = max(float(interval), MIN_JOB_SECONDS)
    shortest = min(subs, key=lambda s: (s.sleep, s.index))
    if shortest.sleep < floor:
        largest = shortest.job.duration / floor
        raise ReplayInputError(
            f"--compress {compression:g} makes trace job {shortest.job.job_id} {shortest.sleep:.2f} s long, shorter "
            f"than {floor:g} s (Slurm's scheduling interval, the longest of sched_interval and bf_interval, "
            f"at least {MIN_JOB_SECONDS:g} s): use --compress {math.floor(largest * 100) / 100:g} or less, or "
            "shorter intervals in SchedulerParameters on the test cluster"
        )


_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def job_name(job: WorkloadJob, run: str) -> str:
    """The Slurm job name of a trace job: the prefix, the replay's `run` token and the job's trace id, in
    characters every tool shows plainly; no other replay's job has it."""
    return f"{JOB_NAME_PREFIX}{run}-" + _NAME_UNSAFE.sub("_", job.job_id)[:100]


def _clock(seconds: float) -> str:
    """A time limit as sbatch's minutes:seconds, rounded up to a whole second."""
    whole = max(1, math.ceil(seconds))
    return f"{whole // 60}:{whole % 60:02d}"


# Slurm 22.05's sbatch has no --uid: root submits as another user through runuser.
RUNUSER: Final = "runuser"


def build_sbatch_argv(
    sub: Submission, partition: str | None, workdir: str, run_as: str | None, run: str, requeue: bool = False
) -> list[str]:
    """The argv of the sbatch that submits `sub` (its script comes on stdin), as `run_as` if given
    (`runuser -u USER -- sbatch ...`: root only; from a directory that user can enter), named for
    the replay `run` (`job_name`). `requeue`: the job may be requeued (the reclaiming arm's victims
    must be; every other arm's jobs are `--no-requeue`, run once whatever happens to a node). Every
    name in it follows the one rule (`check_name`; `check_trace` has refused a trace that breaks it,
    naming the job, before anything ran); a job of no memory asks for `MIN_MEM_MIB`."""
    job = sub.job
    check_job(job, "trace")
    if run_as:
        check_name(run_as, f"trace job {job.job_id}: the user to submit as")
    if partition:
        check_name(partition, "--partition")
    argv = [
        *([RUNUSER, "-u", run_as, "--"] if run_as else []),
        "sbatch",
        "--parsable",
        f"--job-name={job_name(job, run)}",
        f"--account={job.account}",
        f"--nodes={job.nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={job.cpu}",
        f"--mem={max(job.mem, MIN_MEM_MIB)}M",
        f"--time={_clock(sub.limit)}",
        "--output=/dev/null",
        f"--chdir={workdir}",
        "--requeue" if requeue else "--no-requeue",
        f"--comment=slurm-drf replay: trace job {job.job_id} of user {job.user}"[:200],
    ]
    if job.gpu:
        argv.append(f"--gres=gpu:{job.gpu}")
    if partition:
        argv.append(f"--partition={partition}")
    return argv


def build_job_script(sub: Submission) -> str:
    """The batch script: a sleep of the compressed run time (to the millisecond)."""
    return f"#!/bin/sh\nexec sleep {sub.sleep:.3f}\n"


def account_paths(workload: Workload) -> list[tuple[str, str | None, int]]:
    """(account, parent account or None for the root, fairshare) for every account and internal node, parents first.

    Fairshare is Slurm's RawShares: the weights against siblings, scaled to
    whole numbers by one common factor (2:1 stays 2:1, 1/2:1 becomes 1:2).
    """
    tree = workload.tree
    # name -> (parent, weight, depth)
    nodes: dict[str, tuple[str | None, Fraction, int]] = {}
    for account in workload.accounts:
        parts = (tree.path(account) if tree is not None else account).split(TREE_SEPARATOR)
        for depth in range(1, len(parts)):
            weight = tree.weight(TREE_SEPARATOR.join(parts[:depth])) if tree is not None else Fraction(1)
            nodes.setdefault(parts[depth - 1], (parts[depth - 2] if depth > 1 else None, weight, depth - 1))
        nodes[account] = (parts[-2] if len(parts) > 1 else None, workload.weight(account), len(parts) - 1)
    scale = math.lcm(*(w.denominator for _, w, _ in nodes.values()))
    ordered = sorted(nodes, key=lambda name: (nodes[name][2], name))
    return [(name, nodes[name][0], int(nodes[name][1] * scale)) for name in ordered]
