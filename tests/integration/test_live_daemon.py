"""`slurm-drf daemon` against the live sandbox: a real process, real signals, real slurmctld.

Each test starts the daemon as a subprocess with a config and state
directory in tmp_path (interval 2-3 s), then watches what it does from
outside: the nice values squeue shows, and the daemon's log (stderr, in a
file). Every wait polls a condition with a timeout.

The daemon orders every pending job in the sandbox and the tests reason
about shares, so they want the sandbox to themselves (an isolated sandbox
for parallel runs: docs/sandbox.md).
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.paths import SANDBOX_SCRIPT
from tests.polling import wait_for

if TYPE_CHECKING:
    from tests.integration.conftest import SlurmSandbox

SCRIPT = SANDBOX_SCRIPT
# The installed entry point's code, independent of PATH.
DRF = (sys.executable, "-c", "import sys; from slurm_drf.cli.main import main; sys.exit(main())")
INTERVAL = 2
# A cycle reads Slurm, plans and writes in well under this on the sandbox.
CYCLE_TIMEOUT = 30
QUIET_TIMEOUT = 60

SUCCESS = re.compile(r"^slurm-drf: INFO: cycle (\d+): \d+ accounts, ")
FAILURE = re.compile(r"^slurm-drf: WARNING: cycle (\d+) failed: ")
STARTED = re.compile(r"^slurm-drf: DEBUG: cycle (\d+): reading Slurm$")


# ---------------------------------------------------------------------------
# The daemon process
# ---------------------------------------------------------------------------


@dataclass
class Daemon:
    process: subprocess.Popen[bytes]
    log_path: Path

    def lines(self) -> list[str]:
        return self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()

    def log(self) -> str:
        return "\n".join(self.lines())

    def find(self, pattern: re.Pattern[str], after: int = 0) -> tuple[int, re.Match[str]] | None:
        """The first line from index `after` on that matches."""
        for index, line in enumerate(self.lines()[after:], start=after):
            match = pattern.match(line)
            if match:
                return index, match
        return None

    def wait_line(
        self, pattern: re.Pattern[str] | str, what: str, after: int = 0, timeout: float = CYCLE_TIMEOUT
    ) -> tuple[int, re.Match[str]]:
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern

        def found() -> tuple[int, re.Match[str]] | None:
            hit = self.find(compiled, after)
            if hit is None and self.process.poll() is not None:
                raise AssertionError(
                    f"the daemon exited {self.process.returncode} while waiting for {what}:\n{self.log()}"
                )
            return hit

        try:
            return wait_for(found, timeout, what)
        except AssertionError as error:
            raise AssertionError(f"{error}\ndaemon log:\n{self.log()}") from None

    def wait_cycles(self, count: int, after: int = 0) -> int:
        """Waits until `count` successful cycles are logged after line `after`; the index of the last."""
        index = after - 1
        for _ in range(count):
            index, _match = self.wait_line(SUCCESS, "a successful cycle", after=index + 1)
        return index

    def send(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait_exit(self, timeout: float = CYCLE_TIMEOUT) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the daemon did not exit within {timeout} s:\n{self.log()}") from None


StartDaemon = Callable[..., Daemon]


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[StartDaemon]:
    """Starts `slurm-drf daemon` subprocesses; any still running at the end get SIGTERM (then SIGKILL)."""
    started: list[Daemon] = []

    def start(config: Path, *extra: str, path_prefix: Path | None = None, name: str = "daemon") -> Daemon:
        env = dict(os.environ)
        env.pop("NOTIFY_SOCKET", None)
        if path_prefix is not None:
            env["PATH"] = f"{path_prefix}{os.pathsep}{env.get('PATH', '')}"
        log_path = tmp_path / f"{name}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [*DRF, "daemon", "--config", str(config), *extra],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=tmp_path,
            )
        daemon = Daemon(process, log_path)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        if daemon.process.poll() is None:
            daemon.process.terminate()
            try:
                daemon.process.wait(60)
            except subprocess.TimeoutExpired:
                daemon.process.kill()
                daemon.process.wait(10)


def write_config(
    path: Path,
    state_dir: Path,
    *,
    interval: float = INTERVAL,
    weights: dict[str, float] | None = None,
    text: str | None = None,
    backend: str | None = None,
) -> Path:
    lines = [f"interval: {interval:g}s", f"state_dir: {state_dir}", "log_level: DEBUG"]
    if backend:
        lines.append(f"backend: {backend}")
    if weights:
        lines.append("accounts:")
        lines += [f"  {account}: {{weight: {weight:g}}}" for account, weight in weights.items()]
    path.write_text(text if text is not None else "\n".join(lines) + "\n", encoding="utf-8")
    path.chmod(0o644)
    return path


# ---------------------------------------------------------------------------
# Jobs and what Slurm says about them
# ---------------------------------------------------------------------------


def require_quiet_queue(slurm: SlurmSandbox) -> None:
    """These tests reason about shares: nobody else's jobs may run meanwhile."""
    wait_for(
        lambda: not slurm.job_ids(),
        QUIET_TIMEOUT,
        "an empty queue (these tests need the sandbox to themselves; see docs/sandbox.md for an isolated one)",
    )


