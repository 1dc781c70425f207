"""Config loading: every bad file gets an exact, actionable message; good files convert exactly."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml

from slurm_drf.cli.main import main
from slurm_drf.config.checks import (
    MAX_SLURM_TIMEOUT,
    MIN_SLURM_TIMEOUT,
    config_warnings,
    renamed_key_warnings,
    renamed_keys,
)
from slurm_drf.config.durations import parse_duration
from slurm_drf.config.load import (
    CONFIG_ENV,
    find_config_path,
    load_config,
    parse_config_text,
    resolve_config,
    warn_unknown_accounts,
)
from slurm_drf.config.settings import DEFAULT_SLURM_TIMEOUT, NICE_LIMIT, Config, PoolConfig, default_config
from slurm_drf.config.validate import _surely_conforms, load_schema
from slurm_drf.config.yaml_tree import read_yaml
from slurm_drf.errors import ConfigError, InputError
from slurm_drf.service.loop import HUNG_CYCLE_SECONDS
from tests.paths import REPO

# The top-level keys an unknown key's message lists: every key but the old names (scale,
# history_days, tie_half_life), so the message is enough where docs/ is not installed.
_KEYS_OF_A_NEW_CONFIG = (
    "accounts, backend, default_weight, dry_run, exclude_accounts, factor_weight, fairness_within_account, "
    "hierarchy, history, history_max_mb, horizon, include_unavailable_nodes, interval, lease_dir, log_level, "
    "max_writes_per_cycle, metrics_address, metrics_textfile, metrics_tree_max_paths, metrics_tree_users, mode, "
    "offset, partitions, placement, pools, reclaim, report_dir, resources, retention_days, slurm_timeout, "
    "state_dir, tie_half_life_cycles, weighting, weights"
)

ROOT = REPO
EXAMPLE = ROOT / "slurm_drf" / "data" / "config.yaml"
TRES_EXPECTED = (
    "is not a Slurm TRES name (cpu, mem, node, billing, energy, gres/NAME, gres/NAME:TYPE, license/NAME, ...)"
)


def problems_of(text: str, source: str = "config.yaml") -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config_text(text, source)
    error = caught.value
    # The message is the problems, one a line: what the CLI prints.
    assert str(error) == "\n".join(error.problems)
    return error.problems


# (id, YAML text, the exact problems reported)
BAD_CONFIGS: list[tuple[str, str, list[str]]] = [
    # --- the account tree (paths, users, weights, fairness_within_account)
    (
        "path with an empty name",
        "accounts:\n  physics//theory: {weight: 2}\n",
        [
            "config.yaml:2: accounts.physics//theory: 'physics//theory' is not a name without spaces or commas, "
            "or a path of such names joined by /"
        ],
    ),
    (
        "path with a leading slash",
        "accounts:\n  /physics: {weight: 2}\n",
        [
            "config.yaml:2: accounts./physics: '/physics' is not a name without spaces or commas, "
            "or a path of such names joined by /"
        ],
    ),
    (
        "user weight zero",
        "accounts:\n  physics/theory:\n    users: {alice: 0}\n",
        ["config.yaml:3: accounts.physics/theory.users.alice: 0 is not > 0"],
    ),
    (
        "user weight too small",
        "accounts:\n  theory:\n    users:\n      alice: 0.0000001\n",
        ["config.yaml:4: accounts.theory.users.alice: 0.0000001 is not between 0.000001 and 1000000"],
    ),
    (
        "user weight text",
        "accounts:\n  theory: {users: {alice: two}}\n",
        ["config.yaml:2: accounts.theory.users.alice: expected a number, got 'two'"],
    ),
    (
        "users a list",
        "accounts:\n  theory: {users: [alice]}\n",
        [
            "config.yaml:2: accounts.theory.users: expected a mapping of user name to weight, "
            "such as {alice: 2}, got a list"
        ],
    ),
    (
        "user name with a space",
        "accounts:\n  theory: {users: {'al ice': 1}}\n",
        ["config.yaml:2: accounts.theory.users['al ice']: 'al ice' is not a name without spaces or commas"],
    ),
    (
        "weights unknown",
        "weights: yaml\n",
        ["config.yaml:1: weights: 'yaml' is not one of config, slurm"],
    ),
    (
        "fairness_within_account unknown",
        "fairness_within_account: users\n",
        ["config.yaml:1: fairness_within_account: 'users' is not one of user, slurm; did you mean 'user'?"],
    ),
    # --- accounts and weights
    (
        "weight negative",
        "mode: nice\naccounts:\n  physics: {weight: -1}\n",
        ["config.yaml:3: accounts.physics.weight: -1 is not > 0"],
    ),
    (
        "weight zero",
        "accounts:\n  physics:\n    weight: 0\n",
        ["config.yaml:3: accounts.physics.weight: 0 is not > 0"],
    ),
    (
        "weight text",
        'accounts:\n  physics:\n    weight: "two"\n',
        ["config.yaml:3: accounts.physics.weight: expected a number, got 'two'"],
    ),
    (
        "weight boolean",
        "accounts:\n  physics: {weight: yes}\n",
        ["config.yaml:2: accounts.physics.weight: expected a number, got true"],
    ),
    (
        "weight infinite",
        "accounts:\n  physics: {weight: .inf}\n",
        ["config.yaml:2: accounts.physics.weight: .inf is not a finite number"],
    ),
    (
        "account given a bare number",
        "accounts:\n  physics: 3\n",
        [
            "config.yaml:2: accounts.physics: expected a mapping such as {weight: 2} or {exclude: true}, "
            "got 3; did you mean {weight: 3}?"
        ],
    ),
    (
        "account with nothing",
        "accounts:\n  physics:\n",
        ["config.yaml:2: accounts.physics: expected a mapping such as {weight: 2} or {exclude: true}, got null"],
    ),
    (
        "account key misspelt",
        "accounts:\n  physics: {wieght: 2}\n",
        ["config.yaml:2: accounts.physics.wieght: unknown key; did you mean 'weight'?"],
    ),
    (
        "account key unknown",
        "accounts:\n  physics: {share: 2}\n",
        [
            "config.yaml:2: accounts.physics.share: unknown key; "
            "expected one of exclude, guarantee, limit, users, weight"
        ],
    ),
    (
        "account exclude not boolean",
        "accounts:\n  chem: {exclude: 1}\n",
        ["config.yaml:2: accounts.chem.exclude: expected true or false, got 1"],
    ),
    (
        "account name with a space",
        'accounts:\n  "high energy": {weight: 2}\n',
        [
            "config.yaml:2: accounts['high energy']: 'high energy' is not a name without spaces or commas, "
            "or a path of such names joined by /"
        ],
    ),
    (
        "accounts not a mapping",
        "accounts: [physics, chemistry]\n",
        ["config.yaml:1: accounts: expected a mapping of account name to its settings, got a list"],
    ),
    (
        "duplicate account",
        "accounts:\n  physics: {weight: 1}\n  chem: {weight: 1}\n  physics: {weight: 2}\n",
        ["config.yaml:4: accounts.physics: duplicate key (first set on line 2); write it once"],
    ),
    (
        "default_weight negative",
        "default_weight: -0.5\n",
        ["config.yaml:1: default_weight: -0.5 is not > 0"],
    ),
    (
        "exclude_accounts not a list",
        "exclude_accounts: root\n",
        ["config.yaml:1: exclude_accounts: expected a list of account names, got 'root'"],
    ),
    (
        "exclude_accounts repeated",
        "exclude_accounts: [root, admin, root]\n",
        ["config.yaml:1: exclude_accounts[2]: 'root' is already listed as exclude_accounts[0]"],
    ),
    # --- top level
    (
        "option misspelt",
        "intervall: 60s\n",
        ["config.yaml:1: intervall: unknown key; did you mean 'interval'?"],
    ),
    (
        "option unknown",
        "mode: nice\ncolour: blue\n",
        [
            "config.yaml:2: colour: unknown key; expected one of " + _KEYS_OF_A_NEW_CONFIG,
        ],
    ),
    (
        "option repeated",
        "mode: nice\nscale: 10\nmode: priority\n",
        ["config.yaml:3: mode: duplicate key (first set on line 1); write it once"],
    ),
    (
        "file is a list",
        "- interval: 60\n- mode: nice\n",
        ["config.yaml:1: expected a mapping of options (key: value), got a list"],
    ),
    (
        "file is a word",
        "nice\n",
        ["config.yaml:1: expected a mapping of options (key: value), got 'nice'"],
    ),
    # --- interval and mode
    (
        "interval word",
        "interval: soon\n",
        ["config.yaml:1: interval: 'soon' is not a duration such as 90, 60s, 5m or 1h"],
    ),
    (
        "interval unit unknown",
        "interval: 5 minutes\n",
        ["config.yaml:1: interval: '5 minutes' is not a duration such as 90, 60s, 5m or 1h"],
    ),
    (
        "interval below a second",
        "interval: 0.5s\n",
        ["config.yaml:1: interval: '0.5s' is shorter than 1 second"],
    ),
    (
        "interval zero",
        "interval: 0\n",
        ["config.yaml:1: interval: 0 is shorter than 1 second"],
    ),
    (
        "interval boolean",
        "interval: true\n",
        ["config.yaml:1: interval: expected a duration such as 90, 60s, 5m or 1h, got true"],
    ),
    # --- slurm_timeout: a duration as interval, 1 second to 10 minutes
    (
        "slurm_timeout zero",
        "slurm_timeout: 0\n",
        ["config.yaml:1: slurm_timeout: 0 is shorter than 1 second"],
    ),
    (
        "slurm_timeout negative",
        "mode: nice\nslurm_timeout: -30\n",
        ["config.yaml:2: slurm_timeout: -30 is shorter than 1 second"],
    ),
    (
        "slurm_timeout negative with a unit",
        "slurm_timeout: -30s\n",
        ["config.yaml:1: slurm_timeout: '-30s' is not a duration such as 90, 60s, 5m or 1h"],
    ),
    (
        "slurm_timeout below a second",
        "slurm_timeout: 0.5s\n",
        ["config.yaml:1: slurm_timeout: '0.5s' is shorter than 1 second"],
    ),
    (
        "slurm_timeout too long",
        "slurm_timeout: 601\n",
        ["config.yaml:1: slurm_timeout: 601 is longer than 10 minutes"],
    ),
    (
        "slurm_timeout an hour",
        "slurm_timeout: 1h\n",
        ["config.yaml:1: slurm_timeout: '1h' is longer than 10 minutes"],
    ),
    (
        "slurm_timeout word",
        "slurm_timeout: long\n",
        ["config.yaml:1: slurm_timeout: 'long' is not a duration such as 90, 60s, 5m or 1h"],
    ),
    (
        "slurm_timeout two units",
        "slurm_timeout: 2m30s\n",
        ["config.yaml:1: slurm_timeout: '2m30s' is not a duration such as 90, 60s, 5m or 1h"],
    ),
    (
        "slurm_timeout boolean",
        "slurm_timeout: false\n",
        ["config.yaml:1: slurm_timeout: expected a duration such as 90, 60s, 5m or 1h, got false"],
    ),
    (
        "slurm_timeout infinite",
        "slurm_timeout: .inf\n",
        ["config.yaml:1: slurm_timeout: .inf is not a finite number"],
    ),
    (
        "mode unknown",
        "mode: fast\n",
        ["config.yaml:1: mode: 'fast' is not one of nice, site_factor, priority"],
    ),
    (
        "mode close",
        "mode: sitefactor\n",
        ["config.yaml:1: mode: 'sitefactor' is not one of nice, site_factor, priority; did you mean 'site_factor'?"],
    ),
    (
        "backend unknown",
        "backend: slurmrestd\n",
        ["config.yaml:1: backend: 'slurmrestd' is not one of auto, cli, pyslurm"],
    ),
    (
        "log level lower case",
        "log_level: info\n",
        ["config.yaml:1: log_level: 'info' is not one of DEBUG, INFO, WARNING, ERROR; did you mean 'INFO'?"],
    ),
    # --- resources
    (
        "resources not a list",
        "resources: cpu\n",
        ["config.yaml:1: resources: expected a list of Slurm TRES names, got 'cpu'"],
    ),
    (
        "resources empty",
        "resources: []\n",
        ["config.yaml:1: resources: expected a list of Slurm TRES names, got an empty list"],
    ),
    (
        "resources repeated",
        "resources: [cpu, mem, cpu]\n",
        ["config.yaml:1: resources[2]: 'cpu' is already listed as resources[0]"],
    ),
    (
        "resources with Slurm's gres: spelling",
        "resources:\n  - cpu\n  - gres:gpu\n",
        [f"config.yaml:3: resources[1]: 'gres:gpu' {TRES_EXPECTED}; did you mean 'gres/gpu'?"],
    ),
    (
        "resources with bare words",
        "resources: [cpus, memory, gpu, GRES/gpu:A100, license:matlab, widgets]\n",
        [
            f"config.yaml:1: resources[0]: 'cpus' {TRES_EXPECTED}; did you mean 'cpu'?",
            f"config.yaml:1: resources[1]: 'memory' {TRES_EXPECTED}; did you mean 'mem'?",
            f"config.yaml:1: resources[2]: 'gpu' {TRES_EXPECTED}; did you mean 'gres/gpu'?",
            f"config.yaml:1: resources[3]: 'GRES/gpu:A100' {TRES_EXPECTED}; did you mean 'gres/gpu:a100'?",
            f"config.yaml:1: resources[4]: 'license:matlab' {TRES_EXPECTED}; did you mean 'license/matlab'?",
            f"config.yaml:1: resources[5]: 'widgets' {TRES_EXPECTED}",
        ],
    ),
    # --- partitions and pools
    (
        "partitions empty",
        "partitions: []\n",
        ["config.yaml:1: partitions: expected a list of partition names, or null for all, got an empty list"],
    ),
    (
        "partitions a word",
        "partitions: gpu\n",
        ["config.yaml:1: partitions: expected a list of partition names, or null for all, got 'gpu'"],
    ),
    (
        "pools overlap",
        "pools:\n  - {name: a, partitions: [gpu, cpu]}\n  - {name: b, partitions: [gpu]}\n",
        [
            "config.yaml:3: pools[1].partitions[0]: partition 'gpu' is already in pool 'a' (pools[0]); "
            "a partition belongs to one pool"
        ],
    ),
    (
        "pool partition not managed",
        "partitions: [cpu]\npools:\n  - name: a\n    partitions: [cpu, debug]\n",
        [
            "config.yaml:4: pools[0].partitions[1]: partition 'debug' is not in partitions; "
            "add it there or remove it here"
        ],
    ),
    (
        "pool names repeated",
        "pools:\n  - {name: a, partitions: [gpu]}\n  - {name: a, partitions: [cpu]}\n",
        ["config.yaml:3: pools[1].name: 'a' is already the name of pools[0]; pool names must differ"],
    ),
    (
        "pool without a name",
        "pools:\n  - partitions: [gpu]\n",
        ["config.yaml:2: pools[0]: missing required key 'name'"],
    ),
    (
        "pool as a word",
        "pools: [gpu]\n",
        ["config.yaml:1: pools[0]: expected a pool such as {name: gpu, partitions: [gpu, gpu-long]}, got 'gpu'"],
    ),
    (
        "pool key unknown",
        "pools:\n  - name: a\n    partitions: [gpu]\n    weight: 2\n",
        ["config.yaml:4: pools[0].weight: unknown key; expected one of name, partitions"],
    ),
    # --- values written to Slurm
    (
        "scale zero",
        "scale: 0\n",
        ["config.yaml:1: scale: 0 is not >= 1"],
    ),
    (
        "scale fractional",
        "scale: 1.5\n",
        ["config.yaml:1: scale: expected a whole number, got 1.5"],
    ),
    (
        "scale beyond the nice range",
        "scale: 5000000000\n",
        ["config.yaml:1: scale: 5000000000 is not <= 2147483644"],
    ),
    (
        "offset with no room",
        "mode: site_factor\noffset: 1\n",
        ["config.yaml:2: offset: 1 leaves no room for values: the range is 0 to offset - 1; use 2 or more"],
    ),
    (
        "offset negative",
        "offset: -5\n",
        ["config.yaml:1: offset: -5 leaves no room for values: the range is 0 to offset - 1; use 2 or more"],
    ),
    (
        "offset beyond Slurm's nice limit",
        "offset: 2147483646\n",
        ["config.yaml:1: offset: 2147483646 is not <= 2147483645"],
    ),
    (
        "max writes zero",
        "max_writes_per_cycle: 0\n",
        ["config.yaml:1: max_writes_per_cycle: 0 is not >= 1"],
    ),
    (
        "tie half-life zero",
        "tie_half_life_cycles: 0\n",
        ["config.yaml:1: tie_half_life_cycles: 0 is not > 0"],
    ),
    (
        "tie half-life not a number",
        "tie_half_life_cycles: .nan\n",
        ["config.yaml:1: tie_half_life_cycles: .nan is not a finite number"],
    ),
    # --- the service
    (
        "dry_run quoted",
        'dry_run: "no"\n',
        ["config.yaml:1: dry_run: expected true or false, got 'no'"],
    ),
    (
        "state_dir empty",
        'state_dir: ""\n',
        ["config.yaml:1: state_dir: expected a non-empty value, got ''"],
    ),
    (
        "state_dir a number",
        "state_dir: 5\n",
        ["config.yaml:1: state_dir: expected text, got 5"],
    ),
    (
        "metrics address without port",
        "metrics_address: localhost\n",
        ["config.yaml:1: metrics_address: 'localhost' is not host:port such as 127.0.0.1:9102, or null"],
    ),
    (
        "metrics port out of range",
        "metrics_address: 0.0.0.0:99999\n",
        ["config.yaml:1: metrics_address: port 99999 is not between 1 and 65535"],
    ),
    # --- YAML itself
    (
        "unclosed flow list",
        "mode: nice\nresources: [cpu, mem\nscale: 10\n",
        [
            "config.yaml:3: YAML syntax error: expected ',' or ']', but got ':' (column 6), "
            "while parsing a flow sequence on line 2"
        ],
    ),
    (
        "mapping value inside a value",
        "mode: nice\ninterval: a: b\n",
        ["config.yaml:2: YAML syntax error: mapping values are not allowed here (column 12)"],
    ),
    (
        "tab indentation",
        "accounts:\n\tphysics: {weight: 2}\n",
        ["config.yaml:2: YAML syntax error: found character '\\t' that cannot start any token (column 1)"],
    ),
    (
        "two documents",
        "mode: nice\n---\nmode: priority\n",
        [
            "config.yaml:2: YAML syntax error: expected a single document in the stream, "
            "but found another document (column 1)"
        ],
    ),
    (
        "undefined alias",
        "accounts:\n  physics: *heavy\n",
        ["config.yaml:2: YAML syntax error: found undefined alias 'heavy' (column 12)"],
    ),
    (
        "list as a key",
        "accounts:\n  ? [a, b]\n  : {weight: 2}\n",
        ["config.yaml:2: YAML syntax error: found a key that is a list or mapping; keys are names (column 5)"],
    ),
    (
        "alias inside itself",
        "accounts: &loop\n  physics: *loop\n",
        ["config.yaml:1: YAML: an alias refers to a node that contains it; values cannot contain themselves"],
    ),
    (
        "control character",
        "mode: nice\nscale: 1\x07\n",
        ["config.yaml:2: YAML syntax error: character #x0007 is not allowed"],
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), [case[1:] for case in BAD_CONFIGS], ids=[case[0] for case in BAD_CONFIGS]
)
def test_bad_config_is_refused_with_exact_messages(text: str, expected: list[str]) -> None:
    assert problems_of(text) == expected


def _schema_examples() -> list[dict[str, Any]]:
    """A config per example value of every option in the schema (good values, so the quick check must pass them)."""
    return [{key: value} for key, option in load_schema()["properties"].items() for value in option.get("examples", [])]


def test_the_quick_schema_check_passes_only_what_jsonschema_passes() -> None:
    # The quick walk (validate._surely_conforms) spares the import of jsonschema for a good file:
    # it must never pass what jsonschema refuses, and must pass the good files it is for.
    validator = jsonschema.validators.validator_for(load_schema())(load_schema())
    bad: list[Any] = []
    for case in BAD_CONFIGS:
        try:
            bad.append(yaml.safe_load(case[1]))
        except yaml.YAMLError:
            continue
    mutations: list[Any] = [
        {"scale": 2.0},
        {"scale": True},
        {"mode": 1},
        {"resources": [True, 1]},
        {"resources": ["cpu", "cpu"]},
        {"accounts": {"physics": {"weight": 0}}},
        {"accounts": {"physics": {"users": {"alice": -1}}}},
        {"pools": [{"name": "g"}]},
        {"horizon": "auto"},
        {"horizon": 0},
        {"history": {"half_life": "1x"}},
        {"interval": 0},
        {"partitions": []},
        {"unknown": 1},
    ]
    good = [yaml.safe_load(EXAMPLE.read_text()), yaml.safe_load(_uncommented_examples(EXAMPLE.read_text()))]
    for data in [*bad, *mutations, *good, *_schema_examples()]:
        if _surely_conforms(data):
            assert not list(validator.iter_errors(data)), data
    assert all(_surely_conforms(data) for data in good)
    passed = [data for data in _schema_examples() if _surely_conforms(data)]
    assert len(passed) >= len(_schema_examples()) * 3 // 4


def test_the_bad_table_is_large_and_names_distinct() -> None:
    assert len(BAD_CONFIGS) >= 20
    assert len({case[0] for case in BAD_CONFIGS}) == len(BAD_CONFIGS)


def test_config_error_is_an_input_error_with_category_config() -> None:
    with pytest.raises(InputError) as caught:
        parse_config_text("mode: fast\n", "config.yaml")
    assert isinstance(caught.value, ConfigError)
    assert caught.value.category == "config"


def test_all_errors_are_collected_at_once_in_file_order() -> None:
    text = "accounts:\n  physics: {weight: -1}\nmode: fast\nscale: 10\ninterval: soon\n"
    assert problems_of(text) == [
        "config.yaml:2: accounts.physics.weight: -1 is not > 0",
        "config.yaml:3: mode: 'fast' is not one of nice, site_factor, priority",
        "config.yaml:5: interval: 'soon' is not a duration such as 90, 60s, 5m or 1h",
    ]


def test_many_kinds_of_error_in_one_file() -> None:
    text = (
        "intervall: 60s\n"  # 1 unknown key
        "accounts:\n"
        "  physics: {weight: 1}\n"  # 3
        "  physics: {weight: 0}\n"  # 4 duplicate, and 0
        "partitions: [cpu]\n"  # 5 in no pool
        "pools:\n"
        "  - {name: gpu, partitions: [gpu]}\n"  # 7 not managed
        "scale: 3000000\n"  # ignored, no longer checked against the offset
        "offset: 1\n"  # 9 no room
    )
    assert problems_of(text) == [
        "config.yaml:1: intervall: unknown key; did you mean 'interval'?",
        "config.yaml:4: accounts.physics: duplicate key (first set on line 3); write it once",
        "config.yaml:4: accounts.physics.weight: 0 is not > 0",
        "config.yaml:5: partitions[0]: partition 'cpu' is in no pool, so it would not be managed; "
        "add it to a pool or remove it here",
        "config.yaml:7: pools[0].partitions[0]: partition 'gpu' is not in partitions; add it there or remove it here",
        "config.yaml:9: offset: 1 leaves no room for values: the range is 0 to offset - 1; use 2 or more",
    ]


def test_the_source_name_is_the_file_in_messages(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text("mode: nice\naccounts:\n  physics: {weight: -1}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.problems == [f"{path}:3: accounts.physics.weight: -1 is not > 0"]


# --- good configs -----------------------------------------------------------


def test_example_file_is_valid_and_shows_exactly_the_defaults() -> None:
    config = load_config(EXAMPLE)
    assert config == Config(source_path=str(EXAMPLE))
    assert config.source_path == str(EXAMPLE)


def _current_options() -> dict[str, Any]:
    """The schema's top-level options but the old names still read (`x-renamed-to`) and the keys only kept so
    that old files load (`x-ignored`), which the example must not carry: check-config warns of them."""
    return {
        name: option
        for name, option in load_schema()["properties"].items()
        if "x-renamed-to" not in option and "x-ignored" not in option
    }


def test_example_file_shows_every_option() -> None:
    shown = yaml.safe_load(EXAMPLE.read_text())
    options = _current_options()
    # In the order of the reference page.
    assert list(shown) == sorted(options, key=lambda key: options[key]["x-order"])


def _uncommented_examples(text: str) -> str:
    """The example file with its commented-out alternatives (`#key:` blocks) switched on."""
    lines = text.splitlines()
    out: list[str] = []
    index = 0
    while index < len(lines):
        match = re.match(r"#([a-z_]+):", lines[index])
        if match:
            # Drop the active default line of the same key, use the example.
            out = [line for line in out if not line.startswith(f"{match.group(1)}:")]
            out.append(lines[index][1:])
            index += 1
            while index < len(lines) and lines[index].startswith("#  "):
                out.append(lines[index][1:])
                index += 1
            continue
        out.append(lines[index])
        index += 1
    return "\n".join(out) + "\n"


def test_example_files_commented_alternatives_are_valid() -> None:
    text = _uncommented_examples(EXAMPLE.read_text())
    config = parse_config_text(text, "example")
    assert config.weights == {"physics": Fraction(2), "chemistry": Fraction(1, 2), "physics/theory": Fraction(2)}
    assert config.user_weights == {"physics/theory": {"alice": Fraction(2)}}
    assert config.exclude_accounts == {"admin"}
    assert config.partitions == ("gpu", "gpu-long", "cpu")
    assert config.pools == (PoolConfig("gpu", ("gpu", "gpu-long")), PoolConfig("cpu", ("cpu",)))
    assert config.metrics_address == "127.0.0.1:9102"


@pytest.mark.parametrize("text", ["", "\n\n", "# nothing set yet\n", "~\n", "---\n"])
def test_empty_file_means_defaults(text: str) -> None:
    assert parse_config_text(text, "config.yaml") == Config(source_path="config.yaml")


def test_empty_file_on_disk_means_defaults(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("")
    assert load_config(path) == Config(source_path=str(path))


@pytest.mark.parametrize(
    ("written", "seconds"),
    [
        ("90", 90.0),
        ('"90"', 90.0),
        ("2.5", 2.5),
        ("1", 1.0),
        ("60s", 60.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1.5h", 5400.0),
        ("1d", 86400.0),
        ('" 10 s "', 10.0),
    ],
)
def test_durations(written: str, seconds: float) -> None:
    assert parse_config_text(f"interval: {written}\n", "c").interval == seconds


def test_slurm_timeout_defaults_to_two_minutes() -> None:
    assert Config().slurm_timeout == DEFAULT_SLURM_TIMEOUT == 120.0
    assert parse_config_text("mode: nice\n", "c").slurm_timeout == 120.0
    # The service takes a cycle of HUNG_CYCLE_SECONDS as hung: a command's timeout stays below it.
    assert MIN_SLURM_TIMEOUT <= DEFAULT_SLURM_TIMEOUT <= MAX_SLURM_TIMEOUT < HUNG_CYCLE_SECONDS


@pytest.mark.parametrize(
    ("written", "seconds"),
    [
        ("1", 1.0),
        ("1s", 1.0),
        ("45", 45.0),
        ("90s", 90.0),
        ('"2.5m"', 150.0),
        ("5m", 300.0),
        ("600", 600.0),
        ("10m", 600.0),
    ],
)
def test_slurm_timeout_is_a_duration_of_1_second_to_10_minutes(written: str, seconds: float) -> None:
    config = parse_config_text(f"mode: nice\nslurm_timeout: {written}\n", "c.yaml")
    assert config.slurm_timeout == seconds
    assert config.lines["slurm_timeout"] == 2
    assert config_warnings(config) == []


@pytest.mark.parametrize("bad", ["soon", "", "5 minutes", "-1s", "1h30m", True])
def test_parse_duration_refuses(bad: Any) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("written", "exact"),
    [
        ("0.3", Fraction(3, 10)),
        ("0.1", Fraction(1, 10)),
        ("2", Fraction(2)),
        ("1e-3", Fraction(1, 1000)),
        ("2.5e+1", Fraction(25)),
        ("1_000.5", Fraction(2001, 2)),
        ("0.30000000000000004", Fraction(30000000000000004, 10**17)),
        ("0x10", Fraction(16)),
    ],
)
def test_weights_are_the_exact_decimal_written(written: str, exact: Fraction) -> None:
    text = f"accounts:\n  physics: {{weight: {written}}}\ndefault_weight: {written}\n"
    config = parse_config_text(text, "c")
    assert config.weights["physics"] == exact
    assert config.default_weight == exact
    assert config.weight("physics") == exact
    assert config.weight("someone-else") == exact


def test_weights_not_floats() -> None:
    config = parse_config_text("accounts:\n  a: {weight: 0.1}\n  b: {weight: 0.2}\n", "c")
    # 0.1 + 0.2 == 0.3 holds for the exact weights, not for floats.
    assert config.weights["a"] + config.weights["b"] == Fraction(3, 10)
    assert config.weight("c") == Fraction(1)


def test_account_names_are_text_whatever_they_look_like() -> None:
    text = "accounts:\n  no: {weight: 2}\n  123: {weight: 3}\n  on: {exclude: true}\n"
    config = parse_config_text(text, "c")
    assert config.weights == {"no": Fraction(2), "123": Fraction(3)}
    assert config.exclude_accounts == {"on"}


def test_excluded_accounts_are_the_union_of_both_ways() -> None:
    text = "accounts:\n  admin: {exclude: true}\n  ops: {exclude: false, weight: 2}\nexclude_accounts: [root]\n"
    config = parse_config_text(text, "c")
    assert config.exclude_accounts == frozenset({"admin", "root"})
    assert config.weights == {"ops": Fraction(2)}


def test_yaml_anchors_and_merge_keys_work() -> None:
    config = parse_config_text(
        "accounts:\n  physics: &heavy {weight: 0.3}\n  chemistry:\n    <<: *heavy\n    exclude: true\n", "c"
    )
    assert config.weights == {"physics": Fraction(3, 10), "chemistry": Fraction(3, 10)}
    assert config.exclude_accounts == {"chemistry"}


def test_lines_follow_merge_keys_and_the_own_key_wins() -> None:
    text = """\
