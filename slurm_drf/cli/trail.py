"""The verbs `report`, `audit` and `explain`: their arguments and what they run.

Sits under cli.main, which adds these parsers (`add_observe_parsers`) and
maps exceptions to exit codes; each `cmd_*` reads the cluster (a snapshot
file or live Slurm through the cycle's source) or the history, calls the
pure functions of trail.share_report, trail.history_db and trail.explain, and prints or writes
(atomically) the result.
"""

from __future__ import annotations

import argparse
import logging
import os
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, TextIO, TypeAlias

import orjson

from slurm_drf.cli.options import add_snapshot_limit, exits_without_teardown, leave_to_exit, snapshot_limit
from slurm_drf.config.load import resolve_config
from slurm_drf.config.settings import Config
from slurm_drf.errors import InputError, StateError, shorten
from slurm_drf.files import write_atomic
from slurm_drf.model.codec import format_time
from slurm_drf.model.snapshot_file import SnapshotFileSource
from slurm_drf.model.types import Snapshot
from slurm_drf.policy.decayed_usage import UsageByPool
from slurm_drf.policy.plan import compute_plan
from slurm_drf.policy.state import EMPTY_STATE, PolicyState
from slurm_drf.trail.audit_query import (
    MAX_AUDIT_LIMIT,
    AuditQuery,
    check_query,
    parse_since,
    query_history,
    recorded_reclaims,
    render_audit,
)
from slurm_drf.trail.history_db import AUDIT_FORMATS, AUDIT_TABLES, history_path, open_history_readonly
from slurm_drf.trail.reclaim_shown import ReclaimEvent, ReclaimSection, from_records
from slurm_drf.trail.share_report import REPORT_FORMATS, render_report

# Live Slurm (the cycle's backends, sacct), the daemon's state and history,
# and `explain` are imported by the functions that use them: `report` on a
# snapshot file pays for none of them at start-up.

logger = logging.getLogger(__name__)

# argparse names no public type for what add_subparsers returns (and it is generic only to type checkers).
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

# How far back `report` shows the history's reclaims by default.
RECLAIMS_SINCE: Final = "24h"

_CONFIG_HELP = "config YAML (default: $SLURM_DRF_CONFIG, /etc/slurm-drf/config.yaml, built-in defaults)"


def _snapshot(args: argparse.Namespace, config: Config) -> Snapshot:
    """The snapshot file given, or the live cluster through the configured backend."""
    if args.snapshot:
        source = SnapshotFileSource(args.snapshot, snapshot_limit(args), keep_decoded=exits_without_teardown())
        snapshot = source.fetch_snapshot()
        leave_to_exit(source)
        return snapshot
    from slurm_drf.cycle.backends import make_source

    return make_source(config).fetch_snapshot()


def _state_directory(args: argparse.Namespace, config: Config) -> str | None:
    """The daemon's state directory to read: --state-dir (refused when it names no directory),
    else the config's for the live cluster, none for a snapshot."""
    if args.state_dir is not None and not Path(args.state_dir).is_dir():
        # Planning on nothing would explain an order the daemon never wrote.
        raise InputError(f"{args.state_dir}: no such state directory (given with --state-dir)")
    directory: str | None = args.state_dir or (None if args.snapshot else config.state_dir)
    return directory


def _past(args: argparse.Namespace, directory: str | None, config: Config) -> UsageByPool | None:
    """The decayed past now, from the daemon's history in `directory` (docs/rule.md §6); None: pure DRF.

    For the live cluster the spans the history does not know come from
    sacct, as the daemon's do; a snapshot file is planned on the history alone.
    """
    if directory is None:
        return None
    from slurm_drf.slurm.sacct import fetch_allocations
    from slurm_drf.trail.past import HistoryPast

    return HistoryPast(directory, fetch=None if args.snapshot else fetch_allocations).past(config)


def use_color(choice: str, stream: TextIO, environ: os._Environ[str] | dict[str, str]) -> bool:
    """`auto`: colour only on a terminal and when NO_COLOR is unset (no-color.org)."""
    if choice == "always":
        return True
    if choice == "never":
        return False
    return stream.isatty() and not environ.get("NO_COLOR")


def _emit(text: str, output: str | None) -> None:
    if output is None or output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        write_atomic(Path(output), text.encode(), mode=0o644)
    except OSError as error:
        raise InputError(f"--output {output}: cannot write: {error.strerror or error}") from error
    logger.info("wrote %s", output)


