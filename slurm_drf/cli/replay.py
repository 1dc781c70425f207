"""The `slurm-drf replay` verb: a workload through a real Slurm, one arm at a time.

Sits on top of `slurm_drf.replay`, called by `slurm_drf.cli` (which maps
errors to exit codes). Three uses:

    slurm-drf replay --arm drf --scenario newcomer --compress 60 --users pool=alice,bob -o drf.json
    slurm-drf replay --slurm-conf --compress 60     # the slurm.conf lines every arm runs against
    slurm-drf replay --report slurm.json drf.json --html replay.html
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import yaml

from slurm_drf.cli.simulate import add_workload_options, build_workload
from slurm_drf.config.load import load_config, parse_config_text, resolve_config
from slurm_drf.config.settings import Config
from slurm_drf.cycle.backends import make_source
from slurm_drf.errors import DrfError, InputError
from slurm_drf.replay.arms import ARMS, billing_weights, build_billing_weights, build_slurm_lines, parse_arm
from slurm_drf.replay.gaming import GAME_CHOICES, compare_pair, find_pairs, game_workload, gaming_table, replay_game
from slurm_drf.replay.report import build_comparison, predict, render_replay_html, render_text
from slurm_drf.replay.result import ReplayResult, parse_result, render_result, to_sim_result
from slurm_drf.replay.run import MAX_SAMPLE_INTERVAL, MIN_SAMPLE_INTERVAL, ReplayOptions, pool_nodes, run_arm
from slurm_drf.replay.trace import ReplayInputError
from slurm_drf.replay.users import UserChoice, parse_users
from slurm_drf.sim.compare import Comparison, ProgressLine
from slurm_drf.sim.options import SimResult
from slurm_drf.sim.render import check_plotting, render_aligned, render_json, render_plot_png, write_text
from slurm_drf.sim.run_metrics import compute_metrics, render_metrics
from slurm_drf.sim.workload import NodeType, parse_duration, parse_node_type

logger = logging.getLogger(__name__)

DEFAULT_COMPRESSION = 60.0
# The scenario built to show DRF's effect on a live Slurm (docs/evaluation.md, *On a real Slurm*).
DEFAULT_SCENARIO = "gpu-newcomer"


def _factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def _users(text: str) -> UserChoice:
    try:
        return parse_users(text)
    except ReplayInputError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_replay_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `replay` on the CLI's subparsers."""
    arms = "; ".join(f"{a.name}: {a.summary}" for a in ARMS.values())
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "replay",
        help="replay a workload through a real Slurm in compressed time (one arm), or compare saved results",
        description="Submit a workload's jobs (sleeps of the compressed run time, with the trace's CPUs, memory, "
        "GPUs, account and user) to the Slurm this host talks to, sample the cluster, and write one result file with "
        "fairness, waits, utilisation, writes and RPCs, beside the simulator's prediction. It refuses a cluster "
        "with other jobs (--force overrides) and cancels every job it submitted when it ends or is interrupted.",
        epilog=f"Arms: {arms}.",
    )
    add_workload_options(parser, DEFAULT_SCENARIO, "nodes the scenario is sized for (default: the cluster's)")
    run = parser.add_argument_group("replay")
    run.add_argument("--arm", default="drf", help=f"what runs beside Slurm (default drf): {', '.join(ARMS)}")
    run.add_argument(
        "--game",
        choices=GAME_CHOICES,
        metavar="STRATEGY",
        help="account g plays this gaming strategy with the same real work, as the simulator's gaming evaluation "
        f"does (docs/evaluation.md, *Gaming*): {', '.join(GAME_CHOICES)} (honest: the other half of the pair; "
        "default: the workload as it is). --report sets an arm's honest and gamed results side by side",
    )
    run.add_argument(
        "--compress",
        type=_factor,
        default=DEFAULT_COMPRESSION,
        metavar="X",
        help=f"trace seconds per wall second (default {DEFAULT_COMPRESSION:g})",
    )
    run.add_argument(
        "--sample-interval",
        type=_factor,
        default=2.0,
        metavar="S",
        help=f"wall seconds between samples, {MIN_SAMPLE_INTERVAL:g} to {MAX_SAMPLE_INTERVAL:g} (default 2)",
    )
    run.add_argument("--stop-after", metavar="DUR", help="end the replay after this much trace time (e.g. 3h)")
    run.add_argument(
        "--create-accounts",
        action="store_true",
        help="create the trace's accounts (and tree) and its users' associations in them with sacctmgr",
    )
    run.add_argument(
        "--users",
        type=_users,
        default=UserChoice(),
        metavar="WHO",
        help="who submits each job: trace (default: its trace user, who must be a Unix user here), invoking "
        "(you, for every job), or pool=NAME,NAME,... (each account's trace users onto these Unix users in turn); "
        "as anyone but yourself needs root",
    )
    run.add_argument(
        "--create-unix-users",
        action="store_true",
        help="with --users trace: create the trace users this host lacks (useradd --system, no home, no login "
        "shell; they stay). A test host only: never on a real cluster",
    )
    run.add_argument("--force", action="store_true", help="replay even though the cluster has other jobs")
    run.add_argument("--partition", metavar="NAME", help="submit to this partition (default: Slurm's default)")
    run.add_argument(
        "--config", metavar="FILE", help="daemon config the drf arms start from (weights, backend, partitions)"
    )
    run.add_argument(
        "--placement-table",
        metavar="PATH",
        help="where the cluster's job_submit.lua reads the placement table (docs/submit.md): the drf-placed arm "
        "writes it there",
    )
    run.add_argument("--no-predict", action="store_true", help="leave out the simulator's prediction")
    out = parser.add_argument_group("output")
    out.add_argument("--output", "-o", metavar="FILE", help="the result file (JSON; default replay-ARM.json)")
    out.add_argument("--format", choices=("table", "json"), default="table", help="what is printed (default table)")
    out.add_argument("--html", metavar="FILE", help="an HTML page with every arm's shares over time (needs matplotlib)")
    out.add_argument("--report", nargs="+", metavar="RESULT", help="compare saved result files; no Slurm needed")
    out.add_argument("--slurm-conf", action="store_true", help="print the slurm.conf lines every arm runs against")
    parser.set_defaults(func=cmd_replay)
    return parser