accounts:
  physics: &heavy
    weight: 0.3
  chemistry:
    weight: 2
    <<: *heavy
  <<: {biology: {exclude: true}}
"""
    config = parse_config_text(text, "c")
    assert config.weights == {"physics": Fraction(3, 10), "chemistry": Fraction(2)}
    assert config.lines["accounts.physics.weight"] == 3
    assert config.lines["accounts.chemistry.weight"] == 5
    assert config.lines["accounts.biology"] == 7
    assert config.lines["accounts.biology.exclude"] == 7


def test_a_repeated_key_is_reported_where_written_not_where_merged() -> None:
    text = "accounts:\n  physics: &heavy\n    weight: 1\n    weight: 2\n  chemistry:\n    <<: *heavy\n"
    assert problems_of(text) == [
        "config.yaml:4: accounts.physics.weight: duplicate key (first set on line 3); write it once"
    ]


def test_the_node_tree_is_walked_once_however_many_aliases() -> None:
    # 10 levels of 10 aliases each: 10**10 paths if every alias were followed.
    text = "a0: &a0 [1]\n" + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 11))
    document = read_yaml(text, "c")
    assert document is not None and document.duplicates == []
    # An alias item is placed where the node it names is written.
    assert (document.lines["a10"], document.lines["a10[9]"], document.lines["a0[0]"]) == (11, 10, 1)
    assert "a1[0][0]" not in document.lines  # inside a node already placed at a0


def test_every_option_converted() -> None:
    text = """\
