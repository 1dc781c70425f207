"""The queue orders the simulator compares: fifo, multifactor, drf, drf-history, drf-naive, hdrf, and the daemon's loop.

Sits beside `engine`: a policy only orders the pending queue. The engine
binds it to itself, seen as a `view.SimulatorView` (so this module never
imports `engine` or `cluster`), calls `reorder` at every tick (every
`interval` simulated seconds) for the new queue, and inserts a job
submitted between ticks by `sort_key`; the queue is always sorted by
`sort_key` (ascending; no two jobs have the same key).

Every policy runs under one site model (`daemon_loop.SlurmSide`, bound by
the base `Policy`): the same jobs in the urgent QOS, the same age and QOS
terms in Slurm's priority, the main pass stopping at the same depth. Each
policy adds only its own term:

- `fifo`: none: age and QOS, then job (submit) order.
- `multifactor`: Slurm's classic fair share. Usage is billing x seconds,
  decayed with a half-life; billing is MAX_TRES over TRESBillingWeights
  that make a whole node bill the same in every resource (CPU=1,
  Mem=cpus/mem per MiB, GRES/gpu=cpus/gpus); the fair-share factor is
  2^(-U/S) with U the account's share of all usage and S its share of all
  weights (shares). Priority is PriorityWeightFairshare x that factor plus
  age and QOS, truncated, recomputed every tick; ties go to the older job.
- `drf`: this project's engine. Every tick it builds a `model.Snapshot` of
  the simulated cluster and calls `policy.plan.compute_plan` with the carried
  `PolicyState`, exactly as the daemon does, and orders the queue by the
  plan's `order`. The `fast` engine calls the same lower-level functions
  `compute_plan` runs (`running_fingerprint`, `TieBook.open`,
  `compute_before`, `order_pending`) on arrays the simulator keeps up to date,
  without building a snapshot and a full plan; the tests check that both
  give the same order on every tick.
- `drf-history`: `drf` with the daemon's memory of past use (docs/rule.md
  §6): usage is running + round(w x decayed average allocation), the
  average kept by `policy.decayed_usage.DecayedUsage` fed with the simulated
  cluster's running allocation at every instant it changes (each record
  holds until the next one, so the integral is exact: what the daemon's
  history would hold had it recorded a cycle at every event). The whole run
  is known, so there is no gap (no unknown time). `w` and the half-life come
  from the config's `history:`; without one, the defaults of
  `config.settings.HistoryConfig` (the policy is always on; a weight of 0
  gives `drf` exactly).
- `drf-naive`: the textbook progressive-filling loop with shares floored to
  whole percents and ties broken by account name: the bug that hands the
  first accounts by name everything when shares are small. It takes each
  account's jobs in Slurm's order, as `drf` does.
- `drf-labels`, `drf-spread`: the daemon's loop as Slurm sees it (`daemon_loop`):
  the fast engine's order every tick, written as nice values (the order
  labels, or the spread values of 0.1.0) under the write cap; the queue
  in Slurm's priority order from those values plus age and QOS factors,
  the main pass limited to default_queue_depth. `drf` stays the idealised
  reference. They record the values written per tick (`Policy.writes`).
- `hdrf`: H-DRF over the workload's account tree (docs/rule.md §7,
  `policy.engine.merge_engine.order_online`, the daemon's online rule: rescaling,
  no saturation) with the users of each account as
  its leaves: every tick, each leaf's running allocation and its pending
  records in submit order (Slurm's order) become a `TreeNode` tree
  (`sim.tree_layout.build_tree`), ordered with the carried tie state as `drf`
  carries it. A flat workload is the accounts under the root, each with
  its users below it, so `hdrf` also shares an account between its users;
  where every account has one user it is `drf` exactly. `drf` on a tree
  workload is the flat rule over the accounts (the tree and the users
  ignored).
- `hdrf-rollup`: the same walk with the naive roll-up (a parent's
  consumption is the plain sum of its children's, `sim.tree_layout.rollup_order`,
  equal to `policy.rule.hdrf_order` with the roll-up): the paper's counterexample,
  where a child holding what no sibling wants starves its siblings.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

import numpy as np

from slurm_drf.config.settings import Config, HistoryConfig
from slurm_drf.model.codec import format_time
from slurm_drf.model.types import PENDING, RUNNING, FloatArray, IntArray, Job, Node, Snapshot, Tres, freeze_tres
from slurm_drf.policy.decay import decay_factor
from slurm_drf.policy.decayed_usage import EMPTY_PAST, DecayedUsage, UsageByPool, UsageRecord
from slurm_drf.policy.engine.merge_engine import order_online
from slurm_drf.policy.engine.order import compute_before, order_pending
from slurm_drf.policy.guarantees import account_bounds, arrange
from slurm_drf.policy.labels import fewest_writes
from slurm_drf.policy.placement import PlacementTable, Placer
from slurm_drf.policy.plan import compute_plan, past_usage
from slurm_drf.policy.pools import DEFAULT_POOL
from slurm_drf.policy.state import EMPTY_STATE, PolicyState, TieBook, running_fingerprint
from slurm_drf.policy.values import value_offset
from slurm_drf.sim.daemon_loop import (
    DEFAULT_SLURM_SIDE,
    MAPPINGS,
    SlurmSide,
    build_space,
    compute_values,
    placement_pool,
    select_writes,
    slurm_priority,
    strict_gap,
)
from slurm_drf.sim.tree_layout import build_layout, build_tree, rollup_order
from slurm_drf.sim.workload import RESOURCES, SimulationError

if TYPE_CHECKING:
    from slurm_drf.sim.table import WorkloadTable
    from slurm_drf.sim.view import SimulatorView

# (major, minor, array task): ascending is the queue order.
QueueKey = tuple[float, float, int]

POLICIES: Final = ("fifo", "multifactor", "drf", "drf-naive")
# drf with the memory of past use (docs/rule.md §6).
HISTORY_POLICIES: Final = ("drf-history",)
# The daemon's loop modelled (`sim.daemon_loop`): the order labels, and the spread values of 0.1.0.
LOOP_POLICIES: Final = tuple(f"drf-{mapping}" for mapping in MAPPINGS)
# The daemon's loop with the job_submit script placing jobs at submission (docs/rule.md §8).
PLACED_POLICY: Final = "drf-placed"
# The daemon's loop with guarantees (each account its weighted fair share) and reclaim (sim.reclaim).
RECLAIM_POLICY: Final = "drf-reclaim"
# Over the account tree (docs/rule.md §7): H-DRF and the naive roll-up.
TREE_POLICIES: Final = ("hdrf", "hdrf-rollup")
ALL_POLICIES: Final = (*POLICIES, *HISTORY_POLICIES, *LOOP_POLICIES, PLACED_POLICY, RECLAIM_POLICY, *TREE_POLICIES)
# `slurm-drf simulate` with no --policies: the queue orders and the daemon's loop as it is.
DEFAULT_POLICIES: Final = (*POLICIES, "drf-labels")
PARTITION: Final = "sim"
# Slurm's default PriorityDecayHalfLife is 7 days.
DEFAULT_HALF_LIFE: Final = 7 * 86400.0


class Policy:
    """Base: Slurm's priority from the site model's age and QOS factors alone; subclasses add their own term.

    Every policy runs under one site model (`daemon_loop.SlurmSide`): the same
    urgent jobs, the same age and QOS terms, the same main-pass depth.
    """

    name = "policy"

    def __init__(self, site: SlurmSide | None = None) -> None:
        self.site = site or DEFAULT_SLURM_SIDE
        # Jobs the engine's main pass tests before it stops (Slurm's default_queue_depth).
        self.queue_depth: int | None = self.site.queue_depth
        self.plans = 0
        # Values written to Slurm at each tick, for policies that model writing.
        self.writes: list[int] | None = None
        self._sim: SimulatorView | None = None
        self._table: WorkloadTable | None = None

    @property
    def sim(self) -> SimulatorView:
        if self._sim is None:
            raise SimulationError(f"policy {self.name} used before bind()")
        return self._sim

    @property
    def table(self) -> WorkloadTable:
        """`sim.table`, kept at bind: `sort_key` reads it for every queue insertion."""
        if self._table is None:
            raise SimulationError(f"policy {self.name} used before bind()")
        return self._table

    def bind(self, sim: SimulatorView) -> None:
        self._sim = sim
        self._table = table = sim.table
        records = len(table.record_tasks)
        # The same jobs are urgent under every policy of one workload.
        self.urgent = self.site.draw_urgent(sim.workload.seed, records)
        self.submit = np.array(table.record_submit, dtype=np.float64)
        self.number = np.array(table.record_number, dtype=np.int64)
        # Each record's age and QOS terms as the queue is sorted now; a new one has waited 0 s.
        # A list: sort_key reads it at every insertion.
        self.term: list[float] = self.site.weighted(np.zeros(records), self.urgent).tolist()

    def age(self, now: float) -> tuple[IntArray, IntArray]:
        """The pending records (grouped by account) and their age and QOS factors, truncated as Slurm
        sums them; their terms in `sort_key`'s list brought to `now` (as Slurm recalculates them)."""
        pending = self.sim.pending_record_index()
        terms = self.site.weighted(now - self.submit[pending], self.urgent[pending])
        term = self.term
        for record, value in zip(pending.tolist(), terms.tolist(), strict=True):  # the pending ones only
            term[record] = value
        factors: IntArray = np.floor(terms).astype(np.int64)  # SlurmSide.factors of the same jobs
        return pending, factors

    def sort_key(self, job: int) -> QueueKey:
        """Where `job` belongs in the queue: Slurm's priority (age and QOS) high first, then job number."""
        table = self.table
        record = table.job_record[job]
        return (-math.floor(self.term[record]), float(table.record_number[record]), table.job_task[job])

    def reorder(self, now: float) -> list[int] | None:
        """The new queue (every pending job, sorted by `sort_key`) at a tick, or None to keep it."""
        self.age(now)
        self.plans += 1
        return sorted(self.sim.pending_jobs(), key=self.sort_key)

    def on_start(self, job: int, now: float) -> None:
        """A job started."""

    def on_submit(self, job: int) -> None:
        """A job was submitted, before it is queued (`sort_key`): what a job_submit script sees."""

    def on_end(self, job: int, now: float) -> None:
        """A job ended (or was requeued)."""

    def reclaim(self, now: float) -> Sequence[int]:
        """At a tick, before `reorder`: running jobs to requeue (a reclaim's victims); none by default."""
        del now
        return ()


