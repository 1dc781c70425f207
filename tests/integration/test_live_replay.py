"""`slurm-drf replay` end to end on the sandbox: two arms, an interruption, and its refusals.

The replay tier (`scripts/test` runs it on its own, `-m replay`): every
arm runs on a just-created sandbox of four nodes (one slurmd each) with the
slurm.conf priority lines `slurm-drf replay --slurm-conf` gives; the other
tests use the last one (or make one, run alone). When the module ends the sandbox is created afresh
with its defaults, for whatever runs next.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from slurm_drf.config.durations import parse_duration
from slurm_drf.model.types import Node, freeze_tres
from slurm_drf.replay.arms import build_billing_weights, build_slurm_lines
from slurm_drf.replay.result import parse_result, to_sim_result
from slurm_drf.replay.trace import JOB_NAME_PREFIX
from tests.paths import SANDBOX_SCRIPT
from tests.polling import wait_for

pytestmark = [pytest.mark.live, pytest.mark.replay]

SCRIPT = SANDBOX_SCRIPT
NODES = 4
COMPRESS = "60"
# The scenario built to show the effect: climate (CPU-heavy) and genomics
# (memory-heavy) keep four nodes full; vision (GPU-heavy) joins at 46 trace
# minutes. 120 jobs, the first 100 trace minutes: about 1 min 45 s of wall time per arm.
SCENARIO = ["--scenario", "gpu-newcomer", "--jobs", "120", "--seed", "1", "--compress", COMPRESS]
STOP_AFTER = "100m"
# Every 30 trace seconds: a time to fair share shorter than the default 2-minute step shows.
SAMPLE = ["--sample-interval", "0.5"]
# The sandbox's Unix users (scripts/slurm-sandbox): each account's three trace users are submitted as these.
POOL = ("drfalice", "drfbob", "drfcarol")
USERS = ["--users", "pool=" + ",".join(POOL)]
FORCED = ["--create-accounts", "--force"]
ARM_TIMEOUT_S = 600
NEWCOMER = "vision"


# What ReplaySandbox sets on top of the environment: the sandbox's shape, not which sandbox it is.
SHAPE_VARIABLES = ("SLURM_SANDBOX_NODES", "SLURM_SANDBOX_PRIORITY_FILE", "SLURM_SANDBOX_PARTITION_OPTIONS")


def _sandbox(*args: str, env: dict[str, str]) -> None:
    proc = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=900, check=False)
    if proc.returncode != 0:
        pytest.fail(f"scripts/slurm-sandbox {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}", pytrace=False)


class ReplaySandbox:
    """The sandbox with four nodes and the replay's priority lines; `fresh()` before each arm."""

    def __init__(self, directory: Path) -> None:
        priority = directory / "priority.conf"
        priority.write_text("\n".join(build_slurm_lines(float(COMPRESS))) + "\n", encoding="utf-8")
        # The sandbox's nodes (scripts/slurm-sandbox): 64 CPUs, 512,000 MiB, 8 GPUs each.
        node = Node("drfnode1", ("gpu",), "idle", freeze_tres({"cpu": 64, "mem": 512_000, "gres/gpu": 8}))
        self.env = dict(os.environ)
        self.env.update(
            SLURM_SANDBOX_NODES=str(NODES),
            SLURM_SANDBOX_PRIORITY_FILE=str(priority),
            SLURM_SANDBOX_PARTITION_OPTIONS=f"TRESBillingWeights={build_billing_weights([node])}",
        )
        self.directory = directory
        self.made = False
        self.placement = ""

    def ready(self) -> None:
        """The four-node sandbox, made now unless an earlier test of the module made it."""
        if not self.made:
            self.fresh()

    def fresh(self) -> None:
        _sandbox("fresh", env=self.env)
        # `env` prints `export NAME=<shell-quoted value>` lines: SLURM_CONF and the job_submit script's table.
        out = subprocess.run([str(SCRIPT), "env"], capture_output=True, text=True, check=True).stdout
        exported = dict(word.split("=", 1) for word in shlex.split(out) if "=" in word)
        os.environ["SLURM_CONF"] = exported["SLURM_CONF"]
        self.env["SLURM_CONF"] = os.environ["SLURM_CONF"]
        self.placement = exported["SLURM_SANDBOX_PLACEMENT"]
        self.made = True

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env, timeout=timeout, check=False)

    def hostnames(self, host_list: str) -> list[str]:
        """The nodes of a Slurm host list (drfnode[1-2]), as Slurm expands it."""
        proc = self.run("scontrol", "show", "hostnames", host_list)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()

    def replay(self, *args: str, timeout: float = ARM_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return self.run(sys.executable, "-m", "slurm_drf.cli", "replay", *args, timeout=timeout)

    def queue(self) -> dict[str, tuple[str, str]]:
        """Job id -> (name, user) of every job squeue shows."""
        out = self.run("squeue", "-h", "-o", "%i %u %j").stdout
        rows = (line.split(" ", 2) for line in out.splitlines() if line.strip())
        return {job_id: (name, user) for job_id, user, name in rows}

    def jobs(self) -> dict[str, str]:
        """Job id -> name of every job squeue shows."""
        return {job_id: name for job_id, (name, _) in self.queue().items()}

    def replay_jobs(self) -> list[str]:
        return [i for i, name in self.jobs().items() if name.startswith(JOB_NAME_PREFIX)]

    def submitters(self, job_ids: list[str]) -> dict[str, str]:
        """Job id -> the user sacct recorded as its submitter."""
        out = self.run("sacct", "-X", "-n", "-P", "--allusers", "-j", ",".join(job_ids), "-o", "JobIDRaw,User").stdout
        return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


@pytest.fixture(scope="module")
def replay_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplaySandbox]:
    if os.geteuid() != 0:
        if os.environ.get("SLURM_DRF_REQUIRE_SLURM") == "1":
            pytest.fail("the replay tier needs root (the sandbox)", pytrace=False)
        pytest.skip("the replay tier needs root (the sandbox)")
    sandbox = ReplaySandbox(tmp_path_factory.mktemp("replay"))
    try:
        yield sandbox
    finally:
        # The same sandbox (SLURM_SANDBOX_DIR and its ports stay), with its default node and priorities.
        env = {k: v for k, v in os.environ.items() if k not in SHAPE_VARIABLES}
        _sandbox("fresh", env=env)


