"""The plan over Slurm's account tree (docs/rule.md §7, policy/engine/tree_order.py): what the join must keep
and change."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_drf.config.load import parse_config_text
from slurm_drf.config.settings import Config, HistoryConfig, WithinAccount
from slurm_drf.errors import ConfigError
from slurm_drf.model.types import Association, Job, Snapshot
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.policy.pools import DEFAULT_POOL
from tests.unit.builders import job, node, snapshot


def assoc(account: str, parent: str | None, *users: str, shares: int = 1) -> list[Association]:
    return [Association(account, parent, None, shares)] + [Association(account, account, u, 1) for u in users]


def with_tree(snap: Snapshot, associations: Sequence[Association]) -> Snapshot:
    return dataclasses.replace(snap, associations=tuple(associations))


def order(plan: Plan) -> list[str]:
    """Job ids in the plan's order."""
    return [j.job_id for j in sorted(plan.jobs, key=lambda j: -1 if j.order is None else j.order)]


def accounts_in_order(plan: Plan, jobs: Sequence[Job]) -> list[str]:
    owner = {j.job_id: f"{j.account}:{j.user}" for j in jobs}
    return [owner[i] for i in order(plan)]


def config(within: WithinAccount = "user", **fields: Any) -> Config:
    return dataclasses.replace(Config(resources=("cpu", "gres/gpu")), fairness_within_account=within, **fields)


def cpus(account: str, count: int, user: str = "u", start: int = 0) -> list[Job]:
    return [
        job(account, user=user, job_id=f"{account}-{user}-{n}", submit_time=float(start + n), cpu=1)
        for n in range(count)
    ]


# --- a tree that is flat is §2's plan ----------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4), st.integers(0, 2)), min_size=1, max_size=25),
    st.lists(st.sampled_from([1, 2, 3]), min_size=4, max_size=4),
)
def test_accounts_under_the_root_with_one_user_each_order_as_the_flat_plan(
    specs: list[tuple[int, int, int]], shares: list[int]
) -> None:
    """Every account under the root, one user each: the tree changes no job's place (chains are their leaf)."""
    names = ["physics", "chemistry", "biology", "maths"]
    jobs = [
        job(names[a], job_id=str(100 + n), submit_time=float(n), user="alice", cpu=c, gpu=g)
        for n, (a, c, g) in enumerate(specs)
    ]
    jobs.append(job("chemistry", "RUNNING", job_id="1", user="alice", cpu=3))
    snap = snapshot([node(cpu=16, gpu=4)], jobs)
    weights = {a: Fraction(s) for a, s in zip(names, shares, strict=True)}
    cfg = config(weights=MappingProxyType(weights))
    tree = assoc("root", None) + [a for name in names for a in assoc(name, "root", "alice")]
    flat, by_tree = compute_plan(snap, cfg), compute_plan(with_tree(snap, tree), cfg)
    assert order(by_tree) == order(flat)
    assert [j.level for j in by_tree.jobs] == [j.level for j in flat.jobs]
    assert [j.value for j in by_tree.jobs] == [j.value for j in flat.jobs]


# --- users inside an account ------------------------------------------------------------


def _one_account_two_users() -> tuple[Snapshot, list[Job]]:
    jobs = cpus("physics", 6, "alice") + cpus("physics", 3, "bob", start=100)
    tree = assoc("root", None) + assoc("physics", "root", "alice", "bob")
    return with_tree(snapshot([node(cpu=64, gpu=8)], jobs), tree), jobs


def test_users_of_an_account_share_its_turn() -> None:
    """fairness_within_account: user — bob's later jobs interleave with alice's instead of waiting behind all six."""
    snap, jobs = _one_account_two_users()
    placed = accounts_in_order(compute_plan(snap, config("user")), jobs)
    for pairs in (1, 2, 3):  # equal shares at every second job (ties go by the tie rule, never by name)
        assert Counter(placed[: 2 * pairs]) == Counter({"physics:alice": pairs, "physics:bob": pairs})
    assert placed[6:] == ["physics:alice"] * 3