class FifoPolicy(Policy):
    """priority/multifactor without fair share: age and QOS, then job (submit) order."""

    name = "fifo"


class MultifactorPolicy(Policy):
    """Slurm-style fair share on decayed MAX_TRES billing usage."""

    name = "multifactor"

    def __init__(
        self, half_life_s: float = DEFAULT_HALF_LIFE, calc_period: float = 0.0, site: SlurmSide | None = None
    ) -> None:
        """`calc_period`: Slurm's PriorityCalcPeriod, the time between recalculations of usage and
        factors (0: at every tick); jobs submitted between two take the factors of the last."""
        super().__init__(site)
        if not half_life_s > 0:
            raise SimulationError(f"half-life must be > 0 seconds, got {half_life_s}")
        if not 0 <= calc_period < math.inf:
            raise SimulationError(f"calc period must be >= 0 seconds, got {calc_period}")
        self.half_life_s = half_life_s
        self.calc_period = calc_period
        self.factor: list[float] = []

    def bind(self, sim: SimulatorView) -> None:
        super().bind(sim)
        cpu, mem, gpu = sim.workload.node_type.cpu, sim.workload.node_type.mem, sim.workload.node_type.gpu
        # TRESBillingWeights="CPU=1,Mem=<cpu/mem>,GRES/gpu=<cpu/gpu>" (per MiB, per GPU):
        # with PriorityFlags=MAX_TRES a whole node bills `cpu` whatever fills it.
        self.billing_weights = (1.0, cpu / mem if mem else 0.0, cpu / gpu if gpu else 0.0)
        accounts = len(sim.table.accounts)
        self.rate = [0.0] * accounts  # billing units of the running jobs
        self.fresh = [0.0] * accounts  # billing-seconds since the last tick
        self.usage = [0.0] * accounts  # decayed usage as of the last tick
        self.factor = [1.0] * accounts
        total_shares = sum(sim.table.weights)
        self.shares = [w / total_shares for w in sim.table.weights]
        self.last = 0.0
        self.last_tick = 0.0

    def billing(self, job: int) -> float:
        table = self.table
        total = table.shape_total[table.job_shape[job]]
        return max(w * t for w, t in zip(self.billing_weights, total, strict=True))

    def _accrue(self, now: float) -> None:
        elapsed = now - self.last
        if elapsed > 0:
            for index, rate in enumerate(self.rate):
                if rate:
                    self.fresh[index] += rate * elapsed
        self.last = now

    def on_start(self, job: int, now: float) -> None:
        self._accrue(now)
        self.rate[self.table.job_account[job]] += self.billing(job)

    def on_end(self, job: int, now: float) -> None:
        self._accrue(now)
        self.rate[self.table.job_account[job]] -= self.billing(job)

    def sort_key(self, job: int) -> QueueKey:
        # PriorityWeightFairshare x the factor, plus age and QOS, truncated as Slurm does.
        table = self.table
        record = table.job_record[job]
        fairshare = self.site.weight_fairshare * self.factor[table.job_account[job]]
        return (-math.floor(fairshare + self.term[record]), float(table.record_number[record]), table.job_task[job])

    def reorder(self, now: float) -> list[int] | None:
        self._accrue(now)
        self.age(now)
        if now - self.last_tick >= self.calc_period:
            decay = decay_factor(now - self.last_tick, self.half_life_s)
            self.last_tick = now
            self.usage = [u * decay + f for u, f in zip(self.usage, self.fresh, strict=True)]
            self.fresh = [0.0] * len(self.fresh)
            total = sum(self.usage)
            if total > 0:
                self.factor = [2.0 ** (-(u / total) / s) for u, s in zip(self.usage, self.shares, strict=True)]
        self.plans += 1
        return sorted(self.sim.pending_jobs(), key=self.sort_key)


