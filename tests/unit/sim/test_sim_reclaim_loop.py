"""Reclaim over many cycles (issue 39): the simulator's `drf-reclaim` (the daemon's order with guarantees, and
the victims `policy.reclaim.choose_victims` picks, the same code the daemon runs) played for days, and the
preemption loops Kueue's users met (#3779, #7101, #6763) replayed from their issue descriptions.

The bound (docs/rule.md §9, docs/properties.md): a claim is only a job within its account's guarantee (law 1),
and no account is taken below its guarantee (law 3). With whole-node jobs, every requeue moves one node from an
account over its guarantee to one under its own; nodes over a guarantee come only from jobs started on free
nodes, which only job ends make. So between two demand switches the requeues are at most the nodes free or
held over the guarantees at the switch plus the nodes that jobs ending meanwhile free, and never a job twice
(the simulator's cooldown is forever), or, with the daemon's one-hour cooldown, never twice within it. It is not
the claimant's lack at the switch alone: while a victim waits out Slurm's requeue delay, a job that ends may
start one of the other account's, which the victim's account then takes back (once per job that ends).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from fractions import Fraction

from slurm_drf.policy.guarantees import UNNAMED
from slurm_drf.policy.reclaim import Accounts, Claim, Rules, Running, choose_victims
from slurm_drf.sim.engine import simulate
from slurm_drf.sim.options import SimResult
from slurm_drf.sim.reclaim import DEFAULT_RULES, ReclaimPolicy, ReclaimSettings
from slurm_drf.sim.table import build_workload_table
from slurm_drf.sim.view import SimulatorView
from slurm_drf.sim.workload import NodeType, Workload, WorkloadJob

NODE = NodeType(cpu=64, mem=512_000, gpu=8)
HOUR = 3_600.0
AFTER = 600.0  # ReclaimSettings' default: a claim waits this long before it reclaims
TICK = 60.0


def _job(job_id: str, account: str, submit: float, hours: float, nodes: int = 1) -> WorkloadJob:
    """A job of `nodes` whole nodes (a node is the unit every guarantee below is counted in)."""
    seconds = hours * HOUR
    return WorkloadJob(job_id, account, f"{account}-u", submit, seconds, seconds, NODE.cpu, NODE.mem, NODE.gpu, nodes)


def _workload(jobs: Sequence[WorkloadJob], nodes: int) -> Workload:
    return Workload("loop", "reclaim loop", tuple(jobs), nodes, NODE)


def _moves(result: SimResult) -> dict[int, list[float]]:
    """Each requeued job (by its index in the run) and when it was requeued."""
    moves: dict[int, list[float]] = {}
    for job, when, _ in result.requeued:
        moves.setdefault(job, []).append(when)
    return moves


def _account(result: SimResult, job: int) -> str:
    return result.accounts[int(result.job_account[job])]


def _runs(result: SimResult) -> list[tuple[int, str, int, float, float]]:
    """Every run of every job: (job, account, nodes, start, end); a requeued run ends when it was requeued."""
    wanted = build_workload_table(result.workload).job_nodes_wanted
    runs = [
        (job, _account(result, job), wanted[job], s, e)
        for job, (s, e) in enumerate(zip(result.start.tolist(), result.end.tolist(), strict=True))
    ]
    runs.extend((job, _account(result, job), wanted[job], when - ran, when) for job, when, ran in result.requeued)
    return runs


def _nodes_held(runs: Sequence[tuple[int, str, int, float, float]], account: str, when: float) -> int:
    """The nodes `account` holds just after the tick at `when` (its ends and requeues done, its starts made)."""
    return sum(nodes for _, a, nodes, start, end in runs if a == account and start <= when < end)


# ---------------------------------------------------------------------------------------------------------
# (a) Two accounts guaranteed half each, alternating bursts, four simulated days.

NODES = 8
GUARANTEE = NODES // 2  # each account's weighted fair share, which drf-reclaim guarantees it
PERIOD = 8 * HOUR
DAYS = 4


def _alternating(seed: int) -> tuple[Workload, list[tuple[float, str]]]:
    """Every PERIOD the other account submits a burst of 5-7 one-node jobs of 6-14 hours: it switches in
    while the last burst still holds the pool. The switches: (when, who)."""
    rng = random.Random(seed)
    jobs: list[WorkloadJob] = []
    switches: list[tuple[float, str]] = []
    for k in range(int(DAYS * 24 * HOUR // PERIOD)):
        account, at = "ab"[k % 2], k * PERIOD
        switches.append((at, account))
        for n in range(rng.randint(5, 7)):
            jobs.append(_job(f"{account}{k}-{n}", account, at + n, rng.uniform(6, 14)))
    return _workload(jobs, NODES), switches


def _above(runs: Sequence[tuple[int, str, int, float, float]], when: float) -> int:
    """The nodes not held within a guarantee just after the tick at `when`: free, or held over one."""
    return NODES - sum(min(_nodes_held(runs, account, when), GUARANTEE) for account in "ab")


def _check_alternating(result: SimResult, switches: Sequence[tuple[float, str]], cooldown: float) -> int:
    """The bound of the module docstring, switch by switch, and laws 1 and 3 at every requeue; the requeues."""
    moves = _moves(result)
    runs = _runs(result)
    requeued = {(job, when) for job, when, _ in result.requeued}
    for job, times in moves.items():
        assert all(b - a >= cooldown for a, b in itertools.pairwise(times)), (job, times)
    bounds = [*switches, (math.inf, "")]
    for (at, _), (until, _) in itertools.pairwise(bounds):
        moved = [(job, when) for job, times in moves.items() for when in times if at <= when < until]
        ended = sum(n for job, _, n, _, end in runs if at < end < until and (job, end) not in requeued)
        assert len(moved) <= _above(runs, at) + ended, (at, moved, _above(runs, at), ended)
        for job, when in moved:
            # The victim's account keeps its guarantee; the claimant (the other) does not pass its own.
            victim = _account(result, job)
            claimant = "b" if victim == "a" else "a"
            assert _nodes_held(runs, victim, when) >= GUARANTEE, (job, when)
            assert _nodes_held(runs, claimant, when) <= GUARANTEE, (job, when)
    return sum(len(times) for times in moves.values())


def test_two_accounts_guaranteed_half_each_with_alternating_demand_stay_within_the_bound_for_days() -> None:
    """drf-reclaim as the simulator runs it (a job requeued once is never a victim again). Over 4 days and 12
    demand switches: per switch, no more requeues than the bound; at each, the victim's account keeps its
    guarantee and the claimant stays within its own; no job twice. Both accounts do reclaim (the test would
    pass vacuously otherwise)."""
    workload, switches = _alternating(seed=39)
    result = simulate(workload, ReclaimPolicy())
    total = _check_alternating(result, switches, cooldown=math.inf)
    assert all(len(times) == 1 for times in _moves(result).values())
    assert 0 < total <= GUARANTEE * len(switches)
    # Every switch after the first finds the pool full of the other account's jobs: each reclaims.
    claimed = {
        claimant for at, claimant in switches[1:] for times in _moves(result).values() if at <= times[0] < at + PERIOD
    }
    assert claimed == {"a", "b"}


def test_with_the_daemons_one_hour_cooldown_the_bound_holds_and_no_job_moves_twice_within_it() -> None:
    """The same play with the daemon's default rules (policy.reclaim.Rules: ten minutes' run at least, an hour's
    cooldown): a restarted victim may be moved again at a later switch, never within the hour, and every switch
    keeps the bound."""
    workload, switches = _alternating(seed=7)
    settings = ReclaimSettings(rules=replace(DEFAULT_RULES, cooldown=HOUR))
    result = simulate(workload, ReclaimPolicy(settings=settings))
    total = _check_alternating(result, switches, cooldown=HOUR)
    assert 0 < total <= GUARANTEE * len(switches)


# ---------------------------------------------------------------------------------------------------------
# (b) Kueue's loops, from their issue descriptions.


class _Configured(ReclaimPolicy):
    """drf-reclaim with guarantees as a site would configure them (`accounts.KEY.guarantee: 50%`), where the
    simulator's own gives each account its weighted fair share; an account not named has none."""

    def __init__(self, shares: Mapping[str, Fraction]) -> None:
        super().__init__()
        self.shares = shares

    def bind(self, sim: SimulatorView) -> None:
        super().bind(sim)
        rows = self.guarantee_rows
        assert rows is not None
        for a, name in enumerate(sim.table.accounts):
            share = self.shares.get(name, Fraction(0))
            vector = (
                math.floor(share * sim.capacity[0]),
                math.floor(share * sim.capacity[1]),
                math.floor(share * sim.capacity[2]),
            )
            self.guarantee[a] = vector
            named = [
                UNNAMED if missing else int(vector[c]) for c, missing in zip(self.columns, self.missing, strict=True)
            ]
            rows[a] = named if share else None