# --------------------------------------------------------------------------
# report


def add_report_parser(verbs: Subparsers) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "report",
        help="share report per pool and account, of the live cluster or a snapshot",
        description="Per pool: each account's weight, running and pending jobs, usage and share of every "
        "resource, dominant resource and share, weighted share, and rank by weighted share (1: lowest; "
        "equal shares share a rank). The account served next owns order 0 of the pool's DRF order "
        "(the lowest share among accounts with pending jobs; a tie may decide among equal ones). "
        "With `history:` set, also what the decayed past adds to each account and its share without it; "
        "with `reclaim:` set (or reclaims in the history), the recent reclaims and the work they cost.",
    )
    parser.add_argument("--snapshot", metavar="FILE", help="a snapshot JSON instead of the live cluster")
    add_snapshot_limit(parser)
    parser.add_argument("--config", metavar="FILE", help=_CONFIG_HELP)
    parser.add_argument(
        "--format",
        choices=REPORT_FORMATS,
        default="table",
        help="table (default), json, csv, markdown or html (one self-contained page)",
    )
    parser.add_argument("--output", "-o", metavar="FILE", help="write here (atomically) instead of stdout")
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help="the daemon's state directory, whose history gives the decayed past when `history:` is set; "
        "default: the config's state_dir for the live cluster, none for a snapshot",
    )
    parser.add_argument(
        "--reclaims-since",
        metavar="WHEN",
        default=RECLAIMS_SINCE,
        help="the reclaims (docs/rule.md §9) the history of the state directory holds from this time on: "
        f"7d, 12h, 30m back from now, or a date or time (default {RECLAIMS_SINCE}); shown when "
        "`reclaim:` is set or the history holds some",
    )
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="table colours: auto (a terminal and NO_COLOR unset), always, never",
    )
    parser.set_defaults(func=cmd_report)
    return parser


def cmd_report(args: argparse.Namespace) -> int:
    config = resolve_config(args.config, os.environ)
    directory = _state_directory(args, config)
    since = parse_since(args.reclaims_since, time.time())
    snapshot = _snapshot(args, config)
    plan = compute_plan(snapshot, config, past=_past(args, directory, config))
    color = args.format == "table" and args.output in (None, "-") and use_color(args.color, sys.stdout, os.environ)
    reclaims = _recent_reclaims(directory, since, config.reclaim is not None)
    _emit(render_report(plan, args.format, color=color, reclaims=reclaims), args.output)
    leave_to_exit(snapshot, plan)
    for warning in plan.warnings:
        logger.warning("%s", warning)
    return 0


def _recent_reclaims(directory: str | None, since: float, reclaim_on: bool) -> ReclaimSection | None:
    """The report's reclaims: the history's since `since` (read-only); None (no section) when it holds
    none and `reclaim:` is not set, or when no state directory is read."""
    if directory is None:
        return None
    events = from_records(recorded_reclaims(directory, since=since), str(history_path(directory)))
    if not events and not reclaim_on:
        return None
    return ReclaimSection(events, format_time(since))


# --------------------------------------------------------------------------
# audit


def add_audit_parser(verbs: Subparsers) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "audit",
        help="query the history: values written, shares, cycles, errors",
        description="Reads history.sqlite in the state directory (written by the daemon every cycle). Oldest first.",
    )
    parser.add_argument(
        "table",
        nargs="?",
        choices=AUDIT_TABLES,
        default="writes",
        help="what to list: writes (default), shares, cycles or errors",
    )
    parser.add_argument(
        "--since",
        metavar="WHEN",
        help="from this time on: 7d, 12h, 30m, 2w back from now, or 2026-11-30, or 2026-11-30T02:00:00Z",
    )
    parser.add_argument("--account", metavar="NAME", help="only this account (writes, shares)")
    parser.add_argument("--job", metavar="JOBID", help="only this job (writes)")
    parser.add_argument("--pool", metavar="NAME", help="only this pool (writes, shares)")
    # Read by cmd_audit, so that a bad number is one line like every other bad input.
    parser.add_argument("--limit", default="0", metavar="N", help="only the newest N rows (0: all)")
    parser.add_argument("--format", choices=AUDIT_FORMATS, default="table")
    parser.add_argument("--config", metavar="FILE", help=_CONFIG_HELP)
    parser.add_argument("--state-dir", metavar="DIR", help="state directory (default: the config's state_dir)")
    parser.add_argument("--output", "-o", metavar="FILE", help="write here (atomically) instead of stdout")
    parser.set_defaults(func=cmd_audit)
    return parser


