"""The reclaim step on a real slurmctld, continued (docs/rule.md §9, issue 39): exempt jobs, and slurmctld restarts.

The scene of test_live_reclaim.py: gputeam fills the node's 8 GPUs with two
4-GPU jobs; newteam, guaranteed 4 GPUs, waits with a 4-GPU job; `after` is
a minute (the least `check-config` takes).

- Exempt: one gputeam job runs in an exempt partition (cpu: the same node),
  the other in an exempt QOS (made for the test with sacctmgr, removed
  after). Cycle after cycle, `after` passed, they are the only possible
  victims and neither is touched; the step says why. With the partition no
  longer exempt, the one cycle that acts requeues that job although the QOS
  one is newer (newest first would have picked it), and the waiting job
  starts.
- A slurmctld restart between the cycle that requeued and the next ones:
  the victim is still in the queue (pending, Slurm's requeue delay kept),
  the waiting job runs, the later cycles move nothing, the record holds one
  reclaim and Slurm counts one restart; the victim runs again once let.
- A slurmctld restart inside the daemon's reclaim step: `scontrol requeue`
  (behind a gate on PATH) reaches a stopped slurmctld. The daemon records
  that requeue as failed, goes on failing its cycles until slurmctld is
  back, then one cycle requeues the victim: one requeue in Slurm's count and
  in the record, the waiting job runs, the daemon never stopped.

Each test takes about as long as `after` plus a few cycles (60-100 s).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.integration.live_helpers import Live, drf, queue, start_slurmctld, stop_slurmctld, write_config
from tests.integration.test_live_daemon import DRF, FAILURE, SUCCESS, Daemon
from tests.polling import wait_for

if TYPE_CHECKING:
    from tests.integration.conftest import SlurmSandbox

# Requeues go through scontrol whichever backend reads, and the reads these tests make are
# test_live_reclaim.py's, which the pyslurm tiers run: these run in each release's CLI tier.
pytestmark = pytest.mark.cli_tier

AFTER_S = 60
# `after` plus a few cycles of a loaded machine.
ACT_TIMEOUT_S = AFTER_S + 90
EXEMPT_QOS = "drfexempt"
GPU_JOB = ("--gres=gpu:4", "-c", "4", "--mem=16000")
WARNING_EXEMPT = (
    "reclaim: pool default: no running job there may be a victim: 2 of 2 are exempt (1 by their QOS, "
    "reclaim.exempt_qos; 1 by their partition, reclaim.exempt_partitions)"
)


@pytest.fixture
def live(slurm: SlurmSandbox, tmp_path: Path) -> Live:
    live = Live(slurm, tmp_path)
    live.require_quiet_queue()
    return live


@pytest.fixture
def exempt_qos(slurm: SlurmSandbox) -> Iterator[str]:
    """A QOS of the test's own, known to slurmctld; removed once the test's jobs are gone."""
    slurm.run("sacctmgr", "-i", "add", "qos", EXEMPT_QOS)
    try:
        wait_for(
            lambda: f"QOS={EXEMPT_QOS}(" in slurm.run("scontrol", "show", "assoc_mgr", "flags=qos").stdout,
            30,
            f"slurmctld to know QOS {EXEMPT_QOS}",
        )
        yield EXEMPT_QOS
    finally:
        slurm.cancel_submitted()
        slurm.run("sacctmgr", "-i", "delete", "qos", EXEMPT_QOS)


@pytest.fixture
def daemon(live: Live) -> Iterator[Callable[[Path, Path], Daemon]]:
    """Starts `slurm-drf daemon` with a directory first on its PATH; SIGKILL at the end if it still runs."""
    started: list[Daemon] = []

    def start(config: Path, path_prefix: Path) -> Daemon:
        env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "SLURM_DRF_CONFIG")}
        env["PATH"] = f"{path_prefix}{os.pathsep}{env.get('PATH', '')}"
        log_path = live.tmp_path / "daemon.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [*DRF, "daemon", "--config", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=live.tmp_path,
            )
        started.append(Daemon(process, log_path))
        return started[-1]

    yield start
    for process in (d.process for d in started):
        if process.poll() is None:
            process.kill()
            process.wait(30)


def _once(live: Live, config: Path) -> tuple[str, str]:
    run = drf("once", "--config", str(config), "--state-dir", str(live.state_dir))
    return run.stdout, run.stderr


def _reclaim_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("reclaim:")]


def _reclaims(live: Live, config: Path) -> list[dict[str, Any]]:
    run = drf("audit", "reclaims", "--config", str(config), "--state-dir", str(live.state_dir), "--format", "json")
    rows: list[dict[str, Any]] = json.loads(run.stdout)
    return rows


def _restarts(live: Live, job_id: str) -> int:
    """How many times Slurm started the job over (its requeues), from squeue's JSON."""
    job = live.slurm.job(job_id)
    assert job is not None, f"job {job_id} is no longer in the queue"
    count: int = live.slurm.number(job["restart_cnt"])
    return count


