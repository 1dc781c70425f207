"""A config read by libyaml is read as PyYAML's Python reader reads it (config.yaml_tree, issue 40).

`read_yaml` composes a file with libyaml where PyYAML has it, and reads
it again in Python whenever libyaml found anything wrong: the data, the
repeated keys and the line of every key must be the same either way, and
every message PyYAML's own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_drf.config import yaml_tree
from slurm_drf.config.load import parse_config_text
from slurm_drf.errors import ConfigError
from tests.paths import REPO

pytestmark = pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML without libyaml reads in Python only")

WRITTEN = [
    "interval: 60s\nmode: nice\naccounts:\n  physics: {weight: 2, users: {alice: 2}}\n  chem/lab: {weight: 1e-3}\n",
    # YAML 1.1's booleans and numbers as keys stay text; values keep their types.
    "accounts:\n  no: {weight: 1}\n  on: {weight: 2}\n  123: {weight: 3}\n  0x1f: {weight: .5}\nscale: 0x1f\n",
    # merges, aliases, a merged key overridden, a repeated key (in a value and in a merge source)
    "base: &b {weight: 2, users: {a: 1}}\nother: &o {weight: 3, weight: 4}\n"
    "accounts:\n  x:\n    <<: [*b, *o]\n    weight: 5\n  y: *b\n  y: {weight: 1}\n",
    # quoted and non-ASCII keys, a line separator inside quotes, block and folded scalars, comments
    'accounts:\n  "a b": {weight: 1}\n  \'ü/ÿ\': {weight: 2}  # comment\n  "x\\u2028y": {weight: 3}\n'
    "note: |\n  two\n  lines\nfolded: >\n  one\n  line\n",
    # flow collections over several lines, explicit keys, a document marker, null and empty values
    "---\npools: [\n  {name: a, partitions: [p1,\n    p2]},\n]\n? explicit\n: 1\nempty:\nnull_value: ~\n...\n",
    "\ufeffaccounts:\r\n  crlf: {weight: 2}\r\n",
    # YAML's other line breaks, written raw: inside quotes (folded), in a comment, between keys
    'a: "one\u2028two\u0085three"\n# note\u2029\nb: 1\u2028c: 2\n',
    "",
    "# only a comment\n",
]


def _both(text: str) -> tuple[yaml_tree.Document | None, yaml_tree.Document | None]:
    return (
        yaml_tree._read_yaml(yaml_tree.Loader, text, "c.yaml"),
        yaml_tree._read_yaml(yaml_tree._FastLoader, text, "c.yaml"),
    )


def _same(python: yaml_tree.Document | None, libyaml: yaml_tree.Document | None) -> None:
    if python is None or libyaml is None:
        assert python is libyaml is None
        return
    assert libyaml.data == python.data
    assert [type(v) for v in _leaves(libyaml.data)] == [type(v) for v in _leaves(python.data)]
    assert libyaml.duplicates == python.duplicates
    assert libyaml.lines == python.lines


def _leaves(data: object) -> list[object]:
    if isinstance(data, dict):
        return [leaf for key, value in data.items() for leaf in (key, *_leaves(value))]
    if isinstance(data, list):
        return [leaf for item in data for leaf in _leaves(item)]
    return [data]


@pytest.mark.parametrize("text", WRITTEN)
def test_libyaml_reads_what_python_reads(text: str) -> None:
    _same(*_both(text))


@pytest.mark.parametrize(
    "path", ["slurm_drf/data/config.yaml", "slurm_drf/data/nsdi.yaml", "tests/fixtures/report/config.yaml"]
)
def test_libyaml_reads_the_shipped_configs_as_python_does(path: str) -> None:
    _same(*_both((REPO / path).read_text(encoding="utf-8")))


def test_a_good_file_is_read_by_libyaml_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(self: object, stream: str) -> None:
        raise AssertionError("read in Python")

    monkeypatch.setattr(yaml_tree.Loader, "__init__", refused)
    document = yaml_tree.read_yaml("accounts:\n  physics: {weight: 2}\n  physics: {weight: 3}\n", "c.yaml")
    assert document is not None and document.data == {"accounts": {"physics": {"weight": 3}}}
    assert [problem.render() for problem in document.duplicates] == [
        "accounts.physics: duplicate key (first set on line 2); write it once"
    ]
    config = parse_config_text("interval: 30s\naccounts:\n  physics: {weight: 2}\n", "c.yaml")
    assert config.interval == 30.0 and config.source_path == "c.yaml"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: b: c\n", "c.yaml:1: YAML syntax error: mapping values are not allowed here (column 5)"),
        ("a: [1, 2\n", "c.yaml:2: YAML syntax error: expected ',' or ']', but got '<stream end>' (column 1), "
         "while parsing a flow sequence on line 1"),
        ("a: 1\n\tb: 2\n", None),
        ("a: \x07\n", "c.yaml:1: YAML syntax error: character #x0007 is not allowed"),
        ("a: &x [*x]\n", "c.yaml:1: YAML: an alias refers to a node that contains it; values cannot contain "
         "themselves"),
        ("a: *nowhere\n", None),
        ("a: 1\n---\nb: 2\n", None),
        (f"a: {'9' * 41}\n", "c.yaml:1: a: an integer of 41 characters; no setting takes one"),
    ],
)  # fmt: skip
def test_a_file_libyaml_refuses_is_said_in_pythons_words(text: str, message: str | None) -> None:
    with pytest.raises(ConfigError) as python:
        yaml_tree._read_yaml(yaml_tree.Loader, text, "c.yaml")
    with pytest.raises(ConfigError) as caught:
        yaml_tree.read_yaml(text, "c.yaml")
    assert str(caught.value) == str(python.value)
    if message is not None:
        assert str(caught.value) == message


@pytest.mark.parametrize(
    ("text", "within"),
    [
        ("a: " + "[" * 63 + "]" * 63, True),  # the mapping, then 63 lists: 64 deep
        ("a: " + "[" * 64 + "]" * 64, False),
        ("[" * 63 + "x" + "]" * 63, True),  # 63 lists and the scalar in the innermost
        ("[" * 64 + "x" + "]" * 64, False),
        ("a: &x " + "[" * 62 + "1" + "]" * 62 + "\nb: " + "[" * 62 + "*x" + "]" * 62, True),
        ("a: &x 1\nb: " + "[" * 63 + "*x" + "]" * 63, False),  # an alias is a node too
    ],
)
def test_nesting_is_bounded_as_pythons_composer_bounds_it(text: str, within: bool) -> None:
    assert yaml_tree._nests_within(text, yaml_tree.MAX_DEPTH) is within
    if within:
        _same(*_both(text))
    else:
        with pytest.raises(
            ConfigError, match=r"^c\.yaml:\d+: YAML syntax error: more than 64 nested lists or mappings"
        ):
            yaml_tree._read_yaml(yaml_tree.Loader, text, "c.yaml")


def test_nesting_past_the_bound_never_reaches_libyamls_composer(monkeypatch: pytest.MonkeyPatch) -> None:
    # libyaml's composer recurses in C: 100,000 nested brackets would end the process, not raise.
    composed: list[str] = []
    monkeypatch.setattr(yaml_tree._FastLoader, "get_single_node", lambda self: composed.append("C"))
    text = "a: " + "[" * 100_000 + "]" * 100_000 + "\n"
    with pytest.raises(ConfigError, match=r"^c\.yaml:1: YAML syntax error: more than 64 nested lists or mappings"):
        yaml_tree.read_yaml(text, "c.yaml")
    assert composed == []


def test_a_large_config_of_weights_is_read_the_same(tmp_path: Path) -> None:
    lines = ["accounts:"]
    for k in range(2000):
        users = f", users: {{u{k % 7}: 2}}" if k % 20 == 0 else ""
        key = f"d{k % 10}/a{k}" if k % 4 == 0 else f"a{k}"
        lines.append(f"  {key}: {{weight: {1 + k % 4}{users}}}")
    _same(*_both("\n".join(lines) + "\n"))


# What a hostile or careless file is made of: YAML's punctuation, directives, escapes, names and numbers, blanks and
# every line break; and, apart, what libyaml reads otherwise (tabs, tags, `?`, a byte-order mark, `|#`; found so).
_PIECES = st.sampled_from(
    [*"-:,[]{}#&*|>'\"%@`<= \n", "\r\n", "\u2028", "\u0085", "<<: ", "---", "...", "- ", ": ", "\n  ", "\n    ",
     "&a ", "*a", ">-\n  y", "%YAML 1.1\n", '"\\x41"', "'it''s'", "a", "7", "1e3", "no", "0x1f", "~", "1_000",
     "+.inf", "1:20", "2026-11-30", "\u00fc", "\\", "k" * 1030]
)  # fmt: skip
_READ_OTHERWISE = st.sampled_from(["\t", "!", "!e", "%TAG !e! tag:x,2000:\n", "?", "? ", "\ufeff", "|#", ">-#"])
_TEXTS = st.one_of(
    st.lists(_PIECES, max_size=30).map("".join),
    st.tuples(st.lists(_PIECES, max_size=15), _READ_OTHERWISE, st.lists(_PIECES, max_size=15)).map(
        lambda parts: "".join(parts[0]) + parts[1] + "".join(parts[2])
    ),
)


@settings(max_examples=600, deadline=None)
@given(_TEXTS)
def test_any_text_reads_as_pythons_reader_reads_it(text: str) -> None:
    # Whatever libyaml does with it, read_yaml says what the Python reader says: the same document or error.
    try:
        python = yaml_tree._read_yaml(yaml_tree.Loader, text, "c.yaml")
    except ConfigError as error:
        with pytest.raises(ConfigError) as caught:
            yaml_tree.read_yaml(text, "c.yaml")
        assert str(caught.value) == str(error)
        return
    _same(python, yaml_tree.read_yaml(text, "c.yaml"))
