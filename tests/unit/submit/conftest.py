"""Every test of the job_submit/lua module runs on each of Debian's Lua interpreters."""

from __future__ import annotations

import pytest

from tests.unit.submit.lua import INTERPRETERS, interpreter


@pytest.fixture(params=INTERPRETERS)
def lua(request: pytest.FixtureRequest) -> str:
    """The path of one Lua interpreter (a missing one skips, or fails under SLURM_DRF_REQUIRE_SLURM=1)."""
    name: str = request.param
    return interpreter(name)
