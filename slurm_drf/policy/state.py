"""What the policy carries from one plan to the next: tie wins, the epoch, each job's memory.

Pure. Persisting it is `cycle.store`'s job; what the memory of each job means (whose value it
holds) is `policy.ownership`'s.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, TypeVar

import numpy as np

from slurm_drf.model.types import FloatArray
from slurm_drf.policy.decay import decay_factor
from slurm_drf.policy.ownership import EMPTY_MEMORY, JobMemories, JobMemory
from slurm_drf.policy.rule import rotation_key

try:
    # hashlib's blake2b is this one (hashlib never takes BLAKE2 from OpenSSL): imported from here, a
    # plan does not load the OpenSSL bindings `import hashlib` loads (milliseconds of every CLI run).
    from _blake2 import blake2b
except ImportError:  # a Python without CPython's _blake2 module
    from hashlib import blake2b


@dataclass(frozen=True, slots=True)
class PolicyState:
    """The engine's memory between cycles; the daemon persists it.

    `tie_wins` are the committed, decayed win counts; `plan_wins` the wins
    the last plan counted, committed when the epoch next advances.
    """

    epoch: int = 0
    fingerprint: str = ""
    tie_wins: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    plan_wins: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    # Any mapping given becomes JobMemories.
    jobs: Mapping[str, JobMemory] = field(default_factory=lambda: EMPTY_MEMORY)
    # slurmctld's BOOT_TIME when the state was saved (Snapshot.controller_started).
    controller_started: str | None = None
    # The newest submit time (slurmctld's clock) the last cycle saw: a pending job submitted at or
    # after it that holds a label was placed at submission (docs/rule.md §8), its own nice 0.
    placed_after: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.jobs, JobMemories):
            object.__setattr__(self, "jobs", JobMemories(self.jobs))

    @property
    def memory(self) -> JobMemories:
        """`jobs` as the columns they are kept in."""
        assert isinstance(self.jobs, JobMemories)
        return self.jobs


EMPTY_STATE: Final = PolicyState()


def rotation_key_list(epoch: int, accounts: Sequence[str]) -> list[int]:
    """`rotation_key` of each account, in one loop (a tie of 100,000 accounts makes as many):
    the digests joined, read as big-endian 64-bit integers at once.

    The epoch's prefix is hashed once and each key continues a copy of that
    state with its account's name (the same digest as hashing the whole text:
    a hash reads its input as one stream); copying a state costs less than
    making a hash object, which parses its parameters each time.
    """
    prefixed = blake2b(f"{epoch}\0".encode(), digest_size=8)
    digests = bytearray()
    for account in accounts:
        key = prefixed.copy()
        key.update(account.encode())
        digests += key.digest()
    keys: list[int] = np.frombuffer(digests, dtype=">u8").tolist()
    return keys


def running_fingerprint(running_ids: Iterable[str]) -> str:
    """Identifies the set of running jobs: the epoch advances when it changes."""
    return blake2b("\n".join(sorted(running_ids)).encode(), digest_size=16).hexdigest()


def advance_state(state: PolicyState, fingerprint: str, half_life_cycles: float) -> tuple[int, dict[str, float]]:
    """The epoch and committed tie wins this plan starts from: a new epoch is one cycle on."""
    if state.fingerprint == fingerprint:
        return state.epoch, dict(state.tie_wins)
    factor = decay_factor(1.0, half_life_cycles)
    merged: dict[str, float] = {}
    for account in set(state.tie_wins) | set(state.plan_wins):
        value = (state.tie_wins.get(account, 0.0) + state.plan_wins.get(account, 0.0)) * factor
        if value > 1e-6:
            merged[account] = value
    return state.epoch + 1, merged


_Q = TypeVar("_Q")  # a queue of turns: an account's code, a child's index
_T = TypeVar("_T")  # a turn: a row, a run of rows

# From how many keys `TieBook.take_one_each` sorts them in numpy (below, Python's sort is quicker).
_RANKED_AT_ONCE: Final = 64


@dataclass(slots=True, eq=False)
class TieBook:
    """The tie rule of one plan and its memory (docs/rule.md §2, "Ties never starve anyone").

    Among rows (accounts, tree nodes) of exactly the same share and share
    vector the rule takes the one of fewer tie wins, then of the smaller
    rotation key of `epoch`, then of the smaller key (which only makes
    entries unique: two rotation keys alike are a 2**-64 event). `wins`
    is what the rule compares: the `committed` wins the plan started from
    plus the wins it counted itself, `plan_wins` (one dict as both while
    nothing is committed: `open`). Both engines, flat and tree, order
    every tie through the book's two takers, `take_one_each` (a tie of one
    turn each) and `take_turns` (queues of several), and nothing else
    decides a tie; the plan hands its `state` on. Keys are account names,
    or tree keys over a tree.
    """

    epoch: int = 0
    wins: dict[str, float] = field(default_factory=dict)
    plan_wins: dict[str, float] = field(default_factory=dict)
    committed: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    fingerprint: str = ""
    # Rotation keys of `epoch` made so far: a key may be in many ties of one plan.
    _rotation: dict[str, int] = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, state: PolicyState, fingerprint: str, half_life_cycles: float) -> TieBook:
        """The book a plan starts from: the epoch and the committed wins after `state` (`advance_state`)."""
        epoch, committed = advance_state(state, fingerprint, half_life_cycles)
        wins = dict(committed)
        # With no wins committed the wins are the plan's own, one dict as both (`win`, `win_each`
        # count each win once in it): a tie of 20,000 accounts then updates one dict, not two.
        return cls(epoch, wins, {} if committed else wins, MappingProxyType(committed), fingerprint)

    def count(self, key: str) -> float:
        return self.wins.get(key, 0.0)

    def rotation(self, key: str) -> int:
        return rotation_key(self.epoch, key)

    def rotations(self, keys: Sequence[str]) -> list[int]:
        """`rotation` of each of `keys`, each made once a plan (the first tie's all at once)."""
        known = self._rotation
        if not known:
            made = rotation_key_list(self.epoch, keys)
            known.update(zip(keys, made, strict=True))
            return made
        missing = list(itertools.filterfalse(known.__contains__, keys))
        if missing:
            known.update(zip(missing, rotation_key_list(self.epoch, missing), strict=True))
        return list(map(known.__getitem__, keys))

    def rank(self, key: str) -> tuple[float, int, str]:
        """The rule's key among full ties, smaller first: (tie wins, rotation key, key)."""
        return (self.wins.get(key, 0.0), rotation_key(self.epoch, key), key)

    def take_one_each(self, keys: Sequence[str]) -> tuple[list[int], list[float]]:
        """The tie rule over a tie of `keys` (distinct), one turn each: their indexes in the order of
        `rank`, smaller first; each one placed while another waits (all but the last) wins a tie.
        Returns the order and the wins each held when it was placed.

        One sort of (wins, rotation key) for a tie of many (100,000 accounts,
        or users of one account); the key decides only where both are alike,
        a 2**-64 event, and then the whole order is `rank`'s by sorting.
        """
        wins = np.fromiter(map(self.wins.get, keys, itertools.repeat(0.0)), dtype=np.float64, count=len(keys))
        if len(keys) < _RANKED_AT_ONCE:
            placed = sorted(range(len(keys)), key=lambda i: self.rank(keys[i]))
        else:
            turns = np.array(self.rotations(keys), dtype=np.uint64)
            order = np.lexsort((turns, wins))
            held, rotation = wins[order], turns[order]
            if np.isnan(wins).any() or ((held[1:] == held[:-1]) & (rotation[1:] == rotation[:-1])).any():
                placed = sorted(range(len(keys)), key=lambda i: self.rank(keys[i]))
            else:
                placed = order.tolist()
        held = wins[placed]
        self.win_each([keys[i] for i in placed[:-1]], held[:-1])
        return placed, held.tolist()

    def take_turns(self, queues: Mapping[_Q, list[_T]], names: Mapping[_Q, str]) -> tuple[list[_T], list[float], int]:
        """The tie rule over queues of turns (a queue's turns in order, `names` its key): while another
        queue waits, the one of smaller `rank` takes its next turn and wins a tie; the last one left
        takes the rest. Returns the turns in the order taken, the wins their queue held when each was
        taken, and how many won a tie (the first ones)."""
        waiting = {q: turns[::-1] for q, turns in queues.items() if turns}  # pop() takes the next turn
        heap = [(*self.rank(names[q]), q) for q in waiting]
        heapq.heapify(heap)
        out: list[_T] = []
        held: list[float] = []
        while len(heap) > 1:
            wins, rotation, name, q = heapq.heappop(heap)
            out.append(waiting[q].pop())
            held.append(wins)
            wins = self.win(name)
            if waiting[q]:
                heapq.heappush(heap, (wins, rotation, name, q))
        won = len(out)
        for wins, _, _, q in heap:
            rest = waiting[q][::-1]
            out.extend(rest)
            held.extend([wins] * len(rest))
        return out, held, won

    def win(self, key: str) -> float:
        """`key` won a tie (it was placed while another waited at its share): its wins now."""
        won = self.wins[key] = self.wins.get(key, 0.0) + 1.0
        if self.plan_wins is not self.wins:
            self.plan_wins[key] = self.plan_wins.get(key, 0.0) + 1.0
        return won

    def win_each(self, keys: Sequence[str], held: FloatArray) -> None:
        """Each of `keys` (distinct) won one tie, holding `held[k]` wins: one update for a tie of many."""
        self.wins.update(zip(keys, (held + 1.0).tolist(), strict=True))
        if self.plan_wins is self.wins:  # no wins committed: counted once, above
            return
        if not self.plan_wins:  # the plan's first tie: no lookups, every key's first win
            self.plan_wins.update(zip(keys, itertools.repeat(1.0)))
            return
        won = np.fromiter(map(self.plan_wins.get, keys, itertools.repeat(0.0)), dtype=np.float64, count=len(keys))
        self.plan_wins.update(zip(keys, (won + 1.0).tolist(), strict=True))

    def state(self, jobs: Mapping[str, JobMemory]) -> PolicyState:
        """The state after the plan: its epoch and fingerprint, the committed wins, the wins it counted."""
        return PolicyState(
            epoch=self.epoch,
            fingerprint=self.fingerprint,
            tie_wins=self.committed,
            plan_wins=MappingProxyType(self.plan_wins),
            jobs=jobs,
        )
