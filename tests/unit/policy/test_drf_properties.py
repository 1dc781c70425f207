"""Property and regression tests of the DRF guarantees (docs/rule.md §2, §5).

The engine orders pending jobs; `allocation.place` plays the scheduler and
starts them in that order into the pool's free capacity (a job that does
not fit is skipped, the walk goes on). The classical guarantees of Ghodsi
et al., "Dominant Resource Fairness" (NSDI 2011), are statements about
that allocation. They are proved for divisible demands; jobs are
indivisible, so a few need a slack, each stated and argued where it is
tested:

- sharing incentive is exact when every account asks for the same task;
  with different tasks an account loses at most the room that one task of
  every other account takes (their last task may overshoot the fair share);
- envy-freeness holds up to one task of the envied account (EF1);
- strategy-proofness and monotone weights hold whenever the walk that
  would have to be beaten skipped nothing ahead of the account's last
  task. A skip is exactly where indivisibility bites: an account that
  inflates its demand can make a big job of another account stop fitting
  and take its room (`test_blocking_manipulation_is_the_only_gain` shows
  the smallest such case).

Sizes are moderate (1-6 accounts, 1-3 resources, demands 0-10, capacities
1-60, up to 30 jobs per account, or enough to stay backlogged) and all
arithmetic on shares is exact.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_drf.config.settings import NICE_LIMIT, Config, HistoryConfig, Mode, PoolConfig
from slurm_drf.model.types import PENDING, RUNNING, Job, Node, Snapshot, freeze_tres
from slurm_drf.policy.ownership import JobMemory
from slurm_drf.policy.plan import Plan, compute_plan, plan_order_pairs
from slurm_drf.policy.plan_columns import JobPlan
from slurm_drf.policy.pools import DEFAULT_POOL
from slurm_drf.policy.rule import flat_order
from slurm_drf.policy.state import PolicyState, advance_state
from tests.unit.policy.allocation import (
    Allocation,
    Placement,
    demand_vector,
    dominant_share,
    fits,
    free_capacity,
    place,
    plan_placements,
    tasks_in,
)

Vector = tuple[int, ...]

RESOURCE_NAMES = ("cpu", "mem", "gres/gpu")
ACCOUNT_NAMES = ("physics", "chem", "bio", "astro", "math", "geo")
PARTITION = "main"
SLURM_PRIORITY_MAX = 2**32 - 1

PROPERTY_SETTINGS = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


# --------------------------------------------------------------------------
# Instances: a pool, accounts with pending and running jobs, weights


@dataclass(frozen=True, slots=True)
class PendingSpec:
    """One pending record: demand of one task, tasks, and its Slurm-order keys."""

    demand: Vector
    tasks: int = 1
    priority: int = 1000
    submit_time: float = 0.0


@dataclass(frozen=True, slots=True)
class Instance:
    resources: tuple[str, ...]
    capacity: Vector
    pending: Mapping[str, Sequence[PendingSpec]]
    running: Mapping[str, Vector] = field(default_factory=dict)
    weights: Mapping[str, Fraction] = field(default_factory=dict)

    @property
    def accounts(self) -> tuple[str, ...]:
        return tuple(self.pending)

    def weight(self, account: str) -> Fraction:
        return self.weights.get(account, Fraction(1))


@dataclass(frozen=True, slots=True)
class Built:
    snapshot: Snapshot
    config: Config
    pending: dict[str, list[Job]]  # per account, in Slurm's order


def build(
    instance: Instance,
    job_numbers: Sequence[int] | None = None,
    mode: Mode = "nice",
    priority_weights: Mapping[str, int] | None = None,
    offset: int = NICE_LIMIT,
) -> Built:
    """A snapshot of one node holding the capacity; job ids from `job_numbers`."""
    records = [(account, spec) for account, specs in instance.pending.items() for spec in specs]
    numbers = list(job_numbers) if job_numbers is not None else list(range(1000, 1000 + len(records)))
    jobs: list[Job] = []
    pending: dict[str, list[Job]] = {account: [] for account in instance.pending}
    for number, (account, spec) in zip(numbers, records, strict=True):
        pending_job = Job(
            str(number),
            account,
            "u",
            PARTITION,
            PENDING,
            spec.priority,
            0,
            False,
            spec.submit_time,
            spec.tasks,
            _tres(instance.resources, spec.demand),
        )
        jobs.append(pending_job)
        pending[account].append(pending_job)
    for index, (account, usage) in enumerate(instance.running.items()):
        jobs.append(
            Job(
                f"{index + 1}",
                account,
                "u",
                PARTITION,
                RUNNING,
                1000,
                0,
                False,
                0.0,
                1,
                _tres(instance.resources, usage),
            )
        )
    for account in pending:
        pending[account].sort(key=lambda j: (-j.priority, j.submit_time, int(j.job_id)))
    nodes = (Node("n1", (PARTITION,), "idle", _tres(instance.resources, instance.capacity)),)
    snap = Snapshot(
        "test",
        "2026-11-30T00:00:00Z",
        nodes,
        tuple(jobs),
        priority_weights=MappingProxyType(dict(priority_weights or {})),
    )
    cfg = Config(
        resources=instance.resources,
        weights=MappingProxyType(dict(instance.weights)),
        mode=mode,
        offset=offset,
    )
    return Built(snap, cfg, pending)


def _tres(resources: Sequence[str], amounts: Sequence[int]) -> Mapping[str, int]:
    return freeze_tres(dict(zip(resources, amounts, strict=True)))


def run(instance: Instance) -> tuple[Plan, Allocation]:
    """The plan for an instance and the allocation its order induces."""
    built = build(instance)
    plan = compute_plan(built.snapshot, built.config)
    order = plan_placements(plan, DEFAULT_POOL, built.snapshot.jobs)
    return plan, place(order, free_capacity(instance.capacity, instance.running))


def backlog(capacity: Sequence[int], demand: Sequence[int]) -> int:
    """Jobs enough that an account alone in the pool could not run out of them."""
    return min(c // d for c, d in zip(capacity, demand, strict=True) if d > 0) + 1


def task_share(demand: Sequence[int], capacity: Sequence[int]) -> Fraction:
    return dominant_share(demand, capacity)


def ordered_placements(plan: Plan, built: Built) -> list[Placement]:
    return plan_placements(plan, DEFAULT_POOL, built.snapshot.jobs)


# --------------------------------------------------------------------------
# Strategies


@st.composite
def demands(draw: st.DrawFn, width: int) -> Vector:
    """0-10 per resource, at least one positive."""
    vector = draw(st.tuples(*[st.integers(0, 10)] * width))
    if not any(vector):
        position = draw(st.integers(0, width - 1))
        vector = (*vector[:position], draw(st.integers(1, 10)), *vector[position + 1 :])
    return vector


@st.composite
def pools(draw: st.DrawFn, width: int | None = None) -> tuple[tuple[str, ...], Vector]:
    width = width or draw(st.integers(1, 3))
    capacity = draw(st.tuples(*[st.integers(1, 60)] * width))
    return RESOURCE_NAMES[:width], capacity


@st.composite
def running_usage(draw: st.DrawFn, accounts: Sequence[str], capacity: Vector) -> dict[str, Vector]:
    """Some running usage per account, never more than the pool holds."""
    left = list(capacity)
    usage: dict[str, Vector] = {}
    for account in accounts:
        if not draw(st.booleans()):
            continue
        vector = tuple(draw(st.integers(0, max(0, min(room, c // 3)))) for room, c in zip(left, capacity, strict=True))
        left = [room - u for room, u in zip(left, vector, strict=True)]
        usage[account] = vector
    return usage


@st.composite
def backlogged_instances(
    draw: st.DrawFn, same_demand: bool, with_running: bool = False, min_accounts: int = 1
) -> Instance:
    """Every account has identical jobs, and enough of them to stay backlogged."""
    resources, capacity = draw(pools())
    count = draw(st.integers(min_accounts, 6))
    accounts = ACCOUNT_NAMES[:count]
    shared = draw(demands(len(resources)))
    pending: dict[str, list[PendingSpec]] = {}
    for account in accounts:
        demand = shared if same_demand else draw(demands(len(resources)))
        pending[account] = [PendingSpec(demand)] * backlog(capacity, demand)
    running = draw(running_usage(accounts, capacity)) if with_running else {}
    return Instance(resources, capacity, pending, running)


@st.composite
def mixed_instances(draw: st.DrawFn, width: int | None = None) -> Instance:
    """Different jobs per account, arrays, running usage and weights."""
    resources, capacity = draw(pools(width))
    count = draw(st.integers(1, 6))
    accounts = ACCOUNT_NAMES[:count]
    pending: dict[str, list[PendingSpec]] = {}
    for account in accounts:
        jobs = draw(st.lists(st.tuples(demands(len(resources)), st.integers(1, 3)), max_size=30))
        pending[account] = [PendingSpec(demand, tasks) for demand, tasks in jobs]
    weights = {a: draw(st.sampled_from([Fraction(1), Fraction(2), Fraction(3, 10), Fraction(3, 2)])) for a in accounts}
    return Instance(resources, capacity, pending, draw(running_usage(accounts, capacity)), weights)


# --------------------------------------------------------------------------
# 1. Sharing incentive


@PROPERTY_SETTINGS
@given(backlogged_instances(same_demand=True))
def test_sharing_incentive_identical_tasks(instance: Instance) -> None:
    """n accounts asking for the same task each get at least what 1/n of every resource runs.

    Exact: the k-th round of the order holds one job of every account at
    level k x share(task), and n x floor(1/(n x share)) tasks fit.
    """
    _, allocation = run(instance)
    n = len(instance.accounts)
    for account in instance.accounts:
        demand = instance.pending[account][0].demand
        alone = min(Fraction(c, n) / d for c, d in zip(instance.capacity, demand, strict=True) if d > 0)
        assert allocation.tasks[account] >= int(alone), (account, dict(allocation.tasks))


@PROPERTY_SETTINGS
@given(backlogged_instances(same_demand=False))
def test_sharing_incentive_up_to_one_task_of_each_other_account(instance: Instance) -> None:
    """With different tasks, the fair share is computed after one task of every other account.

    Slack: another account b is placed up to the level of a's job and then
    by one more task, so b may hold up to one task (d_b) beyond a's level.
    With sigma = max_r sum_{b != a} d_{b,r} / C_r, account a is guaranteed
    floor((1 - sigma) / (n x share_a)) tasks. Without the slack the
    statement is false: see `test_sharing_incentive_needs_the_slack`.
    """
    _, allocation = run(instance)
    n = len(instance.accounts)
    capacity = instance.capacity
    for account in instance.accounts:
        demand = instance.pending[account][0].demand
        others = [
            sum(instance.pending[b][0].demand[r] for b in instance.accounts if b != account)
            for r in range(len(capacity))
        ]
        sigma = max(Fraction(o, c) for o, c in zip(others, capacity, strict=True))
        guaranteed = int((1 - sigma) / (n * task_share(demand, capacity))) if sigma < 1 else 0
        assert allocation.tasks[account] >= guaranteed, (account, guaranteed, dict(allocation.tasks))


def test_sharing_incentive_needs_the_slack() -> None:
    """10 CPUs, tasks of 1 and 6 CPUs: half the pool runs 5 small tasks, DRF starts 4.

    Both first jobs are at level 0, so chem's one task of 6 CPUs starts
    whichever wins the tie, and overshoots chem's half by one CPU. The
    slack above allows for it: sigma = 6/10 leaves physics
    floor(0.4 / (2 x 0.1)) = 2 guaranteed tasks.
    """
    instance = Instance(("cpu",), (10,), {"physics": [PendingSpec((1,))] * 11, "chem": [PendingSpec((6,))] * 2})
    _, allocation = run(instance)
    assert allocation.tasks == {"physics": 4, "chem": 1}
    assert allocation.tasks["physics"] < 5  # the classical bound, broken by indivisibility


# --------------------------------------------------------------------------
# 2. Envy-freeness


@PROPERTY_SETTINGS
@given(backlogged_instances(same_demand=False))
def test_envy_free_up_to_one_task(instance: Instance) -> None:
    """No account could run more of its tasks in another's allocation less one of that account's tasks.

    Ghodsi et al. call a envious of b when b's bundle holds strictly more
    of a's tasks than a runs. With indivisible tasks that fails for the
    trivial reason that b's single big task may hold many of a's small
    ones (10 CPUs: a asks 1, b asks 6 and gets one task). The discrete
    form, EF1, takes one task of b away first. Why that is enough: when b
    starts its last task before a's first task that does not start, that
    task's level is at most a's, so b's bundle without it has a dominant
    share of at most t_a x share_a, which holds at most t_a of a's tasks
    in a's dominant resource. After a is blocked on some resource, b can
    add there less than one of a's tasks. Held on every example, including
    runs of 2,000 examples per property.
    """
    _, allocation = run(instance)
    for a, b in itertools.permutations(instance.accounts, 2):
        if allocation.tasks[b] == 0:
            continue
        demand_b = instance.pending[b][0].demand
        bundle = [held - d for held, d in zip(allocation.vector(b), demand_b, strict=True)]
        could = tasks_in(bundle, instance.pending[a][0].demand)
        assert could is not None
        assert could <= allocation.tasks[a], (a, b, could, dict(allocation.tasks))


@PROPERTY_SETTINGS
@given(backlogged_instances(same_demand=True, min_accounts=2))
def test_envy_free_exactly_for_identical_tasks(instance: Instance) -> None:
    """Same task for everyone: task counts differ by at most one, so nobody envies (EF)."""
    _, allocation = run(instance)
    counts = [allocation.tasks[a] for a in instance.accounts]
    assert max(counts) - min(counts) <= 1, counts
    demand = instance.pending[instance.accounts[0]][0].demand
    for a, b in itertools.permutations(instance.accounts, 2):
        # b holds t_b tasks of the same demand: a could run t_b; that is at most t_a + 1.
        could = tasks_in(allocation.vector(b), demand)
        assert could is not None and could <= allocation.tasks[a] + 1


# --------------------------------------------------------------------------
# 3. Pareto efficiency


@PROPERTY_SETTINGS
@given(mixed_instances())
def test_pareto_efficient_nothing_left_fits(instance: Instance) -> None:
    """After the walk no pending task of any account fits into what is left.

    The walk never stops at a job that does not fit, so this holds exactly
    when the plan orders every pending record (and every task of it); the
    check goes over the snapshot's jobs, not the plan's, so a dropped job
    would be caught.
    """
    built = build(instance)
    plan = compute_plan(built.snapshot, built.config)
    order = ordered_placements(plan, built)
    free = free_capacity(instance.capacity, instance.running)
    assert all(f >= 0 for f in free)
    allocation = place(order, free)
    assert all(f >= 0 for f in allocation.free)
    rows = plan_rows(plan)
    assert sorted(j.job_id for j in rows) == sorted(j.job_id for jobs in built.pending.values() for j in jobs)
    started = Counter[str]()
    for record, tasks in zip(rows, allocation.started, strict=True):
        started[record.job_id] += tasks
    for account, jobs in built.pending.items():
        for pending_job in jobs:
            waiting = pending_job.array_tasks - started[pending_job.job_id]
            assert waiting >= 0
            if waiting:
                demand = demand_vector(pending_job, instance.resources)
                assert not fits(demand, allocation.free), (account, pending_job.job_id, allocation.free)
    used = (
        [sum(col) for col in zip(*(allocation.vector(a) for a in allocation.held), strict=True)]
        if allocation.held
        else [0] * len(free)
    )
    assert [f + u for f, u in zip(allocation.free, used, strict=True)] == free


# --------------------------------------------------------------------------
# 4. Strategy-proofness


def _skipped_ahead(allocation: Allocation, order: Sequence[Placement], account: str) -> bool:
    """Whether the walk skipped a task of another account ahead of `account`'s last started task."""
    last = max(
        (i for i, (p, n) in enumerate(zip(order, allocation.started, strict=True)) if p.account == account and n),
        default=-1,
    )
    return any(
        p.account != account and n < p.tasks for p, n in zip(order[:last], allocation.started[:last], strict=True)
    )


