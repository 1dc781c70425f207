"""A command's JSON answer read as it arrives, one record of its list at a time.

At 55,000 jobs squeue's answer is 179 MB, and read whole it was held
three times at once: the bytes, their text and the parsed tree
(benchmarks/README.md, the 50,000-job cycle). `JsonAnswer` takes the
answer in pieces (`slurm.execute.stream_command`, or one piece from a
test's runner) and hands over the records of one list (`jobs`) one by
one; the caller reads each into a Job and drops it, so what stays is one
record and one piece of text. Each value is decoded by the standard
library's C scanner (`json.JSONDecoder.raw_decode`), which reads numbers
past 64 bits as Slurm prints them; only the outer object and the list are
walked here.

Everything that is not one JSON object with that list once is a
one-line SlurmReadError naming the command and the line and column: cut
short (then how many characters arrived), invalid, a member twice, NaN,
nesting past the recursion limit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Iterable, Iterator
from typing import Any, Final

from slurm_drf.errors import SlurmReadError


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON value")


_DECODER: Final = json.JSONDecoder(parse_constant=_no_constant)
_SPACE: Final = re.compile(r"[ \t\n\r]*")
_NUMBER_TAIL: Final = re.compile(r"[0-9eE.+-]*")


class _CutShort(Exception):
    """The text ended before the value did."""


class JsonAnswer:
    """The JSON object in `pieces` (text), its list `key` read a record at a time by `records()`.

    The other members (`meta`, `errors`: before the records up to Slurm
    23.02, after them since 23.11) are in `envelope` once `records()` is
    exhausted; `count` is how many records the list held, None when the
    answer had no such list. `name` (the command) starts every error.
    """

    def __init__(self, pieces: Iterable[str], key: str, name: str) -> None:
        self.key = key
        self.name = name
        self.envelope: dict[str, Any] = {}
        self.count: int | None = None
        self._pieces: Iterator[str] = iter(pieces)
        self._text = ""  # what has arrived and is not read yet, from self._at on
        self._at = 0
        self._ended = False
        self._before = 0  # characters dropped before self._text
        self._lines = 0  # newlines among them
        self._column = 0  # characters after the last of them

    # ------------------------------------------------------------------
    # The grammar: one object, one list of records in it

    def records(self) -> Iterator[Any]:
        """The records of the list, in order; then the rest of the object into `envelope`."""
        self._skip()
        if self._ended and self._at >= len(self._text):
            raise SlurmReadError(f"{self.name}: empty answer (exit status 0 but no JSON on standard output)")
        if not self._next_is("{"):
            value = self._value()
            raise SlurmReadError(f"{self.name}: expected a JSON object, got {type(value).__name__}")
        self._at += 1
        self._skip()
        if self._next_is("}"):
            self._at += 1
        else:
            yield from self._members()
        self._skip()
        if not (self._ended and self._at >= len(self._text)):
            raise self._error("more after the answer's object")

    def _members(self) -> Iterator[Any]:
        while True:
            member = self._value()
            if not isinstance(member, str):
                raise self._error("a member name must be a string")
            self._skip()
            self._expect(":")
            self._skip()
            if member in self.envelope or (member == self.key and self.count is not None):
                raise SlurmReadError(f"{self.name}: the member {member!r} appears twice in the answer")
            if member == self.key and self._next_is("["):
                self._at += 1
                yield from self._list()
            else:
                self.envelope[member] = self._value()
            self._skip()
            if not self._next_is(","):
                self._expect("}")
                return
            self._at += 1
            self._skip()

    def _list(self) -> Generator[Any]:
        self.count = 0
        self._skip()
        if self._next_is("]"):
            self._at += 1
            return
        while True:
            record = self._value()
            self.count += 1
            yield record
            self._skip()
            if not self._next_is(","):
                self._expect("]")
                return
            self._at += 1
            self._skip()

    # ------------------------------------------------------------------
    # The text as it arrives

    def _more(self) -> None:
        """Read at least as much again as is held (so a long value costs linear time), dropping what was read."""
        if self._ended:
            raise _CutShort
        dropped = self._text[: self._at]
        newline = dropped.rfind("\n")
        self._column = len(dropped) - newline - 1 if newline >= 0 else self._column + len(dropped)
        self._lines += dropped.count("\n")
        self._before += self._at
        pieces = [self._text[self._at :]]
        held = len(pieces[0])
        wanted = 2 * held or 1
        while not self._ended and held < wanted:
            piece = next(self._pieces, None)
            if piece is None:
                self._ended = True
            elif piece:
                pieces.append(piece)
                held += len(piece)
        self._text = "".join(pieces)
        self._at = 0

    def _value(self) -> Any:
        """The JSON value at the reading point, which then moves past it."""
        while True:
            try:
                value, end = _DECODER.raw_decode(self._text, self._at)
            except json.JSONDecodeError as error:
                if self._ended:
                    raise self._decode_error(error) from error
            except RecursionError as error:
                raise self._error("nested too deep", self._at) from error
            except ValueError as error:  # NaN, Infinity (_no_constant)
                raise self._error(str(error), self._at) from error
            else:
                # A number may go on in the next piece: "2" of "2e300" decodes, and so does "2" of "2e".
                if self._ended or _NUMBER_TAIL.match(self._text, end).end() < len(self._text):  # type: ignore[union-attr]
                    self._at = end
                    return value
            try:
                self._more()
            except _CutShort:
                raise self._cut_short() from None

    def _skip(self) -> None:
        while True:
            self._at = _SPACE.match(self._text, self._at).end()  # type: ignore[union-attr]  # matches ''
            if self._at < len(self._text) or self._ended:
                return
            self._more()

    def _next_is(self, token: str) -> bool:
        return self._text.startswith(token, self._at)

    def _expect(self, token: str) -> None:
        if not self._next_is(token):
            if self._ended and self._at >= len(self._text):
                raise self._cut_short()
            raise self._error(f"expected {token!r}")
        self._at += 1

    # ------------------------------------------------------------------
    # Errors, placed by line and column in the whole answer

    def _where(self, at: int) -> str:
        line = self._lines + self._text.count("\n", 0, at) + 1
        newline = self._text.rfind("\n", 0, at)
        column = at - newline if newline >= 0 else self._column + at + 1
        return f"line {line} column {column}"

    def _error(self, what: str, at: int | None = None) -> SlurmReadError:
        return SlurmReadError(f"{self.name}: invalid JSON at {self._where(self._at if at is None else at)}: {what}")

    def _cut_short(self) -> SlurmReadError:
        total = self._before + len(self._text)
        return SlurmReadError(
            f"{self.name}: answer cut short: its JSON stops at {self._where(len(self._text))} "
            f"after {total} characters, incomplete"
        )

    def _decode_error(self, error: json.JSONDecodeError) -> SlurmReadError:
        # The text ends inside the value: at its end, or inside a string (placed where it starts).
        if error.pos >= len(self._text.rstrip()) or error.msg.startswith("Unterminated string"):
            return self._cut_short()
        return self._error(error.msg, error.pos)
