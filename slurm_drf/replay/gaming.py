"""A gaming strategy on a live Slurm: the replay's workload with one account playing it, and what it bought.

Sits beside `replay.report`. `game_workload` is the replay's side of
`sim.gaming.build_gamed` (the same transform the simulator's gaming
evaluation plays) and `replay_game` what a result file keeps of it;
`game_outcome` measures a run (a replay's, or its prediction's) with
`sim.gaming.measure`; `gaming_rows` sets an honest and a gamed result of
the same arm side by side: the account's useful work by the replay's
horizon, gamed against honest, and the others', measured and predicted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Final

from slurm_drf.replay.result import ReplayGame, ReplayResult
from slurm_drf.replay.trace import ReplayInputError
from slurm_drf.sim.gaming import STRATEGIES, Gamed, Outcome, Piece, build_gamed, measure
from slurm_drf.sim.options import SimResult
from slurm_drf.sim.scenarios import GAMING_ACCOUNT
from slurm_drf.sim.workload import Workload

# `replay --game` choices: the simulator's strategies, and honest play (the same workload, marked as the pair's
# other half).
GAME_CHOICES: Final = ("honest", *STRATEGIES)
# sacct's times are whole wall seconds: a job the replay cancelled at its end can read as ending up to one
# before. The horizon of a pair stops this many wall seconds before the earlier run's last sample, so only
# jobs that ended on their own count as done.
HORIZON_MARGIN_WALL: Final = 2.0


def game_workload(workload: Workload, strategy: str, account: str = GAMING_ACCOUNT) -> Gamed:
    """`workload` with `account`'s jobs played as `strategy` (`sim.gaming.build_gamed`); a workload without the
    account is refused in one line."""
    if strategy not in GAME_CHOICES:
        raise ReplayInputError(f"--game: unknown strategy {strategy!r} (choices: {', '.join(GAME_CHOICES)})")
    if account not in workload.accounts:
        raise ReplayInputError(
            f"--game {strategy}: workload {workload.name!r} has no account {account!r} to play it "
            f"(accounts: {', '.join(workload.accounts)}); use --scenario gaming"
        )
    return build_gamed(workload, strategy, account)


def replay_game(
    honest: Workload, gamed: Gamed, strategy: str, replayed: Workload, account: str = GAMING_ACCOUNT
) -> ReplayGame:
    """What a result file keeps of a game: the pieces of the account's jobs `replayed` (those the replay
    submitted: --stop-after may leave the last out) and the originals they refer to."""
    pieces = {job.job_id: gamed.pieces[job.job_id] for job in replayed.jobs if job.account == account}
    wanted = {p.original for p in pieces.values()}
    originals = tuple(job for job in honest.jobs if job.job_id in wanted)
    return ReplayGame(strategy, account, MappingProxyType(pieces), originals)


def game_outcome(result: ReplayResult, run: SimResult, horizon: float) -> Outcome:
    """`run` (the replay of `result` or its prediction: the same jobs) measured as `sim.gaming.measure` does,
    the account's pieces counted by their share of their originals' work."""
    game = result.game
    if game is None:
        raise ReplayInputError(f"{result.arm}: the result has no game (replayed without --game)")
    others = [job for job in run.workload.jobs if job.account != game.account]
    honest = replace(run.workload, jobs=(*game.originals, *others))
    pieces = {**{job.job_id: Piece(job.job_id, 1.0) for job in others}, **game.pieces}
    return measure(honest, Gamed(run.workload, pieces), run, game.account, horizon)


def pair_horizon(honest: ReplayResult, gamed: ReplayResult) -> float:
    """Trace seconds the pair is judged by: the earlier run's last sample, less `HORIZON_MARGIN_WALL`."""
    spans = [r.sample_time[-1] if r.sample_time else 0.0 for r in (honest, gamed)]
    return max(0.0, min(spans) - HORIZON_MARGIN_WALL * max(honest.compression, gamed.compression))


def change(gamed: float, honest: float) -> float:
    """gamed / honest - 1 (NaN when honest is none)."""
    return gamed / honest - 1.0 if honest > 0 else math.nan


@dataclass(frozen=True, slots=True)
class GamePair:
    """One arm's honest and gamed runs: the account's and the others' change, measured and predicted."""

    arm: str
    strategy: str
    horizon: float  # trace seconds
    gain: float  # the account's useful work by the horizon, gamed / honest - 1
    others: float
    predicted_gain: float  # the same from each run's simulator prediction (NaN: none)
    predicted_others: float


def compare_pair(
    honest: ReplayResult,
    gamed: ReplayResult,
    runs: tuple[SimResult, SimResult],
    predictions: tuple[SimResult, SimResult] | None,
) -> GamePair:
    """`gamed` against `honest` (the same arm), measured on `runs` (each result as a `SimResult`) and on
    `predictions` (the simulator's of each), by the pair's horizon."""
    if honest.game is None or gamed.game is None:
        raise ReplayInputError("a gaming pair needs two results replayed with --game (honest and a strategy)")
    horizon = pair_horizon(honest, gamed)
    h, g = game_outcome(honest, runs[0], horizon), game_outcome(gamed, runs[1], horizon)
    ph = pg = None
    if predictions is not None:
        ph, pg = game_outcome(honest, predictions[0], horizon), game_outcome(gamed, predictions[1], horizon)
    return GamePair(
        arm=gamed.arm,
        strategy=gamed.game.strategy,
        horizon=horizon,
        gain=change(g.useful, h.useful),
        others=change(g.others, h.others),
        predicted_gain=math.nan if ph is None or pg is None else change(pg.useful, ph.useful),
        predicted_others=math.nan if ph is None or pg is None else change(pg.others, ph.others),
    )


def find_pairs(results: Sequence[ReplayResult]) -> list[tuple[int, int]]:
    """(honest, gamed) indices into `results`: per arm and strategy, the last honest and the last gamed result."""
    honest: dict[str, int] = {}
    gamed: dict[tuple[str, str], int] = {}
    for index, result in enumerate(results):
        if result.game is None:
            continue
        if result.game.strategy == "honest":
            honest[result.arm] = index
        else:
            gamed[(result.arm, result.game.strategy)] = index
    return [(honest[arm], index) for (arm, _), index in gamed.items() if arm in honest]


def _percent(value: float) -> str:
    if math.isnan(value):
        return "-"
    rounded = round(100 * value)
    return "0%" if rounded == 0 else f"{rounded:+d}%"


def gaming_table(pairs: Sequence[GamePair]) -> tuple[list[str], list[list[str]]]:
    """[arm, strategy, horizon, G's gain, others', predicted G's gain, predicted others'] per pair."""
    header = ["arm", "strategy", "horizon", "G measured", "others measured", "G predicted", "others predicted"]
    rows = [
        [
            p.arm,
            p.strategy,
            f"{p.horizon / 3600:.2f}h",
            _percent(p.gain),
            _percent(p.others),
            _percent(p.predicted_gain),
            _percent(p.predicted_others),
        ]
        for p in pairs
    ]
    return header, rows
