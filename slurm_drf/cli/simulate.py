"""The `slurm-drf simulate` verb: options in, a comparison of policies out.

Sits on top of the simulator, called by `slurm_drf.cli` (which maps errors
to exit codes): builds or imports a workload, runs `compare`, renders with
`render`. `add_simulate_parser` registers the verb; `cmd_simulate` runs it.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import orjson

from slurm_drf.cli.options import at_least, positive_int, whole_number
from slurm_drf.config.load import load_config
from slurm_drf.config.settings import (
    DEFAULT_HISTORY_HALF_LIFE,
    DEFAULT_HISTORY_WEIGHT,
    SLURM_DEFAULT_QUEUE_DEPTH,
    Config,
)
from slurm_drf.sim.compare import PolicySettings, ProgressLine, parse_policies, run_comparison
from slurm_drf.sim.daemon_loop import DEFAULT_URGENT, DEFAULT_WEIGHT_AGE, DEFAULT_WEIGHT_QOS, SlurmSide
from slurm_drf.sim.importers import FORMATS, guess_format, load_workload
from slurm_drf.sim.options import (
    BACKFILL_MODES,
    DEFAULT_BACKFILL,
    DEFAULT_BACKFILL_DEPTH,
    DEFAULT_INTERVAL,
    DEFAULT_SLURM_BACKFILL_DEPTH,
    SimOptions,
    default_backfill_depth,
)
from slurm_drf.sim.policies import ALL_POLICIES, DEFAULT_POLICIES
from slurm_drf.sim.render import (
    check_plotting,
    render_html,
    render_json,
    render_plot_png,
    render_table,
    write_bytes,
    write_text,
)
from slurm_drf.sim.scenarios import DEFAULT_SCENARIO, SCENARIOS, build_scenario
from slurm_drf.sim.workload import (
    Workload,
    WorkloadError,
    format_duration,
    parse_duration,
    parse_node_type,
)

logger = logging.getLogger(__name__)


def _seed(text: str) -> int:
    """A seed numpy's generator takes: 0 to 2**64 - 1 (it refuses negative ones)."""
    value = whole_number(text)
    if not 0 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to {2**64 - 1}, got {value}")
    return value


def _non_negative(text: str) -> int:
    return at_least(0, text)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text}")
    return value


def add_workload_options(parser: argparse.ArgumentParser, default_scenario: str, nodes_help: str) -> None:
    """The options that say what workload to play (`simulate` and `replay`): a scenario or a trace."""
    source = parser.add_argument_group("workload")
    source.add_argument(
        "--scenario", choices=tuple(SCENARIOS), default=None, help=f"built-in scenario (default {default_scenario})"
    )
    source.add_argument("--seed", type=_seed, default=1, help="seed of the scenario's generator (default 1)")
    source.add_argument(
        "--jobs",
        type=positive_int,
        metavar="N",
        help="jobs to generate (default per scenario); with --workload, the first N only",
    )
    source.add_argument("--nodes", type=positive_int, metavar="N", help=nodes_help)
    source.add_argument(
        "--node-tres",
        metavar="SPEC",
        help="TRES of every node, e.g. cpu=64,mem=512G,gres/gpu=8 (default cpu=64,mem=512000,gres/gpu=8)",
    )
    source.add_argument(
        "--duration", metavar="DUR", help="scenario submission window, e.g. 12h (default: what keeps it backlogged)"
    )
    source.add_argument(
        "--workload", metavar="FILE", help="a trace (SWF, sacct -P or sacct --json) instead of a scenario"
    )
    source.add_argument(
        "--workload-format",
        choices=FORMATS,
        help="format of --workload (default by extension: .json sacct-json, .swf swf, else sacct -P)",
    )


