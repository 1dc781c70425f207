"""Writing values back to Slurm with scontrol, safely (docs/rule.md §5).

Sits between the daemon and Slurm, beside the sources. The daemon hands it
`Write`s; it builds the update commands purely (`build_update_lines`),
feeds them to ONE `scontrol` process on standard input (one RPC per job to
slurmctld, but one process, not one per job), and reads per-job errors back
from scontrol's stderr (`parse_update_errors`): a job that ended or started
between the read and the write is not an error.

Guards that hold whatever the caller passes: job ids must be plain numbers
(an array's or het job's leader id), values must be in Slurm's range, and
priority 0 (a hold) is never written.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from slurm_drf.config.settings import NICE_LIMIT
from slurm_drf.errors import SlurmWriteError
from slurm_drf.slurm.execute import DeadlinePassed, run_process, run_process_by
from slurm_drf.slurm.parse.lines import split_lines

logger = logging.getLogger(__name__)

# scontrol keywords per mode.
_KEYWORD: Final = {"nice": "nice", "site_factor": "sitefactor", "priority": "priority"}
# fullmatch, never match: `$` also matches before a final newline ("123\n").
_JOB_ID: Final = re.compile(r"[0-9]+")
# "<message> for job <id>": scontrol's per-job error lines.
_JOB_ERROR: Final = re.compile(r"^(?P<message>.+?) for job (?P<job>[0-9]+)\s*$")
# The job left the pending queue between our read and our write. Slurm 22.05
# answers "Job has already finished" for a job that ended but is still kept
# (MinJobAge), "Invalid job id specified" once it is purged (measured).
_GONE: Final = (
    "invalid job id specified",
    "already completing or completed",
    "no longer pending",
    "job is not pending",
    "job has already finished",
)
# Lines scontrol prints that are not errors (its prompt, echoed in batch mode).
_NOISE: Final = re.compile(r"^\s*(scontrol:.*)?$")
BATCH: Final = 500


class HoldEnded(SlurmWriteError):
    """scontrol was stopped where the lease's hold ends (`apply_until`): which of its writes landed is unknown."""


@dataclass(frozen=True, slots=True)
class Write:
    """One value for one job in one mode.

    `het_leader`: the job is a pending het job's leader (Snapshot.het_leaders),
    so the value must reach every component; scontrol's update does that.
    """

    job_id: str
    mode: str
    value: int
    het_leader: bool = False


@dataclass(frozen=True, slots=True)
class WriteResult:
    applied: tuple[str, ...] = ()
    gone: tuple[str, ...] = ()
    failed: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def count(self) -> int:
        return len(self.applied)


def check_write(write: Write) -> None:
    """Refuse what must never reach Slurm, whoever asked for it."""
    if not _JOB_ID.fullmatch(write.job_id):
        raise SlurmWriteError(f"job {write.job_id!r}: refusing to write to a job id that is not a plain number")
    if write.mode not in _KEYWORD:
        raise SlurmWriteError(f"job {write.job_id}: unknown mode {write.mode!r}")
    if write.mode == "priority" and write.value < 1:
        raise SlurmWriteError(f"job {write.job_id}: refusing to write priority {write.value} (0 holds a job)")
    if not -NICE_LIMIT <= write.value <= (2**32 - 2 if write.mode == "priority" else NICE_LIMIT):
        raise SlurmWriteError(f"job {write.job_id}: {write.mode} {write.value} is outside Slurm's range")


def build_update_lines(writes: Sequence[Write]) -> list[str]:
    """scontrol commands, one a line: `update jobid=N nice=V`."""
    lines = []
    for write in writes:
        check_write(write)
        lines.append(f"update jobid={write.job_id} {_KEYWORD[write.mode]}={write.value}")
    return lines


def build_reset_lines(job_id: str, mode: str, user_nice: int) -> list[str]:
    """Commands that give a job its own value back.

    nice: the user's nice. site_factor: 0. priority: Slurm keeps a set
    priority until the job is held and released (scontrol(1)); then the
    user's nice.
    """
    check_write(Write(job_id, "nice", user_nice))
    if mode == "nice":
        return [f"update jobid={job_id} nice={user_nice}"]
    if mode == "site_factor":
        return [f"update jobid={job_id} sitefactor=0"]
    return [f"hold {job_id}", f"release {job_id}", f"update jobid={job_id} nice={user_nice}"]


