"""Two head nodes whose write phase outlasts the lease's hold, against a real slurmctld (issue 40).

Two daemons at `interval: 1s` share a lease directory over 2,000 pending
jobs (max_writes_per_cycle's default): the holder's write phase takes
longer than its 1.5 s hold. Each daemon runs with a wrapper `scontrol`
first on its PATH that records, per head, when each of its write processes
(scontrol reading updates on stdin) started and ended and how many updates
it carried, and who held the lease then; the windows of the two heads
must never overlap, and each must start while its head holds the lease.

1. The holder's long write phase: it renews the lease between batches, so
   the other stays the standby and never writes meanwhile.
2. After a `reset` and a fresh start, the holder is stopped (SIGSTOP) in
   the middle of its write phase: the standby takes the lease when the
   hold ends and writes; the old holder, resumed, sends no write more and
   says so in one line.
3. `reset` after each part gives every job its own nice back: nothing was
   lost between the two writers.

Run it on a sandbox of its own (docs/sandbox.md): it submits 2,000 jobs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from slurm_drf.cycle.lease import LEASE_FILE, LEASE_INTERVALS
from slurm_drf.policy.ownership import is_label_nice
from tests.integration.live_helpers import DRF, Live, drf, drf_env, queue, write_config
from tests.polling import wait_for

if TYPE_CHECKING:
    from tests.integration.conftest import SlurmSandbox

INTERVAL = 1.0
JOBS = 2000
OWN = 5  # the nice the jobs' owners gave them
LATER = "--begin=now+1hour"  # pending, and never started during the test
TIMEOUT = 180.0

# scontrol with no arguments reads updates on stdin: the daemon's writes. The wrapper records when each ran,
# how many it carried and who held the lease as it started (lease.json is replaced whole: read whole); the
# real scontrol dies with the wrapper (setpriv --pdeathsig), so that a daemon that stops its scontrol at the
# end of its hold stops the writes, as it does without a wrapper.
WRAPPER = """#!/bin/sh
[ "$#" -eq 0 ] || exec {real} "$@"
input=$(mktemp -p {scratch})
cat > "$input"
count=$(grep -c '^update ' "$input")
lease=$(tr -d ' \n' < {lease} 2>/dev/null)
echo "{head} $$ start $(date +%s.%N) $count $lease" >> {log}
setpriv --pdeathsig KILL {real} < "$input"
status=$?
echo "{head} $$ end $(date +%s.%N) $count" >> {log}
rm -f "$input"
exit $status
"""


@pytest.fixture
def live(slurm: SlurmSandbox, tmp_path: Path) -> Live:
    return Live(slurm, tmp_path)


@dataclass(frozen=True)
class Window:
    head: str
    start: float
    end: float
    updates: int
    holder: str  # lease.json's holder as it started ("" none): host:pid:token of a daemon


def windows(log: Path) -> list[Window]:
    """Each write process of either head, in the order they started. One the daemon killed at the end of
    its hold has no end on record: it ended then, at most an interval (the hold less its margin) after
    the renewal that came before it, so it is taken to end an interval after it started."""
    if not log.exists():
        return []
    starts: dict[tuple[str, str], tuple[float, int, str]] = {}
    ends: dict[tuple[str, str], float] = {}
    for line in log.read_text().splitlines():
        head, pid, event, moment, updates, *lease = line.split()
        if event == "start":
            holder = str(json.loads(lease[0])["holder"]) if lease else ""
            starts[head, pid] = (float(moment), int(updates), holder)
        else:
            ends[head, pid] = float(moment)
    return sorted(
        (
            Window(head, start, ends.get((head, pid), start + INTERVAL), updates, holder)
            for (head, pid), (start, updates, holder) in starts.items()
        ),
        key=lambda window: window.start,
    )


class Head:
    """One head node's daemon: its own state directory, the shared lease directory, the recording scontrol."""

    def __init__(self, tmp_path: Path, name: str, lease_dir: Path, writes_log: Path) -> None:
        self.name = name
        self.config = write_config(
            tmp_path,
            f"{name}.yaml",
            state_dir=str(tmp_path / name),
            lease_dir=str(lease_dir),
            interval=f"{INTERVAL:g}s",
            backend="cli",
        )
        scontrol = subprocess.run(["sh", "-c", "command -v scontrol"], capture_output=True, text=True, check=True)
        bin_dir, scratch = tmp_path / f"bin-{name}", tmp_path / f"scratch-{name}"
        bin_dir.mkdir()
        scratch.mkdir()
        wrapper = bin_dir / "scontrol"
        wrapper.write_text(
            WRAPPER.format(
                real=scontrol.stdout.strip(), scratch=scratch, head=name, log=writes_log, lease=lease_dir / LEASE_FILE
            )
        )
        wrapper.chmod(0o755)
        self.env = {**drf_env(), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
        self.log_path = tmp_path / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.pids: set[str] = set()  # of every daemon this head ran

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*DRF, "daemon", "--config", str(self.config)], stdout=subprocess.DEVNULL, stderr=log, env=self.env
            )
        self.pids.add(str(self.process.pid))

    def signal(self, how: signal.Signals) -> None:
        assert self.process is not None and self.process.poll() is None, f"{self.name} is not running"
        self.process.send_signal(how)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=60)

    def lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines() if self.log_path.exists() else []

    def cycles(self) -> list[str]:
        """Its cycles that read, planned and wrote (a standby's attempts are not cycles)."""
        return [line for line in self.lines() if " pending jobs, " in line]


