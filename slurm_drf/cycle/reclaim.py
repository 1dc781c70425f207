"""The cycle's reclaim step (docs/rule.md §9): free room for jobs waiting within their guarantees.

After the cycle's writes, in each pool `reclaim.pools` names: every job the
plan put within its account's guarantee (policy.guarantees) is a *claim*,
in the plan's order, once the account's oldest such job was submitted
`reclaim.after` ago;
`policy.reclaim.choose_victims` (the laws, the same code as the
simulator's) names the running jobs to requeue for it from what Slurm says
runs where (`ReclaimView`), each victim then counted as gone and the claim
as started for the claims after it, until `max_per_cycle` victims are
chosen. A job requeued less than `cooldown` ago (the history's record,
`moved`) is never chosen again. `decide` is pure; the cycle asks the
executor to requeue (or, with `way: cancel`, cancel what cannot be
requeued) and the history records every one (`Reclaimed`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, Protocol

import numpy as np

from slurm_drf.config.settings import Config, ReclaimConfig
from slurm_drf.cycle.reclaim_moves import ReclaimMoves
from slurm_drf.model.types import JobTable, Snapshot
from slurm_drf.policy.guarantees import UNNAMED, WITHIN
from slurm_drf.policy.plan import Plan
from slurm_drf.policy.plan_columns import PoolOrder
from slurm_drf.policy.reclaim import (
    Accounts,
    Claim,
    Rules,
    Running,
    Vector,
    choose_victims,
    fitting_nodes,
    newest_first,
)
from slurm_drf.slurm.parse.running import RunningJob
from slurm_drf.slurm.running import Outcome, Way, apply_reclaim, fetch_occupancy

logger = logging.getLogger(__name__)

# What became of a victim: asked of Slurm and done, or not; `would` in a dry run.
OUTCOMES: Final = ("requeued", "cancelled", "gone", "failed", "would")


@dataclass(frozen=True, slots=True)
class ReclaimView:
    """What runs where in a pool's partitions: each usable node's free resources and partitions,
    and the running jobs with their allocation per node (by the config's resources)."""

    free: Mapping[str, Vector]
    partitions: Mapping[str, tuple[str, ...]]
    running: Sequence[RunningJob]


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """One victim: whom, for which waiting job, both accounts' weighted shares before, the work lost."""

    pool: str
    victim: str
    victim_account: str
    victim_user: str
    claim: str
    claim_account: str
    victim_share: float
    claim_share: float
    nodes: tuple[str, ...]
    # Resource-hours by the config's resources: each victim's allocation times its run time.
    lost_hours: Mapping[str, float]
    requeueable: bool
    outcome: str = "would"
    message: str = ""


def claims_of(
    record: PoolOrder, table: JobTable, rows: Sequence[int], config: Config, view: ReclaimView, now: float
) -> list[Claim]:
    """The pool's claims in the plan's order: the jobs within their guarantees of the accounts whose
    oldest such job was submitted `after` ago or more (as the simulator's `drf-reclaim` has them).

    `rows` are the snapshot's rows of the pool's ordered jobs by position.
    """
    reclaim = config.reclaim
    if reclaim is None or record.parts is None:
        return []
    claims: list[Claim] = []
    node_count = table.column("node")
    tres = [table.column(r) for r in config.resources]
    within = [
        row for position, row in enumerate(rows) if int(record.parts[int(record.ordering.order[position])]) == WITHIN
    ]
    # An account has waited within its guarantee since its oldest such job was submitted.
    since: dict[int, float] = {}
    for row in within:
        code = int(table.account[row])
        since[code] = min(since.get(code, math.inf), float(table.submit_time[row]))
    for row in within:
        if now - since[int(table.account[row])] < reclaim.after:
            continue
        nodes = max(int(node_count[row]), 1)
        per_node = tuple(math.ceil(int(column[row]) / nodes) for column in tres)
        wanted = set(table.partitions[int(table.partition[row])].split(","))
        eligible = frozenset(n for n, parts in view.partitions.items() if wanted & set(parts))
        claims.append(Claim(table.job_id[row], table.accounts[int(table.account[row])], per_node, nodes, eligible))
    return claims


def pool_accounts(record: PoolOrder, view: ReclaimView, config: Config) -> Accounts:
    """The pool's accounts as the laws see them: running usage (the view's), weights, and each
    account's guarantee (its own key's; under a key that covers several, what the others leave of it)."""
    width = len(config.resources)
    usage: dict[str, Vector] = {}
    for job in view.running:
        total = job.running().total
        usage[job.account] = tuple(a + b for a, b in zip(usage.get(job.account, (0,) * width), total, strict=True))
    names = list(record.accounts)
    weights = {name: record.weights[a] for a, name in enumerate(names) if a < len(record.weights)}
    guarantees: dict[str, dict[int, int]] = {}
    bounds = record.bounds
    if bounds is not None and bounds.active:
        counted = np.array([usage.get(name, (0,) * width) for name in names], dtype=np.int64).reshape(len(names), width)
        group_usage = bounds.members.astype(np.int64) @ counted
        for a, name in enumerate(names):
            rows = [g for g in np.flatnonzero(bounds.members[:, a]).tolist() if (bounds.guarantee[g] != UNNAMED).any()]
            named: dict[int, int] = {}
            for g in rows:
                others = group_usage[g] - counted[a]
                for r in np.flatnonzero(bounds.guarantee[g] != UNNAMED).tolist():
                    room = max(int(bounds.guarantee[g, r]) - int(others[r]), 0)
                    named[r] = min(named.get(r, room), room)
            if named:
                guarantees[name] = named
    return Accounts(record.capacity, usage, weights, guarantees)


def decide(
    plan: Plan,
    table: JobTable,
    config: Config,
    views: Mapping[str, ReclaimView],
    moved: Mapping[str, float],
    now: float,
) -> list[Reclaimed]:
    """Every victim this cycle, the pools in the plan's order and the claims in each pool's (pure)."""
    reclaim = config.reclaim
    if reclaim is None:
        return []
    budget = reclaim.max_per_cycle
    chosen: list[Reclaimed] = []
    job_ids = plan.column("job_id")
    row_of = {job_id: row for row, job_id in enumerate(table.job_id)}
    for pool, record in zip(plan.pools, plan.orders, strict=True):
        view = views.get(pool.name)
        if view is None or pool.name not in reclaim.pools or budget <= 0:
            continue
        rows = [row_of[job_ids[record.offset + p]] for p in range(record.size)]
        found = _pool_victims(pool.name, record, (table, rows), config, view, (moved, now, budget))
        budget -= len(found)
        chosen.extend(found)
    return chosen


def _pool_victims(
    pool: str,
    record: PoolOrder,
    jobs: tuple[JobTable, Sequence[int]],
    config: Config,
    view: ReclaimView,
    when: tuple[Mapping[str, float], float, int],
) -> list[Reclaimed]:
    table, rows = jobs
    moved, now, budget = when
    reclaim = config.reclaim
    assert reclaim is not None
    running = [_policy_job(r, reclaim, moved) for r in view.running]
    detail = {r.job_id: r for r in view.running}
    free = dict(view.free)
    accounts = pool_accounts(record, view, config)
    chosen: list[Reclaimed] = []
    for claim in claims_of(record, table, rows, config, view, now):
        left = budget - len(chosen)
        if left <= 0:
            break
        rules = Rules(reclaim.min_runtime, reclaim.cooldown, left, reclaim.way == "cancel")
        answer = choose_victims(claim, free, running, accounts, now, rules)
        demand = tuple(n * claim.nodes for n in claim.per_node)
        if not answer.victims:
            # A claim that fits in what is free needs no victim: it holds that room for the claims
            # after it (Slurm starts it), as the simulator's drf-reclaim does.
            room = fitting_nodes(free, claim)
            if room:
                accounts, free = _after(accounts, free, (), claim, room, demand)
            continue
        victims = [job for job in running if job.job_id in answer.victims]
        claim_share = accounts.share(claim.account, accounts.usage_of(claim.account))
        for job in sorted(victims, key=newest_first):
            hours = max(now - job.start, 0.0) / 3600.0
            lost = {r: job.total[i] * hours for i, r in enumerate(config.resources)}
            chosen.append(
                Reclaimed(
                    pool,
                    job.job_id,
                    job.account,
                    detail[job.job_id].user,
                    claim.job_id,
                    claim.account,
                    float(accounts.share(job.account, accounts.usage_of(job.account))),
                    float(claim_share),
                    tuple(sorted(job.allocation)),
                    lost,
                    job.requeueable,
                )
            )
        accounts, free = _after(accounts, free, victims, claim, answer.nodes, demand)
        running = [job for job in running if job.job_id not in answer.victims]
    return chosen


def _exempt(running: RunningJob, reclaim: ReclaimConfig) -> bool:
    return running.qos in reclaim.exempt_qos or running.partition in reclaim.exempt_partitions


def _policy_job(running: RunningJob, reclaim: ReclaimConfig, moved: Mapping[str, float]) -> Running:
    """The policy's view of a running job: exempt by its QOS or partition, and when a reclaim last moved it."""
    return running.running(exempt=_exempt(running, reclaim), moved_at=moved.get(running.job_id))


def _say_if_nothing_movable(pool: str, view: ReclaimView, reclaim: ReclaimConfig) -> None:
    """A warning when no running job of the pool may ever be a victim: none can be requeued, or every
    one that can is exempt (reclaim.exempt_qos, reclaim.exempt_partitions); what to change."""
    if not view.running:
        return
    cancel = reclaim.way == "cancel"
    if not cancel and not any(job.requeueable for job in view.running):
        logger.warning(
            "reclaim: pool %s: none of its %d running jobs can be requeued (slurm.conf JobRequeue=0, or "
            "--no-requeue, or not batch jobs): reclaim frees nothing there; set JobRequeue=1 in "
            "slurm.conf, or reclaim.way: cancel",
            pool,
            len(view.running),
        )
        return
    exempt = [job for job in view.running if _exempt(job, reclaim)]
    if exempt and all(_exempt(job, reclaim) or not (job.requeueable or cancel) for job in view.running):
        by_qos = sum(job.qos in reclaim.exempt_qos for job in exempt)
        logger.warning(
            "reclaim: pool %s: no running job there may be a victim: %d of %d are exempt (%d by their QOS, "
            "reclaim.exempt_qos; %d by their partition, reclaim.exempt_partitions), any other cannot be "
            "requeued: reclaim frees nothing there",
            pool,
            len(exempt),
            len(view.running),
            by_qos,
            len(exempt) - by_qos,
        )


def _after(
    accounts: Accounts,
    free: dict[str, Vector],
    victims: Sequence[Running],
    claim: Claim,
    nodes: Sequence[str],
    demand: Vector,
) -> tuple[Accounts, dict[str, Vector]]:
    """The pool once the victims are gone and the claim runs on `nodes`: for the claims after it."""
    usage = dict(accounts.usage)
    free = dict(free)
    for job in victims:
        usage[job.account] = tuple(a - b for a, b in zip(usage[job.account], job.total, strict=True))
        for node, allocation in job.allocation.items():
            if node in free:
                free[node] = tuple(a + b for a, b in zip(free[node], allocation, strict=True))
    mine = accounts.usage_of(claim.account)
    usage[claim.account] = tuple(a + b for a, b in zip(mine, demand, strict=True))
    for node in nodes:
        free[node] = tuple(a - b for a, b in zip(free[node], claim.per_node, strict=True))
    return replace(accounts, usage=usage), free


class Reclaimer(Protocol):
    """How the cycle reads what runs where and requeues (SlurmReclaimer; a test's own in unit tests)."""

    def view(self, partitions: Sequence[str], snapshot: Snapshot) -> ReclaimView: ...

    def apply(self, victims: Sequence[RunningJob], way: Way) -> Sequence[Outcome]: ...

    def moved_since(self, since: float) -> Mapping[str, float]: ...


class SlurmReclaimer:
    """Slurm's JSON CLI (slurm.running) for the view and the requeues; the history for the cooldown,
    and, with `moves`, the moves written down before they are made (cycle.reclaim_moves)."""

    def __init__(
        self, config: Config, moved: Callable[[float], Mapping[str, float]], moves: ReclaimMoves | None = None
    ) -> None:
        self._config = config
        self._moved = moved
        self._moves = moves

    def view(self, partitions: Sequence[str], snapshot: Snapshot) -> ReclaimView:
        occupancy = fetch_occupancy(partitions, self._config.resources, timeout=self._config.slurm_timeout)
        return ReclaimView(occupancy.free, node_partitions(snapshot), occupancy.jobs)

    def apply(self, victims: Sequence[RunningJob], way: Way) -> Sequence[Outcome]:
        moves, reclaim = self._moves, self._config.reclaim
        if moves is None or reclaim is None:
            return apply_reclaim(victims, way, timeout=self._config.slurm_timeout)
        moves.about_to_move([v.job_id for v in victims], time.time(), reclaim.cooldown)
        outcomes = apply_reclaim(victims, way, timeout=self._config.slurm_timeout)
        done = {o.job_id for o in outcomes if o.result == "done"}
        moves.not_moved([v.job_id for v in victims if v.job_id not in done])
        return outcomes

    def moved_since(self, since: float) -> Mapping[str, float]:
        moved = dict(self._moved(since))
        if self._moves is not None:
            for job, when in self._moves.moved_since(since).items():
                moved[job] = max(when, moved.get(job, when))
        return moved


def node_partitions(snapshot: Snapshot) -> dict[str, tuple[str, ...]]:
    return {node.name: node.partitions for node in snapshot.nodes}


def run_reclaim(
    plan: Plan,
    snapshot: Snapshot,
    config: Config,
    reclaimer: Reclaimer,
    dry_run: bool,
    before_acting: Callable[[], None] = lambda: None,
    now: float | None = None,
) -> tuple[Reclaimed, ...]:
    """The cycle's step: decide over the pools `reclaim.pools` names that have claims, then (unless a
    dry run) requeue, or cancel with `way: cancel` what cannot be requeued; every victim's outcome.

    `before_acting` is the lease's fence, called before anything is done (cycle.fence); `now` the
    time the waits and run times are counted to (the clock's, unless given).
    """
    reclaim = config.reclaim
    if reclaim is None:
        return ()
    now = time.time() if now is None else now
    views: dict[str, ReclaimView] = {}
    for pool, record in zip(plan.pools, plan.orders, strict=True):
        if pool.name in reclaim.pools and record.parts is not None and (record.parts == WITHIN).any():
            views[pool.name] = view = reclaimer.view(pool.partitions, snapshot)
            _say_if_nothing_movable(pool.name, view, reclaim)
    if not views:
        return ()
    moved = reclaimer.moved_since(now - reclaim.cooldown)
    chosen = decide(plan, snapshot.table, config, views, moved, now)
    if dry_run or not chosen:
        return tuple(chosen)
    before_acting()
    detail = {job.job_id: job for view in views.values() for job in view.running}
    outcomes: dict[str, Outcome] = {}
    requeue = [detail[r.victim] for r in chosen if r.requeueable]
    cancel = [detail[r.victim] for r in chosen if not r.requeueable]
    ways: tuple[tuple[list[RunningJob], Way], ...] = ((requeue, "requeue"), (cancel, "cancel"))
    for victims, way in ways:
        if victims:
            outcomes.update((o.job_id, o) for o in reclaimer.apply(victims, way))
    done = tuple(_with_outcome(r, outcomes.get(r.victim)) for r in chosen)
    for r in done:
        said = f": {r.message}" if r.message else ""
        logger.info(
            "reclaim: job %s (%s) %s for job %s (%s)%s",
            r.victim,
            r.victim_account,
            r.outcome,
            r.claim,
            r.claim_account,
            said,
        )
    return done


def _with_outcome(r: Reclaimed, outcome: Outcome | None) -> Reclaimed:
    """A victim with what Slurm said: requeued or cancelled, gone, or failed with its words."""
    if outcome is None:
        return replace(r, outcome="failed", message="no outcome reported")
    if outcome.result == "done":
        return replace(r, outcome="requeued" if r.requeueable else "cancelled")
    return replace(r, outcome="gone" if outcome.result == "gone" else "failed", message=outcome.message)
