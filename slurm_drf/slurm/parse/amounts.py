"""Amounts in any of Slurm's spellings: JSON numbers, TRES and GRES strings.

The lowest reader of `slurm.parse`: jobs, nodes and the accounting
(`slurm.sacct`) read their numbers and resources here. Memory is counted in
MiB, GPUs as `gres/gpu` (the untyped total) and `gres/gpu:TYPE`, never
twice.
"""

from __future__ import annotations

import logging
import math
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from fractions import Fraction
from typing import Final

from slurm_drf.errors import shorten
from slurm_drf.model.types import MAX_TRES

logger = logging.getLogger(__name__)

# Binary unit suffixes as Slurm prints them; TRES memory is counted in MiB.
_MIB_PER_SUFFIX: Final[Mapping[str, float]] = {
    "K": 1 / 1024,
    "M": 1,
    "G": 1024,
    "T": 1024**2,
    "P": 1024**3,
}
# GRES counts may carry the same suffixes as plain multipliers (gres.c).
_COUNT_PER_SUFFIX: Final[Mapping[str, int]] = {
    "K": 1024,
    "M": 1024**2,
    "G": 1024**3,
    "T": 1024**4,
    "P": 1024**5,
}
# ASCII digits only: Slurm prints no others, and int() would read any script's.
_AMOUNT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGTP]?)\s*$", re.IGNORECASE | re.ASCII)
# An amount with more digits before the point is past MAX_TRES (19 digits) even
# in KiB; it is refused before int() or float() sees it (a float of 400 digits
# is infinite, an int of 5000 past Python's digit limit).
_MAX_AMOUNT_DIGITS: Final = 24


# `tres_per_*` entries that are not generic resources (23.11+ tres_per_task
# holds `cpu:4`; licenses are counted by Slurm apart from GRES).
_NOT_GRES_PREFIXES: Final = ("cpu", "mem", "node", "billing", "license", "energy", "fs/", "bb/", "vmem")


# --------------------------------------------------------------------------
# Numbers in any of Slurm's JSON spellings


def parse_number(value: object) -> int | float | None:
    """A number from Slurm's JSON: None when unset, math.inf when infinite.

    Accepts a plain number, 23.02+'s `{"set", "infinite", "number"}` wrapper,
    and the complex mode's "Infinity"; raises ValueError for anything else.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    if isinstance(value, int | float):
        return value
    if isinstance(value, Mapping):
        if value.get("infinite") is True:
            return math.inf
        if value.get("set") is False:
            return None
        return parse_number(value.get("number"))
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("infinity", "infinite", "unlimited"):
            return math.inf
        try:
            return int(text)
        except ValueError:
            pass
    raise ValueError(f"expected a number, got {value!r}")


def whole_number(value: object, key: str) -> int | None:
    """A finite whole number >= 0, or None when unset or infinite."""
    number = parse_number(value)
    if number is None or number == math.inf:
        return None
    if number < 0 or not math.isfinite(number):
        raise ValueError(f"{key}: expected a number >= 0, got {value!r}")
    return round(number)


def shared_text(text: str) -> str:
    """One copy of a string a queue repeats (accounts, users, partitions, states), not one per job."""
    return sys.intern(text) if type(text) is str else text


def text_field(value: object, key: str) -> str:
    """A string field; null (complex mode, unset) reads as ''."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{key}: expected a string, got {value!r}")
    return value


# --------------------------------------------------------------------------
# TRES and GRES strings


def _split_top_level(text: str) -> Iterator[str]:
    """Comma-separated items, ignoring commas inside parentheses (IDX:0,2)."""
    depth = 0
    start = 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            yield text[start:index]
            start = index + 1
    yield text[start:]


def _strip_parentheses(text: str) -> str:
    out: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(char)
    return "".join(out)


