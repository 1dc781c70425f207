"""What watches the cycles: audit history, metrics, report files.

Sits beside the daemon: the service loop asks `build_observers(config)` for
the observers the config enables and tells each about every cycle
(`on_cycle`) and every failed cycle (`on_error`). Observers never raise
for trouble of their own (a full disk, a port in use after start): they
log it, because a missing report must not stop the scheduling.

- `AuditRecorder` (slurm_drf.trail.history_db): always; history.sqlite in state_dir.
- `ReportWriter` (here): when report_dir is set; latest.json (the plan,
  docs/formats.md) and latest.html (the share report), each replaced atomically.
- `PlacementWriter` (slurm_drf.trail.placement): unless `placement: null`; the
  table the job_submit/lua script places new jobs with (docs/formats.md).
- `MetricsRecorder` (slurm_drf.trail.prometheus): when metrics_address or
  metrics_textfile is set; build_observers starts its HTTP server.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

from slurm_drf.config.settings import Config
from slurm_drf.cycle.run import CycleObserver, CycleReport
from slurm_drf.files import write_atomic
from slurm_drf.trail.compaction import HistoryUpkeep
from slurm_drf.trail.history_db import AuditRecorder
from slurm_drf.trail.placement import PlacementWriter
from slurm_drf.trail.plan_output import render_plan_json_bytes
from slurm_drf.trail.prometheus import MetricsRecorder
from slurm_drf.trail.reclaim_shown import ReclaimSection, from_reclaimed
from slurm_drf.trail.share_report import build_report, render_report_html

logger = logging.getLogger(__name__)

LATEST_JSON: Final = "latest.json"
LATEST_HTML: Final = "latest.html"


class ReportWriter:
    """CycleObserver: rewrites latest.json and latest.html in a directory a web server publishes.

    The page shows the cycle's reclaims (docs/rule.md §9) when `reclaim` (the config sets
    `reclaim:`) or the cycle had some.
    """

    def __init__(self, directory: str | os.PathLike[str], *, reclaim: bool = False) -> None:
        self.directory = Path(directory)
        self.reclaim = reclaim

    def on_cycle(self, report: CycleReport) -> None:
        plan_json = render_plan_json_bytes(report.plan, indent=False)
        reclaims = (
            ReclaimSection(tuple(from_reclaimed(r) for r in report.reclaimed))
            if self.reclaim or report.reclaimed
            else None
        )
        page = render_report_html(build_report(report.plan, reclaims)).encode()
        try:
            self.directory.mkdir(mode=0o755, parents=True, exist_ok=True)
            # Readable by the web server: these files are meant to be published.
            write_atomic(self.directory / LATEST_JSON, plan_json, mode=0o644)
            write_atomic(self.directory / LATEST_HTML, page, mode=0o644)
        except OSError as error:
            logger.warning("%s: cannot write the report files: %s", self.directory, error.strerror or error)

    def on_error(self, error: Exception) -> None:
        """The last good report stays: it says when it was taken."""
        del error

    def close(self) -> None:
        """Nothing held between cycles."""


def build_observers(config: Config, *, start: bool = True) -> list[CycleObserver]:
    """The observers this config enables; `start` starts the metrics HTTP server (if configured).

    Callers close them with `close_observers` when the service stops (it
    stops the HTTP server).
    """
    observers: list[CycleObserver] = [
        AuditRecorder(config.state_dir, config.retention_days),
        HistoryUpkeep(config.state_dir, config.interval, config.history_max_mb),
    ]
    if config.placement is not None:
        observers.append(PlacementWriter(config))
    if config.report_dir:
        observers.append(ReportWriter(config.report_dir, reclaim=config.reclaim is not None))
    if config.metrics_address or config.metrics_textfile:
        metrics = MetricsRecorder(
            address=config.metrics_address,
            textfile=config.metrics_textfile,
            tree_users=config.metrics_tree_users,
            tree_max_paths=config.metrics_tree_max_paths,
        )
        if start:
            metrics.start()
        observers.append(metrics)
    return observers


def close_observers(
    observers: Iterable[CycleObserver], failed: Callable[[CycleObserver, Exception], None] | None = None
) -> None:
    """Close every observer that holds something (the metrics server).

    One observer that fails to close must not keep the others open: its
    error goes to `failed` (logged here when None) and the rest are closed.
    """
    for observer in observers:
        close = getattr(observer, "close", None)
        if not callable(close):
            continue
        try:
            close()
        except Exception as error:
            if failed is None:
                logger.error("observer %s.close failed: %s", type(observer).__name__, error, exc_info=error)
            else:
                failed(observer, error)