def _others_ahead(order: Sequence[Placement], account: str) -> list[int]:
    """For each of `account`'s jobs, how many jobs of other accounts the order puts before it."""
    out: list[int] = []
    others = 0
    for entry in order:
        if entry.account == account:
            out.append(others)
        else:
            others += 1
    return out


@st.composite
def inflations(draw: st.DrawFn) -> tuple[Instance, Instance, str]:
    instance = draw(backlogged_instances(same_demand=False, with_running=True))
    account = draw(st.sampled_from(instance.accounts))
    demand = list(instance.pending[account][0].demand)
    resource = draw(st.integers(0, len(demand) - 1))
    demand[resource] += draw(st.integers(1, 10))
    inflated = dict(instance.pending)
    inflated[account] = [PendingSpec(tuple(demand))] * len(instance.pending[account])
    return instance, dataclasses.replace(instance, pending=inflated), account


@PROPERTY_SETTINGS
@given(inflations())
def test_strategy_proof_inflating_demand_never_pays(case: tuple[Instance, Instance, str]) -> None:
    """Asking for more of a resource never gets an account more tasks.

    On the order this is exact: every job of the account has a level at
    least as high as before, so no job of another account moves behind it.
    On the allocation it holds unless the inflated demand made another
    account's job stop fitting ahead of the account's last task (a skip in
    the walk): the account's prefix of other jobs grew and none of them was
    skipped, so before each of its tasks at most as much was used as in
    the inflated walk, and its true task fits wherever the inflated one did.
    """
    honest, inflated, account = case
    built_honest, built_inflated = build(honest), build(inflated)
    plan_honest = compute_plan(built_honest.snapshot, built_honest.config)
    plan_inflated = compute_plan(built_inflated.snapshot, built_inflated.config)
    order_honest = ordered_placements(plan_honest, built_honest)
    order_inflated = ordered_placements(plan_inflated, built_inflated)
    before = _others_ahead(order_honest, account)
    after = _others_ahead(order_inflated, account)
    assert all(x >= y for x, y in zip(after, before, strict=True)), (before, after)
    free = free_capacity(honest.capacity, honest.running)
    got_honest = place(order_honest, free)
    got_inflated = place(order_inflated, free)
    if not _skipped_ahead(got_inflated, order_inflated, account):
        assert got_inflated.tasks[account] <= got_honest.tasks[account]


