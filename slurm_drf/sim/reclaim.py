"""`drf-reclaim`: the daemon's loop with guarantees and reclaim, as docs/rule.md §9 has them.

Each account is guaranteed its weighted fair share of the cluster (its
weight over the sum of the workload's weights, of every resource). Every
tick, before the order:

- once an account's first pending job within its guarantee has waited
  `after`, each of its jobs within its guarantee (a *claim*; an account's
  jobs in Slurm's order, the accounts furthest below their guarantees
  first) gets the victims `policy.reclaim` picks for it, the same code the
  daemon runs, within the tick's budget;
  the engine requeues them (`Simulator.requeue`: their run lost, pending
  again after Slurm's requeue delay);
- then the order puts the jobs within their guarantees first
  (`policy.guarantees.guaranteed_first`), so that the claims take the room
  the victims leave.

A claim that fits in what is free needs no victim: it holds that room for
the claims after it in the same tick, as the scheduler will give it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Final

from slurm_drf.config.settings import Config
from slurm_drf.policy.guarantees import UNNAMED
from slurm_drf.policy.reclaim import Accounts, Claim, Rules, Running, choose_victims, fitting_nodes
from slurm_drf.sim.daemon_loop import SlurmSide
from slurm_drf.sim.policies import RECLAIM_POLICY, LoopDrfPolicy
from slurm_drf.sim.table import Vector
from slurm_drf.sim.view import SimulatorView

# Ten minutes' run at least; a job requeued once is never a victim again (newest-first would
# otherwise pick a restarted victim first, again and again: Kueue #7101); four victims a tick.
DEFAULT_RULES: Final = Rules(min_runtime=600.0, cooldown=math.inf, budget=4)


@dataclass(frozen=True, slots=True)
class ReclaimSettings:
    """When a claim triggers (`after` seconds of waiting within its guarantee) and `policy.reclaim.Rules`."""

    after: float = 600.0
    rules: Rules = DEFAULT_RULES


class ReclaimPolicy(LoopDrfPolicy):
    """The daemon's label loop, with guarantees in its order and reclaim before it."""

    def __init__(
        self, config: Config | None = None, slurm: SlurmSide | None = None, settings: ReclaimSettings | None = None
    ) -> None:
        super().__init__("labels", config, slurm)
        self.name = RECLAIM_POLICY
        self.settings = settings or ReclaimSettings()
        self.moved: dict[int, float] = {}  # job -> when a reclaim last requeued it

    def bind(self, sim: SimulatorView) -> None:
        super().bind(sim)
        accounts = sim.table.accounts
        weights = [sim.workload.weight(a) for a in accounts]
        total = sum(weights, Fraction(0))
        self.guarantee: list[Vector] = [
            (
                math.floor(w / total * sim.capacity[0]),
                math.floor(w / total * sim.capacity[1]),
                math.floor(w / total * sim.capacity[2]),
            )
            for w in weights
        ]
        self.guarantee_rows = [
            [UNNAMED if missing else int(g[column]) for column, missing in zip(self.columns, self.missing, strict=True)]
            for g in self.guarantee
        ]
        self.weights = dict(zip(accounts, weights, strict=True))

    def reclaim(self, now: float) -> Sequence[int]:
        sim, table = self.sim, self.table
        free: dict[str, tuple[int, ...]] = {str(node): vector for node, vector in enumerate(sim.node_free())}
        running = [
            Running(
                str(job),
                table.accounts[table.job_account[job]],
                {str(node): table.job_demand[job] for node in sim.node_of[job]},
                sim.start_time[job],
                moved_at=self.moved.get(job),
            )
            for job in sim.running
        ]
        usage = {name: tuple(int(x) for x in sim.usage[a]) for a, name in enumerate(table.accounts)}
        named = {name: dict(enumerate(self.guarantee[a])) for a, name in enumerate(table.accounts)}
        budget = self.settings.rules.budget
        victims: list[int] = []
        for job in self._claims(now):
            accounts = Accounts(sim.capacity, usage, self.weights, named)
            claim = Claim(
                str(job),
                table.accounts[table.job_account[job]],
                table.job_demand[job],
                table.job_nodes_wanted[job],
                frozenset(free),
            )
            got = choose_victims(claim, free, running, accounts, now, replace(self.settings.rules, budget=budget))
            nodes = list(got.nodes) or fitting_nodes(free, claim, key=int)
            if not nodes:
                continue
            gone = set(got.victims)
            for victim in (r for r in running if r.job_id in gone):
                for node, allocation in victim.allocation.items():
                    free[node] = tuple(f + a for f, a in zip(free[node], allocation, strict=True))
                usage[victim.account] = tuple(u - t for u, t in zip(usage[victim.account], victim.total, strict=True))
                self.moved[int(victim.job_id)] = now
                victims.append(int(victim.job_id))
            running = [r for r in running if r.job_id not in gone]
            budget -= len(gone)
            for node in nodes:  # the claim's room, as the scheduler will give it
                free[node] = tuple(f - d for f, d in zip(free[node], claim.per_node, strict=True))
            total = tuple(d * claim.nodes for d in claim.per_node)
            usage[claim.account] = tuple(u + d for u, d in zip(usage[claim.account], total, strict=True))
        return victims

    def _claims(self, now: float) -> list[int]:
        """The pending jobs within their account's guarantee, of the accounts whose first such job has
        waited `after` (the account has waited within its guarantee that long): each account's in
        Slurm's order, up to its first that is not within; the accounts furthest below first."""
        sim, table = self.sim, self.table
        found: list[tuple[float, float, int]] = []
        for account, records in enumerate(sim.pending_records()):
            limit = self.guarantee[account]
            used = [int(x) for x in sim.usage[account]]
            below = max((u / g for u, g in zip(used, limit, strict=True) if g), default=math.inf)
            within = self._within(records, used, limit)
            if within and now - table.job_submit[within[0]] >= self.settings.after:
                found.extend((below, table.job_submit[job], job) for job in within)
        return [job for *_, job in sorted(found)]

    def _within(self, records: Sequence[int], used: list[int], limit: Vector) -> list[int]:
        """An account's pending jobs (of `records`, in order) within its guarantee, from `used` on."""
        table = self.table
        out: list[int] = []
        for record in records:
            for job in self.sim.pending_tasks(record):
                used = [u + t for u, t in zip(used, table.shape_total[table.job_shape[job]], strict=True)]
                if any(u > g for u, g in zip(used, limit, strict=True)):
                    return out
                out.append(job)
        return out
