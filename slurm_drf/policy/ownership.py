"""Whose value a job holds: the one place the daemon's ownership of values is decided.

A cycle meets it three times, in this order, and nowhere else:

1. `JobMemories.recall`: what the state remembers of the jobs Slurm shows (the own nice
   each had before we first wrote it, the value written, the mode that wrote it);
2. `adjust_for_memory`: per job, whose each part of what Slurm shows is (`ValueParts`): the
   user's own nice, our part, the base priority without it (docs/rule.md §5, "Whose value it
   is"; a nice below `LABEL_NICE_BELOW` is never a person's);
3. `remember`: the memory after this cycle's writes (`Chosen`), saved before they are sent.

Pure, like the rest of the policy: `cycle.store` persists the memory, `cycle.recall` makes it
whole from the record of writes.
"""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterator, Mapping, Sequence, ValuesView
from dataclasses import dataclass
from typing import Final, NamedTuple

import numpy as np

from slurm_drf.config.settings import MODES
from slurm_drf.model.types import BoolArray, IntArray, plain_number

# No person sets a nice below this by hand (sites' hand-set nices stay within
# +/-10,000; a negative one needs operator rights), while slurm-drf's values in
# nice mode reach -2147483645. A nice below it is a label some slurm-drf
# wrote, never a user's own (docs/rule.md §5, "Whose value it is").
LABEL_NICE_BELOW: Final = -1_000_000


def is_label_nice(nice: int) -> bool:
    """A nice no person sets: a slurm-drf label, whoever wrote it."""
    return nice < LABEL_NICE_BELOW


@dataclass(frozen=True, slots=True)
class JobMemory:
    """What the daemon remembers of one job it wrote to.

    `user_nice` is the job's own nice before our value; `own_known` is False
    when no record says what it was (the job held a label of an earlier
    install, or of a lost state): the order then counts it as 0, and
    `reset` leaves such a job alone unless told what to give it.
    """

    user_nice: int
    written: int
    mode: str
    own_known: bool = True


@dataclass(frozen=True, slots=True, eq=False)
class Recalled:
    """The memory of some jobs, as columns: `at` are the positions (into the ids asked about)
    of those the memory holds, the other columns what it holds of each; `mode` indexes MODES."""

    at: IntArray
    user_nice: IntArray
    written: IntArray
    mode: IntArray
    own_known: BoolArray