def _arm(sandbox: ReplaySandbox, arm: str) -> dict[str, Any]:
    sandbox.fresh()
    output = sandbox.directory / f"{arm}.json"
    proc = sandbox.replay(
        "--arm",
        arm,
        *SCENARIO,
        "--stop-after",
        STOP_AFTER,
        *USERS,
        "--create-accounts",
        "-o",
        str(output),
        "--placement-table",
        sandbox.placement,
        *SAMPLE,
    )
    assert proc.returncode == 0, proc.stderr
    # Every job it submitted has ended or was cancelled: squeue shows none of them.
    assert sandbox.replay_jobs() == []
    data: dict[str, Any] = json.loads(output.read_text(encoding="utf-8"))
    # Each job was submitted as the pool user its trace user maps to, and Slurm recorded it so.
    jobs = data["jobs"]
    assert sandbox.submitters([j["job_id"] for j in jobs]) == {j["job_id"]: j["submitted_as"] for j in jobs}
    return data


# How many times an arm runs, at most, for the newcomer to join a full cluster (below).
ARM_ATTEMPTS = 3


def _newcomer_joined_full(data: dict[str, Any]) -> bool:
    """Whether the run met the scenario's condition: the cluster full, and the others waiting, before the
    newcomer came (sim.run_metrics.joined_full; its time to fair share is null when not)."""
    newcomer = next(a for a in data["metrics"]["accounts"] if a["account"] == NEWCOMER)
    return newcomer["time_to_fair_share_s"] is not None


def _arm_joined_full(sandbox: ReplaySandbox, arm: str) -> dict[str, Any]:
    """One arm, run again (at most ARM_ATTEMPTS in all) when the newcomer did not join a full cluster.

    The other two accounts' complementary jobs keep only a few jobs waiting (3-10 in the ten minutes
    before vision joins, measured): a run whose controller was slow to start or whose submissions came
    late can find the queue of the others empty at a sample, and then the run does not pose the question
    the comparison asks (the newcomer's time to fair share is not measured). That is the condition of
    the experiment, not a result of the arm; every run, the failed ones too, is checked in full."""
    data = _arm(sandbox, arm)
    for attempt in range(1, ARM_ATTEMPTS):
        if _newcomer_joined_full(data):
            break
        print(f"replay: {arm} run {attempt}: {NEWCOMER} did not join a full cluster; running the arm again")
        data = _arm(sandbox, arm)
    return data


