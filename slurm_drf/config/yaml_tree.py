"""YAML text -> PyYAML's node tree, which keeps the line of every key, and the data.

The bottom of loading a config file: config.load reads the text and hands
it to `read_yaml`, which composes the node tree, walks it once (refusing
a value that contains itself, finding repeated keys, noting the line of
every key) and constructs the data. config.validate and config.checks
then find their problems in the data, each at a key path, which `mark_of`
turns back into a line. Nothing here knows the schema or what a key means.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from typing import Any, Final

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from slurm_drf.errors import ConfigError

# A key path into the file: mapping keys and list indices.
KeyPath = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the file, at a key path; config.load places it on a line."""

    path: KeyPath
    message: str
    # (line, column), 1-based; set when the path alone does not find the
    # place (a repeated key).
    mark: tuple[int, int] | None = None

    def render(self) -> str:
        """`accounts.physics.weight: -1 is not > 0` (the line is config.load's to add)."""
        return f"{format_path(self.path)}: {self.message}" if self.path else self.message


_PLAIN_KEY: Final = re.compile(r"[A-Za-z0-9_/:@+-]+")


def format_path(path: KeyPath) -> str:
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


# Per mapping node, its key -> (key node, value node) index and the list it
# was built from: construction replaces a mapping's list when it applies
# `<<` merges, and a replaced list means a stale index. Keyed weakly by the
# node, so an index lives as long as its tree.
_INDEXES: Final[weakref.WeakKeyDictionary[MappingNode, tuple[list[Any], dict[str, tuple[Node, Node]]]]] = (
    weakref.WeakKeyDictionary()
)


def mapping_index(node: MappingNode) -> dict[str, tuple[Node, Node]]:
    """Key text -> (key node, value node) of a mapping, the last of a repeated key winning
    (as in the constructed dict); built once per mapping (and again only after merges change it).

    Every lookup by path goes through it: finding each of n accounts' weight
    by scanning the mapping was n * n / 2 steps (2 minutes for 50,000
    accounts), by the index it is n.
    """
    cached = _INDEXES.get(node)
    if cached is not None and cached[0] is node.value:
        return cached[1]
    index = build_index(node.value)
    _INDEXES[node] = (node.value, index)
    return index


def build_index(pairs: list[tuple[Node, Node]]) -> dict[str, tuple[Node, Node]]:
    """`mapping_index` of one list of (key, value) pairs: one step per pair."""
    return {str(key.value): (key, value) for key, value in pairs if isinstance(key, ScalarNode)}


def _child(node: Node, part: str | int) -> tuple[Node, Node] | None:
    """(node that names the step, value node) of one path step, or None."""
    if isinstance(node, MappingNode) and isinstance(part, str):
        return mapping_index(node).get(part)
    if isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        item: Node = node.value[part]
        return item, item
    return None


def node_at(root: Node, path: KeyPath) -> Node | None:
    """The value node at path, or None; after construction, merged keys are found too."""
    node = root
    for part in path:
        step = _child(node, part)
        if step is None:
            return None
        node = step[1]
    return node


def _start(node: Node) -> tuple[int, int]:
    return int(node.start_mark.line) + 1, int(node.start_mark.column) + 1


def mark_of(root: Node, path: KeyPath) -> tuple[int, int]:
    """Where the key (or list item) at path starts, else its nearest ancestor."""
    node, marker = root, root
    for part in path:
        step = _child(node, part)
        if step is None:
            break
        marker, node = step
    return _start(marker)


# No setting nests deeper than a few levels; PyYAML's composer recurses once
# per level, so 100k nested brackets would exhaust Python's stack.
MAX_DEPTH: Final = 64
# No setting takes an integer of more than 19 digits; Python refuses to read
# one of more than 4300 at all.
MAX_INTEGER_TEXT: Final = 40


class TooLargeError(yaml.constructor.ConstructorError):
    """An integer written with more digits than any setting takes; read_yaml names its key."""


class _Reading(yaml.constructor.SafeConstructor):
    """What both loaders construct differently from PyYAML's safe loader.

    Every mapping key is read as the text written: YAML 1.1 turns keys like
    `no`, `on` or `123` into booleans and integers; account and partition
    names are text, so a key is always its scalar's text. Integers longer
    than MAX_INTEGER_TEXT are refused. (`_with_our_tags` adds YAML 1.2
    exponent floats, `1e-3`, which PyYAML would otherwise read as strings.)
    """

    def construct_yaml_int(self, node: ScalarNode) -> int:
        text = str(node.value)
        if len(text) > MAX_INTEGER_TEXT:
            raise TooLargeError(
                None, None, f"an integer of {len(text)} characters; no setting takes one", node.start_mark
            )
        value: int = super().construct_yaml_int(node)
        return value

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