class JobMemories(Mapping[str, JobMemory]):
    """The daemon's memory of the jobs it wrote to, as columns: a Mapping of job id to JobMemory
    to read one job, joined to a snapshot's jobs in numpy (`recall`) to read them all.

    Jobs are kept sorted by number (`plain_number` of the id); an id that is
    not plain digits (a test's, the simulator's labels) after them, found by
    name. Modes are codes into `modes`, MODES first.
    """

    __slots__ = ("_count", "_mode", "_modes", "_number", "_others", "_own_known", "_user_nice", "_written")

    def __init__(self, memory: Mapping[str, JobMemory]) -> None:
        values = list(memory.values())
        modes = list(MODES)
        codes = {name: code for code, name in enumerate(modes)}
        for value in values:
            if value.mode not in codes:
                codes[value.mode] = len(modes)
                modes.append(value.mode)
        count = len(values)
        self._build(
            list(memory),
            np.fromiter((m.user_nice for m in values), dtype=np.int64, count=count),
            np.fromiter((m.written for m in values), dtype=np.int64, count=count),
            np.fromiter((codes[m.mode] for m in values), dtype=np.int64, count=count),
            np.fromiter((m.own_known for m in values), dtype=np.bool_, count=count),
            tuple(modes),
        )

    @classmethod
    def from_columns(
        cls,
        keys: Sequence[str],
        numbers: IntArray,
        user_nice: IntArray,
        written: IntArray,
        mode: IntArray,
        own_known: BoolArray,
    ) -> JobMemories:
        """From columns aligned with `keys` (their `plain_number`s in `numbers`), `mode` indexing MODES."""
        memory = cls.__new__(cls)
        memory._build(keys, user_nice, written, mode, own_known, MODES, numbers)
        return memory

    def _build(
        self,
        keys: Sequence[str],
        user_nice: IntArray,
        written: IntArray,
        mode: IntArray,
        own_known: BoolArray,
        modes: tuple[str, ...],
        numbers: IntArray | None = None,
    ) -> None:
        if numbers is None:
            numbers = np.fromiter(map(plain_number, keys), dtype=np.int64, count=len(keys))
        plain = np.flatnonzero(numbers > 0)
        plain = plain[np.argsort(numbers[plain], kind="stable")]
        others = np.flatnonzero(numbers == 0)
        rows = np.concatenate([plain, others])
        self._count = len(plain)
        self._number = numbers[plain]
        self._others = {keys[k]: self._count + i for i, k in enumerate(others.tolist())}
        self._modes = modes
        self._user_nice = user_nice[rows]
        self._written = written[rows]
        self._mode = mode[rows]
        self._own_known = own_known[rows]

    @classmethod
    def of(cls, memory: Mapping[str, JobMemory]) -> JobMemories:
        return memory if isinstance(memory, JobMemories) else cls(memory)

    def find(self, numbers: IntArray, job_ids: Callable[[], Sequence[str]]) -> IntArray:
        """Per job (its `plain_number`; `job_ids` names them, asked only for ids not plain):
        its row in the columns, -1 when the memory has none."""
        found = np.full(len(numbers), -1, dtype=np.int64)
        if self._count:
            at = np.minimum(np.searchsorted(self._number, numbers), self._count - 1)
            hit = (numbers > 0) & (self._number[at] == numbers)
            found[hit] = at[hit]
        if self._others:
            ids = job_ids()
            for k in np.flatnonzero(numbers == 0).tolist():
                found[k] = self._others.get(ids[k], -1)
        return found

    def recall(self, numbers: IntArray, job_ids: Callable[[], Sequence[str]]) -> Recalled:
        """What the memory holds of these jobs (see `find`), as columns."""
        found = self.find(numbers, job_ids) if len(self._mode) else np.full(len(numbers), -1, dtype=np.int64)
        at = np.flatnonzero(found >= 0)
        rows = found[at]
        return Recalled(at, self._user_nice[rows], self._written[rows], self._mode[rows], self._own_known[rows])

    @property
    def unknown(self) -> int:
        """How many jobs' own nice is unknown."""
        return int(np.count_nonzero(~self._own_known))

    def _row(self, row: int) -> JobMemory:
        return JobMemory(
            int(self._user_nice[row]), int(self._written[row]), self._modes[self._mode[row]], bool(self._own_known[row])
        )

    def _keys(self) -> list[str]:
        return [*map(str, self._number.tolist()), *self._others]

    def __getitem__(self, key: str) -> JobMemory:
        number = plain_number(key) if isinstance(key, str) else 0
        if number:
            at = int(np.searchsorted(self._number, number))
            if at < self._count and self._number[at] == number:
                return self._row(at)
        elif key in self._others:
            return self._row(self._others[key])
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._mode)

    def items(self) -> ItemsView[str, JobMemory]:
        return _Items(self)

    def values(self) -> ValuesView[JobMemory]:
        return _Values(self)

    def rows(self) -> list[JobMemory]:
        """Every job's memory, in the order of iteration."""
        modes = self._modes
        return [
            JobMemory(user, written, modes[mode], known)
            for user, written, mode, known in zip(
                self._user_nice.tolist(),
                self._written.tolist(),
                self._mode.tolist(),
                self._own_known.tolist(),
                strict=True,
            )
        ]

    def columns(self) -> tuple[list[str], list[int], list[int], list[str], list[bool]]:
        """Job ids, own nice, value written, mode and whether the own nice is known, as lists."""
        modes = self._modes
        return (
            self._keys(),
            self._user_nice.tolist(),
            self._written.tolist(),
            [modes[m] for m in self._mode.tolist()],
            self._own_known.tolist(),
        )


class _Items(ItemsView[str, JobMemory]):
    _mapping: JobMemories

    def __iter__(self) -> Iterator[tuple[str, JobMemory]]:
        memory = self._mapping
        return iter(zip(memory._keys(), memory.rows(), strict=True))


class _Values(ValuesView[JobMemory]):
    _mapping: JobMemories

    def __iter__(self) -> Iterator[JobMemory]:
        return iter(self._mapping.rows())


EMPTY_MEMORY: Final = JobMemories({})


# The codes of `Recalled.mode`: the index of the mode that wrote the value remembered.
_NICE: Final = MODES.index("nice")
_PRIORITY: Final = MODES.index("priority")


class ValueParts(NamedTuple):
    """Whose each part of what Slurm shows of some pending jobs is (`adjust_for_memory`), per job."""

    base: IntArray
    """Slurm's priority with this daemon's adjustment taken out."""
    own_nice: IntArray
    """The user's own nice: what the job had before we first wrote it."""
    current: list[int | None]
    """The value Slurm has now in this mode (a site factor: the one we remember writing)."""
    our_part: IntArray
    """Our part of the value this mode last wrote: the nice without the user's, the site factor, the priority."""
    ours: BoolArray
    """Whether Slurm shows a value of ours (else `our_part` is 0 and means nothing)."""