def test_slurm_order_inside_an_account_when_asked() -> None:
    snap, jobs = _one_account_two_users()
    placed = accounts_in_order(compute_plan(snap, config("slurm")), jobs)
    assert placed == ["physics:alice"] * 6 + ["physics:bob"] * 3


def test_user_weights_from_the_config() -> None:
    snap, jobs = _one_account_two_users()
    cfg = config("user", user_weights=MappingProxyType({"physics": MappingProxyType({"bob": Fraction(2)})}))
    placed = accounts_in_order(compute_plan(snap, cfg), jobs)
    # bob weighs twice alice: two of his jobs for each of hers while he has any.
    assert Counter(placed[:6]) == Counter({"physics:bob": 3, "physics:alice": 3})
    assert placed[:3].count("physics:bob") == 2


def test_a_new_user_does_not_buy_an_account_turns() -> None:
    """Issue 35's case: 10 GPUs, a holds 2 (user a1), b holds 6 (all b1's); 1-GPU jobs wait from a1, b1 and a
    new user b2. Rescaled to b2's 0, b would count as 0 and be served first; an account is charged what its
    users hold (b at 60%), so a (20%) goes first, as with b's work under one user (docs/rule.md §7)."""
    jobs = [
        job("a", "RUNNING", job_id="ra", user="a1", gpu=2),
        job("b", "RUNNING", job_id="rb", user="b1", gpu=6),
        job("a", job_id="a1", user="a1", submit_time=1.0, gpu=1),
        job("b", job_id="b1", user="b1", submit_time=1.0, gpu=1),
        job("b", job_id="b2", user="b2", submit_time=1.0, gpu=1),
    ]
    tree = assoc("root", None) + assoc("a", "root", "a1") + assoc("b", "root", "b1", "b2")
    plan = compute_plan(with_tree(snapshot([node(cpu=64, gpu=10)], jobs), tree), config())
    assert order(plan)[0] == "a1"
    assert set(order(plan)[1:]) == {"b1", "b2"}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.booleans()), min_size=1, max_size=30),
    st.lists(st.tuples(st.integers(0, 2), st.integers(1, 3)), min_size=3, max_size=3),
)
def test_spreading_an_accounts_work_over_more_users_does_not_change_its_turns(
    specs: list[tuple[int, int, bool]], shapes: list[tuple[int, int]]
) -> None:
    """Each account's jobs of one shape, held and waiting under one user or spread over up to four: the
    accounts take their turns in the same sequence (how many users an account has buys it nothing)."""
    names = ["physics", "chemistry", "biology"]

    def build(users: bool) -> tuple[Snapshot, list[Job]]:
        jobs = [
            job(
                names[a],
                "RUNNING" if running else "PENDING",
                job_id=str(100 + n),
                submit_time=float(n),
                user=f"u{u}" if users else "u0",
                cpu=shapes[a][0],
                gpu=shapes[a][1],
            )
            for n, (a, u, running) in enumerate(specs)
        ]
        tree = assoc("root", None) + [x for name in names for x in assoc(name, "root", "u0", "u1", "u2", "u3")]
        return with_tree(snapshot([node(cpu=16, gpu=8)], jobs), tree), jobs

    def turns(users: bool) -> list[str]:
        snap, jobs = build(users)
        return [a.split(":")[0] for a in accounts_in_order(compute_plan(snap, config()), jobs)]

    assert turns(True) == turns(False)


# --- divisions: fairness at every level ------------------------------------------------


