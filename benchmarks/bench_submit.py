"""sbatch throughput with and without the job_submit/lua script (issue 38): run by hand as root, not a test.

    scripts/slurm-sandbox fresh
    eval "$(scripts/slurm-sandbox env)"
    PYTHONPATH=. nice -n 5 python3 benchmarks/bench_submit.py [--pending 1000,50000] [--rounds 8]
        [--batch 200] [--batches 5] [--arms on,off,empty] [--keep] [--reuse] [--cleanup]

Needs the sandbox to itself (nothing queued) and SLURM_SANDBOX_PLACEMENT,
the table the sandbox's job_submit.lua reads (`scripts/slurm-sandbox env`
prints both).

Setup: four running jobs (one per team account) take every CPU of the
node, then 1-CPU jobs of the four accounts are queued until PENDING wait:
submitted held by parallel sbatch processes and released by scontrol
(bench_live_50k.py's way), so they are real pending jobs the scheduler
sees, not held. Then `slurm-drf once` with `hierarchy: flat` and
`placement.path` at the sandbox's table publishes a table of that queue
(and writes 100 nice values: `max_writes_per_cycle`); its interval is an
hour, so the table stays fresh for the whole measurement.

Then, in rounds, each arm in turn (the order reversed every other round,
so that a drift of the machine weighs on every arm alike):

- slurmctld is restarted (SIGTERM to the pid in SlurmctldPidFile, then
  `slurmctld -D` as scripts/slurm-sandbox starts it) with the arm's
  slurm.conf: `on`, the sandbox's own (JobSubmitPlugins=lua, the shipped
  job_submit.lua and slurm_drf_submit.lua beside it); `off`, a copy
  without the JobSubmitPlugins line; `empty`, a copy beside a
  job_submit.lua whose slurm_job_submit only returns (what job_submit/lua
  costs with no script of ours: `on` against `empty` is the script's own
  share). The copies live in a temporary directory; the sandbox's files
  are not changed (slurmctld logs that slurmd's slurm.conf differs from a
  copy's: harmless here), and slurmctld runs on the sandbox's own
  slurm.conf again when the benchmark ends;
- a few untimed sbatch (the script loads, reads the table), then BATCHES
  batches of BATCH sequential sbatch processes (a user's loop; the accounts
  in turn), each batch timed, checked (on: every job's nice below
  -1,000,000, i.e. placed; otherwise 0) and cancelled before the next,
  untimed, so the queue stays at PENDING to within a batch;
- the arm's throughput: jobs over the summed wall time of its batches; and
  slurmctld's time per submission (`sdiag`: REQUEST_SUBMIT_BATCH_JOB's
  total time over its count during the batches, waits for its locks
  included).

Reported per queue size: each arm's median jobs/s, off / on (the target
is <= 1.1), the median of the per-round ratios, and slurmctld's median
time per submission. Every job it submitted is cancelled at the end, also
when interrupted (at 50,000 that takes about 20 minutes; `--keep` leaves
them for a `--reuse` run, `--cleanup` cancels them), and the table it
published is removed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench_live import sbatch_argv
from bench_live_50k import (
    ACCOUNTS,
    PENDING_NAME,
    RUNNING_NAME,
    cleanup,
    node_cpus,
    ours,
    rpc_counts,
    run,
    sbatch,
    squeue_ids,
    submit,
    wait_for,
)

from slurm_drf.service.job_submit import plugin_finding

DRF = (sys.executable, "-m", "slurm_drf.cli")
MEASURED_NAME = "bench-submit"
LABEL_BELOW = -1_000_000  # a nice below this is a label (docs/rule.md §5): the script placed the job
WARM_UP = 5  # untimed submissions after a restart
SUBMIT_RPC = "REQUEST_SUBMIT_BATCH_JOB"
# job_submit/lua with nothing of ours: the plugin's own cost (it builds slurm.jobs, pushes the job and partitions).
EMPTY_SCRIPT = """\
function slurm_job_submit(job_desc, part_list, submit_uid)
\treturn slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
\treturn slurm.SUCCESS
end

return slurm.SUCCESS
"""
ARMS = ("on", "off", "empty")


@dataclass
class Arm:
    """One slurm.conf slurmctld runs with, and what one round of it measured."""

    name: str
    conf: Path
    lua: bool
    rates: list[float] = field(default_factory=list)  # jobs/s per round
    rpc_us: list[float] = field(default_factory=list)  # slurmctld's microseconds per submission, per round


# -- slurmctld -------------------------------------------------------------


def conf_values(conf: Path) -> dict[str, str]:
    """slurm.conf's `Key=value` lines (the first word of the value)."""
    values = {}
    for line in conf.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\s*(\w+)\s*=\s*(\S+)", line)
        if match:
            values[match.group(1)] = match.group(2)
    return values


