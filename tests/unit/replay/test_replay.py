"""The replay's pure parts: submissions, refusals, arms, the result file, and the shared metrics."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType, SimpleNamespace

import numpy as np
import orjson
import pytest
import yaml

from slurm_drf.cli.main import main
from slurm_drf.config.load import parse_config_text
from slurm_drf.config.settings import Config
from slurm_drf.errors import SlurmWriteError
from slurm_drf.replay import cluster as replay_cluster
from slurm_drf.replay import run as run_module
from slurm_drf.replay.arms import ARMS, build_billing_weights, build_daemon_config, build_slurm_lines, parse_arm
from slurm_drf.replay.cluster import parse_sdiag_rpcs
from slurm_drf.replay.report import build_comparison, cut_result, predict, render_replay_html
from slurm_drf.replay.result import ReplayResult, parse_result, render_result, to_sim_result
from slurm_drf.replay.run import ReplayOptions, prepare_users
from slurm_drf.replay.trace import (
    JOB_NAME_PREFIX,
    ReplayInputError,
    Submission,
    account_paths,
    build_job_script,
    build_sbatch_argv,
    build_submissions,
    check_compression,
    check_fits,
    job_name,
    on_cluster,
    scheduling_interval,
)
from slurm_drf.replay.users import UserChoice, parse_users, plan_associations, plan_users
from slurm_drf.sim.engine import simulate
from slurm_drf.sim.importers import parse_swf
from slurm_drf.sim.options import SimResult
from slurm_drf.sim.policies import build_policy
from slurm_drf.sim.run_metrics import (
    compute_metrics,
    fair_shares,
    finish_time_fairness,
    render_metrics,
    times_to_fair_share,
    water_fill,
)
from slurm_drf.sim.scenarios import TREE_USERS, build_scenario
from slurm_drf.sim.workload import AccountTree, NodeType, Workload, WorkloadJob
from tests.unit.builders import node


def _job(job_id: str, account: str, submit: float = 0.0, duration: float = 600.0, **tres: int) -> WorkloadJob:
    return WorkloadJob(
        job_id=job_id,
        account=account,
        user=f"{account}-u",
        submit=submit,
        duration=duration,
        limit=duration,
        cpu=tres.get("cpu", 1),
        mem=tres.get("mem", 1000),
        gpu=tres.get("gpu", 0),
        nodes=tres.get("nodes", 1),
    )


def _workload(
    *jobs: WorkloadJob, tree: AccountTree | None = None, weights: dict[str, Fraction] | None = None
) -> Workload:
    return Workload("t", "test", tuple(jobs), 2, NodeType(), MappingProxyType(weights or {}), tree=tree)


def parse_swf_workload(text: str) -> Workload:
    return _workload(*parse_swf(text).jobs)


NODES = [node("a", cpu=64, mem=512_000, gpu=8), node("b", cpu=32, mem=128_000, gpu=0)]


# --------------------------------------------------------------------------
# Submissions


def test_submissions_are_compressed_and_in_submit_order() -> None:
    workload = _workload(_job("late", "x", submit=600, duration=120), _job("early", "y", submit=60, duration=1200))
    subs = build_submissions(workload, 60)
    assert [s.job.job_id for s in subs] == ["early", "late"]
    assert subs[0].at == 1.0 and subs[0].sleep == 20.0
    assert subs[1].at == 10.0 and subs[1].sleep == 2.0
    # The limit leaves the sleep room to end by itself.
    assert subs[1].limit > subs[1].sleep


@pytest.mark.parametrize("factor", [0.0, -1.0, math.inf, math.nan])
def test_a_compression_that_is_not_a_positive_number_is_refused(factor: float) -> None:
    with pytest.raises(ReplayInputError, match="--compress"):
        build_submissions(_workload(_job("j", "x")), factor)


def test_sbatch_argv_carries_the_trace_job_and_never_a_shell_string() -> None:
    sub = build_submissions(_workload(_job("climate-7", "climate", duration=300, cpu=8, mem=16000, gpu=2)), 60)[0]
    argv = build_sbatch_argv(sub, "gpu", "/work dir", None, "0a1b2c3d")
    assert argv[0] == "sbatch" and "--parsable" in argv
    assert "--account=climate" in argv and "--cpus-per-task=8" in argv and "--mem=16000M" in argv
    assert "--gres=gpu:2" in argv and "--partition=gpu" in argv and "--nodes=1" in argv
    # Named for this replay run: no other run's job has the name.
    assert f"--job-name={JOB_NAME_PREFIX}0a1b2c3d-climate-7" in argv
    # A working directory with a space stays one argument.
    assert "--chdir=/work dir" in argv
    assert build_job_script(sub) == "#!/bin/sh\nexec sleep 5.000\n"
    # Run once whatever happens to a node; only the reclaiming arm's jobs may be requeued (its victims).
    assert "--no-requeue" in argv and "--requeue" not in argv
    requeue = build_sbatch_argv(sub, "gpu", "/work dir", None, "0a1b2c3d", requeue=True)
    assert "--requeue" in requeue and "--no-requeue" not in requeue


def test_no_gres_option_without_gpus_and_no_partition_when_none_is_given() -> None:
    sub = build_submissions(_workload(_job("j", "x")), 1)[0]
    argv = build_sbatch_argv(sub, None, "/", None, "r")
    assert not any(a.startswith(("--gres", "--partition")) for a in argv)


@pytest.mark.parametrize("trace_id", ["a b", "x;rm -rf /", "ü$(id)", "a" * 300])
def test_job_names_hold_only_plain_characters(trace_id: str) -> None:
    name = job_name(_job(trace_id, "x"), "0a1b2c3d")
    assert name.startswith(JOB_NAME_PREFIX + "0a1b2c3d-")
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    assert len(name) <= len(JOB_NAME_PREFIX) + 9 + 100


# --------------------------------------------------------------------------
# Refusals: one line naming the job, nothing submitted (the checks run before any sbatch)


@pytest.mark.parametrize(
    ("tres", "what"),
    [
        ({"cpu": 65}, "cpu=65"),
        ({"mem": 600_000}, "mem=600000"),
        ({"gpu": 9}, "gres/gpu=9"),
        ({"cpu": 40, "nodes": 2}, "2 node(s)"),
    ],
)
def test_a_job_larger_than_any_node_is_refused_by_name(tres: dict[str, int], what: str) -> None:
    workload = _workload(_job("small", "x"), _job("huge-1", "big", **tres))
    with pytest.raises(ReplayInputError) as caught:
        check_fits(workload, NODES)
    message = str(caught.value)
    assert "huge-1" in message and "big" in message and what in message and "\n" not in message


def test_jobs_that_fit_pass_and_down_nodes_are_no_capacity() -> None:
    check_fits(_workload(_job("j", "x", cpu=40, nodes=1), _job("k", "y", cpu=16, nodes=2)), NODES)
    with pytest.raises(ReplayInputError, match="no node"):
        check_fits(_workload(_job("j", "x")), [node("a", state="down", cpu=64, mem=512_000)])


def test_a_compression_making_jobs_shorter_than_the_scheduling_interval_is_refused() -> None:
    workload = _workload(_job("long", "x", duration=3600), _job("short-3", "y", duration=120))
    subs = build_submissions(workload, 60)
    check_compression(subs, 60, 1)
    with pytest.raises(ReplayInputError) as caught:
        check_compression(subs, 60, scheduling_interval({"bf_interval": 30}))
    message = str(caught.value)
    # Slurm's default sched_interval (60 s) is the longer one here.
    assert "short-3" in message and "60 s" in message and "--compress 2 or less" in message


def test_scheduling_interval_takes_slurms_defaults_for_what_is_not_set() -> None:
    assert scheduling_interval({}) == 60
    assert scheduling_interval({"sched_interval": 1, "bf_interval": 1}) == 1
    assert scheduling_interval({"sched_interval": 1}) == 30


def test_account_paths_put_parents_first_with_whole_number_shares() -> None:
    tree = AccountTree(
        MappingProxyType({"theory": "physics", "lab": "physics", "ml": "cs"}),
        MappingProxyType({"physics": Fraction(2), "cs": Fraction(1, 2)}),
    )
    workload = _workload(
        _job("1", "theory"), _job("2", "lab"), _job("3", "ml"), tree=tree, weights={"lab": Fraction(3, 2)}
    )
    rows = account_paths(workload)
    assert [r[0] for r in rows[:2]] == ["cs", "physics"]
    shares = {name: (parent, share) for name, parent, share in rows}
    # Scaled by 2 (the denominators' lcm): physics 2 -> 4, cs 1/2 -> 1, lab 3/2 -> 3, the others 1 -> 2.
    assert shares == {
        "cs": (None, 1),
        "physics": (None, 4),
        "lab": ("physics", 3),
        "theory": ("physics", 2),
        "ml": ("cs", 2),
    }


# --------------------------------------------------------------------------
# Who submits: the trace's users, the invoking user, or a pool (slurm_drf.replay.users)


def _users(*pairs: tuple[str, str]) -> Workload:
    """Jobs of (account, user) pairs, one each."""
    return _workload(*(replace(_job(f"{a}-{i}", a), user=u) for i, (a, u) in enumerate(pairs)))


def _unix(*names: str) -> Callable[[str], bool]:
    return lambda name: name in names


def test_sbatch_runs_as_the_trace_user_through_runuser_as_an_argv_list() -> None:
    sub = build_submissions(_workload(_job("climate-7", "climate")), 60)[0]
    argv = build_sbatch_argv(sub, None, "/", "drfalice", "r")
    # runuser, never a shell; the user's account and the job stay sbatch's own arguments.
    assert argv[:5] == ["runuser", "-u", "drfalice", "--", "sbatch"]
    assert "--account=climate" in argv and "--chdir=/" in argv
    assert build_sbatch_argv(sub, None, "/", None, "r")[0] == "sbatch"


@pytest.mark.parametrize(
    ("text", "mode", "pool"),
    [
        ("trace", "trace", ()),
        ("invoking", "invoking", ()),
        ("pool=drfalice, drfbob,drfalice", "pool", ("drfalice", "drfbob")),
    ],
)
def test_users_option_reads_the_three_choices(text: str, mode: str, pool: tuple[str, ...]) -> None:
    assert parse_users(text) == UserChoice(mode, pool)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "what"), [("everyone", "expected trace, invoking"), ("pool=a,,b", "''"), ("pool=a=b", "'a=b'")]
)
def test_a_bad_users_option_is_one_line(text: str, what: str) -> None:
    with pytest.raises(ReplayInputError) as caught:
        parse_users(text)
    assert what in str(caught.value) and "\n" not in str(caught.value)


def test_each_job_is_submitted_as_its_trace_user() -> None:
    workload = _users(("theory", "drfalice"), ("theory", "drfbob"), ("lab", "drfcarol"), ("lab", "root"))
    plan = plan_users(workload, UserChoice(), "root", _unix("drfalice", "drfbob", "drfcarol", "root"), root=True)
    assert [plan.submitter(j) for j in workload.jobs] == ["drfalice", "drfbob", "drfcarol", "root"]
    # The replay's own user submits directly; everyone else through runuser.
    assert [plan.run_as(j) for j in workload.jobs] == ["drfalice", "drfbob", "drfcarol", None]
    assert plan.associations() == {("theory", "drfalice"), ("theory", "drfbob"), ("lab", "drfcarol"), ("lab", "root")}
    assert plan.create == () and "as their trace users" in plan.note()


def test_trace_users_that_are_not_unix_users_are_refused_in_one_line_naming_them() -> None:
    workload = _users(*((f"a{i % 2}", f"user{i:02d}") for i in range(12)))
    with pytest.raises(ReplayInputError) as caught:
        plan_users(workload, UserChoice(), "root", _unix("user00"), root=True)
    message = str(caught.value)
    assert "\n" not in message and "not Unix users on this host" in message
    assert "user01" in message and "user00," not in message and "and 1 more (11)" in message
    assert "--users invoking" in message and "--users pool=" in message and "--create-unix-users" in message


def test_a_trace_job_without_a_user_is_refused_by_name() -> None:
    workload = _workload(_job("ok", "x"), replace(_job("swf-9", "g3"), user=""))
    with pytest.raises(ReplayInputError, match="trace job swf-9 \\(account g3\\) has no user"):
        plan_users(workload, UserChoice(), "root", _unix("x-u"), root=True)


def test_submitting_as_others_needs_root_and_as_oneself_does_not() -> None:
    workload = _users(("x", "alice"), ("x", "bob"))
    with pytest.raises(ReplayInputError, match="needs root") as caught:
        plan_users(workload, UserChoice(), "alice", _unix("alice", "bob"))
    assert "bob" in str(caught.value) and "alice" not in str(caught.value).split("needs root")[0]
    alone = _users(("x", "alice"))
    plan = plan_users(alone, UserChoice(), "alice", _unix("alice"))
    assert plan.run_as(alone.jobs[0]) is None


def test_invoking_submits_every_job_as_the_replay_and_says_so() -> None:
    workload = _users(("x", "climate-u0"), ("y", "genomics-u1"))
    plan = plan_users(workload, UserChoice("invoking"), "hpcadmin", _unix())
    assert {plan.submitter(j) for j in workload.jobs} == {"hpcadmin"}
    assert all(plan.run_as(j) is None for j in workload.jobs)
    assert plan.associations() == {("x", "hpcadmin"), ("y", "hpcadmin")}
    assert "by hpcadmin" in plan.note() and "--users invoking" in plan.note()


def test_a_pool_maps_each_accounts_users_in_turn_by_name() -> None:
    # The scenarios' users (ACCOUNT-uN): each account's three users onto the three sandbox users.
    workload = build_scenario("gpu-newcomer", 1, nodes=4, jobs=60)
    pool = ("drfalice", "drfbob", "drfcarol")
    plan = plan_users(workload, UserChoice("pool", pool), "root", _unix(*pool), root=True)
    for account in workload.accounts:
        users = sorted({j.user for j in workload.jobs if j.account == account})
        assert users == [f"{account}-u0", f"{account}-u1", f"{account}-u2"]
        assert [plan.submitters[(account, u)] for u in users] == list(pool)
    # A user in two accounts maps per account.
    two = _users(("b", "zed"), ("a", "amy"), ("a", "zed"))
    mapped = plan_users(two, UserChoice("pool", ("p1", "p2")), "root", _unix("p1", "p2"), root=True)
    assert mapped.submitters == {("a", "amy"): "p1", ("a", "zed"): "p2", ("b", "zed"): "p1"}
    with pytest.raises(ReplayInputError, match="not Unix users on this host: nobody2"):
        plan_users(two, UserChoice("pool", ("p1", "nobody2")), "root", _unix("p1"), root=True)


def test_create_unix_users_makes_only_the_missing_ones_and_only_valid_names() -> None:
    # SWF's user ids are u<id> (importers): names useradd takes.
    workload = parse_swf_workload(
        "1 0 0 600 4 -1 -1 4 600 -1 1 123 7 -1 1 -1 -1 -1\n2 5 0 600 4 -1 -1 4 600 -1 1 9 7 -1 1 -1 -1 -1\n"
    )
    assert sorted({j.user for j in workload.jobs}) == ["u123", "u9"]
    plan = plan_users(workload, UserChoice(), "root", _unix("u9"), create_unix_users=True, root=True)
    assert plan.create == ("u123",) and "created Unix user(s) u123" in plan.note()
    with pytest.raises(ReplayInputError, match="useradd would not take: Alice"):
        plan_users(_users(("x", "Alice")), UserChoice(), "root", _unix(), create_unix_users=True, root=True)
    with pytest.raises(ReplayInputError, match="--create-unix-users goes with --users trace"):
        plan_users(workload, UserChoice("invoking"), "root", _unix(), create_unix_users=True, root=True)


def test_the_tree_scenarios_users_are_leaves_of_their_accounts() -> None:
    workload = build_scenario("tree", 1, nodes=4, jobs=80)
    names = {u for u, *_ in TREE_USERS}
    plan = plan_users(workload, UserChoice(), "root", _unix(*names), root=True)
    made = plan_associations(workload, plan, {("root", "")}, create=True)
    # The tree first (parents before their accounts), then each user in its account.
    assert [a for a, _, _ in made.accounts] == ["cs", "physics", "astro", "lab", "ml", "systems"]
    assert set(made.users) == {(account, user) for user, account, *_ in TREE_USERS}


def test_missing_associations_are_refused_naming_accounts_and_users() -> None:
    workload = _users(("theory", "drfalice"), ("theory", "drfbob"), ("alpha", "drfalice"))
    plan = plan_users(workload, UserChoice(), "root", _unix("drfalice", "drfbob"), root=True)
    known = {("theory", ""), ("theory", "drfalice")}
    with pytest.raises(ReplayInputError) as caught:
        plan_associations(workload, plan, known, create=False)
    message = str(caught.value)
    assert "account(s) alpha" in message and "user(s) drfbob in theory" in message and "--create-accounts" in message
    made = plan_associations(workload, plan, known, create=True)
    assert made.accounts == (("alpha", None, 1),) and made.users == (("alpha", "drfalice"), ("theory", "drfbob"))
    assert plan_associations(workload, plan, known | set(made.users) | {("alpha", "")}, create=False).users == ()


def test_nothing_is_created_when_a_check_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    monkeypatch.setattr(replay_cluster, "fetch_associations", lambda cluster: {("theory", "")})
    for name in ("create_unix_user", "create_account", "create_user"):
        monkeypatch.setattr(replay_cluster, name, lambda *args, name=name: made.append(name))
    monkeypatch.setattr(run_module, "_is_unix_user", lambda name: False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    workload = _users(("alpha", "newuser"))
    options = ReplayOptions(arm=parse_arm("slurm"), compression=60, config=Config(), create_unix_users=True)
    with pytest.raises(ReplayInputError, match="account\\(s\\) alpha"):
        prepare_users(workload, "drftest", options)
    assert made == []
    plan, notes = prepare_users(workload, "drftest", replace(options, create_accounts=True))
    assert made == ["create_unix_user", "create_account", "create_user"]
    assert plan.submitter(workload.jobs[0]) == "newuser"
    assert any("newuser in alpha" in n for n in notes) and any(
        "created account(s) with sacctmgr: alpha" in n for n in notes
    )


def _player(workload: Workload, monkeypatch: pytest.MonkeyPatch, fail: str) -> run_module._Player:
    """A replay's player over `workload` whose sbatch of trace job `fail` fails; the others get ids 101, 102, ..."""
    ids = iter(range(101, 1000))

    def submit(sub: Submission, partition: str | None, run_as: str | None, run: str, requeue: bool) -> str:
        if sub.job.job_id == fail:
            raise SlurmWriteError("sbatch: no answer within 30 s")
        return str(next(ids))

    monkeypatch.setattr(replay_cluster, "submit", submit)
    ready = SimpleNamespace(
        workload=workload,
        subs=tuple(build_submissions(workload, 60)),
        options=SimpleNamespace(partition=None, arm=ARMS["drf"]),
        users=SimpleNamespace(run_as=lambda job: None),
    )
    return run_module._Player(ready, None)  # type: ignore[arg-type]