class DrfPolicy(Policy):
    """This project's engine, replanned every tick as the daemon does."""

    name = "drf"

    def __init__(self, config: Config | None = None, engine: str = "plan", site: SlurmSide | None = None) -> None:
        super().__init__(site)
        if engine not in ("plan", "fast"):
            raise SimulationError(f"drf engine must be plan or fast, got {engine!r}")
        self.engine = engine
        self.base_config = config
        self.state: PolicyState = EMPTY_STATE
        # Each account's guarantee by the config's resources (UNNAMED where none), for
        # `guarantees.guaranteed_first`; None: no guarantees (sim.reclaim sets them).
        self.guarantee_rows: list[list[int] | None] | None = None
        # Every tick's order as record numbers, for the equivalence tests.
        self.history: list[list[int]] | None = None

    def bind(self, sim: SimulatorView) -> None:
        super().bind(sim)
        table = sim.table
        base = self.base_config or Config()
        weights = dict(base.weights)
        weights.update(sim.workload.weights)
        # One partition, one pool, nothing excluded: the simulated cluster is
        # what the engine manages; the weights are the workload's over the config's.
        self.config = replace(
            base, weights=MappingProxyType(weights), partitions=None, pools=(), exclude_accounts=frozenset()
        )
        node_tres = freeze_tres(sim.workload.node_type.tres())
        self.nodes = tuple(Node(f"sim{i:05d}", (PARTITION,), "idle", node_tres) for i in range(sim.workload.node_count))
        self.tres: list[Tres] = [freeze_tres(dict(zip(RESOURCES, total, strict=True))) for total in table.shape_total]
        # A record shows the TRES of one task: its first task's, as squeue would.
        self.record_tres: list[Tres] = [
            freeze_tres(dict(zip(RESOURCES, total, strict=True))) for total in table.record_total
        ]
        self.running_jobs: dict[int, Job] = {}  # plan engine: what squeue would list as running
        self.running_labels: list[str] = []  # fast engine: their job ids, sorted
        self.pending_cache: dict[int, tuple[int, int, Job]] = {}
        self.record_of_label = {label: r for r, label in enumerate(table.record_label)}
        # Each job's place in the last plan; -1 until it is planned.
        self.position = np.full(table.job_count, -1, dtype=np.int64)
        # Fast engine: the config's resources as columns of the simulator's arrays
        # (a resource the simulator does not model has no capacity and no demand).
        known = [r in RESOURCES for r in self.config.resources]
        self.columns = np.array(
            [RESOURCES.index(r) if k else 0 for r, k in zip(self.config.resources, known, strict=True)], dtype=np.int64
        )
        self.missing = np.array([not k for k in known], dtype=np.bool_)
        self.capacity = np.array(sim.capacity, dtype=np.int64)[self.columns]
        self.capacity[self.missing] = 0
        self.fractions = [self.config.weight(a) for a in table.accounts]
        # The most age and QOS add: sort_key's new jobs sort from 1.0 up, after every planned one.
        self.ceiling = float(self.site.weight_age + self.site.weight_qos)

    def on_start(self, job: int, now: float) -> None:
        table = self.table
        if self.engine == "plan":
            self.running_jobs[job] = Job(
                job_id=table.job_label[job],
                account=table.accounts[table.job_account[job]],
                user=table.job_user[job],
                partition=PARTITION,
                state=RUNNING,
                priority=1,
                nice=0,
                held=False,
                submit_time=table.job_submit[job],
                array_tasks=1,
                tres=self.tres[table.job_shape[job]],
            )
        else:
            bisect.insort(self.running_labels, table.job_label[job])

    def on_end(self, job: int, now: float) -> None:
        if self.engine == "plan":
            del self.running_jobs[job]
        else:
            label = self.table.job_label[job]
            del self.running_labels[bisect.bisect_left(self.running_labels, label)]

    def _pending_job(self, record: int, priority: int) -> Job:
        """The pending record as squeue shows it: one line, `array_tasks` pending tasks, its base priority."""
        tasks = self.sim.record_pending[record]
        cached = self.pending_cache.get(record)
        if cached is not None and cached[:2] == (tasks, priority):
            return cached[2]
        table = self.table
        first = table.record_tasks[record][0]
        # Base priority is the site's age and QOS factors: within an account,
        # they, then submit order and job number decide, as they do for Slurm.
        job = Job(
            job_id=table.record_label[record],
            account=table.accounts[table.record_account[record]],
            user=table.job_user[first],
            partition=PARTITION,
            state=PENDING,
            priority=priority,
            nice=0,
            held=False,
            submit_time=table.record_submit[record],
            array_tasks=tasks,
            tres=self.record_tres[record],
        )
        self.pending_cache[record] = (tasks, priority, job)
        return job

    def snapshot(self, now: float, aged: tuple[IntArray, IntArray]) -> Snapshot:
        """The simulated cluster as the daemon would read it from Slurm (`aged`: `age(now)`)."""
        jobs = list(self.running_jobs.values())
        pending, factors = aged
        # Slurm's priority is at least 1 (0 would hold the job).
        base = 1 + factors
        jobs.extend(self._pending_job(r, p) for r, p in zip(pending.tolist(), base.tolist(), strict=True))
        return Snapshot(cluster="sim", taken_at=format_time(now), nodes=self.nodes, jobs=tuple(jobs))

    def _plan_order(self, now: float, aged: tuple[IntArray, IntArray]) -> IntArray:
        plan = compute_plan(self.snapshot(now, aged), self.config, self.state, self._past())
        self.state = plan.state
        ordered = sorted(
            (j for j in plan.jobs if j.order is not None), key=lambda j: j.order if j.order is not None else -1
        )
        skipped = [j for j in plan.jobs if j.order is None]
        if skipped:
            raise SimulationError(f"the engine skipped job {skipped[0].job_id}: {skipped[0].reason}")
        return np.array([self.record_of_label[j.job_id] for j in ordered], dtype=np.int64)

    def _fast_order(self, aged: tuple[IntArray, IntArray]) -> IntArray:
        """`compute_plan`'s order, from the lower-level functions it calls."""
        return self._ordering(self._slurm_grouped(aged))[0]

    def _slurm_grouped(self, aged: tuple[IntArray, IntArray]) -> IntArray:
        """The pending records grouped by account, each account's in Slurm's order: what compute_plan sorts.

        The daemon takes an account's jobs by base priority (the site's age
        and QOS factors, `aged` from `age`) high first, then submit time, then job number.
        """
        grouped, factors = aged
        account = self.table.record_account_array[grouped]
        index: IntArray = grouped[np.lexsort((self.number[grouped], self.submit[grouped], -factors, account))]
        return index

    def _ordering(self, index: IntArray) -> tuple[IntArray, FloatArray]:
        """Records `index` (grouped by account, each account's in Slurm's order) in DRF order, and their levels."""
        table = self.table
        ties = self._tie_book()
        account_of = table.record_account_array[index]
        demand = self._demand(index)
        before = compute_before(demand, account_of, self._usage())
        ordering = order_pending(before, account_of, self.capacity, self.fractions, table.accounts, ties)
        self.state = ties.state(self.state.jobs)
        order = ordering.order
        if self.guarantee_rows is not None:
            bounds = account_bounds(self.guarantee_rows, len(self.columns))
            order = arrange(order, account_of, demand, self._running_usage(), bounds)[0]
        ordered: IntArray = index[order]
        levels: FloatArray = ordering.level[order]
        return ordered, levels

    def _running_usage(self) -> IntArray:
        """(accounts, config resources) the running allocation."""
        usage: IntArray = self.sim.usage[:, self.columns]
        usage[:, self.missing] = 0
        return usage

    def _usage(self) -> IntArray:
        """(accounts, config resources) §2's usage: the running allocation, with what the past adds."""
        usage = self._running_usage()
        added = self._past_added()
        return usage if added is None else usage + added

    def _tie_book(self) -> TieBook:
        """The tie rule's book this plan starts from, after the last plan's state (as compute_plan's)."""
        # running_fingerprint sorts the ids; they are kept sorted, so that is cheap.
        fingerprint = running_fingerprint(self.running_labels)
        return TieBook.open(self.state, fingerprint, self.config.tie_half_life_cycles)

    def _demand(self, index: IntArray) -> IntArray:
        """(records, config resources) the whole pending demand of records `index`: TRES x pending tasks."""
        tasks = self.sim.record_pending_array[index]
        demand: IntArray = self.table.record_total_array[index][:, self.columns] * tasks[:, None]
        demand[:, self.missing] = 0
        return demand

    def _past(self) -> UsageByPool | None:
        """The decayed past `compute_plan` blends in (docs/rule.md §6); None: pure DRF."""
        return None

    def _past_added(self) -> IntArray | None:
        """(accounts, config resources) what the past adds to usage on the fast path; None: nothing."""
        return None

    def reorder(self, now: float) -> list[int] | None:
        self.plans += 1
        aged = self.age(now)
        order = self._plan_order(now, aged) if self.engine == "plan" else self._fast_order(aged)
        if self.history is not None:
            self.history.append([self.table.record_number[r] for r in order.tolist()])
        return self._planned(order)

    def sort_key(self, job: int) -> QueueKey:
        # Planned jobs in plan order, their values beyond Slurm's other factors
        # (strict weighting). A job submitted since the last plan has no nice
        # from the daemon yet: it sorts after every planned job, by Slurm's
        # priority from age and QOS, then job number.
        table = self.table
        position = self.position[job]
        if position >= 0:
            return (0.0, float(position), table.job_task[job])
        record = table.job_record[job]
        major = 1.0 + self.ceiling - math.floor(self.term[record])
        return (major, float(table.record_number[record]), table.job_task[job])

    def _planned(self, order: IntArray) -> list[int]:
        """The queue for records in plan order; an array's pending tasks follow one another."""
        sim = self.sim
        jobs = self.table.record_single_array[order]
        if not len(jobs) or jobs.min() >= 0:  # no array: one job per record
            self.position[jobs] = np.arange(len(jobs))
            queue: list[int] = jobs.tolist()
            return queue
        queue = []
        for position, record in enumerate(order.tolist()):
            tasks = sim.pending_tasks(record)
            self.position[tasks] = position
            queue.extend(tasks)
        return queue