def parse_update_errors(stderr: str) -> tuple[dict[str, str], list[str]]:
    """Per-job error messages, and error lines that name no job."""
    per_job: dict[str, str] = {}
    other: list[str] = []
    for line in split_lines(stderr):
        if _NOISE.match(line):
            continue
        found = _JOB_ERROR.match(line.strip())
        if found:
            per_job.setdefault(found["job"], found["message"])
        else:
            other.append(line.strip())
    return per_job, other


def is_gone(message: str) -> bool:
    lowered = message.lower()
    return any(pattern in lowered for pattern in _GONE)


def combine_results(results: Sequence[WriteResult]) -> WriteResult:
    """One WriteResult for writes sent in several parts."""
    failed: dict[str, str] = {}
    for result in results:
        failed.update(result.failed)
    return WriteResult(
        tuple(job for result in results for job in result.applied),
        tuple(job for result in results for job in result.gone),
        MappingProxyType(failed),
    )


class ScontrolWriter:
    """Applies writes through `scontrol` reading commands from stdin."""

    def __init__(self, timeout: float = 60.0, env: Mapping[str, str] | None = None) -> None:
        self.timeout = timeout
        self.env = env

    def run_lines(self, lines: Sequence[str]) -> tuple[dict[str, str], list[str]]:
        """Feed command lines to scontrol in batches; per-job errors and the others."""
        per_job: dict[str, str] = {}
        other: list[str] = []
        for start in range(0, len(lines), BATCH):
            errors, unknown = self._run_chunk(lines[start : start + BATCH], self.timeout)
            per_job.update(errors)
            other.extend(unknown)
        return per_job, other

    def _run_chunk(
        self, lines: Sequence[str], timeout: float, deadline: float | None = None
    ) -> tuple[dict[str, str], list[str]]:
        """One scontrol process for `lines`, killed after `timeout` seconds (or at the `deadline`, when
        given: run_process's DeadlinePassed when it started after it, `lines` not sent)."""
        text = "\n".join(lines) + "\n"
        if deadline is None:
            completed = run_process(["scontrol"], timeout, env=self.env, input_text=text, error_class=SlurmWriteError)
        else:
            completed = run_process_by(
                ["scontrol"], timeout, deadline, env=self.env, input_text=text, error_class=SlurmWriteError
            )
        per_job, other = parse_update_errors(completed.stderr)
        if completed.returncode != 0 and not per_job and not other:
            other.append(f"scontrol exited {completed.returncode} without a message")
        return per_job, other

    def apply(self, writes: Sequence[Write]) -> WriteResult:
        """Write every value; raises SlurmWriteError when scontrol failed in a way
        that names no job (slurmctld down, permission), since then nobody
        knows which writes landed."""
        if not writes:
            return WriteResult()
        return self._result(writes, self.run_lines(build_update_lines(writes)))

    def apply_until(self, writes: Sequence[Write], until: float) -> WriteResult:
        """`apply`, with no scontrol process alive after `until` (time.monotonic()): where a lease's hold
        ends (cycle.fence). A part not started by then is not sent, and in none of the result's fields;
        SlurmWriteError when a process had to be stopped, since which of its writes landed is unknown."""
        lines = build_update_lines(writes)
        results = []
        for start in range(0, len(writes), BATCH):
            left = until - time.monotonic()
            if left <= 0:
                break
            chunk = writes[start : start + BATCH]
            timeout = min(self.timeout, left)
            try:
                answer = self._run_chunk(lines[start : start + BATCH], timeout, until)
            except DeadlinePassed:
                break  # paused between the look at the clock and the start: not sent
            except SlurmWriteError as error:
                if timeout < self.timeout and time.monotonic() >= until:
                    raise HoldEnded(
                        f"scontrol update: stopped at the end of the lease's hold, after {timeout:.3f} s: which of "
                        f"its {len(chunk)} write(s) landed is unknown (the next cycle reads them back)"
                    ) from error
                raise
            results.append(self._result(chunk, answer))
        return combine_results(results)

    def _result(self, writes: Sequence[Write], answer: tuple[dict[str, str], list[str]]) -> WriteResult:
        """What scontrol's answer says of `writes`; SlurmWriteError for an error that names no job."""
        per_job, other = answer
        if other:
            raise SlurmWriteError(
                f"scontrol update: {other[0]}" + (f" (and {len(other) - 1} more)" if len(other) > 1 else "")
            )
        gone = tuple(job for job, message in per_job.items() if is_gone(message))
        failed = {job: message for job, message in per_job.items() if not is_gone(message)}
        for job, message in failed.items():
            logger.warning("job %s: scontrol update failed: %s", job, message)
        applied = tuple(w.job_id for w in writes if w.job_id not in per_job)
        return WriteResult(applied, gone, MappingProxyType(failed))
