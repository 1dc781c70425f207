"""The command line: argument parsing, exit codes, logging set-up; nothing else.

Every verb is a small function that calls into the library; exceptions are
mapped to exit codes in `main` alone (0 success, 2 bad input, 1 the rest),
printed as `slurm-drf: <category>: <message>`.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Final, NoReturn

from slurm_drf.cli.options import (
    add_snapshot_limit,
    exit_without_teardown,
    exits_without_teardown,
    leave_to_exit,
    snapshot_limit,
)
from slurm_drf.errors import DrfError, InputError, StateError, shorten

if TYPE_CHECKING:
    from slurm_drf.config.settings import Config
    from slurm_drf.cycle.run import CycleObserver, CycleReport
    from slurm_drf.cycle.store import StateStore

# Every verb imports what it needs when it runs (issue 40): `slurm-drf
# --help` and `check-config` do not pay for numpy, the planner, the
# scheduler, the metrics or the simulator, and `plan` not for the daemon's.

logger = logging.getLogger("slurm_drf")

# Verbs defined in their own modules: (module, function adding the parsers,
# each verb's one-line help). A run imports only the module of the verb it
# asks for; every other verb of these is listed with its help line alone
# (what `slurm-drf --help` shows), so `--help` imports none of them.
# tests/unit/cli/test_cli_startup.py checks each line against its module's.
_VERB_MODULES: Final[tuple[tuple[str, str, Mapping[str, str]], ...]] = (
    (
        "slurm_drf.cli.daemon",
        "add_daemon_parser",
        {"daemon": "the service: a cycle every interval (SIGHUP reloads, SIGTERM stops)"},
    ),
    (
        "slurm_drf.cli.simulate",
        "add_simulate_parser",
        {"simulate": "compare fifo, multifactor, drf and drf-naive on a simulated cluster"},
    ),
    (
        "slurm_drf.cli.replay",
        "add_replay_parser",
        {"replay": "replay a workload through a real Slurm in compressed time (one arm), or compare saved results"},
    ),
    (
        "slurm_drf.cli.trail",
        "add_observe_parsers",
        {
            "report": "share report per pool and account, of the live cluster or a snapshot",
            "audit": "query the history: values written, shares, cycles, errors",
            "explain": "why a pending job has its place and value",
        },
    ),
    (
        "slurm_drf.cli.submit",
        "add_job_submit_parser",
        {"job-submit": "the job_submit/lua script that places jobs at submission: install it, check it"},
    ),
)


def _emit(*pieces: bytes | memoryview) -> None:
    _emit_each(pieces)


def _emit_each(pieces: Iterable[bytes | memoryview]) -> None:
    """Each piece written as it comes (a piece is made when the one before it was written)."""
    sys.stdout.buffer.writelines(pieces)
    sys.stdout.flush()


def cmd_plan(args: argparse.Namespace) -> int:
    from slurm_drf.config.load import resolve_config
    from slurm_drf.model.snapshot_file import SnapshotFileSource
    from slurm_drf.policy.plan import compute_plan
    from slurm_drf.trail.plan_output import render_plan_json_pieces, render_plan_table

    config = resolve_config(args.config, os.environ)
    source = SnapshotFileSource(args.snapshot, snapshot_limit(args), keep_decoded=exits_without_teardown())
    snapshot = source.fetch_snapshot()
    plan = compute_plan(snapshot, config)
    if args.format == "json":
        _emit_each(render_plan_json_pieces(plan))
    else:
        print(render_plan_table(plan, args.limit))
    for warning in plan.warnings:
        logger.warning("%s", warning)
    leave_to_exit(source, snapshot, plan)
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    from slurm_drf.config.load import resolve_config
    from slurm_drf.cycle.backends import make_source
    from slurm_drf.model.snapshot_file import render_snapshot_bytes, write_snapshot_file

    config = resolve_config(args.config, os.environ)
    snapshot = make_source(config).fetch_snapshot()
    if args.output:
        write_snapshot_file(args.output, snapshot)
        logger.info("wrote %s: %d nodes, %d jobs", args.output, len(snapshot.nodes), len(snapshot.jobs))
    else:
        sys.stdout.buffer.write(render_snapshot_bytes(snapshot))
    return 0


def _store(config: Config, args: argparse.Namespace) -> StateStore:
    from slurm_drf.cycle.store import StateStore

    return StateStore(args.state_dir or config.state_dir, config.lease_dir)


@contextlib.contextmanager
def _lease(config: Config, writes: bool) -> Iterator[Callable[[], None] | None]:
    """With `lease_dir`, a verb that writes to Slurm holds the lease while it runs (cycle.lease):
    refused while another head's daemon holds it; the fence it then passes before writing."""
    if not writes or not config.lease_dir:
        yield None
        return
    from slurm_drf.cycle.lease import Lease

    lease = Lease(config.lease_dir, config.interval)
    hold = lease.acquire()
    if hold is not None:
        raise StateError(
            f"{config.lease_dir}: {hold.holder} holds the lease: the daemon there writes; "
            "stop it first, or look with --dry-run"
        )
    try:
        yield lease.confirm
    finally:
        lease.release()