def submit_pending(live: Live, count: int) -> list[str]:
    """`count` pending jobs of three accounts, each with its owner's nice OWN, four sbatch at a time."""
    accounts = ("gputeam", "memteam", "cputeam")

    def one(k: int) -> str:
        return live.submit("-A", accounts[k % 3], "-p", "cpu", "-c1", "--mem=100", f"--nice={OWN}", LATER)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(one, range(count)))


def labelled(live: Live, jobs: list[str]) -> int:
    """How many of `jobs` hold a label of the daemon's (squeue: what Slurm holds, not what a wrapper saw)."""
    shown = queue(live.slurm)
    return sum(is_label_nice(shown[job].nice) for job in jobs)


def longest_run(every: list[Window]) -> list[Window]:
    """The longest write phase: consecutive write processes of one head, each started less than half an
    interval after the last ended (a cycle's read takes longer than that)."""
    runs: list[list[Window]] = []
    for window in every:
        if runs and runs[-1][-1].head == window.head and window.start - runs[-1][-1].end < INTERVAL / 2:
            runs[-1].append(window)
        else:
            runs.append([window])
    return max(runs, key=lambda run: run[-1].end - run[0].start)


def not_held(every: list[Window], heads: dict[str, Head]) -> list[Window]:
    """The write processes that started while their head did not hold the lease (the lease names a
    daemon by host:pid:token)."""

    def pid(holder: str) -> str:
        parts = holder.split(":")
        return parts[-2] if len(parts) >= 3 else ""

    return [w for w in every if pid(w.holder) not in heads[w.head].pids]


def overlaps(first: list[Window], second: list[Window]) -> list[tuple[Window, Window]]:
    return [(a, b) for a in first for b in second if a.start < b.end and b.start < a.end]


def start_both(first: Head, second: Head) -> None:
    """head1 first, until it holds the lease; then head2, which finds it taken."""
    taken = sum("holds the lease now" in line for line in first.lines())
    first.start()
    wait_for(
        lambda: sum("holds the lease now" in line for line in first.lines()) > taken, 60, "head1 to hold the lease"
    )
    second.start()


def reset_to_own(live: Live, head: Head, jobs: list[str]) -> None:
    """Both daemons stopped: `reset` gives every job its own nice back (nothing lost between the writers)."""
    drf("reset", "--config", str(head.config), timeout=300)
    shown = queue(live.slurm)
    assert {shown[job].nice for job in jobs} == {OWN}


