"""Placing a job in a pool ordered over Slurm's account tree (H-DRF, docs/rule.md §7 and §8).

The table comes from a real plan (`compute_plan` over a snapshot with
associations); a placed job must land where the next plan, with that job in
the queue, puts it, and the script must place as `Placer` does.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_drf.config.settings import Config, WithinAccount
from slurm_drf.model.types import Association, Job, Snapshot
from slurm_drf.policy.placement import PlacementTable, Placer, build_table
from slurm_drf.policy.plan import Plan, compute_plan
from tests.unit.builders import job, node, snapshot
from tests.unit.submit.lua import NICE_OFFSET, LuaValue, answers, run
from tests.unit.submit.tables import PARTS, RESOURCES, WRITTEN, text

NOW = int(WRITTEN) + 10
# root -> physics -> {theory (weight 2): alice, bob; lab: carol}; root -> research -> {gputeam: root}.
TREE = (
    Association("root", None, None, 1),
    Association("physics", "root", None, 1),
    Association("theory", "physics", None, 2),
    Association("theory", "theory", "alice", 1),
    Association("theory", "theory", "bob", 1),
    Association("lab", "physics", None, 1),
    Association("lab", "lab", "carol", 1),
    Association("research", "root", None, 1),
    Association("gputeam", "research", None, 1),
    Association("gputeam", "gputeam", "root", 1),
)


def _job(account: str, user: str, name: str, cpu: int = 4, gpu: int = 0, state: str = "PENDING") -> Job:
    number = int(name.rsplit("-", 1)[-1]) if name[-1].isdigit() else 0
    return job(
        account, state, "cpu", job_id=name, user=user, submit_time=float(number), cpu=cpu, mem=4000 * cpu, gpu=gpu
    )


def _snapshot(jobs: Sequence[Job]) -> Snapshot:
    snap = snapshot([node("n1", ("cpu", "gpu"), cpu=64, mem=512_000, gpu=8)], jobs)
    return dataclasses.replace(snap, associations=TREE)


def _config(within: WithinAccount = "user") -> Config:
    return dataclasses.replace(Config(resources=RESOURCES), fairness_within_account=within)


def _table(plan: Plan, config: Config) -> PlacementTable:
    table = build_table(plan, config, WRITTEN)
    assert [pool.tree is not None for pool in table.pools] == [True]
    return table


def _order(plan: Plan) -> list[str]:
    return [j.job_id for j in sorted(plan.jobs, key=lambda j: -1 if j.order is None else j.order)]


def _placed_order(plan: Plan, placed: Sequence[tuple[str, int]]) -> list[str]:
    """Slurm's order once the placed jobs hold their values: the lower nice first, the older job on a tie."""
    values = [(j.value, 0, n, j.job_id) for n, j in enumerate(sorted(plan.jobs, key=lambda j: j.order or 0))]
    values += [(value, 1, n, name) for n, (name, value) in enumerate(placed)]
    return [name for *_, name in sorted(values)]


BACKLOG = [
    _job("gputeam", "root", "run-g", cpu=8, gpu=4, state="RUNNING"),
    _job("theory", "alice", "run-a", cpu=8, state="RUNNING"),
    _job("lab", "carol", "run-c", cpu=2, state="RUNNING"),  # no share of 0 but a new user's: no ties at 0
    *(_job("theory", "alice", f"alice-{k}", cpu=4) for k in range(1, 5)),
    *(_job("lab", "carol", f"carol-{k}", cpu=2) for k in range(5, 7)),
    *(_job("gputeam", "root", f"gpu-{k}", cpu=1, gpu=1) for k in range(7, 10)),
]