def _reclaim_config(live: Live, name: str, extra: dict[str, object] | None = None, **reclaim: object) -> Path:
    return write_config(
        live.tmp_path,
        name,
        state_dir=str(live.state_dir),
        accounts={"newteam": {"guarantee": {"gres/gpu": 4}}},
        reclaim={"pools": ["default"], "after": AFTER_S, "min_runtime": 0, **reclaim},
        **(extra or {}),
    )


def _requeue_once(live: Live, config: Path, submitted: float) -> str:
    """`once` until a cycle requeues (after `after`); that cycle's one reclaim line."""

    def acted() -> list[str] | None:
        lines = _reclaim_lines(_once(live, config)[0])
        return lines or None

    lines: list[str] = wait_for(acted, ACT_TIMEOUT_S, "a cycle to requeue a job for the waiting one", interval=2.0)
    assert time.time() - submitted >= AFTER_S
    (line,) = lines
    return line


def test_exempt_jobs_are_never_victims_even_when_they_are_the_only_ones(live: Live, exempt_qos: str) -> None:
    in_partition = live.submit("-A", "gputeam", "-p", "cpu", *GPU_JOB)
    live.wait_running([in_partition])
    in_qos = live.submit("-A", "gputeam", "-p", "gpu", f"--qos={exempt_qos}", *GPU_JOB)
    live.wait_running([in_qos])
    # Slurm keeps the submit time in whole seconds: at or after this one.
    submitted = math.floor(time.time())
    waiting = live.submit("-A", "newteam", "-p", "gpu", *GPU_JOB)
    both = _reclaim_config(live, "both.yaml", exempt_qos=[exempt_qos], exempt_partitions=["cpu"])
    try:
        # Cycle after cycle, also the two once `after` has passed: nothing moved, and the step says why.
        late: list[float] = []

        def spared() -> bool:
            out, err = _once(live, both)
            assert _reclaim_lines(out) == [], out
            assert WARNING_EXEMPT in err, err
            jobs = queue(live.slurm)
            assert (jobs[in_partition].state, jobs[in_qos].state, jobs[waiting].state) == (
                "RUNNING",
                "RUNNING",
                "PENDING",
            )
            if time.time() - submitted >= AFTER_S + 1:
                late.append(time.time())
            return len(late) >= 2

        wait_for(spared, ACT_TIMEOUT_S, "two cycles after `after` that move nothing", interval=2.0)
        assert _reclaims(live, both) == []

        # The partition no longer exempt: its job goes, though the QOS one is newer (newest first).
        qos_only = _reclaim_config(live, "qos.yaml", exempt_qos=[exempt_qos])
        line = _requeue_once(live, qos_only, submitted)
        assert line.startswith(f"reclaim: requeued job {in_partition} (gputeam, ")
        assert f"for job {waiting} (newteam, " in line
        live.wait_running([waiting])
        jobs = queue(live.slurm)
        assert jobs[in_qos].state == "RUNNING", "a job of an exempt QOS is never a victim"
        assert jobs[in_partition].state == "PENDING"
        assert [(r["job"], r["for_job"], r["outcome"]) for r in _reclaims(live, qos_only)] == [
            (in_partition, waiting, "requeued")
        ]
        assert (_restarts(live, in_partition), _restarts(live, in_qos), _restarts(live, waiting)) == (1, 0, 0)
    finally:
        live.cancel(in_partition, in_qos, waiting)


def _two_running(live: Live) -> tuple[str, str]:
    """gputeam's two 4-GPU jobs, the second started in a later second than the first (Slurm's start
    times are whole seconds; newest first is then which of them a reclaim takes)."""
    older = live.submit("-A", "gputeam", "-p", "gpu", *GPU_JOB)
    live.wait_running([older])
    job = live.slurm.job(older)
    assert job is not None
    started: float = live.slurm.number(job["start_time"])
    wait_for(lambda: time.time() >= started + 1, 5, f"a second after job {older} started", interval=0.05)
    newer = live.submit("-A", "gputeam", "-p", "gpu", *GPU_JOB)
    live.wait_running([newer])
    return older, newer


