"""The configuration file: finding it, loading it all or nothing into a frozen Config.

Sits beside model at the bottom of the flow: cli asks `resolve_config` (the
search path, then `load_config`), the daemon and the engine only read the
resulting `Config`. Nothing here talks to Slurm; `warn_unknown_accounts` is
handed the account names the daemon read.

Loading is all or nothing. config.yaml_tree composes the text into PyYAML's
node tree (which keeps line numbers) and finds duplicate keys,
config.validate checks the data against the one schema `schema.yaml` with
every error collected, config.checks looks for what a schema cannot say
(overlapping pools, scale against offset, ...). Any problem raises
`ConfigError` listing them all as `FILE:LINE: key.path: what was
expected`; otherwise config.checks builds the one Config. When no file is
found, `resolve_config` hands out the defaults, which need no validation,
and none of that machinery is imported.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from slurm_drf.config.settings import Config, default_config
from slurm_drf.errors import ConfigError
from slurm_drf.files import read_private, too_large_message

# The YAML reader, the schema validator (jsonschema) and the logical checks
# are imported by the functions that use them: a verb that finds no config
# file runs on the defaults without paying for them at start-up.

DEFAULT_CONFIG_PATH: Final = "/etc/slurm-drf/config.yaml"


CONFIG_ENV: Final = "SLURM_DRF_CONFIG"


# The largest config file read. A site's config with weights for thousands
# of accounts is a few hundred kilobytes; past this the file is not a config
# (a log, a dump, /dev/zero), and reading and validating it (about 4 s per
# MiB with libyaml, 8 s without) would only make check-config, start-up and
# reload hang.
MAX_CONFIG_BYTES: Final = 1024 * 1024


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
    on every SIGHUP. `private`: refuse a file others could change (see
    `load_config`).
    """
    path = find_config_path(explicit, env, default_path=default_path)
    return default_config() if path is None else load_config(path, private=private)


def load_config(path: str | os.PathLike[str], *, private: bool = False) -> Config:
    """Read, validate and convert one config file; ConfigError lists every problem.

    `private`: refuse a file others could change (`files.read_private`: the
    file as opened, and its directories, as ssh does); the verbs that write
    to Slurm, their dry runs and check-config ask for it. A file of more
    than MAX_CONFIG_BYTES is refused unread.
    """
    source = os.fspath(path)
    try:
        if private:
            # Checked through the descriptor read from (fstat), and the directories above it.
            raw = read_private(source, "the config file", ConfigError, MAX_CONFIG_BYTES)
        else:
            with open(source, "rb") as stream:
                raw = stream.read(MAX_CONFIG_BYTES + 1)
    except OSError as error:
        raise ConfigError(f"{source}: cannot read the config file: {error.strerror or error}") from error
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(too_large_message(source, "the config file", MAX_CONFIG_BYTES))
    try:
        # utf-8-sig: editors on other systems may leave a byte-order mark.
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        message = f"{source}:{line}: not UTF-8 text (byte {raw[error.start]:#04x}); save the file as UTF-8"
        raise ConfigError(message) from error
    return parse_config_text(text, source)


def parse_config_text(text: str, source: str) -> Config:
    """Validate YAML text and convert it; `source` names it in messages and source_path."""
    if not text:
        # An empty file (`--config /dev/null`) asks for nothing: the defaults, without importing the reader.
        return Config(source_path=source)
    from slurm_drf.config.checks import (  # noqa: PLC0415
        build_config,
        key_length_problems,
        logical_problems,
        weight_problems,
    )
    from slurm_drf.config.validate import schema_problems  # noqa: PLC0415
    from slurm_drf.config.yaml_tree import check_expanded_size, mark_of, read_yaml  # noqa: PLC0415

    try:
        document = read_yaml(text, source)
    except ConfigError as error:
        long_key = _long_key_error(text, source, error)
        if long_key is None:
            raise
        raise long_key from error
    if document is None or document.data is None:
        # An empty file (or only comments, or a bare `null`) asks for
        # nothing: defaults.
        return Config(source_path=source)
    root, data = document.root, document.data
    # Before anything walks the data, which aliases may have made endless.
    check_expanded_size(root, source)
    problems = list(document.duplicates)
    problems += key_length_problems(root)
    problems += schema_problems(data)
    problems += logical_problems(data)
    problems += weight_problems(data, root)
    if problems:
        # In file order, so the list reads top to bottom like the file.
        placed = sorted(
            (problem.mark or mark_of(root, problem.path), index, problem.render())
            for index, problem in enumerate(problems)
        )
        messages = [f"{source}:{line}: {rendered}" for (line, _), _, rendered in placed]
        raise ConfigError("\n".join(messages), messages)
    return build_config(data, root, document.lines, source)


