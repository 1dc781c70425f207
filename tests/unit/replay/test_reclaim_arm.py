"""The drf-reclaim arm: its daemon config, its refusal, what a result says reclaim took, its prediction."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import orjson
import pytest
import yaml

from slurm_drf.config.load import parse_config_text
from slurm_drf.config.settings import Config
from slurm_drf.replay.arms import ARMS, RECLAIM_AFTER, build_daemon_config
from slurm_drf.replay.report import build_comparison, gpu_hours, predict, reclaim_rows, render_text, shows_reclaim
from slurm_drf.replay.result import ReplayReclaim, parse_result, render_result, requeued_runs, to_sim_result
from slurm_drf.replay.trace import ReplayInputError
from slurm_drf.sim.engine import simulate
from slurm_drf.sim.policies import build_policy
from slurm_drf.sim.scenarios import build_scenario
from tests.unit.replay.test_replay import _replayed


def _config(arm: str, compression: float, base: dict[str, object] | None = None) -> Config:
    return parse_config_text(yaml.safe_dump(build_daemon_config(ARMS[arm], compression, "/s", base or {})), arm)


def test_the_reclaim_arm_guarantees_every_account_its_fair_share_and_compresses_the_simulators_settings() -> None:
    parsed = _config("drf-reclaim", 10)
    reclaim = parsed.reclaim
    assert reclaim is not None and reclaim.pools == ("default",)
    # 10 trace minutes at 10x: the wall minute the daemon takes at least.
    assert (reclaim.after, reclaim.min_runtime, reclaim.max_per_cycle) == (60.0, 60.0, 4)
    assert reclaim.cooldown == 86400 / 10 and reclaim.way == "requeue"
    # share_floor 1 and no account named: each account with jobs is guaranteed its weighted fair share.
    assert reclaim.share_floor == 1 and ARMS["drf-reclaim"].predicted_by == "drf-reclaim"
    assert parsed.interval == 6.0 and parsed.mode == "nice"


def test_only_the_reclaim_arm_reclaims_whatever_the_users_config_says() -> None:
    base: dict[str, object] = {"reclaim": {"pools": ["default"], "after": "1m", "max_per_cycle": 100}}
    for name, arm in ARMS.items():
        if arm.daemon is None or arm.placed:
            continue
        parsed = _config(name, 10, base)
        assert (parsed.reclaim is not None) == (name == "drf-reclaim")
        if parsed.reclaim is not None:
            assert parsed.reclaim.max_per_cycle == 4  # the replay's, not the user's


@pytest.mark.parametrize("compression", [11, 60])
def test_a_compression_making_after_shorter_than_a_wall_minute_is_refused_naming_the_largest(
    compression: float,
) -> None:
    with pytest.raises(ReplayInputError, match=r"--arm drf-reclaim: .* use --compress 10 or less"):
        build_daemon_config(ARMS["drf-reclaim"], compression, "/s", {})
    assert RECLAIM_AFTER / 10 == 60  # the largest compression the daemon's minimum allows


def test_a_results_reclaims_read_back_and_count_as_the_simulators_requeues() -> None:
    workload = build_scenario("long-jobs", 1, nodes=4, jobs=60, window=3600.0)
    result = replace(_replayed(simulate(workload, build_policy("drf-labels")), 10.0), arm="drf-reclaim")
    hog = [i for i, job in enumerate(result.workload.jobs) if job.account == "hog" and job.gpu][:2]
    cpus = [result.workload.jobs[i].cpu * result.workload.jobs[i].nodes for i in hog]
    gpus = [result.workload.jobs[i].gpu * result.workload.jobs[i].nodes for i in hog]
    # Two requeues of the first hog job (30 and 20 trace minutes lost), one of the second (1 h), one that failed.
    runs = [(hog[0], 0.5), (hog[0], 1 / 3), (hog[1], 1.0)]
    reclaims = tuple(
        ReplayReclaim(
            result.job_ids[job],
            "hog",
            "99",
            "newcomer",
            4000.0 + n,
            MappingProxyType({"cpu": hours * cpus[hog.index(job)], "gres/gpu": hours * gpus[hog.index(job)]}),
            "requeued",
        )
        for n, (job, hours) in enumerate(runs)
    )
    failed = replace(reclaims[0], outcome="failed")
    result = replace(result, reclaims=(*reclaims, failed))
    back = parse_result(orjson.loads(orjson.dumps(render_result(result, {}, None))), "r.json")
    assert back.reclaims == result.reclaims
    requeued = requeued_runs(back)
    assert [j for j, _, _ in requeued] == [j for j, _ in runs]
    assert [ran for _, _, ran in requeued] == pytest.approx([h * 3600 for _, h in runs])
    lost, served, asked = gpu_hours(to_sim_result(back))
    assert lost == pytest.approx(sum(h * gpus[hog.index(j)] for j, h in runs)) and asked >= served > lost
    comparison = build_comparison([back])
    assert shows_reclaim([back])
    (row,) = reclaim_rows(comparison)[1]
    assert row[:4] == ["drf-reclaim", "3", "2", "1"]
    assert "requeued twice" in render_text(comparison, [back])


def test_arms_without_reclaim_show_no_reclaim_table() -> None:
    workload = build_scenario("long-jobs", 1, nodes=4, jobs=60, window=3600.0)
    result = _replayed(simulate(workload, build_policy("drf-labels")), 10.0)
    assert not shows_reclaim([result]) and "Reclaim:" not in render_text(build_comparison([result]), [result])


def test_the_reclaim_arm_is_predicted_by_the_simulators_reclaim() -> None:
    """On long-jobs (joining at half an hour), the prediction requeues hog's jobs for the newcomer."""
    workload = build_scenario("long-jobs", 1, nodes=4, jobs=60, window=3600.0)
    result = replace(_replayed(simulate(workload, build_policy("drf-labels")), 10.0), arm="drf-reclaim")
    predicted = predict(result, _config("drf-reclaim", 10))
    assert predicted.policy == "sim:drf-reclaim"
    accounts = {predicted.workload.jobs[j].account for j, _, _ in predicted.requeued}
    assert accounts and "newcomer" not in accounts
    moved = [j for j, _, _ in predicted.requeued]
    assert len(moved) == len(set(moved))  # none twice
    # Only the requeues within the replay's span: none after its last sample.
    assert all(when <= result.sample_time[-1] for _, when, _ in predicted.requeued)