def _config(path: str | None) -> tuple[Config, dict[str, Any]]:
    """The config for the backend and the drf arms' daemon, and its keys as written."""
    if path is None:
        return resolve_config(None, os.environ), {}
    config = load_config(path)
    keys = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    return config, dict(keys)


def cmd_replay(args: argparse.Namespace) -> int:
    if args.html:
        check_plotting("--html")
    if args.report:
        return _report(args)
    if args.slurm_conf:
        return _slurm_conf(args)
    return _run(args)


def _slurm_conf(args: argparse.Namespace) -> int:
    """The lines every arm runs against; the billing weights from the live cluster's nodes, or, with no Slurm
    to read, from the workload's node (the scenario's, or --node-tres)."""
    config, _ = _config(args.config)
    try:
        weights = build_billing_weights(pool_nodes(make_source(config).fetch_snapshot(), config))
        source = "the cluster's largest node"
    except DrfError as error:
        node = parse_node_type(args.node_tres) if args.node_tres else NodeType()
        weights = billing_weights(node.tres())
        source = f"a node of {node.render()}, as Slurm could not be read ({error})"
    print("\n".join(build_slurm_lines(args.compress)))
    print(f"# the billing weights of {source}")
    print(f"# on every PartitionName line: TRESBillingWeights={weights}")
    return 0


