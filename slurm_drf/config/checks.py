"""What a schema cannot say about a config file, and the Config it becomes.

Sits after config.validate: `logical_problems` looks at the same data
(which the schema may have refused) for pools that overlap, an offset
with no room, an interval or slurm_timeout out of bounds, a port out of
range; `build_config` converts only data that passed both, taking the
exact decimals written and the line of every key from the node tree
(config.yaml_tree).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Final, cast

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from slurm_drf.config import reclaim_keys
from slurm_drf.config.durations import parse_duration
from slurm_drf.config.settings import (
    DEFAULT_HISTORY_HALF_LIFE,
    DEFAULT_HISTORY_WEIGHT,
    DEFAULT_STALE_INTERVALS,
    NICE_LIMIT,
    Amounts,
    Config,
    Hierarchy,
    HistoryConfig,
    Mode,
    PlacementConfig,
    PoolConfig,
    Weighting,
    WeightSource,
    WithinAccount,
)
from slurm_drf.config.validate import IGNORED, RENAMED, describe, load_schema, marked_keys
from slurm_drf.config.yaml_tree import KeyPath, Problem, node_at

MIN_INTERVAL: Final = 1.0
# The longest interval: the scheduler's next start (and a backoff of two
# intervals, a lease of 1.5) must be a date datetime can hold; any daemon
# wants a cycle at least once a day.
MAX_INTERVAL: Final = 86400.0
# slurm_timeout: at least a second, as the interval.
MIN_SLURM_TIMEOUT: Final = 1.0
# At most 10 minutes: the service takes a cycle of 15 minutes as hung
# (service.loop.HUNG_CYCLE_SECONDS) and stops feeding systemd's watchdog; a
# hung slurmctld must fail the cycle first, as one line naming the command.
MAX_SLURM_TIMEOUT: Final = 600.0
# history.half_life: shorter than an hour forgets within a few cycles.
MIN_HISTORY_HALF_LIFE: Final = 3600.0
# Longer than a year: the past is read 20 half-lives back and sacct asked 5
# (`time.localtime` of a start before the year 1 fails), and no site's
# memory of use is meant to outlast its accounts.
MAX_HISTORY_HALF_LIFE: Final = 365 * 86400.0
# retention_days should keep this many half-lives of history.sqlite: after 3, a
# record weighs 1/8; pruning earlier cuts the past short (a warning, not an error).
HISTORY_KEPT_HALF_LIVES: Final = 3
# Weights that give every account a finite share, compared exactly: the
# numerator and denominator of such a decimal stay far inside a float.
MIN_WEIGHT: Final = Fraction(1, 10**6)
MAX_WEIGHT: Final = Fraction(10**6)
WEIGHT_DECIMALS: Final = 20
# The longest mapping key, however it is written. PyYAML reads a key written
# plainly or in quotes (a "simple key") only up to 1024 characters and
# otherwise fails with "mapping values are not allowed here"
# (config.load names the key instead); a key written as `? KEY` could be
# longer, and is held to the same bound. No name Slurm keeps comes near it.
MAX_KEY_CHARACTERS: Final = 1024


def logical_problems(data: Any) -> list[Problem]:
    """Problems of meaning rather than shape, as config.validate reports shape."""
    # Run on data the schema may have refused: each check looks only at
    # values of the shape it needs, so one mistake is not reported twice.
    if not isinstance(data, dict):
        return []
    return [
        *_renamed_problems(data),
        *_duration_problems(data),
        *_history_problems(data),
        *_pool_problems(data),
        *_scale_problems(data),
        *_weighting_problems(data),
        *_metrics_address_problems(data),
        *reclaim_keys.problems(data),
    ]


def renamed_keys() -> dict[str, str]:
    """Old key -> its new name, from the schema's `x-renamed-to`: still read, with a warning."""
    return marked_keys(load_schema()["properties"], RENAMED)


def _renamed_problems(data: dict[str, Any]) -> Iterator[Problem]:
    for old, new in renamed_keys().items():
        if old in data and new in data:
            yield Problem((old,), f"the old name of {new}, which is set too; remove {old}")


