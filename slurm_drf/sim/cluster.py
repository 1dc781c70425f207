"""The simulated nodes: free TRES per node, placement, and the backfill reservation.

Sits under `engine`: the engine asks where a job fits now (`find_nodes`),
books and frees TRES (`allocate`, `release`) and, for the EASY backfill,
when the top job of the queue could start at the earliest
(`compute_reservation`), and for the Slurm-like backfill, the reservations
of every job tested (`ReservationBook`). Placement is first fit over node index, as
Slurm's select plugin does on a partition of equal nodes; a job takes
`nodes` distinct nodes with its per-node demand on each.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from slurm_drf.model.types import BoolArray
from slurm_drf.sim.table import Vector
from slurm_drf.sim.workload import NodeType


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
        return bool(
            self.free_cpu[node] >= demand[0] and self.free_mem[node] >= demand[1] and self.free_gpu[node] >= demand[2]
        )

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
        return (
            self.capacity[0] - int(self.free_cpu.sum()),
            self.capacity[1] - int(self.free_mem.sum()),
            self.capacity[2] - int(self.free_gpu.sum()),
        )


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


def holds(free: Sequence[int], demand: Vector) -> bool:
    """Whether `free` TRES (cpu, mem, gpu) can take `demand`."""
    return free[0] >= demand[0] and free[1] >= demand[1] and free[2] >= demand[2]


def release_into(
    projected: dict[int, list[int]], cluster: Cluster, nodes: Sequence[int], released: Vector
) -> Iterator[tuple[int, list[int]]]:
    """Give a running job's demand back to its nodes' projected free TRES; yield each node and its free TRES."""
    for node in nodes:
        free = projected.get(node)
        if free is None:
            free = projected[node] = cluster.free_of(node)
        free[0] += released[0]
        free[1] += released[1]
        free[2] += released[2]
        yield node, free


@dataclass(frozen=True, slots=True)
class RunningJobs:
    """What the running jobs give back when their time limits end, as the engine keeps it.

    `ends` lists them as (expected end, job) in ascending order; a job
    releases `demand[job]` on each node of `nodes[job]`. The engine holds
    the lists and changes them in place, so one RunningJobs stays current.
    """

    ends: Sequence[tuple[float, int]]
    nodes: Sequence[Sequence[int]]
    demand: Sequence[Vector]


def compute_reservation(
    cluster: Cluster, job: int, demand: Vector, count: int, now: float, running: RunningJobs
) -> Reservation:
    """The earliest time `count` nodes have `demand` free, releasing running jobs by their time limit."""
    ends, job_nodes, job_demand = running.ends, running.nodes, running.demand
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
            for node, free in release_into(projected, cluster, job_nodes[other], job_demand[other]):
                if node not in chosen and holds(free, demand):
                    chosen.add(node)
                    fitting.append(node)
            if len(fitting) >= count:
                time = max(end, now)
                break
        # Jobs ending at the very same moment are released by then as well.
        while position < len(ends) and ends[position][0] <= time:
            _, other = ends[position]
            position += 1
            for _ in release_into(projected, cluster, job_nodes[other], job_demand[other]):
                pass  # only the chosen nodes' projection is read below
    nodes = tuple(fitting[:count])
    spare = {}
    for node in nodes:
        free = projected.get(node) or cluster.free_of(node)
        spare[node] = [free[0] - demand[0], free[1] - demand[1], free[2] - demand[2]]
    return Reservation(job=job, time=time, nodes=nodes, spare=spare)


class ReservationBook:
    """Reservations of every job the Slurm-like backfill could not start now.

    Reservation `i` holds `demand[i]` on each of `nodes[i]` from `time[i]` to
    `end[i]` (start plus time limit). `spare[i][node]` is what stays free on
    that node at `time[i]`, with running jobs released by their time limits and
    every reservation active then booked: a job placed on the node that runs
    past `time[i]` must fit in it. Free TRES on a node only drop at the start
    of one of its reservations, so checking now and those starts is exact.
    """

    def __init__(self, cluster: Cluster, now: float) -> None:
        self.cluster = cluster
        self.now = now
        self.job: list[int] = []
        self.time: list[float] = []
        self.end: list[float] = []
        self.demand: list[Vector] = []
        self.nodes: list[tuple[int, ...]] = []
        self.spare: list[dict[int, list[int]]] = []
        self.on_node: dict[int, list[int]] = {}  # node -> reservations on it
        self.reserved = np.zeros(cluster.count, dtype=np.bool_)
        self.ends: list[float] = []  # reservation ends, ascending

    def _free_at(self, node: int, time: float, projected: list[int]) -> list[int]:
        """Free TRES on a reserved node at `time`: `projected` (running jobs released) less active reservations."""
        free = list(projected)
        for i in self.on_node[node]:
            if self.time[i] <= time < self.end[i]:
                demand = self.demand[i]
                free[0] -= demand[0]
                free[1] -= demand[1]
                free[2] -= demand[2]
        return free

    def _fits(self, node: int, time: float, limit: float, demand: Vector, projected: list[int]) -> bool:
        """Whether a reserved node can hold `demand` from `time` for `limit` seconds."""
        free = self._free_at(node, time, projected)
        if free[0] < demand[0] or free[1] < demand[1] or free[2] < demand[2]:
            return False
        stop = time + limit
        for i in self.on_node[node]:
            if time < self.time[i] < stop:
                spare = self.spare[i][node]
                if spare[0] < demand[0] or spare[1] < demand[1] or spare[2] < demand[2]:
                    return False
        return True

    def earliest(  # noqa: C901
        self,
        demand: Vector,
        count: int,
        limit: float,
        running: RunningJobs,
        after: float = -math.inf,
        free_now: bool = True,
    ) -> tuple[float, list[int]]:
        """The earliest time (not before `after`) and the nodes where `count` nodes can hold `demand`
        for `limit` seconds, given running jobs (released by their time limits) and the
        reservations. Nodes: the lowest indexes that fit at that time.

        `free_now=False` says the caller knows `count` nodes do not have `demand` free now.
        """
        ends, job_nodes, job_demand = running.ends, running.nodes, running.demand
        cluster = self.cluster
        now = self.now
        plain_mask = cluster.fits(demand) & ~self.reserved
        plain = {int(n) for n in np.flatnonzero(plain_mask)}
        projected: dict[int, list[int]] = {}
        reserved_nodes = sorted(self.on_node)
        time = now
        position = 0
        reservation_end = 0
        ends_at = self.ends
        while True:
            if time >= after and (free_now or time > now) and len(plain) + len(reserved_nodes) >= count:
                ordered = sorted(plain)
                # Reserved nodes matter only if they come before the count-th plain node.
                bound = ordered[count - 1] if len(ordered) >= count else cluster.count
                fitting = ordered
                for node in reserved_nodes:
                    if node >= bound:
                        break
                    free = projected.get(node) or cluster.free_of(node)
                    if self._fits(node, time, limit, demand, free):
                        fitting.append(node)
                if len(fitting) >= count:
                    return time, sorted(fitting)[:count]
            # The next moment something is released: a running job's limit or a reservation's end.
            next_end = ends[position][0] if position < len(ends) else math.inf
            next_reservation = ends_at[reservation_end] if reservation_end < len(ends_at) else math.inf
            following = min(next_end, next_reservation)
            if following == math.inf:
                raise RuntimeError("no time at which the job fits: the reservation book is inconsistent")
            time = max(following, now)
            while position < len(ends) and ends[position][0] <= time:
                _, other = ends[position]
                position += 1
                for node, node_free in release_into(projected, cluster, job_nodes[other], job_demand[other]):
                    if node not in plain and not self.reserved[node] and holds(node_free, demand):
                        plain.add(node)
            while reservation_end < len(ends_at) and ends_at[reservation_end] <= time:
                reservation_end += 1

    def _projected(self, nodes: Sequence[int], time: float, running: RunningJobs) -> dict[int, list[int]]:
        """Free TRES on each of `nodes` at `time`, with running jobs released by their time limits
        (reservations not counted)."""
        cluster = self.cluster
        job_nodes, job_demand = running.nodes, running.demand
        chosen = set(nodes)
        projected = {node: cluster.free_of(node) for node in nodes}
        for end, other in running.ends:
            if end > time:
                break
            released = job_demand[other]
            for node in job_nodes[other]:
                if node in chosen:
                    free = projected[node]
                    free[0] += released[0]
                    free[1] += released[1]
                    free[2] += released[2]
        return projected

    def fits_now(self, node: int, limit: float, demand: Vector) -> bool:
        """Whether a job running `limit` seconds from now on `node` leaves every reservation on it whole
        (the caller knows `demand` is free on the node now)."""
        if node not in self.on_node:
            return True
        stop = self.now + limit
        for i in self.on_node[node]:
            if self.time[i] < stop:
                spare = self.spare[i][node]
                if spare[0] < demand[0] or spare[1] < demand[1] or spare[2] < demand[2]:
                    return False
        return True

    def take_now(self, nodes: Sequence[int], limit: float, demand: Vector) -> bool:
        """Book a job started now; False if it breaks a reservation (it must not)."""
        stop = self.now + limit
        whole = True
        for node in nodes:
            for i in self.on_node.get(node, ()):
                if self.time[i] < stop:
                    spare = self.spare[i][node]
                    spare[0] -= demand[0]
                    spare[1] -= demand[1]
                    spare[2] -= demand[2]
                    if spare[0] < 0 or spare[1] < 0 or spare[2] < 0:
                        whole = False
        return whole

    def add(
        self,
        job: int,
        time: float,
        limit: float,
        demand: Vector,
        nodes: Sequence[int],
        running: RunningJobs,
    ) -> None:
        """Reserve `nodes` for `job` from `time` for `limit` seconds (where `earliest` found room)."""
        stop = time + limit
        projected = self._projected(nodes, time, running)
        index = len(self.job)
        spare: dict[int, list[int]] = {}
        for node in nodes:
            free = self._free_at(node, time, projected[node]) if node in self.on_node else projected[node]
            spare[node] = [free[0] - demand[0], free[1] - demand[1], free[2] - demand[2]]
            if spare[node][0] < 0 or spare[node][1] < 0 or spare[node][2] < 0:
                raise RuntimeError("reservation on a node without room")
            for i in self.on_node.get(node, ()):
                if time <= self.time[i] < stop:
                    other_spare = self.spare[i][node]
                    other_spare[0] -= demand[0]
                    other_spare[1] -= demand[1]
                    other_spare[2] -= demand[2]
                    if other_spare[0] < 0 or other_spare[1] < 0 or other_spare[2] < 0:
                        raise RuntimeError("reservation overlaps an earlier one")
        self.job.append(job)
        self.time.append(time)
        self.end.append(stop)
        self.demand.append(demand)
        self.nodes.append(tuple(nodes))
        self.spare.append(spare)
        for node in nodes:
            self.on_node.setdefault(node, []).append(index)
            self.reserved[node] = True
        bisect.insort(self.ends, stop)
