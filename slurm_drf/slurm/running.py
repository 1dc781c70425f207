"""Reclaim's side of Slurm: what runs where (`fetch_occupancy`); requeue or cancel the victims (`apply_reclaim`).

Sits between the daemon's cycle and Slurm, beside the snapshot source and the
writer. The cycle reads an Occupancy, asks policy.reclaim.choose_victims for
the victims (`Occupancy.running()` is what it takes), and hands those jobs
(RunningJob) back here. Commands are argv lists built by pure
`build_*` functions and run by `execute` (never a shell, always a timeout);
what they print is read by `slurm.parse.running`.

The read: `squeue --json --all --states=RUNNING` (each job's allocation per
node), then the nodes with `scontrol --all --json show nodes` (23.02 and
later) or `sinfo --json --all` (22.05, whose scontrol has no JSON), as the
snapshot source picks them.

The write, per job, only to a job that is RUNNING: one `squeue` call first
names the victims still running (a job that ended, or that someone else
requeued, is `gone`), then each is requeued with `scontrol requeue
Incomplete TARGET`, which slurmctld itself applies only to a job that has not
completed (a plain `scontrol requeue` puts a COMPLETED job back in the queue
to run again; measured on 22.05), or cancelled with `scancel
--state=RUNNING TARGET`. Both exit 0 without a word when the job stopped
running in the instant between the check and the act: it is then reported
`done`, and nothing was done to it. TARGET is RunningJob.target: an array
task is named `ARRAY_TASK`, because its own id may be the array's, which
names every task (measured: `scontrol requeue 48` requeued tasks 48_0 to
48_2). A het job component is never requeued or cancelled (`refused`).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from slurm_drf.config.settings import DEFAULT_SLURM_TIMEOUT
from slurm_drf.errors import SlurmError, SlurmReadError, SlurmWriteError
from slurm_drf.slurm.cli_source import CommandRunner, build_command_env, build_node_commands, parse_command_json
from slurm_drf.slurm.execute import run_command, run_process
from slurm_drf.slurm.parse.envelope import parse_slurm_version
from slurm_drf.slurm.parse.lines import split_lines
from slurm_drf.slurm.parse.running import Occupancy, RunningJob, parse_free, parse_running

logger = logging.getLogger(__name__)

Way = Literal["requeue", "cancel"]
Env = Mapping[str, str]
Result = Literal["done", "gone", "refused"]

# fullmatch: a job id, or an array task (`51_2`; the array's own id would name every task).
_TARGET: Final = re.compile(r"[0-9]{1,10}(_[0-9]{1,10})?")
# What scontrol and scancel say of a job that is no longer there to requeue (22.05, 24.11, 26.05).
_GONE: Final = (
    "invalid job id specified",
    "job has already finished",
    "already completing or completed",
    "job is pending execution",
)
# squeue -j with only unknown ids exits 1 and says this; with some known ids it lists those.
_NO_SUCH_JOBS: Final = "invalid job id specified"


class ProcessRunner(Protocol):
    """execute.run_process's shape: the exit status is the caller's to judge."""

    def __call__(
        self,
        argv: Sequence[str],
        timeout: float,
        *,
        env: Mapping[str, str] | None = None,
        error_class: type[SlurmError],
    ) -> subprocess.CompletedProcess[str]: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one victim: `done`, `gone` (no longer running: ended, purged, requeued by another),
    or `refused`, with Slurm's one line."""

    job_id: str
    result: Result
    message: str = ""


def build_running_argv() -> list[str]:
    """Running jobs with their allocation per node (22.05's JSON ignores `--states`; the reader filters too)."""
    return ["squeue", "--json", "--all", "--states=RUNNING"]


def fetch_occupancy(
    partitions: Collection[str] | None,
    resources: Sequence[str],
    *,
    timeout: float = DEFAULT_SLURM_TIMEOUT,
    runner: CommandRunner = run_command,
    environ: Mapping[str, str] | None = None,
) -> Occupancy:
    """Free resources per node and the running jobs per node, of `partitions` (None: all), by `resources`.

    SlurmReadError when squeue or the node command fails, or prints no jobs
    or nodes list; a record it cannot read is left out with a warning.
    """
    env = build_command_env(os.environ if environ is None else environ)
    argv = build_running_argv()
    data = parse_command_json(runner(argv, timeout, env=env), argv)
    version = parse_slurm_version(data)
    jobs = parse_running(data, partitions, resources)
    failure: SlurmReadError | None = None
    for node_argv in build_node_commands(version):
        try:
            free = parse_free(parse_command_json(runner(node_argv, timeout, env=env), node_argv), partitions, resources)
        except SlurmReadError as error:
            logger.info("%s", error)
            failure = error
            continue
        return Occupancy(tuple(resources), free, tuple(jobs), version)
    raise failure or SlurmReadError("no command to read the nodes with")


