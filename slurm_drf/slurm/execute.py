"""The one place that runs a subprocess.

Sits under the Slurm sources (cli_source.py, sacct.py and the writer): they build argv
lists with pure `build_*` functions and hand them here. Commands run from a
list, never through a shell; a failure becomes one line a person can act
on, naming the command and the first line of what it printed on stderr.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence

from slurm_drf.errors import SlurmError, SlurmReadError

logger = logging.getLogger(__name__)


def _first_line(text: str | bytes | None) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


# How squeue, sinfo and scontrol say that slurmctld does not answer: 22.05
# prints `squeue: error: Unable to contact slurm controller`, 26.05 exits 1
# with `slurm_load_jobs error: Unable to contact slurm controller (connect
# failure)` (measured). Either way the one likely cause is named.
_CONTROLLER_UNREACHABLE = "unable to contact slurm controller"
_CONTROLLER_HINT = "is slurmctld running? `scontrol ping` tells"


def _with_hint(detail: str) -> str:
    if _CONTROLLER_UNREACHABLE in detail.lower() and "slurmctld" not in detail:
        return f"{detail}; {_CONTROLLER_HINT}"
    return detail


def run_command(
    argv: Sequence[str],
    timeout: float,
    *,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
    error_class: type[SlurmError] = SlurmReadError,
    cwd: str | None = None,
    new_session: bool = False,
) -> str:
    """Run `argv` and return its standard output as text.

    `env` is the child's whole environment (None: inherit ours), `cwd` its
    working directory (None: ours); `new_session` starts the child in a
    session of its own, out of reach of a terminal's Ctrl-C, which then
    reaches us alone. Raises
    `error_class` (SlurmReadError unless the caller picks another
    SlurmError) when the executable is missing or cannot run, when it runs
    longer than `timeout` seconds, or when it exits non-zero.
    """
    completed = run_process(
        argv, timeout, env=env, input_text=input_text, error_class=error_class, cwd=cwd, new_session=new_session
    )
    if completed.returncode != 0:
        detail = _with_hint(_first_line(completed.stderr) or _first_line(completed.stdout) or "no message")
        raise error_class(f"{shlex.join(argv)}: exit status {completed.returncode}: {detail}")
    return completed.stdout


def run_process(
    argv: Sequence[str],
    timeout: float,
    *,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
    error_class: type[SlurmError] = SlurmReadError,
    cwd: str | None = None,
    new_session: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run `argv`; its exit status is the caller's to judge (scontrol exits 1
    when one update of many failed, and says which on stderr).

    Raises `error_class` when the command cannot run or times out.
    """
    if not argv:
        raise ValueError("run_command needs a command")
    command = shlex.join(argv)
    started = time.monotonic()
    try:
        completed = subprocess.run(
            list(argv),
            input=input_text,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=timeout,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            check=False,
            start_new_session=new_session,
        )
    except FileNotFoundError as error:
        raise error_class(f"{command}: {argv[0]} not found (is Slurm installed and on PATH?)") from error
    except PermissionError as error:
        raise error_class(f"{command}: permission denied running {argv[0]}") from error
    except subprocess.TimeoutExpired as error:
        detail = _first_line(error.stderr)
        suffix = f": {detail}" if detail else ""
        raise error_class(f"{command}: no answer within {timeout:g} s{suffix}") from error
    except OSError as error:
        raise error_class(f"{command}: cannot run: {error.strerror or error}") from error
    elapsed = time.monotonic() - started
    logger.debug("%s: exit %d after %.3f s", command, completed.returncode, elapsed)
    return completed