def cmd_once(args: argparse.Namespace) -> int:
    from slurm_drf.config.load import resolve_config
    from slurm_drf.trail.plan_output import reclaim_lines, render_plan_json_bytes, render_plan_table

    # Private in a dry run too: the dry run is the pre-flight of a real one,
    # and must refuse what `once` and `daemon` would.
    config = resolve_config(args.config, os.environ, private=True)
    dry_run = args.dry_run or config.dry_run
    store = _store(config, args)
    # A real cycle leaves the same trail as the daemon's: history, the placement
    # table and report files (not metrics: a one-off run must not reset the daemon's counters).
    observers: list[CycleObserver] = []
    if not dry_run:
        from slurm_drf.trail.compaction import HistoryUpkeep
        from slurm_drf.trail.history_db import AuditRecorder
        from slurm_drf.trail.observers import ReportWriter
        from slurm_drf.trail.placement import PlacementWriter

        store.lock()
        observers.append(AuditRecorder(store.directory, config.retention_days))
        observers.append(HistoryUpkeep(store.directory, config.interval, config.history_max_mb))
        if config.placement is not None:
            observers.append(PlacementWriter(config, store.directory))
        if config.report_dir:
            observers.append(ReportWriter(config.report_dir))
    try:
        with _lease(config, not dry_run) as guard:
            report = _once_cycle(config, store, dry_run, guard)
    except DrfError as error:
        for observer in observers:
            observer.on_error(error)
        raise
    for observer in observers:
        observer.on_cycle(report)
    if args.format == "json":
        _emit(render_plan_json_bytes(report.plan))
    else:
        print(render_plan_table(report.plan, args.limit))
        for line in reclaim_lines(report.reclaimed):
            print(line)
    for warning in report.plan.warnings:
        logger.warning("%s", warning)
    logger.info("%s", report.summary())
    return 0


def _once_cycle(config: Config, store: StateStore, dry_run: bool, guard: Callable[[], None] | None) -> CycleReport:
    from slurm_drf.cycle.backends import make_source, make_writer
    from slurm_drf.cycle.recall import Recall
    from slurm_drf.cycle.reclaim import SlurmReclaimer
    from slurm_drf.cycle.reclaim_moves import ReclaimMoves
    from slurm_drf.cycle.run import CycleHistory, run_cycle
    from slurm_drf.slurm.sacct import fetch_allocations
    from slurm_drf.trail.history_db import HistoryLedger
    from slurm_drf.trail.past import HistoryPast

    source = make_source(config)
    past = HistoryPast(store.directory, fetch=fetch_allocations).past(config)
    ledger = HistoryLedger(store.directory)
    reclaimer = (
        SlurmReclaimer(config, ledger.moved_since, ReclaimMoves(store.directory))
        if config.reclaim is not None
        else None
    )
    history = CycleHistory(past, Recall(ledger), reclaimer)
    return run_cycle(source, make_writer(source), config, store, dry_run=dry_run, history=history, guard=guard)