def build_state_argv(targets: Sequence[str]) -> list[str]:
    """Each job's name (`%i`: `ARRAY_TASK` for an array task) and state, one a line."""
    return ["squeue", "--all", "--noheader", f"--jobs={','.join(targets)}", "--format=%i|%T"]


def parse_states(text: str) -> dict[str, str]:
    """`123|RUNNING` and `51_2|PENDING` lines -> {"123": "RUNNING", "51_2": "PENDING"}."""
    states: dict[str, str] = {}
    for line in split_lines(text):
        target, sep, state = line.strip().partition("|")
        if sep:
            states[target.strip()] = state.strip().upper()
    return states


def build_reclaim_argv(target: str, way: Way) -> list[str]:
    """The one command that requeues or cancels the job Slurm names `target` (RunningJob.target), if it still runs.

    SlurmWriteError for anything but a job id or an array task (`51_2`): a
    het job component is requeued or cancelled with all the others.
    """
    if not _TARGET.fullmatch(target):
        raise SlurmWriteError(f"job {target!r}: reclaim requeues or cancels only a plain job id or an array task")
    if way == "requeue":
        return ["scontrol", "requeue", "Incomplete", target]
    if way == "cancel":
        return ["scancel", "--state=RUNNING", target]
    raise SlurmWriteError(f"job {target}: unknown way {way!r} (requeue or cancel)")


def _message(stderr: str, stdout: str) -> str:
    for line in (*split_lines(stderr), *split_lines(stdout)):
        if line.strip():
            return line.strip()
    return "no message"


def parse_outcome(job_id: str, returncode: int, stderr: str, stdout: str = "") -> Outcome:
    """A command's exit status and words as the job's outcome."""
    if returncode == 0:
        return Outcome(job_id, "done")
    message = _message(stderr, stdout)
    lowered = message.lower()
    return Outcome(job_id, "gone" if any(words in lowered for words in _GONE) else "refused", message)


def _fetch_states(
    job_ids: Sequence[str], timeout: float, runner: ProcessRunner, env: Mapping[str, str]
) -> dict[str, str]:
    argv = build_state_argv(job_ids)
    completed = runner(argv, timeout, env=env, error_class=SlurmReadError)
    if completed.returncode == 0:
        return parse_states(completed.stdout)
    message = _message(completed.stderr, completed.stdout)
    if _NO_SUCH_JOBS in message.lower():
        return {}
    raise SlurmReadError(f"{shlex.join(argv)}: exit status {completed.returncode}: {message}")


def _act(
    job: RunningJob, argv: list[str], state: str | None, timeout: float, runner: ProcessRunner, env: Env
) -> Outcome:
    """The command for one job seen in `state` a moment ago; only a RUNNING one is touched."""
    if state != "RUNNING":
        return Outcome(job.job_id, "gone", f"job {job.target} is {state or 'no longer in the queue'}")
    try:
        completed = runner(argv, timeout, env=env, error_class=SlurmWriteError)
    except SlurmWriteError as error:
        return Outcome(job.job_id, "refused", str(error))
    outcome = parse_outcome(job.job_id, completed.returncode, completed.stderr, completed.stdout)
    logger.info("%s: %s%s", shlex.join(argv), outcome.result, f" ({outcome.message})" if outcome.message else "")
    return outcome


def apply_reclaim(
    victims: Sequence[RunningJob],
    way: Way,
    *,
    timeout: float = DEFAULT_SLURM_TIMEOUT,
    runner: ProcessRunner = run_process,
    environ: Mapping[str, str] | None = None,
) -> tuple[Outcome, ...]:
    """Requeue (or, `cancel`, end) each of `victims` that is RUNNING now; one Outcome per job, in order.

    A job Slurm's commands cannot name alone (a het job component) is
    `refused` without a command. SlurmReadError when the states cannot be
    read: nothing is done. A command that cannot run or answer in time is
    that job's `refused`, with what went wrong.
    """
    named: list[tuple[RunningJob, list[str]]] = []
    refused: dict[str, Outcome] = {}
    for job in {job.job_id: job for job in victims}.values():  # each job once
        try:
            named.append((job, build_reclaim_argv(job.target, way)))
        except SlurmWriteError as error:
            refused[job.job_id] = Outcome(job.job_id, "refused", str(error))
    env = build_command_env(os.environ if environ is None else environ)
    states = _fetch_states([job.target for job, _ in named], timeout, runner, env) if named else {}
    acted = {job.job_id: _act(job, argv, states.get(job.target), timeout, runner, env) for job, argv in named}
    return tuple(refused.get(job.job_id) or acted[job.job_id] for job in victims)
