"""The data of a config file against the one schema (schema.yaml), in words a person can act on.

Sits between config.yaml_tree (the data, and the key paths problems are
placed by) and config.checks (what a schema cannot say), which also borrows
`describe` and config.load `closest`. Every error is collected and turned
into `Problem`s such as `accounts.physics.weight: -1 is not > 0`, with a
guess at what a misspelt key or value meant.
"""

from __future__ import annotations

import difflib
import functools
import importlib.resources
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

import yaml

from slurm_drf.config.yaml_tree import KeyPath, Problem, format_path

if TYPE_CHECKING:
    import jsonschema

SCHEMA_RESOURCE: Final = "schema.yaml"


@functools.cache
def load_schema() -> Mapping[str, Any]:
    """The config schema (package data), parsed; cached."""
    text = importlib.resources.files("slurm_drf.config").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")
    # libyaml's loader when PyYAML has it: the pure-Python one takes a tenth
    # of a second over the schema, in every process that loads a config.
    schema = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506  (a safe loader)
    if not isinstance(schema, dict):  # a packaging accident, not a user error
        raise TypeError(f"{SCHEMA_RESOURCE} is not a mapping")
    return cast(Mapping[str, Any], schema)


# The schema's marks on a key that is still read but no longer to be used: an old name (its new
# name) and a key that is ignored (why).
RENAMED: Final = "x-renamed-to"
IGNORED: Final = "x-ignored"


def marked_keys(properties: Mapping[str, Any], mark: str) -> dict[str, str]:
    """Key -> what the schema says of it under `mark` (RENAMED, IGNORED), at one level of the schema."""
    return {key: option[mark] for key, option in properties.items() if mark in option}


def current_keys(properties: Mapping[str, Any]) -> list[str]:
    """The keys a new config should use at one level of the schema, sorted: neither old names nor ignored."""
    return sorted(key for key, option in properties.items() if RENAMED not in option and IGNORED not in option)


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    # Imported here: the one-shot verbs that run on defaults need not pay for it.
    import jsonschema  # noqa: PLC0415

    schema = load_schema()
    validator_class = jsonschema.validators.validator_for(schema)
    return validator_class(schema)


def schema_problems(data: Any) -> list[Problem]:
    """Every way the data breaks the schema, each said as a problem a person can act on."""
    problems = _non_finite_problems(data, ())
    if not problems and _surely_conforms(data):
        return problems  # jsonschema (a twentieth of a second to import) only to say what is wrong
    for error in _validator().iter_errors(data):
        instance = error.instance
        if isinstance(instance, float) and not math.isfinite(instance):
            continue  # _non_finite_problems says it better
        problems.extend(_explain(error))
    return problems


class _Unsure(Exception):
    """The quick check cannot tell: jsonschema decides."""


# Keywords that only annotate: no effect on validity.
_ANNOTATIONS: Final = frozenset({"description", "examples", "default", "title", "$schema", "$defs"})


def _surely_conforms(data: Any) -> bool:
    """Whether the data conforms to the schema, by a quick walk that knows the keywords the
    schema uses; False when it does not or the walk cannot tell (then jsonschema judges)."""
    schema = load_schema()
    try:
        return _conforms(schema, data, schema)
    except (_Unsure, RecursionError):
        return False