def test_kueue_3779_a_tenant_over_its_guarantee_never_preempts_the_best_effort_job_it_would_take_turns_with() -> None:
    """Kueue #3779 (flat cohort): tenants A and B guaranteed 150m each of 300m, BestEffort nothing. A1 (250m) and
    BestEffort1 (50m) run; A2 (50m) arrives: Kueue preempted BestEffort1, its Deployment recreated it, it was
    admitted again (its ClusterQueue's share was below A's), preempted again, and so on. Here one node is 50m
    (6 nodes), A runs 4 and BestEffort 2, and BestEffort keeps recreating work every half hour for a day while
    A keeps asking for more. While A is over its guarantee none of its jobs is a claim (law 1): nothing is
    requeued for A. When B (within its guarantee) asks for a node, one BestEffort job is requeued, once; that
    job, ordered ahead of A's by its lower share, restarts, and is never moved again. B's second job takes
    nothing: BestEffort's last job and A's are kept by laws 2 and 3 (a limit of the laws: B waits for room).
    Once A's big job ends, A reclaims up to its guarantee, from BestEffort only."""
    jobs = [_job("a1", "A", 0.0, 20.0, nodes=4), _job("be1", "BE", 30.0, 3.0), _job("be2", "BE", 31.0, 3.0)]
    jobs += [_job(f"a{2 + k}", "A", 300.0 + k * HOUR, 1.0) for k in range(20)]
    jobs += [_job(f"be{3 + k}", "BE", 1_800.0 * (k + 1), 2.0) for k in range(48)]
    jobs += [_job("b1", "B", 2 * HOUR, 4.0), _job("b2", "B", 2.5 * HOUR, 4.0)]
    workload = _workload(jobs, 6)
    result = simulate(workload, _Configured({"A": Fraction(1, 2), "B": Fraction(1, 2)}))
    moves = _moves(result)
    b1, b2 = (job for job in range(len(result.start)) if _account(result, job) == "B")
    # While A is over its guarantee (its 4-node job runs 20 hours) one requeue: for B's claim, of a BestEffort
    # job, which B1 starts in place of.
    early = [(_account(result, job), when) for job, times in moves.items() for when in times if when < 20 * HOUR]
    assert early == [("BE", result.start[b1])] and result.start[b1] <= 2 * HOUR + AFTER + 2 * TICK
    # Later A, its big job over, is below its guarantee and reclaims up to it: only from BestEffort (guaranteed
    # nothing), no job twice, and A never past its 3 nodes: at most 3 more.
    runs = _runs(result)
    assert {_account(result, job) for job in moves} == {"BE"} and all(len(t) == 1 for t in moves.values())
    assert all(_nodes_held(runs, "A", when) <= 3 for when in (t[0] for t in moves.values()) if when >= 20 * HOUR)
    assert len(result.requeued) <= 1 + 3
    # B2 is within B's guarantee too, but BestEffort's last job is kept (law 2: its share would end below B's)
    # and A's 4-node job too (laws 2 and 3): B2 waits for a job to end.
    assert result.start[b2] >= 3 * HOUR
    # Nothing moved before B asked, though A waited over its guarantee all that time.
    assert all(times[0] >= 2 * HOUR for times in moves.values())


