"""trail.json_rows: lists of objects written from columns are the bytes orjson writes for the dicts."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_drf.trail.json_rows import Listed, Nested, Splice, Value, dumps_spliced, float_each, object_list

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
_KEYS = st.text(min_size=1, max_size=8)


@st.composite
def _tables(draw: st.DrawFn) -> tuple[int, list[tuple[str, Any]]]:
    """A row count and fields: scalar columns (some of one repeated object) and nested objects of columns."""
    rows = draw(st.integers(min_value=1, max_value=6))

    def column() -> list[Any]:
        if draw(st.booleans()):
            value = draw(_SCALARS)
            return [value] * rows  # one object in every row: written as constant text
        return draw(st.lists(_SCALARS, min_size=rows, max_size=rows))

    fields: list[tuple[str, Any]] = []
    for key in draw(st.lists(_KEYS, min_size=1, max_size=5, unique=True)):
        if draw(st.integers(0, 3)) == 0:
            inner = draw(st.lists(_KEYS, max_size=3, unique=True))
            fields.append((key, Nested([(name, column()) for name in inner])))
        else:
            fields.append((key, column()))
    return rows, fields


def _as_dicts(rows: int, fields: list[tuple[str, Value]]) -> list[dict[str, Any]]:
    def value(field: Value, row: int) -> Any:
        if isinstance(field, Nested):
            return {name: column[row] for name, column in field.fields}
        if isinstance(field, Listed):
            return field.column[row]
        return field[row]

    return [{key: value(field, row) for key, field in fields} for row in range(rows)]


def _wrapped(pieces: tuple[bytes | memoryview, ...], depth: int, indent: bool) -> bytes:
    """The list as the value of a key `depth` levels deep: nested one-key objects around it."""
    text = b"".join(bytes(piece) for piece in pieces)
    opening = closing = b""
    for level in range(depth):
        pad = b"\n" + b"  " * (level + 1) if indent else b""
        opening += b"{" + pad + b'"k":' + (b" " if indent else b"")
        closing = (b"\n" + b"  " * level if indent else b"") + b"}" + closing
    return opening + text + closing


@settings(max_examples=300, deadline=None)
@given(table=_tables(), depth=st.integers(min_value=1, max_value=3), indent=st.booleans())
def test_object_list_is_what_orjson_writes_for_the_dicts(
    table: tuple[int, list[tuple[str, Value]]], depth: int, indent: bool
) -> None:
    rows, fields = table
    pieces = object_list(fields, rows, depth, indent)
    assert pieces is not None
    expected: Any = _as_dicts(rows, fields)
    for _ in range(depth):
        expected = {"k": expected}
    assert _wrapped(pieces, depth, indent) == orjson.dumps(expected, option=orjson.OPT_INDENT_2 if indent else 0)


def test_object_list_of_no_rows_and_of_values_it_cannot_cut() -> None:
    assert object_list([("a", [])], 0, 1, indent=True) == (b"[]",)
    # A list value spans lines when indented: the caller writes the plain way.
    assert object_list([("a", [[1, 2], [3]])], 2, 1, indent=True) is None
    # The same list object in every row is no scalar either.
    shared = [1, 2]
    assert object_list([("a", [shared, shared])], 2, 1, indent=True) is None


def test_dumps_spliced_puts_each_list_in_its_place() -> None:
    # The lists are the values of keys three levels deep: in objects of a list of the top object.
    first = object_list([("x", [1, 2])], 2, 3, indent=True)
    second = object_list([("y", ["a"])], 1, 3, indent=True)
    assert first is not None and second is not None
    data = {"pools": [{"name": "a", "rows": Splice(first)}, {"name": "b", "rows": Splice(second), "after": 1}]}
    expected = {"pools": [{"name": "a", "rows": [{"x": 1}, {"x": 2}]}, {"name": "b", "rows": [{"y": "a"}], "after": 1}]}
    option = orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE
    assert dumps_spliced(data, option) == orjson.dumps(expected, option=option)


def test_dumps_spliced_gives_up_when_a_string_of_the_data_is_a_marker() -> None:
    pieces = object_list([("x", [1])], 1, 1, indent=False)
    assert pieces is not None
    # The text the first splice's marker is written as, held by a string of the data.
    data = {"rows": Splice(pieces), "name": "\x00slurm-drf splice 0\x00"}
    assert dumps_spliced(data, 0) is None
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps_spliced({"a": object()}, 0)


def test_float_each_converts_each_object_once_and_keeps_the_order() -> None:
    from fractions import Fraction

    one, third = Fraction(1), Fraction(1, 3)
    assert float_each([one, third, one, Fraction(1, 3)]) == [1.0, 1 / 3, 1.0, 1 / 3]
    assert float_each([]) == []
