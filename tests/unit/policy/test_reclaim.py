"""Reclaim's laws (slurm_drf/policy/reclaim.py, docs/rule.md §9), each held on random clusters, and the cases
peers got wrong (Kueue #3779, #7101, #6763: preemption loops; victims on nodes where the waiting job cannot run)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_drf.policy.reclaim import (
    Accounts,
    Claim,
    Reclaim,
    Rules,
    Running,
    choose_victims,
    within_guarantee,
)

CAPACITY_PER_NODE = (8, 64, 4)  # cpu, mem (GiB), gpu
NODES = ("n1", "n2", "n3")
NOW = 10_000.0


def _accounts(
    running: Sequence[Running], guarantees: Mapping[str, Mapping[int, int]], weights: Mapping[str, Fraction]
) -> Accounts:
    usage: dict[str, tuple[int, ...]] = {}
    for job in running:
        usage[job.account] = tuple(u + t for u, t in zip(usage.get(job.account, (0, 0, 0)), job.total, strict=True))
    capacity = tuple(c * len(NODES) for c in CAPACITY_PER_NODE)
    return Accounts(capacity, usage, weights, guarantees)


def _free(running: Sequence[Running]) -> dict[str, tuple[int, ...]]:
    free: dict[str, tuple[int, ...]] = {n: CAPACITY_PER_NODE for n in NODES}
    for job in running:
        for node, allocation in job.allocation.items():
            free[node] = tuple(f - a for f, a in zip(free[node], allocation, strict=True))
    return free


@st.composite
def _clusters(draw: st.DrawFn) -> tuple[Claim, dict[str, tuple[int, ...]], list[Running], Accounts, Rules]:
    running: list[Running] = []
    free: dict[str, tuple[int, ...]] = {n: CAPACITY_PER_NODE for n in NODES}
    for k in range(draw(st.integers(0, 14))):
        node = draw(st.sampled_from(NODES))
        allocation = tuple(draw(st.integers(f // 2, f)) for f in free[node])
        if not any(allocation):
            continue
        free[node] = tuple(f - a for f, a in zip(free[node], allocation, strict=True))
        running.append(
            Running(
                f"r{k}",
                draw(st.sampled_from("bbbccda")),
                {node: allocation},
                start=float(draw(st.integers(0, 9_999))),
                requeueable=draw(st.integers(0, 4)) > 0,
                exempt=draw(st.integers(0, 5)) == 0,
                moved_at=draw(st.one_of(st.none(), st.integers(5_000, 9_999).map(float))),
            )
        )
    claim = Claim(
        "w1",
        draw(st.sampled_from("abcd")),
        tuple(draw(st.integers(0, c // 2 + 1)) for c in CAPACITY_PER_NODE),
        draw(st.integers(1, 2)),
        frozenset(draw(st.lists(st.sampled_from(NODES), min_size=2, unique=True))),
    )
    guarantees: dict[str, dict[int, int]] = {}
    for account in "abcd":
        if draw(st.booleans()) or account == claim.account:
            named = draw(st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True))
            guarantees[account] = {r: draw(st.integers(0, CAPACITY_PER_NODE[r] * 2)) for r in named}
    if draw(st.integers(0, 4)):  # mostly: the claim is within its account's guarantee
        used = [sum(job.total[r] for job in running if job.account == claim.account) for r in range(3)]
        guarantees[claim.account] = {
            r: used[r] + claim.per_node[r] * claim.nodes + draw(st.integers(0, 4)) for r in guarantees[claim.account]
        }
    weights = {a: Fraction(draw(st.integers(1, 3))) for a in "abcd"}
    rules = Rules(
        min_runtime=float(draw(st.sampled_from([0, 600, 3_000]))),
        cooldown=float(draw(st.sampled_from([0, 3_600]))),
        budget=draw(st.sampled_from([0, 1, 2, 4, 4, 4])),
        cancel=draw(st.booleans()),
    )
    return claim, _free(running), running, _accounts(running, guarantees, weights), rules


def _check_laws(
    claim: Claim,
    free: Mapping[str, tuple[int, ...]],
    running: Sequence[Running],
    accounts: Accounts,
    rules: Rules,
    got: Reclaim,
) -> None:
    by_id = {job.job_id: job for job in running}
    victims = [by_id[v] for v in got.victims]
    assert within_guarantee(claim, accounts)  # law 1
    demand = tuple(n * claim.nodes for n in claim.per_node)
    claimant = tuple(u + d for u, d in zip(accounts.usage_of(claim.account), demand, strict=True))
    floor = accounts.share(claim.account, claimant)
    for account in {job.account for job in victims}:
        after = accounts.usage_of(account)
        for job in victims:
            if job.account == account:
                after = tuple(u - t for u, t in zip(after, job.total, strict=True))
        assert account != claim.account
        assert accounts.share(account, after) >= floor  # law 2
        guaranteed = accounts.guaranteed_share(account, after)
        assert guaranteed is None or guaranteed >= 1  # law 3
    for job in victims:  # law 6
        assert not job.exempt and (job.requeueable or rules.cancel)
        assert NOW - job.start >= rules.min_runtime
        assert job.moved_at is None or NOW - job.moved_at >= rules.cooldown
    assert 0 < len(victims) <= rules.budget
    # Law 4: the chosen nodes are the claim's, and each then holds what it needs.
    assert len(got.nodes) == claim.nodes and set(got.nodes) <= claim.eligible
    room = {n: free[n] for n in got.nodes}
    for job in victims:
        assert set(job.allocation) & set(got.nodes), job  # never a job on a node the claim does not use
        for node in set(job.allocation) & set(got.nodes):
            room[node] = tuple(r + a for r, a in zip(room[node], job.allocation[node], strict=True))
    assert all(all(r >= n for r, n in zip(room[node], claim.per_node, strict=True)) for node in got.nodes)
    # Law 5: no victim is spare (without any one of them, some chosen node lacks what the claim needs).
    for job in victims:
        assert any(
            not all(
                r - a >= n
                for r, a, n in zip(room[node], job.allocation.get(node, (0, 0, 0)), claim.per_node, strict=True)
            )
            for node in got.nodes
        ), job


@settings(max_examples=200, deadline=None)
@given(_clusters())
def test_every_reclaim_keeps_the_laws(
    cluster: tuple[Claim, dict[str, tuple[int, ...]], list[Running], Accounts, Rules],
) -> None:
    claim, free, running, accounts, rules = cluster
    got = choose_victims(claim, free, running, accounts, NOW, rules)
    if got.victims:
        _check_laws(claim, free, running, accounts, rules, got)
        assert got.reason == ""
    else:
        assert got.reason and not got.nodes


def _movable_alone(job: Running, claim: Claim, rules: Rules) -> bool:
    return (
        job.account != claim.account
        and not job.exempt
        and (job.requeueable or rules.cancel)
        and NOW - job.start >= rules.min_runtime
        and (job.moved_at is None or NOW - job.moved_at >= rules.cooldown)
    )


@settings(max_examples=200, deadline=None)
@given(_clusters())
def test_where_a_lawful_set_of_victims_exists_on_one_node_reclaim_finds_one(
    cluster: tuple[Claim, dict[str, tuple[int, ...]], list[Running], Accounts, Rules],
) -> None:
    """Brute force over every subset of one node's jobs, for single-node claims: none found means none exists."""
    claim, free, running, accounts, rules = cluster
    if claim.nodes != 1 or not within_guarantee(claim, accounts):
        return
    if any(all(f >= n for f, n in zip(free[node], claim.per_node, strict=True)) for node in claim.eligible):
        return
    got = choose_victims(claim, free, running, accounts, NOW, rules)
    exists = any(
        _lawful(subset, node, claim, free, accounts)
        for node in sorted(claim.eligible)
        for size in range(1, rules.budget + 1)
        for subset in itertools.combinations(
            [job for job in running if node in job.allocation and _movable_alone(job, claim, rules)], size
        )
    )
    assert bool(got.victims) == exists, (got, exists)