def test_a_failed_sbatch_is_cancelled_by_its_runs_name_beside_the_jobs_of_known_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """slurmctld may hold the job of an sbatch that timed out or was killed: no id, so its name (the run's own)."""
    workload = _workload(_job("a", "x"), _job("b", "x", submit=1.0), _job("c", "x", submit=2.0))
    player = _player(workload, monkeypatch, fail="b")
    with pytest.raises(SlurmWriteError):
        player.submit_due(math.inf)
    assert player.ours == {"101": "x"} and player.unknown == [job_name(workload.jobs[1], player.run)]
    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(replay_cluster, "cancel", lambda ids: calls.append(("ids", list(ids))))
    monkeypatch.setattr(replay_cluster, "cancel_named", lambda names: calls.append(("names", list(names))))
    monkeypatch.setattr(replay_cluster, "remaining", lambda ids: [])
    assert run_module._cancel_ours(list(player.ours), player.unknown) == []
    assert calls == [("names", player.unknown), ("ids", ["101"])]
    # Another run's jobs never have these names.
    assert _player(workload, monkeypatch, fail="").run != player.run


def test_a_stop_submits_nothing_more() -> None:
    workload = _workload(_job("a", "x"), _job("b", "x", submit=1.0))
    player = run_module._Player(
        SimpleNamespace(  # type: ignore[arg-type]
            workload=workload, subs=tuple(build_submissions(workload, 60)), options=None, users=None
        ),
        None,
    )
    player.stop.set()
    player.submit_due(math.inf)  # would raise on options=None had it submitted
    assert player.submitted == [] and len(player.waiting) == 2


