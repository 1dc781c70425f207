"""The escaping of text that came from outside (Slurm's names, a trace's) for a terminal, one rule.

The bottom of the model: every layer that shows such text (trail's
tables, explain and reports; the simulator's tables and plots) escapes
it with `terminal_text`, so a name is shown the same way everywhere.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

# Escaped: C0 and C1 control characters and DEL; every invisible format
# character (Unicode category Cf: the bidirectional marks and overrides,
# which reorder what a terminal shows, U+061C, zero-width characters, tags);
# the line and paragraph separators, which break a line; lone surrogates,
# which no terminal encoding can write. Anything outside
# printable ASCII is looked at; the rest passes untouched.
_SUSPECT: Final = re.compile("[^\x20-\x7e]")
_ESCAPED_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _visible(match: re.Match[str]) -> str:
    character = match.group()
    if unicodedata.category(character) not in _ESCAPED_CATEGORIES:
        return character
    code = ord(character)
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(character)
    if named:
        return named
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def terminal_text(text: str) -> str:
    """`text` with control characters written as escapes (`\\n`, `\\x1b`, `\\x00`): one line, inert."""
    if text.isascii() and text.isprintable():
        return text  # all of it in 0x20-0x7e: nothing _SUSPECT looks at (a table of 100k rows asks this often)
    return _SUSPECT.sub(_visible, text)
