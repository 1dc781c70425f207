"""check-config's account of the exact band for a site's actual weights (docs/rule.md §5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_drf.cli.band import band_lines
from slurm_drf.cli.main import main
from slurm_drf.config.settings import Config

UB_CCR = {
    "PriorityWeightPartition": 1_000_000,
    "PriorityWeightJobSize": 200_000,
    "PriorityWeightFairshare": 80_000,
    "PriorityWeightQOS": 50_000,
    "PriorityWeightAge": 50_000,
    "PriorityWeightTRES/GRES/gpu": 30_000,
}


def test_strict_weighting_at_ub_ccrs_weights_says_where_the_band_stops() -> None:
    lines = band_lines(Config(), UB_CCR, {"bf_max_job_test": 1000})
    assert lines[0].startswith("exact band: the first 2000 pending jobs of each pool (auto: 2 x")
    assert (
        "bf_max_job_test=1000" in lines[0] and "neighbours 1410001 apart (1 + PriorityWeight* sum 1410000)" in lines[0]
    )
    assert "holds only 1523 jobs that far apart" in lines[1] and "weighting: factor" in lines[1]


def test_factor_weighting_and_a_fixed_horizon() -> None:
    lines = band_lines(Config(weighting="factor", factor_weight=1_000_000, horizon=1500), UB_CCR, {})
    assert "(horizon in the config)" in lines[0] and "DRF adds 1 to 1000000" in lines[0]
    assert "holds 999999 jobs that far apart" in lines[1]


def test_check_config_reads_the_weights_of_a_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("mode: site_factor\n")
    config.chmod(0o600)
    snapshot = tmp_path / "snap.json"
    snapshot.write_text(
        json.dumps(
            {
                "format": "slurm-drf-snapshot/1",
                "cluster": "c",
                "taken_at": "2026-12-01T00:00:00Z",
                "priority_weights": {"PriorityWeightAge": 12_000, "PriorityWeightQOS": 1_000},
                "scheduler_parameters": {"default_queue_depth": 700},
                "nodes": [],
                "jobs": [],
            }
        )
    )
    assert main(["check-config", str(config), "--snapshot", str(snapshot)]) == 0
    out = capsys.readouterr().out
    assert "default_queue_depth=700" in out and "first 1400 pending jobs" in out
    assert "neighbours 13001 apart" in out and "holds 165178 jobs" in out
