"""The replay's door to Slurm: submit, cancel, account and measure.

Sits under `replay.run`. Reading the cluster's jobs and nodes goes
through the daemon's own backend (`cycle.backends`); what only a replay
does is here: sbatch, scancel, sacct's times of the jobs it submitted,
sacctmgr's associations, sdiag's RPC counts and slurmctld's priority
settings. Every command is an argv list run by `slurm.execute`, never a
shell, and every name in it follows the one rule for names
(`trace.check_name`: the `build_*_argv` here check it again, whoever
called them). Answers are split into records at "\n" only: a field may
hold U+2028, U+0085 or a form feed, which `str.splitlines` splits at.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from slurm_drf.errors import SlurmError, SlurmWriteError
from slurm_drf.replay.trace import Submission, build_job_script, build_sbatch_argv, check_name
from slurm_drf.slurm.execute import run_command
from slurm_drf.slurm.parse.lines import split_lines

TIMEOUT = 60.0
# scancel and sacct take ids on the command line; at most this many at once.
CHUNK = 500


# Where sbatch runs and the job starts: a directory every user can enter.
WORKDIR = "/"


def submit(sub: Submission, partition: str | None, run_as: str | None, run: str, requeue: bool = False) -> str:
    """Submit one job (as `run_as`, through runuser, if given) named for the replay `run`; its Slurm job id.
    `requeue`: it may be requeued (`trace.build_sbatch_argv`).

    sbatch runs in a session of its own: a Ctrl-C at the terminal stops the
    replay, which lets the submission in flight finish and so knows its id.
    """
    out = run_command(
        build_sbatch_argv(sub, partition, WORKDIR, run_as, run, requeue),
        TIMEOUT,
        input_text=build_job_script(sub),
        error_class=SlurmWriteError,
        cwd=WORKDIR,
        new_session=True,
    )
    job_id = out.strip().split(";")[0]
    if not job_id.isdigit():
        raise SlurmWriteError(f"sbatch of trace job {sub.job.job_id}: unexpected answer {out.strip()[:80]!r}")
    return job_id


def _chunks(ids: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


def cancel(job_ids: Sequence[str]) -> None:
    """scancel these jobs (and only these), by id, whoever submitted them (root may cancel any job);
    jobs that already ended are no error."""
    for chunk in _chunks(list(job_ids)):
        run_command(["scancel", *chunk], TIMEOUT, error_class=SlurmWriteError)


def cancel_named(names: Sequence[str]) -> None:
    """scancel the jobs of these names: the submissions whose sbatch failed or timed out, which
    slurmctld may have taken all the same (their names are the replay run's own, `trace.job_name`)."""
    for name in names:
        run_command(["scancel", f"--name={name}"], TIMEOUT, error_class=SlurmWriteError)


def records(text: str) -> list[str]:
    """The lines of a command's answer, split at "\n" only (a "\r" before it dropped): slurm.parse.lines."""
    return split_lines(text)


def _queued() -> list[str]:
    """The id of every job squeue shows (pending, running or completing)."""
    out = run_command(["squeue", "-h", "-o", "%i"], TIMEOUT)
    return [line.strip() for line in records(out) if line.strip()]


def remaining(job_ids: Sequence[str]) -> list[str]:
    """Which of these jobs squeue still shows."""
    wanted = set(job_ids)
    return sorted(job_id for job_id in _queued() if job_id in wanted)


def other_jobs(ours: Iterable[str]) -> list[str]:
    """Jobs squeue shows that this replay did not submit."""
    mine = set(ours)
    return [job_id for job_id in _queued() if job_id not in mine]


@dataclass(frozen=True, slots=True)
class JobTimes:
    submit: float
    start: float  # nan: never started
    end: float  # nan: never ended
    nodes: str = ""  # the nodes it ran on, as Slurm's host list (drfnode[1-2]); "": none assigned


def _epoch(text: str) -> float:
    return float(text) if text.strip().isdigit() else math.nan


def fetch_job_times(job_ids: Sequence[str]) -> dict[str, JobTimes]:
    """Submit, start and end (seconds since the epoch) and the nodes of these jobs, from sacct."""
    env = dict(os.environ)
    env["SLURM_TIME_FORMAT"] = "%s"
    out: dict[str, JobTimes] = {}
    for chunk in _chunks(list(job_ids)):
        # --allusers: the jobs of every user the replay submitted as, not only the invoking user's.
        fields = "JobIDRaw,Submit,Start,End,NodeList"
        argv = ["sacct", "-X", "-n", "-P", "--allusers", "-j", ",".join(chunk), "-o", fields]
        text = run_command(argv, TIMEOUT, env=env)
        for line in records(text):
            row = line.split("|")
            if len(row) == 5 and row[0] in chunk:
                nodes = "" if row[4] in ("", "None assigned") else row[4]
                out[row[0]] = JobTimes(_epoch(row[1]), _epoch(row[2]), _epoch(row[3]), nodes)
    return out


def build_associations_argv(cluster: str) -> list[str]:
    return [
        "sacctmgr", "-n", "-P", "show", "assoc", f"cluster={check_name(cluster, 'the cluster')}",
        "format=account,user",
    ]  # fmt: skip


def parse_associations(text: str) -> set[tuple[str, str]]:
    """(account, user) of `sacctmgr -n -P show assoc format=account,user`; user "" for an account's own."""
    pairs = set()
    for line in records(text):
        account, _, user = line.partition("|")
        if account:
            pairs.add((account, user))
    return pairs


def fetch_associations(cluster: str) -> set[tuple[str, str]]:
    """(account, user) of every association of `cluster`; user "" for an account's own."""
    return parse_associations(run_command(build_associations_argv(cluster), TIMEOUT))


def build_account_argv(cluster: str, account: str, parent: str | None, fairshare: int) -> list[str]:
    argv = [
        "sacctmgr", "-i", "add", "account", check_name(account, "account"),
        f"cluster={check_name(cluster, 'the cluster')}", f"fairshare={int(fairshare)}",
    ]  # fmt: skip
    if parent:
        argv.append(f"parent={check_name(parent, f'the parent of account {account}')}")
    return argv


def create_account(cluster: str, account: str, parent: str | None, fairshare: int) -> None:
    run_command(build_account_argv(cluster, account, parent, fairshare), TIMEOUT, error_class=SlurmWriteError)


def build_user_argv(cluster: str, user: str, account: str) -> list[str]:
    """The user's association in `account`: a leaf of its tree, weighing 1 beside the account's other users."""
    return [
        "sacctmgr", "-i", "add", "user", check_name(user, "user"), f"account={check_name(account, 'account')}",
        f"cluster={check_name(cluster, 'the cluster')}", "fairshare=1",
    ]  # fmt: skip


def create_user(cluster: str, user: str, account: str) -> None:
    run_command(build_user_argv(cluster, user, account), TIMEOUT, error_class=SlurmWriteError)


def build_unix_user_argv(user: str) -> list[str]:
    """A system user without a home or a login shell (--create-unix-users, a test host only), as the sandbox's."""
    return ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", check_name(user, "user")]


def create_unix_user(user: str) -> None:
    run_command(build_unix_user_argv(user), TIMEOUT, error_class=SlurmWriteError)


_RPC = re.compile(r"^\s*([A-Z][A-Z0-9_]+)\s+\(\s*\d+\)\s+count:(\d+)")


def parse_sdiag_rpcs(text: str) -> dict[str, int]:
    """RPC counts by message type from `sdiag` (its section by message type only)."""
    counts: dict[str, int] = {}
    section = False
    for line in records(text):
        if line.startswith("Remote Procedure Call statistics by message type"):
            section = True
            continue
        if section and line.startswith("Remote Procedure Call statistics by user"):
            break
        match = _RPC.match(line) if section else None
        if match:
            counts[match.group(1)] = counts.get(match.group(1), 0) + int(match.group(2))
    return counts


def fetch_rpcs() -> dict[str, int]:
    """slurmctld's RPC counts by type since its start (or the last `sdiag -r`); empty if sdiag cannot tell."""
    try:
        return parse_sdiag_rpcs(run_command(["sdiag"], TIMEOUT))
    except SlurmError:
        return {}


_PRIORITY_KEYS = re.compile(r"^(Priority\w*|SchedulerParameters|SelectTypeParameters|SLURM_VERSION)\s*=")


def fetch_priority_settings() -> list[str]:
    """slurmctld's priority and scheduling settings as it runs them (`scontrol show config`), and each
    partition's TRESBillingWeights."""
    lines = [
        " ".join(line.split())
        for line in records(run_command(["scontrol", "show", "config"], TIMEOUT))
        if _PRIORITY_KEYS.match(line.strip())
    ]
    for line in records(run_command(["scontrol", "-o", "show", "partition"], TIMEOUT)):
        fields = {key: value for key, _, value in (item.partition("=") for item in line.split())}
        name = fields.get("PartitionName", "?")
        lines.append(f"PartitionName={name} TRESBillingWeights={fields.get('TRESBillingWeights', '(none)')}")
    return lines
