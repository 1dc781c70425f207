"""Fixtures for every tier. The live tier's own (the Slurm sandbox) are in
tests/integration/conftest.py."""

from __future__ import annotations

import pytest

from slurm_drf.model.types import Snapshot
from slurm_drf.policy.plan import Plan
from tests.helpers import load_report_plan


@pytest.fixture(scope="module")
def planned() -> tuple[Plan, Snapshot]:
    """The report fixture's plan and snapshot (tests/fixtures/report)."""
    return load_report_plan()