def _lawful(
    subset: Sequence[Running], node: str, claim: Claim, free: Mapping[str, tuple[int, ...]], accounts: Accounts
) -> bool:
    """Whether requeuing `subset` frees what the claim needs on `node` within laws 2 and 3."""
    room = free[node]
    for job in subset:
        room = tuple(r + a for r, a in zip(room, job.allocation[node], strict=True))
    if not all(r >= n for r, n in zip(room, claim.per_node, strict=True)):
        return False
    usage = accounts.usage_of(claim.account)
    floor = accounts.share(claim.account, tuple(u + d for u, d in zip(usage, claim.per_node, strict=True)))
    for account in {job.account for job in subset}:
        after = accounts.usage_of(account)
        for job in subset:
            if job.account == account:
                after = tuple(u - t for u, t in zip(after, job.total, strict=True))
        guaranteed = accounts.guaranteed_share(account, after)
        if accounts.share(account, after) < floor or not (guaranteed is None or guaranteed >= 1):
            return False
    return True


def test_a_claim_on_two_nodes_takes_the_newest_on_each_and_counts_what_they_lose() -> None:
    running = [
        _job("b1", "b", "n1", (8, 64, 4), 1_000.0),
        _job("b2", "b", "n2", (4, 32, 2), 2_000.0),
        _job("c2", "c", "n2", (4, 32, 2), 9_000.0),
        _job("c3a", "c", "n3", (4, 32, 2), 8_000.0),
        _job("c3b", "c", "n3", (4, 32, 2), 3_000.0),
    ]
    accounts = _accounts(running, {"a": {2: 8}}, {})
    claim = Claim("w1", "a", (2, 8, 1), 2, frozenset(NODES))
    got = choose_victims(claim, _free(running), running, accounts, NOW, Rules(min_runtime=0))
    # One victim frees each node, the newest there; n2's and n3's have run the least (b1, 9,000 s).
    assert got.nodes == ("n2", "n3") and got.victims == ("c2", "c3a")
    assert got.lost == (4 * 1_000 + 4 * 2_000, 32 * 1_000 + 32 * 2_000, 2 * 1_000 + 2 * 2_000)
    _check_laws(claim, _free(running), running, accounts, Rules(min_runtime=0), got)


