"""The configuration: YAML + schema -> a frozen Config.

Sits beside model at the bottom of the flow: cli finds and loads the file
(`find_config_path`, `load_config`), the daemon and the engine only read the
resulting `Config`. Nothing here talks to Slurm; `warn_unknown_accounts` is
handed the account names the daemon read.

Loading is all or nothing. The text is composed into PyYAML's node tree
(which keeps line numbers), checked for duplicate keys, validated against
the one schema `schema.yaml` with every error collected, then
checked for what a schema cannot say (overlapping pools, scale against
offset, ...). Any problem raises `ConfigError` listing them all as
`FILE:LINE: key.path: what was expected`; otherwise one Config is built.
"""

from __future__ import annotations

import difflib
import functools
import importlib.resources
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, cast

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from slurm_drf.errors import ConfigError
from slurm_drf.files import check_private

if TYPE_CHECKING:
    import jsonschema
from slurm_drf.config.durations import parse_duration
from slurm_drf.config.settings import DEFAULT_SCALE, NICE_LIMIT, Config, Mode, PoolConfig, default_config

DEFAULT_CONFIG_PATH: Final = "/etc/slurm-drf/config.yaml"


CONFIG_ENV: Final = "SLURM_DRF_CONFIG"


SCHEMA_RESOURCE: Final = "schema.yaml"


LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")


MIN_INTERVAL: Final = 1.0


# A key path into the file: mapping keys and list indices.
KeyPath = tuple[str | int, ...]


def find_config_path(
    explicit: str | None,
    env: Mapping[str, str],
    *,
    default_path: str = DEFAULT_CONFIG_PATH,
) -> str | None:
    """The config file to load: `--config`, then $SLURM_DRF_CONFIG, then /etc.

    A path the administrator named (option or environment) that does not
    exist is an error: silently running on defaults would ignore their
    weights. A missing default file just means defaults (None).
    """
    # lexists: a dangling symlink is a file someone meant to provide; let
    # load_config report why it cannot be read.
    if explicit is not None:
        if not os.path.lexists(explicit):
            raise ConfigError(f"{explicit}: no such config file (given with --config)")
        return explicit
    from_env = env.get(CONFIG_ENV)
    if from_env:
        if not os.path.lexists(from_env):
            raise ConfigError(f"{from_env}: no such config file (named by ${CONFIG_ENV})")
        return from_env
    if os.path.lexists(default_path):
        return default_path
    return None


def resolve_config(
    explicit: str | None,
    env: Mapping[str, str],
    *,
    default_path: str = DEFAULT_CONFIG_PATH,
    private: bool = False,
) -> Config:
    """The config every verb runs on: the file the search path finds (`find_config_path`), else the defaults.

    The one lookup: the one-shot verbs call it once, the daemon at start and
    on every SIGHUP. `private`: refuse a file others could change
    (`check_config_private`); the verbs that write to Slurm ask for it.
    """
    path = find_config_path(explicit, env, default_path=default_path)
    return default_config() if path is None else load_config(path, private=private)


def load_config(path: str | os.PathLike[str], *, private: bool = False) -> Config:
    """Read, validate and convert one config file; ConfigError lists every problem.

    `private`: first refuse a file others could change (`check_config_private`);
    the verbs that write to Slurm ask for it.
    """
    source = os.fspath(path)
    if private:
        check_config_private(source)
    try:
        with open(source, "rb") as stream:
            raw = stream.read()
    except OSError as error:
        raise ConfigError(f"{source}: cannot read the config file: {error.strerror or error}") from error
    try:
        # utf-8-sig: editors on other systems may leave a byte-order mark.
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        message = f"{source}:{line}: not UTF-8 text (byte {raw[error.start]:#04x}); save the file as UTF-8"
        raise ConfigError(message) from error
    return parse_config_text(text, source)


def check_config_private(path: str) -> None:
    """Refuse a config file writable by group or others, or owned by another user than root or us
    (`files.check_private`), as a ConfigError (exit 2)."""
    check_private(path, "the config file", ConfigError)


