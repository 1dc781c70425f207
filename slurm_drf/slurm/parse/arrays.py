"""Job arrays: how many tasks a pending array record stands for.

Read by `slurm.parse.jobs` for a pending array record, which is written
through its array job id and counts once per pending task.
"""

from __future__ import annotations

import re
from typing import NamedTuple


class ArrayTasks(NamedTuple):
    """What a pending array record's `array_task_string` says."""

    tasks: int
    throttle: int | None
    truncated: bool


def parse_array_task_string(text: str) -> ArrayTasks:
    """`0-9`, `0-99%4`, `1,3,5-7`, `0-15:4` -> the number of tasks.

    A `%N` throttle limits how many run at once, not how many are pending,
    so it does not reduce the count. Slurm shortens long strings to 64
    characters ending in `...` unless SLURM_BITSTR_LEN=0 is set; then the
    count is a lower bound and `truncated` is true. Raises ValueError for
    text that is not a task list.
    """
    body = text.strip()
    throttle: int | None = None
    if "%" in body:
        body, _, limit = body.rpartition("%")
        if not limit.strip().isdigit():
            raise ValueError(f"bad array throttle in {text!r}")
        throttle = int(limit)
    body = body.strip().strip("[]")
    truncated = "..." in body
    if truncated:
        body = body.split("...", 1)[0]
    items = [item.strip() for item in body.split(",")]
    partial = items.pop() if truncated else None
    count = 0
    for item in items:
        match = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", item)
        if match is None:
            raise ValueError(f"bad array task list {text!r}")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        step = int(match.group(3)) if match.group(3) is not None else 1
        if last < first or step < 1:
            raise ValueError(f"bad array task range {item!r} in {text!r}")
        count += (last - first) // step + 1
    if partial:
        count += 1  # the cut-off item names at least one task
    if count < 1:
        raise ValueError(f"no array tasks in {text!r}")
    return ArrayTasks(count, throttle, truncated)
