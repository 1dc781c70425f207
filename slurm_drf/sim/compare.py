"""One workload under several policies: the comparison the CLI, docs and benchmark show.

Sits between the entry points (`cli`, `scripts/render-evaluation`,
`benchmarks/bench_sim.py`) and `engine`/`run_metrics`: runs each policy on the
same workload and gathers results, metrics and wall-clock times. Also the
progress line: on stderr, and only when stderr is a terminal.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from slurm_drf.config.settings import Config
from slurm_drf.sim.daemon_loop import DEFAULT_SLURM_SIDE, SlurmSide
from slurm_drf.sim.engine import simulate
from slurm_drf.sim.options import SimOptions, SimResult
from slurm_drf.sim.policies import ALL_POLICIES, DEFAULT_HALF_LIFE, build_policy
from slurm_drf.sim.run_metrics import PolicyMetrics, compute_metrics
from slurm_drf.sim.workload import Workload, WorkloadError


@dataclass(frozen=True, slots=True)
class Comparison:
    workload: Workload
    options: SimOptions
    results: tuple[SimResult, ...]
    metrics: tuple[PolicyMetrics, ...]
    seconds: tuple[float, ...]  # wall clock per policy; never in JSON (not reproducible)
    # What the loop policies (drf-labels, drf-spread) ran against.
    config: Config | None = None
    slurm: SlurmSide = DEFAULT_SLURM_SIDE


def parse_policies(text: str) -> tuple[str, ...]:
    names = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in names if p not in ALL_POLICIES]
    if unknown or not names:
        raise WorkloadError(
            f"--policies: unknown {', '.join(unknown) or '(none given)'}; choose from {','.join(ALL_POLICIES)}"
        )
    return names


def choose_engine(engine: str) -> str:
    """`auto` is the fast engine (the plan's order on the simulator's arrays, equal to the whole plan's,
    tests/unit/sim); `plan` builds a snapshot and runs `compute_plan` every interval, several times slower."""
    return "fast" if engine == "auto" else engine


@dataclass(frozen=True)
class PolicySettings:
    """What every policy of a comparison is built with (`build_policy`)."""

    config: Config | None = None
    half_life_s: float = DEFAULT_HALF_LIFE
    engine: str = "auto"
    slurm: SlurmSide | None = None


def run_comparison(
    workload: Workload,
    policies: Sequence[str],
    options: SimOptions,
    settings: PolicySettings = PolicySettings(),
    progress: Callable[[str, float], None] | None = None,
) -> Comparison:
    """Every policy on `workload`, in the order given."""
    results = []
    metrics = []
    seconds = []
    config, slurm = settings.config, settings.slurm
    chosen = choose_engine(settings.engine)
    for name in policies:
        policy = build_policy(name, config, settings.half_life_s, chosen, slurm)
        began = time.perf_counter()
        callback = (lambda fraction, name=name: progress(name, fraction)) if progress else None
        result = simulate(workload, policy, options, callback)
        seconds.append(time.perf_counter() - began)
        results.append(result)
        metrics.append(compute_metrics(result))
    side = slurm or DEFAULT_SLURM_SIDE
    return Comparison(workload, options, tuple(results), tuple(metrics), tuple(seconds), config, side)


class ProgressLine:
    """`simulate: drf 42%` rewritten in place on a terminal; silent otherwise."""

    def __init__(self, stream: TextIO | None = None, min_interval: float = 0.2, label: str = "simulate") -> None:
        self.stream = stream or sys.stderr
        self.label = label
        self.enabled = self.stream.isatty()
        self.min_interval = min_interval
        self._last = 0.0
        self._shown = False

    def __call__(self, policy: str, fraction: float) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < self.min_interval and fraction < 1.0:
            return
        self._last = now
        width = 30
        filled = int(width * fraction)
        self.stream.write(f"\r{self.label}: {policy:<12} [{'#' * filled}{'.' * (width - filled)}] {fraction:4.0%}")
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False