def _job(
    job_id: str, account: str, node: str, allocation: tuple[int, int, int], start: float, **more: object
) -> Running:
    return Running(job_id, account, {node: allocation}, start, **more)  # type: ignore[arg-type]


def test_the_newest_job_goes_first_and_no_more_than_the_claim_needs() -> None:
    running = [
        _job("old", "b", "n1", (2, 16, 2), 1_000.0),
        _job("new", "b", "n1", (2, 16, 2), 8_000.0),
        _job("c1", "c", "n2", (8, 64, 4), 1_000.0),
        _job("c2", "c", "n3", (8, 64, 4), 1_000.0),
        _job("b3", "b", "n1", (4, 32, 0), 2_000.0),
    ]
    accounts = _accounts(running, {"a": {2: 4}}, {})
    claim = Claim("w1", "a", (2, 8, 2), 1, frozenset(NODES))
    got = choose_victims(claim, _free(running), running, accounts, NOW, Rules(min_runtime=0))
    assert got.victims == ("new",) and got.nodes == ("n1",)
    assert got.lost == (2 * 2_000, 16 * 2_000, 2 * 2_000)


def test_of_two_started_in_the_same_second_the_later_submitted_goes_first() -> None:
    """Slurm keeps start times in whole seconds: jobs 11 and 12 started together; 12 was submitted later,
    so it is the newer, and goes (the job id as text put 11 first)."""
    running = [
        _job("11", "b", "n1", (2, 16, 2), 5_000.0),
        _job("12", "b", "n1", (2, 16, 2), 5_000.0),
        _job("c1", "c", "n2", (8, 64, 4), 1_000.0),
        _job("c2", "c", "n3", (8, 64, 4), 1_000.0),
    ]
    accounts = _accounts(running, {"a": {2: 4}}, {})
    claim = Claim("w1", "a", (2, 8, 2), 1, frozenset(NODES))
    got = choose_victims(claim, _free(running), running, accounts, NOW, Rules(min_runtime=0))
    assert got.victims == ("12",) and got.nodes == ("n1",)


def test_gpus_freed_on_a_node_whose_cpus_stay_full_free_nothing() -> None:
    """n1's CPUs are held by an exempt job: its GPU job is no use to a claim that needs CPUs too."""
    running = [
        _job("cpus", "c", "n1", (8, 8, 0), 1_000.0, exempt=True),
        _job("gpus", "b", "n1", (0, 8, 4), 1_000.0),
        _job("full2", "b", "n2", (8, 64, 4), 1_000.0),
        _job("full3", "b", "n3", (8, 64, 4), 1_000.0),
    ]
    accounts = _accounts(running, {"a": {2: 4}}, {})
    claim = Claim("w1", "a", (2, 8, 2), 1, frozenset({"n1"}))
    got = choose_victims(claim, _free(running), running, accounts, NOW, Rules(min_runtime=0))
    assert got.victims == () and "no node" in got.reason
    # Where it may also run on n2, n2's job makes room.
    wider = Claim("w1", "a", (2, 8, 2), 1, frozenset({"n1", "n2"}))
    assert choose_victims(wider, _free(running), running, accounts, NOW, Rules(min_runtime=0)).nodes == ("n2",)