def _kueue_7101(sizes: Sequence[int]) -> tuple[SimResult, dict[int, int]]:
    """Kueue #7101's cluster: 8 nodes (a pod is a node), proj-1 and proj-2 guaranteed half each (their weighted
    fair shares); proj-1 runs four 2-pod groups for a day, then proj-2 submits groups of `sizes` pods a minute
    apart, each of 2 hours. The result, and each proj-2 group's job by its size."""
    jobs = [_job(f"p1-{k}", "proj-1", float(k), 24.0, nodes=2) for k in range(4)]
    jobs += [_job(f"p2-{n}", "proj-2", 60.0 * (k + 1), 2.0, nodes=n) for k, n in enumerate(sizes)]
    result = simulate(_workload(jobs, 8), ReclaimPolicy())
    by_size = {len(result.job_nodes[job]): job for job in range(len(result.start)) if _account(result, job) == "proj-2"}
    return result, by_size


def test_kueue_7101_the_four_pod_group_is_admitted_with_two_preemptions_and_the_three_pod_group_never_flaps() -> None:
    """Kueue #7101 (v0.13.5, LessThanOrEqualToFinalShare): proj-1 holds the cluster with four 2-pod groups;
    proj-2's 4-pod group was not admitted though 0:8 to 4:4 is fair, and a 3-pod group after it was preempted
    33 times and counting. Here the 4-pod group's claim is within proj-2's guarantee: two 2-node jobs of proj-1
    (the newest) are requeued, once each, and it starts at that tick; the 3-pod group is over the guarantee then
    (4 + 3 > 4): it is never a claim and waits, and nothing else is ever requeued. (The policy-level case is
    tests/unit/policy/test_reclaim.py's: a victim on two nodes frees both, which the 4-node claim needs.)"""
    result, group = _kueue_7101([4, 3])
    moves = _moves(result)
    assert sorted(moves) == [2, 3] and all(len(times) == 1 for times in moves.values())
    assert {_account(result, job) for job in moves} == {"proj-1"}
    (when,) = {times[0] for times in moves.values()}
    assert result.start[group[4]] == when <= 60.0 + AFTER + 2 * TICK
    assert result.start[group[3]] >= result.end[group[4]]  # it waited for room, taking none