def _long_key_error(text: str, source: str, error: ConfigError) -> ConfigError | None:
    """The error to raise instead of a YAML syntax error that a key too long for PyYAML caused, or None.

    PyYAML drops a possible key once it runs past 1024 characters, so the
    `:` after it reads as "mapping values are not allowed here" (or, inside
    `{...}`, "expected ',' or '}', but got ':'"). When the error points at
    a `:` and what is written before it on its line is one key
    (`written_key`) longer than MAX_KEY_CHARACTERS, that key is what is
    wrong. Read from the line's text alone: scanning the file again would
    cost as much as the file is hostile.
    """
    import yaml  # noqa: PLC0415

    from slurm_drf.config.checks import MAX_KEY_CHARACTERS, long_key_message  # noqa: PLC0415

    cause = error.__cause__
    if not isinstance(cause, yaml.MarkedYAMLError) or cause.problem_mark is None:
        return None
    mark = cause.problem_mark
    colon = int(mark.index)
    if not 0 <= colon < len(text) or text[colon] != ":":
        return None
    before = text[max(text.rfind(brk, 0, colon) for brk in _LINE_BREAKS) + 1 : colon].rstrip(" \t")
    key = written_key(before)
    if key is None or len(key) <= MAX_KEY_CHARACTERS:
        return None
    where = f"the key at column {len(before) - len(key) + 1}"
    return ConfigError(f"{source}:{int(mark.line) + 1}: {long_key_message(len(key), where)}")


# What YAML (and PyYAML's marks) count as line breaks.
_LINE_BREAKS: Final = ("\n", "\r", "\x85", "\u2028", "\u2029")
# What ends the text before a key written plainly inside `{...}` or `[...]`.
_FLOW_STARTS: Final = ("{", "[", ",")


def written_key(before: str) -> str | None:
    """The key written last in `before` (a line's text up to a `:`), quotes included, or None when what
    is there is no one key: `  - "a b"` -> `"a b"`, `x: {y: 1, long_key` -> `long_key`, `x: value` -> None."""
    text = before.rstrip(" \t")
    if text[-1:] in ("'", '"'):
        opening = text.rfind(text[-1], 0, len(text) - 1)
        return text[opening:] if opening >= 0 else None
    flow = max((found + 1 for start in _FLOW_STARTS if (found := text.rfind(start)) >= 0), default=0)
    if ": " in text[flow:]:
        return None  # a value after its key's `: `, where no key can start
    key = text[flow:].lstrip(" \t")
    while key.startswith(("- ", "? ")):  # sequence entries and an explicit key hold the key
        key = key[2:].lstrip(" \t")
    return key or None


def warn_unknown_accounts(
    config: Config, known_accounts: Iterable[str], resolve: Callable[[str], str | None] | None = None
) -> list[str]:
    """Messages for configured accounts Slurm does not know (a warning, not an error).

    The file may be written before an account is created in Slurm, so this
    never refuses the config; but a typo in an account name silently gives
    that account the default weight, which an administrator wants to hear.
    `resolve` (the tree's `AccountTree.find`, when Slurm's tree was read)
    names the account a key means, a tree path such as `physics/theory`
    included; a key it resolves is known.
    """
    from slurm_drf.config.validate import closest  # noqa: PLC0415
    from slurm_drf.config.yaml_tree import format_path  # noqa: PLC0415

    known = set(known_accounts)
    by_lower = {name.lower(): name for name in known}
    where = config.source_path or "config"
    messages = []
    for name in sorted((set(config.weights) | config.exclude_accounts) - known):
        if resolve is not None and resolve(name) is not None:
            continue
        key = format_path(("accounts", name))
        if name not in config.weights and key not in config.lines:
            key = "exclude_accounts"
        line = config.lines.get(key)
        prefix = f"{where}:{line}" if line else where
        # "/": a tree path (model.account_tree.PATH_SEPARATOR).
        what = f"Slurm's account tree has no path {name!r}" if "/" in name else f"Slurm has no account {name!r}"
        message = f"{prefix}: {key}: {what}; the setting has no effect until it exists"
        guess = by_lower.get(name.lower()) or closest(name, sorted(known))
        if guess:
            message += f" (did you mean {guess!r}?)"
        messages.append(message)
    return messages
