"""A ClusterSource through pyslurm, used when a matching pyslurm imports.

pyslurm builds only against the Slurm release whose major.minor it carries,
so it is usable only when its version matches the running Slurm's.
"""

from __future__ import annotations

import importlib
import logging
import shutil
import subprocess

from slurm_drf.errors import SlurmReadError
from slurm_drf.model import Snapshot

logger = logging.getLogger(__name__)


def _slurm_release() -> str | None:
    """major.minor of the installed Slurm, from `sinfo --version` ("slurm 22.05.8")."""
    sinfo = shutil.which("sinfo")
    if sinfo is None:
        return None
    try:
        out = subprocess.run([sinfo, "--version"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    parts = out.split()
    if len(parts) < 2:
        return None
    return ".".join(parts[1].split(".")[:2])


def pyslurm_usable() -> tuple[bool, str]:
    """Whether pyslurm imports and matches the running Slurm, and why not."""
    try:
        module = importlib.import_module("pyslurm")
    except ImportError as error:
        return False, f"pyslurm does not import ({error})"
    version = str(getattr(module, "__version__", ""))
    release = _slurm_release()
    if release is None:
        return False, "cannot tell the Slurm release (sinfo --version)"
    if ".".join(version.split(".")[:2]) != release:
        return False, f"pyslurm {version} does not match Slurm {release}"
    return True, ""


class PyslurmSource:
    """Reads the cluster through pyslurm's object model."""

    name = "pyslurm"

    def fetch_snapshot(self) -> Snapshot:
        raise SlurmReadError("the pyslurm backend is not implemented yet; use backend: cli")