def parse_config_text(text: str, source: str) -> Config:
    """Validate YAML text and convert it; `source` names it in messages and source_path."""
    document = _read_yaml(text, source)
    if document is None or document.data is None:
        # An empty file (or only comments, or a bare `null`) asks for
        # nothing: defaults.
        return Config(source_path=source)
    root, data = document.root, document.data
    problems = list(document.duplicates)
    problems += _non_finite_problems(data, ())
    problems += _schema_problems(data)
    problems += _logical_problems(data)
    if problems:
        # In file order, so the list reads top to bottom like the file.
        placed = sorted(
            (problem.mark or _mark_of(root, problem.path), index, _render(problem))
            for index, problem in enumerate(problems)
        )
        messages = [f"{source}:{line}: {rendered}" for (line, _), _, rendered in placed]
        raise ConfigError("\n".join(messages), messages)
    return _build_config(data, root, source)


def warn_unknown_accounts(config: Config, known_accounts: Iterable[str]) -> list[str]:
    """Messages for configured accounts Slurm does not know (a warning, not an error).

    The file may be written before an account is created in Slurm, so this
    never refuses the config; but a typo in an account name silently gives
    that account the default weight, which an administrator wants to hear.
    """
    known = set(known_accounts)
    by_lower = {name.lower(): name for name in known}
    where = config.source_path or "config"
    messages = []
    for name in sorted((set(config.weights) | config.exclude_accounts) - known):
        key = _format_path(("accounts", name))
        if name not in config.weights and key not in config.lines:
            key = "exclude_accounts"
        line = config.lines.get(key)
        prefix = f"{where}:{line}" if line else where
        message = f"{prefix}: {key}: Slurm has no account {name!r}; the setting has no effect until it exists"
        guess = by_lower.get(name.lower()) or _closest(name, sorted(known))
        if guess:
            message += f" (did you mean {guess!r}?)"
        messages.append(message)
    return messages


@functools.cache
def load_schema() -> Mapping[str, Any]:
    """The config schema (package data), parsed; cached."""
    text = importlib.resources.files("slurm_drf.config").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")
    schema = yaml.safe_load(text)
    if not isinstance(schema, dict):  # a packaging accident, not a user error
        raise TypeError(f"{SCHEMA_RESOURCE} is not a mapping")
    return cast(Mapping[str, Any], schema)


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads every mapping key as the text written.

    YAML 1.1 turns keys like `no`, `on` or `123` into booleans and integers;
    account and partition names are text, so a key is always its scalar's
    text. Also accepts YAML 1.2 exponent floats (`1e-3`) that PyYAML would
    otherwise read as strings.
    """

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        self.flatten_mapping(node)  # resolves `<<` merge keys in place
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    "found a key that is a list or mapping; keys are names",
                    key_node.start_mark,
                )
            mapping[key_node.value] = self.construct_object(value_node, deep=deep)
        return mapping


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


@dataclass(frozen=True, slots=True)
class _Document:
    root: Node  # the node tree, for line numbers and the written text of numbers
    data: Any
    duplicates: list[_Problem]


def _read_yaml(text: str, source: str) -> _Document | None:
    """The node tree and the data of a one-document YAML text; syntax errors raise."""
    loader: _Loader | None = None
    try:
        loader = _Loader(text)  # refuses control characters right away
        root = loader.get_single_node()
        if root is None:
            return None
        _refuse_recursion(root, source)
        # Duplicate keys must be found before construction: flattening merge
        # keys rewrites the node tree, and the dict keeps only the last value.
        duplicates = _duplicate_key_problems(root)
        data = loader.construct_document(root)
    except yaml.MarkedYAMLError as error:
        raise ConfigError(_syntax_message(error, source)) from error
    except yaml.reader.ReaderError as error:
        line = text[: error.position].count("\n") + 1
        character = f"#x{error.character:04x}" if isinstance(error.character, int) else repr(error.character)
        message = f"{source}:{line}: YAML syntax error: character {character} is not allowed"
        raise ConfigError(message) from error
    except yaml.YAMLError as error:
        raise ConfigError(f"{source}: YAML syntax error: {error}") from error
    finally:
        if loader is not None:
            loader.dispose()
    return _Document(root, data, duplicates)


def _refuse_recursion(root: Node, source: str) -> None:
    """Refuse an alias inside the node it names (`a: &x [*x]`): the data would be endless."""
    finished: set[int] = set()
    open_nodes: set[int] = set()

    def walk(node: Node) -> None:
        if id(node) in finished:
            return
        if id(node) in open_nodes:
            line = int(node.start_mark.line) + 1
            raise ConfigError(
                f"{source}:{line}: YAML: an alias refers to a node that contains it; values cannot contain themselves"
            )
        if isinstance(node, MappingNode | SequenceNode):
            open_nodes.add(id(node))
            for child in node.value:
                for item in child if isinstance(node, MappingNode) else (child,):
                    walk(item)
            open_nodes.discard(id(node))
        finished.add(id(node))

    walk(root)


def _syntax_message(error: yaml.MarkedYAMLError, source: str) -> str:
    mark = error.problem_mark or error.context_mark
    line = f":{mark.line + 1}" if mark is not None else ""
    text = error.problem or error.context or "unreadable YAML"
    if error.context and error.problem and error.problem.startswith("but "):
        # "expected a single document in the stream" / "but found another document"
        text = f"{error.context}, {error.problem}"
    if mark is not None:
        text += f" (column {mark.column + 1})"
    # "while parsing a flow sequence" matters when it started on another line.
    context_mark = error.context_mark
    if (
        error.context
        and error.problem
        and not error.problem.startswith("but ")
        and context_mark is not None
        and (error.problem_mark is None or context_mark.line != error.problem_mark.line)
    ):
        text += f", {error.context} on line {context_mark.line + 1}"
    return f"{source}{line}: YAML syntax error: {text}"


@dataclass(frozen=True, slots=True)
class _Problem:
    path: KeyPath
    message: str
    # (line, column), 1-based; set when the path alone does not find the
    # place (a repeated key).
    mark: tuple[int, int] | None = None


_PLAIN_KEY: Final = re.compile(r"[A-Za-z0-9_/:@+-]+")


def _format_path(path: KeyPath) -> str:
    """`accounts.physics.weight`, `pools[0].name`; odd keys quoted: `accounts['a.b']`."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f"[{part!r}]"
    return text