interval: 5m
mode: site_factor
accounts:
  physics: {weight: 2}
default_weight: 0.5
exclude_accounts: [root]
resources: [cpu, mem, gres/gpu:a100, license/matlab, node, billing]
partitions: [gpu, gpu-long, cpu]
pools:
  - {name: gpu, partitions: [gpu, gpu-long]}
  - {name: cpu, partitions: [cpu]}
backend: cli
scale: 1e5
offset: 200000
state_dir: /srv/drf/state
report_dir: /srv/drf/reports
dry_run: true
max_writes_per_cycle: 10
slurm_timeout: 3m
tie_half_life_cycles: 3.5
include_unavailable_nodes: true
metrics_address: "[::1]:9102"
log_level: DEBUG
"""
    config = parse_config_text(text, "site.yaml")
    assert config == Config(
        interval=300.0,
        mode="site_factor",
        weights={"physics": Fraction(2)},
        default_weight=Fraction(1, 2),
        resources=("cpu", "mem", "gres/gpu:a100", "license/matlab", "node", "billing"),
        partitions=("gpu", "gpu-long", "cpu"),
        pools=(PoolConfig("gpu", ("gpu", "gpu-long")), PoolConfig("cpu", ("cpu",))),
        exclude_accounts=frozenset({"root"}),
        backend="cli",
        offset=200000,
        state_dir="/srv/drf/state",
        report_dir="/srv/drf/reports",
        dry_run=True,
        max_writes_per_cycle=10,
        slurm_timeout=180.0,
        tie_half_life_cycles=3.5,
        include_unavailable_nodes=True,
        metrics_address="[::1]:9102",
        log_level="DEBUG",
        source_path="site.yaml",
    )
    assert not hasattr(config, "scale")  # the key is ignored
    assert config.lines["pools[1].name"] == 11
    assert config.lines["accounts.physics.weight"] == 4
    with pytest.raises(TypeError):
        config.weights["x"] = Fraction(1)  # type: ignore[index]


@pytest.mark.parametrize("mode", ["nice", "site_factor", "priority"])
def test_any_scale_is_ignored_and_a_small_offset_accepted(mode: str) -> None:
    config = parse_config_text(f"mode: {mode}\nscale: {NICE_LIMIT - 1}\n", "c")
    assert config.offset == NICE_LIMIT
    config = parse_config_text(f"mode: {mode}\nscale: 1000000\noffset: 2\n", "c")
    assert config.offset == 2
    assert config_warnings(config) == [
        "c:2: scale is ignored (values are order labels, no longer round(scale x level)); remove it"
    ]


def test_check_config_says_scale_is_ignored_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("interval: 60s\nscale: 1000\n")
    assert main(["check-config", str(path)]) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: {path}:2: scale is ignored (values are order labels, no longer round(scale x level)); remove it"
    ]


def test_partition_in_no_pool_is_refused() -> None:
    assert problems_of("partitions: [gpu, cpu]\npools:\n  - {name: g, partitions: [gpu]}\n") == [
        "config.yaml:1: partitions[1]: partition 'cpu' is in no pool, so it would not be managed; "
        "add it to a pool or remove it here"
    ]


def test_default_config_is_the_dataclass_default() -> None:
    assert default_config() == Config()
    assert default_config().source_path is None


# --- the file on disk ---------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: cannot read the config file: No such file or directory"


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the config file: Is a directory"):
        load_config(tmp_path)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"mode: nice\n# caf\xe9\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}:2: not UTF-8 text (byte 0xe9); save the file as UTF-8"


def test_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbfmode: priority\n")
    assert load_config(path).mode == "priority"


# --- search path ----------------------------------------------------------------


def _touch(path: Path) -> str:
    path.write_text("mode: nice\n")
    return str(path)


def test_search_explicit_first(tmp_path: Path) -> None:
    explicit = _touch(tmp_path / "explicit.yaml")
    from_env = _touch(tmp_path / "env.yaml")
    default = _touch(tmp_path / "default.yaml")
    found = find_config_path(explicit, {CONFIG_ENV: from_env}, default_path=default)
    assert found == explicit


def test_search_environment_second(tmp_path: Path) -> None:
    from_env = _touch(tmp_path / "env.yaml")
    default = _touch(tmp_path / "default.yaml")
    assert find_config_path(None, {CONFIG_ENV: from_env}, default_path=default) == from_env


def test_search_default_last(tmp_path: Path) -> None:
    default = _touch(tmp_path / "default.yaml")
    assert find_config_path(None, {}, default_path=default) == default
    assert find_config_path(None, {CONFIG_ENV: ""}, default_path=default) == default


def test_search_missing_default_means_defaults(tmp_path: Path) -> None:
    assert find_config_path(None, {}, default_path=str(tmp_path / "absent.yaml")) is None
    assert resolve_config(None, {}, default_path=str(tmp_path / "absent.yaml")) == Config()


def test_search_missing_explicit_is_an_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "typo.yaml")
    default = _touch(tmp_path / "default.yaml")
    with pytest.raises(ConfigError) as caught:
        find_config_path(missing, {}, default_path=default)
    assert str(caught.value) == f"{missing}: no such config file (given with --config)"


def test_search_missing_environment_file_is_an_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "typo.yaml")
    default = _touch(tmp_path / "default.yaml")
    with pytest.raises(ConfigError) as caught:
        find_config_path(None, {CONFIG_ENV: missing}, default_path=default)
    assert str(caught.value) == f"{missing}: no such config file (named by $SLURM_DRF_CONFIG)"


def test_resolve_config_loads_what_it_finds(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text("mode: priority\n")
    config = resolve_config(None, {CONFIG_ENV: str(path)}, default_path=str(tmp_path / "absent.yaml"))
    assert config.mode == "priority"
    assert config.source_path == str(path)


# --- unknown accounts only warn ------------------------------------------------------


def test_unknown_accounts_warn() -> None:
    config = parse_config_text(
        "accounts:\n  physics: {weight: 2}\n  Chemistry: {weight: 3}\n  physic: {weight: 1}\n"
        "exclude_accounts: [root, zzz]\n",
        "config.yaml",
    )
    assert warn_unknown_accounts(config, ["physics", "chemistry", "root"]) == [
        "config.yaml:3: accounts.Chemistry: Slurm has no account 'Chemistry'; "
        "the setting has no effect until it exists (did you mean 'chemistry'?)",
        "config.yaml:4: accounts.physic: Slurm has no account 'physic'; "
        "the setting has no effect until it exists (did you mean 'physics'?)",
        "config.yaml:5: exclude_accounts: Slurm has no account 'zzz'; the setting has no effect until it exists",
    ]


def test_tree_keys_convert_exactly() -> None:
    config = parse_config_text(
        "accounts:\n  physics/theory: {weight: 2, users: {alice: 2, bob: 0.3}}\n  lab: {users: {carol: 1}}\n"
        "weights: slurm\nfairness_within_account: slurm\n",
        "c",
    )
    assert config.weights == {"physics/theory": Fraction(2)}
    assert config.user_weights == {
        "physics/theory": {"alice": Fraction(2), "bob": Fraction(3, 10)},
        "lab": {"carol": Fraction(1)},
    }
    assert (config.weight_source, config.fairness_within_account) == ("slurm", "slurm")
    defaults = default_config()
    assert (defaults.weight_source, defaults.fairness_within_account, defaults.user_weights) == ("config", "user", {})


def test_a_path_the_tree_does_not_have_warns() -> None:
    config = parse_config_text("accounts:\n  physics/theory: {weight: 2}\n  lab/theory: {weight: 3}\n", "c.yaml")
    tree = {"physics/theory": "theory", "theory": "theory"}
    assert warn_unknown_accounts(config, ["theory"], tree.get) == [
        "c.yaml:3: accounts.lab/theory: Slurm's account tree has no path 'lab/theory'; "
        "the setting has no effect until it exists (did you mean 'theory'?)"
    ]
    # Without a tree, a path is unknown too.
    assert len(warn_unknown_accounts(config, ["theory"])) == 2


def test_known_accounts_do_not_warn() -> None:
    config = parse_config_text("accounts:\n  physics: {weight: 2}\n", "c")
    assert warn_unknown_accounts(config, iter(["physics"])) == []
    assert warn_unknown_accounts(default_config(), []) == []


# --- the schema documents itself --------------------------------------------------------


def _options(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every option and nested setting of the schema, as (name, subschema)."""
    found = []
    for name, option in schema["properties"].items():
        found.append((name, option))
        child = option.get("additionalProperties") or option.get("items")
        if isinstance(child, dict):
            found.extend((f"{name}.{key}", sub) for key, sub in child.get("properties", {}).items())
    return found