def running(slurm: SlurmSandbox, tmp_path: Path, account: str, cpus: int) -> str:
    """A job that runs now and holds `cpus` CPUs for account's running usage."""
    job_id = slurm.sbatch("-A", account, "-c", str(cpus), "--mem=1000", f"--chdir={tmp_path}")
    slurm.wait_for_state(job_id, "RUNNING", timeout=CYCLE_TIMEOUT)
    return job_id


def pending(slurm: SlurmSandbox, tmp_path: Path, account: str) -> str:
    """A job that stays pending (begin time an hour away) whatever the resources."""
    return slurm.sbatch("-A", account, "-c", "8", "--mem=1000", "--begin=now+3600", f"--chdir={tmp_path}")


def cancel(slurm: SlurmSandbox, job_id: str) -> None:
    slurm.run("scancel", job_id, check=False)
    wait_for(lambda: job_id not in slurm.job_ids(), CYCLE_TIMEOUT, f"job {job_id} to leave squeue")


def nice_values(slurm: SlurmSandbox, job_ids: Sequence[str]) -> dict[str, int]:
    out = slurm.run("squeue", "-h", "-j", ",".join(job_ids), "-o", "%i %y").stdout
    return {job: int(nice) for job, nice in (line.split() for line in out.splitlines())}


def order_is(slurm: SlurmSandbox, expected: Sequence[str]) -> Callable[[], bool]:
    """True once squeue's nice values put `expected` in this order (strictly), all written (negative)."""

    def check() -> bool:
        nice = nice_values(slurm, expected)
        written = [v for v in (nice.get(job) for job in expected) if v is not None and v < 0]
        if len(written) < len(expected):
            return False
        return all(a < b for a, b in itertools.pairwise(written))

    return check


# ---------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------


