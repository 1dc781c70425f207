"""The configuration: YAML + schema -> a frozen Config.

Sits beside model: the engine reads Config, the CLI and daemon load it.
This module holds the dataclasses; loading and validation of YAML files
follows below them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Final, Literal

Mode = Literal["nice", "site_factor", "priority"]
MODES: Final = ("nice", "site_factor", "priority")
BACKENDS: Final = ("auto", "cli", "pyslurm")

# Slurm refuses |nice| > NICE_OFFSET - 3 (src/slurmctld/job_mgr.c).
NICE_LIMIT: Final = 2**31 - 3
DEFAULT_SCALE: Final = 1_000_000


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """A set of partitions whose nodes share one capacity."""

    name: str
    partitions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the engine and the daemon are tuned by (SPEC §3)."""

    interval: float = 60.0
    mode: Mode = "nice"
    # Per-account weights as exact fractions of the decimal written in YAML.
    weights: Mapping[str, Fraction] = field(default_factory=lambda: MappingProxyType({}))
    default_weight: Fraction = Fraction(1)
    resources: tuple[str, ...] = ("cpu", "mem", "gres/gpu")
    # Managed partitions; None means every partition Slurm reports.
    partitions: tuple[str, ...] | None = None
    pools: tuple[PoolConfig, ...] = ()
    exclude_accounts: frozenset[str] = frozenset()
    backend: str = "auto"
    scale: int = DEFAULT_SCALE
    # Subtracted from scale x level in nice mode, added in site_factor mode;
    # the default puts level 0 at the strongest boost Slurm accepts.
    offset: int = NICE_LIMIT
    state_dir: str = "/var/lib/slurm-drf"
    report_dir: str | None = None
    dry_run: bool = False
    max_writes_per_cycle: int = 2000
    # Half-life, in changes of the cluster, of the remembered tie wins.
    tie_half_life: float = 10.0
    include_unavailable_nodes: bool = False
    metrics_address: str | None = None
    log_level: str = "INFO"
    source_path: str | None = None

    def weight(self, account: str) -> Fraction:
        return self.weights.get(account, self.default_weight)
