"""The discrete-event simulation: jobs arrive, wait in a priority queue, run, end.

Sits at the centre of the simulator: it plays a `Workload` on a
`cluster.Cluster` under one `policies.Policy` and returns a `SimResult`
for `run_metrics`. Events are job ends (from a heap), job submissions (the
workload is sorted by submit time) and policy ticks every `interval`
seconds; all events of one instant are applied before the scheduler runs,
and time never goes back.

The scheduler is a priority queue with EASY backfill, run after every
instant with events:

- main pass: start jobs in queue order while they fit;
- the first job that does not fit (the *top* job) gets a reservation: the
  earliest time enough nodes are free for it, releasing running jobs by
  their time limits (`cluster.compute_reservation`);
- backfill: each later job (at most `backfill_depth` of them) starts now if
  it fits now and either ends (by its time limit) before the reservation,
  or leaves the reserved nodes enough for the top job at that time.

A policy may limit the main pass to its `queue_depth` jobs (the loop
policies do: Slurm's default_queue_depth); when that many have started, the
pass ends without backfill and the next instant with an event makes a full
pass, as Slurm's next scheduler run would.

That is the default, `SimOptions(backfill="easy")`. With `backfill="slurm"`
the scheduler works like Slurm's sched/backfill instead: after the main
pass it tests the pending jobs from the top job on, in queue order (the top
job and at most `backfill_depth` more), and gives each job that cannot
start now a reservation: the earliest time it fits, with running jobs
released by their time limits and every earlier reservation booked
(`cluster.ReservationBook`). A job starts now only if it delays none of
those reservations. The book is made again at every full pass; after an
instant with nothing but submissions that all sort behind the last job it
tested, the new jobs are tested against it, within what is left of the
depth. This mode costs time in proportion to the depth times the
reservations per node.

The policy decides only the order of the queue: `reorder` at each tick
returns the new queue; `sort_key` places a job submitted between ticks
(the drf policies put it after the planned jobs, as the daemon's nice
values would: a new job has none yet).

Shortcuts that leave the outcome as a full pass would make it (up to
where exactly the backfill depth falls): a reservation is cached until
it can move (the top job changes, a job ends before its time limit, or a
job started ahead of the top would break it); within one pass free TRES
only shrink, so a job shape that did not fit is not tried again in that
pass; and after an instant with nothing but submissions, only the new
jobs are tried (as backfill, if they sort after the top job and within
the depth the last full pass reached), since everything else is as the
last pass left it.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from slurm_drf.model.types import IntArray
from slurm_drf.sim.cluster import Cluster, Reservation, ReservationBook, RunningJobs, compute_reservation
from slurm_drf.sim.options import BACKFILL_MODES, SimOptions, SimResult
from slurm_drf.sim.policies import Policy, QueueKey
from slurm_drf.sim.table import Vector, build_workload_table
from slurm_drf.sim.workload import SimulationError, Workload, validate_workload

ProgressCallback = Callable[[float], None]


@dataclass(slots=True)
class _Samples:
    """What a run samples at every policy tick: the time, each account's dominant share over
    its weight, each account's pending jobs, and the TRES in use (cpu, mem, gpu)."""

    time: list[float] = field(default_factory=list)
    share: list[list[float]] = field(default_factory=list)
    pending: list[list[int]] = field(default_factory=list)
    used: list[tuple[int, int, int]] = field(default_factory=list)

    def take(self, now: float, share: list[float], pending: list[int], used: tuple[int, int, int]) -> None:
        self.time.append(now)
        self.share.append(share)
        self.pending.append(list(pending))
        self.used.append(used)


