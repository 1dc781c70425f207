"""The service: `slurm-drf daemon`, one cycle every interval until told to stop.

Sits on top of the cycle: cli -> service -> cycle.run.run_cycle. The
cycle itself (read, plan, write, save) is `cycle.run.run_cycle`; this module
only decides when it runs and what happens around it:

- APScheduler runs the cycle from an IntervalTrigger as one job with
  `max_instances=1` and `coalesce=True`: cycles never overlap, and a cycle
  that outlasts the interval makes the scheduler skip the start it missed
  (the next one waits for the next interval boundary) instead of queueing a
  pile of them.
- Failures never end the process. A failed cycle is logged in one line,
  observers hear of it, and the next attempt waits `compute_error_delay`
  (kopf's `error_delays`, in units of the interval); the first good cycle
  resets it.
- Signals only set flags; the main thread acts on them. SIGHUP reloads the
  config (a bad file is logged and the last good config stays), SIGTERM and
  SIGINT let the running cycle finish and return 0.
- Under systemd (Type=notify) it speaks sd_notify(3) over $NOTIFY_SOCKET:
  READY=1 after the first cycle attempt, STATUS= with the last cycle's
  summary, WATCHDOG=1 after every cycle and from the main loop at half of
  $WATCHDOG_USEC, RELOADING=1 around a reload and STOPPING=1 at the end.
- One instance per state directory: `cmd_daemon` holds `StateStore.lock()`.
- Two head nodes (`lease_dir`, cycle.lease): each cycle first takes or
  renews the lease; without it the daemon is the standby, writes nothing
  and tries again when the other's hold ends. A clean stop releases it.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any, Final

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from slurm_drf.config.checks import config_warnings
from slurm_drf.config.load import warn_unknown_accounts
from slurm_drf.config.settings import Config
from slurm_drf.cycle.backends import make_source, make_writer
from slurm_drf.cycle.lease import Lease
from slurm_drf.cycle.recall import Recall
from slurm_drf.cycle.reclaim import SlurmReclaimer
from slurm_drf.cycle.reclaim_moves import ReclaimMoves
from slurm_drf.cycle.run import CycleHistory, CycleObserver, CycleReport, Writer, run_cycle
from slurm_drf.cycle.store import StateStore
from slurm_drf.errors import ConfigError, DrfError
from slurm_drf.model.account_tree import build_tree
from slurm_drf.model.types import Snapshot
from slurm_drf.policy.tree_weights import last_name
from slurm_drf.service.notify import Notifier, status_field
from slurm_drf.slurm.sacct import fetch_allocations
from slurm_drf.slurm.source import ClusterSource
from slurm_drf.trail.history_db import HistoryLedger
from slurm_drf.trail.observers import build_observers, close_observers
from slurm_drf.trail.past import HistoryPast

logger = logging.getLogger(__name__)


JOB_ID: Final = "slurm-drf-cycle"


# After n failed cycles in a row the next attempt waits ERROR_DELAYS[n-1]
# intervals (the last entry repeats), at most MAX_ERROR_DELAY seconds unless
# the interval itself is longer. Two intervals at most: the daemon must
# notice within two intervals that Slurm is back (a lost cycle leaves the
# order stale, while a failed attempt against a down slurmctld costs it
# nothing), and a slow slurmctld still sees half the load.
ERROR_DELAYS: Final = (1.0, 2.0)


MAX_ERROR_DELAY: Final = 600.0


# A cycle running longer than this is taken as hung: the main loop stops
# feeding the systemd watchdog, which then restarts the service. Every Slurm
# command has its own timeout (reads: `slurm_timeout`, at most 600 s,
# config.checks.MAX_SLURM_TIMEOUT), so a healthy cycle never comes close.
HUNG_CYCLE_SECONDS: Final = 900.0
# The longest the main loop sleeps before it looks for a signal again.
MAX_WAIT: Final = 1.0


_STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)


def compute_error_delay(
    failures: int, interval: float, delays: Sequence[float] = ERROR_DELAYS, cap: float = MAX_ERROR_DELAY
) -> float:
    """Seconds until the next attempt after `failures` (>= 1) failed cycles in a row."""
    if failures < 1 or not delays:
        return interval
    factor = delays[min(failures, len(delays)) - 1]
    return min(interval * factor, max(interval, cap))


def changed_settings(old: Config, new: Config) -> list[str]:
    """The Config fields that differ, for the reload log line."""
    return [
        f.name
        for f in dataclasses.fields(Config)
        if f.compare and f.name != "source_path" and getattr(old, f.name) != getattr(new, f.name)
    ]


@dataclasses.dataclass(frozen=True)
class ServiceParts:
    """How the service builds its parts from the config; a test puts fakes here.

    The writer goes with the source: it is rebuilt whenever the source is.
    """

    source: Callable[[Config], ClusterSource] = make_source
    writer: Callable[[ClusterSource], Writer] = make_writer
    observers: Callable[[Config], Sequence[CycleObserver]] = build_observers


@dataclasses.dataclass(frozen=True)
class ServiceOptions:
    """How the daemon was started: `load` re-reads the config on SIGHUP (None: no reload);
    `keep_log_level` leaves the log level alone when the config changes it."""

    load: Callable[[], Config] | None = None
    dry_run: bool = False
    keep_log_level: bool = False


class Service:
    """Runs `run_cycle` every interval, reloads on SIGHUP, stops on SIGTERM.

    `run_once` is one cycle with everything around it (logging, backoff,
    observers, notifications) and no scheduler, for tests and for `run`.
    """

    def __init__(
        self,
        config: Config,
        store: StateStore,
        *,
        options: ServiceOptions = ServiceOptions(),
        parts: ServiceParts = ServiceParts(),
        notifier: Notifier | None = None,
        past: HistoryPast | None = None,
    ) -> None:
        self.config = config
        self.store = store
        # The decayed past from the history (docs/rule.md §6), read before each cycle.
        self._past = past or HistoryPast(store.directory, fetch=fetch_allocations, keep=True)
        # Whose value each job holds, checked against every write on record (cycle.recall).
        self._ledger = HistoryLedger(store.directory)
        # The reclaim's moves, written before they are made (its cooldown across a crash).
        self._moves = ReclaimMoves(store.directory)
        self._recall = Recall(self._ledger)
        # One writer among head nodes; kept until restart, like the state directory.
        self._lease = Lease(config.lease_dir, config.interval) if config.lease_dir else None
        self._standby_for: str | None = None
        self._load = options.load
        self.notifier = notifier or Notifier()
        self._parts = parts
        self._dry_run = options.dry_run
        self._keep_log_level = options.keep_log_level

        # Used by the cycle thread only.
        self._source: ClusterSource | None = None
        # The backend and slurm_timeout the source was built for: a reload that changes either rebuilds it.
        self._source_for: tuple[str, float] | None = None
        self._writer: Writer | None = None
        self._observers: list[CycleObserver] = []
        self._observers_for: Config | None = None
        self._seen_accounts: set[str] = set()
        self._warned_accounts: set[str] = set()
        self._plan_warnings: frozenset[str] = frozenset()

        self.cycles = 0
        self.failures = 0  # failed cycles in a row
        self.last_status = "starting"
        self._ready = False
        self._cycle_lock = threading.Lock()
        self._cycle_started: float | None = None
        self._hung_reported = False

        # Between the signal handlers, the main loop and the cycle thread.
        self._wake = threading.Event()
        self._signals: list[int] = []
        self._stopping = False
        self._schedule_lock = threading.Lock()
        self._scheduler: Any = None

    # -- one cycle ---------------------------------------------------------

    def run_once(self) -> float | None:
        """One cycle, never raising; the delay before the next attempt when it failed."""
        with self._cycle_lock:
            self.cycles += 1
            number = self.cycles
            config = self.config
            self._cycle_started = time.monotonic()
            try:
                dry_run = self._dry_run or config.dry_run
                lease = None if dry_run else self._lease
                hold = lease.acquire() if lease is not None else None
                if hold is not None:
                    return self._standby(number, hold.holder, hold.until)
                self._standby_for = None
                self._prepare(config)
                assert self._source is not None and self._writer is not None
                logger.debug("cycle %d: reading Slurm", number)
                report = run_cycle(
                    self._source,
                    self._writer,
                    config,
                    self.store,
                    dry_run=dry_run,
                    history=CycleHistory(self._past.past(config), self._recall, self._reclaimer(config)),
                    guard=None if lease is None else lease.confirm,
                )
            except Exception as error:
                delay: float | None = self._failed(number, config, error)
            else:
                delay = None
                try:
                    self._succeeded(number, config, report)
                except Exception:  # a bug in the bookkeeping must not stop the service either
                    logger.exception("cycle %d: after the cycle", number)
            finally:
                self._cycle_started = None
                self._hung_reported = False
            return delay

    def _reclaimer(self, config: Config) -> SlurmReclaimer | None:
        """The reclaim step's reader and requeuer, with `reclaim:` set (cycle.reclaim)."""
        return None if config.reclaim is None else SlurmReclaimer(config, self._ledger.moved_since, self._moves)

    def _standby(self, number: int, holder: str, until: float) -> float:
        """Another head's daemon holds the lease: nothing read, nothing written; the delay until its hold ends."""
        text = f"standby: {holder} holds the lease; this daemon writes nothing"
        if self._standby_for != holder:
            logger.info("cycle %d: %s", number, text)
            self._standby_for = holder
        self._notify_cycle(text)
        return max(0.05, until - time.time() + 0.05)

    def _prepare(self, config: Config) -> None:
        """Build what the cycle needs; rebuild observers and source after a reload changed them."""
        if self._observers_for != config:
            self._close_observers()
            try:
                self._observers = list(self._parts.observers(config))
            except Exception as error:
                # Retried next cycle; the cycle itself runs without them.
                logger.error("observers (audit, metrics, reports) not started: %s", _describe(error))
                logger.debug("observer set-up failed", exc_info=True)
            else:
                self._observers_for = config
        if self._source is None or self._source_for != (config.backend, config.slurm_timeout):
            self._source = self._parts.source(config)
            self._source_for = (config.backend, config.slurm_timeout)
            self._writer = None  # the writer goes with the source
        if self._writer is None:
            self._writer = self._parts.writer(self._source)

    def _succeeded(self, number: int, config: Config, report: CycleReport) -> None:
        recovered = self.failures
        self.failures = 0
        text = f"cycle {number}: {report.summary()}"
        if recovered:
            text += f" (recovered after {recovered} failed cycle(s))"
        logger.info("%s", text)
        if report.seconds > config.interval:
            logger.warning(
                "cycle %d took %.1f s, longer than the interval (%g s): the next cycle waits for "
                "the next interval boundary; consider a longer interval",
                number,
                report.seconds,
                config.interval,
            )
        warnings = frozenset(report.plan.warnings)
        for warning in sorted(warnings - self._plan_warnings):
            logger.warning("%s", warning)
        self._plan_warnings = warnings
        self._warn_unknown_accounts(config, report.snapshot)
        for observer in self._observers:
            try:
                observer.on_cycle(report)
            except Exception as error:
                _observer_failed(observer, "on_cycle", error)
        self._notify_cycle(text)

    def _failed(self, number: int, config: Config, error: Exception) -> float:
        self.failures += 1
        delay = compute_error_delay(self.failures, config.interval)
        text = f"cycle {number} failed: {_describe(error)}"
        tail = f"; next attempt in {delay:g} s"
        if self.failures > 1:
            tail += f" ({self.failures} failed in a row)"
        if isinstance(error, DrfError):
            logger.warning("%s%s", text, tail)
        else:
            logger.error("%s%s", text, tail, exc_info=error)
        for observer in self._observers:
            try:
                observer.on_error(error)
            except Exception as observer_error:
                _observer_failed(observer, "on_error", observer_error)
        self._notify_cycle(text + tail)
        return delay

    def _notify_cycle(self, text: str) -> None:
        self.last_status = text
        if not self._ready:
            self._ready = True
            self.notifier.notify("READY=1", status_field(text), "WATCHDOG=1")
        else:
            self.notifier.cycle(text)

    def _warn_unknown_accounts(self, config: Config, snapshot: Snapshot) -> None:
        """Warn once per configured account that no snapshot has shown so far.

        A path names what the tree says where one was read, else its last
        name (`policy.tree_weights.resolve_key`): either way it is known when that
        account is.
        """
        seen = self._seen_accounts
        seen.update(snapshot.table.accounts)
        configured = set(config.weights) | set(config.exclude_accounts)
        new = configured - seen - self._warned_accounts
        if not new:
            return
        tree = build_tree(snapshot.associations) if snapshot.associations else None

        def resolve(key: str) -> str | None:
            found = tree.find(key) if tree is not None else None
            return found if found is not None else (name if (name := last_name(key)) in seen else None)

        # Accounts outside `new` count as known, so only the new ones are reported.
        for message in warn_unknown_accounts(config, seen | (configured - new), resolve):
            logger.warning("%s", message)
        self._warned_accounts |= new

    def _close_observers(self) -> None:
        close_observers(self._observers, lambda observer, error: _observer_failed(observer, "close", error))
        self._observers = []
        self._observers_for = None

    # -- reload ------------------------------------------------------------

    def reload(self) -> bool:
        """Load the config again; keep the last good one when the new one is bad."""
        if self._load is None:
            logger.warning("SIGHUP: no config loader; nothing to reload")
            return False
        self.notifier.reloading()
        try:
            new = self._load()
        except ConfigError as error:
            for line in error.problems:
                logger.error("%s", line)
            self._reload_done(
                False, f"reload failed ({len(error.problems)} problem(s)): running on with the last good configuration"
            )
            return False
        except Exception as error:
            self._reload_done(False, f"reload failed ({_describe(error)}): running on with the last good configuration")
            return False
        old = self.config
        if new.state_dir != old.state_dir:
            # The lock, the state and the audit history stay together.
            logger.warning(
                "state_dir changed to %s: the daemon keeps %s until it is restarted", new.state_dir, old.state_dir
            )
            new = dataclasses.replace(new, state_dir=old.state_dir)
        if new.lease_dir != old.lease_dir:
            # The lease and the state it guards stay together too.
            logger.warning(
                "lease_dir changed to %s: the daemon keeps %s until it is restarted", new.lease_dir, old.lease_dir
            )
            new = dataclasses.replace(new, lease_dir=old.lease_dir)
        changed = changed_settings(old, new)
        if new == old:
            new = old  # nothing to rebuild
        self.config = new
        self.apply_log_level(new)
        _log_config_warnings(new)
        if new.interval != old.interval:
            self._reschedule(new.interval)
            if self._lease is not None:
                self._lease.interval = new.interval
        where = new.source_path or "built-in defaults"
        self._reload_done(True, f"reloaded {where}: " + (f"changed {', '.join(changed)}" if changed else "no changes"))
        return True

    def _reload_done(self, ok: bool, text: str) -> None:
        logger.log(logging.INFO if ok else logging.ERROR, "%s", text)
        self.notifier.ready(f"{text}; last {self.last_status}")

    def apply_log_level(self, config: Config) -> None:
        if not self._keep_log_level:
            logging.getLogger("slurm_drf").setLevel(config.log_level)

    def _reschedule(self, interval: float) -> None:
        with self._schedule_lock:
            if self._scheduler is not None and not self._stopping:
                self._scheduler.reschedule_job(JOB_ID, trigger=_trigger(interval))

    # -- the loop ----------------------------------------------------------

    def _scheduled_cycle(self) -> None:
        """The scheduler's job: a cycle, then the backoff if it failed."""
        try:
            delay = self.run_once()
        except BaseException:  # run_once catches Exception: this is KeyboardInterrupt and kin
            logger.exception("cycle aborted")
            return
        if delay is None or delay == self.config.interval:
            return  # the trigger's own next start
        # Under the lock shutdown() is not called concurrently: modify_job
        # during shutdown(wait=True) would deadlock on the job store lock.
        with self._schedule_lock:
            if self._scheduler is not None and not self._stopping:
                self._scheduler.modify_job(JOB_ID, next_run_time=datetime.now(UTC) + timedelta(seconds=delay))

    def request_stop(self) -> None:
        """What SIGTERM does; callable from any thread."""
        self._note(signal.SIGTERM)

    def request_reload(self) -> None:
        """What SIGHUP does; callable from any thread."""
        self._note(signal.SIGHUP)

    def _note(self, signum: int) -> None:
        self._signals.append(signum)
        self._wake.set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        del frame
        # Only note it: logging or reloading here could deadlock on a lock
        # the interrupted main thread holds.
        self._note(signum)

    def run(self) -> int:
        """Run until SIGTERM/SIGINT (or `request_stop`); 0 when stopped that way."""
        previous = self._install_signal_handlers()
        self.apply_log_level(self.config)
        _log_config_warnings(self.config)
        scheduler = BackgroundScheduler(timezone=UTC, executors={"default": ThreadPoolExecutor(1)})
        scheduler.add_job(
            self._scheduled_cycle,
            _trigger(self.config.interval),
            id=JOB_ID,
            name="cycle",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
            next_run_time=datetime.now(UTC),
        )
        self._scheduler = scheduler
        scheduler.start()
        try:
            stop = self._main_loop()
        finally:
            with self._schedule_lock:
                self._stopping = True
            running = self._cycle_started is not None
            why = "stopping" + (" after the current cycle" if running else "")
            logger.info("%s", why)
            self.notifier.stopping(why)
            scheduler.shutdown(wait=True)
            self._scheduler = None
            self._close_observers()
            if self._lease is not None:
                self._lease.release()
            self._restore_signal_handlers(previous)
        logger.info("stopped on %s after %d cycle(s)", stop, self.cycles)
        return 0

    def _main_loop(self) -> str:
        """Act on signals and feed the watchdog until told to stop; what stopped it."""
        while True:
            self._wake.wait(self._wait_seconds())
            self._wake.clear()
            while self._signals:
                signum = self._signals.pop(0)
                if signum == signal.SIGHUP:
                    logger.info("SIGHUP: reloading the configuration")
                    self.reload()
                else:
                    name = signal.Signals(signum).name
                    logger.info("%s received", name)
                    return name
            self._feed_watchdog()

    def _wait_seconds(self) -> float:
        # A signal the kernel hands to another thread (the scheduler's) does
        # not interrupt this thread's wait, and Python runs its handler only
        # when this thread next wakes: never sleep longer than MAX_WAIT, or a
        # SIGTERM could wait for the next cycle (a flaky test showed it).
        if self.notifier.watchdog_seconds is None:
            return MAX_WAIT
        return max(0.05, min(MAX_WAIT, self.notifier.watchdog_seconds / 2))

    def _feed_watchdog(self) -> None:
        # systemd arms the watchdog once the service is ready.
        if self.notifier.watchdog_seconds is None or not self._ready:
            return
        started = self._cycle_started
        if started is not None and time.monotonic() - started > HUNG_CYCLE_SECONDS:
            if not self._hung_reported:
                logger.error(
                    "cycle %d has run for over %g s: it looks hung; no longer feeding the systemd "
                    "watchdog, which restarts the service",
                    self.cycles,
                    HUNG_CYCLE_SECONDS,
                )
                self._hung_reported = True
            return
        self.notifier.watchdog()

    def _install_signal_handlers(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}
        for signum in (*_STOP_SIGNALS, signal.SIGHUP):
            previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    def _restore_signal_handlers(self, previous: dict[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _log_config_warnings(config: Config) -> None:
    """What `check-config` warns of in a config that loads (an old key name, a history pruned before its past fades)."""
    for warning in config_warnings(config):
        logger.warning("%s", warning)


def _trigger(interval: float) -> IntervalTrigger:
    return IntervalTrigger(seconds=interval, timezone=UTC)


def _describe(error: BaseException) -> str:
    if isinstance(error, DrfError):
        return f"{error.category}: {error}"
    return f"{type(error).__name__}: {error}"


def _observer_failed(observer: object, method: str, error: Exception) -> None:
    logger.error(
        "observer %s.%s failed (the cycle is not affected): %s", type(observer).__name__, method, _describe(error)
    )
    logger.debug("observer traceback", exc_info=error)
