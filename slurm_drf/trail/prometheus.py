"""Prometheus metrics of the daemon: shares per account, cycle timings, writes, errors.

Sits beside the daemon: `MetricsRecorder` is a CycleObserver the service
loop tells about every cycle. It keeps its metrics in a private
CollectorRegistry (no process or platform collectors of other code mixed
in, and tests can run several side by side), serves them over HTTP on
`metrics_address` (prometheus_client's own server, on a thread) and/or
rewrites a node_exporter textfile (`metrics_textfile`) after every cycle:
rendered by `generate_latest` (pure), written by `files.write_atomic`.

Labels stay bounded: pool, account, resource (the configured ones),
outcome and kind, and a tree path (below). Never a job; a user only when opted in. An account that leaves a pool
(no running or pending job any more) is removed from the per-account
gauges, so dashboards do not show stale shares. The history gauges (what
the decayed past adds, the share without it; docs/rule.md §6) hold series
only while the plan blends a past, for the same accounts.

Over Slurm's account tree (docs/rule.md §7) the tree gauges have a `path`
label (`physics/theory`): account nodes only, users (`.../user=alice`)
only when the site opts in (`metrics_tree_users`), and at most
`metrics_tree_max_paths` nodes per pool, the shallowest first (by depth,
then path); `slurm_drf_tree_series_dropped{pool}` counts the nodes left
out. A node that leaves the tree loses its series.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

from slurm_drf.errors import ConfigError
from slurm_drf.files import write_atomic
from slurm_drf.trail.history_db import OUTCOMES, error_kind
from slurm_drf.trail.plan_output import ordered_job_count, present_share

if TYPE_CHECKING:
    from slurm_drf.cycle.run import CycleReport
    from slurm_drf.policy.plan import Plan

logger = logging.getLogger(__name__)

# Error kinds shown from the start (at 0), so that rate() and alerts work
# before the first error; others appear when they happen.
KNOWN_ERROR_KINDS: Final = ("slurm_read", "slurm_write", "state", "config", "internal")
# Cycle durations: from a small cluster's tenth of a second to a huge one's minutes.
CYCLE_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
READ_BUCKETS: Final = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

_ADDRESS: Final = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]*)):(?P<port>[0-9]{1,5})$")


def parse_address(address: str) -> tuple[str, int]:
    """(host, port) of `host:port` or `[v6]:port`; an empty host means localhost (127.0.0.1)."""
    found = _ADDRESS.match(address.strip())
    if not found:
        raise ConfigError(f"metrics_address: {address!r} is not host:port (such as 127.0.0.1:9102)")
    host = found["v6"] or found["host"] or "127.0.0.1"
    port = int(found["port"])
    if port > 65535:
        raise ConfigError(f"metrics_address: port {port} is not between 0 and 65535")
    return host, port


class MetricsRecorder:
    """CycleObserver: updates the metrics and publishes them (HTTP and/or a textfile)."""

    def __init__(
        self,
        *,
        address: str | None = None,
        textfile: str | None = None,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
        tree_users: bool = False,
        tree_max_paths: int = 1000,
    ) -> None:
        self.address = address
        self.tree_users = tree_users
        self.tree_max_paths = tree_max_paths
        self._tree_paths: set[tuple[str, str]] = set()
        self._tree_pools: set[str] = set()
        self.textfile = Path(textfile) if textfile else None
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.clock = clock
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._accounts: set[tuple[str, str]] = set()
        self._resource_labels: set[tuple[str, str, str]] = set()
        self._pool_labels: set[tuple[str, str]] = set()
        self._past_accounts: set[tuple[str, str]] = set()
        self._past_labels: set[tuple[str, str, str]] = set()
        self._declare_account_gauges(self.registry)
        self._declare_tree_gauges(self.registry)
        self._declare_cycle_metrics(self.registry)

    def _declare_account_gauges(self, r: CollectorRegistry) -> None:
        """Per pool and account: shares, jobs, rank, and what the past adds."""
        labels = ("pool", "account")
        self.dominant_share = Gauge(
            "slurm_drf_dominant_share",
            "Largest share of any resource the account holds in the pool (unweighted)",
            labels,
            registry=r,
        )
        self.weighted_share = Gauge(
            "slurm_drf_weighted_share",
            "Dominant share divided by the account's weight: what DRF equalises",
            labels,
            registry=r,
        )
        self.running_jobs = Gauge(
            "slurm_drf_running_jobs", "Running (and suspended) jobs of the account", labels, registry=r
        )
        self.pending_jobs = Gauge(
            "slurm_drf_pending_jobs", "Pending jobs of the account that the daemon orders", labels, registry=r
        )
        self.rank = Gauge(
            "slurm_drf_account_rank",
            "Place of the account by weighted share in the pool (1: lowest; equal shares share a rank)",
            labels,
            registry=r,
        )
        self.resource_share = Gauge(
            "slurm_drf_resource_share",
            "Share of one resource of the pool that the account holds",
            (*labels, "resource"),
            registry=r,
        )
        self.past_usage = Gauge(
            "slurm_drf_account_past_usage",
            "What the decayed past adds to the account's usage of one resource (TRES units; only with history)",
            (*labels, "resource"),
            registry=r,
        )
        self.present_share = Gauge(
            "slurm_drf_present_share",
            "Weighted share over the running usage alone, without the past (only with history)",
            labels,
            registry=r,
        )

    def _declare_tree_gauges(self, r: CollectorRegistry) -> None:
        """Per pool and node of the account tree (H-DRF), and what metrics_tree_max_paths left out."""
        tree_labels = ("pool", "path")
        self.tree_weighted_share = Gauge(
            "slurm_drf_tree_weighted_share",
            "H-DRF weighted share of a node of the account tree as the order starts (rescaled among its siblings)",
            tree_labels,
            registry=r,
        )
        self.tree_dominant_share = Gauge(
            "slurm_drf_tree_dominant_share",
            "Largest share of any resource the subtree of a node of the account tree holds in the pool",
            tree_labels,
            registry=r,
        )
        self.tree_dropped = Gauge(
            "slurm_drf_tree_series_dropped",
            "Nodes of the pool's account tree left out of the tree gauges by metrics_tree_max_paths",
            ("pool",),
            registry=r,
        )

    def _declare_cycle_metrics(self, r: CollectorRegistry) -> None:
        """The pools' capacity and each cycle: its time, its writes, its errors, its outcome."""
        self.capacity = Gauge(
            "slurm_drf_pool_capacity",
            "Capacity of the pool in one resource (Slurm TRES units)",
            ("pool", "resource"),
            registry=r,
        )
        self.cycle_duration = Histogram(
            "slurm_drf_cycle_duration_seconds",
            "Duration of a whole cycle: read, plan, write",
            registry=r,
            buckets=CYCLE_BUCKETS,
        )
        self.read_seconds = Histogram(
            "slurm_drf_slurm_read_seconds", "Time to read the cluster from Slurm", registry=r, buckets=READ_BUCKETS
        )
        self.writes = Counter(
            "slurm_drf_writes", "Values written to Slurm, by outcome (applied, gone, failed)", ("outcome",), registry=r
        )
        self.errors = Counter("slurm_drf_errors", "Cycles that failed, by kind of error", ("kind",), registry=r)
        self.reclaims = Counter(
            "slurm_drf_reclaims",
            "Running jobs the reclaim step moved for jobs within their guarantees (docs/rule.md §9), "
            "by pool and outcome (requeued, cancelled, gone, failed)",
            ("pool", "outcome"),
            registry=r,
        )
        self.reclaim_lost = Counter(
            "slurm_drf_reclaim_lost_hours",
            "Resource-hours of work the jobs requeued or cancelled by reclaim had done, by pool and resource",
            ("pool", "resource"),
            registry=r,
        )
        self.cycles = Counter("slurm_drf_cycles", "Cycles completed (dry runs included)", registry=r)
        self.deferred = Gauge(
            "slurm_drf_deferred_writes", "Writes left to the next cycle by max_writes_per_cycle", registry=r
        )
        self.pending_total = Gauge("slurm_drf_ordered_jobs", "Pending jobs ordered in the last cycle", registry=r)
        self.last_success = Gauge(
            "slurm_drf_last_success_timestamp_seconds",
            "When the last cycle completed (seconds since the epoch)",
            registry=r,
        )
        self.dry_run = Gauge("slurm_drf_dry_run", "1 when the last cycle wrote nothing (dry run)", registry=r)
        for outcome in OUTCOMES:
            self.writes.labels(outcome)
        for kind in KNOWN_ERROR_KINDS:
            self.errors.labels(kind)

    # -- publishing ---------------------------------------------------------

    def start(self) -> None:
        """Serve the metrics over HTTP when an address is configured (idempotent)."""
        if self.address is None or self._server is not None:
            return
        host, port = parse_address(self.address)
        try:
            server, thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as error:
            raise ConfigError(f"metrics_address {self.address}: cannot listen: {error.strerror or error}") from error
        self._server, self._thread = server, thread
        logger.info("serving Prometheus metrics on http://%s/metrics", self.address_bound or self.address)

    @property
    def port(self) -> int | None:
        """The port the HTTP server listens on (useful with port 0), or None."""
        if self._server is None:
            return None
        return int(self._server.server_port)

    @property
    def address_bound(self) -> str | None:
        if self._server is None or self.address is None:
            return None
        host, _ = parse_address(self.address)
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    def close(self) -> None:
        """Stop the HTTP server, if any."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def render(self) -> bytes:
        """The metrics in Prometheus' text format (pure: reads the registry)."""
        return generate_latest(self.registry)

    def write_textfile(self) -> None:
        if self.textfile is None:
            return
        try:
            write_atomic(self.textfile, self.render(), mode=0o644)
        except OSError as error:
            logger.warning("%s: cannot write the metrics textfile: %s", self.textfile, error.strerror or error)

    # -- CycleObserver ------------------------------------------------------

    def _record_outcomes(self, report: CycleReport) -> None:
        """What the cycle's writes and reclaims came to (a dry run's are none)."""
        if report.result is not None:
            self.writes.labels("applied").inc(len(report.result.applied))
            self.writes.labels("gone").inc(len(report.result.gone))
            self.writes.labels("failed").inc(len(report.result.failed))
        for moved in report.reclaimed:
            self.reclaims.labels(moved.pool, moved.outcome).inc()
            if moved.outcome in ("requeued", "cancelled"):
                for resource, hours in moved.lost_hours.items():
                    self.reclaim_lost.labels(moved.pool, resource).inc(hours)

    def on_cycle(self, report: CycleReport) -> None:
        plan = report.plan
        accounts: set[tuple[str, str]] = set()
        resource_labels: set[tuple[str, str, str]] = set()
        for share in plan.accounts:
            key = (share.pool, share.account)
            accounts.add(key)
            self.dominant_share.labels(*key).set(share.dominant_share)
            self.weighted_share.labels(*key).set(share.weighted_share)
            self.running_jobs.labels(*key).set(share.running_jobs)
            self.pending_jobs.labels(*key).set(share.pending_jobs)
            self.rank.labels(*key).set(share.rank)
            for resource in plan.resources:
                resource_labels.add((*key, resource))
                self.resource_share.labels(*key, resource).set(share.shares.get(resource, 0.0))
        for key in self._accounts - accounts:
            for gauge in (self.dominant_share, self.weighted_share, self.running_jobs, self.pending_jobs, self.rank):
                gauge.remove(*key)
        for labels in self._resource_labels - resource_labels:
            self.resource_share.remove(*labels)
        self._accounts, self._resource_labels = accounts, resource_labels
        self._record_past(plan)
        self._record_tree(plan)
        pool_labels = {(pool.name, resource) for pool in plan.pools for resource in plan.resources}
        for pool in plan.pools:
            for resource in plan.resources:
                self.capacity.labels(pool.name, resource).set(pool.capacity.get(resource, 0))
        for gone in self._pool_labels - pool_labels:
            self.capacity.remove(*gone)
        self._pool_labels = pool_labels

        self.cycle_duration.observe(report.seconds)
        self.read_seconds.observe(report.read_seconds)
        if not report.dry_run:
            self._record_outcomes(report)
        self.deferred.set(report.deferred)
        self.pending_total.set(ordered_job_count(plan))
        self.dry_run.set(1 if report.dry_run else 0)
        self.cycles.inc()
        self.last_success.set(self.clock())
        self.write_textfile()

    def _record_past(self, plan: Plan) -> None:
        """The history gauges: series for the plan's accounts when it blends a past, none otherwise."""
        accounts: set[tuple[str, str]] = set()
        past_labels: set[tuple[str, str, str]] = set()
        if plan.blends_past:
            for share in plan.accounts:
                key = (share.pool, share.account)
                accounts.add(key)
                self.present_share.labels(*key).set(present_share(share))
                for resource in plan.resources:
                    past_labels.add((*key, resource))
                    self.past_usage.labels(*key, resource).set(share.past.get(resource, 0))
        for key in self._past_accounts - accounts:
            self.present_share.remove(*key)
        for labels in self._past_labels - past_labels:
            self.past_usage.remove(*labels)
        self._past_accounts, self._past_labels = accounts, past_labels

    def _record_tree(self, plan: Plan) -> None:
        """The tree gauges: account nodes (and users when opted in), capped per pool, the deepest left out."""
        paths: set[tuple[str, str]] = set()
        pools: set[str] = set()
        kinds = ("account", "user") if self.tree_users else ("account",)
        for pool in plan.pools:
            if not pool.tree:
                continue
            pools.add(pool.name)
            rows = sorted((row for row in pool.tree if row.kind in kinds), key=lambda row: (row.depth, row.path))
            kept = rows[: max(self.tree_max_paths, 0)]
            self.tree_dropped.labels(pool.name).set(len(rows) - len(kept))
            for row in kept:
                key = (pool.name, row.path)
                paths.add(key)
                self.tree_weighted_share.labels(*key).set(row.weighted_share)
                self.tree_dominant_share.labels(*key).set(row.dominant_share)
        for key in self._tree_paths - paths:
            self.tree_weighted_share.remove(*key)
            self.tree_dominant_share.remove(*key)
        for name in self._tree_pools - pools:
            self.tree_dropped.remove(name)
        self._tree_paths, self._tree_pools = paths, pools

    def on_error(self, error: Exception) -> None:
        self.errors.labels(error_kind(error)).inc()
        self.write_textfile()