class HistoryDrfPolicy(DrfPolicy):
    """drf with the memory of past use: usage = running + round(w x decayed average allocation)."""

    name = "drf-history"

    def __init__(
        self,
        config: Config | None = None,
        engine: str = "plan",
        keep_records: bool = False,
        site: SlurmSide | None = None,
    ) -> None:
        super().__init__(config, engine, site)
        # With keep_records, every record fed and every tick's (time, past), for the tests.
        self.records: list[UsageRecord] | None = [] if keep_records else None
        self.pasts: list[tuple[float, UsageByPool]] | None = [] if keep_records else None

    def bind(self, sim: SimulatorView) -> None:
        super().bind(sim)
        history = self.config.history or HistoryConfig()
        self.config = replace(self.config, history=history)
        # The simulation knows every moment of its run: no time is unknown, so no gap.
        self.decayed = DecayedUsage(history.half_life_s, math.inf)
        # Running allocation per account as of the last change, in the simulator's RESOURCES.
        self.running = np.zeros((len(sim.table.accounts), len(RESOURCES)), dtype=np.int64)
        self.recorded = [r for r in self.config.resources if r in RESOURCES]
        self.recorded_columns = [RESOURCES.index(r) for r in self.recorded]
        # The time of a change not yet fed to `decayed`; the run starts with nothing running.
        self.changed_at: float | None = 0.0
        self.past: UsageByPool = EMPTY_PAST

    def _feed(self, time: float) -> None:
        """The running allocation from `time` on, as one history record (pool, account, resource)."""
        names = self.table.accounts
        rows = self.running[:, self.recorded_columns].tolist()
        usage = {names[a]: dict(zip(self.recorded, row, strict=True)) for a, row in enumerate(rows) if any(row)}
        record = UsageRecord(time, {DEFAULT_POOL: usage})
        self.decayed.add(record)
        if self.records is not None:
            self.records.append(record)

    def _change(self, job: int, now: float, sign: int) -> None:
        # A record holds until the next one: the allocation of the last instant is
        # fed once this instant changes it again (all events of one instant come first).
        if self.changed_at is not None and now > self.changed_at:
            self._feed(self.changed_at)
        self.changed_at = now
        table = self.table
        self.running[table.job_account[job]] += np.array(table.shape_total[table.job_shape[job]], dtype=np.int64) * sign

    def on_start(self, job: int, now: float) -> None:
        self._change(job, now, 1)
        super().on_start(job, now)

    def on_end(self, job: int, now: float) -> None:
        self._change(job, now, -1)
        super().on_end(job, now)

    def reorder(self, now: float) -> list[int] | None:
        if self.changed_at is not None:
            self._feed(self.changed_at)
            self.changed_at = None
        self.past = self.decayed.past_at(now)
        if self.pasts is not None:
            self.pasts.append((now, self.past))
        return super().reorder(now)

    def _past(self) -> UsageByPool | None:
        return self.past

    def _past_added(self) -> IntArray | None:
        # compute_plan's own conversion (past_term: w x past, rounded to whole units), so that
        # both engines blend exactly what the daemon does.
        return past_usage(self.past, DEFAULT_POOL, self.config, self.table.accounts)


