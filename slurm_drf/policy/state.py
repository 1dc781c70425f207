"""What the policy carries from one plan to the next: tie wins, the epoch, each job's memory.

Pure. Persisting it is `cycle.store`'s job.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

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
    jobs: Mapping[str, JobMemory] = field(default_factory=lambda: MappingProxyType({}))
    # slurmctld's BOOT_TIME when the state was saved (Snapshot.controller_started).
    controller_started: str | None = None


EMPTY_STATE: Final = PolicyState()


def rotation_key(epoch: int, account: str) -> int:
    """A per-epoch pseudo-random rank of an account; not its name's order."""
    digest = hashlib.blake2b(f"{epoch}\0{account}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def decay_factor(half_life: float) -> float:
    return float(0.5 ** (1.0 / half_life))


def running_fingerprint(running_ids: Iterable[str]) -> str:
    """Identifies the set of running jobs: the epoch advances when it changes."""
    return hashlib.blake2b("\n".join(sorted(running_ids)).encode(), digest_size=16).hexdigest()


def advance_state(state: PolicyState, fingerprint: str, half_life: float) -> tuple[int, dict[str, float]]:
    """The epoch and committed tie wins this plan starts from."""
    if state.fingerprint == fingerprint:
        return state.epoch, dict(state.tie_wins)
    factor = decay_factor(half_life)
    merged: dict[str, float] = {}
    for account in set(state.tie_wins) | set(state.plan_wins):
        value = (state.tie_wins.get(account, 0.0) + state.plan_wins.get(account, 0.0)) * factor
        if value > 1e-6:
            merged[account] = value
    return state.epoch + 1, merged