# --------------------------------------------------------------------------
# Arms and the Slurm they run against


def test_every_arm_names_a_simulator_policy_and_unknown_arms_are_refused() -> None:
    for arm in ARMS.values():
        build_policy(arm.predicted_by)
    with pytest.raises(ReplayInputError, match="unknown arm 'fifo'"):
        parse_arm("fifo")


def test_billing_weights_make_a_whole_node_bill_the_same_whatever_fills_it() -> None:
    # SPEC §8: 64 CPUs, 500 GiB, 8 GPUs.
    assert build_billing_weights([node(cpu=64, mem=512_000, gpu=8)]) == "CPU=1.0,Mem=0.128G,GRES/gpu=8"
    assert build_billing_weights([node(cpu=32, mem=256_000)]) == "CPU=1.0,Mem=0.128G"


def test_slurm_lines_compress_the_half_life_but_not_the_calc_period() -> None:
    lines = build_slurm_lines(60)
    assert "PriorityFlags=MAX_TRES" in lines and "PriorityCalcPeriod=1" in lines
    assert "PriorityDecayHalfLife=168" in lines  # 7 days / 60 = 168 minutes
    weights = dict(line.split("=", 1) for line in lines if line.startswith("PriorityWeight"))
    assert int(weights["PriorityWeightFairshare"]) > 10 * int(weights["PriorityWeightAge"])