@pytest.mark.parametrize(
    ("account", "user"),
    [("theory", "bob"), ("theory", "alice"), ("lab", "carol"), ("lab", "dave"), ("gputeam", "root"), ("new", "eve")],
)
def test_a_job_lands_where_the_next_plan_puts_it(account: str, user: str) -> None:
    config = _config()
    plan = compute_plan(_snapshot(BACKLOG), config)
    value = Placer(_table(plan, config)).place(["cpu"], account, (4, 16_000, 0), user=user)
    assert value is not None
    again = compute_plan(_snapshot([*BACKLOG, _job(account, user, "new-100")]), config)
    # The same number of jobs before it (the others' own order may change: a new user of an account
    # rescales its siblings, which the next cycle writes).
    assert _placed_order(plan, [("new-100", value)]).index("new-100") == _order(again).index("new-100")


def test_a_new_users_first_job_takes_its_accounts_next_turn() -> None:
    """bob has nothing yet: he goes before alice inside theory, but theory is charged what alice holds
    (docs/rule.md §7), so his job takes theory's next turn, just before alice's first waiting job, and
    not the head of the queue (where rescaling alice to bob's 0 put it)."""
    config = _config()
    plan = compute_plan(_snapshot(BACKLOG), config)
    value = Placer(_table(plan, config)).place(["cpu"], "theory", (4, 16_000, 0), user="bob")
    assert value is not None
    placed = _placed_order(plan, [("new-100", value)])
    assert placed.index("new-100") == placed.index("alice-1") - 1 > 0


@pytest.mark.parametrize("within", ["user", "slurm"])
def test_a_burst_interleaves_as_the_next_plan_orders_it(within: WithinAccount) -> None:
    config = _config(within)
    plan = compute_plan(_snapshot(BACKLOG), config)
    placer = Placer(_table(plan, config))
    burst = [f"bob-{100 + k}" for k in range(8)]
    values = [placer.place(["cpu"], "theory", (4, 16_000, 0), user="bob") for _ in burst]
    assert None not in values
    again = compute_plan(_snapshot([*BACKLOG, *(_job("theory", "bob", name) for name in burst)]), config)
    placed = _placed_order(plan, [(name, v) for name, v in zip(burst, values, strict=True) if v is not None])
    # Beside the other accounts' jobs (theory's own move as bob joins it: the next cycle writes them),
    # each of bob's jobs has the same jobs before it as the next plan gives it, give or take one.
    others = {j.job_id for j in plan.jobs if j.account != "theory"}
    mine, theirs = ([j for j in order if j in others or j in burst] for order in (placed, _order(again)))
    assert max(abs(mine.index(j) - theirs.index(j)) for j in burst) <= 1, (mine, theirs)
    assert 0 < sum(mine.index(j) < mine.index("gpu-7") for j in burst) < len(burst)  # interleaved


def _random_backlog(seed: int) -> list[Job]:
    rnd = random.Random(seed)
    people = [("theory", "alice"), ("theory", "bob"), ("lab", "carol"), ("gputeam", "root")]
    jobs = [
        _job(*rnd.choice(people), f"run-{k}", cpu=rnd.randint(1, 8), gpu=rnd.randint(0, 2), state="RUNNING")
        for k in range(rnd.randint(0, 5))
    ]
    jobs += [
        _job(*rnd.choice(people), f"p-{k}", cpu=rnd.randint(1, 6), gpu=rnd.randint(0, 1))
        for k in range(rnd.randint(1, 30))
    ]
    return jobs


def _lua_job(account: str, user: str, uid: int, cpus: int) -> dict[str, LuaValue]:
    """`sbatch -A ACCOUNT -p cpu -c CPUS --mem=...` by `user`, as the plugin shows it."""
    return {
        "account": account,
        "partition": "cpu",
        "min_cpus": cpus,
        "cpus_per_task": cpus,
        "min_mem_per_node": 4000 * cpus,
        "user_id": uid,
        "user_name": user,
    }