def add_simulate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `simulate` on the CLI's subparsers (the object add_subparsers returns)."""
    scenarios = "; ".join(f"{s.name}: {s.summary}" for s in SCENARIOS.values())
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "simulate",
        help="compare fifo, multifactor, drf and drf-naive on a simulated cluster",
        description="Simulate a Slurm-like cluster (priority queue with backfill) under several queue policies and "
        "compare fairness (Jain's index of weighted dominant shares), waits and utilisation. With no "
        f"arguments: the '{DEFAULT_SCENARIO}' scenario under every policy.",
        epilog=f"Scenarios: {scenarios}.",
    )
    add_workload_options(
        parser,
        DEFAULT_SCENARIO,
        "nodes in the cluster (default per scenario; for a trace, what its header says or enough for a 90%% "
        "offered load)",
    )
    add_policy_options(parser)
    add_loop_options(parser)
    output = parser.add_argument_group("output")
    output.add_argument("--format", choices=("table", "json"), default="table")
    output.add_argument("--plot", metavar="FILE.png", help="write a PNG of shares over time (needs matplotlib)")
    output.add_argument("--html", metavar="FILE", help="write a self-contained HTML report (needs matplotlib)")
    output.add_argument("--no-series", action="store_true", help="json: leave out the time series")
    parser.set_defaults(func=cmd_simulate)
    return parser


def add_policy_options(parser: argparse.ArgumentParser) -> None:
    """Which policies run, how often they reorder, and the backfill they run under."""
    run = parser.add_argument_group("policies")
    run.add_argument(
        "--policies",
        metavar="LIST",
        help=f"comma-separated, in order, of {','.join(ALL_POLICIES)} (default {','.join(DEFAULT_POLICIES)}, "
        "then what the scenario exists to show: "
        + "; ".join(f"{s.name} {','.join(s.shows)}" for s in SCENARIOS.values() if s.shows)
        + "). drf-labels is what the daemon does; drf, the same order queued directly, writes nothing",
    )
    run.add_argument(
        "--interval",
        default=f"{DEFAULT_INTERVAL:g}s",
        metavar="DUR",
        help="how often policies reorder the queue and metrics are sampled (default 60s)",
    )
    run.add_argument(
        "--config",
        metavar="FILE",
        help="slurm-drf config: account weights, tie settings, and history: (half_life, weight) for drf-history "
        f"(without it drf-history takes history's defaults, half_life {format_duration(DEFAULT_HISTORY_HALF_LIFE)} "
        f"and weight {DEFAULT_HISTORY_WEIGHT:g})",
    )
    run.add_argument(
        "--half-life",
        default="7d",
        metavar="DUR",
        help="multifactor usage decay half-life (default 7d, Slurm's default; drf-history's is the config's)",
    )
    run.add_argument(
        "--backfill-depth",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"jobs the backfill pass looks at behind the top job (default {DEFAULT_BACKFILL_DEPTH} for "
        f"--backfill easy, {DEFAULT_SLURM_BACKFILL_DEPTH} for slurm, whose time grows with the depth)",
    )
    run.add_argument(
        "--backfill",
        choices=BACKFILL_MODES,
        default=DEFAULT_BACKFILL,
        help="easy: a reservation for the top job only; slurm: like sched/backfill, a reservation "
        "for every job tested (up to --backfill-depth) that a lower job may not delay "
        f"(default {DEFAULT_BACKFILL})",
    )
    run.add_argument(
        "--engine",
        choices=("auto", "plan", "fast"),
        default="auto",
        help="drf: the engine functions on the simulator's arrays (fast; auto is fast), or a full snapshot "
        "and plan every interval (plan: the same order, several times slower)",
    )


def add_loop_options(parser: argparse.ArgumentParser) -> None:
    """The Slurm around the daemon's loop: its priority weights, the urgent QOS, the main scheduler's depth."""
    loop = parser.add_argument_group(
        "the daemon's loop (drf-labels, drf-spread; the write cap and horizon come from --config)"
    )
    loop.add_argument(
        "--priority-weight-age",
        type=_non_negative,
        default=DEFAULT_WEIGHT_AGE,
        metavar="N",
        help=f"Slurm's PriorityWeightAge (default {DEFAULT_WEIGHT_AGE})",
    )
    loop.add_argument(
        "--priority-weight-qos",
        type=_non_negative,
        default=DEFAULT_WEIGHT_QOS,
        metavar="N",
        help=f"Slurm's PriorityWeightQOS, the urgent QOS's factor (default {DEFAULT_WEIGHT_QOS})",
    )
    loop.add_argument("--priority-max-age", default="7d", metavar="DUR", help="Slurm's PriorityMaxAge (default 7d)")
    loop.add_argument(
        "--urgent",
        type=_fraction,
        default=DEFAULT_URGENT,
        metavar="FRACTION",
        help=f"share of jobs in the urgent QOS (default {DEFAULT_URGENT:g})",
    )
    loop.add_argument(
        "--queue-depth",
        type=positive_int,
        default=SLURM_DEFAULT_QUEUE_DEPTH,
        metavar="N",
        help="jobs the main scheduler tests per pass, Slurm's default_queue_depth "
        f"(default {SLURM_DEFAULT_QUEUE_DEPTH})",
    )


