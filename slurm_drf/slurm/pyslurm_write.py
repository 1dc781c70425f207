"""Writing values back to Slurm through pyslurm, with scontrol where pyslurm cannot.

Sits beside write.py (the scontrol writer) between the daemon and Slurm and
has its interface: `apply(writes) -> WriteResult` and `run_lines(lines)`.
Each write is one `slurm_update_job` RPC made in process by pyslurm's
object API (`pyslurm.Job(id).modify(pyslurm.JobSubmitDescription(nice=V))`,
pyslurm/core/job/job.pyx and submission.pyx, pyslurm 22.5.2 and later), so
the per-job outcome is known exactly.

Three cases go through scontrol instead (`ScontrolWriter`):

- a value of 0 for nice or site_factor: JobSubmitDescription drops it
  (`if self.nice:` / `if self.site_factor:` in _create_job_submit_desc),
  so pyslurm would send "no change" and report success (docs/rule.md §5);
- pending het job leaders (`Write.het_leader`, from the snapshot the plan
  was made from): slurm_update_job names one record, and slurmctld's
  update_job() changes only that one, whereas `scontrol update
  jobid=LEADER` changes every component;
- a pyslurm with only the dict API (22.5.0, 22.5.1, 23.2.0), which has no
  job update call.

Reset and mode-change commands (`run_lines`) are scontrol lines (hold,
release, update) and go to scontrol unchanged. Every write passes
`check_write` first, so priority 0 (a hold) is never sent by either path.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Sequence
from types import MappingProxyType, ModuleType
from typing import Final

from slurm_drf.errors import SlurmWriteError
from slurm_drf.slurm.write import ScontrolWriter, Write, WriteResult, check_write, is_gone

logger = logging.getLogger(__name__)

# Slurm errno ranges (slurm/slurm_errno.h) that say nothing about the job:
# the message layer (1000-1099), slurmctld communication (1800-1899), and
# socket errors (5000-5099); then ESLURM_ACCESS_DENIED (2002). After one of
# these no later write can be trusted to land either.
_CONTROLLER_ERRNO_RANGES: Final = ((1000, 1100), (1800, 1900), (5000, 5100))
_ACCESS_DENIED: Final = 2002
_CONTROLLER_MESSAGES: Final = (
    "unable to contact slurm controller",
    "socket timed out",
    "access/permission denied",
    "communication connection failure",
)
# The JobSubmitDescription attribute per mode.
_ATTRIBUTE: Final = {"nice": "nice", "site_factor": "site_factor", "priority": "priority"}


def build_routes(writes: Sequence[Write], pyslurm_can_update: bool) -> tuple[list[Write], list[Write]]:
    """(writes for pyslurm, writes for scontrol); checks every write first.

    Raises SlurmWriteError (via check_write) before anything is routed when
    one write must never reach Slurm, as the scontrol writer does.
    """
    for write in writes:
        check_write(write)
    if not pyslurm_can_update:
        return [], list(writes)
    by_pyslurm: list[Write] = []
    by_scontrol: list[Write] = []
    for write in writes:
        zero_dropped = write.mode in ("nice", "site_factor") and write.value == 0
        if zero_dropped or write.het_leader:
            by_scontrol.append(write)
        else:
            by_pyslurm.append(write)
    return by_pyslurm, by_scontrol


def parse_rpc_error(error: Exception) -> tuple[int | None, str]:
    """(Slurm errno, message) of pyslurm's RPCError(errno, msg), or of the
    dict API's ValueError(message, errno)."""
    errno = getattr(error, "errno", None)
    message = getattr(error, "msg", None)
    if isinstance(error, ValueError) and len(error.args) == 2:
        message, errno = error.args
    text = str(message) if message else (str(error) or type(error).__name__)
    return (errno if isinstance(errno, int) and not isinstance(errno, bool) else None), text


