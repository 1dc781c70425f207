"""Live tests against a real Slurm: the sandbox started by ``scripts/slurm-sandbox``.

Every test in this directory is marked ``live``.  The session fixture
``slurm_sandbox`` brings the sandbox up (idempotent, a few seconds when it
already runs) and leaves it running afterwards, because developers and CI
reuse it; set ``SLURM_SANDBOX_TEARDOWN=1`` to stop it at the end.

Without root or without the Slurm packages the tests are skipped, unless
``SLURM_DRF_REQUIRE_SLURM=1``: then they fail, and as root the sandbox
installs the packages itself.

The sandbox and the jobs are driven through Slurm's command-line tools.
slurm-drf runs as a subprocess (``live_helpers.drf``, ``test_live_daemon``);
``test_live_cycle`` and ``test_live_observe`` also import slurm_drf and
call it in process.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.paths import SANDBOX_SCRIPT
from tests.polling import wait_for

HERE = Path(__file__).resolve().parent
SCRIPT = SANDBOX_SCRIPT

# Commands the tests and the sandbox need; sbin is not on every PATH.
REQUIRED_COMMANDS = (
    "slurmctld",
    "slurmd",
    "slurmdbd",
    "sacctmgr",
    "sbatch",
    "squeue",
    "sinfo",
    "scancel",
    "scontrol",
    "munged",
    "mariadbd",
)
# A cold start takes seconds, a first install about a minute or two.
UP_TIMEOUT_S = 900
CANCEL_TIMEOUT_S = 60


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Hooks in a conftest see every collected item, not only this directory's.
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.live)


def _have(cmd: str) -> bool:
    return shutil.which(cmd) is not None or Path("/usr/sbin", cmd).exists()


def number(value: Any) -> Any:
    """Unwraps Slurm >= 23.02's ``{"set": ..., "infinite": ..., "number": N}``."""
    if isinstance(value, dict) and "number" in value:
        return value["number"] if value.get("set", True) else None
    return value


def job_state(job: dict[str, Any]) -> str:
    """``job_state`` is a string in 22.05 and a list from 23.11 on."""
    state: str | list[str] = job["job_state"]
    return state[0] if isinstance(state, list) else state


@dataclass(frozen=True)
class SlurmSandbox:
    conf: Path
    dir: Path
    # Ids submitted through sbatch() and not yet cancelled.
    submitted: set[str] = field(default_factory=set, compare=False)

    # Version-tolerant JSON helpers, here so tests need not import conftest.
    number = staticmethod(number)
    job_state = staticmethod(job_state)
    wait_for = staticmethod(wait_for)

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{shlex.join(argv)} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
        return proc

    def sbatch(self, *args: str, wrap: str = "sleep 300") -> str:
        """Submits a job and returns its id.

        ``args`` are sbatch options; unless they contain ``--wrap`` the job
        runs ``wrap``.  Output goes to /dev/null unless ``-o/--output`` is
        given, so that no slurm-N.out files land in the working directory.
        """
        argv = ["sbatch", "--parsable", *args]
        if not any(a == "-o" or a.startswith(("--output", "-o")) for a in args):
            argv.append("--output=/dev/null")
        if not any(a.startswith("--wrap") for a in args):
            argv += ["--wrap", wrap]
        out = self.run(*argv).stdout.strip()
        # --parsable prints "jobid" or "jobid;cluster".
        job_id = out.split(";", 1)[0]
        self.submitted.add(job_id)
        return job_id

    def squeue_json(self) -> list[dict[str, Any]]:
        jobs: list[dict[str, Any]] = json.loads(self.run("squeue", "--json").stdout)["jobs"]
        return jobs

    def job(self, job_id: str | int) -> dict[str, Any] | None:
        for job in self.squeue_json():
            if str(job["job_id"]) == str(job_id):
                return job
        return None

    def wait_for_state(self, job_id: str | int, state: str, timeout: float = 30) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job is not None and job_state(job) == state else None

        found: dict[str, Any] = wait_for(reached, timeout, f"job {job_id} to be {state}")
        return found

    def job_ids(self) -> list[str]:
        return self.run("squeue", "-h", "-o", "%i").stdout.split()

    def _scancel(self, ids: list[str]) -> None:
        # Chunks: a synthetic queue can hold more ids than one command line.
        # Ids may vanish between squeue and scancel; that is fine.
        for start in range(0, len(ids), 5000):
            self.run("scancel", *ids[start : start + 5000], check=False)

    def cancel_all(self) -> None:
        """Cancels every job in the sandbox and waits until squeue shows none."""
        self._scancel(self.job_ids())
        wait_for(lambda: not self.job_ids(), CANCEL_TIMEOUT_S, "squeue to show no jobs")
        self.submitted.clear()

    def cancel_submitted(self) -> None:
        """Cancels the jobs submitted through sbatch() and waits until they are gone.

        Unlike cancel_all() this leaves other people's jobs alone when
        several test runs share one sandbox.
        """
        ids = sorted(self.submitted)
        self._scancel(ids)

        def gone() -> bool:
            # %F is the job id, or an array's parent id for every task of it.
            queued = set(self.run("squeue", "-h", "-o", "%F").stdout.split())
            return queued.isdisjoint(ids)

        wait_for(gone, CANCEL_TIMEOUT_S, f"jobs {ids} to leave squeue")
        self.submitted.clear()