class Simulator:
    """One run of one policy; `run()` plays the workload to the last job's end.

    The attributes are the simulator's state. `table` holds what does not
    change during the run; the rest changes with every event. Policies see
    the simulator as a `view.SimulatorView`, a few of these members.
    """

    def __init__(
        self,
        workload: Workload,
        policy: Policy,
        options: SimOptions | None = None,
        progress: ProgressCallback | None = None,
    ) -> None:
        self.workload = workload = validate_workload(workload)
        self.policy = policy
        self.options = options or SimOptions()
        if not (self.options.interval > 0 and math.isfinite(self.options.interval)):
            raise SimulationError(f"interval must be > 0 seconds, got {self.options.interval}")
        if self.options.backfill not in BACKFILL_MODES:
            raise SimulationError(f"backfill must be one of {', '.join(BACKFILL_MODES)}, got {self.options.backfill!r}")
        self.slurm = self.options.backfill == "slurm"
        self.progress = progress
        self.cluster = Cluster(workload.node_type, workload.node_count)
        self.capacity: Vector = self.cluster.capacity
        self.table = table = build_workload_table(workload)
        count = table.job_count

        # Dynamic state.
        self.now = 0.0
        self.record_pending = [0] * len(table.record_tasks)  # pending tasks of each record
        self.record_pending_array = np.zeros(len(table.record_tasks), dtype=np.int64)
        self.started = [False] * count
        self.started_array = np.zeros(count, dtype=np.bool_)
        self.start_time = [math.nan] * count
        self.end_time = [math.nan] * count
        self.backfilled = [False] * count
        self.node_of: list[tuple[int, ...]] = [()] * count
        self.running: dict[int, None] = {}
        self.running_by_end: list[tuple[float, int]] = []  # (expected end, job), ascending
        self.running_jobs = RunningJobs(self.running_by_end, self.node_of, table.job_demand)
        self.usage = np.zeros((len(table.accounts), 3), dtype=np.int64)
        self.pending_count = [0] * len(table.accounts)
        self.account_records: list[list[int]] = [[] for _ in table.accounts]
        self.account_done = [0] * len(table.accounts)  # records in account_records with no task pending
        self.pending_shapes: dict[int, int] = {}
        self.queue: list[int] = []  # pending jobs (and started ones not yet dropped), in policy order
        self.head = 0  # queue entries before it have all started
        self.dead = 0  # started jobs still in the queue
        self.arrivals: list[int] = []  # submitted since the last pass
        self.dirty = True  # something besides submissions changed since the last pass
        self.top_key: QueueKey | None = None  # the top job of the last full pass
        self.horizon: QueueKey | None = None  # the last job the backfill depth let it look at
        self.blocked_all: set[int] = set()  # shapes that fit nowhere now
        self.blocked_shape = np.zeros(len(table.shape_demand), dtype=np.bool_)  # the same, as a mask
        self.blocked_long: set[int] = set()  # shapes that fit nowhere the reservation can spare
        self.reservation: Reservation | None = None
        # slurm backfill: the reservation book of the last full pass, what it has
        # left of the depth, the last job it tested, and per shape (limit, time) of
        # its last reservation (a job of that shape and no shorter limit cannot
        # start before).
        self.book: ReservationBook | None = None
        self.book_budget = 0
        self.book_last: QueueKey | None = None
        self.book_shape: dict[int, tuple[float, float]] = {}
        self.reserved_at = [math.nan] * count
        self.finished = 0
        self.plans = 0
        self.passes = 0
        # Requeued jobs waiting out the requeue delay: a heap of (when it is pending again, job).
        self.rearrivals: list[tuple[float, int]] = []
        self.requeued: list[tuple[int, float, float]] = []

    # ------------------------------------------------------------------
    # Views for the policies

    @property
    def backfill_depth(self) -> int:
        return self.options.backfill_depth

    def pending_jobs(self) -> list[int]:
        """Every pending job (task), in current queue order."""
        started = self.started
        return [job for job in self.queue if not started[job]]

    def pending_records(self) -> list[list[int]]:
        """Per account (by index), its pending records in submit order."""
        pending = self.record_pending
        for index, done in enumerate(self.account_done):
            if not done:
                continue
            records = self.account_records[index]
            front = 0
            while front < len(records) and front < done and pending[records[front]] == 0:
                front += 1
            if front == done:  # the usual case: the oldest records started
                del records[:front]
            else:
                self.account_records[index] = [r for r in records if pending[r] > 0]
            self.account_done[index] = 0
        return self.account_records

    def pending_record_index(self) -> IntArray:
        """`pending_records`, flattened into one index array (for the fast drf engine)."""
        for index, done in enumerate(self.account_done):
            records = self.account_records[index]
            if done > 64 and done * 2 > len(records):
                pending = self.record_pending
                self.account_records[index] = [r for r in records if pending[r] > 0]
                self.account_done[index] = 0
        flat = np.array(list(chain.from_iterable(self.account_records)), dtype=np.int64)
        live: IntArray = flat[self.record_pending_array[flat] > 0]
        return live

    def node_free(self) -> list[Vector]:
        """Each node's free cpu, mem and gres/gpu now."""
        cluster = self.cluster
        return list(zip(cluster.free_cpu.tolist(), cluster.free_mem.tolist(), cluster.free_gpu.tolist(), strict=True))

    def pending_tasks(self, record: int) -> list[int]:
        started = self.started
        return [j for j in self.table.record_tasks[record] if not started[j]]

    # ------------------------------------------------------------------
    # The run

    def run(self) -> SimResult:
        """Events in time order (ends, submissions, policy ticks) until every job has ended."""
        table = self.table
        options = self.options
        interval = options.interval
        self.policy.bind(self)
        ends: list[tuple[float, int]] = []
        submit = table.job_submit
        next_submit = 0
        count = table.job_count
        tick = 0
        next_tick = 0.0
        event_times: list[float] = []
        samples = _Samples()
        last_report = -1
        idle_ticks = 0
        while True:
            t_end = ends[0][0] if ends else math.inf
            t_submit = submit[next_submit] if next_submit < count else math.inf
            t_back = self.rearrivals[0][0] if self.rearrivals else math.inf
            now = min(t_end, t_submit, next_tick, t_back)
            if options.record_events:
                event_times.append(now)
            next_submit = self._advance(now, ends, next_submit)
            ticked = next_tick <= now
            if ticked:
                self._reorder(now)
            for job in self._schedule(now):
                heapq.heappush(ends, (now + table.job_duration[job], job))
            if ticked:
                samples.take(now, self._shares(), self.pending_count, self.cluster.used())
                tick += 1
                next_tick = tick * interval
            if self.progress is not None:
                last_report = self._report_progress(self.progress, last_report)
            if self.finished == count:
                break
            if not ends and next_submit >= count and not self.rearrivals:
                raise SimulationError("jobs left that can never start")
            if ticked and not ends and not self.pending_shapes and not self.rearrivals:
                # Nothing runs and nothing waits until the next submission, and this
                # tick has planned and sampled that: every later tick before the
                # submission would plan the same empty queue from the same state and
                # sample the same zeros. Jump over them (counted in idle_ticks).
                skip_to = max(tick, _first_tick_at(submit[next_submit], interval))
                idle_ticks += skip_to - tick
                tick = skip_to
                next_tick = tick * interval
        return self._result(samples, event_times if options.record_events else None, idle_ticks)

    def _advance(self, now: float, ends: list[tuple[float, int]], next_submit: int) -> int:
        """Move the clock to `now`: the jobs whose time is up end, those submitted by then arrive
        (`ends` a heap of (end, job)); the next job to submit."""
        if now < self.now:
            raise SimulationError(f"time went back from {self.now} to {now}")
        self.now = now
        duration = self.table.job_duration
        while ends and ends[0][0] <= now:
            when, job = heapq.heappop(ends)
            if job in self.running and self.start_time[job] + duration[job] == when:
                self._end(job, now)  # else: a run a requeue cut short
        while self.rearrivals and self.rearrivals[0][0] <= now:
            self._resubmit(heapq.heappop(self.rearrivals)[1])
        submit = self.table.job_submit
        count = self.table.job_count
        while next_submit < count and submit[next_submit] <= now:
            self._submit(next_submit)
            next_submit += 1
        return next_submit

    def _reorder(self, now: float) -> None:
        """A policy tick: the policy may requeue running jobs (its reclaim), then give the queue a new
        order, which the next pass takes whole."""
        for job in self.policy.reclaim(now):
            self.requeue(job, now)
        queue = self.policy.reorder(now)
        if queue is not None:
            self.queue = queue
            self.head = 0
            self.dead = 0
            self.arrivals = []
            self.dirty = True

    def _report_progress(self, progress: Callable[[float], None], last_report: int) -> int:
        """Tell `progress` the finished fraction at every half percent; the step last told."""
        count = self.table.job_count
        step = self.finished * 200 // count
        if step != last_report:
            progress(self.finished / count)
        return step

    def _result(self, samples: _Samples, event_times: list[float] | None, idle_ticks: int) -> SimResult:
        """The run as arrays, once every job has ended."""
        table = self.table
        accounts = len(table.accounts)
        ticks = len(samples.time)
        return SimResult(
            policy=self.policy.name,
            workload=self.workload,
            interval=self.options.interval,
            accounts=table.accounts,
            weights=tuple(table.weights),
            capacity=self.capacity,
            job_account=np.array(table.job_account, dtype=np.int64),
            submit=np.array(table.job_submit, dtype=np.float64),
            start=np.array(self.start_time, dtype=np.float64),
            end=np.array(self.end_time, dtype=np.float64),
            backfilled=np.array(self.backfilled, dtype=np.bool_),
            job_nodes=tuple(self.node_of),
            sample_time=np.array(samples.time, dtype=np.float64),
            sample_share=np.array(samples.share, dtype=np.float64).reshape(ticks, accounts),
            sample_pending=np.array(samples.pending, dtype=np.int64).reshape(ticks, accounts),
            sample_used=np.array(samples.used, dtype=np.int64).reshape(ticks, 3),
            event_times=None if event_times is None else np.array(event_times, dtype=np.float64),
            plans=self.policy.plans,
            passes=self.passes,
            reserved_at=np.array(self.reserved_at, dtype=np.float64) if self.slurm else None,
            idle_ticks=idle_ticks,
            writes=None if self.policy.writes is None else np.array(self.policy.writes, dtype=np.int64),
            requeued=tuple(self.requeued),
        )

    def _shares(self) -> list[float]:
        capacity = self.capacity
        out = []
        for index, row in enumerate(self.usage.tolist()):
            share = max((u / c for u, c in zip(row, capacity, strict=True) if c > 0), default=0.0)
            out.append(share / self.table.weights[index])
        return out

    # ------------------------------------------------------------------
    # Events

    def _submit(self, job: int) -> None:
        table = self.table
        self.policy.on_submit(job)
        account = table.job_account[job]
        self.pending_count[account] += 1
        shape = table.job_shape[job]
        self.pending_shapes[shape] = self.pending_shapes.get(shape, 0) + 1
        record = table.job_record[job]
        if self.record_pending[record] == 0:
            self.account_records[account].append(record)
        self.record_pending[record] += 1
        self.record_pending_array[record] += 1
        queue = self.queue
        sort_key = self.policy.sort_key
        if not queue or sort_key(job) > sort_key(queue[-1]):
            queue.append(job)  # the usual case: a new job sorts last
        else:
            bisect.insort(queue, job, lo=self.head, key=sort_key)
        self.arrivals.append(job)

    def _start(self, job: int, nodes: list[int], now: float, backfill: bool) -> None:
        table = self.table
        if self.started[job]:
            raise SimulationError(f"job {table.job_label[job]} started twice")
        self.started[job] = True
        self.started_array[job] = True
        self.dead += 1
        self.start_time[job] = now
        self.backfilled[job] = backfill
        self.node_of[job] = tuple(nodes)
        self.cluster.allocate(nodes, table.job_demand[job])
        account = table.job_account[job]
        self.usage[account] += table.shape_total[table.job_shape[job]]
        self.pending_count[account] -= 1
        shape = table.job_shape[job]
        left = self.pending_shapes[shape] - 1
        if left:
            self.pending_shapes[shape] = left
        else:
            del self.pending_shapes[shape]
        record = table.job_record[job]
        self.record_pending[record] -= 1
        self.record_pending_array[record] -= 1
        if not self.record_pending[record]:
            self.account_done[account] += 1
        self.running[job] = None
        bisect.insort(self.running_by_end, (now + table.job_limit[job], job))
        self.policy.on_start(job, now)

    def _end(self, job: int, now: float) -> None:
        table = self.table
        self.end_time[job] = now
        self.finished += 1
        self.cluster.release(self.node_of[job], table.job_demand[job])
        account = table.job_account[job]
        self.usage[account] -= table.shape_total[table.job_shape[job]]
        del self.running[job]
        expected = self.start_time[job] + table.job_limit[job]
        where = bisect.bisect_left(self.running_by_end, (expected, job))
        if where >= len(self.running_by_end) or self.running_by_end[where][1] != job:
            raise SimulationError(f"job {table.job_label[job]} ended but was not running")
        del self.running_by_end[where]
        self.dirty = True
        if now < expected:
            # Released before its time limit: a reservation may start earlier.
            self.reservation = None
        self.policy.on_end(job, now)

    def requeue(self, job: int, now: float) -> None:
        """Requeue a running job (a reclaim's victim): its resources are free at once, its run is lost,
        and it is pending again after the requeue delay, with its record's place and its value."""
        table = self.table
        if job not in self.running:
            raise SimulationError(f"job {table.job_label[job]} requeued but not running")
        self.requeued.append((job, now, now - self.start_time[job]))
        self.cluster.release(self.node_of[job], table.job_demand[job])
        account = table.job_account[job]
        self.usage[account] -= table.shape_total[table.job_shape[job]]
        del self.running[job]
        expected = self.start_time[job] + table.job_limit[job]
        del self.running_by_end[bisect.bisect_left(self.running_by_end, (expected, job))]
        if job in self.queue:  # still there as a started job: it goes back in at its key when pending
            where = self.queue.index(job)
            del self.queue[where]
            self.head -= where < self.head
            self.dead = max(self.dead - 1, 0)
        self.started[job] = False
        self.started_array[job] = False
        self.backfilled[job] = False
        self.node_of[job] = ()
        self.start_time[job] = math.nan
        self.dirty = True
        self.reservation = None
        self.book = None
        self.policy.on_end(job, now)
        heapq.heappush(self.rearrivals, (now + self.options.requeue_delay, job))

    def _resubmit(self, job: int) -> None:
        """A requeued job is pending again: as a submission, but its record keeps its place."""
        table = self.table
        account = table.job_account[job]
        record = table.job_record[job]
        if self.record_pending[record] == 0:
            records = self.account_records[account]
            if record in records:
                self.account_done[account] -= 1  # counted among its records with nothing pending
            else:
                bisect.insort(records, record)
        self.record_pending[record] += 1
        self.record_pending_array[record] += 1
        self.pending_count[account] += 1
        shape = table.job_shape[job]
        self.pending_shapes[shape] = self.pending_shapes.get(shape, 0) + 1
        bisect.insort(self.queue, job, lo=self.head, key=self.policy.sort_key)
        self.arrivals.append(job)
        self.dirty = True

    # ------------------------------------------------------------------
    # The scheduler: main pass, reservation, backfill

    def _schedule(self, now: float) -> list[int]:
        """Start what the queue order, the free nodes and the reservation allow now."""
        self.passes += 1
        self._compact_queue()
        arrivals, self.arrivals = self.arrivals, []
        if not self.pending_shapes:
            self.top_key = None
            return []
        if not self.dirty:
            started = self._book_arrivals(arrivals, now) if self.slurm else self._backfill_arrivals(arrivals, now)
            if started is not None:
                return started
        self.dirty = False
        return self._full_pass(now, [])

    def _compact_queue(self) -> None:
        """Drop the started jobs from the queue once they are most of it."""
        if self.head > 1024 and self.head * 2 > len(self.queue):
            del self.queue[: self.head]
            self.head = 0
        if self.dead > 1024 and self.dead * 2 > len(self.queue):
            flags = self.started
            self.queue = [job for job in self.queue if not flags[job]]
            self.head = 0
            self.dead = 0

    def _book_arrivals(self, arrivals: list[int], now: float) -> list[int] | None:
        """Slurm's backfill when only submissions came since the last pass, all behind every job
        the book tested: the book stands (nothing ended, nothing moved), so the new jobs are
        tested against it; None when a full pass is needed."""
        sort_key = self.policy.sort_key
        book, last = self.book, self.book_last
        if book is None or last is None or not all(sort_key(job) > last for job in arrivals):
            return None
        started: list[int] = []
        book.now = now
        for job in sorted(arrivals, key=sort_key):
            if self.book_budget <= 0:
                break
            self.book_budget -= 1
            self.book_last = sort_key(job)
            if self._book_job(job, now):
                started.append(job)
        return started

    def _backfill_arrivals(self, arrivals: list[int], now: float) -> list[int] | None:
        """EASY backfill when only submissions came since the last pass: free TRES and the
        reservation are as that pass left them, so every job it looked at is still blocked and
        only the new jobs can start, as backfill; None when a full pass is needed."""
        sort_key = self.policy.sort_key
        top, reservation = self.top_key, self.reservation
        if top is None or reservation is None or not all(sort_key(job) > top for job in arrivals):
            return None
        started: list[int] = []
        for job in sorted(arrivals, key=sort_key):
            if self.horizon is not None and sort_key(job) > self.horizon:
                break
            if self._backfill(job, now, reservation):
                started.append(job)
        return started

    def _full_pass(self, now: float, started: list[int]) -> list[int]:
        """The main pass over the queue, then the backfill behind its top job."""
        self.blocked_all = set()
        self.blocked_long = set()
        self.blocked_shape[:] = False
        self.top_key = None
        self.horizon = None
        flags = self.started
        queue = self.queue
        while self.head < len(queue) and flags[queue[self.head]]:
            self.head += 1
        passed = self._main_pass(now, started)
        if passed is None:
            return started
        position, reservation = passed
        if self.slurm:
            self.reservation = None
            self.book = None
            if self.top_key is not None:
                self.book = ReservationBook(self.cluster, now)
                self.book_budget = self.options.backfill_depth + 1
                self.book_last = None
                self.book_shape = {}
                self._book_scan(position, now, started)
            return started
        self.reservation = reservation if self.top_key is not None else None
        if self.reservation is not None:
            self._backfill_scan(position, now, self.reservation, started)
        return started

    def _main_pass(self, now: float, started: list[int]) -> tuple[int, Reservation | None] | None:
        """Start jobs in queue order until the first that does not fit (the top job, which gets
        the reservation; Slurm's backfill leaves it to the book); where the backfill goes on and
        the reservation, or None when the policy's queue depth ended the pass."""
        cluster = self.cluster
        table = self.table
        flags = self.started
        demand = table.job_demand
        wanted = table.job_nodes_wanted
        limit = table.job_limit
        reservation = self.reservation
        queue = self.queue
        # The queue does not change during the pass (started jobs are only marked).
        position = self.head
        depth = self.policy.queue_depth
        tested = 0
        while position < len(queue):
            job = queue[position]
            position += 1
            if flags[job]:
                continue
            if depth is not None:
                if tested >= depth:
                    self._stop_at_depth(reservation)
                    return None
                tested += 1
            nodes = cluster.find_nodes(demand[job], wanted[job])
            if nodes is not None:
                self._start(job, nodes, now, backfill=False)
                started.append(job)
                if reservation is not None and (
                    reservation.job == job
                    or (now + limit[job] > reservation.time and not reservation.take(nodes, demand[job]))
                ):
                    reservation = None
                continue
            self.top_key = self.policy.sort_key(job)
            if self.slurm:
                self._block(table.job_shape[job])
                position -= 1  # the top job is the first one the book tests
                break
            if reservation is None or reservation.job != job or reservation.time < now:
                reservation = compute_reservation(cluster, job, demand[job], wanted[job], now, self.running_jobs)
            # Same demand, same nodes: nothing of this shape fits now either.
            self._block(table.job_shape[job])
            break
        return position, reservation

    def _stop_at_depth(self, reservation: Reservation | None) -> None:
        """The main pass tested as many jobs as its depth allows and all started: the rest of the
        queue waits for the next pass (Slurm's next scheduler run), which is a full one."""
        self.reservation = reservation
        self.book = None
        self.dirty = True

    def _backfill_scan(self, position: int, now: float, reservation: Reservation, started: list[int]) -> None:
        """Backfill from `position` on: at most `backfill_depth` pending jobs, in queue order.

        Works through the queue in chunks with numpy: jobs already started and
        shapes known not to fit are skipped without a Python step each.
        """
        queue = self.queue
        budget = self.options.backfill_depth
        chunk_size = 256
        while position < len(queue) and budget > 0 and len(self.blocked_all) < len(self.pending_shapes):
            chunk = np.array(queue[position : position + chunk_size], dtype=np.int64)
            position += chunk_size
            live = np.flatnonzero(~self.started_array[chunk])
            if len(live) >= budget:
                live = live[:budget]
                self.horizon = self.policy.sort_key(int(chunk[live[-1]]))
            budget -= len(live)
            jobs = chunk[live]
            shapes = self.table.job_shape_array[jobs]
            index = 0
            while index < len(jobs):
                # The next job whose shape may still fit (the mask grows as we go).
                open_ = ~self.blocked_shape[shapes[index:]]
                first = int(open_.argmax())
                if not open_[first]:
                    break
                index += first
                job = int(jobs[index])
                index += 1
                if self._backfill(job, now, reservation):
                    started.append(job)
                elif len(self.blocked_all) >= len(self.pending_shapes):
                    return

    def _book_scan(self, position: int, now: float, started: list[int]) -> None:
        """Slurm-like backfill from `position` (the top job) on, in queue order, within the depth."""
        queue = self.queue
        flags = self.started
        sort_key = self.policy.sort_key
        while position < len(queue) and self.book_budget > 0:
            job = queue[position]
            position += 1
            if flags[job]:
                continue
            self.book_budget -= 1
            self.book_last = sort_key(job)
            if self._book_job(job, now):
                started.append(job)

    def _book_job(self, job: int, now: float) -> bool:
        """Start `job` now if that delays no reservation of the book, else give it the earliest one."""
        table = self.table
        book = self.book
        assert book is not None
        shape = table.job_shape[job]
        demand = table.job_demand[job]
        count = table.job_nodes_wanted[job]
        limit = table.job_limit[job]
        after = -math.inf
        previous = self.book_shape.get(shape)
        if previous is not None and limit >= previous[0]:
            after = previous[1]
        free_now = shape not in self.blocked_all
        time, nodes = book.earliest(demand, count, limit, self.running_jobs, after, free_now)
        if time <= now:
            if not book.take_now(nodes, limit, demand):
                raise SimulationError(f"backfill of job {table.job_label[job]} broke a reservation")
            self._start(job, nodes, now, backfill=True)
            return True
        if free_now and self.cluster.find_nodes(demand, count) is None:
            self._block(shape)  # free TRES only shrink during a pass
        book.add(job, time, limit, demand, nodes, self.running_jobs)
        self.book_shape[shape] = (limit, time)
        if math.isnan(self.reserved_at[job]):
            self.reserved_at[job] = time
        return False

    def _block(self, shape: int) -> None:
        self.blocked_all.add(shape)
        self.blocked_shape[shape] = True

    def _backfill(self, job: int, now: float, reservation: Reservation) -> bool:
        """Start `job` now if it fits without delaying the reservation."""
        table = self.table
        shape = table.job_shape[job]
        if shape in self.blocked_all:
            return False
        short = now + table.job_limit[job] <= reservation.time
        if not short and shape in self.blocked_long:
            return False
        cluster = self.cluster
        demand = table.job_demand[job]
        if short:
            nodes = cluster.find_nodes(demand, table.job_nodes_wanted[job])
        else:
            nodes = cluster.find_nodes(demand, table.job_nodes_wanted[job], reservation)
        if nodes is None:
            # Free TRES only shrink during a pass: no other job of this shape
            # fits now, or none that runs past the reservation. Short ones could
            # still use a reserved node, if one has room for them now.
            if short or not any(cluster.fits_node(node, demand) for node in reservation.nodes):
                self._block(shape)
            else:
                self.blocked_long.add(shape)
            return False
        if not short and not reservation.take(nodes, demand):
            raise SimulationError(f"backfill of job {table.job_label[job]} broke the reservation")
        self._start(job, nodes, now, backfill=True)
        return True


def _first_tick_at(time: float, interval: float) -> int:
    """The first tick number whose time (tick x interval, as the loop computes it) is >= time."""
    tick = math.ceil(time / interval)
    while tick > 0 and (tick - 1) * interval >= time:
        tick -= 1
    while tick * interval < time:
        tick += 1
    return tick


def simulate(
    workload: Workload, policy: Policy, options: SimOptions | None = None, progress: ProgressCallback | None = None
) -> SimResult:
    """Play `workload` under `policy` until every job has run."""
    return Simulator(workload, policy, options, progress).run()