def renamed_key_warnings(config: Config) -> list[str]:
    """`check-config`'s and the daemon's warning for each old key name the file still uses."""
    where = config.source_path or "config"
    return [
        f"{where}:{config.lines[old]}: {old} is the old name of {new}, read as it; rename it to {new}"
        for old, new in renamed_keys().items()
        if old in config.lines
    ]


def ignored_keys() -> dict[str, str]:
    """Key -> why it is ignored, from the schema's `x-ignored`: still accepted, with a warning."""
    return marked_keys(load_schema()["properties"], IGNORED)


def ignored_key_warnings(config: Config) -> list[str]:
    """`check-config`'s and the daemon's warning for each ignored key the file still sets."""
    where = config.source_path or "config"
    return [
        f"{where}:{config.lines[key]}: {key} is ignored ({why}); remove it"
        for key, why in ignored_keys().items()
        if key in config.lines
    ]


def config_warnings(config: Config) -> list[str]:
    """What `check-config` and the daemon warn of in a config that loads."""
    return [*renamed_key_warnings(config), *ignored_key_warnings(config), *history_warnings(config)]


# The top-level durations' bounds: key, least and most seconds, and both in words.
_DURATION_BOUNDS: Final = (
    ("interval", MIN_INTERVAL, MAX_INTERVAL, "1 second", "1 day"),
    ("slurm_timeout", MIN_SLURM_TIMEOUT, MAX_SLURM_TIMEOUT, "1 second", "10 minutes"),
)


def _duration_problems(data: dict[str, Any]) -> Iterator[Problem]:
    for key, least, most, least_words, most_words in _DURATION_BOUNDS:
        value = data.get(key)
        try:
            seconds = parse_duration(value) if value is not None else None
        except (ValueError, TypeError):
            continue  # the schema reports the shape
        if seconds is None or math.isnan(seconds):
            continue
        if seconds < least:
            yield Problem((key,), f"{describe(value)} is shorter than {least_words}")
        elif seconds > most and not (isinstance(value, float) and math.isinf(value)):
            # (a YAML .inf is validate's to report, as every non-finite number)
            yield Problem((key,), f"{describe(value)} is longer than {most_words}")


def _history_problems(data: dict[str, Any]) -> Iterator[Problem]:
    history = data.get("history")
    if not isinstance(history, dict) or "half_life" not in history:
        return
    value = history["half_life"]
    try:
        seconds = parse_duration(value)
    except (ValueError, TypeError):
        return  # the schema reports the shape
    if not math.isfinite(seconds):
        yield Problem(("history", "half_life"), f"{describe(value)} is not a finite duration")
    elif seconds < MIN_HISTORY_HALF_LIFE:
        yield Problem(("history", "half_life"), f"{describe(value)} is shorter than 1 hour")
    elif seconds > MAX_HISTORY_HALF_LIFE:
        yield Problem(("history", "half_life"), f"{describe(value)} is longer than 365 days")


def history_warnings(config: Config) -> list[str]:
    """`check-config`'s warning when `retention_days` prunes history.sqlite before the decayed past has faded.

    The past is integrated from that file (docs/rule.md §6): what is pruned
    is forgotten early, so the past is cut short. Not an error: the plan
    still works, with a shorter memory.
    """
    history = config.history
    if history is None or not history.active or config.retention_days is None:
        return []
    wanted = HISTORY_KEPT_HALF_LIVES * history.half_life_s / 86400.0
    if config.retention_days >= wanted:
        return []
    # The key as the file writes it (perhaps by its old name), or the one to add.
    names = ["retention_days", *(old for old, new in renamed_keys().items() if new == "retention_days")]
    key = next((name for name in names if name in config.lines), "retention_days")
    where = config.source_path or "config"
    line = config.lines.get(key) or config.lines.get("history.half_life")
    prefix = f"{where}:{line}" if line else where
    return [
        f"{prefix}: {key}: {config.retention_days} day(s) is shorter than {HISTORY_KEPT_HALF_LIVES} "
        f"half-lives of history.half_life ({wanted:g} days): the history is pruned before the past fades, "
        f"so the past is cut short; keep {key} at {math.ceil(wanted)} or more"
    ]


