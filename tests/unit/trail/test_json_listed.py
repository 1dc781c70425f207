"""trail.json_rows: a column of lists (a tree plan's path shares), and the grid laid out piece by piece,
written as orjson writes the dicts (issue 40: the plan of 100,000 jobs over a tree from columns)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import slurm_drf.trail.json_rows as json_rows
from slurm_drf.trail.json_rows import Listed, Value, dumps_spliced, dumps_spliced_pieces, object_list

_ITEMS = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=6)
_LISTS = st.none() | st.lists(_ITEMS, max_size=4) | st.lists(_ITEMS, max_size=4).map(tuple)


def _expected(fields: list[tuple[str, Value]], rows: int, depth: int, indent: bool) -> bytes:
    def value(field: Value, row: int) -> Any:
        return field.column[row] if isinstance(field, Listed) else field[row]  # type: ignore[index]

    data: Any = [{key: value(field, row) for key, field in fields} for row in range(rows)]
    for _ in range(depth):
        data = {"k": data}
    return orjson.dumps(data, option=orjson.OPT_INDENT_2 if indent else 0)


def _written(pieces: tuple[bytes | memoryview, ...], depth: int, indent: bool) -> bytes:
    text = b"".join(bytes(piece) for piece in pieces)
    opening = closing = b""
    for level in range(depth):
        pad = b"\n" + b"  " * (level + 1) if indent else b""
        opening += b"{" + pad + b'"k":' + (b" " if indent else b"")
        closing = (b"\n" + b"  " * level if indent else b"") + b"}" + closing
    return opening + text + closing


@settings(max_examples=300, deadline=None)
@given(
    rows=st.integers(1, 6),
    data=st.data(),
    depth=st.integers(1, 3),
    indent=st.booleans(),
    first=st.booleans(),
)
def test_a_column_of_lists_is_what_orjson_writes(
    rows: int, data: st.DataObject, depth: int, indent: bool, first: bool
) -> None:
    lists = data.draw(st.lists(_LISTS, min_size=rows, max_size=rows))
    other = data.draw(st.lists(_ITEMS, min_size=rows, max_size=rows))
    fields: list[tuple[str, Value]] = [("shares", Listed(lists)), ("n", other)]
    if not first:
        fields.reverse()
    pieces = object_list(fields, rows, depth, indent)
    assert pieces is not None
    assert _written(pieces, depth, indent) == _expected(fields, rows, depth, indent)


def test_a_list_of_lists_or_objects_takes_the_plain_way() -> None:
    assert object_list([("a", Listed([[[1]], [2]]))], 2, 1, indent=True) is None
    assert object_list([("a", Listed([{"x": 1}, [2]]))], 2, 1, indent=True) is None  # type: ignore[list-item]
    assert object_list([("a", Listed(["text", [2]]))], 2, 1, indent=True) is None


@pytest.mark.parametrize("piece", [1, 7, 1 << 20])
def test_the_grid_laid_out_in_pieces_is_the_same_text(piece: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_rows, "_GRID_PIECE", piece)
    rows = 50
    fields: list[tuple[str, Value]] = [
        ("id", [str(i) * (i % 4) for i in range(rows)]),
        ("shares", Listed([[i / 3] * (i % 3) for i in range(rows)])),
        ("n", list(range(rows))),
    ]
    for indent in (True, False):
        pieces = object_list(fields, rows, 1, indent)
        assert pieces is not None
        assert _written(pieces, 1, indent) == _expected(fields, rows, 1, indent)


def test_spliced_pieces_join_to_the_spliced_text() -> None:
    from slurm_drf.trail.json_rows import Splice

    listed = object_list([("a", [1, 2])], 2, 1, indent=True)
    assert listed is not None
    data = {"x": Splice(listed), "y": "z"}
    pieces = dumps_spliced_pieces(data, orjson.OPT_INDENT_2)
    assert pieces is not None and isinstance(pieces[-1], bytes)
    assert b"".join(pieces) == dumps_spliced(data, orjson.OPT_INDENT_2)
    assert dumps_spliced(data, orjson.OPT_INDENT_2) == orjson.dumps(
        {"x": [{"a": 1}, {"a": 2}], "y": "z"}, option=orjson.OPT_INDENT_2
    )