def _memory_amount(text: str) -> int | None:
    """MiB from `8192`, `8G`, `1.50G`, `512K`, exactly (halves to even); None when not a number.

    ValueError for a number of more digits than any amount up to MAX_TRES
    has; a smaller one past MAX_TRES is returned for the caller to refuse.
    """
    match = _AMOUNT.match(text)
    if match is None:
        return None
    digits, suffix = match.group(1), match.group(2).upper() or "M"
    _check_digits(digits, text)
    if "." not in digits and suffix != "K":
        return int(digits) * int(_MIB_PER_SUFFIX[suffix])
    return round(Fraction(digits) * Fraction(_MIB_PER_SUFFIX[suffix]))


def _count_amount(text: str) -> int | None:
    """A count from `4`, `2k`; None when not a whole number; ValueError as `_memory_amount`."""
    match = _AMOUNT.match(text)
    if match is None or "." in match.group(1):
        return None
    _check_digits(match.group(1), text)
    suffix = match.group(2).upper()
    return int(match.group(1)) * (_COUNT_PER_SUFFIX[suffix] if suffix else 1)


def _check_digits(digits: str, text: str) -> None:
    if len(digits.partition(".")[0].lstrip("0")) > _MAX_AMOUNT_DIGITS:
        raise ValueError(f"{shorten(text.strip(), 40)} is past {MAX_TRES}")


def _is_untyped_gres(key: str) -> bool:
    return key.startswith("gres/") and ":" not in key


def _combine_gres(untyped: Mapping[str, int], typed: Mapping[tuple[str, str], int]) -> dict[str, int]:
    """GRES TRES keys without double counting typed and untyped amounts.

    When a name appears untyped, that amount is its total; when only typed
    entries appear, the total is their sum.
    """
    out: dict[str, int] = {}
    # Each name's typed total in one pass over the types: a string of many names stays linear.
    typed_totals: dict[str, int] = {}
    for (name, _), count in typed.items():
        typed_totals[name] = typed_totals.get(name, 0) + count
    for name in dict.fromkeys([*untyped, *typed_totals]):
        out[f"gres/{name}"] = untyped[name] if name in untyped else typed_totals[name]
    for (name, gres_type), count in typed.items():
        out[f"gres/{name}:{gres_type}"] = count
    return out


def parse_tres_entries(text: str, field: str | None = None) -> tuple[dict[str, int], frozenset[str]]:
    """TRES amounts and the set of untyped GRES keys the string itself wrote.

    With `field` (a job's TRES string, named so) an entry whose value is no
    amount from 0 to MAX_TRES (negative, an unknown unit, not a number, 400
    digits) is a ValueError naming the field and the entry: the job's
    record is not what Slurm prints, and counting it without that resource
    would be wrong. Without it (nodes, sacct) such entries are left out.
    """
    plain: dict[str, int] = {}
    untyped: dict[str, int] = {}
    typed: dict[tuple[str, str], int] = {}
    for item in text.split(","):
        name, sep, raw = item.strip().rpartition("=")
        name = name.strip()
        if not sep or not name:
            continue
        try:
            amount = _memory_amount(raw)
        except ValueError:
            if field is None:
                raise
            amount = None
        if field is not None and (amount is None or amount > MAX_TRES):
            raise ValueError(
                f"{field}: {shorten(name, 40)}={shorten(raw.strip(), 40)} is not an amount from 0 to {MAX_TRES}"
            )
        if amount is None:
            continue  # only numeric resource entries count
        if name.startswith("gres/"):
            gres_name, _, gres_type = name[len("gres/") :].partition(":")
            if gres_type:
                typed[(gres_name, gres_type)] = amount
            else:
                untyped[gres_name] = amount
        else:
            plain[name] = amount
    explicit = frozenset(f"gres/{name}" for name in untyped)
    return {**plain, **_combine_gres(untyped, typed)}, explicit


def parse_tres_string(text: str | None) -> dict[str, int]:
    """`cpu=2,mem=8G,node=1,billing=2,gres/gpu=2` -> {"cpu": 2, "mem": 8192, ...}.

    Memory (and any amount with a K/M/G/T/P suffix) is in MiB; entries that
    are not numbers are left out. A GPU type counted without its untyped
    total (`gres/gpu:a100=2` alone) also gives `gres/gpu` as the sum.
    """
    return parse_tres_entries(text or "")[0]