@pytest.mark.parametrize("name", [n for n, a in ARMS.items() if a.daemon is not None])
def test_each_daemon_arm_config_validates(name: str) -> None:
    base = {"accounts": {"vision": {"weight": 2}}}
    # drf-reclaim's 10 trace minutes of `after` are a wall minute, the daemon's least, at 10x.
    compression = 10 if parse_arm(name).reclaim else 60
    config = build_daemon_config(
        parse_arm(name), compression, "/srv/slurm-drf/state", base, "/srv/sandbox/placement.txt"
    )
    parsed = parse_config_text(yaml.safe_dump(config), "arm")
    assert parsed.interval == 60 / compression and parsed.mode == "nice"
    assert (parsed.reclaim is not None) == (name == "drf-reclaim")
    assert parsed.weight("vision") == 2
    assert (parsed.history is not None and parsed.history.active) == (name == "drf-history")
    assert parsed.hierarchy == ("tree" if name == "hdrf" else "flat")
    # Only the placing arm writes the table the cluster's job_submit script reads; the others none at all.
    if name == "drf-placed":
        assert parsed.placement is not None and parsed.placement.path == "/srv/sandbox/placement.txt"
    else:
        assert parsed.placement is None


def test_the_placing_arm_without_a_table_path_is_refused_in_one_line() -> None:
    with pytest.raises(ReplayInputError, match="--placement-table"):
        build_daemon_config(ARMS["drf-placed"], 60, "/s", {})