@pytest.fixture(scope="module")
def arms(replay_sandbox: ReplaySandbox) -> dict[str, dict[str, Any]]:
    """The slurm, drf and drf-placed arms of the scenario, one after another, each on a just-created sandbox."""
    return {arm: _arm_joined_full(replay_sandbox, arm) for arm in ("slurm", "drf", "drf-placed")}


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def test_two_arms_measure_every_figure_and_leave_nothing_behind(
    arms: dict[str, dict[str, Any]], replay_sandbox: ReplaySandbox
) -> None:
    results = arms
    for arm, data in results.items():
        assert data["arm"] == arm and data["compression"] == 60.0
        jobs = data["jobs"]
        # The first 100 trace minutes of the trace's submissions, all of them submitted and accounted for.
        assert len(jobs) >= 60 and len({j["job_id"] for j in jobs}) == len(jobs)
        assert sum(1 for j in jobs if j["start_s"] is not None) >= len(jobs) // 2
        assert len(data["samples"]["time_s"]) >= 40
        metrics = data["metrics"]
        for key in ("jain", "fairness_error", "time_to_fair_share_s", "mean_wait_s"):
            assert _finite(metrics[key]), (arm, key, metrics[key])
        assert all(_finite(v) for v in metrics["utilisation_while_waiting"].values())
        for account in metrics["accounts"]:
            assert _finite(account["wait_p50_s"]) and _finite(account["wait_p95_s"]), (arm, account)
        assert data["rpcs_total"] > 0 and data["rpcs"].get("REQUEST_SUBMIT_BATCH_JOB", 0) == len(jobs)
        assert any(line.startswith("PriorityFlags") and "MAX_TRES" in line for line in data["slurm_settings"])
        assert data["predicted"] is not None and _finite(data["predicted"]["jain"])
    # The jobs went in as the sandbox's users, every one of them, each account's trace users apart.
    for data in results.values():
        assert data["users"] == "pool" and {j["submitted_as"] for j in data["jobs"]} == set(POOL)
        per_user = {(j["account"], j["user"]): j["submitted_as"] for j in data["jobs"]}
        for account in data["accounts"]:
            mine = sorted((u, s) for (a, u), s in per_user.items() if a == account)
            assert len({s for _, s in mine}) == len(mine), (account, mine)
    # Only the drf arms ran the daemon, and they wrote.
    assert results["slurm"]["writes_per_cycle"] is None and results["slurm"]["daemon_config"] is None
    for arm in ("drf", "drf-placed"):
        writes = results[arm]["writes_per_cycle"]
        assert writes is not None and len(writes) >= 30 and sum(writes) > 0
        assert results[arm]["daemon_config"]["mode"] == "nice"
    assert results["drf"]["daemon_config"]["placement"] is None
    assert results["drf-placed"]["daemon_config"]["placement"] is not None
    # The newcomer's time to fair share, in every arm (the figure the comparison is about).
    for data in results.values():
        newcomer = next(a for a in data["metrics"]["accounts"] if a["account"] == NEWCOMER)
        assert _finite(newcomer["time_to_fair_share_s"])
    # What one run can show is the mechanism, not the effect: which job Slurm starts. How much the
    # daemon changes the waits is a figure over runs (docs/evaluation.md, "On a real Slurm", from
    # scripts/replay-evaluation): the mean wait was lower with the daemon in each of 5 runs there, yet
    # one CI run measured 589 s with it against Slurm alone's 574 s, for by the time the newcomer comes
    # the arms' clusters differ (another: the newcomer's time to fair share 57 s under Slurm alone,
    # 232 s in drf-placed, whose first job waited for room its second, smaller one found at once).
    #
    # Placement (the job_submit script, docs/rule.md §8) gives each of the newcomer's jobs its place the
    # moment it is submitted, and the daemon keeps it each cycle; without placement the job has its
    # place from the daemon's next cycle (at most two intervals later: a cycle that read the queue just
    # before the job came writes without it). From then on no job of another account that was waiting
    # starts before it, more than one sample before, where the rule had the newcomer's first and Slurm
    # had room for it. The rule had it first while the newcomer's weighted dominant
    # share was below the other account's (at the two samples before the other started: the cycle that
    # ordered them saw it so); once the newcomer's running jobs hold more than that, the other
    # account's job is rightly ahead (CI's failure of one run: a climate job that started ahead of a
    # vision job is allowed then). Room: the other job needs at least as many CPUs, as much memory and
    # as many nodes, and on the nodes it started on the newcomer's running jobs left GPUs enough for it
    # (the newcomer alone asks for GPUs, and all of its jobs at once fit the cluster's, checked first;
    # a node's GPUs can still be taken by its own jobs).
    for arm in ("drf", "drf-placed"):
        data = results[arm]
        jobs = data["jobs"]
        assert all(j["gpu"] == 0 for j in jobs if j["account"] != NEWCOMER)
        assert sum(j["gpu"] for j in jobs) <= data["capacity"]["gres/gpu"]
        # sacct's NodeList, kept for this: a job that ran has one (a job that never started counts as
        # starting where the replay was cut, and has none).
        ran = [j for j in jobs if j["node_list"]]
        assert len(ran) >= len(jobs) // 2 and all(j["start_s"] is not None for j in ran)
        hosts = {j["node_list"]: replay_sandbox.hostnames(j["node_list"]) for j in ran}
        assert set().union(*hosts.values()) <= {f"drfnode{k}" for k in range(1, NODES + 1)}, hosts
        placed_after = 0.0 if arm == "drf-placed" else 2 * _cycle_trace_s(data)
        assert _started_ahead(data, NEWCOMER, hosts, placed_after) == [], arm


