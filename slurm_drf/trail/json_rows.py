"""A list of JSON objects of the same keys, written from columns as orjson writes it, byte for byte.

The plan's job entries and account rows, and the report's accounts, are
lists of 100,000 objects of the same keys. A dict per row and orjson over
them cost a quarter of a second at that size; here each column is
serialised by one orjson call and laid into one byte grid with the
constant text between the values (`object_list`). A value that is itself
an object of the same keys in every row (an account's usage per resource)
is a `Nested` of columns, and a value that is a list of scalars in every row
(a job's path shares over a tree) a `Listed` column. Where a column holds
something else (an object of varying keys) `object_list` gives None and the
caller writes the list the plain way.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import numpy as np
import numpy.typing as npt
import orjson
from numpy.lib.stride_tricks import sliding_window_view


@dataclass(frozen=True, slots=True)
class Nested:
    """A value that is an object of the same keys in every row: (key, column) pairs, maybe none (`{}`)."""

    fields: Sequence[tuple[str, Sequence[Any]]]


@dataclass(frozen=True, slots=True)
class Listed:
    """A value that is a list (or tuple) of scalars, or null, in every row: the column of them."""

    column: Sequence[Sequence[Any] | None]


Value: TypeAlias = Sequence[Any] | Nested | Listed


def object_list(
    fields: Sequence[tuple[str, Value]], rows: int, depth: int, indent: bool
) -> tuple[bytes | memoryview, ...] | None:
    """The JSON list of `rows` objects of `fields` (key, column of scalars or Nested), in pieces.

    As orjson writes it (OPT_INDENT_2 when `indent`) as the value of a key
    `depth` levels deep (the key's line indented by 2 x depth spaces).
    A column of one object (every job's pool, a reason of None) is written
    once, as constant text. None when a column holds a value that is not a scalar.
    """
    pieces = object_list_pieces(fields, rows, depth, indent)
    return None if pieces is None else tuple(pieces)


def object_list_pieces(
    fields: Sequence[tuple[str, Value]], rows: int, depth: int, indent: bool
) -> Iterator[bytes | memoryview] | None:
    """`object_list`'s pieces, each piece of the row grid laid out when it is read: a writer that
    takes them one by one (the CLI's `plan`) holds one at a time, and the memory of the last is
    reused for the next instead of each of the text's pages being new to the process."""
    if not rows:
        return iter((b"[]",))
    layout = _Layout()
    at_key, at_nested = _line(depth + 2, indent), _line(depth + 3, indent)
    colon = b": " if indent else b":"
    for number, (key, value) in enumerate(fields):
        layout.text(((b" " * (2 * depth + 2) if indent else b"") + b"{" if number == 0 else b",") + at_key)
        layout.text(orjson.dumps(key) + colon)
        if isinstance(value, Listed):
            layout.cells(_ListCells(value.column, at_nested, at_key))
            continue
        if not isinstance(value, Nested):
            layout.column(value)
            continue
        layout.text(b"{")
        for inner, (name, column) in enumerate(value.fields):
            layout.text((b"," if inner else b"") + at_nested + orjson.dumps(name) + colon)
            layout.column(column)
        layout.text((at_key if value.fields else b"") + b"}")
    layout.text(_line(depth + 1, indent) + b"}")
    separator = b",\n" if indent else b","
    body: Iterable[bytes | memoryview]
    if not layout.columns:
        body = [(layout.pending + separator) * (rows - 1) + layout.pending]
    else:
        grid = _interleave(layout.columns, layout.prefixes, layout.pending, separator)
        if grid is None:
            return None
        body = (part.data for part in grid)
    if indent:
        return itertools.chain((b"[\n",), body, (_line(depth, indent) + b"]",))
    return itertools.chain((b"[",), body, (b"]",))


class _Layout:
    """A row as constant text and columns: `prefixes[k]` is the text before `columns[k]`,
    `pending` the text after the last column."""

    def __init__(self) -> None:
        self.columns: list[Sequence[Any] | _ListCells] = []
        self.prefixes: list[bytes] = []
        self.pending = b""

    def text(self, text: bytes) -> None:
        self.pending += text

    def column(self, column: Sequence[Any]) -> None:
        """A column; as text when every row holds the same scalar object."""
        first = column[0]
        if all(map(operator.is_, column, itertools.repeat(first))):
            dumped = orjson.dumps(first, option=orjson.OPT_INDENT_2)
            if b"\n" not in dumped:  # a scalar (or [], {}): the same text indented or not
                self.pending += dumped
                return
        self.cells(column)

    def cells(self, column: Sequence[Any] | _ListCells) -> None:
        """A column of values, each cut into its own cell."""
        self.prefixes.append(self.pending)
        self.columns.append(column)
        self.pending = b""


class _ListCells:
    """A `Listed` column, each row's list as orjson writes it: items on lines of their own at
    `item_line`, the bracket closing at `close_line` (both b"" when compact); [] and null as they are."""

    __slots__ = ("close_line", "column", "item_line")

    def __init__(self, column: Sequence[Sequence[Any] | None], item_line: bytes, close_line: bytes) -> None:
        self.column = column
        self.item_line = item_line
        self.close_line = close_line

    def __len__(self) -> int:
        return len(self.column)

    def cells(self) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.intp]] | None:
        """Each row's text as a row of a NUL-padded block (as `cells`), and its length; None when a
        row is not a list of scalars.

        The block holds, at fixed places, the opening bracket, then per item k a
        comma (k > 0), the item's line and its cell, then the closing line and
        bracket; what a row has not (items past its own, the lines of an empty
        list, every bracket of a null) stays NUL and is dropped with the padding.
        """
        column = self.column
        kinds = _types(column)
        if not kinds <= {list, tuple, type(None)}:
            return None
        null = np.fromiter((value is None for value in column), dtype=np.bool_, count=len(column))
        rows = [() if value is None else value for value in column]
        counts = np.fromiter(map(len, rows), dtype=np.intp, count=len(rows))
        items = list(itertools.chain.from_iterable(rows))
        cut = cells(items) if items else (np.zeros((0, 0), dtype=np.uint8), np.zeros(0, dtype=np.intp))
        if cut is None:
            return None
        item_block, item_lengths = cut
        line, close = np.frombuffer(self.item_line, dtype=np.uint8), np.frombuffer(self.close_line, dtype=np.uint8)
        most = int(counts.max(initial=0))
        step = 1 + len(line) + item_block.shape[1]  # a comma's place, the item's line, its cell
        width = max(1 + most * step + len(close) + 1, len(_NULL))
        block = np.zeros((len(rows), width), dtype=np.uint8)
        listed = np.flatnonzero(~null)
        block[listed, 0] = _OPEN
        block[listed, -1] = _CLOSE
        some = np.flatnonzero(counts > 0)
        block[some, width - 1 - len(close) : width - 1] = close
        first = np.cumsum(counts) - counts  # each row's first item
        for k in range(most):
            at = np.flatnonzero(counts > k)
            place = 1 + k * step
            if k:
                block[at, place] = _COMMA
            block[at, place + 1 : place + 1 + len(line)] = line
            block[at, place + 1 + len(line) : place + step] = item_block[first[at] + k]
        block[null, : len(_NULL)] = np.frombuffer(_NULL, dtype=np.uint8)
        owner = np.repeat(np.arange(len(rows)), counts)
        texts = np.bincount(owner, weights=item_lengths, minlength=len(rows)).astype(np.intp)
        some_items = counts > 0
        lengths = 2 + counts * (len(line) + 1) - some_items + np.where(some_items, len(close), 0) + texts
        return block, np.where(null, len(_NULL), lengths)


def _types(values: Sequence[Any]) -> set[type]:
    return set(map(type, values))


class Splice:
    """A place in a document for `dumps_spliced`: the value written there is `pieces`,
    a list already written as it is at that depth (`object_list`). (Not a dataclass:
    orjson would write one as an object.)"""

    __slots__ = ("pieces",)

    def __init__(self, pieces: tuple[bytes | memoryview, ...]) -> None:
        self.pieces = pieces


def dumps_spliced(data: Any, option: int) -> bytes | None:
    """orjson.dumps(data, option=option) with every Splice in it replaced by its pieces.

    Each Splice is written as a marker string first and cut out after; None
    when a marker's text is found other than once (a string of the data
    equal to it), for the caller to write the document the plain way.
    """
    pieces = dumps_spliced_pieces(data, option)
    return None if pieces is None else b"".join(pieces)


def dumps_spliced_pieces(data: Any, option: int) -> list[bytes | memoryview] | None:
    """`dumps_spliced`'s text in pieces, as they are (joined, they are its bytes); the last a `bytes`."""
    splices: list[Splice] = []

    def marker(value: object) -> str:
        if not isinstance(value, Splice):
            raise TypeError(f"{type(value).__name__} is not JSON serializable")
        splices.append(value)
        return f"\x00slurm-drf splice {len(splices) - 1}\x00"

    text = orjson.dumps(data, default=marker, option=option)
    pieces: list[bytes | memoryview] = []
    rest = text
    for number, splice in enumerate(splices):
        mark = orjson.dumps(f"\x00slurm-drf splice {number}\x00")
        if text.count(mark) != 1:
            return None
        before, rest = rest.split(mark)
        pieces += (before, *splice.pieces)
    return [*pieces, rest]


def float_each(values: Sequence[Any]) -> list[float]:
    """float() of each value, once per distinct object (the accounts share a few weight objects,
    and a Fraction's float is Python code)."""
    by_object = dict(zip(map(id, values), values, strict=True))
    floats = {key: float(v) for key, v in by_object.items()}
    return list(map(floats.__getitem__, map(id, values)))


def _line(depth: int, indent: bool) -> bytes:
    """A new line indented `depth` levels (nothing when compact)."""
    return b"\n" + b" " * (2 * depth) if indent else b""


def _interleave(
    columns: Sequence[Sequence[Any] | _ListCells], prefixes: Sequence[bytes], suffix: bytes, separator: bytes
) -> Iterator[npt.NDArray[np.uint8]] | None:
    """Row i is prefixes[0] + JSON(columns[0][i]) + prefixes[1] + ... + suffix; rows joined by `separator`:
    the text in pieces, rows after rows, each laid out when it is read (`_laid_out`).

    Each column is serialised by one orjson call and cut into a block of
    fixed-width cells padded with NUL bytes; the blocks and the constant
    prefixes are laid side by side in a byte grid, row after row, and the
    padding is dropped. No Python object per value. The grid is made a few
    thousand rows at a time (`_GRID_PIECE` bytes), so that laying it out and
    dropping the padding work in the processor's cache. None when a column
    cannot be cut (a value that is not a scalar) or when the padding would
    cost more memory than the text itself (a few very long names).
    """
    cut = [column.cells() if isinstance(column, _ListCells) else cells(column) for column in columns]
    if any(block is None for block in cut):
        return None
    blocks = [block for block in cut if block is not None]
    rows = len(columns[0])
    constant = [np.frombuffer(prefix, dtype=np.uint8) for prefix in prefixes]
    ending = np.frombuffer(suffix + separator, dtype=np.uint8)
    width = sum(len(part) for part in constant) + sum(block.shape[1] for block, _ in blocks) + len(ending)
    text_size = rows * (width - sum(block.shape[1] for block, _ in blocks)) + sum(int(n.sum()) for _, n in blocks)
    if rows * width > 2 * text_size + _GRID_SLACK:
        return None
    # One template row with the constant parts (a broadcast copies it fast),
    # then each column's block into its place.
    template = np.zeros(width, dtype=np.uint8)
    places = []
    at = 0
    for part, (block, _) in zip(constant, blocks, strict=True):
        template[at : at + len(part)] = part
        at += len(part)
        places.append((at, block))
        at += block.shape[1]
    template[at:] = ending
    return _laid_out(template, places, rows, len(separator))


def _laid_out(
    template: npt.NDArray[np.uint8], places: list[tuple[int, npt.NDArray[np.uint8]]], rows: int, separator: int
) -> Iterator[npt.NDArray[np.uint8]]:
    """`_interleave`'s pieces: `rows` rows of `template` with each block of `places` at its place,
    a few thousand rows at a time, the padding dropped, the last row without its `separator` bytes."""
    width = len(template)
    step = max(1, _GRID_PIECE // width)
    grid = np.empty((min(rows, step), width), dtype=np.uint8)
    for first in range(0, rows, step):
        part_grid = grid[: min(rows - first, step)]
        part_grid[:] = template
        for at, block in places:
            part_grid[:, at : at + block.shape[1]] = block[first : first + step]
        flat = part_grid.reshape(-1)
        piece = flat[flat != 0]
        yield piece if first + step < rows else piece[:-separator]


# Padding the grid may add beyond twice the text (a mebibyte: short lists).
_GRID_SLACK: Final = 1 << 20
# The grid is laid out this many bytes at a time.
_GRID_PIECE: Final = 1 << 20


def cells(column: Sequence[Any]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.intp]] | None:
    """The JSON text of each value, as rows of a (len(column), width) uint8 block padded with NUL, and each length.

    orjson writes an indented list of scalars as b"[\\n  V0,\\n  V1\\n]": one
    value a line, since a string's newlines are escaped, and never a NUL byte
    (control characters are escaped too), so NUL can pad.
    """
    dumped = np.frombuffer(orjson.dumps(list(column), option=orjson.OPT_INDENT_2), dtype=np.uint8)
    newlines = np.flatnonzero(dumped == _NEWLINE)
    if len(newlines) != len(column) + 1 or not dumped.all():
        return None  # a value over several lines (a list, a mapping), or a NUL byte
    starts = newlines[:-1] + 3  # past "\n  "
    ends = newlines[1:] - 1  # before ",", but the last value has none
    ends[-1] += 1
    lengths = ends - starts
    width = int(lengths.max())
    padded = np.concatenate((dumped, np.zeros(width, dtype=np.uint8)))
    block = sliding_window_view(padded, width)[starts]
    block[np.arange(width) >= lengths[:, None]] = 0
    return block, lengths


_NEWLINE: Final = ord("\n")
_OPEN: Final = ord("[")
_CLOSE: Final = ord("]")
_COMMA: Final = ord(",")
_NULL: Final = b"null"
