"""The `daemon` verb: find the config, hold the state lock, run the Service."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import os
from collections.abc import Callable, MutableMapping
from typing import Any

from slurm_drf.config.load import CONFIG_ENV, DEFAULT_CONFIG_PATH, resolve_config
from slurm_drf.config.settings import Config
from slurm_drf.cycle.store import StateStore
from slurm_drf.service.loop import Service, ServiceOptions
from slurm_drf.service.notify import Notifier

logger = logging.getLogger(__name__)


def config_loader(
    explicit: str | None, environ: MutableMapping[str, str], state_dir: str | None = None
) -> Callable[[], Config]:
    """Loads the config by the search path each time it is called (start-up and SIGHUP).

    `state_dir` (--state-dir) replaces the file's, so that everything kept
    in the state directory (state, lock, audit history) lands in one place.
    """

    def load() -> Config:
        config = resolve_config(explicit, environ, private=True)
        return config if state_dir is None else dataclasses.replace(config, state_dir=state_dir)

    return load


def add_daemon_parser(subparsers: Any) -> argparse.ArgumentParser:
    """The `daemon` verb; `subparsers` is what ArgumentParser.add_subparsers returned."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "daemon",
        help="the service: a cycle every interval (SIGHUP reloads, SIGTERM stops)",
        description="Run a cycle every interval until SIGTERM or SIGINT. SIGHUP reloads the config "
        "(a bad file is logged and the last good config kept). Speaks sd_notify under systemd "
        "(Type=notify). One daemon per state directory.",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help=f"config YAML (default: ${CONFIG_ENV}, then {DEFAULT_CONFIG_PATH}, then built-in defaults)",
    )
    parser.add_argument("--state-dir", metavar="DIR", help="state directory (default: the config's state_dir)")
    parser.add_argument("--dry-run", action="store_true", help="plan every cycle but write nothing")
    parser.set_defaults(func=cmd_daemon)
    return parser


def cmd_daemon(args: argparse.Namespace) -> int:
    """`slurm-drf daemon`: exit 2 for a bad config, 1 when the state directory is taken, else 0 on SIGTERM."""
    # cli.main raised the collector's thresholds for one-shot verbs; a
    # long-running process wants the defaults back.
    gc.set_threshold(700, 10, 10)
    load = config_loader(args.config, os.environ, args.state_dir)
    config = load()
    keep_log_level = bool(getattr(args, "debug", False) or getattr(args, "quiet", False))
    if not keep_log_level:
        logging.getLogger("slurm_drf").setLevel(config.log_level)
    # APScheduler logs every start at INFO and every skipped start (what a
    # slow cycle is meant to cause) as a warning; the service logs its own.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    if os.geteuid() == 0:
        logger.info(
            "notice: running as root; allowed (Slurm's SlurmUser often is root), but a dedicated "
            "SlurmUser account limits what a mistake can reach"
        )
    store = StateStore(config.state_dir, config.lease_dir)
    store.lock()
    try:
        dry_run = bool(args.dry_run)
        logger.info(
            "daemon started: config %s, state %s, every %g s, mode %s%s",
            config.source_path or "built-in defaults",
            store.directory,
            config.interval,
            config.mode,
            ", dry run (writes nothing)" if dry_run or config.dry_run else "",
        )
        service = Service(
            config,
            store,
            options=ServiceOptions(load=load, dry_run=dry_run, keep_log_level=keep_log_level),
            notifier=Notifier.from_environment(os.environ),
        )
        return service.run()
    finally:
        store.unlock()