def _placement_config(placement: dict[str, Any] | None) -> PlacementConfig | None:
    if placement is None:
        return None
    return PlacementConfig(
        path=placement.get("path"),
        stale_intervals=int(placement.get("stale_intervals", DEFAULT_STALE_INTERVALS)),
    )


def _history_config(history: dict[str, Any] | None) -> HistoryConfig | None:
    if history is None:
        return None
    given = history.get("half_life")
    return HistoryConfig(
        half_life_s=DEFAULT_HISTORY_HALF_LIFE if given is None else parse_duration(given),
        weight=float(history.get("weight", DEFAULT_HISTORY_WEIGHT)),
    )


def _names(value: Any) -> list[tuple[int, str]]:
    """(index, name) of the text items of a list; nothing for anything else."""
    if not isinstance(value, list):
        return []
    return [(index, item) for index, item in enumerate(value) if isinstance(item, str)]


def _pool_problems(data: dict[str, Any]) -> Iterator[Problem]:
    pools = data.get("pools")
    if not isinstance(pools, list):
        return
    managed = data.get("partitions")
    managed_names = {name for _, name in _names(managed)} if isinstance(managed, list) else None
    if pools and isinstance(managed, list):
        yield from _unpooled_problems(pools, managed)
    pool_of_name: dict[str, int] = {}
    pool_of_partition: dict[str, tuple[int, str]] = {}
    for index, pool in enumerate(pools):
        if not isinstance(pool, dict):
            continue
        name = pool.get("name")
        label = repr(name) if isinstance(name, str) else f"pools[{index}]"
        if isinstance(name, str):
            if name in pool_of_name:
                yield Problem(
                    ("pools", index, "name"),
                    f"{name!r} is already the name of pools[{pool_of_name[name]}]; pool names must differ",
                )
            else:
                pool_of_name[name] = index
        yield from _pool_partition_problems(pool, (index, label), pool_of_partition, managed_names)


def _unpooled_problems(pools: list[Any], managed: list[Any]) -> Iterator[Problem]:
    """With pools, only pooled partitions are managed: a partition listed in `partitions`
    but in no pool would silently be left alone."""
    pooled = {name for pool in pools if isinstance(pool, dict) for _, name in _names(pool.get("partitions"))}
    for position, partition in _names(managed):
        if partition not in pooled:
            yield Problem(
                ("partitions", position),
                f"partition {partition!r} is in no pool, so it would not be managed; "
                "add it to a pool or remove it here",
            )


def _pool_partition_problems(
    pool: dict[str, Any],
    pool_id: tuple[int, str],
    pool_of_partition: dict[str, tuple[int, str]],
    managed_names: set[str] | None,
) -> Iterator[Problem]:
    """A pool's partitions: each in one pool only, and among the managed `partitions` when
    those are listed. `pool_id` is the pool's index and how messages name it;
    `pool_of_partition` gathers the partitions of the pools before it, this one's added."""
    index = pool_id[0]
    for position, partition in _names(pool.get("partitions")):
        where: KeyPath = ("pools", index, "partitions", position)
        if partition in pool_of_partition:
            other_index, other_label = pool_of_partition[partition]
            if other_index != index:  # a repeat within one pool is uniqueItems' to report
                yield Problem(
                    where,
                    f"partition {partition!r} is already in pool {other_label} (pools[{other_index}]); "
                    "a partition belongs to one pool",
                )
            continue
        pool_of_partition[partition] = pool_id
        if managed_names is not None and partition not in managed_names:
            yield Problem(
                where,
                f"partition {partition!r} is not in partitions; add it there or remove it here",
            )


def _scale_problems(data: dict[str, Any]) -> Iterator[Problem]:
    offset = data.get("offset", NICE_LIMIT)
    if _is_int(offset) and -NICE_LIMIT <= offset < 2:
        # Labels run from 0 to offset - 1 (docs/rule.md §5): two jobs need two.
        yield Problem(
            ("offset",), f"{int(offset)} leaves no room for values: the range is 0 to offset - 1; use 2 or more"
        )


