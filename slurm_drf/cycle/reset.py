"""`slurm-drf reset`: give every job the daemon touched its own value back.

With a lease (two head nodes) `reset` holds it while it writes, and its
writes go in batches inside the hold as a cycle's do (cycle.fence).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from slurm_drf.cycle.fence import HoldFence
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
    fence: HoldFence | None = None,
) -> ResetReport:
    """Give every pending job that holds a value of ours its own value back, then forget it.

    Whose value a job holds is decided as in a cycle (`cycle.recall`): the
    state, the record of writes, labels. A job whose own nice no record
    holds is left alone unless `assume_own` says what to give it. `fence`:
    with a lease, `reset_fence(lease.confirm, config.interval)`, which
    renews it before the state is saved and before every batch of writes; a
    job no hold left time for keeps its memory, and the next reset gives it
    its value back.
    """
    store.check()  # what the run needs of the state directory, refused in a dry run too
    snapshot = source.fetch_snapshot()
    state = (recall or Recall(None)).load(snapshot, store)
    jobs = {j.job_id: j for j in snapshot.jobs if j.pending}
    resets: list[tuple[str, Sequence[str]]] = []
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
        resets.append((job_id, build_reset_lines(job_id, memory.mode, own)))
    if dry_run:
        return ResetReport(tuple(job_id for job_id, _ in resets), MappingProxyType(skipped))
    fence = fence or HoldFence(None, 0.0)
    done, per_job = _send(writer, fence, resets)
    failed = {job: message for job, message in per_job.items() if job in done}
    unsent = {job_id for job_id, _ in resets[len(done) :]}
    remaining = {job: m for job, m in state.jobs.items() if job in failed or job in waiting or job in unsent}
    fence.confirm(len(done), len(resets))  # the state may be shared with the other head: saved only while ours
    store.save(replace(state, jobs=MappingProxyType(remaining)))
    skipped.update({job: f"failed: {message}" for job, message in failed.items()})
    skipped.update({job: "failed: not sent, the lease's hold ran out; run reset again" for job in unsent})
    return ResetReport(tuple(j for j in done if j not in failed), MappingProxyType(skipped))


def _send(
    writer: Writer, fence: HoldFence, resets: Sequence[tuple[str, Sequence[str]]]
) -> tuple[list[str], dict[str, str]]:
    """The reset lines of each job, in the fence's batches: the jobs sent, and scontrol's error per job."""
    done: list[str] = []
    per_job: dict[str, str] = {}
    for batch in fence.batches(resets):
        answers, other = writer.run_lines([line for _, lines in batch.items for line in lines])
        for line in other:
            logger.warning("scontrol: %s", line)
        per_job.update(answers)
        done.extend(job_id for job_id, _ in batch.items)
    return done, per_job