class HdrfPolicy(DrfPolicy):
    """H-DRF over the account tree, the users of each account its leaves; `rollup`: the naive roll-up."""

    def __init__(self, config: Config | None = None, rollup: bool = False, site: SlurmSide | None = None) -> None:
        super().__init__(config, engine="fast", site=site)
        self.rollup = rollup
        self.name = "hdrf-rollup" if rollup else "hdrf"

    def bind(self, sim: SimulatorView) -> None:
        super().bind(sim)
        users = self.config.fairness_within_account == "user"
        self.layout = build_layout(sim.workload, sim.table, self.fractions, users)
        # Running allocation of each leaf (user of an account), in the simulator's RESOURCES.
        self.leaf_usage = np.zeros((self.layout.size, len(RESOURCES)), dtype=np.int64)

    def on_start(self, job: int, now: float) -> None:
        super().on_start(job, now)
        table = self.table
        self.leaf_usage[self.layout.leaf_of_job[job]] += table.shape_total[table.job_shape[job]]

    def on_end(self, job: int, now: float) -> None:
        super().on_end(job, now)
        table = self.table
        self.leaf_usage[self.layout.leaf_of_job[job]] -= table.shape_total[table.job_shape[job]]

    def reorder(self, now: float) -> list[int] | None:
        self.plans += 1
        # Grouped by account, each account's records in Slurm's order: each leaf's in Slurm's order.
        index = self._slurm_grouped(self.age(now))
        usage = self.leaf_usage[:, self.columns]
        usage[:, self.missing] = 0
        tree = build_tree(self.layout, usage.tolist(), index.tolist(), self._demand(index).tolist())
        ties = self._tie_book()
        capacity = self.capacity.tolist()
        if self.rollup:
            pairs = rollup_order(tree.root, capacity, ties)
        else:
            pairs = order_online(tree.root, capacity, ties).pairs()
        self.state = ties.state(self.state.jobs)
        order = np.array([tree.records[key][job] for key, job in pairs], dtype=np.int64)
        if self.history is not None:
            self.history.append([self.table.record_number[r] for r in order.tolist()])
        return self._planned(order)