def _render(problem: _Problem) -> str:
    return f"{_format_path(problem.path)}: {problem.message}" if problem.path else problem.message


def _child(node: Node, part: str | int) -> tuple[Node, Node] | None:
    """(node that names the step, value node) of one path step, or None."""
    if isinstance(node, MappingNode) and isinstance(part, str):
        found = None
        for key_node, value_node in node.value:
            # The last one wins, as in the constructed dict.
            if isinstance(key_node, ScalarNode) and key_node.value == part:
                found = (key_node, value_node)
        return found
    if isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        item: Node = node.value[part]
        return item, item
    return None


def _node_at(root: Node, path: KeyPath) -> Node | None:
    node = root
    for part in path:
        step = _child(node, part)
        if step is None:
            return None
        node = step[1]
    return node


def _start(node: Node) -> tuple[int, int]:
    return int(node.start_mark.line) + 1, int(node.start_mark.column) + 1


def _mark_of(root: Node, path: KeyPath) -> tuple[int, int]:
    """Where the key (or list item) at path starts, else its nearest ancestor."""
    node, marker = root, root
    for part in path:
        step = _child(node, part)
        if step is None:
            break
        marker, node = step
    return _start(marker)


def _duplicate_key_problems(root: Node) -> list[_Problem]:
    """Keys written twice in one mapping; PyYAML would silently keep the last."""
    problems: list[_Problem] = []
    seen_nodes: set[int] = set()  # aliases may share (or even contain) a node

    def walk(node: Node, path: KeyPath) -> None:
        if id(node) in seen_nodes:
            return
        seen_nodes.add(id(node))
        if isinstance(node, MappingNode):
            first_lines: dict[str, int] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = str(key_node.value)
                mark = _start(key_node)
                if key in first_lines:
                    problems.append(
                        _Problem(
                            (*path, key),
                            f"duplicate key (first set on line {first_lines[key]}); write it once",
                            mark,
                        )
                    )
                else:
                    first_lines[key] = mark[0]
                walk(value_node, (*path, key))
        elif isinstance(node, SequenceNode):
            for index, item in enumerate(node.value):
                walk(item, (*path, index))

    walk(root, ())
    return problems