def build_workload(args: argparse.Namespace) -> Workload:
    """The workload the options describe (scenario or trace), without policies."""
    node_type = parse_node_type(args.node_tres) if args.node_tres else None
    if args.workload:
        if args.scenario or args.duration:
            raise WorkloadError("--workload replays a trace: leave out --scenario and --duration")
        fmt = args.workload_format or guess_format(args.workload)
        workload = load_workload(args.workload, fmt, node_type, args.nodes)
        if args.jobs is not None and args.jobs < len(workload.jobs):
            workload = replace(
                workload,
                jobs=tuple(sorted(workload.jobs, key=lambda j: j.submit)[: args.jobs]),
                notes=(*workload.notes, f"first {args.jobs} jobs only"),
            )
        return workload
    if args.workload_format:
        raise WorkloadError("--workload-format needs --workload FILE")
    window = parse_duration(args.duration) if args.duration else None
    workload = build_scenario(args.scenario or DEFAULT_SCENARIO, args.seed, args.nodes, args.jobs, window)
    if node_type is not None:
        workload = replace(workload, node_type=node_type)
    return workload


def _with_config_weights(workload: Workload, config: Config) -> Workload:
    """The config's weights for accounts the workload does not weight itself."""
    weights = {a: workload.weights.get(a, config.weight(a)) for a in workload.accounts}
    return replace(workload, weights=MappingProxyType(weights))


def build_slurm_side(args: argparse.Namespace) -> SlurmSide:
    """Slurm's other priority factors and depths, as the options give them."""
    max_age = parse_duration(args.priority_max_age)
    if max_age <= 0:
        raise WorkloadError("--priority-max-age must be > 0")
    return SlurmSide(
        weight_age=args.priority_weight_age,
        weight_qos=args.priority_weight_qos,
        max_age=max_age,
        urgent=args.urgent,
        queue_depth=args.queue_depth,
    )


def default_policies(args: argparse.Namespace) -> tuple[str, ...]:
    """The default policies, then those the scenario exists to show (none for a trace)."""
    shows = () if args.workload else SCENARIOS[args.scenario or DEFAULT_SCENARIO].shows
    return (*DEFAULT_POLICIES, *(p for p in shows if p not in DEFAULT_POLICIES))


def cmd_simulate(args: argparse.Namespace) -> int:
    policies = parse_policies(args.policies) if args.policies else default_policies(args)
    interval = parse_duration(args.interval)
    half_life_s = parse_duration(args.half_life)
    if interval <= 0 or half_life_s <= 0:
        raise WorkloadError("--interval and --half-life must be > 0")
    if args.plot or args.html:
        # Before the simulation, not after minutes of it.
        check_plotting("--plot" if args.plot else "--html")
    config = load_config(args.config) if args.config else None
    workload = build_workload(args)
    if config is not None:
        workload = _with_config_weights(workload, config)
    depth = args.backfill_depth or default_backfill_depth(args.backfill)
    options = SimOptions(interval=interval, backfill_depth=depth, backfill=args.backfill)
    slurm = build_slurm_side(args)
    progress = ProgressLine(sys.stderr)
    try:
        settings = PolicySettings(config, half_life_s, args.engine, slurm)
        comparison = run_comparison(workload, policies, options, settings, progress)
    finally:
        progress.close()
    if args.format == "json":
        data = render_json(comparison, series=not args.no_series)
        sys.stdout.buffer.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
        sys.stdout.flush()
    else:
        sys.stdout.write(render_table(comparison))
        sys.stdout.flush()
    if args.plot or args.html:
        png = render_plot_png(comparison)
        if args.plot:
            write_bytes(args.plot, png)
            logger.info("wrote %s", args.plot)
        if args.html:
            write_text(args.html, render_html(comparison, png))
            logger.info("wrote %s", args.html)
    total = sum(comparison.seconds)
    logger.debug("simulated %d policies in %s", len(policies), format_duration(total))
    return 0