@pytest.mark.parametrize("within", ["user", "slurm"])
@pytest.mark.parametrize("seed", range(6))
def test_the_script_places_as_the_python_placer_in_a_tree_pool(
    lua: str, tmp_path: Path, seed: int, within: WithinAccount
) -> None:
    config = _config(within)
    table = _table(compute_plan(_snapshot(_random_backlog(seed)), config), config)
    path = tmp_path / "placement.txt"
    path.write_text(text(table), encoding="ascii")
    rnd = random.Random(seed)
    people = [("theory", "alice"), ("theory", "bob"), ("lab", "carol"), ("lab", "dave"), ("new", "eve")]
    uids = {"alice": 1001, "bob": 1002, "carol": 1003, "dave": 1004, "eve": 1005}
    mix = [(*rnd.choice(people), rnd.randint(1, 8)) for _ in range(40)]
    steps: list[LuaValue] = [
        {"op": "place", "id": f"j{k}", "job": _lua_job(a, u, uids[u], c), "parts": PARTS}
        for k, (a, u, c) in enumerate(mix)
    ]
    got = answers(run(lua, {"time": NOW, "configure": {"table": str(path)}, "steps": steps}, tmp_path))
    placer = Placer(table)
    for k, (account, user, cpus) in enumerate(mix):
        expected = placer.place(["cpu"], account, (cpus, 4000 * cpus, 0), user=user)
        line = got[f"j{k}"]
        shown = None if line[1] == "unchanged" else int(line[1].partition("=")[2]) - NICE_OFFSET
        assert shown == expected, (k, account, user, line)


def _good_tree() -> str:
    config = _config()
    return text(_table(compute_plan(_snapshot(BACKLOG), config), config))


GOOD_TREE = _good_tree()
TREE_EDITS = {
    "a node out of turn": ("node 2 0 1 ", "node 3 0 1 "),
    "a parent after its child": ("node 3 2 1 ", "node 3 4 1 "),
    "a node of weight 0": ("node 2 0 1 ", "node 2 0 0 "),
    "a negative done": ("node 2 0 1 0.46875", "node 2 0 1 -0.46875"),
    "a node lacking done": ("node 2 0 1 0.46875", "node 2 0 1"),
    "steps decrease": ("step 2 0.0625 0.125", "step 2 0.0625 0.01"),
    "a step of no node": ("step 1 0 0", "step 9 0 0"),
    "a step's fraction of a node": ("step 2 0.0625 0.125", "step 2.5 0.0625 0.125"),
    "a step of a nan": ("step 2 0.0625 0.125", "step 2 nan 0.125"),
    "a leaf lacking usage": ("lab carol 6 24000 0", "lab carol 6 24000"),
    "a leaf lacking its user": ("lab carol 6 24000 0", "lab"),
    "a leaf twice": ("lab carol 6", "theory alice 6"),
    "a bad user": ("lab carol", "lab car/ol"),
    "a negative usage": ("lab carol 6", "lab carol -6"),
    "a home twice": ("home lab 4", "home gputeam 4"),
    "a home of no node": ("home lab 4", "home lab 12"),
    "a node before tree": ("tree user\n", ""),
    "tree twice": ("tree user\n", "tree user\ntree user\n"),
    "another tree": ("tree user", "tree users"),
    "an account in a tree pool": ("home theory 3\n", "home theory 3\naccount nlp 1 0 0 0\n"),
    "a step after the homes": ("home gputeam 1\n", "home gputeam 1\nstep 1 1 1\n"),
    "a step after end": ("", ""),
}


def test_a_tree_table_is_read(lua: str, tmp_path: Path) -> None:
    got = answers(run(lua, {"steps": [{"op": "parse", "id": "p", "text": GOOD_TREE}]}, tmp_path))
    assert got["p"][:3] == ["ok", "nice", "1"]


@pytest.mark.parametrize("edit", list(TREE_EDITS))
def test_a_broken_tree_is_refused_naming_the_line(lua: str, tmp_path: Path, edit: str) -> None:
    old, new = TREE_EDITS[edit]
    assert old in GOOD_TREE
    broken = GOOD_TREE.replace(old, new, 1) if old else GOOD_TREE + "step 1 1 1\n"
    got = answers(run(lua, {"steps": [{"op": "parse", "id": "p", "text": broken}]}, tmp_path))
    assert got["p"][0] == "nil", (edit, got["p"])
    assert got["p"][1].startswith("line ")