def test_blocking_manipulation_is_the_only_gain() -> None:
    """The smallest gain by lying needs a skip: 7 CPUs, physics asks 1 CPU, chem 6.

    Honest, both start one task (1 + 6 = 7). Asking for 2 CPUs, physics
    goes first, chem's 6 no longer fit and physics takes three tasks. The
    gain exists only through the skip the property above excludes.
    """
    honest = Instance(("cpu",), (7,), {"physics": [PendingSpec((1,))] * 8, "chem": [PendingSpec((6,))] * 2})
    inflated = dataclasses.replace(
        honest, pending={"physics": [PendingSpec((2,))] * 8, "chem": [PendingSpec((6,))] * 2}
    )
    _, got_honest = run(honest)
    built = build(inflated)
    plan = compute_plan(built.snapshot, built.config)
    order = ordered_placements(plan, built)
    got_inflated = place(order, [7])
    assert got_honest.tasks == {"physics": 1, "chem": 1}
    if order[0].account == "physics":  # the tie at level 0 went to physics
        assert got_inflated.tasks == {"physics": 3, "chem": 0}
        assert _skipped_ahead(got_inflated, order, "physics")
    else:
        assert got_inflated.tasks["physics"] <= got_honest.tasks["physics"]


# --------------------------------------------------------------------------
# 5. Monotone weights


