"""Guarantees, limits and `reclaim:` (docs/rule.md §9): what the schema cannot check, and their settings.

`problems` runs beside config.checks' on data the schema may have refused
(each check looks only at values of the shape it needs); `build_amounts`
and `build_reclaim` convert data that passed both.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Final, cast

from slurm_drf.config.durations import parse_duration
from slurm_drf.config.settings import (
    DEFAULT_RECLAIM_AFTER,
    DEFAULT_RECLAIM_COOLDOWN,
    DEFAULT_RECLAIM_MAX_PER_CYCLE,
    DEFAULT_RECLAIM_MIN_RUNTIME,
    Amounts,
    ReclaimConfig,
    ReclaimWay,
)
from slurm_drf.config.validate import describe
from slurm_drf.config.yaml_tree import Problem

# Where the tree's paths are split (policy.engine.hierarchy.SEPARATOR; the config cannot import the policy).
_SEPARATOR: Final = "/"
# reclaim.after: a claim waits at least a minute (a cycle or two), at most a week.
MIN_AFTER: Final = 60.0
MAX_DURATION: Final = 365 * 86400.0
# The default pool's name when `pools:` is not set (policy.pools.build_pools).
DEFAULT_POOL: Final = "default"


def percent(text: str) -> Fraction:
    """`25%` -> 1/4, exactly as written."""
    return Fraction(text.strip().removesuffix("%").strip()) / 100


def problems(data: dict[str, Any]) -> list[Problem]:
    """Guarantees and limits in range and consistent; `reclaim:` durations and pools that exist."""
    return [*_amount_problems(data), *_reclaim_problems(data)]


def _accounts(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    accounts = data.get("accounts")
    if not isinstance(accounts, dict):
        return {}
    return {key: value for key, value in accounts.items() if isinstance(key, str) and isinstance(value, dict)}


def _fraction(value: Any) -> Fraction | None:
    """A share written as `25%`, or None for anything else (amounts, or a shape the schema refuses)."""
    if not isinstance(value, str):
        return None
    try:
        return percent(value)
    except (ValueError, ZeroDivisionError):
        return None


def _amount_problems(data: dict[str, Any]) -> Iterator[Problem]:
    accounts = _accounts(data)
    shares: dict[str, Fraction] = {}
    for key, settings in accounts.items():
        for name in ("guarantee", "limit"):
            share = _fraction(settings.get(name))
            if share is not None and not 0 < share <= 1:
                yield Problem(("accounts", key, name), f"{settings[name]!r} is not a share from above 0% to 100%")
            elif share is not None and name == "guarantee":
                shares[key] = share
        yield from _limit_below_guarantee(key, settings)
    # Shares of one pool add up to the pool at most; a key under another (by path) counts within it.
    top = [key for key in shares if not any(key.startswith(other + _SEPARATOR) for other in shares)]
    total = sum((shares[key] for key in top), Fraction(0))
    if total > 1:
        last = max(top, key=lambda key: list(accounts).index(key))
        listed = ", ".join(f"{key} {float(shares[key] * 100):g}%" for key in top)
        yield Problem(
            ("accounts", last, "guarantee"),
            f"the guarantees add up to {float(total * 100):g}% of the pool ({listed}); they may add up to 100% at most",
        )


def _limit_below_guarantee(key: str, settings: Mapping[str, Any]) -> Iterator[Problem]:
    guarantee, limit = settings.get("guarantee"), settings.get("limit")
    low, high = _fraction(guarantee), _fraction(limit)
    if low is not None and high is not None and high < low:
        yield Problem(("accounts", key, "limit"), f"{limit!r} is below the account's guarantee {guarantee!r}")
    if isinstance(guarantee, dict) and isinstance(limit, dict):
        for tres, amount in limit.items():
            floor = guarantee.get(tres)
            if isinstance(amount, int) and isinstance(floor, int) and amount < floor:
                yield Problem(("accounts", key, "limit", tres), f"{amount} is below the account's guarantee of {floor}")


def _reclaim_problems(data: dict[str, Any]) -> Iterator[Problem]:
    reclaim = data.get("reclaim")
    if not isinstance(reclaim, dict):
        return
    for name, least, least_words in (
        ("after", MIN_AFTER, "1 minute"),
        ("min_runtime", 0.0, "0"),
        ("cooldown", 0.0, "0"),
    ):
        if name not in reclaim:
            continue
        try:
            seconds = parse_duration(reclaim[name])
        except (ValueError, TypeError):
            continue  # the schema reports the shape
        if seconds < least:
            yield Problem(("reclaim", name), f"{describe(reclaim[name])} is shorter than {least_words}")
        elif not math.isfinite(seconds) or seconds > MAX_DURATION:
            yield Problem(("reclaim", name), f"{describe(reclaim[name])} is longer than 365 days")
    pools = data.get("pools")
    known = (
        {pool["name"] for pool in pools if isinstance(pool, dict) and isinstance(pool.get("name"), str)}
        if isinstance(pools, list) and pools
        else {DEFAULT_POOL}
    )
    named = reclaim.get("pools")
    for index, name in enumerate(named if isinstance(named, list) else []):
        if isinstance(name, str) and name not in known:
            yield Problem(
                ("reclaim", "pools", index),
                f"{name!r} is not a pool; the pools are {', '.join(sorted(known))}",
            )


def build_amounts(value: str | Mapping[str, int]) -> Amounts:
    """A guarantee or a limit that passed every check."""
    if isinstance(value, str):
        return Amounts(fraction=percent(value))
    return Amounts(amounts=MappingProxyType({tres: int(amount) for tres, amount in value.items()}))


def build_reclaim(reclaim: dict[str, Any] | None) -> ReclaimConfig | None:
    """`reclaim:` that passed every check; None: off."""
    if reclaim is None:
        return None

    def seconds(name: str, default: float) -> float:
        return parse_duration(reclaim[name]) if name in reclaim else default

    floor = reclaim.get("share_floor", 0)
    return ReclaimConfig(
        pools=tuple(reclaim["pools"]),
        after=seconds("after", DEFAULT_RECLAIM_AFTER),
        min_runtime=seconds("min_runtime", DEFAULT_RECLAIM_MIN_RUNTIME),
        cooldown=seconds("cooldown", DEFAULT_RECLAIM_COOLDOWN),
        max_per_cycle=int(reclaim.get("max_per_cycle", DEFAULT_RECLAIM_MAX_PER_CYCLE)),
        way=cast(ReclaimWay, reclaim.get("way", "requeue")),
        share_floor=Fraction(floor) if isinstance(floor, int) else Fraction(repr(float(floor))),
        exempt_qos=frozenset(reclaim.get("exempt_qos", ())),
        exempt_partitions=frozenset(reclaim.get("exempt_partitions", ())),
    )