_TYPES: Final[Mapping[str, Any]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        if isinstance(value, float):
            raise _Unsure  # 2.0 is an integer to JSON Schema
        return isinstance(value, int) and not isinstance(value, bool)
    if name not in _TYPES:
        raise _Unsure
    return bool(_TYPES[name](value))


def _conforms(schema: Any, value: Any, root: Mapping[str, Any]) -> bool:
    """One value against one (sub)schema, exactly, for the keywords known here; _Unsure otherwise."""
    if not isinstance(schema, Mapping):
        raise _Unsure
    for keyword, limit in schema.items():
        if keyword in _ANNOTATIONS or keyword.startswith("x-"):
            continue
        check = _CHECKS.get(keyword)
        if check is None:
            raise _Unsure
        if not check(limit, value, schema, root):
            return False
    return True


# Each keyword's check: (the keyword's value, the value checked, the schema holding the
# keyword, the root schema) -> whether the value conforms; _Unsure when it cannot tell.
# A keyword about one kind of value (a number, a string, a list, a mapping) passes the others.
_Check = Callable[[Any, Any, Mapping[str, Any], Mapping[str, Any]], bool]


def _check_ref(limit: Any, value: Any, schema: Mapping[str, Any], root: Mapping[str, Any]) -> bool:
    if not isinstance(limit, str) or not limit.startswith("#/$defs/"):
        raise _Unsure
    return _conforms(root["$defs"][limit.removeprefix("#/$defs/")], value, root)


def _check_type(limit: Any, value: Any, schema: Mapping[str, Any], root: Mapping[str, Any]) -> bool:
    names = [limit] if isinstance(limit, str) else list(limit)
    return any(_is_type(value, name) for name in names)


def _check_options(options: Sequence[Any], value: Any) -> bool:
    if not all(isinstance(o, str) or o is None for o in options):
        raise _Unsure  # 1 == True == 1.0 in Python, not in JSON Schema
    return value in options


def _check_unique(limit: Any, value: Any, schema: Mapping[str, Any], root: Mapping[str, Any]) -> bool:
    if not isinstance(value, list) or not limit:
        return True
    if not all(isinstance(v, str) for v in value):
        raise _Unsure
    return len(set(value)) == len(value)


def _check_additional(limit: Any, value: Any, schema: Mapping[str, Any], root: Mapping[str, Any]) -> bool:
    if not isinstance(value, dict):
        return True
    known = schema.get("properties", {})
    extra = [v for k, v in value.items() if k not in known]
    if limit is False:
        return not extra
    return all(_conforms(limit, v, root) for v in extra)


_CHECKS: Final[Mapping[str, _Check]] = {
    "$ref": _check_ref,
    "type": _check_type,
    "enum": lambda limit, value, schema, root: _check_options(limit, value),
    "const": lambda limit, value, schema, root: _check_options([limit], value),
    "minimum": lambda limit, value, schema, root: not _is_number(value) or value >= limit,
    "maximum": lambda limit, value, schema, root: not _is_number(value) or value <= limit,
    "exclusiveMinimum": lambda limit, value, schema, root: not _is_number(value) or value > limit,
    "minLength": lambda limit, value, schema, root: not isinstance(value, str) or len(value) >= limit,
    "pattern": lambda limit, value, schema, root: not isinstance(value, str) or re.search(limit, value) is not None,
    "minItems": lambda limit, value, schema, root: not isinstance(value, list) or len(value) >= limit,
    "minProperties": lambda limit, value, schema, root: not isinstance(value, dict) or len(value) >= limit,
    "uniqueItems": _check_unique,
    "items": lambda limit, value, schema, root: (
        not isinstance(value, list) or all(_conforms(limit, v, root) for v in value)
    ),
    "properties": lambda limit, value, schema, root: (
        not isinstance(value, dict)
        or all(_conforms(sub, value[key], root) for key, sub in limit.items() if key in value)
    ),
    "additionalProperties": _check_additional,
    "propertyNames": lambda limit, value, schema, root: (
        not isinstance(value, dict) or all(_conforms(limit, k, root) for k in value)
    ),
    "required": lambda limit, value, schema, root: not isinstance(value, dict) or all(key in value for key in limit),
    "oneOf": lambda limit, value, schema, root: sum(_conforms(sub, value, root) for sub in limit) == 1,
}


_COMPARISONS: Final = {
    "minimum": ">=",
    "maximum": "<=",
    "exclusiveMinimum": ">",
    "exclusiveMaximum": "<",
}


@dataclass(frozen=True, slots=True)
class _Failure:
    """One jsonschema error as the explainers read it: where, which keyword and its value,
    the value that failed, the (sub)schema and its `x-expected` words."""

    path: KeyPath
    keyword: str
    limit: Any
    value: Any
    schema: Mapping[str, Any]
    expected: str | None


def _explain(error: jsonschema.ValidationError) -> list[Problem]:
    """Turn one jsonschema error into problems a person can act on."""
    path: KeyPath = tuple(error.absolute_path)
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    expected = schema.get("x-expected")
    value: Any = error.instance
    if "propertyNames" in error.absolute_schema_path:
        # The key itself is wrong; jsonschema reports it at the mapping.
        what = expected or "a valid name"
        return [Problem((*path, value), f"{describe(value)} is not {what}")]
    keyword = str(error.validator)
    explainer = _EXPLAINERS.get(keyword)
    failure = _Failure(path, keyword, error.validator_value, value, schema, expected)
    problems = explainer(failure) if explainer is not None else None
    return [Problem(path, error.message)] if problems is None else problems


def _explain_unknown_keys(f: _Failure) -> list[Problem]:
    properties = f.schema.get("properties", {})
    known = current_keys(properties)
    return [Problem((*f.path, key), _unknown_key_message(key, known)) for key in f.value if key not in properties]


def _explain_required(f: _Failure) -> list[Problem]:
    present = f.value if isinstance(f.value, dict) else {}
    return [Problem(f.path, f"missing required key {key!r}") for key in f.limit if key not in present]


def _explain_type(f: _Failure) -> list[Problem]:
    expected = f.expected
    if expected is None:
        types = [f.limit] if isinstance(f.limit, str) else list(f.limit)
        expected = " or ".join(_TYPE_WORDS.get(name, name) for name in types)
    message = f"expected {expected}, got {describe(f.value)}"
    if len(f.path) == 2 and f.path[0] == "accounts" and _is_number(f.value):
        message += f"; did you mean {{weight: {describe(f.value)}}}?"
    return [Problem(f.path, message)]


def _explain_enum(f: _Failure) -> list[Problem]:
    message = f"{describe(f.value)} is not one of {', '.join(map(str, f.limit))}"
    guess = closest(f.value, [str(item) for item in f.limit]) if isinstance(f.value, str) else None
    return [Problem(f.path, message + (f"; did you mean {guess!r}?" if guess else ""))]


def _explain_one_of(f: _Failure) -> list[Problem] | None:
    if f.expected is None:
        return None
    return [Problem(f.path, f"expected {f.expected}, got {describe(f.value)}")]


def _explain_comparison(f: _Failure) -> list[Problem]:
    return [Problem(f.path, f"{describe(f.value)} is not {_COMPARISONS[f.keyword]} {describe(f.limit)}")]


def _explain_pattern(f: _Failure) -> list[Problem]:
    message = f"{describe(f.value)} is not {f.expected or 'matching ' + repr(f.limit)}"
    guess = _tres_guess(f.value, f.limit) if f.schema.get("x-suggest") == "tres" else None
    return [Problem(f.path, message + (f"; did you mean {guess!r}?" if guess else ""))]


def _explain_empty(f: _Failure) -> list[Problem]:
    what = f.expected or ("a non-empty list" if f.keyword == "minItems" else "a non-empty value")
    return [Problem(f.path, f"expected {what}, got {describe(f.value)}")]


# Each keyword's words for what is wrong; None (or no explainer) leaves jsonschema's message.
_EXPLAINERS: Final[Mapping[str, Callable[[_Failure], list[Problem] | None]]] = {
    "additionalProperties": _explain_unknown_keys,
    "required": _explain_required,
    "type": _explain_type,
    "enum": _explain_enum,
    "oneOf": _explain_one_of,
    **dict.fromkeys(_COMPARISONS, _explain_comparison),
    "pattern": _explain_pattern,
    "minItems": _explain_empty,
    "minLength": _explain_empty,
    "uniqueItems": lambda f: _duplicate_item_problems(f.path, f.value),
}


def _unknown_key_message(key: str, known: Sequence[str]) -> str:
    guess = closest(key, known)
    if guess:
        return f"unknown key; did you mean {guess!r}?"
    # Every key, however many: the message must be enough where docs/ is not installed.
    return f"unknown key; expected one of {', '.join(known)}"


def _duplicate_item_problems(path: KeyPath, items: list[Any]) -> list[Problem]:
    problems = []
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        key = repr(item)
        if key in first:
            where = format_path((*path, first[key]))
            problems.append(Problem((*path, index), f"{describe(item)} is already listed as {where}"))
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
    guesses.append(closest(lower, _BASE_TRES) or "")
    return next((guess for guess in guesses if guess and re.fullmatch(pattern, guess)), None)


def _non_finite_problems(data: Any, path: KeyPath) -> list[Problem]:
    """`.inf` and `.nan` pass every comparison in the schema; refuse them here."""
    if isinstance(data, float) and not math.isfinite(data):
        return [Problem(path, f"{describe(data)} is not a finite number")]
    if isinstance(data, dict):
        return [p for key, value in data.items() for p in _non_finite_problems(value, (*path, key))]
    if isinstance(data, list):
        return [p for index, value in enumerate(data) for p in _non_finite_problems(value, (*path, index))]
    return []


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def describe(value: object) -> str:
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


def closest(word: str, candidates: Sequence[str]) -> str | None:
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
