"""The cycle: read -> plan -> diff -> write -> record.

Sits between the CLI and everything else: it asks a ClusterSource for a
snapshot, the engine for a plan, the writer to apply the plan's `set`
actions, and the StateStore to remember what it did. `run_cycle` is one
cycle (`slurm-drf once`); `reset_jobs` gives jobs their own values back
(`slurm-drf reset`).

Order of side effects in a cycle: the memory is first made whole
(`cycle.recall`: a job holding a value of ours that the state does not
explain is never taken to hold its own); the new memory (each job's own
nice and the value about to be written) is saved BEFORE the writes, so a
crash between the two never loses a user's nice; a write that then fails
is harmless, because the next cycle sees Slurm still holding the user's
value and takes it as theirs. With a lease (two head nodes) the writes go
in batches, each sent only inside the lease's hold (`cycle.fence`); the
ones a lost or too short hold leaves are unsent, and harmless the same way.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Protocol, runtime_checkable

import numpy as np

from slurm_drf import failpoints
from slurm_drf.config.settings import Config
from slurm_drf.cycle.fence import HoldFence
from slurm_drf.cycle.recall import Recall
from slurm_drf.cycle.reclaim import Reclaimed, Reclaimer, run_reclaim
from slurm_drf.cycle.store import StateStore
from slurm_drf.errors import SlurmError
from slurm_drf.model.types import Snapshot
from slurm_drf.policy.decayed_usage import UsageByPool
from slurm_drf.policy.ownership import Chosen, remember
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.policy.state import PolicyState
from slurm_drf.slurm.source import ClusterSource
from slurm_drf.slurm.write import HoldEnded, Write, WriteResult, build_reset_lines, combine_results, is_gone

logger = logging.getLogger(__name__)


class Writer(Protocol):
    def apply(self, writes: Sequence[Write]) -> WriteResult: ...

    def run_lines(self, lines: Sequence[str]) -> tuple[dict[str, str], list[str]]: ...


@runtime_checkable
class DeadlineWriter(Protocol):
    """A writer that can send nothing after a given time (ScontrolWriter, PyslurmWriter): under a lease,
    each batch is sent with the end of the hold (cycle.fence)."""

    def apply_until(self, writes: Sequence[Write], until: float) -> WriteResult: ...


class CycleObserver(Protocol):
    """Told about every cycle by the service loop: audit, metrics, report files."""

    def on_cycle(self, report: CycleReport) -> None: ...

    def on_error(self, error: Exception) -> None: ...


@dataclass(frozen=True, slots=True)
class CycleReport:
    plan: Plan
    snapshot: Snapshot
    writes: tuple[Write, ...]
    result: WriteResult | None
    read_seconds: float
    seconds: float
    deferred: int
    dry_run: bool
    # Jobs whose own nice no record holds (docs/rule.md §5): the history records none for them.
    unknown_own: frozenset[str] = frozenset()
    # The reclaim step's victims (docs/rule.md §9), what it would do in a dry run.
    reclaimed: tuple[Reclaimed, ...] = ()

    def summary(self) -> str:
        pending = sum(1 for order in self.plan.column("order") if order is not None)
        accounts = len(set(self.plan.account_column("account")))
        if self.dry_run or self.result is None:
            done = f"would write {len(self.writes)}"
        else:
            done = f"wrote {self.result.count}"
        text = (
            f"{accounts} accounts, {pending} pending jobs, {done} value(s) in {self.seconds:.2f} s "
            f"(read {self.read_seconds:.2f} s)"
        )
        if self.deferred:
            text += f", {self.deferred} deferred to the next cycle (max_writes_per_cycle)"
        if self.result is not None and self.result.failed:
            text += f", {len(self.result.failed)} failed"
        if self.reclaimed:
            verb = "would requeue" if self.dry_run else "requeued"
            moved = [r for r in self.reclaimed if r.outcome in ("would", "requeued", "cancelled")]
            text += f", {verb} {len(moved)} job(s) for jobs within their guarantees"
        return text


def select_writes(plan: Plan, limit: int) -> tuple[list[Chosen], int]:
    """The jobs to write now: the head of each pool's order first; how many wait.

    Reads the four columns of the plan it needs, not every job's whole row.
    """
    actions, values, orders, pools = (plan.column(name) for name in ("action", "value", "order", "pool"))
    wanted = np.fromiter(
        (i for i, action in enumerate(actions) if action == "set" and values[i] is not None), dtype=np.int64
    )
    # By DRF position, then pool (stable: a tie keeps the plan's order), as arrays, not a key per job.
    indices = wanted.tolist()
    position = np.fromiter((orders[i] or 0 for i in indices), dtype=np.int64, count=len(indices))
    names = [pools[i] or "" for i in indices]
    pool_rank = {name: rank for rank, name in enumerate(sorted(set(names)))}
    by_pool = np.fromiter(map(pool_rank.__getitem__, names), dtype=np.int64, count=len(names))
    head = wanted[np.lexsort((by_pool, position))][:limit].tolist()
    job_ids, current, user_nice = (plan.column(name) for name in ("job_id", "current", "user_nice"))
    chosen = [Chosen(job_ids[i], values[i], current[i], user_nice[i]) for i in head]
    return chosen, max(0, len(wanted) - limit)


@dataclass(frozen=True, slots=True)
class CycleHistory:
    """What the history tells a cycle, read by the layer above from history.sqlite.

    `past` is each account's decayed average allocation (docs/rule.md §6);
    None plans pure DRF. `recall` checks what the state does not explain
    against the record of writes (`cycle.recall`); None recognises labels only.
    """

    past: UsageByPool | None = None
    recall: Recall | None = None
    # With `reclaim:` set: what runs where, the requeues and the cooldown's record of them (cycle.reclaim).
    reclaimer: Reclaimer | None = None


def run_cycle(
    source: ClusterSource,
    writer: Writer,
    config: Config,
    store: StateStore,
    *,
    dry_run: bool = False,
    history: CycleHistory = CycleHistory(),
    guard: Callable[[], None] | None = None,
) -> CycleReport:
    """One cycle; dry_run computes the plan and writes nothing, state included.

    `history` is the past use and the record of writes (`CycleHistory`).
    `guard` renews this daemon's right to write for LEASE_INTERVALS
    intervals of `config.interval`, or raises when it may not write
    (cycle.lease.Lease.confirm); it is called before anything is saved
    and before every batch of writes (cycle.fence.HoldFence).
    """
    with collector_paused():
        return _run_cycle(source, writer, config, store, (dry_run, history, guard))


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic collector off for the block, as it was after it.

    A cycle makes a few objects per job (pyslurm's dicts, Jobs, the plan's
    columns) that live until it ends and hold no reference cycles: left on,
    the collector walks them again and again for garbage there is none of
    (pyslurm's read of 55,000 jobs took 1.88 s with it, 1.44 s without;
    benchmarks/README.md). They are freed by their counts when the cycle
    lets go of them; the collector runs again after the block, as usual.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _run_cycle(
    source: ClusterSource,
    writer: Writer,
    config: Config,
    store: StateStore,
    options: tuple[bool, CycleHistory, Callable[[], None] | None],
) -> CycleReport:
    dry_run, history, guard = options
    reclaimer = history.reclaimer
    past = history.past
    recall = history.recall or Recall(None)
    # What the run needs of its directories, refused before anything is read (a dry run's too).
    store.check()
    started = time.monotonic()
    snapshot = source.fetch_snapshot().columns_only()
    read_seconds = time.monotonic() - started
    failpoints.reached("read")
    state = recall.load(snapshot, store)
    plan = compute_plan(snapshot, config, state, past)
    chosen, deferred = select_writes(plan, config.max_writes_per_cycle)
    writes = tuple(Write(j.job_id, plan.mode, j.value, het_leader=j.job_id in snapshot.het_leaders) for j in chosen)
    if dry_run:
        reclaimed = _reclaim(plan, snapshot, config, reclaimer, None)
        seconds = time.monotonic() - started
        return CycleReport(plan, snapshot, writes, None, read_seconds, seconds, deferred, True, reclaimed=reclaimed)

    # With a lease, the state is saved and every batch of writes sent inside the hold (cycle.fence).
    fence = HoldFence(guard, config.interval)
    fence.confirm()
    pending_ids = set(plan.column("job_id"))
    undone = _reset_other_modes(writer, fence, state, plan, snapshot, pending_ids)
    memory = remember(state.jobs, plan.mode, chosen, pending_ids, undone)
    booted = snapshot.controller_started or state.controller_started
    seen = _newest_submit(snapshot, state.placed_after)
    store.save(replace(plan.state, jobs=MappingProxyType(memory), controller_started=booted, placed_after=seen))
    recall.forget([write.job_id for write in writes])
    failpoints.reached("saved")
    if failpoints.armed("mid_writes") and len(writes) > 1:
        apply_writes(writer, fence, writes[: len(writes) // 2])
        failpoints.reached("mid_writes")
    result = apply_writes(writer, fence, writes)
    answered = {*result.applied, *result.gone, *result.failed}
    unsent = [write.job_id for write in writes if write.job_id not in answered]
    if result.failed or result.gone or unsent:
        # A failed write left the job as it was: forget only what we just added.
        for job_id in (*result.failed, *result.gone, *unsent):
            if job_id in state.jobs and state.jobs[job_id].mode == plan.mode:
                memory[job_id] = state.jobs[job_id]
            else:
                memory.pop(job_id, None)
        # The state may be shared with the other head: saved only while the lease is ours.
        fence.confirm(len(answered), len(writes))
        store.save(replace(plan.state, jobs=MappingProxyType(memory), controller_started=booted, placed_after=seen))
    unknown = frozenset(job for job, m in memory.items() if not m.own_known)
    reclaimed = _reclaim(plan, snapshot, config, reclaimer, fence)
    seconds = time.monotonic() - started
    return CycleReport(plan, snapshot, writes, result, read_seconds, seconds, deferred, False, unknown, reclaimed)


def _reclaim(
    plan: Plan, snapshot: Snapshot, config: Config, reclaimer: Reclaimer | None, fence: HoldFence | None
) -> tuple[Reclaimed, ...]:
    """The reclaim step after the writes (a dry run's: what it would do); a Slurm error there is
    logged and leaves this cycle's writes as they are: the next cycle tries again."""
    if reclaimer is None or config.reclaim is None:
        return ()
    try:
        return run_reclaim(plan, snapshot, config, reclaimer, fence is None, fence.confirm if fence else lambda: None)
    except SlurmError as error:
        logger.warning("reclaim: %s; nothing requeued this cycle", error)
        return ()


def apply_writes(writer: Writer, fence: HoldFence, writes: Sequence[Write]) -> WriteResult:
    """The writes, in the fence's batches (one without a lease); what became of those sent.

    A writer that can stop at the end of the hold (`DeadlineWriter`) is
    told when it ends. The writes not sent (the fence's hold left no time
    for them, or the writer stopped at its end) are in none of the result's
    fields: they wait for the next cycle.
    """
    results: list[WriteResult] = []
    for batch in fence.batches(writes):
        if batch.until is not None and isinstance(writer, DeadlineWriter):
            try:
                result = writer.apply_until(batch.items, batch.until)
            except HoldEnded:
                # Stopped mid-batch (a stall, a paused process): LeaseLost when the lease was taken, saying
                # how many writes went to Slurm (this batch's among them: which of them landed is unknown).
                fence.confirm(_answered(results) + len(batch.items), len(writes))
                raise
        else:
            result = writer.apply(batch.items)
        results.append(result)
        if batch.until is not None and _answered([result]) < len(batch.items):
            logger.warning(
                "%d of %d write(s) wait for the next cycle: the lease's hold (less half an interval) ended "
                "before they were sent",
                len(writes) - _answered(results),
                len(writes),
            )
            break
    return combine_results(results)


def _answered(results: Sequence[WriteResult]) -> int:
    """How many writes these results account for (applied, gone or failed): the ones sent."""
    return sum(len(r.applied) + len(r.gone) + len(r.failed) for r in results)


def _newest_submit(snapshot: Snapshot, before: float | None) -> float | None:
    """The newest submit time in the snapshot (slurmctld's clock), never earlier than `before`."""
    times = snapshot.table.submit_time
    if not len(times):
        return before
    newest = float(times.max())
    return newest if before is None else max(newest, before)


def _reset_other_modes(
    writer: Writer, fence: HoldFence, state: PolicyState, plan: Plan, snapshot: Snapshot, pending: set[str]
) -> set[str]:
    """After a change of mode, undo what the old mode wrote before the new one
    writes; the jobs undone. Held jobs wait: we never write to a held job."""
    if all(memory.mode == plan.mode for memory in state.jobs.values()):
        return set()
    table = snapshot.table
    held = {table.job_id[i] for i in np.flatnonzero(table.held | (table.priority == 0)).tolist()}
    jobs = [
        (job_id, memory)
        for job_id, memory in state.jobs.items()
        if memory.mode != plan.mode and job_id in pending and job_id not in held
    ]
    if not jobs:
        return set()
    logger.info("mode is now %s: giving %d job(s) their own values back first", plan.mode, len(jobs))
    undone: set[str] = set()
    for batch in fence.batches(jobs):
        lines = [
            line for job_id, memory in batch.items for line in build_reset_lines(job_id, memory.mode, memory.user_nice)
        ]
        per_job, other = writer.run_lines(lines)
        for line in other:
            logger.warning("scontrol: %s", line)
        undone.update(job_id for job_id, _ in batch.items if job_id not in per_job or is_gone(per_job[job_id]))
    return undone