def arm_confs(sandbox_conf: Path, tmp: Path, names: Sequence[str]) -> list[Arm]:
    """Each arm's slurm.conf: the sandbox's own for `on`, copies beside it in `tmp` for the others."""
    arms = []
    text = sandbox_conf.read_text(encoding="utf-8")
    for name in names:
        if name == "on":
            arms.append(Arm(name, sandbox_conf, lua=True))
            continue
        directory = tmp / f"ctld-{name}"
        directory.mkdir()
        # slurmctld finds gres.conf and job_submit.lua beside the slurm.conf it reads.
        for other in sandbox_conf.parent.glob("*.conf"):
            if other.name not in ("slurm.conf", "slurmdbd.conf"):
                shutil.copy2(other, directory / other.name)
        if name == "off":
            kept = [line for line in text.splitlines(keepends=True) if not line.startswith("JobSubmitPlugins=")]
            (directory / "slurm.conf").write_text("".join(kept), encoding="utf-8")
        else:
            (directory / "slurm.conf").write_text(text, encoding="utf-8")
            (directory / "job_submit.lua").write_text(EMPTY_SCRIPT, encoding="utf-8")
        arms.append(Arm(name, directory / "slurm.conf", lua=name != "off"))
    return arms


class Controller:
    """Stops slurmctld and starts it on another slurm.conf, as scripts/slurm-sandbox starts it."""

    def __init__(self, sandbox_conf: Path) -> None:
        values = conf_values(sandbox_conf)
        self.pidfile = Path(values["SlurmctldPidFile"])
        self.out = Path(values["SlurmctldLogFile"]).parent / "slurmctld.out"
        self.sandbox_conf = sandbox_conf
        self.current = sandbox_conf
        self._started: dict[int, subprocess.Popen[bytes]] = {}

    def _live_pid(self) -> int | None:
        try:
            pid = int(self.pidfile.read_text(encoding="ascii").strip())
            comm = Path(f"/proc/{pid}/comm").read_text(encoding="ascii").strip()
        except (OSError, ValueError):
            return None
        return pid if comm == "slurmctld" else None

    def stop(self) -> None:
        pid = self._live_pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        child = self._started.pop(pid, None)
        if child is not None:
            child.wait(timeout=600)  # ours: reaped, or it would linger as a zombie
        else:
            wait_for(lambda: not Path(f"/proc/{pid}").exists(), 600, "slurmctld to stop", every=0.1)

    def start(self, arm: Arm, pending: int) -> None:
        """slurmctld on the arm's slurm.conf, once it answers with the arm's plugins, the node and the queue."""
        self.stop()
        env = {**os.environ, "SLURM_CONF": str(arm.conf)}
        with open(self.out, "ab") as out:
            child = subprocess.Popen(
                ["slurmctld", "-D"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self._started[child.pid] = child
        self.current = arm.conf

        def ready() -> bool:
            if child.poll() is not None:
                sys.exit(f"bench_submit: slurmctld exited {child.returncode} at start; see {self.out}")
            config = run(["scontrol", "show", "config"], check=False)
            if config.returncode != 0 or plugin_finding(config.stdout).ok != arm.lua:
                return False
            states = run(["sinfo", "-h", "-N", "-o", "%T"], check=False).stdout.split()
            return bool(states) and all(s in ("allocated", "mixed", "idle") for s in states)

        wait_for(ready, 600, f"slurmctld to answer on the {arm.name} arm's slurm.conf", every=0.5)
        wait_for(lambda: len(ours("PD")) >= pending, 600, f"slurmctld to list the {pending} pending jobs")

    def restore(self) -> None:
        """slurmctld on the sandbox's own slurm.conf, if it runs on another."""
        if self.current != self.sandbox_conf or self._live_pid() is None:
            self.start(Arm("on", self.sandbox_conf, lua=True), 0)


# -- the queue ---------------------------------------------------------------


def fill_node(scratch: Path) -> None:
    """One running job per account; together they take every CPU, so every later job stays pending."""
    cpus = node_cpus()
    if cpus < len(ACCOUNTS):
        sys.exit(f"bench_submit: the node has {cpus} CPUs, fewer than the {len(ACCOUNTS)} accounts")
    for index, account in enumerate(ACCOUNTS):
        share = cpus // len(ACCOUNTS) + (cpus % len(ACCOUNTS) if index == 0 else 0)
        options = [f"--job-name={RUNNING_NAME}", "-p", "cpu", "-c", str(share), "--mem=1000"]
        run(sbatch_argv(scratch, account, options, hold=False, wrap="exec sleep 7200"))
    wait_for(lambda: len(ours("R")) == len(ACCOUNTS), 120, "the node-filling jobs to run")


def queue_pending(scratch: Path, pending: int, threads: int) -> None:
    """Pending jobs of the four accounts up to `pending`: submitted held, then released."""
    queued = len(ours("PD"))
    started = time.perf_counter()
    accounts = [ACCOUNTS[i % len(ACCOUNTS)] for i in range(queued, pending)]
    held = submit(scratch, PENDING_NAME, accounts, True, threads)
    for start in range(0, len(held), 10000):  # one argument stays below the kernel's 128 KiB
        run(["scontrol", "release", ",".join(held[start : start + 10000])])
    still = [line for line in run(["squeue", "-h", "-t", "PD", "-o", "%r"]).stdout.splitlines() if "Held" in line]
    if still:
        sys.exit(f"bench_submit: {len(still)} job(s) still held after the release")
    print(f"setup: {len(held)} pending jobs queued in {time.perf_counter() - started:.0f} s", flush=True)


def publish_table(tmp: Path, table: Path) -> None:
    """`slurm-drf once` with the sandbox's table as its placement.path: a table of this queue."""
    config = tmp / "config.yaml"
    keys = {
        "state_dir": str(tmp / "state"),
        "hierarchy": "flat",
        "interval": "1h",
        # The writes are not what is measured: at 50,000 pending each one pays job_modify's share of the
        # plugin (10-70 ms here), and 2,000 of them outlast the scontrol writer's 60 s.
        "max_writes_per_cycle": 100,
        "placement": {"path": str(table)},
    }
    config.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in keys.items()), encoding="utf-8")
    config.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if k != "SLURM_DRF_CONFIG"}
    started = time.perf_counter()
    proc = subprocess.run([*DRF, "once", "--config", str(config)], capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0 or not table.is_file():
        sys.exit(f"bench_submit: slurm-drf once exited {proc.returncode}, no table: {proc.stderr.strip()[-500:]}")
    lines = table.read_bytes().count(b"\n")
    print(
        f"setup: once in {time.perf_counter() - started:.1f} s published a table of "
        f"{table.stat().st_size:,} bytes, {lines:,} lines"
    )


# -- the measurement -----------------------------------------------------------


def measured_nices() -> dict[str, int]:
    lines = run(["squeue", "-h", "-n", MEASURED_NAME, "-o", "%i %y"]).stdout.splitlines()
    return {job: int(nice) for job, nice in (line.split() for line in lines)}


def cancel_measured() -> None:
    run(["scancel", "--name", MEASURED_NAME], check=False)
    wait_for(lambda: not squeue_ids("-n", MEASURED_NAME), 300, "the measured jobs to leave squeue", every=0.2)


def check_placed(arm: Arm, jobs: Sequence[str]) -> None:
    """On: every job placed by the script. Otherwise: none."""
    nices = measured_nices()
    missing = [job for job in jobs if job not in nices]
    if missing:
        sys.exit(f"bench_submit: {len(missing)} submitted job(s) not pending, e.g. {missing[:3]}")
    placed = [job for job in jobs if nices[job] < LABEL_BELOW]
    want = len(jobs) if arm.name == "on" else 0
    if len(placed) != want:
        sys.exit(f"bench_submit: {arm.name}: {len(placed)} of {len(jobs)} jobs placed, expected {want}")


def measure(arm: Arm, scratch: Path, batch: int, batches: int) -> tuple[float, float]:
    """The arm's jobs/s over `batches` timed batches of `batch` sequential sbatch, and slurmctld's µs per submission."""
    for index in range(WARM_UP):
        sbatch(scratch, MEASURED_NAME, ACCOUNTS[index % len(ACCOUNTS)], False)
    cancel_measured()
    elapsed = 0.0
    count = 0
    rpc_time = 0
    for _ in range(batches):
        before = rpc_counts().get(SUBMIT_RPC, (0, 0))
        started = time.perf_counter()
        jobs = [sbatch(scratch, MEASURED_NAME, ACCOUNTS[i % len(ACCOUNTS)], False) for i in range(batch)]
        elapsed += time.perf_counter() - started
        after = rpc_counts().get(SUBMIT_RPC, (0, 0))
        count += after[0] - before[0]
        rpc_time += after[1] - before[1]
        check_placed(arm, jobs)
        cancel_measured()
    return batch * batches / elapsed, rpc_time / max(count, 1)


def rounds_order(arms: Sequence[Arm], rounds: int) -> list[list[Arm]]:
    """The arms in turn, reversed every other round."""
    return [list(arms) if r % 2 == 0 else list(reversed(arms)) for r in range(rounds)]


def report(pending: int, arms: Sequence[Arm], rounds: int) -> None:
    print(f"{pending:,} pending, medians of {rounds} rounds:")
    for arm in arms:
        rates = " ".join(f"{r:.1f}" for r in arm.rates)
        print(
            f"  {arm.name:5}: {statistics.median(arm.rates):6.1f} jobs/s (rounds {rates}); slurmctld "
            f"{statistics.median(arm.rpc_us) / 1000:.2f} ms per submission"
        )
    by_name = {arm.name: arm for arm in arms}
    off = by_name.get("off")
    if off is None:
        return
    for arm in arms:
        if arm is off:
            continue
        ratio = statistics.median(off.rates) / statistics.median(arm.rates)
        per_round = [o / a for o, a in zip(off.rates, arm.rates, strict=True)]
        extra = statistics.median(arm.rpc_us) - statistics.median(off.rpc_us)
        target = " (target <= 1.1)" if arm.name == "on" else ""
        print(
            f"  off / {arm.name}: {ratio:.3f}{target}; per round {' '.join(f'{r:.3f}' for r in per_round)}, "
            f"median {statistics.median(per_round):.3f}; slurmctld {extra / 1000:+.2f} ms per submission"
        )


def run_size(args: argparse.Namespace, pending: int, arms: Sequence[Arm], ctl: Controller, tmp: Path) -> None:
    scratch = tmp / "jobs"
    queue_pending(scratch, pending, args.threads)
    publish_table(tmp, Path(os.environ["SLURM_SANDBOX_PLACEMENT"]))
    for arm in arms:
        arm.rates.clear()
        arm.rpc_us.clear()
    for number, order in enumerate(rounds_order(arms, args.rounds), 1):
        for arm in order:
            ctl.start(arm, pending)
            time.sleep(args.settle)
            rate, rpc_us = measure(arm, scratch, args.batch, args.batches)
            arm.rates.append(rate)
            arm.rpc_us.append(rpc_us)
            print(f"  round {number} {arm.name}: {rate:.1f} jobs/s, slurmctld {rpc_us / 1000:.2f} ms per submission")
    report(pending, arms, args.rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--pending", default="1000,50000", help="queue sizes, ascending, comma-separated")
    parser.add_argument("--rounds", type=int, default=8, help="alternating rounds of every arm (default 8)")
    parser.add_argument("--batch", type=int, default=200, help="sequential sbatch per timed batch (default 200)")
    parser.add_argument("--batches", type=int, default=5, help="timed batches per round (default 5)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"some of {','.join(ARMS)} (default all)")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after a restart (default 10)")
    parser.add_argument("--threads", type=int, default=4, help="concurrent sbatch when queueing (default 4)")
    parser.add_argument("--keep", action="store_true", help="leave the jobs queued (a later run with --reuse)")
    parser.add_argument("--reuse", action="store_true", help="go on with the jobs a --keep run left")
    parser.add_argument("--cleanup", action="store_true", help="only cancel what a --keep run left")
    args = parser.parse_args()
    if args.cleanup:
        run(["scancel", "--name", MEASURED_NAME], check=False)
        cleanup()
        return
    sizes = [int(p) for p in args.pending.split(",") if p]
    names = [a for a in args.arms.split(",") if a]
    if sizes != sorted(sizes) or not sizes:
        sys.exit("bench_submit: --pending: queue sizes, ascending")
    if not names or any(a not in ARMS for a in names) or len(set(names)) != len(names):
        sys.exit(f"bench_submit: --arms: some of {', '.join(ARMS)}")
    if not os.environ.get("SLURM_CONF") or not os.environ.get("SLURM_SANDBOX_PLACEMENT"):
        sys.exit(
            'bench_submit: SLURM_CONF or SLURM_SANDBOX_PLACEMENT is not set; run: eval "$(scripts/slurm-sandbox env)"'
        )
    if not args.reuse and squeue_ids():
        sys.exit("bench_submit: the sandbox already has jobs; this benchmark fills the node")
    sandbox_conf = Path(os.environ["SLURM_CONF"])
    if not plugin_finding(sandbox_conf.read_text(encoding="utf-8")).ok:
        sys.exit(f"bench_submit: {sandbox_conf} does not set JobSubmitPlugins=lua (the `on` arm is the sandbox's own)")
    table = Path(os.environ["SLURM_SANDBOX_PLACEMENT"])
    ctl = Controller(sandbox_conf)
    with tempfile.TemporaryDirectory(prefix="bench-submit-") as name:
        tmp = Path(name)
        (tmp / "jobs").mkdir()
        (tmp / "jobs").chmod(0o755)
        arms = arm_confs(sandbox_conf, tmp, names)
        try:
            if len(ours("R")) < len(ACCOUNTS):
                fill_node(tmp / "jobs")
            for pending in sizes:
                run_size(args, pending, arms, ctl, tmp)
        finally:
            ctl.restore()
            table.unlink(missing_ok=True)
            run(["scancel", "--name", MEASURED_NAME], check=False)
            if not args.keep:
                cleanup()


if __name__ == "__main__":
    main()
