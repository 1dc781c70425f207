"""Who submits each trace job, and the Slurm associations that needs. Pure.

Sits between `trace` and `run`: `parse_users` reads `--users`,
`plan_users` decides the Unix user every trace job is submitted as and
refuses, in one line naming them, what cannot be submitted faithfully, and
`plan_associations` says which Slurm accounts and users `--create-accounts`
makes (or refuses the missing ones without it). The host's users are asked
through a function passed in (`run` hands it `pwd`), so all of it runs
without a host.

Three choices (`--users`):

- `trace` (the default): each job as its trace user. Each must be a Unix
  user of this host, unless `--create-unix-users` (a test host only) makes
  the missing ones.
- `invoking`: every job as the user running the replay (the trace's user
  stays in the job's comment and the result).
- `pool=NAME,...`: the trace's users onto these existing Unix users: the
  users of each account, by name, take the pool's users in turn, so that
  an account's users stay apart as long as the pool is large enough.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Final, Literal

from slurm_drf.replay.trace import NAME_RULE, ReplayInputError, account_paths, is_slurm_name, shown
from slurm_drf.sim.workload import Workload, WorkloadJob

USERS_TRACE: Final = "trace"
USERS_INVOKING: Final = "invoking"
POOL_PREFIX: Final = "pool="
# A user is a name Slurm's tools take as one word: the one rule (`trace.SLURM_NAME`). For
# --create-unix-users also what useradd takes without --badname (shadow's default).
_NEW_UNIX_USER: Final = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
# Names shown in a refusal; the rest are counted.
SHOWN: Final = 10

Mode = Literal["trace", "invoking", "pool"]


@dataclass(frozen=True, slots=True)
class UserChoice:
    """`--users` as given."""

    mode: Mode = "trace"
    pool: tuple[str, ...] = ()


def _listed(names: Iterable[str]) -> str:
    """Names for one line: the first SHOWN, then how many more."""
    names = list(names)
    shown = ", ".join(names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more ({len(names)})" if len(names) > SHOWN else "")


def parse_users(text: str) -> UserChoice:
    """`--users`: trace, invoking, or pool=NAME,NAME,..."""
    if text == USERS_TRACE:
        return UserChoice("trace")
    if text == USERS_INVOKING:
        return UserChoice("invoking")
    if text.startswith(POOL_PREFIX):
        names = tuple(name.strip() for name in text[len(POOL_PREFIX) :].split(","))
        bad = [name for name in names if not is_slurm_name(name)]
        if bad:
            raise ReplayInputError(f"--users {shown(text)}: {shown(bad[0])} is not a user name ({NAME_RULE})")
        return UserChoice("pool", tuple(dict.fromkeys(names)))
    raise ReplayInputError(
        f"--users {shown(text)}: expected {USERS_TRACE}, {USERS_INVOKING} or {POOL_PREFIX}NAME,NAME,... "
        "(existing Unix users)"
    )


@dataclass(frozen=True, slots=True)
class UserPlan:
    """The Unix user each trace job is submitted as."""

    mode: Mode
    invoking: str
    # (account, trace user) -> the Unix user who submits its jobs.
    submitters: Mapping[tuple[str, str], str]
    # Unix users --create-unix-users makes before anything is submitted.
    create: tuple[str, ...] = ()

    def submitter(self, job: WorkloadJob) -> str:
        return self.submitters.get((job.account, job.user), self.invoking)

    def run_as(self, job: WorkloadJob) -> str | None:
        """The user to run sbatch as, or None: as the replay itself."""
        user = self.submitter(job)
        return None if user == self.invoking else user

    def associations(self) -> set[tuple[str, str]]:
        """(account, user) of every association the jobs are submitted under."""
        return {(account, user) for (account, _), user in self.submitters.items()}

    def note(self) -> str:
        """How the jobs were submitted, for the result's notes."""
        users = sorted(set(self.submitters.values()))
        if self.mode == "invoking":
            return (
                f"jobs submitted by {self.invoking} under the trace's accounts (--users invoking); "
                "the trace's user of each job is in its comment"
            )
        if self.mode == "pool":
            return (
                f"jobs submitted as the pool {', '.join(users)} (--users pool=...): each account's trace users, "
                "by name, take the pool's users in turn; the trace's user of each job is in its comment"
            )
        created = f"; created Unix user(s) {', '.join(self.create)} (they stay)" if self.create else ""
        return f"jobs submitted as their trace users ({_listed(users)}){created}"


def _users_by_account(workload: Workload) -> dict[str, list[str]]:
    """Each account's trace users, by name."""
    users: dict[str, set[str]] = {}
    for job in workload.jobs:
        users.setdefault(job.account, set()).add(job.user)
    return {account: sorted(names) for account, names in users.items()}