def _weighting_problems(data: dict[str, Any]) -> Iterator[Problem]:
    if data.get("weighting") == "factor" and data.get("mode") == "priority":
        yield Problem(
            ("weighting",),
            "factor needs mode nice or site_factor: an absolute priority leaves Slurm no other factors to add",
        )


def _is_int(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())


def _weight_paths(data: dict[str, Any]) -> list[KeyPath]:
    """Where weights are written: default_weight, accounts.KEY.weight, accounts.KEY.users.USER."""
    paths: list[KeyPath] = [("default_weight",)] if "default_weight" in data else []
    accounts = data.get("accounts")
    if isinstance(accounts, dict):
        for name, settings in accounts.items():
            if not isinstance(settings, dict):
                continue
            if "weight" in settings:
                paths.append(("accounts", name, "weight"))
            if isinstance(settings.get("users"), dict):
                paths += [("accounts", name, "users", user) for user in settings["users"]]
    return paths


def weight_problems(data: Any, root: Node) -> list[Problem]:
    """Weights the schema takes (> 0) but no share can use: 1e-320, 1e400, 0.0000000001.

    Needs the node tree: a weight is the exact decimal written (`_exact`).
    """
    if not isinstance(data, dict):
        return []
    problems = []
    for path in _weight_paths(data):
        value: Any = data
        for key in path:
            value = value[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not (0 < value < math.inf):
            continue  # the schema reports it
        node = node_at(root, path)
        exact = _exact(value, node)
        written = str(node.value) if isinstance(node, ScalarNode) else describe(value)
        if not MIN_WEIGHT <= exact <= MAX_WEIGHT:
            problems.append(Problem(path, f"{written} is not between 0.000001 and 1000000"))
        elif (exact * 10**WEIGHT_DECIMALS).denominator != 1:
            problems.append(Problem(path, f"{written} has more than {WEIGHT_DECIMALS} digits after the point"))
    return problems


def long_key_message(length: int, what: str = "the key") -> str:
    """What is wrong with a key of `length` characters (over MAX_KEY_CHARACTERS); `what` names it."""
    return (
        f"{what} is too long: {length:,} characters, where a key may have at most {MAX_KEY_CHARACTERS:,} "
        "(YAML's limit for a key written plainly or in quotes); shorten it"
    )


def key_length_problems(root: Node) -> list[Problem]:
    """Mapping keys longer than MAX_KEY_CHARACTERS (only a `? KEY` can be), each at its own line.

    Walks the node tree once, each node once however many aliases share it.
    """
    problems = []
    seen: set[int] = set()
    stack: list[tuple[Node, KeyPath]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, MappingNode):
            for key, value in node.value:
                text = str(key.value) if isinstance(key, ScalarNode) else ""
                if len(text) > MAX_KEY_CHARACTERS:
                    mark = (int(key.start_mark.line) + 1, int(key.start_mark.column) + 1)
                    problems.append(Problem(path, long_key_message(len(text)), mark))
                else:
                    stack.append((value, (*path, text)))
        elif isinstance(node, SequenceNode):
            stack.extend((item, (*path, index)) for index, item in enumerate(node.value))
    return problems


def _metrics_address_problems(data: dict[str, Any]) -> Iterator[Problem]:
    address = data.get("metrics_address")
    if not isinstance(address, str) or ":" not in address:
        return
    port = address.rpartition(":")[2]
    if port.isdigit() and not 1 <= int(port) <= 65535:
        yield Problem(("metrics_address",), f"port {int(port)} is not between 1 and 65535")


def _exact(value: float, node: Node | None) -> Fraction:
    """The exact decimal written in the file: YAML `0.3` -> Fraction(3, 10).

    A float has already rounded 0.3 to a binary neighbour; the scalar's text
    has not. Forms Fraction cannot read (hex, sexagesimal) are integers or
    rare enough to take the float's shortest repr.
    """
    if isinstance(node, ScalarNode):
        try:
            return Fraction(str(node.value).replace("_", ""))
        except (ValueError, ZeroDivisionError):
            pass
    return Fraction(value) if isinstance(value, int) else Fraction(repr(value))


def build_config(data: dict[str, Any], root: Node, lines: Mapping[str, int], source: str) -> Config:
    """Convert data that passed every check; no check may be left to this point."""
    renamed = renamed_keys()
    data = {renamed.get(key, key): value for key, value in data.items()}
    defaults = Config()
    weights: dict[str, Fraction] = {}
    user_weights: dict[str, Mapping[str, Fraction]] = {}
    bounds: dict[str, dict[str, Amounts]] = {"guarantee": {}, "limit": {}}
    excluded = set(data.get("exclude_accounts", ()))
    for account, settings in data.get("accounts", {}).items():
        if "weight" in settings:
            weights[account] = _exact(settings["weight"], node_at(root, ("accounts", account, "weight")))
        if settings.get("exclude", False):
            excluded.add(account)
        for name, found in bounds.items():
            if name in settings:
                found[account] = reclaim_keys.build_amounts(settings[name])
        if "users" in settings:
            user_weights[account] = MappingProxyType(
                {
                    user: _exact(weight, node_at(root, ("accounts", account, "users", user)))
                    for user, weight in settings["users"].items()
                }
            )
    default_weight = (
        _exact(data["default_weight"], node_at(root, ("default_weight",)))
        if "default_weight" in data
        else defaults.default_weight
    )
    partitions = data.get("partitions")
    pools = tuple(PoolConfig(name=pool["name"], partitions=tuple(pool["partitions"])) for pool in data.get("pools", ()))
    return Config(
        interval=parse_duration(data["interval"]) if "interval" in data else defaults.interval,
        mode=cast(Mode, data.get("mode", defaults.mode)),
        weights=MappingProxyType(weights),
        user_weights=MappingProxyType(user_weights),
        guarantees=MappingProxyType(bounds["guarantee"]),
        limits=MappingProxyType(bounds["limit"]),
        reclaim=reclaim_keys.build_reclaim(data.get("reclaim")),
        weight_source=cast(WeightSource, data.get("weights", defaults.weight_source)),
        fairness_within_account=cast(
            WithinAccount, data.get("fairness_within_account", defaults.fairness_within_account)
        ),
        hierarchy=cast(Hierarchy, data.get("hierarchy", defaults.hierarchy)),
        default_weight=default_weight,
        resources=tuple(data.get("resources", defaults.resources)),
        partitions=None if partitions is None else tuple(partitions),
        pools=pools,
        exclude_accounts=frozenset(excluded),
        backend=data.get("backend", defaults.backend),
        offset=int(data.get("offset", defaults.offset)),
        state_dir=data.get("state_dir", defaults.state_dir),
        lease_dir=data.get("lease_dir", defaults.lease_dir),
        retention_days=data.get("retention_days", defaults.retention_days),
        history_max_mb=data.get("history_max_mb", defaults.history_max_mb),
        history=_history_config(data.get("history")),
        placement=_placement_config(data.get("placement", {})),
        report_dir=data.get("report_dir", defaults.report_dir),
        dry_run=data.get("dry_run", defaults.dry_run),
        max_writes_per_cycle=int(data.get("max_writes_per_cycle", defaults.max_writes_per_cycle)),
        slurm_timeout=parse_duration(data["slurm_timeout"]) if "slurm_timeout" in data else defaults.slurm_timeout,
        weighting=cast(Weighting, data.get("weighting", defaults.weighting)),
        factor_weight=int(data.get("factor_weight", defaults.factor_weight)),
        horizon=None if data.get("horizon", "auto") == "auto" else int(data["horizon"]),
        tie_half_life_cycles=float(data.get("tie_half_life_cycles", defaults.tie_half_life_cycles)),
        include_unavailable_nodes=data.get("include_unavailable_nodes", defaults.include_unavailable_nodes),
        metrics_address=data.get("metrics_address", defaults.metrics_address),
        metrics_textfile=data.get("metrics_textfile", defaults.metrics_textfile),
        metrics_tree_users=data.get("metrics_tree_users", defaults.metrics_tree_users),
        metrics_tree_max_paths=int(data.get("metrics_tree_max_paths", defaults.metrics_tree_max_paths)),
        log_level=data.get("log_level", defaults.log_level),
        source_path=source,
        lines=MappingProxyType(dict(lines)),
    )
