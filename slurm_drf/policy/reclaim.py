"""Reclaim: which running jobs to requeue so that a job waiting within its account's guarantee can start.

Pure, like the rest of the policy: `choose_victims` takes a waiting job
(the *claim*), the nodes and the running jobs on them, each account's usage,
weight and guarantee, and the rules; it returns the victims, the nodes the
claim then starts on and what their work lost, or why there are none. The
daemon (with `scontrol requeue`) and the simulator both ask it, so the
victims they pick are the same. The laws it keeps (docs/rule.md §9, and
the property tests in tests/unit/policy/test_reclaim.py hold it to each):

1. Only a claim within its account's guarantee triggers: the account's usage
   with the claim's demand added is at most its guarantee, in every resource
   the guarantee names (YuniKorn: only a queue under its guarantee may
   preempt).
2. Victims are jobs of other accounts whose weighted dominant share, after
   every victim of theirs is gone, is still at least the claimant's with the
   claim running (Kueue's `LessThanOrEqualToFinalShare`): no account is taken
   below the share the claimant reaches, so no two accounts can take turns
   preempting each other.
3. No account is taken below its own guarantee: an account with a guarantee
   keeps a guaranteed share (its usage over its guarantee, largest
   resource) of at least 1.
4. Node-aware: victims only on nodes where the claim can then run, each
   chosen node freeing at least the claim's demand per node; a job on a node
   that cannot give the claim what it needs is never touched (GPUs freed on a
   node whose CPUs stay full free nothing).
5. The fewest, newest first: on each node, the smallest set of jobs that
   frees what the claim needs (the newest first among sets of one size;
   with more than SEARCH_LIMIT candidates on a node, the newest first, then
   any the node does not need left running; of jobs that started in the
   same second, Slurm's unit, the later submitted, by job number); of the
   nodes that could serve, those that lose the least work. A claim on
   several nodes takes them one at a time, the cheapest first, each counted
   with the victims already taken and the room they free on it: it never
   breaks a law, and may miss a set a search of every combination would
   find (a claim on one node never does: the tests compare it with every
   subset of each node's jobs).
6. Never a job that ran less than `min_runtime`, that this reclaim moved less
   than `cooldown` ago, that cannot be requeued (unless `cancel` is the
   chosen way), or that is exempt; at most `budget` victims for the claim
   (what is left of `max_per_cycle`), and none at all when that is too few:
   a part of what the claim needs frees nothing it can use.
7. Nothing when the claim can start already on free resources: Slurm will
   start it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from slurm_drf.model.types import job_number
from slurm_drf.policy.rule import weighted_share

Vector = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Claim:
    """A waiting job within its account's guarantee: its demand on each of `nodes` nodes, where it may run."""

    job_id: str
    account: str
    per_node: Vector
    nodes: int
    eligible: frozenset[str]


@dataclass(frozen=True, slots=True)
class Running:
    """A running job: its allocation on each of its nodes, when it started, what may be done to it."""

    job_id: str
    account: str
    allocation: Mapping[str, Vector]
    start: float
    requeueable: bool = True
    exempt: bool = False
    moved_at: float | None = None  # when a reclaim last requeued it

    @property
    def total(self) -> Vector:
        rows = list(self.allocation.values())
        return tuple(sum(column) for column in zip(*rows, strict=True)) if rows else ()


def newest_first(job: Running) -> tuple[float, int, str]:
    """The sort key of law 5's "newest first": the later start first; of two in the same second (Slurm keeps
    whole seconds) the later submitted, the higher job number ("10" after "9"); then the id."""
    return (-job.start, -job_number(job.job_id), job.job_id)


@dataclass(frozen=True, slots=True)
class Rules:
    min_runtime: float = 600.0
    cooldown: float = 3600.0
    budget: int = 4
    cancel: bool = False  # may a job that cannot be requeued be cancelled instead