def test_two_guaranteed_accounts_never_take_turns() -> None:
    """Kueue #3779/#7101: a and b, each guaranteed half, alternate demand. Whoever reclaims lands at or below the
    other's share, so the other cannot reclaim back: over many rounds, each job is moved at most once."""
    half = {r: c * len(NODES) // 2 for r, c in enumerate(CAPACITY_PER_NODE)}
    guarantees = {"a": half, "b": half}
    running: list[Running] = [_job(f"b{k}", "b", node, CAPACITY_PER_NODE, 0.0) for k, node in enumerate(NODES)]
    moved: dict[str, int] = {}
    clock = 5_000.0
    rules = Rules(min_runtime=0, cooldown=0, budget=4)
    for round_ in range(40):
        claimant = "ab"[round_ % 2]
        accounts = _accounts(running, guarantees, {})
        claim = Claim(f"w{round_}", claimant, CAPACITY_PER_NODE, 1, frozenset(NODES))
        got = choose_victims(claim, _free(running), running, accounts, clock, rules)
        for victim in got.victims:
            moved[victim] = moved.get(victim, 0) + 1
        if got.victims:
            running = [job for job in running if job.job_id not in got.victims]
            running.append(_job(f"w{round_}", claimant, got.nodes[0], CAPACITY_PER_NODE, clock))
        clock += 100.0
    assert moved and max(moved.values()) == 1
    # Settled at the guarantees: one claim reclaimed (a reaches one node of three; b keeps two, above a).
    assert sum(moved.values()) == 1


def test_a_victim_on_several_nodes_frees_each_of_them_for_a_claim_on_several_nodes() -> None:
    """Kueue #7101's first half: proj-1 holds 8 nodes with four 2-node jobs, proj-2 (guaranteed half) asks for 4
    nodes. Two victims free them (4:4, within every law); the claim must not fail for want of a victim on the
    second node of a job already taken, nor take one per node (a 2-node claim takes one job, not two)."""
    node = (8, 64, 4)
    names = [f"m{k}" for k in range(8)]
    running = [Running(f"p1-{k}", "p1", {names[2 * k]: node, names[2 * k + 1]: node}, float(k)) for k in range(4)]
    half = {r: 4 * c for r, c in enumerate(node)}
    accounts = Accounts(tuple(8 * c for c in node), {"p1": tuple(8 * c for c in node)}, {}, {"p1": half, "p2": half})
    free = {n: (0, 0, 0) for n in names}
    rules = Rules(min_runtime=0, cooldown=0)
    for nodes, victims in ((4, ("p1-3", "p1-2")), (3, ("p1-3", "p1-2")), (2, ("p1-3",)), (1, ("p1-3",))):
        got = choose_victims(Claim("w", "p2", node, nodes, frozenset(names)), free, running, accounts, NOW, rules)
        assert got.victims == victims and len(got.nodes) == nodes, (nodes, got)
    # Five nodes would take proj-1 below its guarantee (law 3): nothing.
    assert (
        choose_victims(Claim("w", "p2", node, 5, frozenset(names)), free, running, accounts, NOW, rules).victims == ()
    )


def test_an_account_guaranteed_nothing_can_lose_its_last_job() -> None:
    """A guarantee of 0 GPUs (a group member whose siblings hold the group's guarantee) is met with no GPU in
    use: law 3 does not keep b's last GPU job (b keeps a CPU job, so law 2 holds: 1/3 each)."""
    running = [_job("b1", "b", "n1", CAPACITY_PER_NODE, 0.0), _job("b2", "b", "n2", (8, 8, 0), 0.0)]
    accounts = _accounts(running, {"a": {2: 4}, "b": {2: 0}}, {})
    assert accounts.guaranteed_share("b", (8, 8, 0)) == 1
    claim = Claim("w1", "a", (1, 1, 4), 1, frozenset({"n1"}))
    got = choose_victims(claim, _free(running), running, accounts, NOW, Rules())
    assert got.victims == ("b1",)


def test_a_claim_outside_its_guarantee_or_one_that_fits_reclaims_nothing() -> None:
    running = [_job(f"b{k}", "b", node, CAPACITY_PER_NODE, 0.0) for k, node in enumerate(NODES)]
    accounts = _accounts(running, {"a": {2: 2}}, {})
    big = Claim("w1", "a", (1, 1, 4), 1, frozenset(NODES))  # 4 GPUs against a guarantee of 2
    assert "not within its guarantee" in choose_victims(big, _free(running), running, accounts, NOW, Rules()).reason
    none = Claim("w2", "c", (1, 1, 1), 1, frozenset(NODES))  # c has no guarantee at all
    assert choose_victims(none, _free(running), running, accounts, NOW, Rules()).victims == ()
    fits = Claim("w3", "a", (0, 0, 0), 1, frozenset(NODES))
    assert "fits in what is free" in choose_victims(fits, _free(running), running, accounts, NOW, Rules()).reason