def test_a_division_with_many_accounts_gets_its_share_not_one_per_account() -> None:
    """root -> {cs -> {ml, systems}, physics}: flat DRF gives each account a third, H-DRF each division half."""
    jobs = cpus("ml", 12) + cpus("systems", 12) + cpus("physics", 12)
    tree = (
        assoc("root", None)
        + assoc("cs", "root")
        + assoc("ml", "cs", "u")
        + assoc("systems", "cs", "u")
        + assoc("physics", "root", "u")
    )
    snap = snapshot([node(cpu=12, gpu=8)], jobs)
    head_flat = Counter(a.split(":")[0] for a in accounts_in_order(compute_plan(snap, config()), jobs)[:12])
    head_tree = Counter(
        a.split(":")[0] for a in accounts_in_order(compute_plan(with_tree(snap, tree), config()), jobs)[:12]
    )
    assert head_flat == Counter({"ml": 4, "systems": 4, "physics": 4})
    assert head_tree == Counter({"physics": 6, "ml": 3, "systems": 3})


def test_a_cpu_only_sibling_does_not_starve_a_gpu_account_of_its_division() -> None:
    """The paper's first lesson through compute_plan: rescaling keeps the GPU sibling's turn (docs/rule.md §7).

    cpuonly holds every CPU and wants more; rescaled to its GPU sibling's
    share, it does not make its division look full, so gpuwork takes turns
    with the other division's GPU account from the first job.
    """
    jobs = (
        [job("cpuonly", "RUNNING", job_id="r1", user="u", cpu=10)]
        + [job("cpuonly", job_id=f"c{n}", user="u", submit_time=float(n), cpu=2) for n in range(4)]
        + [job("gpuwork", job_id=f"g{n}", user="u", submit_time=float(n), gpu=1) for n in range(4)]
        + [job("other", job_id=f"o{n}", user="u", submit_time=float(n), gpu=1) for n in range(4)]
    )
    tree = (
        assoc("root", None)
        + assoc("div", "root")
        + assoc("cpuonly", "div", "u")
        + assoc("gpuwork", "div", "u")
        + assoc("other", "root", "u")
    )
    snap = with_tree(snapshot([node(cpu=10, gpu=8)], jobs), tree)
    placed = [a.split(":")[0] for a in accounts_in_order(compute_plan(snap, config()), jobs)]
    # Without rescaling div's share would be cpuonly's 100% of the CPUs, and other would take every GPU first.
    assert placed[:2].count("gpuwork") == 1
    assert placed[:8].count("gpuwork") == 4
    assert "cpuonly" not in placed[:8]
    # Without jobs waiting, cpuonly would count as it is (a blocked node): its division then holds every CPU.
    idle = [j for j in jobs if not j.job_id.startswith("c")]
    waiting = [
        a.split(":")[0]
        for a in accounts_in_order(compute_plan(dataclasses.replace(snap, jobs=tuple(idle)), config()), idle)
    ]
    assert waiting[:4] == ["other"] * 4


# --- the join's edges -----------------------------------------------------------------


def test_an_account_the_tree_lacks_hangs_under_the_root() -> None:
    jobs = cpus("physics", 2) + cpus("stray", 2)
    tree = assoc("root", None) + assoc("physics", "root", "u")
    plan = compute_plan(with_tree(snapshot([node(cpu=8)], jobs), tree), config())
    assert sorted(order(plan)) == sorted(j.job_id for j in jobs)
    placed = [a.split(":")[0] for a in accounts_in_order(plan, jobs)]
    assert Counter(placed[:2]) == Counter(placed[2:]) == Counter({"physics": 1, "stray": 1})


def test_an_account_the_tree_lacks_keeps_its_weight_from_the_config() -> None:
    jobs = cpus("physics", 6) + cpus("stray", 6)
    tree = assoc("root", None) + assoc("physics", "root", "u")
    cfg = config(weights=MappingProxyType({"stray": Fraction(2)}))
    plan = compute_plan(with_tree(snapshot([node(cpu=6)], jobs), tree), cfg)
    head = Counter(a.split(":")[0] for a in accounts_in_order(plan, jobs)[:6])
    assert head == Counter({"stray": 4, "physics": 2})