def test_drf_history_arm_takes_the_users_history_weight_and_compresses_its_half_life() -> None:
    base = {"history": {"weight": 1, "half_life": "7d"}}
    parsed = parse_config_text(yaml.safe_dump(build_daemon_config(ARMS["drf-history"], 60, "/s", base)), "arm")
    assert parsed.history is not None and parsed.history.weight == 1
    assert parsed.history.half_life_s == 7 * 86400 / 60
    plain = parse_config_text(yaml.safe_dump(build_daemon_config(ARMS["drf-history"], 60, "/s", {})), "arm")
    assert plain.history is not None and (plain.history.weight, plain.history.half_life_s) == (0.5, 14 * 86400 / 60)
    # The other arms never carry the user's history: they are the arms without it.
    drf = parse_config_text(yaml.safe_dump(build_daemon_config(ARMS["drf"], 60, "/s", base)), "arm")
    assert drf.history is None or not drf.history.active


def test_sdiag_rpcs_are_read_from_the_message_type_section_only() -> None:
    text = """*******************************************************
Remote Procedure Call statistics by message type
	REQUEST_JOB_INFO                        ( 2003) count:120    ave_time:512    total_time:61440
	REQUEST_UPDATE_JOB                      ( 3001) count:7      ave_time:900    total_time:6300
Remote Procedure Call statistics by user
	root            (       0) count:127    ave_time:500    total_time:63500
"""
    assert parse_sdiag_rpcs(text) == {"REQUEST_JOB_INFO": 120, "REQUEST_UPDATE_JOB": 7}
    assert parse_sdiag_rpcs("no such section") == {}


# --------------------------------------------------------------------------
# The result file and the metrics both use


def _replayed(sim: SimResult, compression: float = 60.0) -> ReplayResult:
    """A simulated run dressed as a replay's result (samples per account from the simulation's jobs)."""
    from slurm_drf.sim.run_metrics import tree_samples
    from slurm_drf.sim.table import build_workload_table
    from slurm_drf.sim.tree_layout import build_layout

    layout = build_layout(sim.workload, build_workload_table(sim.workload))
    usage, _ = tree_samples(sim, layout)
    per_account = np.stack([usage[:, list(_leaves(layout, n))].sum(axis=1) for n in layout.account_node], axis=1)
    return ReplayResult(
        arm="drf",
        summary="x",
        compression=compression,
        sample_interval=sim.interval / compression,
        workload=sim.workload,
        job_ids=tuple(str(i + 1) for i in range(len(sim.workload.jobs))),
        start=tuple(float(x) for x in sim.start),
        end=tuple(float(x) for x in sim.end),
        capacity=sim.capacity,
        sample_time=tuple(float(x) for x in sim.sample_time),
        sample_used=tuple(tuple((int(c), int(m), int(g)) for c, m, g in row) for row in per_account.astype(np.int64)),
        sample_pending=tuple(tuple(int(p) for p in row) for row in sim.sample_pending),
        writes_per_cycle=(3, 0, 1),
        rpcs=MappingProxyType({"REQUEST_JOB_INFO": 30, "REQUEST_UPDATE_JOB": 4}),
        slurm_settings=("PriorityFlags=MAX_TRES",),
        slurm_version="22.05.8",
        daemon_config={"mode": "nice"},
        backend="slurm cli",
    )