@st.composite
def weight_raises(draw: st.DrawFn) -> tuple[Instance, Instance, str]:
    instance = draw(backlogged_instances(same_demand=False, with_running=True))
    choices = [Fraction(1), Fraction(2), Fraction(3, 10), Fraction(3, 2), Fraction(1, 2)]
    weights = {a: draw(st.sampled_from(choices)) for a in instance.accounts}
    account = draw(st.sampled_from(instance.accounts))
    raised = dict(weights)
    raised[account] = weights[account] + draw(st.sampled_from([Fraction(1, 10), Fraction(1), Fraction(3)]))
    return (dataclasses.replace(instance, weights=weights), dataclasses.replace(instance, weights=raised), account)


@PROPERTY_SETTINGS
@given(weight_raises())
def test_raising_a_weight_never_lowers_the_task_count(case: tuple[Instance, Instance, str]) -> None:
    """A higher weight moves every job of the account ahead, never behind, and never costs it a task.

    On the order: every level of the account drops, the others' stay. On
    the allocation the argument of strategy-proofness runs backwards: if
    the walk at the lower weight skipped nothing ahead of the account's
    last task, everything used before each of its tasks at the higher
    weight was also used at the lower one, so each still fits. Only that
    case is asserted; with a skip, an earlier job of the account could in
    principle make a big job stop fitting and let a smaller one in that
    takes the resource the account needs (no example of it turned up in
    2,000 Hypothesis examples and 80,000 random instances).
    """
    lower, higher, account = case
    built_lower, built_higher = build(lower), build(higher)
    order_lower = ordered_placements(compute_plan(built_lower.snapshot, built_lower.config), built_lower)
    order_higher = ordered_placements(compute_plan(built_higher.snapshot, built_higher.config), built_higher)
    before = _others_ahead(order_lower, account)
    after = _others_ahead(order_higher, account)
    assert all(x <= y for x, y in zip(after, before, strict=True)), (before, after)
    free = free_capacity(lower.capacity, lower.running)
    got_lower = place(order_lower, free)
    got_higher = place(order_higher, free)
    if not _skipped_ahead(got_lower, order_lower, account):
        assert got_higher.tasks[account] >= got_lower.tasks[account]


# --------------------------------------------------------------------------
# 6. The vectorised order equals the rule's greedy loop (`policy.rule.flat_order`)