class LoopDrfPolicy(DrfPolicy):
    """The daemon's loop as Slurm sees it (`sim.daemon_loop`): the DRF order, written as nice values by
    `mapping` under the write cap, and the queue in Slurm's priority order from them plus age and QOS."""

    def __init__(
        self,
        mapping: str,
        config: Config | None = None,
        slurm: SlurmSide | None = None,
        track_minimum: bool = False,
        placed: bool = False,
    ) -> None:
        super().__init__(config, engine="fast", site=slurm)
        if mapping not in MAPPINGS:
            raise SimulationError(f"unknown mapping {mapping!r}; choose from {', '.join(MAPPINGS)}")
        self.mapping = mapping
        self.name = PLACED_POLICY if placed else f"drf-{mapping}"
        # With `placed`, the job_submit script places each job at submission (docs/rule.md §8)
        # with what it read after the last cycle: the table and, since, its own placements.
        self.placed = placed
        self.placer: Placer | None = None
        self.writes = []
        # With track_minimum, per cycle: writes within the first `horizon` jobs of the order, and the
        # fewest that would have made the values Slurm held rise there by the gap (`labels.fewest_writes`).
        self.horizon_writes: list[int] | None = [] if track_minimum else None
        self.minimum: list[int] | None = [] if track_minimum else None

    def bind(self, sim: SimulatorView) -> None:
        super().bind(sim)
        table = sim.table
        records = len(table.record_tasks)
        self.space = build_space(self.config, self.site, sim.backfill_depth)
        self.strict_gap = strict_gap(self.site)
        self.nice = np.zeros(records, dtype=np.int64)  # what Slurm holds: 0 until written
        self.known = np.zeros(records, dtype=np.bool_)  # the daemon's memory: it wrote that value
        # Each record's priority as the queue is sorted now; a new one has waited 0 s and has no value.
        unwritten = np.zeros(records, dtype=np.int64)
        first = slurm_priority(self.site.factors(np.zeros(records), self.urgent), unwritten)
        self.key_array = -first.astype(np.float64)
        self.key: list[float] = self.key_array.tolist()  # a list: sort_key reads it at every insertion

    def sort_key(self, job: int) -> QueueKey:
        table = self.table
        record = table.job_record[job]
        return (self.key[record], float(table.record_number[record]), table.job_task[job])

    def reorder(self, now: float) -> list[int] | None:
        self.plans += 1
        assert self.writes is not None
        ordered, levels = self._ordering(self._slurm_grouped(self.age(now)))
        current, known = self.nice[ordered], self.known[ordered]
        values = compute_values(self.mapping, levels, current, known, self.config, self.space, self.strict_gap)
        chosen = select_writes(values, current, known, self.config.max_writes_per_cycle)
        if self.minimum is not None and self.horizon_writes is not None:
            band = min(self.space.horizon, len(ordered))
            gap = self.space.gap if self.mapping == "labels" else self.strict_gap
            self.minimum.append(fewest_writes(current[:band], known[:band], gap))
            self.horizon_writes.append(int(np.count_nonzero(chosen < band)))
        self.nice[ordered[chosen]] = values[chosen]
        self.known[ordered[chosen]] = True
        self.writes.append(len(chosen))
        if self.placed:
            self.placer = self._placer(ordered, levels)
        # Slurm's queue: its priority high first, then job number.
        priority = slurm_priority(
            self.site.factors(now - self.submit[ordered], self.urgent[ordered]), self.nice[ordered]
        )
        self.key_array[ordered] = -priority
        self.key = self.key_array.tolist()
        return self._planned(ordered[np.lexsort((self.number[ordered], -priority))])

    def _placer(self, ordered: IntArray, levels: FloatArray) -> Placer:
        """The script's view after this cycle: the table it publishes (`sim.daemon_loop.placement_pool`)."""
        usage = self._usage()
        np.add.at(usage, self.table.record_account_array[ordered], self._demand(ordered))
        pool = placement_pool(
            usage,
            self.fractions,
            self.table.accounts,
            self.capacity,
            (levels, self.nice[ordered]),
            self.space,
            value_offset(self.config),
        )
        return Placer(PlacementTable(0.0, math.inf, "nice", self.config.resources, (pool,)))

    def on_submit(self, job: int) -> None:
        """Placed at submission: an array's record once, with all its tasks (`Placer.place`)."""
        table = self.table
        record = table.job_record[job]
        if self.placer is None or table.record_tasks[record][0] != job:
            return
        demand = table.record_total_array[record][self.columns]
        demand[self.missing] = 0
        account = table.accounts[table.record_account[record]]
        value = self.placer.place(("sim",), account, demand.tolist(), len(table.record_tasks[record]))
        if value is None:
            return
        self.nice[record] = value
        self.known[record] = True  # adopted as the daemon's own (docs/rule.md §8)
        factors = self.site.factors(np.zeros(1), self.urgent[record : record + 1])
        self.key_array[record] = -float(slurm_priority(factors, np.array([value], dtype=np.int64))[0])
        self.key[record] = float(self.key_array[record])


