"""The placement table as text, and the observer that publishes it after every cycle.

docs/formats.md (`slurm-drf-placement/1`) is the format, `policy.placement`
what goes in it. `PlacementWriter` replaces the file atomically after a
cycle that wrote (never in a dry run), readable by slurmctld, where the
job_submit/lua script (`slurm_drf/data/slurm_drf_submit.lua`) reads it.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Final

from slurm_drf.config.settings import Config
from slurm_drf.cycle.run import CycleReport
from slurm_drf.files import write_atomic
from slurm_drf.policy.placement import PlacementTable, PoolTable, TreeTable, build_table

FORMAT: Final = "slurm-drf-placement/1"


def default_path(config: Config, state_dir: str | os.PathLike[str] | None = None) -> str:
    """Where the table goes: `placement.path`, else the state directory's placement.txt
    (`state_dir`, where the run keeps its state, else the config's)."""
    given = config.placement.path if config.placement is not None else None
    return given or os.path.join(state_dir or config.state_dir, "placement.txt")


def render_placement(table: PlacementTable) -> bytes:
    """The table as docs/formats.md writes it, ending in `end N` (N: the lines before it)."""
    lines = [
        FORMAT,
        f"written {_real(table.written)}",
        f"stale_after {_real(table.stale_after)}",
        f"mode {table.mode}",
        "resources " + " ".join(table.resources),
    ]
    for pool in table.pools:
        lines.extend(_pool_lines(pool))
    lines.append(f"end {len(lines)}")
    return ("\n".join(lines) + "\n").encode("ascii")


def _pool_lines(pool: PoolTable) -> Iterator[str]:
    yield f"pool {pool.name}"
    yield "partitions " + " ".join(pool.partitions)
    yield "capacity " + " ".join(map(str, pool.capacity))
    yield f"default_weight {_real(pool.default_weight)}"
    yield f"range {pool.best} {pool.worst}"
    yield f"gap {pool.gap}"
    if pool.tree is not None:
        yield from _tree_lines(pool.tree)
    for name, entry in pool.accounts.items():
        yield f"account {name} {_real(entry.weight)} " + " ".join(map(str, entry.usage))
    for name in sorted(pool.excluded):
        yield f"exclude {name}"
    for level, value in zip(pool.levels, pool.values, strict=True):
        yield f"point {_real(level)} {value}"


def _tree_lines(tree: TreeTable) -> Iterator[str]:
    yield "tree " + ("user" if tree.by_user else "slurm")
    leaf_of = {number: who for who, (number, _) in tree.leaves.items()}
    for number, node in sorted(tree.nodes.items()):
        line = f"node {number} {node.parent} {_real(node.weight)} {_real(node.done)}"
        if number in leaf_of:
            account, user = leaf_of[number]
            line += f" {account} {user} " + " ".join(map(str, tree.leaves[account, user][1]))
        yield line
    for number, node in sorted(tree.nodes.items()):
        for key, share in zip(node.keys, node.shares, strict=True):
            yield f"step {number} {_real(key)} {_real(share)}"
    for account, number in sorted(tree.homes.items()):
        yield f"home {account} {number}"


def _real(value: float | Fraction) -> str:
    """A finite real in decimal: a whole number without a point, else Python's shortest repr."""
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"placement table: {value!r} is not finite")
    return str(int(number)) if number == int(number) and abs(number) < 1e15 else repr(number)


logger = logging.getLogger(__name__)


class PlacementWriter:
    """CycleObserver: replaces the placement table after every cycle that wrote (never in a dry run)."""

    def __init__(
        self, config: Config, state_dir: str | os.PathLike[str] | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.config = config
        self.path = Path(default_path(config, state_dir))
        self.clock = clock

    def on_cycle(self, report: CycleReport) -> None:
        if report.dry_run:
            return
        data = render_placement(build_table(report.plan, self.config, self.clock()))
        try:
            # Readable by slurmctld (SlurmUser), whoever runs the daemon.
            write_atomic(self.path, data, mode=0o644)
        except OSError as error:
            logger.warning("%s: cannot write the placement table: %s", self.path, error.strerror or error)

    def on_error(self, error: Exception) -> None:
        """The last table stays: it says when it was written, and goes stale on its own."""
        del error

    def close(self) -> None:
        """Nothing held between cycles."""
