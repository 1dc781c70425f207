"""Hostile input that would cost unbounded time or memory, or inject into outputs.

Each test feeds the exact input the issue "Hostile and inconsistent input"
names and checks for a clear, bounded refusal (or neutral output).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from slurm_drf.cli.main import main
from slurm_drf.config.load import parse_config_text
from slurm_drf.config.yaml_tree import check_expanded_size
from slurm_drf.errors import ConfigError, SnapshotError
from slurm_drf.model.snapshot_file import SnapshotFileSource


def alias_bomb(levels: int = 9) -> str:
    """`levels` anchors, each a list of nine aliases of the one before: 9**levels values."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    names = "abcdefghijklmnop"
    for index in range(1, levels):
        aliases = ",".join([f"*{names[index - 1]}"] * 9)
        lines.append(f"{names[index]}: &{names[index]} [{aliases}]")
    return "\n".join(lines) + "\n"


def merge_bomb(levels: int = 9) -> str:
    """The same through `<<` merge keys, which PyYAML flattens before constructing."""
    lines = ["a: &a {x: 1, y: 2}"]
    names = "abcdefghijklmnop"
    for index in range(1, levels):
        aliases = ",".join([f"*{names[index - 1]}"] * 9)
        lines.append(f"{names[index]}: &{names[index]} {{<<: [{aliases}]}}")
    return "\n".join(lines) + "\n"


def compose(text: str) -> yaml.Node:
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    assert node is not None
    return node


@pytest.mark.parametrize("text", [alias_bomb(), merge_bomb()], ids=["alias-bomb", "merge-bomb"])
def test_yaml_alias_bomb_is_refused_quickly(text: str) -> None:
    assert len(text.encode()) < 400
    began = time.perf_counter()
    with pytest.raises(ConfigError) as caught:
        parse_config_text(text, "bomb.yaml")
    assert time.perf_counter() - began < 2.0
    assert str(caught.value) == (
        "bomb.yaml:6: YAML: this value expands to more than 100000 values through aliases; "
        "write the config without nested aliases"
    )


def test_yaml_alias_bomb_check_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())
    began = time.perf_counter()
    assert main(["check-config", str(path)]) == 2
    assert time.perf_counter() - began < 2.0
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"slurm-drf: config: {path}:6: YAML: this value expands to more than 100000 values")


def test_yaml_small_aliases_still_load() -> None:
    # Anchors used as intended (a few shared values) stay well inside the budget.
    text = "accounts:\n  physics: &w {weight: 2}\n  chemistry: *w\n  biology:\n    <<: *w\n"
    config = parse_config_text(text, "ok.yaml")
    assert config.weights == {"physics": 2, "chemistry": 2, "biology": 2}


def test_yaml_long_list_without_aliases_is_not_an_alias_bomb() -> None:
    # Over the budget but written out: aliases added nothing, so no refusal.
    text = "exclude_accounts:\n" + "".join(f"  - a{index}\n" for index in range(300))
    check_expanded_size(compose(text), "long.yaml", budget=100)
    with pytest.raises(ConfigError, match=r"^long\.yaml:3: YAML: this value expands to more than 100 values"):
        check_expanded_size(compose(alias_bomb(3)), "long.yaml", budget=100)


def test_snapshot_dev_zero_is_refused_with_bounded_memory(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--snapshot", "/dev/zero", "--config", "/dev/null", "--max-snapshot-mb", "4"])
    assert code == 2
    assert capsys.readouterr().err == (
        "slurm-drf: snapshot: /dev/zero: larger than the 4 MiB a snapshot may be; "
        "if it really is one, raise the limit with --max-snapshot-mb\n"
    )


@pytest.mark.parametrize("verb", [["report"], ["explain", "1"]])
def test_snapshot_limit_applies_to_report_and_explain(
    verb: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b" " * (1024 * 1024 + 1))
    code = main([*verb, "--snapshot", str(path), "--config", "/dev/null", "--max-snapshot-mb", "1"])
    assert code == 2
    assert f"{path}: larger than the 1 MiB a snapshot may be" in capsys.readouterr().err


def test_snapshot_limit_default_allows_the_benchmark_size() -> None:
    source = SnapshotFileSource("x.json")
    assert source.max_bytes >= 10 * 40 * 1024 * 1024


def test_snapshot_at_the_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "exact.json"
    path.write_bytes(b"[]" + b" " * 98)
    with pytest.raises(SnapshotError) as caught:
        SnapshotFileSource(path, max_bytes=100).fetch_snapshot()
    # Read whole (exactly the limit), then refused for what it says, not its size.
    assert "larger than" not in str(caught.value)
