"""What watches the cycles: audit history, metrics, report files.

Sits beside the daemon: the service loop asks `build_observers(config)` for
the observers the config enables and tells each about every cycle.
"""

from __future__ import annotations

from slurm_drf.config import Config
from slurm_drf.daemon import CycleObserver


def build_observers(config: Config) -> list[CycleObserver]:
    """The observers this config enables."""
    del config
    return []