def _leaves(layout: object, account_node: int) -> list[int]:
    children = layout.children[account_node]  # type: ignore[attr-defined]
    return list(children) or [account_node]


def test_a_replay_result_is_measured_as_the_simulator_measures_the_same_run() -> None:
    workload = build_scenario("gpu-newcomer", 1, nodes=4, jobs=120)
    sim = simulate(workload, build_policy("drf", engine="fast"))
    replay = to_sim_result(_replayed(sim))
    ours, theirs = compute_metrics(replay), compute_metrics(sim)
    assert ours.jain == pytest.approx(theirs.jain)
    assert ours.fairness_error == pytest.approx(theirs.fairness_error)
    assert ours.time_to_fair_share == theirs.time_to_fair_share and math.isfinite(ours.time_to_fair_share)
    assert [a.wait_p50 for a in ours.accounts] == pytest.approx([a.wait_p50 for a in theirs.accounts])
    assert ours.utilisation == pytest.approx(theirs.utilisation)
    assert [a.rho for a in ours.accounts] == pytest.approx([a.rho for a in theirs.accounts])
    assert ours.rho_max == pytest.approx(theirs.rho_max) and ours.rho_max >= 1.0
    assert ours.writes is not None and ours.writes.total == 4


@pytest.mark.parametrize("arm", list(ARMS))
def test_every_arm_is_predicted_over_the_replays_span(arm: str) -> None:
    workload = build_scenario("gpu-newcomer", 1, nodes=4, jobs=40)
    compression = 10 if ARMS[arm].reclaim else 60
    result = replace(_replayed(simulate(workload, build_policy("drf", engine="fast")), compression), arm=arm)
    daemon = ARMS[arm].daemon
    config = (
        None
        if daemon is None
        else parse_config_text(yaml.safe_dump(build_daemon_config(ARMS[arm], compression, "/s", {}, "/t.txt")), "c")
    )
    predicted = predict(result, config)
    assert predicted.policy == f"sim:{arm}"
    assert predicted.sample_time.max() <= result.sample_time[-1]
    # Each job held its resources a wall second longer than it ran: a trace minute at 60x (10 at 10x).
    assert float((predicted.end - predicted.start).min()) >= min(j.duration for j in workload.jobs)
    assert not math.isnan(compute_metrics(predicted).jain)


