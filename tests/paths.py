"""Where the tests find the checkout's files, wherever the test module sits."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
# The sandbox the live tiers start (docs/sandbox.md).
SANDBOX_SCRIPT = REPO / "scripts" / "slurm-sandbox"
