"""The simulated nodes: free TRES per node, placement, and the backfill reservation.

Sits under `engine`: the engine asks where a job fits now (`find_nodes`),
books and frees TRES (`allocate`, `release`) and, for the EASY backfill,
when the top job of the queue could start at the earliest
(`compute_reservation`). Placement is first fit over node index, as
Slurm's select plugin does on a partition of equal nodes; a job takes
`nodes` distinct nodes with its per-node demand on each.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from slurm_drf.sim.workload import NodeType

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
Vector = tuple[int, int, int]


class Cluster:
    """Free TRES of `count` identical nodes: rows are nodes, columns cpu, mem, gres/gpu."""

    def __init__(self, node_type: NodeType, count: int) -> None:
        self.node_type = node_type
        self.count = count
        self.node_capacity: Vector = (node_type.cpu, node_type.mem, node_type.gpu)
        self.capacity: Vector = (node_type.cpu * count, node_type.mem * count, node_type.gpu * count)
        # One column per resource: three 1-D comparisons are cheaper than one
        # on a (count, 3) matrix followed by all(axis=1).
        self.free_cpu = np.full(count, node_type.cpu, dtype=np.int64)
        self.free_mem = np.full(count, node_type.mem, dtype=np.int64)
        self.free_gpu = np.full(count, node_type.gpu, dtype=np.int64)

    def fits(self, demand: Vector) -> BoolArray:
        """Which nodes have at least `demand` free now."""
        cpu, mem, gpu = demand
        mask: BoolArray = self.free_cpu >= cpu
        if mem:
            mask &= self.free_mem >= mem
        if gpu:
            mask &= self.free_gpu >= gpu
        return mask

    def fits_node(self, node: int, demand: Vector) -> bool:
        return bool(self.free_cpu[node] >= demand[0] and self.free_mem[node] >= demand[1]
                    and self.free_gpu[node] >= demand[2])

    def find_nodes(self, demand: Vector, count: int, reserved: Reservation | None = None) -> list[int] | None:
        """The first `count` nodes (by index) with `demand` free, or None.

        With `reserved`, a reserved node counts only if its spare at the
        reservation's time can also take `demand` (the job runs past it).
        """
        mask = self.fits(demand)
        if reserved is not None:
            cpu, mem, gpu = demand
            for node in reserved.nodes:
                spare = reserved.spare[node]
                if spare[0] < cpu or spare[1] < mem or spare[2] < gpu:
                    mask[node] = False
        if count == 1:
            first = int(mask.argmax())
            return [first] if mask[first] else None
        found = np.flatnonzero(mask)
        if len(found) < count:
            return None
        return [int(n) for n in found[:count]]

    def allocate(self, nodes: Sequence[int], demand: Vector) -> None:
        cpu, mem, gpu = demand
        for node in nodes:
            self.free_cpu[node] -= cpu
            self.free_mem[node] -= mem
            self.free_gpu[node] -= gpu

    def release(self, nodes: Sequence[int], demand: Vector) -> None:
        cpu, mem, gpu = demand
        for node in nodes:
            self.free_cpu[node] += cpu
            self.free_mem[node] += mem
            self.free_gpu[node] += gpu

    def free_of(self, node: int) -> list[int]:
        return [int(self.free_cpu[node]), int(self.free_mem[node]), int(self.free_gpu[node])]

    def used(self) -> Vector:
        """Allocated TRES summed over the nodes."""
        return (self.capacity[0] - int(self.free_cpu.sum()), self.capacity[1] - int(self.free_mem.sum()),
                self.capacity[2] - int(self.free_gpu.sum()))


@dataclass(slots=True)
class Reservation:
    """Where and when the top job of the queue will start (EASY backfill).

    `spare[node]` is what stays free on a reserved node at `time` once the
    top job has its share: a job that runs past `time` may use a reserved
    node only within that spare.
    """

    job: int
    time: float
    nodes: tuple[int, ...]
    spare: dict[int, list[int]] = field(default_factory=dict)

    def take(self, nodes: Sequence[int], demand: Vector) -> bool:
        """Book a long-running job on reserved nodes; False if it breaks the reservation."""
        for node in nodes:
            spare = self.spare.get(node)
            if spare is None:
                continue
            spare[0] -= demand[0]
            spare[1] -= demand[1]
            spare[2] -= demand[2]
            if spare[0] < 0 or spare[1] < 0 or spare[2] < 0:
                return False
        return True


def compute_reservation(cluster: Cluster, job: int, demand: Vector, count: int, now: float,
                        ends: Sequence[tuple[float, int]], job_nodes: Sequence[Sequence[int]],
                        job_demand: Sequence[Vector]) -> Reservation:
    """The earliest time `count` nodes have `demand` free, releasing running jobs by their time limit.

    `ends` lists running jobs as (expected end, job) in ascending order; a
    job releases `job_demand[job]` on each node of `job_nodes[job]`.
    """
    fitting = [int(n) for n in np.flatnonzero(cluster.fits(demand))[:count]]
    chosen = set(fitting)
    projected: dict[int, list[int]] = {}
    time = now
    position = 0
    if len(fitting) < count:
        time = math.inf
        while position < len(ends):
            end, other = ends[position]
            position += 1
            released = job_demand[other]
            for node in job_nodes[other]:
                free = projected.get(node)
                if free is None:
                    free = projected[node] = cluster.free_of(node)
                free[0] += released[0]
                free[1] += released[1]
                free[2] += released[2]
                if (node not in chosen and free[0] >= demand[0] and free[1] >= demand[1]
                        and free[2] >= demand[2]):
                    chosen.add(node)
                    fitting.append(node)
            if len(fitting) >= count:
                time = max(end, now)
                break
        # Jobs ending at the very same moment are released by then as well.
        while position < len(ends) and ends[position][0] <= time:
            _, other = ends[position]
            position += 1
            released = job_demand[other]
            for node in job_nodes[other]:
                if node in chosen:
                    free = projected.get(node)
                    if free is None:
                        free = projected[node] = cluster.free_of(node)
                    free[0] += released[0]
                    free[1] += released[1]
                    free[2] += released[2]
    nodes = tuple(fitting[:count])
    spare = {}
    for node in nodes:
        free = projected.get(node) or cluster.free_of(node)
        spare[node] = [free[0] - demand[0], free[1] - demand[1], free[2] - demand[2]]
    return Reservation(job=job, time=time, nodes=nodes, spare=spare)
