"""What every `--json` output of Slurm has around its records: `meta` and `errors`.

Read by `slurm.parse.jobs` and `slurm.parse.nodes` for their record lists,
and by the sources for Slurm's version and the cluster's name.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from slurm_drf.errors import SlurmReadError

logger = logging.getLogger(__name__)


def _error_message(error: object) -> str:
    """One entry of the JSON `errors` list as text a person can act on.

    With slurmctld down, 22.05's squeue exits 0 and says only `{"description":
    "Failed while looking for jobs", "error": "Unspecified error", "source":
    "slurm_load_jobs"}` (measured): the failed call is named, and the one
    likely cause and how to check it are added.
    """
    if not isinstance(error, Mapping):
        return str(error)
    description = str(error.get("description") or "").strip()
    detail = str(error.get("error") or "").strip()
    source = str(error.get("source") or "").strip()
    message = description or detail or "no description"
    if detail and detail != message and detail.lower() != "unspecified error":
        message += f": {detail}"
    if source:
        message += f" (in {source})"
        if source.startswith("slurm_load_"):
            message += "; is slurmctld running? `scontrol ping` tells"
    return message


def check_errors(data: Mapping[str, Any], what: str, has_records: bool) -> None:
    """Slurm's `errors` beside the records: an error without records fails the read, else one warning."""
    errors = data.get("errors")
    if not isinstance(errors, list) or not errors:
        return
    message = _error_message(errors[0])
    if not has_records:
        raise SlurmReadError(f"{what} reported an error: {message}")
    logger.warning("%s reported %d error(s), the first: %s", what, len(errors), message)


def json_records(data: object, key: str, what: str) -> list[Any]:
    if not isinstance(data, Mapping):
        raise SlurmReadError(f"{what}: expected a JSON object, got {type(data).__name__}")
    records = data.get(key)
    check_errors(data, what, isinstance(records, list) and bool(records))
    if not isinstance(records, list):
        raise SlurmReadError(f"{what}: no '{key}' list in the output")
    return records


def parse_slurm_version(data: Mapping[str, Any]) -> str | None:
    """`22.05.8` from the JSON meta (`meta.Slurm` up to 23.02, `meta.slurm` after)."""
    meta = data.get("meta") if isinstance(data, Mapping) else None
    if not isinstance(meta, Mapping):
        return None
    slurm = meta.get("slurm") or meta.get("Slurm")
    if not isinstance(slurm, Mapping):
        return None
    release = slurm.get("release")
    if isinstance(release, str) and release.strip():
        return release.strip()
    version = slurm.get("version")
    if isinstance(version, Mapping):
        try:
            major, minor, micro = (int(version[k]) for k in ("major", "minor", "micro"))
        except (KeyError, TypeError, ValueError):
            return None
        return f"{major}.{minor:02d}.{micro}"
    return None


def parse_version_tuple(version: str | None) -> tuple[int, int] | None:
    """(23, 2) from `23.02.5`; None when there is no readable version."""
    if not version:
        return None
    match = re.match(r"^\s*(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def parse_json_cluster(data: Mapping[str, Any]) -> str | None:
    """The cluster name from 23.11+'s `meta.slurm.cluster` or a job's `cluster`."""
    meta = data.get("meta") if isinstance(data, Mapping) else None
    if isinstance(meta, Mapping):
        slurm = meta.get("slurm") or meta.get("Slurm")
        if isinstance(slurm, Mapping) and isinstance(slurm.get("cluster"), str) and slurm["cluster"]:
            return str(slurm["cluster"])
    jobs = data.get("jobs") if isinstance(data, Mapping) else None
    if isinstance(jobs, list):
        for job in jobs:
            if isinstance(job, Mapping) and isinstance(job.get("cluster"), str) and job["cluster"]:
                return str(job["cluster"])
    return None