def _sandbox_unavailable(reason: str) -> None:
    if os.environ.get("SLURM_DRF_REQUIRE_SLURM") == "1":
        pytest.fail(f"Slurm sandbox required (SLURM_DRF_REQUIRE_SLURM=1) but {reason}", pytrace=False)
    pytest.skip(f"Slurm sandbox unavailable: {reason} (set SLURM_DRF_REQUIRE_SLURM=1 to fail instead)")


@pytest.fixture(scope="session")
def slurm_sandbox() -> Iterator[SlurmSandbox]:
    if os.geteuid() != 0:
        _sandbox_unavailable("it needs root")
    missing = [c for c in REQUIRED_COMMANDS if not _have(c)]
    # With SLURM_DRF_REQUIRE_SLURM=1 we go on: `up` installs what is missing.
    if missing and os.environ.get("SLURM_DRF_REQUIRE_SLURM") != "1":
        _sandbox_unavailable(f"packages missing ({', '.join(missing)}); run scripts/slurm-sandbox up")

    up = subprocess.run([str(SCRIPT), "up"], capture_output=True, text=True, timeout=UP_TIMEOUT_S, check=False)
    if up.returncode != 0:
        # Root with the packages present: a broken sandbox is a failure, not a skip.
        pytest.fail(f"scripts/slurm-sandbox up failed ({up.returncode}):\n{up.stdout}\n{up.stderr}", pytrace=False)

    env_out = subprocess.run([str(SCRIPT), "env"], capture_output=True, text=True, check=True).stdout
    # `env` prints "export SLURM_CONF=<shell-quoted path>".
    words = shlex.split(env_out)
    conf = Path(next(w.split("=", 1)[1] for w in words if w.startswith("SLURM_CONF=")))
    os.environ["SLURM_CONF"] = str(conf)
    sandbox = SlurmSandbox(conf=conf, dir=conf.parent.parent)
    try:
        yield sandbox
    finally:
        if os.environ.get("SLURM_SANDBOX_TEARDOWN") == "1":
            subprocess.run([str(SCRIPT), "down"], check=False, timeout=300)


@pytest.fixture
def slurm(slurm_sandbox: SlurmSandbox) -> Iterator[SlurmSandbox]:
    """The sandbox; jobs the test submits through sbatch() are cancelled after it.

    Tests that need an empty queue call ``slurm.cancel_all()`` themselves;
    that also cancels jobs of anyone else using the sandbox.
    """
    yield slurm_sandbox
    slurm_sandbox.cancel_submitted()
