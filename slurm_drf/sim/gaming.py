"""Gaming: does an account that plays a strategy get more of the same real work done? (issue 35)

Sits on top of the simulator, beside `compare`: a strategy is a pure
transform of one account's jobs in a `Workload` (every other job left as
it is); `run_gaming` plays the honest and the gamed workload under each
policy and `measure` turns each run into what the gamer and the others
care about. Only measures: nothing here changes a policy.

A strategy keeps the account's *real* work: every gamed job maps back to
the original job it does part of (`Piece`), and the useful work of an
original job is its honest shape's dominant share of a node times its run
time, whatever the gamed jobs ask for or hold. What the simulator charges
an account is what its jobs ask for (their requested TRES, for as long as
they run), as Slurm and the daemon do: asking more than it uses is
charged, holding a GPU idle is charged.

Strategies the simulator cannot express honestly are left out:

- a time limit *below* the run time (the simulator never kills a job at
  its limit: a workload has duration <= limit), so only limits far above;
- the same group's work over several accounts the admin created (that is
  the admin's choice of weights, not a transform of one account's jobs);
- splitting a job in time makes its pieces independent jobs (no
  dependencies in the simulator): honest for divisible work such as a
  sweep, optimistic for a chain of checkpointed steps.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from slurm_drf.sim.engine import simulate
from slurm_drf.sim.options import DEFAULT_INTERVAL, SimOptions, SimResult
from slurm_drf.sim.policies import build_policy
from slurm_drf.sim.scenarios import GAMING_ACCOUNT, GAMING_DAY, build_scenario
from slurm_drf.sim.workload import NodeType, Workload, WorkloadJob

SPLIT_PIECES: Final = 4
MEMORY_FACTOR: Final = 3
USERS: Final = 4
LIED_LIMIT: Final = 48 * 3600.0
# An idle-holding job uses a quarter of the GPUs it holds: the same useful work holds them 4x as long.
IDLE_USE: Final = 0.25
# The policies the gaming table compares (sim.policies.ALL_POLICIES names).
GAMING_POLICIES: Final = ("fifo", "multifactor", "drf", "drf-labels", "drf-placed", "drf-history", "hdrf")


@dataclass(frozen=True, slots=True)
class Piece:
    """What one job of a gamed workload does of an original job: its id and the share of its work."""

    original: str
    fraction: float


@dataclass(frozen=True, slots=True)
class Gamed:
    """A workload after a strategy, and for every job of it the original job it does part of."""

    workload: Workload
    pieces: Mapping[str, Piece]


JobTransform = Callable[[WorkloadJob, NodeType], list[tuple[WorkloadJob, float]]]


def _transform(workload: Workload, account: str, change: JobTransform) -> Gamed:
    """Apply `change` to each of `account`'s jobs; every other job kept as it is."""
    jobs: list[WorkloadJob] = []
    pieces: dict[str, Piece] = {}
    for job in workload.jobs:
        made = change(job, workload.node_type) if job.account == account else [(job, 1.0)]
        for new, fraction in made:
            jobs.append(new)
            pieces[new.job_id] = Piece(job.job_id, fraction)
    return Gamed(replace(workload, jobs=tuple(jobs)), pieces)


def _honest(job: WorkloadJob, node: NodeType) -> list[tuple[WorkloadJob, float]]:
    return [(job, 1.0)]