def _cycle_trace_s(data: dict[str, Any]) -> float:
    """The daemon's interval in trace seconds (its config's wall interval, compressed)."""
    return parse_duration(data["daemon_config"]["interval"]) * float(data["compression"])


def _started_ahead(
    data: dict[str, Any], account: str, hosts: dict[str, list[str]], placed_after: float
) -> list[tuple[str, str]]:
    """(the account's job, the other job) for each job of another account that was waiting when one of
    the account's jobs had its place (`placed_after` trace seconds after its submission), started more
    than one sample before it (or while it never started) though the account's share was below the
    other's at the two samples before, and started where the account's job had room: as many CPUs,
    as much memory and as many nodes, and GPUs enough on as many of those nodes as it needs, the
    account's jobs running then (start to end, both included, for sacct's times are whole seconds)
    counted against them. A job ran when it has nodes (`node_list`)."""
    jobs, sample = data["jobs"], data["interval_trace_s"]
    node_gpus = int(data["workload"]["node_tres"]["gres/gpu"])
    # Each account's weighted dominant share at each sample, as the replay's figures take it.
    measured = to_sim_result(parse_result(data, data["arm"]))
    times = measured.sample_time.tolist()
    shares = {a: measured.sample_share[:, k].tolist() for k, a in enumerate(measured.accounts)}
    ours = [j for j in jobs if j["account"] == account and j["node_list"]]

    def gpus_free(node: str, at: float) -> int:
        held = (int(j["gpu"]) for j in ours if j["start_s"] <= at <= j["end_s"] and node in hosts[j["node_list"]])
        return node_gpus - sum(held)

    def ordered_first(other: dict[str, Any]) -> bool:
        before = [k for k, t in enumerate(times) if t <= other["start_s"]][-2:]
        return bool(before) and all(shares[account][k] < shares[other["account"]][k] for k in before)

    found: list[tuple[str, str]] = []
    for mine in (j for j in jobs if j["account"] == account):
        submitted = mine["submit_s"] + placed_after
        started = mine["start_s"] if mine["node_list"] else math.inf
        for other in jobs:
            if (
                other["account"] != account
                and other["node_list"]
                and other["submit_s"] <= submitted
                and submitted < other["start_s"] < started - sample
                and all(other[key] >= mine[key] for key in ("cpu", "mem", "nodes"))
                and sum(gpus_free(n, other["start_s"]) >= mine["gpu"] for n in hosts[other["node_list"]])
                >= mine["nodes"]
                and ordered_first(other)
            ):
                found.append((mine["job_id"], other["job_id"]))
    return found


# SIGTERM to the process, as kill sends it; SIGINT to its whole process group, as a terminal's Ctrl-C
# does: an sbatch in flight then is in a session of its own, finishes, and its job is cancelled too.
@pytest.mark.parametrize(("signal_number", "group"), [(signal.SIGTERM, False), (signal.SIGINT, True)])
def test_a_signal_cancels_every_job_it_submitted_and_only_those(
    replay_sandbox: ReplaySandbox, signal_number: signal.Signals, group: bool
) -> None:
    replay_sandbox.ready()
    assert replay_sandbox.jobs() == {}
    # Somebody else's job: pending (held), so it stays whatever the replay does.
    theirs = replay_sandbox.run(
        "sbatch", "--parsable", "--hold", "-A", "gputeam", "--output=/dev/null", "--wrap", "sleep 600"
    ).stdout.strip()
    assert theirs.isdigit()
    proc = subprocess.Popen(
        [sys.executable, "-m", "slurm_drf.cli", "replay", "--arm", "slurm", *SCENARIO, *USERS, *FORCED],
        env=replay_sandbox.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=replay_sandbox.directory,
        start_new_session=True,
    )
    try:
        wait_for(lambda: len(replay_sandbox.replay_jobs()) >= 5, 120, "the replay to submit 5 jobs")
        # Submitted as the sandbox's users, not as root (who submitted theirs).
        queue = replay_sandbox.queue()
        assert {queue[i][1] for i in replay_sandbox.replay_jobs()} <= set(POOL) and queue[theirs][1] == "root"
        if group:
            os.killpg(proc.pid, signal_number)
        else:
            proc.send_signal(signal_number)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    assert f"interrupted by {signal_number.name}" in err and "no result written" in err
    assert replay_sandbox.replay_jobs() == []
    assert theirs in replay_sandbox.jobs()
    replay_sandbox.run("scancel", theirs)
    assert not (replay_sandbox.directory / "replay-slurm.json").exists()