class Loader(_Reading, yaml.SafeLoader):
    """PyYAML's safe loader, in Python, reading as `_Reading` says; refuses nesting past MAX_DEPTH.

    The reference: a file's errors are said in its words.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(None, None, f"more than {MAX_DEPTH} nested lists or mappings", mark)
            node: Node | None = super().compose_node(parent, index)
            return node
        finally:
            self.depth -= 1


def _with_our_tags(loader: type[Loader] | type[_FastLoader]) -> None:
    """Make `loader` read integers as `_Reading` does, and YAML 1.2 exponent floats."""
    # (the stubs type the function's first argument as one of PyYAML's own loaders; `_Reading` is our part of one)
    loader.add_constructor("tag:yaml.org,2002:int", loader.construct_yaml_int)  # type: ignore[type-var]
    loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"),
    )


_with_our_tags(Loader)

# libyaml, where PyYAML was built with it: otherwise every file is read in Python.
_HAVE_LIBYAML: Final = bool(yaml.__with_libyaml__)
# What PyYAML's Python reader refuses at once (libyaml's list differs): such a file is read in Python.
_NON_PRINTABLE: Final = yaml.reader.Reader.NON_PRINTABLE
# Where libyaml reads a text otherwise than PyYAML's Python reader (found by
# tests/unit/config/test_yaml_libyaml.py): a tab, which PyYAML refuses in
# places libyaml takes it; a tag (`!`: an empty `!` scalar is '' to
# libyaml, null to PyYAML); a `?` (inside [...] or {...} PyYAML reads any
# as a key, libyaml only one before a blank); a byte-order mark past the
# start; a block scalar's header followed by `#` (`|#`, which PyYAML
# refuses). A file with any of them is read in Python.
_READ_OTHERWISE: Final = re.compile(r"[\t!?\ufeff]|[|>][-+0-9]*#")

if _HAVE_LIBYAML:

    class _FastLoader(_Reading, yaml.CSafeLoader):
        """The same reading on libyaml's parser and composer (PyYAML's CSafeLoader): the same nodes
        and marks, a quarter of the time. Only for a file it reads without an error, and only once
        `_nests_within` said it nests no deeper than MAX_DEPTH."""

    _with_our_tags(_FastLoader)


def _nests_within(text: str, depth: int) -> bool:
    """Whether no node of `text` is nested deeper than `depth` (the root is at 1; a list's items, a
    mapping's keys and values one deeper: `Loader.compose_node`'s count), from libyaml's events
    alone, no node made; False for a text libyaml cannot parse.

    libyaml's composer recurses in C once per level: 100,000 nested
    brackets would crash the process there, not raise.
    """
    parser = _FastLoader(text)
    level = 0  # the lists and mappings open around the next node
    try:
        while parser.check_event():
            event = parser.get_event()
            if isinstance(event, yaml.events.NodeEvent) and level + 1 > depth:
                return False
            if isinstance(event, yaml.events.CollectionStartEvent):
                level += 1
            elif isinstance(event, yaml.events.CollectionEndEvent):
                level -= 1
    except yaml.YAMLError:
        return False
    finally:
        parser.dispose()
    return True


@dataclass(frozen=True, slots=True)
class Document:
    """A composed and constructed YAML document."""

    # The node tree (merge keys applied), for line numbers and the written
    # text of numbers.
    root: Node
    data: Any
    duplicates: list[Problem]
    # Dotted key path -> 1-based line of the key (or list item), for Config.lines.
    lines: dict[str, int]


def read_yaml(text: str, source: str) -> Document | None:
    """The node tree and the data of a one-document YAML text; syntax errors raise.

    Read by libyaml where PyYAML has it (`_FastLoader`: a config of 40,000
    weights composes in a quarter of the time), by PyYAML's Python reader
    otherwise, and again by it whenever libyaml's read found anything wrong
    or could not be tried (a character YAML does not allow, nesting past
    MAX_DEPTH, what libyaml reads otherwise: `_READ_OTHERWISE`): a file's
    errors are said in PyYAML's words, which name the problem the way the
    messages here expect.
    """
    if (
        _HAVE_LIBYAML
        and _NON_PRINTABLE.search(text) is None
        and _READ_OTHERWISE.search(text) is None
        and _nests_within(text, MAX_DEPTH)
    ):
        try:
            return _read_yaml(_FastLoader, text, source)
        except ConfigError:
            pass  # said by the Python reader, below
    return _read_yaml(Loader, text, source)


def _read_yaml(loader_class: type[Loader] | type[_FastLoader], text: str, source: str) -> Document | None:
    loader: Loader | _FastLoader | None = None
    try:
        loader = loader_class(text)
        root = loader.get_single_node()
        if root is None:
            return None
        # Before construction: it applies `<<` merges to the tree in place,
        # and its dict keeps only the last of a repeated key.
        duplicates, lines = _survey(root, source)
        _check_merged_size(root, source)
        data = loader.construct_document(root)
    except TooLargeError as error:
        raise ConfigError(_too_large_message(error, lines, source)) from error
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
    return Document(root, data, duplicates, lines)


def _too_large_message(error: TooLargeError, lines: dict[str, int], source: str) -> str:
    """`config.yaml:3: scale: an integer of 5000 characters; ...`: the key is the last one on the line."""
    mark = error.problem_mark
    line = mark.line + 1 if mark is not None else 0
    keys = [key for key, key_line in lines.items() if key_line == line]
    where = f"{keys[-1]}: " if keys else ""
    return f"{source}:{line}: {where}{error.problem}"


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


# How many values (scalars, lists, mappings) the data may hold once every
# alias is expanded. A config has a few hundred; aliases nested in aliases
# can make a few hundred bytes expand to billions (an "alias bomb"), and
# every later walk of the data (schema, checks, merges) would pay for each.
MAX_EXPANDED_VALUES: Final = 100_000


def check_expanded_size(root: Node, source: str, budget: int = MAX_EXPANDED_VALUES) -> None:
    """Refuse a tree whose data, aliases expanded, holds more than `budget` values
    (and more than twice the values written).

    Counts each node once (sizes of shared nodes are remembered), so it
    costs the size of the tree as written. `_survey` has already refused an
    alias inside the node it names, so the walk ends.
    """
    sizes: dict[int, int] = {}

    def size_of(node: Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        total = 1
        if isinstance(node, SequenceNode):
            total += sum(size_of(item) for item in node.value)
        elif isinstance(node, MappingNode):
            total += sum(size_of(key) + size_of(value) for key, value in node.value)
        # Only what aliases add counts: a long list written out costs its length anyway.
        if total > budget and total > 2 * len(sizes):
            line = int(node.start_mark.line) + 1
            raise ConfigError(
                f"{source}:{line}: YAML: this value expands to more than {budget} values "
                "through aliases; write the config without nested aliases"
            )
        sizes[id(node)] = total
        return total

    size_of(root)


def _check_merged_size(root: Node, source: str, budget: int = MAX_EXPANDED_VALUES) -> None:
    """Refuse `<<` merges that would make PyYAML copy more than `budget` keys.

    Construction shares an aliased list or mapping (one object, however many
    aliases), but a merge copies the merged keys into every mapping that
    merges them, so nested merges grow as nested aliases do.
    """
    flattened: dict[int, int] = {}
    stack = [root]
    seen: set[int] = set()

    def size_of(node: MappingNode) -> int:
        if id(node) not in flattened:
            total = 0
            for key_node, value_node in node.value:
                sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
                if key_node.tag != _MERGE:
                    total += 1
                else:
                    total += sum(size_of(item) for item in sources if isinstance(item, MappingNode))
                if total > budget:
                    raise ConfigError(
                        f"{source}:{int(node.start_mark.line) + 1}: YAML: this mapping merges more than "
                        f"{budget} keys through aliases; write the config without nested merges"
                    )
            flattened[id(node)] = total
        return flattened[id(node)]

    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, MappingNode):
            size_of(node)
            stack.extend(child for pair in node.value for child in pair)
        elif isinstance(node, SequenceNode):
            stack.extend(node.value)


# PyYAML's tag for a `<<` key.
_MERGE: Final = "tag:yaml.org,2002:merge"


def _survey(root: Node, source: str) -> tuple[list[Problem], dict[str, int]]:
    """Walk the tree as composed, before `<<` merges are applied, once for three jobs.

    - Refuse an alias inside the node it names (`a: &x [*x]`): the data would be endless.
    - Find keys written twice in one mapping, which PyYAML would silently
      drop; merging must not hide them, so this cannot wait for construction.
    - Record the line of every key path of the data as constructed, merged
      keys included (`Document.lines`).

    Merge sources are walked first, as PyYAML applies them; their keys and
    values belong to the mapping that merges them, and their repeated keys
    are reported only where they are written as a value (a merged repeat
    never was an error). Aliases share nodes, so a node is entered once for
    each job it still needs (at most three times), never once per alias.
    """
    survey = _Survey(source)
    survey.visit(root, (), written=True, merged=False)
    return survey.duplicates, survey.lines


class _Survey:
    """The state of one `_survey` walk."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.duplicates: list[Problem] = []
        self.lines: dict[str, int] = {}
        self.open_nodes: set[int] = set()
        self.finished: set[int] = set()  # walked, no alias inside itself
        self.checked: set[int] = set()  # its keys checked for repeats
        self.placed: set[int] = set()  # the lines of its keys or items recorded
        self.merged_keys: dict[int, dict[str, int]] = {}

    def keys_of(self, node: MappingNode) -> dict[str, int]:
        """Key -> line of a mapping as PyYAML flattens it: merged keys, the own ones winning."""
        if id(node) not in self.merged_keys:
            merged: dict[str, int] = {}
            own: dict[str, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE:
                    # In `<<: [*a, *b]` the first listed wins, so it is applied last.
                    sources = value_node.value[::-1] if isinstance(value_node, SequenceNode) else [value_node]
                    for source_node in sources:
                        if isinstance(source_node, MappingNode):
                            merged.update(self.keys_of(source_node))
                elif isinstance(key_node, ScalarNode):
                    own[str(key_node.value)] = int(key_node.start_mark.line) + 1
            self.merged_keys[id(node)] = merged | own
        return self.merged_keys[id(node)]

    def visit(self, node: Node, path: KeyPath, *, written: bool, merged: bool) -> None:
        # written: reached from the root through values alone (no `<<` on the
        # way), so repeated keys are reported. merged: a `<<` source, whose
        # keys are recorded as the merging mapping's (at path).
        ident = id(node)
        if ident in self.open_nodes:
            line = int(node.start_mark.line) + 1
            raise ConfigError(
                f"{self.source}:{line}: YAML: an alias refers to a node that contains it; "
                "values cannot contain themselves"
            )
        first = ident not in self.finished
        check = written and ident not in self.checked
        place = not merged and ident not in self.placed
        if not (first or check or place):
            return
        self.open_nodes.add(ident)
        if check:
            self.checked.add(ident)
        if place:
            self.placed.add(ident)
        if isinstance(node, MappingNode):
            self._visit_mapping(node, path, written=written, check=check, place=place)
        elif isinstance(node, SequenceNode):
            self._visit_sequence(node, path, written=written, merged=merged, place=place)
        self.open_nodes.discard(ident)
        self.finished.add(ident)

    def _visit_mapping(self, node: MappingNode, path: KeyPath, *, written: bool, check: bool, place: bool) -> None:
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                self.visit(value_node, path, written=False, merged=True)
        if place:  # after the merge sources: they are known not to contain themselves
            for key, line in self.keys_of(node).items():
                self.lines[format_path((*path, key))] = line
        first_lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                continue
            if not isinstance(key_node, ScalarNode):
                # Construction refuses such a key; walked only for recursion.
                self.visit(key_node, path, written=False, merged=True)
                self.visit(value_node, path, written=False, merged=True)
                continue
            key = str(key_node.value)
            mark = _start(key_node)
            if check and key in first_lines:
                message = f"duplicate key (first set on line {first_lines[key]}); write it once"
                self.duplicates.append(Problem((*path, key), message, mark))
            first_lines.setdefault(key, mark[0])
            self.visit(value_node, (*path, key), written=written, merged=False)

    def _visit_sequence(self, node: SequenceNode, path: KeyPath, *, written: bool, merged: bool, place: bool) -> None:
        if merged:
            for item in node.value[::-1]:
                self.visit(item, path, written=False, merged=True)
            return
        for index, item in enumerate(node.value):
            if place:
                self.lines[format_path((*path, index))] = int(item.start_mark.line) + 1
            self.visit(item, (*path, index), written=written, merged=False)