def random_instance(rng: random.Random) -> tuple[Instance, list[int]]:
    """A small pool full of exact ties: clones, zero demands, capacity 0, odd weights."""
    width = rng.randint(1, 3)
    resources = RESOURCE_NAMES[:width]
    capacity = tuple(rng.choice([0, 1, 2, 3, 4, 6, 10, 12, 60]) for _ in range(width))
    accounts = rng.sample(ACCOUNT_NAMES, rng.randint(1, 6))
    palette = [0, 0, 1, 1, 2, 3, 10]
    weights_palette = [Fraction(1), Fraction(1), Fraction(2), Fraction(3, 10), Fraction(1, 2), Fraction(3, 2)]

    def jobs() -> list[PendingSpec]:
        count = rng.choice([0, 1, 2, 3, 5, 8, 15, 30])
        return [
            PendingSpec(
                tuple(rng.choice(palette) for _ in range(width)),
                1 if rng.random() < 0.8 else rng.randint(2, 3),
                rng.choice([1000, 1000, 2000]),
                float(rng.choice([0, 10, 20])),
            )
            for _ in range(count)
        ]

    def usage() -> Vector | None:
        return tuple(rng.choice([0, 0, 1, 2, 5]) for _ in range(width)) if rng.random() < 0.5 else None

    pending: dict[str, list[PendingSpec]] = {}
    running: dict[str, Vector] = {}
    weights: dict[str, Fraction] = {}
    clones = rng.random() < 0.4
    shared_jobs, shared_usage, shared_weight = jobs(), usage(), rng.choice(weights_palette)
    for account in accounts:
        pending[account] = list(shared_jobs) if clones else jobs()
        used = shared_usage if clones else usage()
        if used is not None:
            running[account] = used
        weights[account] = shared_weight if clones else rng.choice(weights_palette)
    numbers = rng.sample(range(1000, 9000), sum(len(v) for v in pending.values()))
    return Instance(resources, capacity, pending, running, weights), numbers


def reference_inputs(instance: Instance, built: Built) -> tuple[dict[str, list[Vector]], dict[str, Vector]]:
    """Per account the demand vectors in Slurm's order (record x tasks) and running usage."""
    pending = {
        account: [tuple(x * j.array_tasks for x in demand_vector(j, instance.resources)) for j in jobs]
        for account, jobs in built.pending.items()
    }
    return pending, dict(instance.running)


def check_against_rule(instance: Instance, numbers: Sequence[int], state: PolicyState) -> Plan:
    built = build(instance, numbers)
    plan = compute_plan(built.snapshot, built.config, state)
    _, wins = advance_state(state, "a fingerprint no state holds", built.config.tie_half_life_cycles)
    expected_epoch = state.epoch + 1 if state.fingerprint != plan.state.fingerprint else state.epoch
    assert plan.state.epoch == expected_epoch
    pending, usage = reference_inputs(instance, built)
    reference = flat_order(
        pending,
        usage,
        instance.capacity,
        {a: instance.weight(a) for a in instance.accounts},
        epoch=plan.state.epoch,
        wins=wins,
    ).jobs
    assert plan_order_pairs(plan, DEFAULT_POOL) == reference
    # The pairs number jobs by their rank in the plan; compare the job ids too, so a plan
    # that reordered an account's own jobs cannot pass.
    ordered = sorted((j for j in plan.jobs if j.order is not None), key=lambda j: j.order or 0)
    assert [j.job_id for j in ordered] == [built.pending[a][i].job_id for a, i in reference]
    assert [j.order for j in ordered] == list(range(len(ordered)))
    return plan


def test_order_equals_the_rule_on_3000_random_instances() -> None:
    rng = random.Random(20261130)
    tied = 0
    for _ in range(3000):
        instance, numbers = random_instance(rng)
        plan = check_against_rule(instance, numbers, PolicyState())
        assert plan.state.epoch == 1
        assert_values_strict(plan)
        tied += any(j.tie for j in plan.jobs)
    assert tied > 500  # the generator does reach the tie rule


def test_order_equals_the_rule_with_remembered_wins() -> None:
    """From a prior state: the plan's epoch advances and the decayed wins feed both sides."""
    rng = random.Random(7)
    for _ in range(300):
        instance, numbers = random_instance(rng)
        wins = {a: float(rng.choice([0, 1, 2, 5])) for a in instance.accounts}
        last = {a: float(rng.choice([0, 1, 3])) for a in instance.accounts}
        state = PolicyState(
            epoch=rng.randint(0, 50),
            fingerprint="an older running set",
            tie_wins=MappingProxyType(wins),
            plan_wins=MappingProxyType(last),
        )
        check_against_rule(instance, numbers, state)


# --------------------------------------------------------------------------
# 8. Values: strict along the order, and still strict after Slurm's clamp


def assert_values_strict(plan: Plan) -> None:
    """nice strictly increases along each pool's exact band (user nice 0), and every job after the
    band is behind the band's last (docs/rule.md §5)."""
    for pool in plan.pools:
        rows = sorted((j for j in plan.jobs if j.pool == pool.name and j.order is not None), key=lambda j: j.order or 0)
        values = [j.value for j in rows if j.value is not None]
        assert len(values) == len(rows)
        assert all(-NICE_LIMIT <= v <= NICE_LIMIT for v in values)
        assert [j.band for j in rows] == ["exact"] * pool.exact + ["coarse"] * (len(rows) - pool.exact)
        band, rest = values[: pool.exact], values[pool.exact :]
        assert all(x < y for x, y in itertools.pairwise(band)), values
        assert not band or all(v > band[-1] for v in rest), values