def adjust_for_memory(
    priority: IntArray,
    nice: IntArray,
    site_factor: Sequence[int | None],
    mode: str,
    recalled: Recalled,
) -> ValueParts:
    """Per job: base priority, the user's own nice, the value Slurm has now,
    our part of the value this mode last wrote (the nice without the user's,
    the site factor, the priority), and whether there is one (`ValueParts`).

    Base priority is Slurm's with this daemon's adjustment removed. The
    user's nice is what the job had before we first wrote it. A job's nice
    is never taken for its own while it is one of ours (docs/rule.md §5,
    "Whose value it is"): the value we last wrote, or any nice below
    LABEL_NICE_BELOW, which no person sets (an older value of ours that a
    restarted slurmctld brought back, or a label of an earlier install).
    Such a job keeps the own nice we remember (0 when we remember none) and
    is written again as needed. Any other nice than ours is somebody's new choice
    (the user's or an admin's): it becomes the job's own, and our label is
    written again beside it. site_factor cannot be read back from squeue,
    so its current value is the one we remember writing. A priority
    somebody else changed is not ours any more.
    """
    # In priority mode the daemon owns the order: Slurm's own priority is
    # gone once written, so within an account submit order decides, for
    # touched and untouched jobs alike (else the first write would reorder).
    base = priority.copy() if mode != "priority" else np.zeros_like(priority)
    own = nice.copy()
    if mode == "nice":
        current: list[int | None] = nice.tolist()
    elif mode == "priority":
        current = priority.tolist()
    else:
        current = list(site_factor)
    ours = np.zeros(len(priority), dtype=np.bool_)
    our_part = np.zeros(len(priority), dtype=np.int64)
    label = nice < LABEL_NICE_BELOW
    if not len(recalled.at):
        _not_own(label, own, base, mode, nice)
        return ValueParts(base, own, current, our_part, ours)
    at, user, written, by = recalled.at, recalled.user_nice, recalled.written, recalled.mode
    # The user's nice, whatever mode wrote last: nice mode's value is ours
    # while Slurm shows it or an older label of ours; priority mode made
    # Slurm zero the nice.
    shows_ours = nice[at] == written
    restore = ((by == _NICE) & shows_ours) | label[at] | (by == _PRIORITY)
    own[at[restore]] = user[restore]
    label[at[restore]] = False
    _not_own(label, own, base, mode, nice)
    # Another mode's value is undone before this mode writes: only this mode's count here.
    same = by == MODES.index(mode)
    at, written, user = at[same], written[same], user[same]
    if mode == "nice":
        base[at] = priority[at] + (nice[at] - own[at])
        # Our part of what we last wrote: its label is kept, and a job that
        # shows anything else (a new own nice, an older value of ours) is
        # written again with it.
        our_part[at] = written - user
        ours[at] = True
    elif mode == "site_factor":
        for k, value in zip(at.tolist(), written.tolist(), strict=True):
            if current[k] is None:
                current[k] = value
            ours[k] = current[k] == value
        base[at] -= written
        our_part[at] = written
    else:
        ours[at] = priority[at] == written
        our_part[at] = written
    return ValueParts(base, own, current, our_part, ours)


def _not_own(label: BoolArray, own: IntArray, base: IntArray, mode: str, nice: IntArray) -> None:
    """Jobs holding a label nobody remembers writing: own nice 0, our adjustment out of the base."""
    if not label.any():
        return
    own[label] = 0
    if mode != "priority":
        base[label] += nice[label]


@dataclass(frozen=True, slots=True)
class Chosen:
    """A job to write this cycle: what a write and the memory of it (`remember`) take from its JobPlan."""

    job_id: str
    value: int
    current: int | None
    user_nice: int


def remember(
    previous: Mapping[str, JobMemory], mode: str, chosen: Sequence[Chosen], pending_ids: set[str], undone: set[str]
) -> dict[str, JobMemory]:
    """Memory after this cycle's writes: kept for jobs still pending, new for jobs written now.

    What another mode wrote is forgotten once it was undone (`undone`); a
    held job keeps that memory until it is released and can be undone.
    """
    memory = {job: m for job, m in previous.items() if job in pending_ids and (m.mode == mode or job not in undone)}
    for job in chosen:
        known = _own_known(job, previous.get(job.job_id), mode)
        memory[job.job_id] = JobMemory(job.user_nice, job.value, mode, own_known=known)
    return memory


def _own_known(job: Chosen, previous: JobMemory | None, mode: str) -> bool:
    """Whether the own nice kept in a job's new value is known: it stays unknown while the
    job shows a value of ours; a nice of somebody's choosing is theirs, and known."""
    if previous is None or previous.own_known:
        return True
    current = job.current
    return (
        mode == "nice"
        and previous.mode == "nice"
        and current is not None
        and current != previous.written
        and not is_label_nice(current)
    )