def test_shares_follow_the_workload_over_several_cycles(
    slurm: SlurmSandbox, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    require_quiet_queue(slurm)
    gpu_runner = running(slurm, tmp_path, "gputeam", 32)  # gputeam holds half the CPUs
    gpu_job, cpu_job = pending(slurm, tmp_path, "gputeam"), pending(slurm, tmp_path, "cputeam")
    state = tmp_path / "state"
    daemon = start_daemon(write_config(tmp_path / "config.yaml", state))

    wait_for(order_is(slurm, [cpu_job, gpu_job]), CYCLE_TIMEOUT, "cputeam (share 0) ahead of gputeam (1/2)")
    seen = daemon.wait_cycles(2)

    # The workload changes: gputeam's job ends, cputeam takes three quarters.
    cancel(slurm, gpu_runner)
    running(slurm, tmp_path, "cputeam", 48)
    wait_for(order_is(slurm, [gpu_job, cpu_job]), CYCLE_TIMEOUT, "gputeam (0) ahead of cputeam (3/4)")
    daemon.wait_cycles(2, after=seen + 1)

    assert daemon.process.poll() is None
    assert (state / "state.json").exists() and (state / "lock").exists()
    daemon.send(signal.SIGTERM)
    assert daemon.wait_exit() == 0, daemon.log()
    failures = [line for line in daemon.lines() if FAILURE.match(line) or "Traceback" in line]
    assert not failures, daemon.log()


def test_sighup_with_new_weights_changes_the_next_order(
    slurm: SlurmSandbox, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    require_quiet_queue(slurm)
    running(slurm, tmp_path, "gputeam", 32)  # 1/2
    running(slurm, tmp_path, "cputeam", 16)  # 1/4
    gpu_job, cpu_job = pending(slurm, tmp_path, "gputeam"), pending(slurm, tmp_path, "cputeam")
    config = write_config(tmp_path / "config.yaml", tmp_path / "state")
    daemon = start_daemon(config)
    wait_for(order_is(slurm, [cpu_job, gpu_job]), CYCLE_TIMEOUT, "cputeam (1/4) ahead of gputeam (1/2)")

    # Weight 4: gputeam's weighted share drops to 1/8, below cputeam's 1/4.
    write_config(config, tmp_path / "state", weights={"gputeam": 4})
    mark = len(daemon.lines())
    daemon.send(signal.SIGHUP)
    daemon.wait_line(r"^slurm-drf: INFO: reloaded .*: changed weights$", "the reload", after=mark)
    wait_for(order_is(slurm, [gpu_job, cpu_job]), CYCLE_TIMEOUT, "gputeam (1/8) ahead of cputeam (1/4)")

    # A broken file: logged, and the daemon carries on with weight 4.
    write_config(config, tmp_path / "state", text="interval: 2s\naccounts:\n  gputeam: {weight: -4}\n")
    mark = len(daemon.lines())
    daemon.send(signal.SIGHUP)
    failed, _ = daemon.wait_line(
        r"^slurm-drf: ERROR: reload failed \(1 problem\(s\)\): running on with the last "
        r"good configuration$",
        "the failed reload",
        after=mark,
    )
    assert any(
        re.match(rf"^slurm-drf: ERROR: {re.escape(str(config))}:3: accounts\.gputeam\.weight: ", line)
        for line in daemon.lines()[mark:failed]
    )
    daemon.wait_cycles(2, after=failed + 1)
    assert order_is(slurm, [gpu_job, cpu_job])()
    assert daemon.process.poll() is None


def test_sigterm_lets_the_running_cycle_finish_then_exits_0(
    slurm: SlurmSandbox, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    # squeue behind a gate: while the gate file is missing, it waits (and says so).
    real_squeue = shutil.which("squeue")
    assert real_squeue is not None
    gate, held = tmp_path / "gate", tmp_path / "held"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "squeue"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"if [ ! -e '{gate}' ]; then\n"
        f"    : > '{held}'\n"
        "    i=0\n"
        f"    while [ ! -e '{gate}' ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done\n"
        "fi\n"
        f"exec '{real_squeue}' \"$@\"\n",
        encoding="utf-8",
    )
    wrapper.chmod(0o755)
    gate.touch()
    job = pending(slurm, tmp_path, "memteam")
    # The gate is in squeue: the CLI backend, whichever backend the tier runs.
    config = write_config(tmp_path / "config.yaml", tmp_path / "state", backend="cli")
    daemon = start_daemon(config, path_prefix=bin_dir)
    daemon.wait_cycles(1)

    gate.unlink()
    wait_for(held.exists, CYCLE_TIMEOUT, "a cycle to be inside squeue")
    daemon.send(signal.SIGTERM)
    stopping, _ = daemon.wait_line(r"^slurm-drf: INFO: stopping after the current cycle$", "the stop")
    assert daemon.process.poll() is None  # still finishing the cycle
    gate.touch()
    assert daemon.wait_exit() == 0, daemon.log()

    lines = daemon.lines()
    held_cycle = max(int(m.group(1)) for m in map(STARTED.match, lines) if m)
    finished = [i for i, line in enumerate(lines) if line.startswith(f"slurm-drf: INFO: cycle {held_cycle}: ")]
    assert finished and finished[0] > stopping, daemon.log()  # completed after SIGTERM
    assert lines[-1] == f"slurm-drf: INFO: stopped on SIGTERM after {held_cycle} cycle(s)"
    assert nice_values(slurm, [job])[job] < 0  # and it did write


def test_the_daemon_outlives_a_slurmctld_restart(
    slurm: SlurmSandbox, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    interval = 3
    daemon = start_daemon(write_config(tmp_path / "config.yaml", tmp_path / "state", interval=interval))
    daemon.wait_cycles(1)

    pid_file = slurm.dir / "run" / "slurmctld.pid"
    pid = int(pid_file.read_text().strip())
    assert Path(f"/proc/{pid}/comm").read_text().startswith("slurmctld")
    cycle_started: dict[int, float] = {}
    try:
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), 60, "slurmctld to stop")
        # Two failures in a row: the daemon is backing off (two intervals) when Slurm returns.
        failed, _ = daemon.wait_line(FAILURE, "a failed cycle", timeout=60)
        failed, _ = daemon.wait_line(FAILURE, "a second failed cycle", after=failed + 1, timeout=60)
        assert daemon.lines()[failed].endswith(f"next attempt in {2 * interval} s (2 failed in a row)")
        assert daemon.process.poll() is None
    finally:
        up = subprocess.run([str(SCRIPT), "up"], capture_output=True, text=True, timeout=600, check=False)
    assert up.returncode == 0, up.stdout + up.stderr
    back = time.monotonic()

    # When did each cycle start? Seen by polling the log, so a success can be timed from its start.
    def resumed() -> tuple[int, re.Match[str]] | None:
        for match in map(STARTED.match, daemon.lines()):
            if match and int(match.group(1)) not in cycle_started:
                cycle_started[int(match.group(1))] = time.monotonic()
        return daemon.find(SUCCESS, after=failed + 1)

    hit = wait_for(resumed, 2 * interval + CYCLE_TIMEOUT, "a successful cycle after slurmctld came back", interval=0.05)
    assert isinstance(hit, tuple)
    number = int(hit[1].group(1))
    # The cycle that succeeded began within two intervals of slurmctld's return
    # (or before it, riding Slurm's own connection retries).
    started = cycle_started.get(number, back)
    assert started - back <= 2 * interval + 1, (started - back, daemon.log())
    assert daemon.process.poll() is None
    daemon.send(signal.SIGTERM)
    assert daemon.wait_exit() == 0


def test_a_second_daemon_on_the_same_state_directory_refuses(
    slurm: SlurmSandbox, tmp_path: Path, start_daemon: StartDaemon
) -> None:
    state = tmp_path / "state"
    first = start_daemon(write_config(tmp_path / "config.yaml", state))
    first.wait_cycles(1)
    second = start_daemon(
        write_config(tmp_path / "other.yaml", tmp_path / "elsewhere"), "--state-dir", str(state), name="second"
    )
    assert second.wait_exit() == 1
    assert second.lines()[-1] == (
        f"slurm-drf: state: {state}/lock: another slurm-drf (pid {first.process.pid}) already uses this state directory"
    )
    assert first.process.poll() is None
    first.wait_cycles(1, after=len(first.lines()))
    first.send(signal.SIGTERM)
    assert first.wait_exit() == 0