@PROPERTY_SETTINGS
@given(st.data())
def test_values_strict_in_every_pool(data: st.DataObject) -> None:
    """Two pools in one plan (accounts may be in both): each pool numbers its order from 0, its
    values strictly increase, and the pool planned first matches the rule."""
    first = data.draw(mixed_instances())
    second = data.draw(mixed_instances(len(first.resources)))
    weights = {**second.weights, **first.weights}
    jobs: list[Job] = []
    numbers = itertools.count(1000)
    for partition, instance in (("main", first), ("other", second)):
        built = build(
            dataclasses.replace(instance, weights=weights),
            [next(numbers) for _ in range(sum(len(v) for v in instance.pending.values()))],
        )
        for j in built.snapshot.jobs:
            renamed = f"{partition}-{j.job_id}" if j.state == RUNNING else j.job_id
            jobs.append(dataclasses.replace(j, partition=partition, job_id=renamed))
    nodes = (
        Node("n1", ("main",), "idle", _tres(first.resources, first.capacity)),
        Node("n2", ("other",), "idle", _tres(first.resources, second.capacity)),
    )
    config = Config(
        resources=first.resources,
        weights=MappingProxyType(weights),
        pools=(PoolConfig("one", ("main",)), PoolConfig("two", ("other",))),
    )
    plan = compute_plan(Snapshot("test", "2026-11-30T00:00:00Z", nodes, tuple(jobs)), config)
    assert_values_strict(plan)
    for pool, instance in (("one", first), ("two", second)):
        rows = [j for j in plan.jobs if j.pool == pool and j.order is not None]
        assert sorted(j.order for j in rows if j.order is not None) == list(range(len(rows)))
        assert len(rows) == sum(len(v) for v in instance.pending.values())
    pending_first = {
        a: [tuple(x * spec.tasks for x in spec.demand) for spec in specs] for a, specs in first.pending.items()
    }
    reference = flat_order(
        pending_first,
        first.running,
        first.capacity,
        {a: weights.get(a, Fraction(1)) for a in first.accounts},
        epoch=plan.state.epoch,
    ).jobs
    assert plan_order_pairs(plan, "one") == reference


def slurm_priority(mode: str, written: int, factors: int) -> int:
    """The priority Slurm computes from our value and the job's other factors, clamped."""
    return max(1, min(SLURM_PRIORITY_MAX, unclamped_priority(mode, written, factors)))


@PROPERTY_SETTINGS
@given(
    mixed_instances(),
    st.sampled_from(["nice", "site_factor", "priority"]),
    st.sampled_from([0, 1000, 100_000, 10**7]),
    st.sampled_from([NICE_LIMIT, 40, 5]),
)
def test_values_survive_slurms_clamp(instance: Instance, mode: Mode, weight_sum: int, offset: int) -> None:
    """Slurm's priority max(1, min(2^32-1, F -/+ our value)) keeps the exact band's order for factors F in [0, W].

    With the same F for every job (0 or W) the clamp does not bite, so no
    two jobs meet at priority 1 or at the top; along the exact band
    priorities strictly fall, and even when the earlier of two neighbours
    gets F = 0 and the later F = W (the worst mix), the earlier stays
    ahead, as does the band's last job ahead of every later one. Priority
    mode writes absolute values, at least 1 (0 is a hold).
    """
    built = build(instance, mode=mode, priority_weights={"PriorityWeightAge": weight_sum}, offset=offset)
    plan = compute_plan(built.snapshot, built.config)
    rows = plan_rows(plan)
    exact = sum(1 for j in rows if j.band == "exact")
    written = [j.value for j in rows]
    assert len(written) == sum(len(v) for v in instance.pending.values())
    values = [v for v in written if v is not None]
    assert len(values) == len(written)
    if mode == "nice":
        assert all(-NICE_LIMIT <= v <= -1 for v in values)
    else:
        assert all(1 <= v <= NICE_LIMIT for v in values)
    spread = 0 if mode == "priority" else weight_sum  # an absolute priority gets no factors
    for factors in (0, spread):
        effective = [slurm_priority(mode, v, factors) for v in values]
        assert effective == [unclamped_priority(mode, v, factors) for v in values], "the clamp bit"
        assert all(x > y for x, y in itertools.pairwise(effective[:exact])), effective
    for earlier, later in itertools.pairwise(values[:exact]):
        assert slurm_priority(mode, earlier, 0) > slurm_priority(mode, later, spread), (earlier, later)
    if exact:
        assert all(slurm_priority(mode, values[exact - 1], 0) > slurm_priority(mode, v, spread) for v in values[exact:])


def unclamped_priority(mode: str, written: int, factors: int) -> int:
    if mode == "priority":
        return written
    return factors + written if mode == "site_factor" else factors - written


# --------------------------------------------------------------------------
# 7. Starvation regressions


def accounts_in_order(plan: Plan) -> list[str]:
    return [j.account for j in plan_rows(plan)]


def plan_rows(plan: Plan) -> list[JobPlan]:
    return sorted((j for j in plan.jobs if j.order is not None), key=lambda j: j.order or 0)


def clones(names: Sequence[str], spec: PendingSpec, count: int) -> dict[str, list[PendingSpec]]:
    return {name: [spec] * count for name in names}


@pytest.mark.parametrize(
    ("resources", "capacity", "demand", "tasks"),
    [
        (("cpu",), (60,), (1,), 1),
        (("cpu", "mem"), (64, 256_000), (2, 4096), 1),
        (("cpu", "mem", "gres/gpu"), (64, 512_000, 8), (8, 64_000, 1), 2),
    ],
)
def test_identical_accounts_interleave_round_by_round(
    resources: tuple[str, ...], capacity: Vector, demand: Vector, tasks: int
) -> None:
    """(a) Three identical accounts, no running usage: each round of three holds every account
    once, and the account placed first changes from round to round."""
    names = ("physics", "chem", "bio")
    instance = Instance(resources, capacity, clones(names, PendingSpec(demand, tasks), 8))
    plan, _ = run(instance)
    order = accounts_in_order(plan)
    assert len(order) == 24
    rounds = [order[k : k + 3] for k in range(0, len(order), 3)]
    assert all(sorted(r) == sorted(names) for r in rounds), rounds
    assert len({r[0] for r in rounds}) > 1, rounds
    assert all(j.tie for j in plan_rows(plan))