@dataclass(frozen=True, slots=True)
class Accounts:
    """Each account's usage (running allocation, by the pool's resources), weight and guarantee.

    `guarantees[a][r]` is a whole amount, or absent: the guarantee does not name
    resource r (it neither limits nor counts it). An account without an entry
    has no guarantee.
    """

    capacity: Vector
    usage: Mapping[str, Vector]
    weights: Mapping[str, Fraction]
    guarantees: Mapping[str, Mapping[int, int]]
    default_weight: Fraction = Fraction(1)

    def share(self, account: str, usage: Vector) -> Fraction:
        return weighted_share(usage, self.capacity, self.weights.get(account, self.default_weight))

    def guaranteed_share(self, account: str, usage: Vector) -> Fraction | None:
        """max over the named resources of usage / guarantee; None without a guarantee (a 0 amount: infinite
        once used, else 1, since nothing used is at a guarantee of nothing)."""
        named = self.guarantees.get(account)
        if not named:
            return None
        worst = Fraction(0)
        for r, amount in named.items():
            if usage[r] and not amount:
                return Fraction(10**18)
            worst = max(worst, Fraction(usage[r], amount) if amount else Fraction(1))
        return worst

    def usage_of(self, account: str) -> Vector:
        return self.usage.get(account, (0,) * len(self.capacity))


@dataclass(frozen=True, slots=True)
class Reclaim:
    """The answer: the victims (ids, newest first), the nodes the claim then starts on, and the work lost
    (resource-seconds by the pool's resources); or none, and why."""

    claim: str
    victims: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    lost: Vector = ()
    reason: str = ""


def _add(a: Vector, b: Vector, sign: int = 1) -> Vector:
    return tuple(x + sign * y for x, y in zip(a, b, strict=True))


def _covers(free: Vector, need: Vector) -> bool:
    return all(f >= n for f, n in zip(free, need, strict=True))


def within_guarantee(claim: Claim, accounts: Accounts) -> bool:
    """Law 1: the claimant's usage with the claim added is at most its guarantee wherever it names one."""
    named = accounts.guarantees.get(claim.account)
    if not named:
        return False
    after = _add(accounts.usage_of(claim.account), tuple(n * claim.nodes for n in claim.per_node))
    return all(after[r] <= amount for r, amount in named.items())


def choose_victims(
    claim: Claim,
    free: Mapping[str, Vector],
    running: Sequence[Running],
    accounts: Accounts,
    now: float,
    rules: Rules,
) -> Reclaim:
    """The victims that let `claim` start (module docstring: the laws), or none and why."""
    if not within_guarantee(claim, accounts):
        return Reclaim(claim.job_id, reason="its account is not within its guarantee with it")
    eligible = sorted(n for n in claim.eligible if n in free)
    if sum(_covers(free[n], claim.per_node) for n in eligible) >= claim.nodes:
        return Reclaim(claim.job_id, reason="it fits in what is free: Slurm starts it")
    demand = tuple(n * claim.nodes for n in claim.per_node)
    floor = accounts.share(claim.account, _add(accounts.usage_of(claim.account), demand))
    movable = [job for job in running if _movable(job, claim, accounts, floor, now, rules)]
    chosen: list[str] = []
    taken: dict[str, Running] = {}
    while len(chosen) < claim.nodes:
        context = (accounts, floor, now, tuple(taken.values()))
        options = [
            option
            for node in eligible
            if node not in chosen
            and (option := _node_option(node, _room(node, free[node], taken), claim.per_node, movable, context))
        ]
        if not options:
            return Reclaim(claim.job_id, reason="no node can free what it needs within the laws")
        _, node, picked = min(options, key=lambda option: (option[0], option[1]))
        chosen.append(node)
        taken.update((job.job_id, job) for job in picked)
    victims = sorted(taken.values(), key=newest_first)
    if len(victims) > rules.budget:
        return Reclaim(claim.job_id, reason=f"it needs {len(victims)} victims, {rules.budget} allowed this cycle")
    width = len(accounts.capacity)
    lost = tuple(sum(int(job.total[r] * max(now - job.start, 0.0)) for job in victims) for r in range(width))
    return Reclaim(claim.job_id, tuple(job.job_id for job in victims), tuple(sorted(chosen)), lost)


def fitting_nodes(free: Mapping[str, Vector], claim: Claim, key: Callable[[str], Any] | None = None) -> list[str]:
    """The first of the claim's nodes (in `key`'s order, names by default) where it fits in what is free;
    none if too few do: where Slurm starts a claim that needs no victim."""
    fits = [node for node in sorted(claim.eligible & free.keys(), key=key) if _covers(free[node], claim.per_node)]
    return fits[: claim.nodes] if len(fits) >= claim.nodes else []


def _room(node: str, free: Vector, taken: Mapping[str, Running]) -> Vector:
    """What `node` holds for the claim: its free room and what the victims already taken free there
    (a victim on several nodes frees each of them)."""
    for job in taken.values():
        if node in job.allocation:
            free = _add(free, job.allocation[node])
    return free


