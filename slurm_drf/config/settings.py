"""The frozen Config the engine and the daemon are tuned by, and its fixed vocabularies.

Pure data, the bottom of config: finding and loading the file is config.load's
job (with config.yaml_tree, config.validate and config.checks).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Final, Literal

Mode = Literal["nice", "site_factor", "priority"]


MODES: Final = ("nice", "site_factor", "priority")


# How DRF sits among Slurm's other priority factors (docs/rule.md §5):
# strict dominates them in the exact band, factor is one factor of its own weight.
Weighting = Literal["strict", "factor"]


WEIGHTINGS: Final = ("strict", "factor")


# Slurm's defaults for how deep its schedulers look (slurm.conf(5)
# SchedulerParameters), used when Slurm does not print them.
SLURM_DEFAULT_QUEUE_DEPTH: Final = 100
SLURM_BF_MAX_JOB_TEST: Final = 500
# The exact band is this many times the deeper of the two.
HORIZON_MARGIN: Final = 2


BACKENDS: Final = ("auto", "cli", "pyslurm")


# Where the tree's weights come from (`weights:`): the YAML alone, or
# Slurm's RawShares with the YAML winning where it says something.
WeightSource = Literal["config", "slurm"]


WEIGHT_SOURCES: Final = ("config", "slurm")


# How an account's own jobs are ordered under a tree (`fairness_within_account:`).
WithinAccount = Literal["user", "slurm"]


WITHIN_ACCOUNT: Final = ("user", "slurm")


# Whether the order follows Slurm's account tree (`hierarchy:`, docs/rule.md §7).
Hierarchy = Literal["tree", "flat"]


# Slurm refuses |nice| > NICE_OFFSET - 3 (src/slurmctld/job_mgr.c).
NICE_LIMIT: Final = 2**31 - 3


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """A set of partitions whose nodes share one capacity."""

    name: str
    partitions: tuple[str, ...]


# `slurm_timeout`: the longest one Slurm read command (squeue, sinfo, scontrol
# show) may run. squeue's time grows with the queue: about 18 s at 55,000 jobs
# on a loaded two-core head node.
DEFAULT_SLURM_TIMEOUT: Final = 120.0


# `history:` (docs/rule.md §6): the default half-life and weight of the decayed past.
DEFAULT_HISTORY_HALF_LIFE: Final = 14 * 86400.0
DEFAULT_HISTORY_WEIGHT: Final = 0.5


@dataclass(frozen=True, slots=True)
class HistoryConfig:
    """How much an account's decayed past usage adds to its running usage (docs/rule.md §6)."""

    # Seconds after which a past allocation counts half.
    half_life_s: float = DEFAULT_HISTORY_HALF_LIFE
    # usage = running + weight x decayed average; 0 is pure DRF.
    weight: float = DEFAULT_HISTORY_WEIGHT

    @property
    def active(self) -> bool:
        return self.weight > 0


# `placement:` (docs/rule.md §8): intervals after which the job_submit script stops trusting the table.
DEFAULT_STALE_INTERVALS: Final = 3


@dataclass(frozen=True, slots=True)
class PlacementConfig:
    """The table the job_submit/lua script places new jobs with (docs/formats.md, docs/rule.md §8)."""

    # Where it is written; None: state_dir/placement.txt.
    path: str | None = None
    # The script ignores a table older than this many intervals (the daemon stopped or fails).
    stale_intervals: int = DEFAULT_STALE_INTERVALS


@dataclass(frozen=True, slots=True)
class Amounts:
    """A guarantee or a limit (docs/rule.md §9): a share of every resource of a pool, or whole TRES amounts."""

    # A share of each resource of the pool, 0 < fraction <= 1; None: `amounts`.
    fraction: Fraction | None = None
    # TRES name -> whole amount (mem in MiB); a resource not named neither limits nor counts.
    amounts: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))


# `reclaim:` (docs/rule.md §9): the defaults of its keys.
DEFAULT_RECLAIM_AFTER: Final = 600.0
DEFAULT_RECLAIM_MIN_RUNTIME: Final = 600.0
DEFAULT_RECLAIM_COOLDOWN: Final = 86400.0
DEFAULT_RECLAIM_MAX_PER_CYCLE: Final = 4

ReclaimWay = Literal["requeue", "cancel"]


