"""Plain-text building blocks every human-facing output shares: aligned tables, weights, shares,
and the escaping of names that come from Slurm (accounts, users, pools) for each kind of output.

Account names are whatever Slurm accepted: a name can hold a newline (a
forged line), an ESC sequence (a terminal command), `<script>` (in a
report page) or `=HYPERLINK(...)` (a spreadsheet formula). Every
human-facing renderer passes such text through one helper here:
`terminal_text` (tables, explain, plan), `markdown_cell`, `csv_cell`;
HTML uses `html.escape` over `terminal_text`. JSON stays exact.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from itertools import repeat
from typing import Final

from slurm_drf.model import escape

# The one rule of escaping, shared with the simulator (model.escape); every renderer here takes it from this module.
terminal_text = escape.terminal_text


# A lone `&` stays: it only matters before an entity name, and `<` is what starts a tag.
_MARKDOWN_SPECIAL: Final = re.compile(r"[\\|`*_\[\]<>]")
_MARKDOWN_ENTITIES: Final = {"<": "&lt;", ">": "&gt;"}


def markdown_cell(text: str) -> str:
    """`text` for a markdown table cell: one line, no table break, no HTML, no emphasis or links."""
    return _MARKDOWN_SPECIAL.sub(lambda m: _MARKDOWN_ENTITIES.get(m.group(), "\\" + m.group()), terminal_text(text))


# What makes a spreadsheet read a cell as a formula (OWASP, "CSV Injection").
_FORMULA_START: Final = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A text CSV cell a spreadsheet will not run: one that starts like a formula gets a leading `'`,
    control characters are escaped (`terminal_text`).

    Numbers pass as they are (a negative number is a number, not a formula).
    """
    if not isinstance(value, str):
        return value
    # Control characters escaped too: a bare CR (which the csv module does not
    # quote) or a newline would split the row for many readers.
    text = terminal_text(value)
    return "'" + text if value.startswith(_FORMULA_START) else text


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns aligned; numbers to the right, text to the left.

    Column by column, one conversion per column's kind of value: a day of
    `audit` writes is 30,000 rows of 15 cells (benchmarks/README.md).
    """
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"a row of {len(row)} cells under {len(headers)} headers")
    columns: list[Sequence[object]] = list(zip(*rows, strict=True)) if rows else [() for _ in headers]
    justified = []
    for header, column in zip(headers, columns, strict=True):
        kinds = set(map(type, column))
        cells = _column_cells(column, kinds)
        width = max(len(header), *map(len, cells)) if cells else len(header)
        numeric = bool(column) and (kinds <= {int, float} or all(map(_is_number, column)))
        justify = str.rjust if numeric else str.ljust
        justified.append([justify(header, width), "-" * width, *map(justify, cells, repeat(width))])
    return "\n".join("  ".join(line).rstrip() for line in zip(*justified, strict=True))


def _column_cells(column: Sequence[object], kinds: set[type]) -> list[str]:
    if kinds <= {int}:
        return list(map(str, column))
    if kinds <= {float}:
        return [f"{value:.4f}" for value in column]
    if kinds <= {bool}:
        return ["True" if value else "False" for value in column]
    if kinds <= {str}:
        texts: Sequence[str] = column  # type: ignore[assignment]
        whole = "".join(texts)
        # One look at the whole column: most are plain ASCII, and then no cell needs escaping.
        return list(texts) if whole.isascii() and whole.isprintable() else list(map(terminal_text, texts))
    return [_cell(value) for value in column]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return terminal_text(str(value))


def format_weight(weight: Fraction | float) -> str:
    """A weight as written in the config: 2, 0.5, 0.3."""
    if isinstance(weight, Fraction) and weight.denominator == 1:
        return str(weight.numerator)
    value = float(weight)
    return str(int(value)) if value.is_integer() else repr(value)


def format_share(share: float) -> str:
    """A share for people: four decimals (the exact value is in JSON and CSV)."""
    return f"{share:.4f}"


# Memory units for people, largest first: Slurm's `mem` TRES is in MiB.
_MEMORY_UNITS: Final = (("TiB", 1024 * 1024), ("GiB", 1024))


def format_tres(resource: str, amount: object) -> str:
    """An amount of a TRES for people: `mem` in MiB, GiB or TiB (`512000` -> `500 GiB`); others as they are.

    Exact where the amount is a whole number of the unit, else one decimal
    (`64000` -> `62.5 GiB`). JSON and CSV keep Slurm's raw number (MiB).
    """
    if resource != "mem" or isinstance(amount, bool) or not isinstance(amount, int):
        return terminal_text(str(amount))
    for unit, size in _MEMORY_UNITS:
        if abs(amount) >= size:
            if amount % size == 0:
                return f"{amount // size} {unit}"
            return f"{amount / size:.1f} {unit}"
    return f"{amount} MiB"


def format_capacity(capacity: Mapping[str, int]) -> str:
    """`cpu=64, mem=500 GiB, gres/gpu=8`."""
    return ", ".join(
        f"{terminal_text(resource)}={format_tres(resource, amount)}" for resource, amount in capacity.items()
    )


def node_label(name: str, kind: str) -> str:
    """A node of the account tree as tables name it: an account by name, a user as `alice (user)`."""
    return f"{name} (user)" if kind == "user" else name
