"""Plain-text building blocks every human-facing output shares: aligned tables, weights, shares."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns aligned; numbers to the right, text to the left."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    numeric = [all(_is_number(row[i]) for row in rows) and bool(rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(headers)), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def format_weight(weight: Fraction | float) -> str:
    """A weight as written in the config: 2, 0.5, 0.3."""
    if isinstance(weight, Fraction) and weight.denominator == 1:
        return str(weight.numerator)
    value = float(weight)
    return str(int(value)) if value.is_integer() else repr(value)


def format_share(share: float) -> str:
    """A share for people: four decimals (the exact value is in JSON and CSV)."""
    return f"{share:.4f}"
