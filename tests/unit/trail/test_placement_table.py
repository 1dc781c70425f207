"""The placement table as text (docs/formats.md, `slurm-drf-placement/1`) and its publisher."""

from __future__ import annotations

import re
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

from slurm_drf.config.settings import Config, PlacementConfig
from slurm_drf.cycle.run import CycleReport
from slurm_drf.policy.placement import COARSE_POINTS, build_table, value_between
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.trail.placement import PlacementWriter, default_path, render_placement
from tests.unit.builders import job, node, snapshot

RESOURCES = ("cpu", "mem", "gres/gpu")
CONFIG = Config(
    resources=RESOURCES, hierarchy="flat", weights={"vision": Fraction(2)}, exclude_accounts=frozenset({"ops"})
)
_REAL = r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?"
_LINE = re.compile(
    rf"(slurm-drf-placement/1|written {_REAL}|stale_after {_REAL}|mode (nice|site_factor|priority)"
    rf"|resources( \S+)+|pool \S+|partitions( \S+)*|capacity( [0-9]+)+|default_weight {_REAL}"
    rf"|range -?[0-9]+ -?[0-9]+|gap [0-9]+|account \S+ {_REAL}( [0-9]+)+|exclude \S+|point {_REAL} -?[0-9]+"
    r"|end [0-9]+)"
)


def _plan(pending: int = 40, config: Config = CONFIG) -> Plan:
    jobs = [job("vision", state="RUNNING", cpu=8, mem=1000, gpu=4), job("ops", cpu=1)]
    jobs += [job(("vision", "nlp")[k % 2], submit_time=float(k), cpu=8, mem=1000, gpu=1) for k in range(pending)]
    return compute_plan(snapshot([node(f"g{i}", cpu=64, mem=512_000, gpu=8) for i in range(4)], jobs), config)


def test_every_line_follows_the_grammar_and_the_count_closes_it() -> None:
    text = render_placement(build_table(_plan(), CONFIG, 1764823200.5)).decode("ascii")
    lines = text.splitlines()
    assert text.endswith("\n") and lines[0] == "slurm-drf-placement/1"
    assert all(_LINE.fullmatch(line) for line in lines), [line for line in lines if not _LINE.fullmatch(line)]
    assert lines[-1] == f"end {len(lines) - 1}"
    assert "written 1764823200.5" in lines and "stale_after 180" in lines
    assert "capacity 256 2048000 32" in lines and "exclude ops" in lines
    # vision: weight 2, 4 GPUs running and its 20 pending jobs; nlp has no running job.
    assert "account vision 2 168 21000 24" in lines and "account nlp 1 160 20000 20" in lines
    levels = [float(line.split()[1]) for line in lines if line.startswith("point ")]
    values = [int(line.split()[2]) for line in lines if line.startswith("point ")]
    assert levels == sorted(levels) and values == sorted(values) and len(values) == 40


def test_a_long_queue_is_sampled_past_the_band_so_the_table_stays_bounded() -> None:
    config = replace(CONFIG, horizon=100)
    table = build_table(_plan(3000, config), config, 0.0)
    (pool,) = table.pools
    assert len(pool.levels) == 100 + COARSE_POINTS
    assert list(pool.levels) == sorted(pool.levels) and list(pool.values) == sorted(pool.values)


def test_priority_mode_publishes_no_pool() -> None:
    priority = replace(CONFIG, mode="priority")
    text = render_placement(build_table(_plan(config=priority), priority, 0.0)).decode()
    assert "mode priority" in text and "pool " not in text


def test_a_value_is_one_gap_on_where_two_fit_else_the_middle_else_the_same() -> None:
    assert value_between(-1000, -1, 100) == -900
    assert value_between(1000, 1, 100) == 900  # site factors fall towards the worst
    assert value_between(-1000, -900, 100) == -950
    assert value_between(-1000, -999, 100) == -1000


def test_the_writer_publishes_after_a_cycle_readable_by_all_and_never_in_a_dry_run(tmp_path: Path) -> None:
    config = replace(CONFIG, state_dir=str(tmp_path))
    plan = _plan(config=config)
    report = CycleReport(plan, snapshot([], []), (), None, 0.0, 0.0, 0, True)
    writer = PlacementWriter(config, clock=lambda: 7.0)
    writer.on_cycle(report)
    assert not Path(default_path(config)).exists()
    writer.on_cycle(replace(report, dry_run=False))
    path = Path(default_path(config))
    assert path == tmp_path / "placement.txt" and path.stat().st_mode & 0o777 == 0o644
    assert "written 7" in path.read_text().splitlines()
    elsewhere = replace(config, placement=PlacementConfig(path=str(tmp_path / "t.txt"), stale_intervals=5))
    PlacementWriter(elsewhere, clock=lambda: 7.0).on_cycle(replace(report, dry_run=False))
    assert "stale_after 300" in (tmp_path / "t.txt").read_text().splitlines()