def test_schema_is_valid_json_schema() -> None:
    schema = load_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["additionalProperties"] is False


def test_every_option_has_description_and_examples() -> None:
    for name, option in _options(dict(load_schema())):
        assert option.get("description", "").strip(), name
        assert option.get("examples"), name


def test_every_option_refuses_unknown_keys() -> None:
    for name, option in _options(dict(load_schema())):
        child = option.get("additionalProperties") or option.get("items")
        if isinstance(child, dict) and child.get("type") == "object":
            assert child.get("additionalProperties") is False, name


def test_every_example_is_valid() -> None:
    schema = load_schema()
    for name, option in schema["properties"].items():
        for example in option["examples"]:
            parse_config_text(yaml.safe_dump({name: example}), f"example of {name}")


def test_schema_defaults_are_the_dataclass_defaults() -> None:
    schema = load_schema()
    defaults = {name: option["default"] for name, option in schema["properties"].items() if name not in renamed_keys()}
    assert set(defaults) | set(renamed_keys()) == set(schema["properties"])
    assert parse_config_text(yaml.safe_dump(defaults), "defaults") == Config(source_path="defaults")


# --- keys by their old names -------------------------------------------------


def test_history_days_is_read_as_retention_days_with_a_warning() -> None:
    config = parse_config_text("interval: 60s\nhistory_days: 30\n", "c.yaml")
    assert config.retention_days == 30
    assert renamed_key_warnings(config) == [
        "c.yaml:2: history_days is the old name of retention_days, read as it; rename it to retention_days"
    ]
    assert config_warnings(config) == renamed_key_warnings(config)