def _row_limit(text: str) -> int:
    """`--limit`: 0 (all) to the most rows SQLite's LIMIT takes; an InputError (one line, exit 2) otherwise."""
    digits = text.strip()
    if (
        not (digits.isascii() and digits.isdigit())
        or len(digits) > len(str(MAX_AUDIT_LIMIT))
        or int(digits) > MAX_AUDIT_LIMIT
    ):
        raise InputError(f"--limit {shorten(repr(text), 60)}: expected a number from 0 (all) to {MAX_AUDIT_LIMIT}")
    return int(digits)


def cmd_audit(args: argparse.Namespace) -> int:
    config = resolve_config(args.config, os.environ)
    since = parse_since(args.since, time.time()) if args.since else None
    query = AuditQuery(
        table=args.table, since=since, account=args.account, job=args.job, pool=args.pool, limit=_row_limit(args.limit)
    )
    check_query(query)
    path = history_path(args.state_dir or config.state_dir)
    connection = open_history_readonly(path)
    try:
        records = query_history(connection, query, str(path))
    except sqlite3.Error as error:
        raise StateError(f"{path}: cannot read the history: {error}") from error
    finally:
        connection.close()
    _emit(render_audit(records, args.format, args.table), args.output)
    return 0


# --------------------------------------------------------------------------
# explain


def add_explain_parser(verbs: Subparsers) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "explain",
        help="why a pending job has its place and value",
        description="Its account's usage and shares, the job's level, how many jobs of which accounts are "
        "ahead of it and why, whether a tie decided, the value and what Slurm has now; with `history:` set, "
        "what the past adds and the place the job would have without it; from the history, the reclaims "
        "that moved the job or made room for it (also for a job that has left the queue).",
    )
    parser.add_argument("job", metavar="JOBID", help="the job (an array task finds its pending array record)")
    parser.add_argument("--snapshot", metavar="FILE", help="a snapshot JSON instead of the live cluster")
    add_snapshot_limit(parser)
    parser.add_argument("--config", metavar="FILE", help=_CONFIG_HELP)
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help="the daemon's state (tie wins, users' own nice, and the history for `history:`) to plan "
        "with; default: the config's state_dir for the live cluster, none for a snapshot",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.set_defaults(func=cmd_explain)
    return parser


def _state_for_explain(directory: str | None, lease_dir: str | None = None) -> PolicyState:
    """The daemon's state to plan with (in `lease_dir` with two head nodes); said when there is none."""
    if directory is None:
        return EMPTY_STATE
    from slurm_drf.cycle.store import STATE_FILE, StateStore

    directory = lease_dir or directory
    if not (Path(directory) / STATE_FILE).exists():
        logger.warning(
            "%s: no %s there; explaining without the daemon's state (tie wins, users' own nice)",
            directory,
            STATE_FILE,
        )
        return EMPTY_STATE
    return StateStore(directory).load()


def _reclaims_in(directory: str) -> Callable[[Sequence[str]], tuple[ReclaimEvent, ...]]:
    """explain's lookup of the reclaims naming a job, in the history of `directory` (read-only)."""

    def lookup(jobs: Sequence[str]) -> tuple[ReclaimEvent, ...]:
        source = str(history_path(directory))
        return from_records(recorded_reclaims(directory, jobs), source)

    return lookup


def cmd_explain(args: argparse.Namespace) -> int:
    config = resolve_config(args.config, os.environ)
    directory = _state_directory(args, config)
    from slurm_drf.trail.explain import explain_planned
    from slurm_drf.trail.explain_render import render_explanation_json, render_explanation_text

    snapshot = _snapshot(args, config)
    explanation = explain_planned(
        snapshot,
        config,
        args.job,
        _state_for_explain(directory, config.lease_dir),
        _past(args, directory, config),
        None if directory is None else _reclaims_in(directory),
    )
    if args.format == "json":
        sys.stdout.buffer.write(
            orjson.dumps(render_explanation_json(explanation), option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
        )
        sys.stdout.flush()
    else:
        sys.stdout.write(render_explanation_text(explanation))
    leave_to_exit(snapshot, explanation)
    return 0


def add_observe_parsers(verbs: Subparsers) -> None:
    """The three verbs of this module, for cli.build_parser."""
    add_report_parser(verbs)
    add_audit_parser(verbs)
    add_explain_parser(verbs)