def cmd_reset(args: argparse.Namespace) -> int:
    from slurm_drf.config.load import resolve_config
    from slurm_drf.cycle.backends import make_source, make_writer
    from slurm_drf.cycle.fence import reset_fence
    from slurm_drf.cycle.recall import Recall
    from slurm_drf.cycle.reset import reset_jobs
    from slurm_drf.trail.history_db import HistoryLedger

    config = resolve_config(args.config, os.environ, private=True)
    store = _store(config, args)
    if not args.dry_run:
        store.lock()
    source = make_source(config)
    recall = Recall(HistoryLedger(store.directory))
    with _lease(config, not args.dry_run) as guard:
        # With a lease, every batch of writes (and the state's save) is sent inside the hold, as a cycle's are.
        fence = reset_fence(guard, config.interval)
        report = reset_jobs(
            source,
            make_writer(source),
            store,
            dry_run=args.dry_run,
            recall=recall,
            assume_own=args.assume_own,
            fence=fence,
        )
    verb = "would reset" if args.dry_run else "reset"
    print(f"{verb} {len(report.reset)} job(s)" + (f": {list_ids(report.reset)}" if report.reset else ""))
    for job_id, why in sorted(report.skipped.items()):
        print(f"job {job_id}: left alone ({why})")
    return 1 if any(why.startswith("failed") for why in report.skipped.values()) else 0


# How many job ids one line names; a reset of 50,000 jobs is not 50,000 ids on a terminal.
IDS_SHOWN: Final = 20


def list_ids(job_ids: Sequence[str], shown: int = IDS_SHOWN) -> str:
    """The first `shown` ids, comma separated, and how many more there are."""
    text = ", ".join(job_ids[:shown])
    return text if len(job_ids) <= shown else f"{text} and {len(job_ids) - shown} more"


def _own_nice(text: str) -> int:
    """--assume-own: a nice a person could set (so never a label)."""
    from slurm_drf.policy.ownership import LABEL_NICE_BELOW

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not LABEL_NICE_BELOW <= value <= -LABEL_NICE_BELOW:
        raise argparse.ArgumentTypeError(f"expected a nice from {LABEL_NICE_BELOW} to {-LABEL_NICE_BELOW}, got {value}")
    return value


def cmd_check_config(args: argparse.Namespace) -> int:
    from slurm_drf.config.load import load_config

    # The same checks as the daemon's start and reload, privacy included
    # (as the user running check-config: run it as the daemon's user).
    config = load_config(args.file, private=True)
    print(
        f"{args.file}: OK (mode {config.mode}, {len(config.weights)} weighted account(s), "
        f"resources {', '.join(config.resources)})"
    )
    from slurm_drf.cli.band import band_lines, read_slurm_config, site_weights
    from slurm_drf.config.checks import config_warnings

    for warning in config_warnings(config):
        print(f"warning: {warning}")
    # `scontrol show config` is read once, for the band and for what reclaim needs of Slurm.
    slurm_config = None if args.snapshot is not None else read_slurm_config()
    found = site_weights(args.snapshot, slurm_config)
    print(f"note: {found}" if isinstance(found, str) else "\n".join(band_lines(config, *found)))
    if config.reclaim is not None:
        from slurm_drf.cli.reclaim_check import reclaim_lines

        for line in reclaim_lines(config, slurm_config, _this_user()):
            print(line)
    return 0


def _this_user() -> tuple[str, int]:
    """The name and uid check-config runs as (the uid alone where no passwd entry names it)."""
    import pwd

    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name, uid
    except KeyError:
        return str(uid), uid


