"""`slurm-drf --version`: this release, the Slurm release here and the backend `backend: auto` would read it with.

Only what answers at once, and nothing that waits on slurmctld: the release
`sinfo --version` prints, bounded by a short timeout (sinfo asks slurmctld
nothing once it has a slurm.conf, but retries for a minute without one, and
a configless client fetches its configuration from slurmctld), and whether
pyslurm imports and matches that release, as cycle/backends.py decides. No
config is read, so a config's `backend: cli` or `backend: pyslurm` is not
reflected: the line says what `auto` (the default) picks.
"""

from __future__ import annotations

from typing import Final

from slurm_drf import __version__
from slurm_drf.slurm.pyslurm_source import fetch_slurm_release, pyslurm_usable

# Seconds `sinfo --version` may take before the Slurm release is left unknown.
SLURM_RELEASE_TIMEOUT: Final = 3.0


def render_version(version: str, release: str | None, release_source: str, backend: tuple[bool, str]) -> str:
    """`--version`: `slurm-drf VERSION` first (what scripts compare), then the Slurm release and the backend."""
    usable, why = backend
    slurm = f"Slurm {release} ({release_source})" if release else f"Slurm: unknown ({release_source})"
    chosen = f"pyslurm ({why})" if usable else f"cli, Slurm's commands (pyslurm not usable: {why})"
    return f"slurm-drf {version}\n{slurm}\nbackend auto: {chosen}\n"


def fetch_version_text(timeout: float = SLURM_RELEASE_TIMEOUT) -> str:
    """`render_version` for this installation: runs `sinfo --version` and imports pyslurm if it is there."""
    release, source = fetch_slurm_release(timeout=timeout)
    # "" rather than None: given None, pyslurm_usable would run sinfo again, with its own timeout.
    return render_version(__version__, release, source, pyslurm_usable(slurm_release=release or ""))