def is_controller_error(errno: int | None, message: str) -> bool:
    """Whether an update failed for a reason that names no job."""
    if errno is not None and (
        errno == _ACCESS_DENIED or any(low <= errno < high for low, high in _CONTROLLER_ERRNO_RANGES)
    ):
        return True
    lowered = message.lower()
    return any(pattern in lowered for pattern in _CONTROLLER_MESSAGES)


class PyslurmWriter:
    """Applies writes through pyslurm; zeros, het leaders and reset lines through scontrol.

    `module` is pyslurm (imported on first use when None; tests pass a
    fake).
    """

    def __init__(self, module: ModuleType | None = None, *, scontrol: ScontrolWriter | None = None) -> None:
        self._module = module
        self.scontrol = scontrol if scontrol is not None else ScontrolWriter()

    def _pyslurm(self) -> ModuleType:
        if self._module is None:
            try:
                self._module = importlib.import_module("pyslurm")
            except Exception as error:
                raise SlurmWriteError(f"pyslurm does not import ({type(error).__name__}: {error})") from error
        return self._module

    def run_lines(self, lines: Sequence[str]) -> tuple[dict[str, str], list[str]]:
        """scontrol command lines (reset: update, hold, release) go to scontrol as they are."""
        return self.scontrol.run_lines(lines)

    def _update(self, module: ModuleType, write: Write) -> str | None:
        """One update through pyslurm; the error message, or None when it landed."""
        try:
            changes = module.JobSubmitDescription(**{_ATTRIBUTE[write.mode]: write.value})
            module.Job(int(write.job_id)).modify(changes)
        except Exception as error:  # pyslurm.RPCError; anything else is as opaque
            errno, message = parse_rpc_error(error)
            if is_controller_error(errno, message):
                raise SlurmWriteError(f"pyslurm update of job {write.job_id}: {message}") from error
            return message
        return None

    def apply(self, writes: Sequence[Write]) -> WriteResult:
        """Write every value; raises SlurmWriteError when Slurm failed in a way
        that names no job (slurmctld down, permission denied)."""
        return self._apply(writes, None)

    def apply_until(self, writes: Sequence[Write], until: float) -> WriteResult:
        """`apply`, with no update sent after `until` (time.monotonic()): where a lease's hold ends
        (cycle.fence). The writes not sent by then are in none of the result's fields."""
        return self._apply(writes, until)

    def _apply(self, writes: Sequence[Write], until: float | None) -> WriteResult:
        if not writes:
            return WriteResult()
        module = self._pyslurm()
        can_update = callable(getattr(module, "Job", None)) and callable(getattr(module, "JobSubmitDescription", None))
        if not can_update:
            logger.info("pyslurm %s has no Job.modify; writing through scontrol", getattr(module, "__version__", "?"))
        by_pyslurm, by_scontrol = build_routes(writes, can_update)

        messages: dict[str, str] = {}
        sent: list[Write] = []
        for write in by_pyslurm:
            if until is not None and time.monotonic() >= until:
                break
            message = self._update(module, write)
            sent.append(write)
            if message is not None:
                messages[write.job_id] = message
        if by_scontrol:
            logger.debug("%d write(s) through scontrol (zero values pyslurm drops, het jobs)", len(by_scontrol))
            if until is None:
                scontrol_result = self.scontrol.apply(by_scontrol)
            else:
                scontrol_result = self.scontrol.apply_until(by_scontrol, until)
        else:
            scontrol_result = WriteResult()

        gone = [job for job, message in messages.items() if is_gone(message)]
        failed = {job: message for job, message in messages.items() if not is_gone(message)}
        for job, message in failed.items():
            logger.warning("job %s: pyslurm update failed: %s", job, message)
        landed = {w.job_id for w in sent if w.job_id not in messages} | set(scontrol_result.applied)
        return WriteResult(
            applied=tuple(w.job_id for w in writes if w.job_id in landed),
            gone=(*gone, *scontrol_result.gone),
            failed=MappingProxyType({**failed, **scontrol_result.failed}),
        )
