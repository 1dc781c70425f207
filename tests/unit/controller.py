"""An in-memory slurmctld for cycle tests: pending jobs, the updates the daemon sends, a crash."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from slurm_drf.model.types import Job, Node, Snapshot
from slurm_drf.slurm.write import Write, WriteResult
from tests.unit.builders import node, snapshot

_LINE = re.compile(r"update jobid=(?P<job>[0-9]+) (?P<key>nice|priority|sitefactor)=(?P<value>-?[0-9]+)")


class Controller:
    """A slurmctld's pending jobs: nice and priority per job, a saved copy, and a crash that goes back to it."""

    name = "controller"

    def __init__(self, jobs: Sequence[Job], nodes: Sequence[Node] = ()) -> None:
        self.nodes = list(nodes) or [node(cpu=64, mem=64000)]
        self.jobs = {j.job_id: j for j in jobs}
        self.saved = dict(self.jobs)
        self.site: dict[str, int] = {}

    def fetch_snapshot(self) -> Snapshot:
        return snapshot(self.nodes, list(self.jobs.values()))

    def apply(self, writes: Sequence[Write]) -> WriteResult:
        self.run_lines(
            [f"update jobid={w.job_id} {'sitefactor' if w.mode == 'site_factor' else w.mode}={w.value}" for w in writes]
        )
        return WriteResult(applied=tuple(w.job_id for w in writes))

    def run_lines(self, lines: Sequence[str]) -> tuple[dict[str, str], list[str]]:
        for line in lines:
            found = _LINE.fullmatch(line)
            if found is None:
                continue  # hold / release: nothing to model here
            current = self.jobs[found["job"]]
            value = int(found["value"])
            if found["key"] == "nice":
                self.jobs[found["job"]] = replace(current, nice=value)
            elif found["key"] == "priority":
                self.jobs[found["job"]] = replace(current, priority=value)
            else:  # multifactor adds the site factor to the priority
                self.site[found["job"]] = value
                self.jobs[found["job"]] = replace(current, priority=1000 + value)
        return {}, []

    def save(self) -> None:
        self.saved = dict(self.jobs)

    def crash(self) -> None:
        """SIGKILL and restart: every update since the last save is lost."""
        self.jobs = dict(self.saved)

    def nices(self) -> dict[str, int]:
        return {job_id: j.nice for job_id, j in self.jobs.items()}