@pytest.mark.parametrize("arm", ["slurm", "drf"])
def test_the_prediction_runs_on_the_cluster_the_replay_ran_on(arm: str) -> None:
    """A trace whose header says 9 nodes, replayed on 4: the prediction is of the 4, under the replay's
    Slurm (no urgent jobs), and its cycles stop where the replay's samples do."""
    workload = build_scenario("gpu-newcomer", 1, nodes=4, jobs=80)
    result = replace(_replayed(simulate(workload, build_policy("drf", engine="fast"))), arm=arm)
    on_trace = replace(result, workload=replace(result.workload, node_count=9))
    config = Config() if arm == "drf" else None
    predicted = predict(on_trace, config)
    assert predicted.capacity == result.capacity == (4 * 64, 4 * 512_000, 4 * 8)
    assert predicted.workload.node_count == 4
    assert predicted.plans == len(predicted.sample_time)
    if arm == "drf":
        assert predicted.writes is not None and len(predicted.writes) == len(predicted.sample_time)
    # Cut short: a replay stopped at a third of its span has a prediction of a third.
    span = result.sample_time[len(result.sample_time) // 3]
    short = replace(result, sample_time=result.sample_time[: len(result.sample_time) // 3 + 1])
    cut = predict(short, config)
    assert cut.sample_time.max() <= span and cut.plans == len(cut.sample_time) < predicted.plans


def test_on_cluster_describes_the_replays_nodes_and_names_mixed_shapes() -> None:
    workload = _workload(_job("1", "a"))
    same = [node(f"n{i}", cpu=64, mem=512_000, gpu=8) for i in range(4)]
    described, note = on_cluster(workload, [*same, node("down", state="down", cpu=8, mem=8, gpu=0)])
    assert (described.node_count, described.node_type, note) == (4, NodeType(64, 512_000, 8), None)
    described, note = on_cluster(workload, NODES)
    assert described.node_count == 2 and note is not None and "2 shapes" in note


def series(result: SimResult, used: list[int], pending: list[int]) -> SimResult:
    """`result` with one sample a minute: cluster use (CPUs of 256) and the other account's pending
    jobs as given, and one more sample like the last."""
    used, pending = [*used, used[-1]], [*pending, pending[-1]]
    count = len(used)
    return replace(
        result,
        capacity=(256, 1000, 8),
        sample_time=np.arange(count, dtype=np.float64) * 60.0,
        sample_used=np.array([[u, 0, 0] for u in used], dtype=np.int64),
        sample_pending=np.array([[p, 0] for p in pending], dtype=np.int64),
        sample_share=np.zeros((count, 2)),
    )


@pytest.mark.parametrize(
    ("used", "pending", "full"),
    [
        # Full for ten minutes before, others waiting: joined a full cluster.
        ([250] * 12, [5] * 12, True),
        # An idle cluster where one job pended for one sample: not full.
        ([10] * 11 + [10], [0] * 10 + [1, 0], False),
        ([10] * 10 + [250, 250], [0] * 10 + [1, 1], False),
        # Full only at the last sample before the submission: not for a stretch.
        ([100] * 10 + [100, 250], [3] * 12, False),
        # Full, but nobody else waiting: the newcomer takes what is free.
        ([250] * 12, [0] * 12, False),
        # Full at every sample but one in the stretch: full on average.
        ([250] * 5 + [150] + [250] * 6, [5] * 12, True),
        # Half full for half the stretch: on average below 75%.
        ([250] * 6 + [128] * 6, [5] * 12, False),
        # Measured live (gpu-newcomer, drf-placed, 30 s samples): memory at 80% but for a dip to 71%.
        ([205] * 6 + [182] * 4 + [205] * 2, [3] * 12, True),
        # Measured on the live sandbox before gpu-newcomer's vision joined: memory 80-91% allocated,
        # memory-heavy jobs pending throughout (placement leaves fragments no pending job fits).
        ([233] * 7 + [220, 218, 205, 205, 233], [2, 2, 3, 6, 8, 10, 8, 7, 6, 6, 6, 7], True),
    ],
)
def test_joining_a_full_cluster_takes_a_stretch_of_full_allocation_on_average(
    used: list[int], pending: list[int], full: bool
) -> None:
    # b first submits at 690 s: the samples before it are those at 0 to 660 s.
    jobs = (_job("a1", "a", 0.0, 60_000.0, cpu=1), _job("b1", "b", 690.0, 60.0, cpu=1))
    result = simulate(replace(_workload(*jobs), node_count=4), build_policy("drf", engine="fast"))
    shaped = series(result, used, pending)
    fair = np.full((len(used) + 1, 2), 0.5)
    actual = np.full((len(used) + 1, 2), 0.5)
    times = times_to_fair_share(shaped, fair, actual)
    assert math.isnan(times[0])  # account a started on an empty cluster
    assert math.isnan(times[1]) is not full
    if full:
        assert times[1] == 30.0  # the sample at 720 s, 30 s after its first submission


def test_the_result_file_reads_back_to_the_same_figures() -> None:
    workload = build_scenario("gpu-newcomer", 1, nodes=4, jobs=60)
    result = _replayed(simulate(workload, build_policy("drf", engine="fast")))
    metrics = render_metrics(compute_metrics(to_sim_result(result)))
    data = orjson.loads(orjson.dumps(render_result(result, metrics, None)))
    back = parse_result(data, "r.json")
    assert render_metrics(compute_metrics(to_sim_result(back))) == metrics
    assert back.rpcs_total == 34 and back.rpcs_per_cycle() == pytest.approx(34 / 3)
    assert back.node_lists == () and "node_list" not in data["jobs"][0]  # a file of before has none


def test_the_result_file_keeps_the_nodes_each_job_ran_on() -> None:
    workload = build_scenario("gpu-newcomer", 1, nodes=4, jobs=60)
    result = _replayed(simulate(workload, build_policy("drf", engine="fast")))
    nodes = tuple("" if i % 7 == 0 else f"drfnode[{i % 4 + 1}-4]" for i in range(len(workload.jobs)))
    data = orjson.loads(orjson.dumps(render_result(replace(result, node_lists=nodes), {}, None)))
    assert [j["node_list"] for j in data["jobs"]] == list(nodes)
    assert parse_result(data, "r.json").node_lists == nodes


@pytest.mark.parametrize(
    ("data", "what"),
    [({"format": "x"}, "not a replay result"), ({"format": "slurm-drf-replay/1"}, "'workload'"), ([], "not a replay")],
)
def test_a_file_that_is_no_result_is_one_line_naming_it(data: object, what: str) -> None:
    with pytest.raises(ReplayInputError) as caught:
        parse_result(data, "bad.json")
    assert str(caught.value).startswith("bad.json: ") and what in str(caught.value)


def test_water_filling_caps_demand_and_shares_the_rest_by_weight() -> None:
    weight = np.array([1.0, 1.0, 2.0])
    assert water_fill(1.0, np.array([0.1, 1.0, 1.0]), weight) == pytest.approx([0.1, 0.3, 0.6])
    assert water_fill(1.0, np.array([0.1, 0.2, 0.3]), weight) == pytest.approx([0.1, 0.2, 0.3])
    assert water_fill(1.0, np.array([0.0, 1.0, 1.0]), weight) == pytest.approx([0.0, 1 / 3, 2 / 3])


def test_fair_shares_follow_the_tree() -> None:
    # physics (theory, lab) and cs (ml), all backlogged: 1/2 to each parent, physics's half split in two.
    tree = AccountTree(MappingProxyType({"theory": "physics", "lab": "physics", "ml": "cs"}), MappingProxyType({}))
    jobs = [_job(f"{a}-{i}", a, cpu=64, mem=1000) for a in ("theory", "lab", "ml") for i in range(4)]
    workload = replace_nodes(_workload(*jobs, tree=tree), 4)
    sim = simulate(workload, build_policy("hdrf", engine="fast"))
    fair = fair_shares(sim)
    index = {a: i for i, a in enumerate(sim.accounts)}
    assert fair[0, index["ml"]] == pytest.approx(0.5)
    assert fair[0, index["theory"]] == pytest.approx(0.25) and fair[0, index["lab"]] == pytest.approx(0.25)


def replace_nodes(workload: Workload, nodes: int) -> Workload:
    return replace(workload, node_count=nodes)


def test_time_to_fair_share_counts_only_accounts_that_join_a_full_cluster() -> None:
    workload = build_scenario("gpu-newcomer", 1, nodes=4, jobs=120)
    sim = simulate(workload, build_policy("drf", engine="fast"))
    metrics = compute_metrics(sim)
    by = {a.account: a.time_to_fair_share for a in metrics.accounts}
    assert math.isnan(by["climate"]) and math.isnan(by["genomics"])
    assert 0 <= by["vision"] < 3600
    assert metrics.time_to_fair_share == by["vision"]
    # Never reaching it is inf, not nan: a target of more than it can hold.
    actual = sim.sample_share * np.array(sim.weights)
    never = times_to_fair_share(sim, np.full_like(actual, 2.0), actual)
    assert math.isinf(never[sim.accounts.index("vision")])


def test_cut_result_keeps_the_samples_and_clips_the_jobs() -> None:
    sim = simulate(build_scenario("gpu-newcomer", 1, nodes=4, jobs=60), build_policy("drf", engine="fast"))
    cut = cut_result(sim, 3600.0)
    assert cut.sample_time.max() <= 3600.0 and float(cut.end.max()) <= 3600.0
    assert len(cut.sample_share) == len(cut.sample_time)


def test_report_compares_saved_results_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workload = build_scenario("gpu-newcomer", 1, nodes=4, jobs=40)
    files = []
    for arm in ("slurm", "drf"):
        result = replace(_replayed(simulate(workload, build_policy("drf", engine="fast"))), arm=arm)
        path = tmp_path / f"{arm}.json"
        data = render_result(result, render_metrics(compute_metrics(to_sim_result(result))), None)
        path.write_bytes(orjson.dumps(data))
        files.append(str(path))
    assert main(["replay", "--report", *files]) == 0
    out = capsys.readouterr().out
    assert "sim:slurm" in out and "sim:drf" in out and "fairness error" in out
    assert "slurm: measured against the simulator's prediction" in out
    # The replay's interval is its samples', not a policy's.
    assert "sample interval 1m" in out and "policy interval" not in out
    assert main(["replay", "--report", *files, "--format", "json", "--no-predict"]) == 0
    shown = orjson.loads(capsys.readouterr().out)
    assert [p["policy"] for p in shown["policies"]] == ["slurm", "drf"]


@pytest.mark.parametrize(
    ("argv", "what"),
    [
        (["--seed", "-1"], "--seed"),
        (["--compress", "0"], "--compress"),
        (["--compress", "inf"], "--compress"),
        (["--sample-interval", "nan"], "--sample-interval"),
        (["--users", "everyone"], "--users"),
        (["--users", "pool=a;b"], "'a;b' is not a user name"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(
    argv: list[str], what: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["replay", *argv])
    assert caught.value.code == 2
    assert what in capsys.readouterr().err


def test_a_report_of_a_file_that_is_not_json_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    assert main(["replay", "--report", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.json" in err[0]


def test_the_replay_page_calls_its_interval_the_sample_interval() -> None:
    workload = build_scenario("gpu-newcomer", 1, nodes=4, jobs=40)
    result = _replayed(simulate(workload, build_policy("drf", engine="fast")))
    page = render_replay_html(build_comparison([result]), [result], b"")
    assert "sample interval 1m" in page and "policy interval" not in page


def test_finish_time_fairness_is_time_shared_over_time_on_the_accounts_slice() -> None:
    # Two equal accounts on two nodes of 64 CPUs: each one's slice is one node's worth.
    jobs = [_job("x-1", "x", cpu=64), _job("y-1", "y", cpu=64), _job("x-2", "x", submit=1, cpu=64)]
    workload = _workload(*jobs, _job("y-big", "y", submit=1200, cpu=64, nodes=2))
    sim = simulate(workload, build_policy("drf", engine="fast"))
    rho = finish_time_fairness(sim)
    # x-1 and y-1 run at once (1); x-2 waits until x-1 ends (1199 s in the cluster for 600 s of run time);
    # y-big holds the whole cluster, twice its slice, and runs at once: half the time it takes on its slice.
    assert rho.tolist() == pytest.approx([1.0, 1.0, 1199 / 600, 0.5])
    metrics = compute_metrics(sim)
    by = {a.account: a.rho for a in metrics.accounts}
    assert by == pytest.approx({"x": (1 + 1199 / 600) / 2, "y": 0.75})
    assert metrics.rho_max == pytest.approx(by["x"])
    rendered = render_metrics(metrics)
    assert rendered["finish_time_fairness_max"] == round(by["x"], 4)
    assert rendered["accounts"][0]["finish_time_fairness"] == round(by["x"], 4)


def test_finish_time_fairness_slices_follow_the_weights() -> None:
    # x weighs 3, y 1: x's slice is 3/4 of the cluster, y's 1/4. A job of half the cluster runs on x's slice
    # as fast as here; on y's it would take twice as long, so y, served at once, is at 1/2.
    weights = {"x": Fraction(3), "y": Fraction(1)}
    workload = _workload(_job("x-1", "x", cpu=64), _job("y-1", "y", cpu=64), weights=weights)
    rho = finish_time_fairness(simulate(workload, build_policy("drf", engine="fast")))
    assert rho.tolist() == pytest.approx([1.0, 0.5])
