"""What `reclaim:` needs of Slurm, as `check-config` reads it (docs/operations.md, Guarantees and reclaim).

The daemon's reclaim step requeues its victims with `scontrol requeue
Incomplete` and, with `way: cancel`, cancels those that cannot be requeued
with `scancel` (slurm.running.apply_reclaim). slurmctld allows that when

- the job may be requeued: a batch job with its requeue flag, which
  slurm.conf's JobRequeue gives every batch job (1, Slurm's default) or only
  those submitted with --requeue (0);
- the user asking is the job's own, root, SlurmUser, or has an AdminLevel of
  Operator or Administrator (an account's coordinator: that account's jobs
  only), as for the daemon's writes.

And Slurm's own preemption should be off where reclaim acts
(`PreemptType=preempt/none`, the default): otherwise Slurm requeues, cancels
or suspends jobs too, victims it chooses itself (docs/reclaim-ways.md).

Every finding is one line naming the key and what to set. A warning is what
keeps reclaim from working as configured (JobRequeue=0 with `way: requeue`:
only jobs submitted with --requeue can be victims; a user slurmctld refuses;
Slurm's preemption beside reclaim's). A note is what works as chosen but an
administrator should know (JobRequeue=0 with `way: cancel`: most victims are
cancelled, their work lost), or what could not be checked. Neither changes
check-config's exit status, which judges the file alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from slurm_drf.config.settings import Config
from slurm_drf.errors import DrfError
from slurm_drf.slurm.execute import run_command
from slurm_drf.slurm.parse.lines import split_lines
from slurm_drf.slurm.parse.scontrol import RequeueSettings, parse_requeue_settings

SACCTMGR_TIMEOUT: Final = 10.0
# sacctmgr's words for the levels that may requeue and cancel others' jobs (slurmctld's validate_operator).
OPERATOR_LEVELS: Final = frozenset({"operator", "administrator"})
NO_PREEMPTION: Final = "preempt/none"


def build_admin_level_argv(user: str) -> list[str]:
    """The user's AdminLevel in slurmdbd: `Operator`, `Administrator`, `None`; nothing for an unknown user."""
    return ["sacctmgr", "--noheader", "--parsable2", "show", "user", f"name={user}", "format=AdminLevel"]


def parse_admin_level(text: str) -> str | None:
    """The first word sacctmgr printed, or None when the user is not in Slurm's database."""
    return next((line.strip() for line in split_lines(text) if line.strip()), None)


def read_admin_level(user: str) -> str | None:
    """The user's AdminLevel from sacctmgr; DrfError when sacctmgr fails."""
    return parse_admin_level(run_command(build_admin_level_argv(user), SACCTMGR_TIMEOUT))


def reclaim_lines(
    config: Config,
    slurm_config: str | DrfError | None,
    user: tuple[str, int],
    admin_level: Callable[[str], str | None] = read_admin_level,
) -> list[str]:
    """check-config's `warning:` and `note:` lines on what `reclaim:` needs of Slurm; none without `reclaim:`.

    `slurm_config` is `scontrol show config` (why it could not be read; None:
    not read, check-config was given a snapshot). `user` is the name and uid
    running check-config, which should be the daemon's.
    """
    reclaim = config.reclaim
    if reclaim is None:
        return []
    base = _where(config, "reclaim")
    if slurm_config is None:
        return [
            f"note: {base}: slurm.conf not checked for reclaim (a snapshot holds no JobRequeue or PreemptType); "
            "run check-config without --snapshot where scontrol reaches slurmctld"
        ]
    if isinstance(slurm_config, DrfError):
        # Why is check-config's note on the weights, just before: said once.
        return [
            f"note: {base}: slurm.conf not checked for what reclaim needs (JobRequeue, PreemptType, this "
            "user's right to requeue): scontrol show config failed"
        ]
    settings = parse_requeue_settings(slurm_config)
    return [
        *_job_requeue_lines(config, settings),
        *_preemption_lines(config, settings),
        *_privilege_lines(config, settings, user, admin_level),
    ]


def _where(config: Config, key: str) -> str:
    """`FILE:LINE: key`, the line of `key` (or of `reclaim:` when the file leaves `key` to its default)."""
    line = config.lines.get(key) or config.lines.get("reclaim")
    where = config.source_path or "config"
    return f"{where}:{line}: {key}" if line else f"{where}: {key}"


def _job_requeue_lines(config: Config, settings: RequeueSettings) -> list[str]:
    assert config.reclaim is not None
    if settings.job_requeue is not False:
        return []
    if config.reclaim.way == "cancel":
        return [
            f"note: {_where(config, 'reclaim.way')}: cancel with slurm.conf JobRequeue=0: every victim not "
            "submitted with --requeue is cancelled, its work lost for good; add JobRequeue=1 to slurm.conf "
            "(then scontrol reconfigure; jobs already submitted keep theirs) to requeue them instead"
        ]
    return [
        f"warning: {_where(config, 'reclaim')}: slurm.conf JobRequeue=0: a batch job may be requeued only if "
        "submitted with --requeue, so reclaim can requeue only those, and frees nothing in a pool where none runs; "
        "add JobRequeue=1 to slurm.conf (then scontrol reconfigure; jobs already submitted keep theirs), "
        "or set reclaim.way: cancel"
    ]


def _preemption_lines(config: Config, settings: RequeueSettings) -> list[str]:
    assert config.reclaim is not None
    kind = settings.preempt_type
    if kind is None or kind == NO_PREEMPTION:
        return []
    mode = settings.preempt_mode or "OFF"
    within = (
        "; with WITHIN every nice the daemon writes can become an order to preempt"
        if "WITHIN" in mode.upper().split(",")
        else ""
    )
    return [
        f"warning: {_where(config, 'reclaim')}: slurm.conf PreemptType={kind} (PreemptMode={mode}): Slurm's own "
        f"preemption requeues, cancels or suspends running jobs too, victims it picks itself beside reclaim's{within}; "
        f"set PreemptType={NO_PREEMPTION} in slurm.conf, or keep Slurm's preemption out of the reclaim pools "
        f"({', '.join(config.reclaim.pools)})"
    ]


def _privilege_lines(
    config: Config, settings: RequeueSettings, user: tuple[str, int], admin_level: Callable[[str], str | None]
) -> list[str]:
    name, uid = user
    if uid == 0 or (settings.slurm_uid is not None and uid == settings.slurm_uid) or name == settings.slurm_user:
        return []
    slurm_user = f"SlurmUser ({settings.slurm_user})" if settings.slurm_user else "SlurmUser"
    verbs = "scontrol requeue" + (" and scancel" if config.reclaim and config.reclaim.way == "cancel" else "")
    try:
        level = admin_level(name)
    except DrfError as error:
        return [
            f"note: {_where(config, 'reclaim')}: user {name}'s AdminLevel unknown ({error}); to {verbs} other "
            f"users' jobs it must be root, {slurm_user}, or AdminLevel Operator"
        ]
    if level is not None and level.lower() in OPERATOR_LEVELS:
        return []
    has = f"AdminLevel {level}" if level else "not a user in Slurm's database"
    return [
        f"warning: {_where(config, 'reclaim')}: user {name} is not root, {slurm_user} or an Operator ({has}): "
        f"slurmctld refuses its {verbs} of other users' jobs; run: sacctmgr modify user name={name} set "
        "adminlevel=Operator (check-config checks the user running it: run it as the daemon's user)"
    ]