@dataclass(frozen=True, slots=True)
class ReclaimConfig:
    """Where and how the daemon frees room for a job waiting within its guarantee (docs/rule.md §9)."""

    pools: tuple[str, ...]
    after: float = DEFAULT_RECLAIM_AFTER
    min_runtime: float = DEFAULT_RECLAIM_MIN_RUNTIME
    cooldown: float = DEFAULT_RECLAIM_COOLDOWN
    max_per_cycle: int = DEFAULT_RECLAIM_MAX_PER_CYCLE
    way: ReclaimWay = "requeue"
    # An account below this fraction of its weighted fair share counts as below its guarantee.
    share_floor: Fraction = Fraction(0)
    exempt_qos: frozenset[str] = frozenset()
    exempt_partitions: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the engine and the daemon are tuned by (docs/configuration.md)."""

    interval: float = 60.0
    mode: Mode = "nice"
    # Per-account weights as exact fractions of the decimal written in YAML,
    # keyed as written: an account name or a tree path (`physics/theory`);
    # `policy.tree_weights.compute_tree_weights` resolves paths against the tree.
    weights: Mapping[str, Fraction] = field(default_factory=lambda: MappingProxyType({}))
    # accounts.KEY.users: per user of an account, its weight among the account's users.
    user_weights: Mapping[str, Mapping[str, Fraction]] = field(default_factory=lambda: MappingProxyType({}))
    # accounts.KEY.guarantee and .limit, keyed as `weights` (docs/rule.md §9).
    guarantees: Mapping[str, Amounts] = field(default_factory=lambda: MappingProxyType({}))
    limits: Mapping[str, Amounts] = field(default_factory=lambda: MappingProxyType({}))
    # `reclaim:`; None (the default) never requeues.
    reclaim: ReclaimConfig | None = None
    # `weights:` config | slurm (RawShares, YAML winning).
    weight_source: WeightSource = "config"
    fairness_within_account: WithinAccount = "user"
    # `flat`: ignore the tree, one level of accounts as before it was read.
    hierarchy: Hierarchy = "tree"
    default_weight: Fraction = Fraction(1)
    resources: tuple[str, ...] = ("cpu", "mem", "gres/gpu")
    # Managed partitions; None means every partition Slurm reports.
    partitions: tuple[str, ...] | None = None
    pools: tuple[PoolConfig, ...] = ()
    exclude_accounts: frozenset[str] = frozenset()
    backend: str = "auto"
    # Labels run from 0 to offset - 1 (strict weighting): nice = own nice +
    # label - offset (at most -1); site_factor and priority = offset - label
    # (at least 1). The default uses the whole range Slurm accepts.
    offset: int = NICE_LIMIT
    state_dir: str = "/var/lib/slurm-drf"
    # Shared by two head nodes: the lease and the state file (cycle.lease); None: no lease.
    lease_dir: str | None = None
    # Days of cycle and write history kept in state_dir/history.sqlite; None keeps all.
    retention_days: int | None = 90
    # history.sqlite larger than this many MiB is warned about once a day; None: never.
    history_max_mb: int | None = None
    # The decayed past blended into usage; None (the default) is pure DRF.
    history: HistoryConfig | None = None
    # The placement table published every cycle; None publishes none.
    placement: PlacementConfig | None = field(default_factory=PlacementConfig)
    report_dir: str | None = None
    dry_run: bool = False
    max_writes_per_cycle: int = 2000
    # Seconds one Slurm read command may run before it is killed (`no answer within N s`).
    slurm_timeout: float = DEFAULT_SLURM_TIMEOUT
    weighting: Weighting = "strict"
    # factor weighting: the most the DRF factor adds, like a PriorityWeight*.
    factor_weight: int = 100_000
    # Jobs per pool whose order Slurm sees exactly; None: HORIZON_MARGIN x the
    # deeper of Slurm's bf_max_job_test and default_queue_depth.
    horizon: int | None = None
    # Half-life, in changes of the cluster, of the remembered tie wins.
    tie_half_life_cycles: float = 10.0
    include_unavailable_nodes: bool = False
    metrics_address: str | None = None
    # node_exporter textfile-collector file (*.prom) rewritten every cycle; None writes none.
    metrics_textfile: str | None = None
    # Tree gauges (trail.prometheus): users too, or accounts only; at most this many nodes per pool.
    metrics_tree_users: bool = False
    metrics_tree_max_paths: int = 1000
    log_level: str = "INFO"
    source_path: str | None = None
    # Where each key was written: dotted path (`accounts.physics.weight`,
    # `pools[0].name`) -> 1-based line in source_path. Lets later warnings
    # (unknown accounts, an old or ignored key) point into the file.
    lines: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}), compare=False, repr=False)

    def weight(self, account: str) -> Fraction:
        return self.weights.get(account, self.default_weight)


def default_config() -> Config:
    """The configuration used when no file is found."""
    return Config()
