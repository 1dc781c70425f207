"""`slurm-drf reset`: give every job the daemon touched its own value back."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from slurm_drf.cycle.recall import Recall
from slurm_drf.cycle.run import Writer
from slurm_drf.cycle.store import StateStore
from slurm_drf.slurm.source import ClusterSource
from slurm_drf.slurm.write import build_reset_lines

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ResetReport:
    reset: tuple[str, ...]
    skipped: Mapping[str, str]


def reset_jobs(
    source: ClusterSource,
    writer: Writer,
    store: StateStore,
    *,
    dry_run: bool = False,
    recall: Recall | None = None,
    assume_own: int | None = None,
) -> ResetReport:
    """Give every pending job that holds a value of ours its own value back, then forget it.

    Whose value a job holds is decided as in a cycle (`cycle.recall`): the
    state, the record of writes, labels. A job whose own nice no record
    holds is left alone unless `assume_own` says what to give it.
    """
    snapshot = source.fetch_snapshot()
    state = (recall or Recall(None)).load(snapshot, store)
    jobs = {j.job_id: j for j in snapshot.jobs if j.pending}
    lines: list[str] = []
    done: list[str] = []
    skipped: dict[str, str] = {}
    waiting: set[str] = set()
    for job_id, memory in sorted(state.jobs.items()):
        job = jobs.get(job_id)
        if job is None:
            skipped[job_id] = "no longer pending"
            continue
        if job.held or job.priority == 0:
            # We never write to a held job; remember it for the next reset.
            skipped[job_id] = "held: run reset again once it is released"
            waiting.add(job_id)
            continue
        if memory.mode == "nice" and job.nice != memory.written:
            skipped[job_id] = f"nice changed to {job.nice} since we wrote it: left as it is"
            continue
        own = memory.user_nice if memory.own_known else assume_own
        if own is None:
            skipped[job_id] = (
                "its own nice is unknown (a label no record explains: an earlier install's?); "
                "reset --assume-own 0 gives it 0"
            )
            waiting.add(job_id)
            continue
        lines.extend(build_reset_lines(job_id, memory.mode, own))
        done.append(job_id)
    if dry_run:
        return ResetReport(tuple(done), MappingProxyType(skipped))
    per_job, other = writer.run_lines(lines) if lines else ({}, [])
    for line in other:
        logger.warning("scontrol: %s", line)
    failed = {job: message for job, message in per_job.items() if job in done}
    remaining = {job: m for job, m in state.jobs.items() if job in failed or job in waiting}
    store.save(replace(state, jobs=MappingProxyType(remaining)))
    skipped.update({job: f"failed: {message}" for job, message in failed.items()})
    return ResetReport(tuple(j for j in done if j not in failed), MappingProxyType(skipped))
