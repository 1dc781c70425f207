"""The lines of a Slurm command's text answer: split at "\n" only.

Every reader of Slurm's text output (`scontrol show config`, `scontrol show
assoc_mgr`, scontrol's errors, `sacct --parsable2`) takes its records from
here. `str.splitlines` would also split at U+2028, U+0085, a form feed,
\x1c to \x1e and a lone "\r", which a field may hold (a job's name, an
account, a comment): Slurm writes them through, and ends its records with
"\n" alone.
"""

from __future__ import annotations


def split_lines(text: str) -> list[str]:
    """The lines of `text`, split at "\n" only, a "\r" before it dropped (a file passed through Windows)."""
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