def test_kueue_7101_groups_bigger_than_the_guarantee_ahead_of_it_move_nothing() -> None:
    """Kueue #7101's first sequence: proj-2 submits 6-, 5-, 4- and 3-pod groups in that order. The 6- and 5-pod
    groups are over proj-2's guarantee, and an account's own order is kept (docs/rule.md §9: once one job is
    not within, none after it is), so no group is a claim while they lead: nothing is requeued, ever; the
    groups start as proj-1's jobs end."""
    result, group = _kueue_7101([6, 5, 4, 3])
    assert result.requeued == ()
    assert min(result.start[job] for job in group.values()) >= 24 * HOUR


def test_kueue_6763_tied_accounts_lose_one_job_each_and_the_choice_is_the_same_every_time() -> None:
    """Kueue #6763: with two ClusterQueues at equal shares, the fair-sharing preemption picked one by a hash
    set's order; run again for the same preemptor until the preemption executed, it drew other targets and
    preempted more workloads than needed. Here b and c tie (3 one-node jobs each, started together, equal
    weights; 6 nodes, each account guaranteed 2) and a asks for 2 nodes: exactly 2 requeues, one of each
    (after the first, law 3 keeps the account that lost one at its guarantee), the same jobs in every run,
    and none more for the rest of the day although a keeps asking beyond its guarantee."""
    jobs = [_job(f"{account}{k}", account, 0.0, 24.0) for account in "bc" for k in range(3)]
    jobs += [_job(f"a{k}", "a", HOUR + k, 4.0) for k in range(6)]
    first = simulate(_workload(jobs, 6), ReclaimPolicy())
    again = simulate(_workload(jobs, 6), ReclaimPolicy())
    assert first.requeued == again.requeued and len(first.requeued) == 2
    assert sorted(_account(first, job) for job in _moves(first)) == ["b", "c"]
    # The other way round (c's jobs listed first), the same count and the same split.
    swapped = simulate(_workload([*jobs[3:6], *jobs[:3], *jobs[6:]], 6), ReclaimPolicy())
    assert sorted(_account(swapped, job) for job in _moves(swapped)) == ["b", "c"]


def test_kueue_6763_asking_again_before_the_claim_starts_takes_nothing_more_whatever_the_order() -> None:
    """#6763's mechanism at the daemon's next cycle, which the simulator cannot show (it starts a claim at the
    tick its victims go): the victims are requeued but the claim has not started. `choose_victims` asked again
    finds it fits in what is free and takes nothing; and however the running jobs are listed, the first answer
    is the same (ties go newest first, then by job id)."""
    node = (NODE.cpu, NODE.mem, NODE.gpu)
    names = [f"n{k}" for k in range(6)]
    running = [
        Running(f"{account}{k}", account, {names[3 * (account == "c") + k]: node}, 0.0)
        for account in "bc"
        for k in range(3)
    ]
    guarantee = {r: 2 * c for r, c in enumerate(node)}
    claim = Claim("a0", "a", node, 1, frozenset(names))
    rules = Rules(min_runtime=0, cooldown=math.inf)

    def ask(jobs: Sequence[Running]) -> tuple[str, ...]:
        usage = {account: tuple(3 * c for c in node) for account in "bc"}
        for job in running:
            if job not in jobs:
                usage[job.account] = tuple(u - c for u, c in zip(usage[job.account], node, strict=True))
        free = {n: node if not any(n in job.allocation for job in jobs) else (0, 0, 0) for n in names}
        accounts = Accounts(tuple(6 * c for c in node), usage, {}, dict.fromkeys("abc", guarantee))
        return choose_victims(claim, free, jobs, accounts, 10_000.0, rules).victims

    victims = ask(running)
    assert len(victims) == 1
    shuffled = list(running)
    for seed in range(20):
        random.Random(seed).shuffle(shuffled)
        assert ask(shuffled) == victims
    assert ask([job for job in running if job.job_id not in victims]) == ()