def test_a_slurmctld_restart_after_a_reclaim_loses_nothing_and_moves_nobody_twice(live: Live) -> None:
    older, newer = _two_running(live)
    submitted = math.floor(time.time())
    waiting = live.submit("-A", "newteam", "-p", "gpu", *GPU_JOB)
    config = _reclaim_config(live, "reclaim.yaml")
    try:
        line = _requeue_once(live, config, submitted)
        requeued_at = time.time()
        assert line.startswith(f"reclaim: requeued job {newer} (gputeam, ")
        assert f"for job {waiting} (newteam, " in line

        stop_slurmctld(live.slurm)
        start_slurmctld(live.slurm)

        # Nothing lost: the victim waits out Slurm's requeue delay, the others run.
        victim = live.slurm.job(newer)
        assert victim is not None, f"job {newer} is lost after the restart"
        assert (live.slurm.job_state(victim), victim["state_reason"]) == ("PENDING", "BeginTime")
        assert live.slurm.number(victim["eligible_time"]) > requeued_at
        live.wait_running([waiting])
        assert queue(live.slurm)[older].state == "RUNNING"

        # More cycles: nothing moves again.
        for _ in range(3):
            out, _err = _once(live, config)
            assert _reclaim_lines(out) == [], out
        jobs = queue(live.slurm)
        assert (jobs[older].state, jobs[newer].state, jobs[waiting].state) == ("RUNNING", "PENDING", "RUNNING")
        assert [(r["job"], r["for_job"], r["outcome"]) for r in _reclaims(live, config)] == [
            (newer, waiting, "requeued")
        ]
        assert (_restarts(live, older), _restarts(live, newer), _restarts(live, waiting)) == (0, 1, 0)

        # The victim runs again once there is room and its delay is lifted; a cycle leaves it be.
        live.cancel(older)
        live.slurm.run("scontrol", "update", f"JobId={newer}", "StartTime=now")
        live.wait_running([newer])
        out, _err = _once(live, config)
        assert _reclaim_lines(out) == [], out
        assert (_restarts(live, newer), len(_reclaims(live, config))) == (1, 1)
    finally:
        left = [job for job in (older, newer, waiting) if job in queue(live.slurm)]
        if left:
            live.cancel(*left)


def _gated_scontrol(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A directory with an `scontrol` whose `requeue` waits at a gate (and says so); anything else runs at once."""
    real = shutil.which("scontrol")
    assert real is not None
    gate, held = tmp_path / "gate", tmp_path / "held"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "scontrol"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"if [ \"$1\" = requeue ] && [ ! -e '{gate}' ]; then\n"
        f"    : > '{held}'\n"
        "    i=0\n"
        f"    while [ ! -e '{gate}' ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i + 1)); done\n"
        "fi\n"
        f"exec '{real}' \"$@\"\n",
        encoding="utf-8",
    )
    wrapper.chmod(0o755)
    return bin_dir, gate, held


def test_a_slurmctld_restart_inside_the_daemons_reclaim_step_moves_nobody_twice(
    live: Live, daemon: Callable[[Path, Path], Daemon]
) -> None:
    bin_dir, gate, held = _gated_scontrol(live.tmp_path)
    older, newer = _two_running(live)
    waiting = live.submit("-A", "newteam", "-p", "gpu", *GPU_JOB)
    # The gate is in scontrol: the CLI backend, whichever the tier runs; a cycle every 2 s.
    extra: dict[str, object] = {"interval": "2s", "log_level": "DEBUG", "backend": "cli", "slurm_timeout": "20s"}
    config = _reclaim_config(live, "daemon.yaml", extra)
    drf_daemon = daemon(config, bin_dir)
    restarted = False
    try:
        drf_daemon.wait_cycles(1)
        # The cycle that acts is inside its reclaim step: it saw the victim running and is about to requeue it.
        wait_for(held.exists, ACT_TIMEOUT_S, "the daemon to requeue a job", interval=0.5)
        assert queue(live.slurm)[newer].state == "RUNNING"
        stop_slurmctld(live.slurm)
        restarted = True
        gate.touch()
        failed, _ = drf_daemon.wait_line(
            rf"^slurm-drf: INFO: reclaim: job {newer} \(gputeam\) failed for job {waiting} \(newteam\): ",
            "the requeue to fail while slurmctld is down",
            timeout=90,
        )
        # The next cycle cannot read Slurm; the daemon goes on.
        drf_daemon.wait_line(FAILURE, "a cycle to fail while slurmctld is down", after=failed + 1, timeout=90)
        start_slurmctld(live.slurm)
        restarted = False
        done, _ = drf_daemon.wait_line(
            rf"^slurm-drf: INFO: reclaim: job {newer} \(gputeam\) requeued for job {waiting} \(newteam\)$",
            "a cycle to requeue the victim once slurmctld is back",
            after=failed + 1,
            timeout=60,
        )
        live.wait_running([waiting])
        drf_daemon.wait_cycles(3, after=done + 1)

        lines = drf_daemon.lines()
        requeued = [line for line in lines if re.search(r"reclaim: job \S+ \(\S+\) requeued", line)]
        assert len(requeued) == 1, drf_daemon.log()
        assert drf_daemon.process.poll() is None
        jobs = queue(live.slurm)
        assert (jobs[older].state, jobs[newer].state, jobs[waiting].state) == ("RUNNING", "PENDING", "RUNNING")
        assert (_restarts(live, older), _restarts(live, newer), _restarts(live, waiting)) == (0, 1, 0)
        rows = sorted((r["job"], r["for_job"], r["outcome"]) for r in _reclaims(live, config))
        assert rows == [(newer, waiting, "failed"), (newer, waiting, "requeued")]
        assert any(SUCCESS.match(line) for line in lines[done:])
        drf_daemon.send(signal.SIGTERM)
        assert drf_daemon.wait_exit() == 0
    finally:
        gate.touch()
        if restarted:
            start_slurmctld(live.slurm)
        left = [job for job in (older, newer, waiting) if job in queue(live.slurm)]
        if left:
            live.cancel(*left)