@pytest.mark.parametrize(("running_a", "running_b"), [(0, 1), (10, 11), (500_000, 500_001)])
def test_one_cpu_apart_on_a_million_cpus(running_a: int, running_b: int) -> None:
    """(b) One-CPU jobs on 1,000,000 CPUs: one running CPU apart gives different levels and
    nice values (default scale), and the order still interleaves."""
    instance = Instance(
        ("cpu",),
        (1_000_000,),
        clones(("physics", "chem"), PendingSpec((1,)), 40),
        running={"physics": (running_a,), "chem": (running_b,)},
    )
    plan, _ = run(instance)
    rows = plan_rows(plan)
    first = {account: next(j for j in rows if j.account == account) for account in ("physics", "chem")}
    levels = [first[a].level for a in ("physics", "chem")]
    nices = [first[a].value for a in ("physics", "chem")]
    assert levels == [running_a / 1_000_000, running_b / 1_000_000]
    assert nices[0] is not None and nices[1] is not None
    assert nices[0] < nices[1]  # lower nice, higher priority
    assert rows[0].account == "physics"
    values = [j.value for j in rows]
    assert len(set(values)) == len(values)
    lead = 0
    for job in rows:
        lead += 1 if job.account == "physics" else -1
        assert 0 <= lead <= 2, accounts_in_order(plan)
    assert not plan.warnings


@pytest.mark.parametrize("case", ["zero demand", "capacity 0", "both", "no capacity at all"])
def test_zero_demand_and_zero_capacity_do_not_freeze_the_order(case: str) -> None:
    """(c) All-zero TRES and a resource of capacity 0 keep a level constant; every job still gets
    exactly one place, and every account shows up in the first places."""
    resources = ("cpu", "mem", "gres/gpu")
    capacity = {
        "zero demand": (8, 100, 2),
        "capacity 0": (8, 100, 0),
        "both": (8, 100, 0),
        "no capacity at all": (0, 0, 0),
    }[case]
    stuck = {"zero demand": (0, 0, 0), "capacity 0": (0, 0, 1), "both": (0, 0, 0), "no capacity at all": (1, 1, 1)}[
        case
    ]
    pending = {
        "physics": [PendingSpec(stuck)] * 12,
        "chem": [PendingSpec((1, 10, 0))] * 12,
        "bio": [PendingSpec((2, 0, 1 if case == "both" else 0))] * 12,
    }
    if case == "both":
        pending["geo"] = [PendingSpec((0, 0, 0))] * 12
    built = build(Instance(resources, capacity, pending))
    plan = compute_plan(built.snapshot, built.config)
    rows = plan_rows(plan)
    pending_ids = sorted(j.job_id for jobs in built.pending.values() for j in jobs)
    assert sorted(j.job_id for j in rows) == pending_ids
    assert [j.order for j in rows] == list(range(len(pending_ids)))
    assert {j.account for j in rows[: len(pending)]} == set(pending)


def with_jobs(snapshot: Snapshot, jobs: Sequence[Job]) -> Snapshot:
    """A copy of the snapshot with other jobs.

    Not `dataclasses.replace`: that copies the snapshot's cached job table,
    and the engine would plan the old jobs.
    """
    return Snapshot(
        snapshot.cluster,
        snapshot.taken_at,
        snapshot.nodes,
        tuple(jobs),
        snapshot.slurm_version,
        snapshot.priority_weights,
        snapshot.priority_type,
    )


def applied(built: Built, plan: Plan) -> tuple[Snapshot, PolicyState]:
    """The snapshot after Slurm took the plan's values, and the memory a daemon keeps of them."""
    written = {j.job_id: j.value for j in plan.jobs if j.value is not None}
    jobs = []
    memory = dict(plan.state.jobs)
    for old in built.snapshot.jobs:
        value = written.get(old.job_id)
        if value is None:
            jobs.append(old)
            continue
        memory[old.job_id] = JobMemory(old.nice, value, plan.mode)
        if plan.mode == "nice":
            jobs.append(dataclasses.replace(old, nice=value, priority=max(1, old.priority - value)))
        elif plan.mode == "site_factor":
            jobs.append(dataclasses.replace(old, site_factor=value, priority=old.priority + value))
        else:
            jobs.append(dataclasses.replace(old, priority=value, nice=0))
    return with_jobs(built.snapshot, jobs), dataclasses.replace(plan.state, jobs=MappingProxyType(memory))


REPLAN_INSTANCE = Instance(
    ("cpu", "mem", "gres/gpu"),
    (64, 256_000, 8),
    {
        "physics": [PendingSpec((4, 8000, 1), 1, 1000, 5.0), PendingSpec((1, 1000, 0), 3, 1200, 9.0)] * 3,
        "chem": [PendingSpec((4, 8000, 1), 1, 1000, 5.0)] * 5,
        "bio": [PendingSpec((16, 2000, 0), 1, 900, 1.0), PendingSpec((0, 0, 0), 1, 1000, 3.0)] * 2,
    },
    running={"physics": (8, 16000, 2), "bio": (4, 1000, 0)},
)


@pytest.mark.parametrize("mode", ["nice", "site_factor", "priority"])
def test_replanning_the_same_snapshot_writes_nothing(mode: Mode) -> None:
    """(d) The same snapshot with the plan's state: same epoch, same order, same values; and once
    Slurm holds the values (and the daemon remembers them), a second cycle writes nothing."""
    built = build(REPLAN_INSTANCE, mode=mode)
    first = compute_plan(built.snapshot, built.config)
    again = compute_plan(built.snapshot, built.config, first.state)
    key = [(j.job_id, j.order, j.value) for j in plan_rows(first)]
    assert [(j.job_id, j.order, j.value) for j in plan_rows(again)] == key
    assert again.state.epoch == first.state.epoch
    snap, state = applied(built, first)
    second = compute_plan(snap, built.config, state)
    assert [(j.job_id, j.order, j.value) for j in plan_rows(second)] == key
    assert second.writes == (), [(j.job_id, j.current, j.value) for j in second.writes]


