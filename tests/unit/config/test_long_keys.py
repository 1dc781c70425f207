"""A key longer than YAML reads: one line naming the file, the line and that the key is too long.

PyYAML reads a key written plainly or in quotes only up to 1024
characters; past that it reported "mapping values are not allowed here",
which says nothing of the key. config.load names it instead, and
config.checks holds a key written as `? KEY` to the same bound
(MAX_KEY_CHARACTERS), so every key has one bound however it is written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_drf.cli.main import main
from slurm_drf.config.checks import MAX_KEY_CHARACTERS
from slurm_drf.config.load import load_config, parse_config_text, written_key
from slurm_drf.errors import ConfigError

LIMIT = "where a key may have at most 1,024 (YAML's limit for a key written plainly or in quotes); shorten it"
KEY = "a" * 1100


@pytest.mark.parametrize(
    ("text", "line", "column", "length"),
    [
        (f"accounts:\n  {KEY}: {{weight: 2}}\n", 2, 3, 1100),  # the issue's: a 1,100-character account
        (f"{KEY}: 1\n", 1, 1, 1100),
        (f'interval: 60s\naccounts:\n  "{KEY}": {{weight: 2}}\n', 3, 3, 1102),  # quotes count
        (f"accounts:\n  '{KEY}': {{weight: 2}}\n", 2, 3, 1102),
        (f"accounts: {{b: {{weight: 1}}, {KEY}: {{weight: 2}}}}\n", 1, 28, 1100),  # inside {...}
        (f"pools:\n  - {KEY}: x\n", 2, 5, 1100),  # a list item's key
        (f"accounts:\n  {'c' * 1025}: {{weight: 2}}\n", 2, 3, 1025),  # one past the bound
    ],
)
def test_a_key_too_long_for_yaml_is_named_with_its_file_and_line(
    text: str, line: int, column: int, length: int
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_text(text, "config.yaml")
    assert str(caught.value) == (
        f"config.yaml:{line}: the key at column {column} is too long: {length:,} characters, {LIMIT}"
    )


def test_a_key_of_1024_characters_is_read() -> None:
    config = parse_config_text(f"accounts:\n  {'c' * 1024}: {{weight: 2}}\n", "config.yaml")
    assert config.weights["c" * 1024] == 2


def test_a_long_key_written_with_a_question_mark_has_the_same_bound() -> None:
    text = f"interval: 60s\naccounts:\n  ? {KEY}\n  : {{weight: 2}}\n  b: {{weight: 1}}\n"
    with pytest.raises(ConfigError) as caught:
        parse_config_text(text, "config.yaml")
    assert str(caught.value) == f"config.yaml:3: accounts: the key is too long: 1,100 characters, {LIMIT}"


def test_a_long_value_with_a_colon_keeps_yamls_own_message() -> None:
    # `key: value: more` is refused by YAML whatever the lengths; no key is too long there.
    with pytest.raises(ConfigError, match=r"^config.yaml:1: YAML syntax error: mapping values are not allowed here"):
        parse_config_text(f"description: {'x' * 1100}: more\n", "config.yaml")


def test_check_config_says_it_in_one_line_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"accounts:\n  {KEY}: {{weight: 2}}\n", encoding="utf-8")
    path.chmod(0o600)
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"slurm-drf: config: {path}:2: the key at column 3 is too long: 1,100 characters, {LIMIT}\n"
    with pytest.raises(ConfigError):
        load_config(path, private=True)


@pytest.mark.parametrize(
    ("before", "key"),
    [
        ("  physics", "physics"),
        ('  - "a b"', '"a b"'),
        ("x: {y: 1, long_key", "long_key"),
        ("[k", "k"),
        ("  ? k  ", "k"),
        ("x: value", None),  # a value, where no key starts
        ("", None),
    ],
)
def test_the_key_written_before_a_colon(before: str, key: str | None) -> None:
    assert written_key(before) == key


@settings(max_examples=60, deadline=None)
@given(
    length=st.integers(min_value=1000, max_value=1100),
    style=st.sampled_from(["plain", "double", "single", "flow"]),
    depth=st.integers(min_value=0, max_value=2),
)
def test_any_key_is_read_or_refused_as_too_long_never_with_yamls_bare_message(
    length: int, style: str, depth: int
) -> None:
    name = "k" * length
    written = {"plain": name, "double": f'"{name}"', "single": f"'{name}'", "flow": name}[style]
    indent = "  " * depth
    nesting = "".join(f"{'  ' * level}n{level}:\n" for level in range(depth))
    if style == "flow":
        entry, key_column = f"{indent}x: {{{written}: 1}}\n", len(indent) + 5
    else:
        entry, key_column = f"{indent}{written}: 1\n", len(indent) + 1
    text = f"description: test\n{nesting}{entry}"
    written_length = len(written)
    try:
        parse_config_text(text, "config.yaml")
    except ConfigError as error:
        message = str(error)
        assert "mapping values are not allowed here" not in message
        assert "expected ',' or '}'" not in message
        if written_length > MAX_KEY_CHARACTERS:
            assert message == (
                f"config.yaml:{2 + depth}: the key at column {key_column} is too long: "
                f"{written_length:,} characters, {LIMIT}"
            )
        else:
            # Read: only the schema objects (an unknown key, a mapping where none belongs).
            assert "is too long" not in message
    else:
        pytest.fail("the test's keys are unknown to the schema: never accepted")