def _parse_gres_items(text: str, skip_prefixes: tuple[str, ...] = ()) -> dict[str, int]:
    untyped: dict[str, int] = {}
    typed: dict[tuple[str, str], int] = {}
    for raw_item in _split_top_level(text):
        item = _strip_parentheses(raw_item).strip()
        if not item or item.lower() in ("(null)", "n/a", "none"):
            continue
        lowered = item.lower()
        if lowered.startswith(("gres:", "gres/")):
            item = item[len("gres:") :]
        elif skip_prefixes and lowered.startswith(skip_prefixes):
            continue
        count: int | None
        if "=" in item:  # TRES spelling gres/gpu=2 or gres/gpu:a100=2
            head, _, tail = item.rpartition("=")
            parts = [p for p in head.split(":") if p]
            count = _count_amount(tail)
        else:
            parts = [p for p in item.split(":") if p]
            count = _count_amount(parts[-1]) if len(parts) > 1 else None
            if count is not None:
                parts = parts[:-1]
            else:
                count = 1  # a GRES named without a count is one of it
        parts = [p for p in parts if p.lower() != "no_consume"]
        if count is None or not parts or len(parts) > 2:
            raise ValueError(f"cannot read GRES {raw_item.strip()!r}")
        name = parts[0]
        types = parts[1:]
        if types:
            key = (name, types[0])
            typed[key] = typed.get(key, 0) + count
        else:
            untyped[name] = untyped.get(name, 0) + count
    return _combine_gres(untyped, typed)


def parse_gres(text: str | None) -> dict[str, int]:
    """A GRES string as TRES amounts, never counting a GPU twice.

    Reads node GRES (`gpu:a100:4(S:0-1)`, `gpu:8(IDX:0-7)`), job GRES
    (`gres:gpu:4`, `gres/gpu:2`, `gres/gpu:a100:2`) and comma lists of
    them: `gpu:a100:4(S:0-1),gpu:v100:2` -> {"gres/gpu": 6,
    "gres/gpu:a100": 4, "gres/gpu:v100": 2}. Raises ValueError for an item
    it cannot read.
    """
    return _parse_gres_items(text or "")


def parse_tres_per(text: str | None) -> dict[str, int]:
    """The GRES in a `tres_per_job/node/task/socket` string, as TRES amounts.

    23.11+ also puts `cpu:4` (cpus per task) and licenses there; those are
    not GRES and are left out.
    """
    return _parse_gres_items(text or "", skip_prefixes=_NOT_GRES_PREFIXES)


class WarningCount:
    """How many warnings the readers of a record logged (`warned`).

    A reader that caches what it read of one record for the next record of
    the same fields (`slurm.parse.jobs`) caches nothing that warned, so each
    record with an odd field is named in a warning of its own.
    """

    count = 0

    def warned(self, log: logging.Logger, message: str, *args: object) -> None:
        self.count += 1
        log.warning(message, *args)


WARNINGS: Final = WarningCount()


def lenient_gres(parse: Callable[[str | None], dict[str, int]], text: str, what: str) -> dict[str, int]:
    """GRES amounts, or none with a warning: an odd GRES string must not hide
    the rest of a node or job (its CPUs and memory still count)."""
    try:
        return parse(text)
    except ValueError as error:
        WARNINGS.warned(logger, "%s: %s; its GRES are not counted", what, error)
        return {}


def gres_names(tres: Mapping[str, int]) -> set[str]:
    return {key[len("gres/") :].split(":", 1)[0] for key in tres if key.startswith("gres/")}


def merge_gres(tres: dict[str, int], explicit: frozenset[str], extra: Mapping[str, int]) -> None:
    """Add GRES amounts the TRES string lacks; an untyped total it wrote wins."""
    for key, amount in extra.items():
        if key not in tres:
            tres[key] = amount
        elif _is_untyped_gres(key) and key not in explicit:
            # The total was only the sum of the types Slurm accounts for.
            tres[key] = max(tres[key], amount)