def test_retention_days_has_no_warning() -> None:
    config = parse_config_text("retention_days: 30\n", "c.yaml")
    assert (config.retention_days, config_warnings(config)) == (30, [])
    assert parse_config_text("history_days: null\n", "c.yaml").retention_days is None


def test_tie_half_life_is_read_as_tie_half_life_cycles_with_a_warning() -> None:
    config = parse_config_text("interval: 60s\ntie_half_life: 3.5\n", "c.yaml")
    assert config.tie_half_life_cycles == 3.5
    assert config_warnings(config) == [
        "c.yaml:2: tie_half_life is the old name of tie_half_life_cycles, read as it; rename it to tie_half_life_cycles"
    ]
    assert config_warnings(parse_config_text("tie_half_life_cycles: 3.5\n", "c.yaml")) == []


RENAMED = [("history_days", "retention_days"), ("tie_half_life", "tie_half_life_cycles")]


@pytest.mark.parametrize(("old", "new"), RENAMED)
def test_old_and_new_name_at_once_is_an_error(old: str, new: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_text(f"{new}: 30\n{old}: 40\n", "c.yaml")
    assert caught.value.problems == [f"c.yaml:2: {old}: the old name of {new}, which is set too; remove {old}"]


@pytest.mark.parametrize(("old", "refused"), [("history_days", "0 is not >= 1"), ("tie_half_life", "0 is not > 0")])
def test_an_old_name_is_checked_under_its_own_name(old: str, refused: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_text(f"{old}: 0\n", "c.yaml")
    assert caught.value.problems == [f"c.yaml:1: {old}: {refused}"]


@pytest.mark.parametrize(("old", "new"), RENAMED)
def test_check_config_says_the_old_name_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"interval: 60s\n{old}: 30\n")
    assert main(["check-config", str(path)]) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: {path}:2: {old} is the old name of {new}, read as it; rename it to {new}"]


def test_reference_doc_is_up_to_date() -> None:
    script = ROOT / "scripts" / "render-config-doc"
    loader = importlib.machinery.SourceFileLoader("render_config_doc", str(script))
    spec = importlib.util.spec_from_loader("render_config_doc", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    assert isinstance(module, ModuleType)
    page = module.render(dict(load_schema()))
    assert (ROOT / "docs" / "configuration.md").read_text() == page, "run scripts/render-config-doc"
    for name, _ in _options(dict(load_schema())):
        assert f"`{name.split('.')[0]}" in page
