"""Helpers more than one test file needs, unit and live alike: the plan of the
report fixture (tests/fixtures/report), a cycle report over it, the observe
verbs (`report`, `explain`, `audit`) run in-process, and the samples of a
Prometheus exposition."""

from __future__ import annotations

import argparse

from prometheus_client.parser import text_string_to_metric_families

from slurm_drf.cli.trail import add_observe_parsers
from slurm_drf.config.load import load_config
from slurm_drf.cycle.run import CycleReport
from slurm_drf.model.snapshot_file import SnapshotFileSource
from slurm_drf.model.types import Snapshot
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.slurm.write import Write, WriteResult
from tests.paths import FIXTURES

REPORT_FIXTURES = FIXTURES / "report"

# One metric sample: its name and its sorted labels.
SampleKey = tuple[str, tuple[tuple[str, str], ...]]


def load_report_plan() -> tuple[Plan, Snapshot]:
    """The report fixture's snapshot and the plan its config makes of it."""
    config = load_config(REPORT_FIXTURES / "config.yaml")
    snapshot = SnapshotFileSource(REPORT_FIXTURES / "snapshot.json").fetch_snapshot()
    return compute_plan(snapshot, config), snapshot


def build_cycle_report(
    plan: Plan,
    snapshot: Snapshot,
    *,
    refusal: str,
    read_seconds: float,
    seconds: float,
    deferred: int,
    dry_run: bool = False,
) -> CycleReport:
    """A cycle that wrote the plan's `set` jobs of the report fixture: 203, 201, 207
    and 205 land, 204 ended meanwhile, 202 is refused with `refusal`."""
    writes = tuple(Write(j.job_id, plan.mode, j.value) for j in plan.jobs if j.action == "set" and j.value)
    result = None if dry_run else WriteResult(("203", "201", "207", "205"), ("204",), {"202": refusal})
    return CycleReport(plan, snapshot, writes, result, read_seconds, seconds, deferred, dry_run)


def run_observe_verb(argv: list[str]) -> int:
    """`slurm-drf VERB ...` for the observe verbs, in this process: its exit code."""
    parser = argparse.ArgumentParser(prog="slurm-drf")
    add_observe_parsers(parser.add_subparsers(dest="verb", required=True))
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


def parse_samples(text: str) -> dict[SampleKey, float]:
    """Every sample of a Prometheus text exposition, by name and labels."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out