def _describe(value: object) -> str:
    """A value as an administrator would write it in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    if isinstance(value, list):
        return "an empty list" if not value else "a list"
    if isinstance(value, dict):
        return "an empty mapping" if not value else "a mapping"
    return repr(value)


def _closest(word: str, candidates: Sequence[str]) -> str | None:
    """The candidate a typo most likely meant, if any is close."""
    by_lower = {candidate.lower(): candidate for candidate in candidates}
    if word.lower() in by_lower:
        return by_lower[word.lower()]
    matches = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[matches[0]] if matches else None


_TYPE_WORDS: Final = {
    "string": "text",
    "number": "a number",
    "integer": "a whole number",
    "boolean": "true or false",
    "array": "a list",
    "object": "a mapping",
    "null": "null",
}


_COMPARISONS: Final = {
    "minimum": ">=",
    "maximum": "<=",
    "exclusiveMinimum": ">",
    "exclusiveMaximum": "<",
}


# Bare words people write for a TRES, and the Slurm name they mean.
_TRES_ALIASES: Final = {
    "cpus": "cpu",
    "core": "cpu",
    "cores": "cpu",
    "memory": "mem",
    "ram": "mem",
    "nodes": "node",
    "gpu": "gres/gpu",
    "gpus": "gres/gpu",
}


_BASE_TRES: Final = ("cpu", "mem", "node", "billing", "energy", "vmem", "pages", "fs/disk")


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    # Imported here: the one-shot verbs that run on defaults need not pay for it.
    import jsonschema  # noqa: PLC0415

    schema = load_schema()
    validator_class = jsonschema.validators.validator_for(schema)
    return validator_class(schema)


def _schema_problems(data: Any) -> list[_Problem]:
    problems: list[_Problem] = []
    for error in _validator().iter_errors(data):
        instance = error.instance
        if isinstance(instance, float) and not math.isfinite(instance):
            continue  # _non_finite_problems says it better
        problems.extend(_explain(error))
    return problems


def _explain(error: jsonschema.ValidationError) -> list[_Problem]:
    """Turn one jsonschema error into problems a person can act on."""
    path: KeyPath = tuple(error.absolute_path)
    keyword = error.validator
    limit: Any = error.validator_value
    value: Any = error.instance
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    expected = schema.get("x-expected")

    if "propertyNames" in error.absolute_schema_path:
        # The key itself is wrong; jsonschema reports it at the mapping.
        what = expected or "a valid name"
        return [_Problem((*path, value), f"{_describe(value)} is not {what}")]
    if keyword == "additionalProperties":
        known = sorted(schema.get("properties", {}))
        return [
            _Problem((*path, key), _unknown_key_message(key, known))
            for key in value
            if key not in schema.get("properties", {})
        ]
    if keyword == "required":
        present = value if isinstance(value, dict) else {}
        return [_Problem(path, f"missing required key {key!r}") for key in limit if key not in present]
    if keyword == "type":
        if expected is None:
            types = [limit] if isinstance(limit, str) else list(limit)
            expected = " or ".join(_TYPE_WORDS.get(name, name) for name in types)
        message = f"expected {expected}, got {_describe(value)}"
        if len(path) == 2 and path[0] == "accounts" and _is_number(value):
            message += f"; did you mean {{weight: {_describe(value)}}}?"
        return [_Problem(path, message)]
    if keyword == "enum":
        message = f"{_describe(value)} is not one of {', '.join(map(str, limit))}"
        guess = _closest(value, [str(item) for item in limit]) if isinstance(value, str) else None
        return [_Problem(path, message + (f"; did you mean {guess!r}?" if guess else ""))]
    if keyword in _COMPARISONS:
        return [_Problem(path, f"{_describe(value)} is not {_COMPARISONS[keyword]} {_describe(limit)}")]
    if keyword == "pattern":
        message = f"{_describe(value)} is not {expected or 'matching ' + repr(limit)}"
        guess = _tres_guess(value, limit) if schema.get("x-suggest") == "tres" else None
        return [_Problem(path, message + (f"; did you mean {guess!r}?" if guess else ""))]
    if keyword in ("minItems", "minLength"):
        what = expected or ("a non-empty list" if keyword == "minItems" else "a non-empty value")
        return [_Problem(path, f"expected {what}, got {_describe(value)}")]
    if keyword == "uniqueItems":
        return _duplicate_item_problems(path, value)
    return [_Problem(path, error.message)]


def _unknown_key_message(key: str, known: Sequence[str]) -> str:
    guess = _closest(key, known)
    if guess:
        return f"unknown key; did you mean {guess!r}?"
    if len(known) <= 6:
        return f"unknown key; expected one of {', '.join(known)}"
    return "unknown key; the keys are listed in docs/configuration.md"


def _duplicate_item_problems(path: KeyPath, items: list[Any]) -> list[_Problem]:
    problems = []
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        key = repr(item)
        if key in first:
            where = _format_path((*path, first[key]))
            problems.append(_Problem((*path, index), f"{_describe(item)} is already listed as {where}"))
        else:
            first[key] = index
    return problems


def _tres_guess(value: str, pattern: str) -> str | None:
    """What a wrong TRES name most likely meant: `gres:gpu` -> `gres/gpu`, `GPU` -> `gres/gpu`."""
    lower = value.strip().lower()
    guesses = [lower, _TRES_ALIASES.get(lower, "")]
    # Slurm itself writes `gres:gpu` in some places (tres_per_node) and
    # people write plurals (`licenses/matlab`).
    for family in ("gres", "license", "bb", "fs", "ic"):
        for separator in (":", "s/", "s:"):
            if lower.startswith(family + separator):
                guesses.append(f"{family}/{lower[len(family + separator) :]}")
    guesses.append(_closest(lower, _BASE_TRES) or "")
    return next((guess for guess in guesses if guess and re.fullmatch(pattern, guess)), None)


def _non_finite_problems(data: Any, path: KeyPath) -> list[_Problem]:
    """`.inf` and `.nan` pass every comparison in the schema; refuse them here."""
    if isinstance(data, float) and not math.isfinite(data):
        return [_Problem(path, f"{_describe(data)} is not a finite number")]
    if isinstance(data, dict):
        return [p for key, value in data.items() for p in _non_finite_problems(value, (*path, key))]
    if isinstance(data, list):
        return [p for index, value in enumerate(data) for p in _non_finite_problems(value, (*path, index))]
    return []


def _logical_problems(data: Any) -> list[_Problem]:
    # Run on data the schema may have refused: each check looks only at
    # values of the shape it needs, so one mistake is not reported twice.
    if not isinstance(data, dict):
        return []
    return [
        *_interval_problems(data),
        *_pool_problems(data),
        *_scale_problems(data),
        *_metrics_address_problems(data),
    ]


def _interval_problems(data: dict[str, Any]) -> Iterator[_Problem]:
    value = data.get("interval")
    try:
        seconds = parse_duration(value) if value is not None else None
    except (ValueError, TypeError):
        return  # the schema reports the shape
    if seconds is not None and math.isfinite(seconds) and seconds < MIN_INTERVAL:
        yield _Problem(("interval",), f"{_describe(value)} is shorter than 1 second")


def _names(value: Any) -> list[tuple[int, str]]:
    """(index, name) of the text items of a list; nothing for anything else."""
    if not isinstance(value, list):
        return []
    return [(index, item) for index, item in enumerate(value) if isinstance(item, str)]


def _pool_problems(data: dict[str, Any]) -> Iterator[_Problem]:
    pools = data.get("pools")
    if not isinstance(pools, list):
        return
    managed = data.get("partitions")
    managed_names = {name for _, name in _names(managed)} if isinstance(managed, list) else None
    if pools and managed_names is not None:
        # With pools, only pooled partitions are managed: a partition listed
        # in `partitions` but in no pool would silently be left alone.
        pooled = {name for pool in pools if isinstance(pool, dict) for _, name in _names(pool.get("partitions"))}
        for position, partition in _names(managed):
            if partition not in pooled:
                yield _Problem(
                    ("partitions", position),
                    f"partition {partition!r} is in no pool, so it would not be managed; "
                    "add it to a pool or remove it here",
                )
    pool_of_name: dict[str, int] = {}
    pool_of_partition: dict[str, tuple[int, str]] = {}
    for index, pool in enumerate(pools):
        if not isinstance(pool, dict):
            continue
        name = pool.get("name")
        label = repr(name) if isinstance(name, str) else f"pools[{index}]"
        if isinstance(name, str):
            if name in pool_of_name:
                yield _Problem(
                    ("pools", index, "name"),
                    f"{name!r} is already the name of pools[{pool_of_name[name]}]; pool names must differ",
                )
            else:
                pool_of_name[name] = index
        for position, partition in _names(pool.get("partitions")):
            where: KeyPath = ("pools", index, "partitions", position)
            if partition in pool_of_partition:
                other_index, other_label = pool_of_partition[partition]
                if other_index != index:  # a repeat within one pool is uniqueItems' to report
                    yield _Problem(
                        where,
                        f"partition {partition!r} is already in pool {other_label} (pools[{other_index}]); "
                        "a partition belongs to one pool",
                    )
                continue
            pool_of_partition[partition] = (index, label)
            if managed_names is not None and partition not in managed_names:
                yield _Problem(
                    where,
                    f"partition {partition!r} is not in partitions; add it there or remove it here",
                )


def _scale_problems(data: dict[str, Any]) -> Iterator[_Problem]:
    scale = data.get("scale", DEFAULT_SCALE)
    offset = data.get("offset", NICE_LIMIT)
    if not _is_int(scale) or not _is_int(offset):
        return
    if not (1 <= scale <= NICE_LIMIT - 1 and -NICE_LIMIT <= offset <= NICE_LIMIT):
        return  # out of its own range: the schema says so
    # Every mode writes from offset - scale x level: nice is its negation
    # (at most -1), site_factor and priority are it (at least 1). A level of 1
    # (an account holding a whole pool at weight 1) must still land inside,
    # or every busy account meets at the same value and Slurm orders them
    # by submit time.
    if scale >= offset:
        why = (
            "a level of 1 (an account holding a whole pool at weight 1) would get the same value as "
            "every higher level; keep scale < offset"
        )
        if "scale" in data:
            yield _Problem(("scale",), f"{int(scale)} is not below offset {int(offset)}: {why}")
        else:
            yield _Problem(("offset",), f"{int(offset)} is not above scale {int(scale)}: {why}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())


def _metrics_address_problems(data: dict[str, Any]) -> Iterator[_Problem]:
    address = data.get("metrics_address")
    if not isinstance(address, str) or ":" not in address:
        return
    port = address.rpartition(":")[2]
    if port.isdigit() and not 1 <= int(port) <= 65535:
        yield _Problem(("metrics_address",), f"port {int(port)} is not between 1 and 65535")


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


def _collect_lines(root: Node) -> dict[str, int]:
    lines: dict[str, int] = {}
    seen: set[int] = set()

    def walk(node: Node, path: KeyPath) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, MappingNode):
            for key_node, value_node in node.value:
                if isinstance(key_node, ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    child: KeyPath = (*path, str(key_node.value))
                    lines[_format_path(child)] = int(key_node.start_mark.line) + 1
                    walk(value_node, child)
        elif isinstance(node, SequenceNode):
            for index, item in enumerate(node.value):
                child = (*path, index)
                lines[_format_path(child)] = int(item.start_mark.line) + 1
                walk(item, child)

    walk(root, ())
    return lines


def _build_config(data: dict[str, Any], root: Node, source: str) -> Config:
    """Convert data that passed every check; no check may be left to this point."""
    defaults = Config()
    weights: dict[str, Fraction] = {}
    excluded = set(data.get("exclude_accounts", ()))
    for account, settings in data.get("accounts", {}).items():
        if "weight" in settings:
            weights[account] = _exact(settings["weight"], _node_at(root, ("accounts", account, "weight")))
        if settings.get("exclude", False):
            excluded.add(account)
    default_weight = (
        _exact(data["default_weight"], _node_at(root, ("default_weight",)))
        if "default_weight" in data
        else defaults.default_weight
    )
    partitions = data.get("partitions")
    pools = tuple(PoolConfig(name=pool["name"], partitions=tuple(pool["partitions"])) for pool in data.get("pools", ()))
    return Config(
        interval=parse_duration(data["interval"]) if "interval" in data else defaults.interval,
        mode=cast(Mode, data.get("mode", defaults.mode)),
        weights=MappingProxyType(weights),
        default_weight=default_weight,
        resources=tuple(data.get("resources", defaults.resources)),
        partitions=None if partitions is None else tuple(partitions),
        pools=pools,
        exclude_accounts=frozenset(excluded),
        backend=data.get("backend", defaults.backend),
        scale=int(data.get("scale", defaults.scale)),
        offset=int(data.get("offset", defaults.offset)),
        state_dir=data.get("state_dir", defaults.state_dir),
        history_days=data.get("history_days", defaults.history_days),
        report_dir=data.get("report_dir", defaults.report_dir),
        dry_run=data.get("dry_run", defaults.dry_run),
        max_writes_per_cycle=int(data.get("max_writes_per_cycle", defaults.max_writes_per_cycle)),
        tie_half_life=float(data.get("tie_half_life", defaults.tie_half_life)),
        include_unavailable_nodes=data.get("include_unavailable_nodes", defaults.include_unavailable_nodes),
        metrics_address=data.get("metrics_address", defaults.metrics_address),
        metrics_textfile=data.get("metrics_textfile", defaults.metrics_textfile),
        log_level=data.get("log_level", defaults.log_level),
        source_path=source,
        lines=MappingProxyType(_collect_lines(root)),
    )
