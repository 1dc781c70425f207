"""Durations written by people: `90`, `60s`, `5m`, `1.5h`, `2d`, `2w` -> seconds.

Sits at the bottom of config with settings: the config file's `interval`
(config.checks), the simulator's options (sim.workload) and `audit --since`
(trail.history_db) all parse here. Pure; no clock (`--since` subtracts from
the `now` its caller holds).

The three places grew slightly different grammars, and files and scripts
already depend on each, so each keeps its own as a named `DurationSyntax`
and one parser reads them all. Callers turn the ValueError into their own
message.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Final

# Seconds per unit; a syntax accepts a subset.
UNIT_SECONDS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True, slots=True)
class DurationSyntax:
    """Which durations a caller accepts: a number, optionally one unit, spaces around."""

    # Unit letters accepted, from UNIT_SECONDS.
    units: str = "smhd"
    # A number without a unit is seconds (else the unit is required).
    bare_seconds: bool = True
    # Units in capitals too (`15M`).
    ignore_case: bool = False
    # `.5` (no digit before the point) and `1.` (none after it).
    leading_point: bool = True
    trailing_point: bool = True


# The config file's `interval`; schema.yaml's `duration` pattern is the same grammar.
CONFIG_SYNTAX: Final = DurationSyntax()

# `slurm-drf simulate --interval/--half-life/--duration`.
SIMULATE_SYNTAX: Final = DurationSyntax(ignore_case=True, leading_point=False, trailing_point=False)

# `slurm-drf audit --since 7d`: a unit is required, since a bare number
# there is more likely a mistyped date than seconds.
SINCE_SYNTAX: Final = DurationSyntax(units="smhdw", bare_seconds=False, leading_point=False)


def parse_duration(value: float | str, syntax: DurationSyntax = CONFIG_SYNTAX) -> float:
    """Seconds in `value`: a number (seconds, where bare numbers are), or text in `syntax`.

    Raises ValueError (`not a duration: ...`) for other text, numbers where a
    unit is required, and booleans; TypeError for values of other types.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        if not syntax.bare_seconds:
            raise ValueError(f"not a duration: {value!r}")
        return float(value)
    if not isinstance(value, str):
        # A value of the wrong type (the schema has said so already).
        raise TypeError(f"not a duration: {value!r}")
    # lower(), not re.IGNORECASE: IGNORECASE would also take look-alikes
    # such as U+017F (long s) for `s`.
    match = _pattern(syntax).fullmatch(value.lower() if syntax.ignore_case else value)
    if match is None:
        raise ValueError(f"not a duration: {value!r}")
    unit = match.group(2)
    return float(match.group(1)) * (UNIT_SECONDS[unit] if unit else 1)


@functools.cache
def _pattern(syntax: DurationSyntax) -> re.Pattern[str]:
    number = r"\d+(?:\.\d*)?" if syntax.trailing_point else r"\d+(?:\.\d+)?"
    if syntax.leading_point:
        number += r"|\.\d+"
    unit = f"([{syntax.units}]{'?' if syntax.bare_seconds else ''})"
    return re.compile(rf"\s*({number})\s*{unit}\s*")
