"""The one place that runs a subprocess.

Sits under the Slurm sources (cli_source.py, sacct.py and the writer): they build argv
lists with pure `build_*` functions and hand them here. Commands run from a
list, never through a shell; a failure becomes one line a person can act
on, naming the command and the first line of what it printed on stderr.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, Final, TypeVar

from slurm_drf.errors import SlurmError, SlurmReadError
from slurm_drf.slurm.parse.lines import split_lines

logger = logging.getLogger(__name__)

T = TypeVar("T")

# How much of a streamed answer is read at a time.
_PIECE: Final = 1 << 16


def _first_line(text: str | bytes | None) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    for line in split_lines(text):
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


class DeadlinePassed(SlurmError):
    """A process given a deadline was started only after it (this process paused, or the machine stalled,
    between the caller's last look at the clock and the start): it was stopped before it read its input."""


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
    except subprocess.TimeoutExpired as error:
        raise _no_answer(command, timeout, error.stderr, error_class) from error
    except OSError as error:
        raise _cannot_run(command, argv[0], error, error_class) from error
    elapsed = time.monotonic() - started
    logger.debug("%s: exit %d after %.3f s", command, completed.returncode, elapsed)
    return completed


def run_process_by(
    argv: Sequence[str],
    timeout: float,
    deadline: float,
    *,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
    error_class: type[SlurmError] = SlurmReadError,
) -> subprocess.CompletedProcess[str]:
    """run_process, with no process alive after `deadline` (time.monotonic()) either. The time left is
    judged once the process exists, before its input is sent: when the deadline has passed by then, it is
    stopped unread (DeadlinePassed). A timeout alone counts from the start, so that a pause before it (a
    SIGSTOP, a stalled machine) would push the end past the deadline.

    The deadline is kept by a process of its own as well, coreutils' timeout(1), started with the
    command and given the time then left: a caller paused while the command runs (SIGSTOP, a stalled
    machine) cannot stop it, and timeout does, at the deadline. A command stopped so fails as one that
    did not answer in time (error_class)."""
    if not argv:
        raise ValueError("run_process_by needs a command")
    command = shlex.join(argv)
    path = (env if env is not None else os.environ).get("PATH", os.defpath)
    if shutil.which(argv[0], path=path) is None:  # said as run_process says it, not as timeout would
        raise _cannot_run(command, argv[0], FileNotFoundError(), error_class)
    guard = deadline - time.monotonic()
    if guard <= 0:
        raise DeadlinePassed(f"{command}: not started: its deadline had passed")
    try:
        # A process group of its own (timeout's and the command's): stopping it stops both.
        proc = subprocess.Popen(
            [*build_guard_argv(guard), *argv],
            stdin=subprocess.PIPE if input_text is not None else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            env=dict(env) if env is not None else None,
            process_group=0,
        )
    except OSError as error:
        raise _cannot_run(command, GUARD[0], error, error_class) from error
    with proc:
        left = min(timeout, deadline - time.monotonic())
        if left <= 0:
            _kill_group(proc)
            proc.communicate()
            raise DeadlinePassed(f"{command}: stopped before its input was sent: it started after its deadline")
        try:
            stdout, stderr = proc.communicate(input_text, timeout=left)
        except subprocess.TimeoutExpired as error:
            _kill_group(proc)
            _, stderr = proc.communicate()
            raise _no_answer(command, left, stderr, error_class) from error
    if proc.returncode in GUARD_KILLED and time.monotonic() >= deadline:
        raise _no_answer(command, guard, stderr, error_class)
    return subprocess.CompletedProcess(list(argv), proc.returncode, stdout, stderr)


# The deadline's own keeper: coreutils' timeout, which kills the command (and itself: its process group)
# with SIGKILL when the time given ends.
GUARD: Final = ("timeout", "--signal=KILL")
# What the caller sees then: killed by SIGKILL (timeout's group), or timeout's exit for a child so killed.
GUARD_KILLED: Final = frozenset({-9, 128 + 9})


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL to the process's group (its own: timeout and the command under it); killing timeout alone
    would leave the command running, with nothing left to stop it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def build_guard_argv(seconds: float) -> list[str]:
    """timeout(1)'s argv for a command that must not outlive `seconds` (at least a millisecond)."""
    return [*GUARD, f"{max(seconds, 0.001):.3f}s"]


def _cannot_run(command: str, program: str, error: OSError, error_class: type[SlurmError]) -> SlurmError:
    if isinstance(error, FileNotFoundError):
        return error_class(f"{command}: {program} not found (is Slurm installed and on PATH?)")
    if isinstance(error, PermissionError):
        return error_class(f"{command}: permission denied running {program}")
    return error_class(f"{command}: cannot run: {error.strerror or error}")


def _no_answer(command: str, timeout: float, stderr: str | bytes | None, error_class: type[SlurmError]) -> SlurmError:
    detail = _first_line(stderr)
    return error_class(f"{command}: no answer within {timeout:g} s{f': {detail}' if detail else ''}")


class _Pieces:
    """A byte stream as text, piece by piece (`ended` once it is all read); bytes that are not UTF-8 read
    as U+FFFD, as run_command reads them."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.ended = False

    def __iter__(self) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while piece := self.stream.read(_PIECE):
            yield decoder.decode(piece)
        self.ended = True
        yield decoder.decode(b"", final=True)


def stream_command(
    argv: Sequence[str],
    timeout: float,
    consume: Callable[[Iterator[str]], T],
    *,
    env: Mapping[str, str] | None = None,
) -> T:
    """Run `argv` and hand its standard output to `consume` as it arrives, in pieces of text.

    For answers too big to hold twice (squeue's at 50,000 jobs). Raises
    SlurmReadError as run_command does: the command cannot run, gives no
    whole answer within `timeout` seconds (it is killed), or exits
    non-zero (what it printed on stderr named, before anything `consume`
    raised about a half answer). When `consume` stops early the command
    is killed.
    """
    if not argv:
        raise ValueError("stream_command needs a command")
    command = shlex.join(argv)
    with tempfile.TemporaryFile() as stderr:
        try:
            process = subprocess.Popen(
                list(argv), stdout=subprocess.PIPE, stderr=stderr, env=dict(env) if env is not None else None
            )
        except OSError as error:
            raise _cannot_run(command, argv[0], error, SlurmReadError) from error
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            process.kill()

        timer = threading.Timer(timeout, expire)
        timer.start()
        failure: Exception | None = None
        try:
            assert process.stdout is not None  # stdout=PIPE
            with process.stdout:
                pieces = _Pieces(process.stdout)
                try:
                    result = consume(iter(pieces))
                except Exception as error:  # judged below, after the exit status
                    failure = error
                if not pieces.ended:
                    process.kill()  # stopped early: it would block on a full pipe
            returncode = process.wait()
        finally:  # also when interrupted (KeyboardInterrupt): nothing is left running
            timer.cancel()
            if process.poll() is None:
                process.kill()
            process.wait()
        stderr.seek(0)
        said = stderr.read(4096)
    if expired.is_set():
        raise _no_answer(command, timeout, said, SlurmReadError) from failure
    if returncode != 0 and pieces.ended:
        detail = _with_hint(_first_line(said) or "no message")
        raise SlurmReadError(f"{command}: exit status {returncode}: {detail}") from failure
    if failure is not None:
        raise failure
    return result
