"""Guarantees, limits and `reclaim:` in the config (config/reclaim_keys.py, docs/rule.md §9)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from slurm_drf.config.load import parse_config_text
from slurm_drf.config.settings import Amounts
from tests.unit.config.test_config import problems_of

BAD: list[tuple[str, str, list[str] | None]] = [
    (
        "shares over the pool",
        "accounts:\n  physics: {guarantee: 60%}\n  chem: {guarantee: 50%}\n",
        [
            "config.yaml:3: accounts.chem.guarantee: the guarantees add up to 110% of the pool "
            "(physics 60%, chem 50%); they may add up to 100% at most"
        ],
    ),
    (
        "a share of nothing",
        "accounts:\n  x: {guarantee: 0%}\n",
        ["config.yaml:2: accounts.x.guarantee: '0%' is not a share from above 0% to 100%"],
    ),
    (
        "a share over the whole",
        "accounts:\n  x: {limit: 150%}\n",
        ["config.yaml:2: accounts.x.limit: '150%' is not a share from above 0% to 100%"],
    ),
    (
        "a limit below the guarantee",
        "accounts:\n  x: {guarantee: {gres/gpu: 16}, limit: {gres/gpu: 8}}\n",
        ["config.yaml:2: accounts.x.limit.gres/gpu: 8 is below the account's guarantee of 16"],
    ),
    (
        "a TRES that is not one",
        "accounts:\n  x: {guarantee: {gpus: 16}}\n",
        None,  # the schema's message, checked below by its key only
    ),
    (
        "reclaim in a pool that is not",
        "reclaim: {pools: [gpu]}\n",
        ["config.yaml:1: reclaim.pools[0]: 'gpu' is not a pool; the pools are default"],
    ),
    (
        "reclaim too soon",
        "reclaim: {pools: [default], after: 10s}\n",
        ["config.yaml:1: reclaim.after: '10s' is shorter than 1 minute"],
    ),
]


@pytest.mark.parametrize(("text", "expected"), [(t, e) for _, t, e in BAD], ids=[i for i, _, _ in BAD])
def test_a_wrong_guarantee_limit_or_reclaim_is_one_line_naming_its_key(text: str, expected: list[str] | None) -> None:
    found = problems_of(text)
    if expected is None:
        assert len(found) == 1 and found[0].startswith("config.yaml:2: accounts.x.guarantee")
    else:
        assert found == expected


def test_nested_paths_count_within_their_parent_and_the_settings_are_exact() -> None:
    config = parse_config_text(
        "accounts:\n"
        "  physics: {guarantee: 60%, limit: 80%}\n"
        "  physics/theory: {guarantee: 50%}\n"
        "  bio: {guarantee: {gres/gpu: 16, cpu: 256}}\n"
        "reclaim:\n  pools: [default]\n  after: 5m\n  share_floor: 0.5\n  exempt_qos: [urgent]\n  way: cancel\n",
        "config.yaml",
    )
    assert config.guarantees["physics"] == Amounts(fraction=Fraction(3, 5))
    assert config.guarantees["bio"].amounts == {"gres/gpu": 16, "cpu": 256}
    assert config.limits["physics"] == Amounts(fraction=Fraction(4, 5))
    reclaim = config.reclaim
    assert reclaim is not None
    assert (reclaim.pools, reclaim.after, reclaim.share_floor, reclaim.way) == (
        ("default",),
        300.0,
        Fraction(1, 2),
        "cancel",
    )
    assert reclaim.exempt_qos == {"urgent"} and reclaim.min_runtime == 600.0 and reclaim.max_per_cycle == 4


def test_without_the_keys_nothing_is_guaranteed_and_nothing_reclaimed() -> None:
    config = parse_config_text("{}\n", "config.yaml")
    assert (dict(config.guarantees), dict(config.limits), config.reclaim) == ({}, {}, None)