def _requested_verb(argv: Sequence[str]) -> str | None:
    """The verb on the command line, if one is there (options come first)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


class _VersionAction(argparse.Action):
    """`--version`: the text of cli/version.py, whose imports (pyslurm's check) only this option pays for."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> NoReturn:
        from slurm_drf.cli.version import fetch_version_text

        sys.stdout.write(fetch_version_text())
        sys.stdout.flush()
        parser.exit()


def build_parser(argv: Sequence[str] | None = None, *, every_verb: bool = False) -> argparse.ArgumentParser:
    """The parser; of the verbs in _VERB_MODULES only the one `argv` names gets its options (the others' modules
    are not imported), unless `every_verb` (what the man page and the shell completion are made from)."""
    parser = argparse.ArgumentParser(
        prog="slurm-drf",
        description="Dominant resource fairness for Slurm: order pending jobs by "
        "each account's dominant share and write the order back.",
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        help="show the version, the Slurm release here and the backend `backend: auto` would use, and exit",
    )
    parser.add_argument("--debug", action="store_true", help="log debug messages and show tracebacks")
    parser.add_argument("-q", "--quiet", action="store_true", help="log only errors")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    plan = verbs.add_parser("plan", help="the plan for a saved snapshot (no Slurm needed)")
    plan.add_argument("--snapshot", required=True, metavar="FILE", help="snapshot JSON (slurm-drf-snapshot/1)")
    plan.add_argument(
        "--config",
        metavar="FILE",
        help="config YAML (default: $SLURM_DRF_CONFIG, /etc/slurm-drf/config.yaml, built-in defaults)",
    )
    plan.add_argument("--format", choices=("table", "json"), default="table")
    plan.add_argument("--limit", type=int, default=20, metavar="N", help="table: jobs shown per pool (0: all)")
    add_snapshot_limit(plan)
    plan.set_defaults(func=cmd_plan)

    snap = verbs.add_parser("snapshot", help="read live Slurm and write a snapshot")
    snap.add_argument("--output", "-o", metavar="FILE", help="write here (atomically) instead of stdout")
    snap.add_argument("--config", metavar="FILE", help="config YAML (for the backend)")
    snap.set_defaults(func=cmd_snapshot)

    once = verbs.add_parser("once", help="one live cycle: read, plan, write (or only show with --dry-run)")
    once.add_argument("--config", metavar="FILE", help="config YAML")
    once.add_argument("--dry-run", action="store_true", help="compute and show the plan; write nothing")
    once.add_argument("--format", choices=("table", "json"), default="table")
    once.add_argument("--limit", type=int, default=20, metavar="N", help="table: jobs shown per pool (0: all)")
    once.add_argument("--state-dir", metavar="DIR", help="state directory (default: the config's state_dir)")
    once.set_defaults(func=cmd_once)

    reset = verbs.add_parser("reset", help="give every job this daemon touched its own value back")
    reset.add_argument("--config", metavar="FILE", help="config YAML")
    reset.add_argument("--dry-run", action="store_true", help="list what would be reset")
    reset.add_argument("--state-dir", metavar="DIR", help="state directory (default: the config's state_dir)")
    reset.add_argument(
        "--assume-own",
        metavar="NICE",
        type=_own_nice,
        help="the nice to give jobs holding a label whose own nice no record holds (an earlier install's): "
        "without it they are left alone",
    )
    reset.set_defaults(func=cmd_reset)

    wanted = _requested_verb(sys.argv[1:] if argv is None else argv)
    for module, function, helps in _VERB_MODULES:
        if every_verb or wanted in helps:
            getattr(importlib.import_module(module), function)(verbs)
        else:
            for name, line in helps.items():
                verbs.add_parser(name, help=line)

    check = verbs.add_parser("check-config", help="validate a config file: exit 0 or a clear error")
    check.add_argument("file", metavar="FILE")
    check.add_argument(
        "--snapshot",
        metavar="FILE",
        help="take Slurm's PriorityWeight* and SchedulerParameters from this snapshot (default: scontrol show "
        "config, which also tells what reclaim: needs of slurm.conf)",
    )
    check.set_defaults(func=cmd_check_config)
    return parser


def build_full_parser() -> argparse.ArgumentParser:
    """The parser with every verb's options: the man page (argparse-manpage) and the shell completion (shtab)
    are generated from it when the Debian package is built (debian/rules)."""
    return build_parser([], every_verb=True)


# Options of the whole program that may also come after the verb (`slurm-drf plan ... --debug`).
_ANYWHERE: Final = {"--debug": "debug", "-q": "quiet", "--quiet": "quiet"}


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments; `--debug` and `-q` are the program's wherever they stand."""
    args, extra = parser.parse_known_args(argv)
    unknown = [arg for arg in extra if arg not in _ANYWHERE]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    for arg in extra:
        setattr(args, _ANYWHERE[arg], True)
    return args


def _setup_logging(args: argparse.Namespace) -> None:
    level = logging.DEBUG if args.debug else logging.ERROR if args.quiet else logging.INFO
    logging.basicConfig(level=level, format="slurm-drf: %(levelname)s: %(message)s", stream=sys.stderr)


# Verbs whose process `run` ends with os._exit (the objects they leave to
# that exit: cli.options.leave_to_exit).
_EXIT_WITHOUT_TEARDOWN: Final = frozenset({"plan", "report", "explain"})


def run() -> NoReturn:
    """The `slurm-drf` console script and `python -m slurm_drf.cli`: `main`, then the exit.

    `plan` on a snapshot of 150,000 jobs makes a million and a half objects
    that live to the end; freeing them one by one, and collecting them for
    cycles there are none of, costs a tenth of a process. For that verb, and
    `report` and `explain`, which read and plan as it does and write only
    their output, the process runs without the cyclic collector, keeps its
    objects and, once its output and logs are flushed, ends with os._exit (as
    mypy does), and numpy's OpenBLAS starts no threads. The other verbs, the
    daemon above all, exit normally.
    """
    if _requested_verb(sys.argv[1:]) not in _EXIT_WITHOUT_TEARDOWN:
        sys.exit(main())
    # These verbs compute in one thread (numpy's element-wise loops; no BLAS
    # work worth a thread): OpenBLAS need not start its pool of threads when
    # numpy is imported, which then spin beside the run (tens of milliseconds
    # of a plan on a busy machine). A value the user set stands.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    gc.disable()
    exit_without_teardown()
    code = main()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader that left, a closed stream
            stream.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    # One-shot verbs build a few hundred thousand objects that all live to
    # the end: collecting them again and again is wasted work (it is a
    # third of the time of loading a large snapshot). The daemon resets it.
    gc.set_threshold(200_000, 50, 1000)
    parser = build_parser(argv)
    args = _parse(parser, argv)
    _setup_logging(args)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except InputError as error:
        _report(error, args.debug)
        return 2
    except DrfError as error:
        _report(error, args.debug)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `slurm-drf plan ... | head`: the reader left; that is not a failure.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as error:
        if args.debug:
            raise
        print(
            f"slurm-drf: internal error: {type(error).__name__}: {error} (run with --debug for a traceback)",
            file=sys.stderr,
        )
        return 1


def _report(error: DrfError, debug: bool) -> None:
    """Each line of the message as `slurm-drf: <category>: <line>`. The lines are ours (a config's
    problems, one a line), split at "\n" only: what they quote (a name, Slurm's stderr) may hold
    U+2028 or an ESC, written as escapes, never split at or sent to the terminal raw."""
    from slurm_drf.trail.text import terminal_text

    if debug:
        logger.exception("%s", error)
    for line in str(error).rstrip("\n").split("\n"):
        print(f"slurm-drf: {error.category}: {shorten(terminal_text(line))}", file=sys.stderr)
