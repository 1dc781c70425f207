"""Whose value a job holds: the state's memory checked against every write on record.

Sits in the cycle, before the plan. The state file says what the daemon
last wrote to each job and the job's own nice before it. That is not
enough when time goes back (SPEC §8): a slurmctld killed before it saved
our latest writes (or a `reset`) comes back with values we wrote earlier;
a state file lost, corrupt or restored from a backup knows nothing of jobs
that hold our values. Taken for the users' own, those values would be
kept for good and "restored" by `reset`.

So before each plan, every pending job whose value the memory does not
explain is looked up in the ledger of writes (history.sqlite's `writes`,
through `WriteLedger`): a value we once wrote to that job is ours, and the
own nice recorded with that write is the job's. A nice below
LABEL_NICE_BELOW that no record explains is a label too (an earlier
install's): its own nice is unknown, counted as 0 and never "restored"
(docs/rule.md §5, "Whose value it is"). The ledger is asked once per job
and value in a process; a job written since is asked again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Protocol

import numpy as np

from slurm_drf.config.settings import MODES
from slurm_drf.cycle.store import StateStore
from slurm_drf.errors import DrfError
from slurm_drf.model.types import PENDING, BoolArray, FloatArray, IntArray, Snapshot
from slurm_drf.policy.ownership import LABEL_NICE_BELOW, JobMemory, Recalled, is_label_nice
from slurm_drf.policy.state import PolicyState

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LedgerWrite:
    """One value the daemon sent to one job, as recorded.

    `user_nice` is the own nice the daemon kept in it (None where the
    record predates that column, or the own nice was unknown);
    `old_value` is what Slurm showed before the write.
    """

    mode: str
    value: int
    user_nice: int | None
    old_value: int | None


class WriteLedger(Protocol):
    """Every value the daemon wrote, per job, oldest first (trail.history_db.HistoryLedger)."""

    def writes_of(self, job_ids: Sequence[str]) -> Mapping[str, Sequence[LedgerWrite]]: ...


@dataclass(frozen=True, slots=True)
class Recovered:
    """What one reconciliation found that the state did not know."""

    older: int = 0  # jobs holding an older value of ours (slurmctld went back)
    recovered: int = 0  # jobs holding a value of ours the state had lost, own nice from the record
    unknown: int = 0  # jobs holding a label no record explains: own nice unknown
    ledger_error: str | None = None
    restarted: int = 0  # site factors written before slurmctld restarted: not known to be there now

    def __bool__(self) -> bool:
        return bool(self.older or self.recovered or self.unknown or self.ledger_error or self.restarted)

    def text(self, state_path: str) -> str:
        parts = []
        if self.older:
            parts.append(
                f"{self.older} job(s) hold an older value of ours (slurmctld restarted from older state?): "
                "own nice kept, written again"
            )
        if self.recovered:
            parts.append(
                f"{self.recovered} job(s) hold values of ours that {state_path} did not know: "
                "own nice recovered from the history"
            )
        if self.unknown:
            parts.append(
                f"{self.unknown} job(s) hold label values no record explains (an earlier install's?): "
                "their own nice is unknown, counted as 0, and `slurm-drf reset --assume-own 0` gives them 0"
            )
        if self.restarted:
            parts.append(
                f"slurmctld restarted since the last cycle: {self.restarted} job(s)' site factors cannot be "
                "read back (it may have come back from older state), so they are written again"
            )
        if self.ledger_error:
            parts.append(f"the history could not be read ({self.ledger_error}): only labels were recognised")
        return "; ".join(parts)


class Recall:
    """The daemon's memory made whole: the state, the ledger and the label rule. Long-lived, one per process."""

    def __init__(self, ledger: WriteLedger | None) -> None:
        self._ledger = ledger
        # job id -> its writes on record, for jobs asked about (pruned to pending jobs each cycle).
        self._asked: dict[str, tuple[LedgerWrite, ...]] = {}
        self._last_error: str | None = None

    def forget(self, job_ids: Sequence[str]) -> None:
        """Jobs written since they were asked about: their record has grown."""
        for job_id in job_ids:
            self._asked.pop(job_id, None)

    def reconcile(self, snapshot: Snapshot, state: PolicyState) -> tuple[PolicyState, Recovered]:
        """The state with a memory for every pending job that holds a value of ours; what was found."""
        table = snapshot.table
        pending = table.states.index(PENDING) if PENDING in table.states else -1
        rows = np.flatnonzero(table.state == pending)
        ids = [table.job_id[i] for i in rows.tolist()]
        memory = state.memory
        nice_all, priority_all = table.nice[rows], table.priority[rows]
        explained = _explained(memory.recall(table.plain_number[rows], lambda: ids), nice_all, priority_all)
        unexplained = np.flatnonzero(~explained).tolist()
        nice, priority = nice_all.tolist(), priority_all.tolist()
        if self._asked:  # jobs no longer pending let go; before asking, as all it asks about are pending
            kept = set(ids)
            self._asked = {job: writes for job, writes in self._asked.items() if job in kept}
        error = self._ask([ids[k] for k in unexplained if ids[k] not in self._asked])
        # Said once, not every cycle it lasts.
        error, self._last_error = (error if error != self._last_error else None), error
        found: dict[str, JobMemory] = {}
        counts = {"older": 0, "recovered": 0, "unknown": 0, "placed": 0}
        label, asked, remembered = (nice_all < LABEL_NICE_BELOW).tolist(), self._asked, len(memory) > 0
        placed = _placed(table.submit_time[rows], state.placed_after).tolist()
        for k in unexplained:
            job_id = ids[k]
            writes = asked.get(job_id, ())
            if not writes and not label[k]:
                continue  # no write of ours on record and no label: its value is somebody's own
            previous = memory.get(job_id) if remembered else None
            recalled = _recall_job(previous, writes, nice[k], priority[k], placed[k])
            if recalled is not None:
                kind, job_memory = recalled
                counts[kind] += 1
                if job_memory is not None:
                    found[job_id] = job_memory
        restarted = 0
        if _restarted(state.controller_started, snapshot.controller_started):
            # squeue does not show site factors: after a restart the memory's may not be Slurm's.
            for job_id, previous in memory.items():
                if previous.mode == "site_factor" and job_id not in found:
                    found[job_id] = replace(previous, written=0)  # never a site factor we write (>= 1)
                    restarted += 1
        report = Recovered(counts["older"], counts["recovered"], counts["unknown"], error, restarted)
        if not found:
            return state, report
        merged = dict(memory.items())
        merged.update(found)
        return replace(state, jobs=MappingProxyType(merged)), report

    def load(self, snapshot: Snapshot, store: StateStore) -> PolicyState:
        """The saved state, reconciled with what `snapshot` shows; what the state did not know, said once."""
        state, found = self.reconcile(snapshot, store.load())
        if found:
            logger.warning("%s", found.text(str(store.path)))
        return state

    def _ask(self, job_ids: Sequence[str]) -> str | None:
        """Look these jobs up in the ledger; the error, if it could not be read (nothing cached then)."""
        if not job_ids or self._ledger is None:
            return None
        try:
            answers = self._ledger.writes_of(job_ids)
        except (DrfError, OSError) as error:
            return str(error)
        for job_id in job_ids:
            self._asked[job_id] = tuple(answers.get(job_id, ()))
        return None