def _split(job: WorkloadJob, node: NodeType) -> list[tuple[WorkloadJob, float]]:
    """k pieces of a k-th of the width where every amount divides into whole units, else of the run time."""
    k = SPLIT_PIECES
    if job.nodes == 1 and all(amount % k == 0 for amount in (job.cpu, job.mem, job.gpu)):
        piece = replace(job, cpu=job.cpu // k, mem=job.mem // k, gpu=job.gpu // k)
    else:
        piece = replace(job, duration=job.duration / k, limit=job.limit / k)
    return [(replace(piece, job_id=f"{job.job_id}.{i}"), 1.0 / k) for i in range(k)]


def _over_request_memory(job: WorkloadJob, node: NodeType) -> list[tuple[WorkloadJob, float]]:
    """3x the memory asked (at most a node's), the same used: the simulator charges the request."""
    return [(replace(job, mem=min(node.mem, MEMORY_FACTOR * job.mem)), 1.0)]


def _stuff(job: WorkloadJob, node: NodeType) -> list[tuple[WorkloadJob, float]]:
    """Everything submitted at the start instead of over the day."""
    return [(replace(job, submit=0.0), 1.0)]


def _after_cycle(job: WorkloadJob, node: NodeType) -> list[tuple[WorkloadJob, float]]:
    """Submitted 1 s after the next cycle of the daemon (every `DEFAULT_INTERVAL` s in the simulator, where the
    loop policies plan): the job waits a whole cycle before it is planned, the most it can."""
    return [(replace(job, submit=math.ceil(job.submit / DEFAULT_INTERVAL) * DEFAULT_INTERVAL + 1.0), 1.0)]


def _many_users(job: WorkloadJob, node: NodeType) -> list[tuple[WorkloadJob, float]]:
    """The account's jobs over 4 users, in turn by job number (matters to hdrf, which shares an account
    between its users)."""
    number = int(job.job_id.rsplit("-", 1)[-1])
    return [(replace(job, user=f"{job.account}-u{number % USERS}"), 1.0)]


def _long_limits(job: WorkloadJob, node: NodeType) -> list[tuple[WorkloadJob, float]]:
    """A 48 h time limit whatever the run: backfill plans with limits, so a far-off limit fits fewer gaps."""
    return [(replace(job, limit=max(job.limit, LIED_LIMIT)), 1.0)]


def _idle_holding(job: WorkloadJob, node: NodeType) -> list[tuple[WorkloadJob, float]]:
    """A GPU job that uses a quarter of what it holds: the same useful work holds its TRES 4x as long."""
    if job.gpu == 0:
        return [(job, 1.0)]
    return [(replace(job, duration=job.duration / IDLE_USE, limit=job.limit / IDLE_USE), 1.0)]


STRATEGIES: Final[Mapping[str, JobTransform]] = {
    "split": _split,
    "over-request memory": _over_request_memory,
    "stuff": _stuff,
    "after-cycle": _after_cycle,
    "many-users": _many_users,
    "run-time lies": _long_limits,
    "idle holding": _idle_holding,
}


def build_gamed(workload: Workload, strategy: str, account: str = GAMING_ACCOUNT) -> Gamed:
    """`workload` with `account` playing `strategy` ("honest": as it is)."""
    return _transform(workload, account, _honest if strategy == "honest" else STRATEGIES[strategy])


# --------------------------------------------------------------------------
# The measure


def useful_work(job: WorkloadJob, node: NodeType) -> float:
    """Dominant-resource node-hours of a job's real work: its largest share of a node, times nodes, times hours."""
    shares = [amount / size for amount, size in ((job.cpu, node.cpu), (job.mem, node.mem), (job.gpu, node.gpu)) if size]
    return max(shares) * job.nodes * job.duration / 3600.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """One run as the gamer and the others see it."""

    useful: float  # the account's real work finished by the horizon (dominant node-hours)
    others: float  # every other account's, the same way
    completion: float  # mean time (s from the start) at which the account's original jobs completed


def measure(honest: Workload, gamed: Gamed, result: SimResult, account: str, horizon: float) -> Outcome:
    """What `result` (a run of `gamed.workload`) did of `honest`'s real work: pieces count by their fraction of
    their original's work; an original completes when its last piece ends."""
    originals = {job.job_id: job for job in honest.jobs}
    node = honest.node_type
    done = {account: 0.0, "": 0.0}
    completed: dict[str, float] = {}
    for index, job in enumerate(result.workload.jobs):
        piece = gamed.pieces[job.job_id]
        original = originals[piece.original]
        end = float(result.end[index])
        if original.account == account:
            completed[piece.original] = max(completed.get(piece.original, 0.0), end)
        if end <= horizon:
            done[account if original.account == account else ""] += piece.fraction * useful_work(original, node)
    return Outcome(done[account], done[""], statistics.fmean(completed.values()) if completed else math.nan)


# --------------------------------------------------------------------------
# The runner


@dataclass(frozen=True, slots=True)
class GainRow:
    """One strategy under one policy, per seed: the gamer's and the others' change against honest play."""

    strategy: str
    policy: str
    seeds: tuple[int, ...]
    gain: tuple[float, ...]  # gamed / honest - 1 of the account's work done by the horizon
    others: tuple[float, ...]  # the same for every other account together
    sooner: tuple[float, ...]  # honest / gamed - 1 of the mean completion time (> 0: sooner)

    @staticmethod
    def median(values: Sequence[float]) -> float:
        return float(statistics.median(values))


def _change(gamed: float, honest: float) -> float:
    return gamed / honest - 1.0 if honest > 0 else math.nan


def run_gaming(
    strategies: Sequence[str],
    policies: Sequence[str],
    seeds: Sequence[int],
    jobs: int | None = None,
    horizon: float = GAMING_DAY,
    account: str = GAMING_ACCOUNT,
    options: SimOptions | None = None,
) -> list[GainRow]:
    """Each strategy under each policy on the gaming scenario, seed by seed, against honest play
    (`options`: the backfill the runs use)."""
    options = options or SimOptions()
    outcomes: dict[tuple[str, str], list[tuple[Outcome, Outcome]]] = {}
    for seed in seeds:
        honest = build_scenario("gaming", seed, jobs=jobs)
        for policy in policies:
            base = _play(honest, build_gamed(honest, "honest", account), policy, account, horizon, options)
            for strategy in strategies:
                played = _play(honest, build_gamed(honest, strategy, account), policy, account, horizon, options)
                outcomes.setdefault((strategy, policy), []).append((played, base))
    return [
        GainRow(
            strategy,
            policy,
            tuple(seeds),
            tuple(_change(g.useful, h.useful) for g, h in pairs),
            tuple(_change(g.others, h.others) for g, h in pairs),
            tuple(_change(h.completion, g.completion) for g, h in pairs),
        )
        for (strategy, policy), pairs in outcomes.items()
    ]


def merge_rows(rows: Sequence[GainRow]) -> list[GainRow]:
    """Rows of the same strategy and policy from separate runs (e.g. one per seed) as one row each,
    seeds in the order the rows come."""
    merged: dict[tuple[str, str], GainRow] = {}
    for row in rows:
        key = (row.strategy, row.policy)
        last = merged.get(key)
        merged[key] = (
            row
            if last is None
            else GainRow(
                row.strategy,
                row.policy,
                last.seeds + row.seeds,
                last.gain + row.gain,
                last.others + row.others,
                last.sooner + row.sooner,
            )
        )
    return list(merged.values())


def _play(honest: Workload, gamed: Gamed, policy: str, account: str, horizon: float, options: SimOptions) -> Outcome:
    result = simulate(gamed.workload, build_policy(policy, engine="fast"), options)
    return measure(honest, gamed, result, account, horizon)