def build_policy(
    name: str,
    config: Config | None = None,
    half_life_s: float = DEFAULT_HALF_LIFE,
    engine: str = "plan",
    slurm: SlurmSide | None = None,
    track_minimum: bool = False,
) -> Policy:
    """A fresh policy by name (one per run: policies keep state)."""
    if name == "fifo":
        return FifoPolicy(slurm)
    if name == "multifactor":
        return MultifactorPolicy(half_life_s, site=slurm)
    if name == "drf":
        return DrfPolicy(config, engine, slurm)
    if name == "drf-history":
        return HistoryDrfPolicy(config, engine, site=slurm)
    if name == "drf-naive":
        from slurm_drf.sim.naive import NaiveDrfPolicy  # noqa: PLC0415  (it builds on this module's drf)

        return NaiveDrfPolicy(config, slurm)
    if name in TREE_POLICIES:
        return HdrfPolicy(config, rollup=name == "hdrf-rollup", site=slurm)
    if name in LOOP_POLICIES:
        return LoopDrfPolicy(name.removeprefix("drf-"), config, slurm, track_minimum)
    if name == PLACED_POLICY:
        return LoopDrfPolicy("labels", config, slurm, track_minimum, placed=True)
    if name == RECLAIM_POLICY:
        from slurm_drf.sim.reclaim import ReclaimPolicy  # noqa: PLC0415  (it builds on this module's loop)

        return ReclaimPolicy(config, slurm)
    raise SimulationError(f"unknown policy {name!r}")
