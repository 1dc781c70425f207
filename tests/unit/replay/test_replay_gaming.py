"""`slurm-drf replay --game`: the gamed workload, the result file's game, and the pair's comparison (issue 35)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import orjson
import pytest

from slurm_drf.cli.main import build_parser, main
from slurm_drf.replay.gaming import (
    GAME_CHOICES,
    HORIZON_MARGIN_WALL,
    compare_pair,
    find_pairs,
    game_outcome,
    game_workload,
    gaming_table,
    pair_horizon,
    replay_game,
)
from slurm_drf.replay.result import ReplayResult, parse_result, render_result, to_sim_result
from slurm_drf.replay.trace import ReplayInputError
from slurm_drf.sim.engine import simulate
from slurm_drf.sim.gaming import STRATEGIES, build_gamed, measure
from slurm_drf.sim.policies import build_policy
from slurm_drf.sim.scenarios import GAMING_ACCOUNT, build_scenario
from slurm_drf.sim.workload import NodeType, Workload, WorkloadJob

NODE = NodeType(64, 512_000, 8)


def _job(job_id: str, account: str, cpu: int, gpu: int, duration: float, submit: float = 0.0) -> WorkloadJob:
    return WorkloadJob(
        job_id=job_id,
        account=account,
        user=account,
        submit=submit,
        duration=duration,
        limit=duration,
        cpu=cpu,
        mem=1000,
        gpu=gpu,
        nodes=1,
    )


def _result(arm: str, workload: Workload, start: list[float], end: list[float], span: float) -> ReplayResult:
    """A hand-made replay result of `workload` (one sample at `span`)."""
    return ReplayResult(
        arm=arm,
        summary="x",
        compression=60.0,
        sample_interval=2.0,
        workload=workload,
        job_ids=tuple(str(i + 1) for i in range(len(workload.jobs))),
        start=tuple(start),
        end=tuple(end),
        capacity=(NODE.cpu, NODE.mem, NODE.gpu),
        sample_time=(span,),
        sample_used=(tuple((0, 0, 0) for _ in workload.accounts),),
        sample_pending=(tuple(0 for _ in workload.accounts),),
        writes_per_cycle=None,
        rpcs=MappingProxyType({}),
        slurm_settings=(),
        slurm_version=None,
        daemon_config=None,
        backend="slurm cli",
    )


def _honest_workload() -> Workload:
    # g: one 4-GPU job of 1 h (a whole node's 8 GPUs is 1 node-hour at 8; 4 GPUs for 1 h is 0.5);
    # a: one 32-CPU job of 2 h (0.5 x 2 = 1 node-hour).
    jobs = (_job("g-1", "g", 8, 4, 3600.0), _job("a-1", "a", 32, 0, 7200.0))
    return Workload("hand", "a hand-made pair", jobs, 1, NODE)


def test_game_choices_are_the_simulators_strategies_and_honest() -> None:
    assert ("honest", *STRATEGIES) == GAME_CHOICES
    argv = ["replay", "--game", "split", "--scenario", "gaming"]
    assert build_parser(argv).parse_args(argv).game == "split"
    assert build_parser(["replay"]).parse_args(["replay"]).game is None


def test_an_unknown_strategy_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        build_parser(["replay"]).parse_args(["replay", "--game", "cheat"])
    assert raised.value.code == 2
    assert "--game" in capsys.readouterr().err


def test_game_on_a_workload_without_account_g_is_refused_in_one_line() -> None:
    workload = build_scenario("gpu-newcomer", 1, nodes=4, jobs=40)
    assert GAMING_ACCOUNT not in workload.accounts
    with pytest.raises(ReplayInputError) as raised:
        game_workload(workload, "split")
    message = str(raised.value)
    assert "\n" not in message and "no account 'g'" in message and "--scenario gaming" in message


def test_the_cli_refuses_game_without_account_g_with_exit_2_before_slurm_is_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # --nodes given: nothing asks Slurm for the cluster's size before the refusal.
    code = main(["replay", "--game", "split", "--scenario", "gpu-newcomer", "--jobs", "20", "--nodes", "2"])
    assert code == 2
    err = capsys.readouterr().err
    assert "no account 'g'" in err


def test_the_replayed_workload_is_the_simulators_gamed_one() -> None:
    workload = build_scenario("gaming", 1, nodes=4, jobs=100)
    for strategy in GAME_CHOICES:
        assert game_workload(workload, strategy) == build_gamed(workload, strategy)


def test_a_gamed_result_file_round_trips_with_its_pieces_and_originals(tmp_path: Path) -> None:
    honest = build_scenario("gaming", 1, nodes=4, jobs=60)
    gamed = game_workload(honest, "split")
    sim = simulate(gamed.workload, build_policy("multifactor", engine="fast"))
    # As if --stop-after had left the last submitted job out.
    replayed = replace(gamed.workload, jobs=gamed.workload.jobs[:-1])
    game = replay_game(honest, gamed, "split", replayed)
    result = replace(
        _result("slurm", replayed, sim.start[:-1].tolist(), sim.end[:-1].tolist(), float(sim.end.max())), game=game
    )
    assert set(game.pieces) == {j.job_id for j in replayed.jobs if j.account == GAMING_ACCOUNT}
    assert {p.original for p in game.pieces.values()} == {j.job_id for j in game.originals}
    assert all(j.account == GAMING_ACCOUNT for j in game.originals)
    data = orjson.loads(orjson.dumps(render_result(result, {}, None)))
    back = parse_result(data, "gamed.json")
    assert back.game == game
    assert back.game is not None and back.game.strategy == "split"
    assert {p.fraction for p in back.game.pieces.values()} == {0.25}


def test_a_result_file_of_before_has_no_game() -> None:
    result = _result("slurm", _honest_workload(), [0.0, 0.0], [3600.0, 7200.0], 7200.0)
    data = orjson.loads(orjson.dumps(render_result(result, {}, None)))
    del data["game"]
    assert parse_result(data, "old.json").game is None


def test_the_pairs_change_on_a_hand_made_pair() -> None:
    honest = _honest_workload()
    # Honest: g's job ends at 2 h (after the horizon), a's at 1 h.
    h = _result("drf", honest, [3600.0, 0.0], [7200.0, 3600.0], 3 * 3600.0)
    h = replace(h, game=replay_game(honest, build_gamed(honest, "honest"), "honest", honest))
    # Split: g's job is four 1-GPU... its 4 GPUs divide by 4 and 8 CPUs too: 4 pieces of a quarter of the width.
    gamed = build_gamed(honest, "split")
    assert [j.job_id for j in gamed.workload.jobs] == ["g-1.0", "g-1.1", "g-1.2", "g-1.3", "a-1"]
    # Three pieces end by the horizon, one after; a's job after too.
    g = _result("drf", gamed.workload, [0.0] * 5, [3600.0, 3600.0, 3600.0, 11000.0, 11000.0], 3 * 3600.0)
    g = replace(g, game=replay_game(honest, gamed, "split", gamed.workload))
    horizon = pair_horizon(h, g)
    assert horizon == 3 * 3600.0 - HORIZON_MARGIN_WALL * 60.0
    pair = compare_pair(h, g, (to_sim_result(h), to_sim_result(g)), None)
    # g's job: 4 of 8 GPUs for 1 h = 0.5 node-hours. Honest: it ends at 2 h, by the horizon: 0.5; gamed: 3/4 of it.
    # a's: 32 of 64 CPUs for 2 h = 1 node-hour; honest done, gamed not.
    assert pair.gain == pytest.approx(0.75 * 0.5 / 0.5 - 1.0)
    assert pair.others == pytest.approx(-1.0)
    assert math.isnan(pair.predicted_gain) and math.isnan(pair.predicted_others)
    # The same arithmetic as sim.gaming.measure's on the gamed run.
    direct = measure(honest, gamed, to_sim_result(g), GAMING_ACCOUNT, horizon)
    assert game_outcome(g, to_sim_result(g), horizon) == direct
    header, rows = gaming_table([pair])
    assert header[0] == "arm" and rows == [["drf", "split", "2.97h", "-25%", "-100%", "-", "-"]]


def test_pairs_are_found_per_arm_and_the_prediction_is_measured_too() -> None:
    honest = build_scenario("gaming", 1, nodes=4, jobs=60)
    results = []
    runs = []
    for strategy in ("honest", "split"):
        gamed = build_gamed(honest, strategy)
        sim = simulate(gamed.workload, build_policy("multifactor", engine="fast"))
        result = _result("slurm", gamed.workload, sim.start.tolist(), sim.end.tolist(), 6 * 3600.0)
        results.append(replace(result, game=replay_game(honest, gamed, strategy, gamed.workload)))
        runs.append(sim)
    plain = _result("drf", honest, [0.0] * len(honest.jobs), [1.0] * len(honest.jobs), 10.0)
    assert find_pairs([*results, plain]) == [(0, 1)]
    pair = compare_pair(
        results[0], results[1], (to_sim_result(results[0]), to_sim_result(results[1])), (runs[0], runs[1])
    )
    # The prediction here is the same run as the "measured" one: the same figures.
    assert pair.predicted_gain == pytest.approx(pair.gain)
    assert pair.predicted_others == pytest.approx(pair.others)
