"""Waiting on a live Slurm: poll a condition, never sleep in its place."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T | None], timeout: float, what: str, interval: float = 0.2) -> T:
    """Polls ``predicate`` until it returns something truthy and returns that."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