def _movable(job: Running, claim: Claim, accounts: Accounts, floor: Fraction, now: float, rules: Rules) -> bool:
    """Laws 2, 3 and 6 for one job alone: may it be a victim at all."""
    if job.account == claim.account or job.exempt or not (job.requeueable or rules.cancel):
        return False
    if now - job.start < rules.min_runtime:
        return False
    if job.moved_at is not None and now - job.moved_at < rules.cooldown:
        return False
    return _account_keeps(job.account, (job,), accounts, floor)


def _account_keeps(account: str, jobs: Sequence[Running], accounts: Accounts, floor: Fraction) -> bool:
    """Whether `account` without `jobs` keeps a share of at least `floor` and its guarantee (laws 2, 3)."""
    after = accounts.usage_of(account)
    for job in jobs:
        after = _add(after, job.total, -1)
    if accounts.share(account, after) < floor:
        return False
    guaranteed = accounts.guaranteed_share(account, after)
    return guaranteed is None or guaranteed >= 1


def _laws_hold(victims: Iterable[Running], accounts: Accounts, floor: Fraction) -> bool:
    """Laws 2 and 3 for a set of victims together: every account they belong to keeps both."""
    by_account: dict[str, list[Running]] = {}
    for job in victims:
        by_account.setdefault(job.account, []).append(job)
    return all(_account_keeps(account, jobs, accounts, floor) for account, jobs in by_account.items())


# Up to this many candidates on a node, the fewest victims are found by trying every set (smallest
# first, newest first within a size); past it, newest first then pruned.
SEARCH_LIMIT = 10


def _covered(node: str, free: Vector, need: Vector, jobs: Sequence[Running]) -> bool:
    room = free
    for job in jobs:
        room = _add(room, job.allocation[node])
    return _covers(room, need)


def _fewest(
    node: str,
    free: Vector,
    need: Vector,
    here: Sequence[Running],
    context: tuple[Accounts, Fraction, Sequence[Running]],
) -> list[Running] | None:
    """The smallest set of `here` (newest first among sets of one size) that frees `need` within the laws."""
    accounts, floor, taken = context
    if _covers(free, need):
        return []
    for size in range(1, len(here) + 1):
        for subset in itertools.combinations(here, size):
            if _covered(node, free, need, subset) and _laws_hold([*taken, *subset], accounts, floor):
                return list(subset)
    return None


def _newest_first(
    node: str,
    free: Vector,
    need: Vector,
    here: Sequence[Running],
    context: tuple[Accounts, Fraction, Sequence[Running]],
) -> list[Running] | None:
    """Newest first, each taken if it frees something still lacking within the laws; then pruned (oldest first)."""
    accounts, floor, taken = context
    picked: list[Running] = []
    room = free
    for job in here:
        if _covers(room, need):
            break
        helps = any(a > 0 and r < n for a, r, n in zip(job.allocation[node], room, need, strict=True))
        if helps and _laws_hold([*taken, *picked, job], accounts, floor):
            picked.append(job)
            room = _add(room, job.allocation[node])
    if not _covers(room, need):
        return None
    for job in list(reversed(picked)):
        without = _add(room, job.allocation[node], -1)
        if _covers(without, need):
            picked.remove(job)
            room = without
    return picked


def _node_option(
    node: str,
    free: Vector,
    need: Vector,
    movable: Sequence[Running],
    context: tuple[Accounts, Fraction, float, tuple[Running, ...]],
) -> tuple[tuple[float, ...], str, tuple[Running, ...]] | None:
    """The fewest, newest victims on `node` that free `need` (law 5), as (cost, node, victims); None if none do.

    `_fewest` (every set, smallest first) up to SEARCH_LIMIT candidates, else
    `_newest_first`; laws 2 and 3 counted with the victims `taken` on other
    nodes. The cost: how many, then how long they have run (the work a
    requeue loses).
    """
    accounts, floor, now, taken = context
    here = sorted((job for job in movable if node in job.allocation), key=newest_first)
    here = [job for job in here if job not in taken]
    picked = _fewest(node, free, need, here, (accounts, floor, taken)) if len(here) <= SEARCH_LIMIT else None
    if picked is None:
        picked = _newest_first(node, free, need, here, (accounts, floor, taken))
    if picked is None:
        return None
    cost = (float(len(picked)), sum(max(now - job.start, 0.0) for job in picked))
    return cost, node, tuple(picked)