def test_tie_order_rotates_when_the_running_set_changes() -> None:
    """(e) Three identical accounts; each cycle one running job ends and an equal one starts:
    over six epochs every account is placed first at least once."""
    names = ("physics", "chem", "bio")
    pending = clones(names, PendingSpec((2, 100)), 4)
    built = build(Instance(("cpu", "mem"), (48, 2400), pending, running={n: (4, 200) for n in names}))
    running = [j for j in built.snapshot.jobs if j.state == RUNNING]
    others = [j for j in built.snapshot.jobs if j.state != RUNNING]
    state = PolicyState()
    firsts: list[str] = []
    epochs: list[int] = []
    for cycle in range(6):
        snap = with_jobs(built.snapshot, others + running)
        plan = compute_plan(snap, built.config, state)
        firsts.append(plan_rows(plan)[0].account)
        epochs.append(plan.state.epoch)
        state = plan.state
        ending = running[cycle % 3]
        running[cycle % 3] = dataclasses.replace(ending, job_id=str(100 + cycle))
    assert epochs == [1, 2, 3, 4, 5, 6]
    assert set(firsts) == set(names), firsts


def test_nsdi_2011_example() -> None:
    """(f) 9 CPUs, 18 GB; A's tasks <1 CPU, 4 GB>, B's <3 CPUs, 1 GB>: the first five jobs are
    three of A and two of B, after which both dominant shares are exactly 2/3."""
    gigabyte = 1024
    instance = Instance(
        ("cpu", "mem"),
        (9, 18 * gigabyte),
        {"A": [PendingSpec((1, 4 * gigabyte))] * 6, "B": [PendingSpec((3, 1 * gigabyte))] * 6},
    )
    plan, allocation = run(instance)
    first_five = accounts_in_order(plan)[:5]
    assert Counter(first_five) == {"A": 3, "B": 2}
    usage = {a: [0, 0] for a in "AB"}
    for account in first_five:
        demand = instance.pending[account][0].demand
        usage[account] = [u + d for u, d in zip(usage[account], demand, strict=True)]
    assert dominant_share(usage["A"], instance.capacity) == Fraction(2, 3)
    assert dominant_share(usage["B"], instance.capacity) == Fraction(2, 3)
    assert allocation.tasks == {"A": 3, "B": 2}


@pytest.mark.parametrize("cpus", [30, 60, 90, 61])
def test_weight_two_gets_twice_the_tasks(cpus: int) -> None:
    """(g) Identical accounts, weights 2 and 1: the heavier one runs about twice the tasks."""
    instance = Instance(
        ("cpu",), (cpus,), clones(("physics", "chem"), PendingSpec((1,)), cpus + 1), weights={"physics": Fraction(2)}
    )
    _, allocation = run(instance)
    heavy, light = allocation.tasks["physics"], allocation.tasks["chem"]
    assert heavy + light == cpus
    assert abs(heavy - 2 * light) <= 2, (heavy, light)


def test_priority_mode_keeps_an_accounts_own_order_after_writing() -> None:
    """(d), smallest case: priority mode, one account, two jobs whose priority and submit order disagree.

    Job 1000 has the higher priority, job 1001 was submitted first. Once
    the daemon wrote absolute priorities, Slurm's own priority is gone; the
    account's jobs must come out in the same order as before the write,
    and nothing is written again.
    """
    instance = Instance(
        ("cpu",), (4,), {"physics": [PendingSpec((1,), 1, 2000, 10.0), PendingSpec((1,), 1, 1000, 0.0)]}
    )
    built = build(instance, mode="priority")
    first = compute_plan(built.snapshot, built.config)
    snap, state = applied(built, first)
    second = compute_plan(snap, built.config, state)
    assert [j.job_id for j in plan_rows(second)] == [j.job_id for j in plan_rows(first)]
    assert second.writes == ()


def test_negative_user_nice_does_not_merge_distinct_levels() -> None:
    """docs/rule.md §5: no two distinct levels meet at a clamp, and the user's nice keeps its effect.

    A job whose owner (an admin) set nice -1000 gets user nice + ours,
    clipped to Slurm's nice range; with the default offset, ours already
    starts at the bottom of that range, so the clip must not silently
    give the account's jobs at levels 0, 1e-6 and 2e-6 the same nice.
    """
    instance = Instance(("cpu",), (1_000_000,), {"physics": [PendingSpec((1,))] * 3})
    built = build(instance)
    jobs = [dataclasses.replace(j, nice=-1000) for j in built.snapshot.jobs]
    plan = compute_plan(with_jobs(built.snapshot, jobs), built.config)
    rows = plan_rows(plan)
    assert [j.level for j in rows] == [0.0, 1e-6, 2e-6]
    values = [j.value for j in rows if j.value is not None]
    assert len(values) == 3
    strict = all(x < y for x, y in itertools.pairwise(values))
    assert strict or any("clipped" in w for w in plan.warnings), (values, plan.warnings)


# --------------------------------------------------------------------------
# Memory of past use (docs/rule.md §6): weight 0 is pure DRF, bit for bit


@PROPERTY_SETTINGS
@given(mixed_instances(), st.floats(0.0, 5.0), st.integers(0, 3))
def test_history_with_weight_zero_is_todays_plan(instance: Instance, scale: float, skew: int) -> None:
    """Whatever the past, `history` with w = 0 (or absent) plans exactly what pure DRF plans."""
    built = build(instance)
    base = compute_plan(built.snapshot, built.config)
    past = {
        DEFAULT_POOL: {
            a: {r: scale * c * ((i + skew) % 4) for r, c in zip(instance.resources, instance.capacity, strict=True)}
            for i, a in enumerate(instance.accounts)
        }
    }
    off = dataclasses.replace(built.config, history=HistoryConfig(half_life_s=86400.0, weight=0.0))
    for plan in (compute_plan(built.snapshot, off, past=past), compute_plan(built.snapshot, built.config, past=past)):
        assert list(plan.jobs) == list(base.jobs)
        assert plan.accounts == base.accounts
        assert plan.state == base.state
