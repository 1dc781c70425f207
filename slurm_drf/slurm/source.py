"""The only code that talks to Slurm, behind one interface.

Sits between the daemon (which asks for a Snapshot every cycle) and Slurm.
A `ClusterSource` is anything that can produce a Snapshot: the Slurm CLI
(`slurm_drf.slurm.cli_source.CliSource`), a saved snapshot file
(`slurm_drf.model.snapshot_file.SnapshotFileSource`), or pyslurm. The
daemon cannot tell them apart.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from slurm_drf.model.types import Snapshot

__all__ = ["ClusterSource"]


@runtime_checkable
class ClusterSource(Protocol):
    """Where a Snapshot of the cluster comes from."""

    #: A short description for logs and errors, such as "slurm cli".
    name: str

    def fetch_snapshot(self) -> Snapshot:
        """Read the cluster now; raises SlurmReadError or SnapshotError."""
        ...