def _recall_job(
    previous: JobMemory | None, writes: Sequence[LedgerWrite], nice: int, priority: int, placed: bool
) -> tuple[str, JobMemory | None] | None:
    """What a job the memory does not explain holds: (older | recovered | unknown | placed, its memory
    now, None to keep the old), or None when its value is somebody's own choice.

    `placed`: submitted after the last cycle. A label on such a job that nothing else explains was
    put there at submission by the job_submit script, which places only jobs without a nice of
    their own (docs/rule.md §8): ours, own nice 0.
    """
    if placed and previous is None and not writes and is_label_nice(nice):
        return "placed", JobMemory(0, nice, "nice", own_known=True)
    match = _match(writes, nice, priority)
    if match is not None:
        mode, value, write = match
        own = _own_from(write, writes)
        if previous is not None and (own is None or previous.own_known):
            # The state is newer than anything the record says of the own nice.
            own = previous.user_nice, previous.own_known
        user_nice, known = own if own is not None else (0, False)
        return ("older" if previous is not None else "recovered"), JobMemory(user_nice, value, mode, own_known=known)
    if not is_label_nice(nice):
        return None
    if previous is not None:
        # A label the record does not hold (history pruned or lost): ours all the same.
        return "older", (replace(previous, written=nice) if previous.mode == "nice" else None)
    own = _own_from(None, writes)
    if own is None:
        return "unknown", JobMemory(0, nice, "nice", own_known=False)
    return "recovered", JobMemory(own[0], nice, "nice", own_known=own[1])


def _placed(submitted: FloatArray, after: float | None) -> BoolArray:
    """Per job: submitted at or after the newest submit time the last cycle saw (none before a first cycle)."""
    if after is None:
        return np.zeros(len(submitted), dtype=np.bool_)
    placed: BoolArray = submitted >= after
    return placed


def _restarted(before: str | None, now: str | None) -> bool:
    return before is not None and now is not None and before != now


def _explained(found: Recalled, nice: IntArray, priority: IntArray) -> BoolArray:
    """Per job: its value is the one the memory says we last wrote, or plainly nobody's but its
    owner's (a site factor cannot be read back: the memory is all there is)."""
    codes = {name: code for code, name in enumerate(MODES)}
    mode = np.full(len(nice), -1, dtype=np.int64)
    mode[found.at] = found.mode
    written = np.zeros(len(nice), dtype=np.int64)
    written[found.at] = found.written
    label = nice < LABEL_NICE_BELOW
    explained: BoolArray = (
        ((mode == codes["nice"]) & (nice == written))
        | ((mode == codes["priority"]) & (priority == written) & ~label)
        | ((mode == codes["site_factor"]) & ~label)
    )
    return explained


def _match(writes: Sequence[LedgerWrite], nice: int, priority: int) -> tuple[str, int, LedgerWrite] | None:
    """The latest write on record of the value the job holds now: (mode, value, write)."""
    for write in reversed(writes):
        if write.mode == "nice" and write.value == nice:
            return "nice", nice, write
        if write.mode == "priority" and write.value == priority:
            return "priority", priority, write
    return None


def _own_from(write: LedgerWrite | None, writes: Sequence[LedgerWrite]) -> tuple[int, bool] | None:
    """The job's own nice by the record: the one kept with `write` (else with the latest write
    that kept one), else, for records from before that was kept, the latest nice Slurm showed
    before a write that was not a value of ours; None when the record cannot tell."""
    if write is not None and write.user_nice is not None:
        return write.user_nice, True
    for earlier in reversed(writes):
        if earlier.user_nice is not None:
            return earlier.user_nice, True
    ours = {w.value for w in writes if w.mode == "nice"}
    for earlier in reversed(writes):
        old = earlier.old_value
        if earlier.mode == "nice" and old is not None and old not in ours and not is_label_nice(old):
            return old, True
    return None