def test_refusals_are_one_line_and_submit_nothing(replay_sandbox: ReplaySandbox) -> None:
    replay_sandbox.ready()
    assert replay_sandbox.jobs() == {}

    def refused(*args: str) -> str:
        proc = replay_sandbox.replay(*args, timeout=120)
        assert proc.returncode == 2, proc.stderr
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, proc.stderr
        assert replay_sandbox.replay_jobs() == []
        return lines[0]

    # Accounts Slurm does not know, without --create-accounts: named.
    line = refused("--scenario", "weighted", "--jobs", "30", "--compress", COMPRESS, "--users", "invoking")
    assert "alpha" in line and "beta" in line and "gamma" in line and "--create-accounts" in line
    # Trace users that are not Unix users here (the scenario's ACCOUNT-uN), without a mapping: named.
    line = refused(*SCENARIO, "--create-accounts")
    assert "not Unix users on this host" in line and "climate-u0" in line and "--users invoking" in line
    # A pool user this host does not know.
    line = refused(*SCENARIO, "--create-accounts", "--users", "pool=drfalice,drfnobody")
    assert "drfnobody" in line
    # A compression that makes jobs shorter than Slurm's scheduling interval: the job named.
    line = refused(*SCENARIO[:-1], "100000", "--create-accounts")
    assert "--compress" in line and "trace job" in line
    # A trace job larger than any node.
    trace = replay_sandbox.directory / "big.swf"
    trace.write_text("; MaxNodes: 4\n1 0 0 600 512 -1 -1 512 600 -1 1 1 1 -1 1 -1 -1 -1\n", encoding="utf-8")
    line = refused("--workload", str(trace), "--compress", COMPRESS, "--create-accounts")
    assert "trace job 1" in line and "node" in line
    # A busy cluster, without --force.
    theirs = replay_sandbox.run(
        "sbatch", "--parsable", "--hold", "-A", "gputeam", "--output=/dev/null", "--wrap", "sleep 600"
    ).stdout.strip()
    try:
        line = refused(*SCENARIO, "--create-accounts")
        assert "job(s) of its own" in line and "--force" in line
    finally:
        replay_sandbox.run("scancel", theirs)


# matplotlib's tab10, in the order of the accounts (climate, genomics, vision).
ACCOUNT_COLOURS = ((31, 119, 180), (255, 127, 14), (44, 160, 44))


def test_the_replay_page_shows_every_arm_in_a_browser(
    replay_sandbox: ReplaySandbox, arms: dict[str, dict[str, Any]]
) -> None:
    from tests.integration.test_live_observe import _chromium, decode_png

    chromium = _chromium()
    directory = replay_sandbox.directory
    page = directory / "replay.html"
    proc = replay_sandbox.replay(
        "--report", str(directory / "slurm.json"), str(directory / "drf.json"), "--html", str(page), timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "fairness error" in proc.stdout and "measured against the simulator's prediction" in proc.stdout
    text = page.read_text(encoding="utf-8")
    assert "On the live Slurm" in text and "sim:drf" in text and "<img" in text
    png = directory / "replay.png"
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            f"--user-data-dir={directory / 'profile'}",
            f"--screenshot={png}",
            "--window-size=1200,4000",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    image = decode_png(png.read_bytes()).astype(np.int16)
    # Each account's line is drawn (the plot panels of both arms and both predictions).
    for colour in ACCOUNT_COLOURS:
        close = (np.abs(image - np.array(colour, dtype=np.int16)).max(axis=2) <= 40).sum()
        assert close > 500, (colour, close)