def _run(args: argparse.Namespace) -> int:
    arm = parse_arm(args.arm)
    config, keys = _config(args.config)
    if args.workload is None and args.scenario is None:
        args.scenario = DEFAULT_SCENARIO
    if args.workload is None and args.nodes is None:
        args.nodes = sum(1 for n in pool_nodes(make_source(config).fetch_snapshot(), config) if n.eligible)
    workload = build_workload(args)
    honest = workload
    gamed = None
    if args.game is not None:
        gamed = game_workload(workload, args.game)
        workload = gamed.workload
    stop_after = parse_duration(args.stop_after) if args.stop_after else None
    if stop_after is not None and stop_after <= 0:
        raise InputError("--stop-after must be > 0")
    options = ReplayOptions(
        arm=arm,
        compression=args.compress,
        config=config,
        config_keys=keys,
        sample_interval=args.sample_interval,
        stop_after=stop_after,
        create_accounts=args.create_accounts,
        force=args.force,
        partition=args.partition,
        users=args.users,
        create_unix_users=args.create_unix_users,
        placement_table=args.placement_table,
    )
    progress = ProgressLine(sys.stderr, label="replay")
    try:
        result = run_arm(workload, options, progress)
    finally:
        progress.close()
    if gamed is not None:
        result = replace(result, game=replay_game(honest, gamed, args.game, result.workload))
    measured = render_metrics(compute_metrics(to_sim_result(result)))
    output = args.output or (f"replay-{arm.name}.json" if args.game is None else f"replay-{arm.name}-{args.game}.json")
    # What was measured is written before the prediction is computed: nothing measured is lost to it.
    data = render_result(result, measured, None)
    write_text(output, orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    predictions = [] if args.no_predict else [_predict(result)]
    if predictions:
        data = render_result(result, measured, render_metrics(compute_metrics(predictions[0])))
        write_text(output, orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    logger.info("wrote %s", output)
    _show(args, build_comparison([result], predictions), [result], data)
    return 0


def _predict(result: ReplayResult) -> SimResult:
    """The simulator's prediction of `result`, with the daemon config the arm ran."""
    config = result.daemon_config
    daemon = (
        None if config is None else parse_config_text(yaml.safe_dump(dict(config)), f"{result.arm}'s daemon config")
    )
    return predict(result, daemon)


def _report(args: argparse.Namespace) -> int:
    results = []
    for path in args.report:
        try:
            data = orjson.loads(Path(path).read_bytes())
        except (OSError, orjson.JSONDecodeError) as error:
            raise InputError(f"{path}: cannot read a replay result: {error}") from None
        results.append(parse_result(data, path))
    # Predicted again: the simulator's model as it is now.
    predictions = [] if args.no_predict else [_predict(r) for r in results]
    comparison = build_comparison(results, predictions)
    _show(args, comparison, results, None)
    pairs = find_pairs(results)
    if pairs and args.format == "table":
        sim = comparison.results
        rows = [
            compare_pair(
                results[h],
                results[g],
                (sim[h], sim[g]),
                (predictions[h], predictions[g]) if predictions else None,
            )
            for h, g in pairs
        ]
        sys.stdout.write(
            "Gaming: account g's useful work (dominant node-hours of its original jobs) done by the horizon, "
            "gamed / honest - 1, and the other accounts' together; measured on Slurm and predicted by the simulator\n"
        )
        sys.stdout.write(render_aligned(*gaming_table(rows)))
    return 0


def _show(
    args: argparse.Namespace, comparison: Comparison, results: list[ReplayResult], data: dict[str, Any] | None
) -> None:
    """The result as the user asked (table or JSON), and the HTML page."""
    if args.format == "json":
        shown = data if data is not None else render_json(comparison)
        sys.stdout.write(orjson.dumps(shown, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(render_text(comparison, results))
    sys.stdout.flush()
    if args.html:
        write_text(args.html, render_replay_html(comparison, results, render_plot_png(comparison, "slurm-drf replay")))
        logger.info("wrote %s", args.html)