def test_a_path_key_excludes_an_account_of_the_tree() -> None:
    jobs = cpus("theory", 2) + cpus("lab", 2)
    tree = (
        assoc("root", None) + assoc("physics", "root") + assoc("theory", "physics", "u") + assoc("lab", "physics", "u")
    )
    cfg = config(exclude_accounts=frozenset({"physics/lab"}))
    plan = compute_plan(with_tree(snapshot([node(cpu=8)], jobs), tree), cfg)
    reasons = {j.job_id: j.reason for j in plan.jobs}
    assert all(reasons[f"lab-u-{n}"] is not None for n in range(2))
    assert [j.job_id for j in plan.jobs if j.order is not None] == ["theory-u-0", "theory-u-1"]


def test_the_past_counts_at_the_account_not_against_one_user() -> None:
    """history: the past of physics holds physics back against chemistry, and alice and bob stay equal inside it."""
    jobs = cpus("physics", 4, "alice") + cpus("physics", 4, "bob") + cpus("chemistry", 4, "carol")
    tree = assoc("root", None) + assoc("physics", "root", "alice", "bob") + assoc("chemistry", "root", "carol")
    cfg = config(history=HistoryConfig(half_life_s=86400.0, weight=1.0))
    past = {DEFAULT_POOL: {"physics": {"cpu": 3.0}}}
    plan = compute_plan(with_tree(snapshot([node(cpu=16)], jobs), tree), cfg, past=past)
    placed = accounts_in_order(plan, jobs)
    assert placed[:3] == ["chemistry:carol"] * 3  # physics starts 3 CPUs behind
    physics = [p for p in placed if p.startswith("physics")]
    assert physics[:4].count("physics:alice") == 2


def test_a_weight_from_slurm_raw_shares() -> None:
    jobs = cpus("theory", 6) + cpus("lab", 6)
    tree = (
        assoc("root", None)
        + assoc("physics", "root")
        + assoc("theory", "physics", "u", shares=2)
        + assoc("lab", "physics", "u", shares=1)
    )
    snap = with_tree(snapshot([node(cpu=6)], jobs), tree)
    head = Counter(
        a.split(":")[0] for a in accounts_in_order(compute_plan(snap, config(weight_source="slurm")), jobs)[:6]
    )
    assert head == Counter({"theory": 4, "lab": 2})
    equal = Counter(a.split(":")[0] for a in accounts_in_order(compute_plan(snap, config()), jobs)[:6])
    assert equal == Counter({"theory": 3, "lab": 3})


@pytest.mark.parametrize("within", ["user", "slurm"])
def test_every_pending_job_is_ordered_once(within: WithinAccount) -> None:
    jobs = cpus("theory", 3, "alice") + cpus("theory", 2, "bob") + cpus("lab", 4, "carol") + cpus("stray", 1)
    tree = (
        assoc("root", None)
        + assoc("physics", "root")
        + assoc("theory", "physics", "alice", "bob")
        + assoc("lab", "physics", "carol")
    )
    plan = compute_plan(with_tree(snapshot([node(cpu=4)], jobs), tree), config(within))
    assert sorted(order(plan)) == sorted(j.job_id for j in jobs)
    assert sorted(j.order for j in plan.jobs if j.order is not None) == list(range(len(jobs)))


def test_hierarchy_flat_ignores_the_tree() -> None:
    snap, _ = _one_account_two_users()
    flat = compute_plan(dataclasses.replace(snap, associations=()), config())
    assert order(compute_plan(snap, config(hierarchy="flat"))) == order(flat)
    assert order(compute_plan(snap, config())) != order(flat)


def test_hierarchy_is_read_from_the_config() -> None:
    assert parse_config_text("hierarchy: flat\n", "c.yaml").hierarchy == "flat"
    assert parse_config_text("interval: 60s\n", "c.yaml").hierarchy == "tree"
    with pytest.raises(ConfigError, match=r"c\.yaml:1: hierarchy: "):
        parse_config_text("hierarchy: deep\n", "c.yaml")