def plan_users(
    workload: Workload,
    choice: UserChoice,
    invoking: str,
    is_unix_user: Callable[[str], bool],
    *,
    create_unix_users: bool = False,
    root: bool = False,
) -> UserPlan:
    """Who submits each job; one line naming them for users that cannot be submitted as."""
    if create_unix_users and choice.mode != "trace":
        raise ReplayInputError(f"--create-unix-users goes with --users {USERS_TRACE}, not --users {choice.mode}")
    by_account = _users_by_account(workload)
    if choice.mode == "invoking":
        return UserPlan("invoking", invoking, {(a, u): invoking for a, names in by_account.items() for u in names})
    if choice.mode == "pool":
        unknown = [name for name in choice.pool if not is_unix_user(name)]
        if unknown:
            raise ReplayInputError(f"--users pool=...: not Unix users on this host: {_listed(unknown)}")
        submitters = {
            (account, user): choice.pool[index % len(choice.pool)]
            for account, names in by_account.items()
            for index, user in enumerate(names)
        }
        plan = UserPlan("pool", invoking, submitters)
    else:
        plan = _trace_plan(workload, by_account, invoking, is_unix_user, create_unix_users)
    others = sorted({user for user in plan.submitters.values() if user != invoking})
    if others and not root:
        raise ReplayInputError(
            f"submitting as other users ({_listed(others)}) needs root (sbatch through runuser): "
            f"run the replay as root, or pass --users {USERS_INVOKING}"
        )
    return plan


def _trace_plan(
    workload: Workload,
    by_account: Mapping[str, list[str]],
    invoking: str,
    is_unix_user: Callable[[str], bool],
    create: bool,
) -> UserPlan:
    hint = f"--users {USERS_INVOKING} or --users {POOL_PREFIX}NAME,... (existing Unix users)"
    nameless = next((job for job in workload.jobs if not job.user), None)
    if nameless is not None:
        raise ReplayInputError(
            f"trace job {nameless.job_id} (account {nameless.account}) has no user to submit it as: pass {hint}"
        )
    users = sorted({user for names in by_account.values() for user in names})
    odd = [user for user in users if not is_slurm_name(user)]
    if odd:
        raise ReplayInputError(
            f"trace user(s) that are no plain user names for Slurm: {_listed(map(shown, odd))} ({NAME_RULE}); "
            f"pass {hint}"
        )
    missing = [user for user in users if not is_unix_user(user)]
    if missing and not create:
        raise ReplayInputError(
            f"trace user(s) that are not Unix users on this host: {_listed(missing)}; submit as existing users "
            f"with {hint}, or create them (a test host only) with --create-unix-users"
        )
    unfit = [user for user in missing if not _NEW_UNIX_USER.fullmatch(user)]
    if unfit:
        raise ReplayInputError(
            f"--create-unix-users: trace user(s) useradd would not take: {_listed(unfit)}; pass {hint}"
        )
    return UserPlan(
        "trace",
        invoking,
        {(a, u): u for a, names in by_account.items() for u in names},
        create=tuple(missing),
    )


@dataclass(frozen=True, slots=True)
class AssociationPlan:
    """What --create-accounts makes with sacctmgr, in order."""

    accounts: tuple[tuple[str, str | None, int], ...]  # (account, parent or None, fairshare), parents first
    users: tuple[tuple[str, str], ...]  # (account, user): each user a leaf of its account


def plan_associations(workload: Workload, plan: UserPlan, known: Set[tuple[str, str]], create: bool) -> AssociationPlan:
    """The accounts and user associations Slurm lacks; refused in one line without `create`."""
    accounts = {account for account, _ in known}
    wanted = sorted(plan.associations())
    missing_accounts = [a for a in workload.accounts if a not in accounts]
    missing_users = [(a, u) for a, u in wanted if (a, u) not in known]
    if (missing_accounts or missing_users) and not create:
        parts = []
        if missing_accounts:
            parts.append(f"account(s) {_listed(missing_accounts)}")
        lacking = [(a, u) for a, u in missing_users if a in accounts]
        if lacking:
            parts.append(f"user(s) {_listed(f'{u} in {a}' for a, u in lacking)}")
        raise ReplayInputError(
            f"unknown to Slurm: {'; '.join(parts)}; create them with --create-accounts (sacctmgr) "
            "or map the trace to existing accounts and users"
        )
    return AssociationPlan(
        accounts=tuple(row for row in account_paths(workload) if row[0] not in accounts),
        users=tuple(missing_users),
    )
