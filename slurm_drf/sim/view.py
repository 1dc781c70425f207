"""What a queue policy may see of a running simulation.

Sits between `engine` and `policies`: the engine's `Simulator` satisfies
`SimulatorView` and hands itself to `Policy.bind`; a policy reads the
simulation through this protocol only, so `policies` imports neither
`engine` nor `cluster` (an import-linter contract keeps it so). The clock
needs no member here: it reaches the policy as the `now` argument of every
hook, and running jobs as `on_start` and `on_end`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from slurm_drf.model.types import IntArray
from slurm_drf.sim.table import Vector, WorkloadTable
from slurm_drf.sim.workload import Workload


class SimulatorView(Protocol):
    """The simulation as a policy reads it; read-only by contract.

    The lists and arrays are the engine's own (copying them every tick would
    cost more than the policy): a policy must not change them.
    """

    @property
    def workload(self) -> Workload:
        """What is played: the cluster's shape and the account weights."""

    @property
    def table(self) -> WorkloadTable:
        """The jobs, shapes and records of the run, by index."""

    @property
    def backfill_depth(self) -> int:
        """Jobs the backfill pass looks at (Slurm's bf_max_job_test)."""

    @property
    def capacity(self) -> Vector:
        """TRES of the whole cluster."""

    @property
    def usage(self) -> IntArray:
        """(accounts, 3): TRES the running jobs of each account hold."""

    @property
    def record_pending(self) -> Sequence[int]:
        """Pending tasks of each record."""

    @property
    def record_pending_array(self) -> IntArray:
        """`record_pending` as an array."""

    def pending_jobs(self) -> list[int]:
        """Every pending job (task), in current queue order."""

    def pending_records(self) -> list[list[int]]:
        """Per account (by index), its pending records in submit order."""

    def pending_record_index(self) -> IntArray:
        """`pending_records`, flattened into one index array."""

    def pending_tasks(self, record: int) -> list[int]:
        """The pending tasks (jobs) of one record, in task order."""

    @property
    def running(self) -> Mapping[int, None]:
        """The running jobs (by index), as a set."""

    @property
    def node_of(self) -> Sequence[tuple[int, ...]]:
        """Each job's nodes while it runs."""

    @property
    def start_time(self) -> Sequence[float]:
        """Each job's start (NaN while it waits)."""

    def node_free(self) -> list[Vector]:
        """Each node's free cpu, mem and gres/gpu now."""