def test_a_write_phase_longer_than_the_hold_has_one_writer_and_a_lost_lease_stops_it(
    live: Live, tmp_path: Path
) -> None:
    live.require_quiet_queue()
    jobs = submit_pending(live, JOBS)
    lease_dir = tmp_path / "shared"
    log = tmp_path / "writes.log"
    heads = {name: Head(tmp_path, name, lease_dir, log) for name in ("head1", "head2")}
    first, second = heads["head1"], heads["head2"]
    try:
        # 1. The holder writes 2,000 values, longer than its hold; the other is the standby meanwhile.
        start_both(first, second)
        wait_for(lambda: labelled(live, jobs) == JOBS, TIMEOUT, "every job to hold a label")
        every = windows(log)
        assert overlaps([w for w in every if w.head == "head1"], [w for w in every if w.head == "head2"]) == []
        assert not_held(every, heads) == []
        phase = longest_run(every)
        writer, other = heads[phase[0].head], heads["head2" if phase[0].head == "head1" else "head1"]
        seconds = phase[-1].end - phase[0].start
        print(
            f"lease: {writer.name}'s write phase: {sum(w.updates for w in phase)} values in {seconds:.2f} s, "
            f"{len(phase)} scontrol batches (largest {max(w.updates for w in phase)}), hold "
            f"{LEASE_INTERVALS * INTERVAL:g} s; {len(every) - len(phase)} batch(es) besides"
        )
        assert seconds > LEASE_INTERVALS * INTERVAL, "the write phase must outlast the hold for the test to mean it"
        assert any("standby: " in line for line in other.lines()), f"{other.name} was never the standby"
        first.stop()
        second.stop()
        reset_to_own(live, first, jobs)

        # 2. Again from a fresh start; the holder stopped (SIGSTOP) in the middle of its write phase.
        mark = time.time()
        logged = {name: len(head.lines()) for name, head in heads.items()}  # this part's lines come after
        start_both(first, second)
        wait_for(lambda: [w for w in windows(log) if w.start >= mark], TIMEOUT, "the holder's first write")
        writer = heads[next(w.head for w in windows(log) if w.start >= mark)]
        other = heads["head2" if writer.name == "head1" else "head1"]
        writer.signal(signal.SIGSTOP)
        stopped = time.time()

        def other_wrote() -> list[Window]:
            return [w for w in windows(log) if w.start >= mark and w.head == other.name]

        wait_for(other_wrote, TIMEOUT, f"{other.name} to take over and write")
        taken = min(w.start for w in other_wrote())
        writer.signal(signal.SIGCONT)
        lost = re.compile(r"holds the lease now; this daemon stopped writing after (\d+) of (\d+) value\(s\)")
        wait_for(
            lambda: [line for line in writer.lines()[logged[writer.name] :] if lost.search(line)],
            TIMEOUT,
            f"{writer.name}'s line",
        )
        wait_for(lambda: labelled(live, jobs) == JOBS, TIMEOUT, "every job to hold a label again")
        lines = writer.lines()[logged[writer.name] :]
        said = [line for line in lines if lost.search(line)]
        cycle = re.search(r"cycle (\d+) failed", said[0])
        assert cycle is not None, said
        assert [line for line in lines if re.search(rf"\bcycle {cycle[1]}\b", line)] == [said[0]]  # in one line
        print(f"lease: {other.name} wrote {taken - stopped:.2f} s after {writer.name} stopped; it said: {said[0]}")
        every = windows(log)
        # One writer at any time, each only while it held the lease: the stopped one sent nothing more
        # once the other held it. It may hold the lease again later, when the other's hold runs out in
        # turn (a cycle whose read outlasts the hold on a loaded machine: CI's trixie tier), and write then.
        assert overlaps([w for w in every if w.head == "head1"], [w for w in every if w.head == "head2"]) == []
        assert not_held(every, heads) == []
        later = [w for w in every if w.head == writer.name and w.start >= taken]
        print(f"lease: {writer.name} wrote {len(later)} batch(es) later, each in a hold it took again")
    finally:
        first.stop()
        second.stop()
    # 3. Nothing lost: every job's own nice comes back.
    reset_to_own(live, first, jobs)
