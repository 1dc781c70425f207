"""The numbers that compare policies, reduced from one `options.SimResult`. Pure.

Sits after `engine` and before `render`. Definitions:

- *weighted dominant share* of an account at a sample: max over cpu, mem
  and gres/gpu of its running usage / capacity, divided by its weight (the
  engine's S_a, docs/rule.md §2). The engine samples it every `interval` seconds,
  after that instant's scheduling pass.
- an account is *backlogged* at a sample when it has a pending job.
- *Jain's index* at a sample: (sum x)^2 / (n sum x^2) over the weighted
  dominant shares x of the n backlogged accounts, at samples where n >= 2
  and some x > 0 (all zero is no allocation to judge). Reported: the mean
  over those samples; 1 is perfectly even, 1/n is one account with
  everything.
- *share ratio*: each account's mean weighted share over the samples above
  where it is backlogged; the largest of these over the smallest (inf when
  a backlogged account never ran).
- *share to date* of an account at a sample: its weighted dominant share
  averaged over time from the start of the run to that sample (skipped
  idle ticks count as zero): what it has had so far, the past included.
  *Jain over time*: the mean, over the samples where Jain's index is taken,
  of Jain's index of the backlogged accounts' shares to date; 1 when every
  waiting account has had the same share of the cluster since the start
  (what memory of past use aims at, docs/rule.md §6). Per account, its
  share to date at the last such sample (the end of contention; nan if
  none), and over the whole run (`run_share`, fixed by the work the account
  brings once every job has run, whatever the order).
- waits: start - submit of each job (task); p50, p95 and the maximum per
  account; the longest wait overall.
- utilisation: allocated / capacity per resource, averaged over the
  samples at which some job was pending (the part of the run the policy
  can affect), and over the whole run.
- writes per cycle (policies that model the daemon's writes, `sim.daemon_loop`):
  the jobs written to Slurm at each plan; mean, median and maximum over
  the plans, and their total. Ticks skipped while nothing ran or waited
  wrote nothing and are not counted.
- per-level Jain (workloads with an account tree, `sim.tree_layout`): the tree's
  nodes are the parent accounts, the accounts and, below each account, its
  users. A node is *backlogged* at a sample when its subtree has a pending
  job. A node's weighted dominant share is that of its subtree's running
  allocation (the users' allocations summed) over its weight
  (`tree_layout.node_shares`). At each depth, Jain's index is taken over the
  backlogged children of each node of the depth above that has at least
  two (siblings, since weights and shares are relative to siblings), and
  averaged over those parents; reported: the mean over the samples where
  some parent qualifies.
- *fair share* of an account at a sample (the target of the two measures
  below): the demand-capped weighted fair share, by water-filling. An
  account's *demand* is the dominant share (of the capacity, unweighted)
  of everything it runs or has pending at that sample, at most 1. The
  root hands out min(1, total demand) among its children in proportion to
  their weights, no child getting more than its demand, the rest going to
  the others (water-filling); with a tree, each node hands its part to its
  children the same way (a node's demand: its subtree's summed, at most
  1), down to the accounts. Flat workloads are a tree of one level.
- *fairness error* (Armada's definition, armadaproject/armada #3773): at a
  sample, the sum over the accounts below their fair share of (fair share
  - actual dominant share); reported: the mean over the samples where
  Jain's index is taken. 0 is every account at or above its fair share.
- *time to fair share* of an account that joins a full cluster (over the
  10 minutes before its first submission, at least the last two samples,
  the cluster held on average at least 75% of some resource and other
  accounts had jobs pending at every sample: `joined_full`; one job
  pending at one sample on an idle cluster is not a full cluster): the time from that
  submission to the first sample at which its dominant share is at least
  90% of its fair share (inf: never). Reported per such account, and
  overall the longest of them (nan when no account joined a full cluster).
- *finish-time fairness* rho (Themis, Mahajan et al., NSDI 2020) of a job:
  its time in the shared cluster (end - submit) over its run time with
  its account's slice of the cluster to itself. The slice is the account's
  fair share when every account wants everything: 1/N of the cluster for
  N equal accounts, by the weights and the tree otherwise. A job whose
  dominant share is larger than the slice runs proportionally longer on it
  (run time x dominant share / slice). rho = 1: as fast as on its own
  slice; above 1: slower for sharing. Per account: the mean over its jobs;
  overall: the largest account's (Themis minimises it). A job a replay
  cut off counts to the cut, as its wait does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from slurm_drf.model.types import BoolArray, FloatArray, IntArray
from slurm_drf.sim.options import SimResult
from slurm_drf.sim.table import build_workload_table
from slurm_drf.sim.tree_layout import TreeLayout, build_layout, node_shares
from slurm_drf.sim.workload import RESOURCES, Workload


@dataclass(frozen=True, slots=True)
class WriteMetrics:
    """Jobs written to Slurm per daemon cycle (plan)."""

    cycles: int
    mean: float
    median: float
    max: int
    total: int


@dataclass(frozen=True, slots=True)
class AccountMetrics:
    account: str
    weight: float
    jobs: int
    mean_share: float  # while backlogged (nan if never)
    backlogged_samples: int
    wait_p50: float
    wait_p95: float
    wait_max: float
    share_to_date: float = math.nan  # at the last fairness sample
    run_share: float = math.nan  # over the whole run
    time_to_fair_share: float = math.nan  # nan: did not join a full cluster; inf: never reached it
    rho: float = math.nan  # Themis' finish-time fairness, the mean over its jobs


@dataclass(frozen=True, slots=True)
class LevelJain:
    """Jain's index among backlogged siblings at one depth of the account tree."""

    depth: int
    nodes: str  # what sits at that depth: parents, accounts, users (or a mix, joined by "+")
    jain: float  # mean over the samples where some parent has >= 2 backlogged children (nan if none)
    samples: int


@dataclass(frozen=True, slots=True)
class PolicyMetrics:
    policy: str
    jain: float  # mean over fairness samples (nan if none)
    jain_min: float
    fairness_samples: int
    share_ratio: float
    longest_wait: float
    longest_wait_account: str
    mean_wait: float
    utilisation: dict[str, float]  # while jobs wait
    utilisation_overall: dict[str, float]
    makespan: float
    backfilled: float  # fraction of jobs started by backfill
    plans: int
    accounts: tuple[AccountMetrics, ...]
    jain_series: FloatArray  # per sample; nan where not a fairness sample
    writes: WriteMetrics | None = None  # for policies that model the daemon's writes
    jain_over_time: float = math.nan  # of the backlogged accounts' shares to date, mean over fairness samples
    levels: tuple[LevelJain, ...] = ()  # per depth of the account tree; empty for a flat workload
    fairness_error: float = math.nan  # Armada's, mean over fairness samples
    time_to_fair_share: float = math.nan  # the longest of the accounts that joined a full cluster
    rho_max: float = math.nan  # Themis' finish-time fairness: the largest account's


def compute_write_metrics(writes: IntArray) -> WriteMetrics:
    if not len(writes):
        return WriteMetrics(0, math.nan, math.nan, 0, 0)
    return WriteMetrics(
        len(writes), float(writes.mean()), float(np.median(writes)), int(writes.max()), int(writes.sum())
    )


def jain_index(values: FloatArray) -> float:
    """(sum x)^2 / (n sum x^2); nan for no values or all zero."""
    squares = float(np.dot(values, values))
    if len(values) == 0 or squares == 0.0:
        return math.nan
    return float(values.sum()) ** 2 / (len(values) * squares)


def compute_sample_jain(shares: FloatArray, backlogged: BoolArray) -> tuple[FloatArray, BoolArray]:
    """Per sample, Jain's index of the backlogged accounts' shares, and whether it is a
    fairness sample (two or more backlogged, not all at zero); nan where it is not."""
    samples = shares.shape[0]
    jain = np.full(samples, np.nan)
    fair = np.zeros(samples, dtype=np.bool_)
    for index in np.flatnonzero(backlogged.sum(axis=1) >= 2).tolist():
        value = jain_index(shares[index][backlogged[index]])
        if not math.isnan(value):
            jain[index] = value
            fair[index] = True
    return jain, fair


def used_fractions(result: SimResult) -> FloatArray:
    """(S, 3) each sample's allocation over capacity, per resource (0 where there is no capacity)."""
    capacity = np.maximum(np.array(result.capacity, dtype=np.float64), 1)
    fractions: FloatArray = result.sample_used.astype(np.float64) / capacity
    return fractions


def compute_utilisation(result: SimResult) -> tuple[dict[str, float], dict[str, float]]:
    """Each resource's mean use, while jobs wait and over the whole run."""
    samples = result.sample_share.shape[0]
    used = used_fractions(result)
    waiting = result.sample_pending.sum(axis=1) > 0
    utilisation = {r: float(used[waiting, i].mean()) if waiting.any() else math.nan for i, r in enumerate(RESOURCES)}
    # Skipped idle ticks sampled zero use: they count in the mean, not in the sum.
    ticks = samples + result.idle_ticks
    overall = {r: float(used[:, i].sum() / ticks) if samples else math.nan for i, r in enumerate(RESOURCES)}
    return utilisation, overall


def contended_utilisation(result: SimResult) -> dict[str, float]:
    """Each resource's mean use over the samples where at least two accounts have jobs pending.

    The samples Jain's index is taken over: utilisation while work waits
    also counts the end of a finite workload, when one account's jobs are
    all that is left (whole-node jobs waiting for nodes to drain, say).
    """
    contended = (result.sample_pending > 0).sum(axis=1) >= 2
    used = used_fractions(result)[contended]
    return {r: float(used[:, i].mean()) if contended.any() else math.nan for i, r in enumerate(RESOURCES)}


def _share_ratio(judged: FloatArray) -> float:
    """The largest mean share over the smallest; nan for fewer than two accounts."""
    if len(judged) < 2:
        return math.nan
    return math.inf if judged.min() <= 0 else float(judged.max() / judged.min())


def compute_metrics(result: SimResult) -> PolicyMetrics:
    shares = result.sample_share
    backlogged = result.sample_pending > 0
    jain, fair = compute_sample_jain(shares, backlogged)
    counted = backlogged & fair[:, None]
    per_account_samples = counted.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_share = np.where(per_account_samples > 0, (shares * counted).sum(axis=0) / per_account_samples, np.nan)
    share_ratio = _share_ratio(mean_share[per_account_samples > 0])

    to_date = shares_to_date(result)
    over_time = [jain_index(to_date[i][backlogged[i]]) for i in np.flatnonzero(fair).tolist()]
    last_fair = np.flatnonzero(fair)
    at_end = to_date[last_fair[-1]] if len(last_fair) else np.full(len(result.accounts), np.nan)
    # Over the run: the ticks before the last job ended (the skipped idle ones among them).
    makespan = float(result.end.max())
    run_ticks = max(1, math.ceil(makespan / result.interval))
    run_share = shares[result.sample_time < makespan].sum(axis=0) / run_ticks

    target = fair_shares(result)
    actual = shares * np.array(result.weights, dtype=np.float64)
    below = np.maximum(target - actual, 0.0).sum(axis=1)
    fairness_error = float(below[fair].mean()) if fair.any() else math.nan
    to_fair = times_to_fair_share(result, target, actual)

    wait = result.start - result.submit
    rho = finish_time_fairness(result)
    rows = []
    for index, account in enumerate(result.accounts):
        mine = wait[result.job_account == index]
        my_rho = rho[(result.job_account == index) & ~np.isnan(rho)]
        rows.append(
            AccountMetrics(
                account=account,
                weight=result.weights[index],
                jobs=len(mine),
                mean_share=float(mean_share[index]),
                backlogged_samples=int(per_account_samples[index]),
                wait_p50=float(np.percentile(mine, 50)) if len(mine) else math.nan,
                wait_p95=float(np.percentile(mine, 95)) if len(mine) else math.nan,
                wait_max=float(mine.max()) if len(mine) else math.nan,
                share_to_date=float(at_end[index]),
                run_share=float(run_share[index]),
                time_to_fair_share=float(to_fair[index]),
                rho=float(my_rho.mean()) if len(my_rho) else math.nan,
            )
        )
    rhos = [a.rho for a in rows if not math.isnan(a.rho)]
    longest = int(np.argmax(wait))
    utilisation, overall = compute_utilisation(result)
    finite = jain[fair]
    return PolicyMetrics(
        policy=result.policy,
        jain=float(finite.mean()) if len(finite) else math.nan,
        jain_min=float(finite.min()) if len(finite) else math.nan,
        fairness_samples=int(fair.sum()),
        share_ratio=share_ratio,
        longest_wait=float(wait[longest]),
        longest_wait_account=result.accounts[int(result.job_account[longest])],
        mean_wait=float(wait.mean()),
        utilisation=utilisation,
        utilisation_overall=overall,
        makespan=makespan,
        backfilled=float(result.backfilled.mean()),
        plans=result.plans,
        accounts=tuple(rows),
        jain_series=jain,
        writes=None if result.writes is None else compute_write_metrics(result.writes),
        jain_over_time=float(np.mean(over_time)) if over_time else math.nan,
        levels=compute_level_jain(result),
        fairness_error=fairness_error,
        time_to_fair_share=float(to_fair[~np.isnan(to_fair)].max()) if (~np.isnan(to_fair)).any() else math.nan,
        rho_max=max(rhos) if rhos else math.nan,
    )


def demand_samples(result: SimResult) -> FloatArray:
    """(S, A) each account's demand at each sample: the dominant share of what it runs or has pending, at most 1.

    A job is counted from its submission (inclusive) to its end
    (exclusive): the sample of an instant is taken after its events.
    """
    times = result.sample_time
    table = build_workload_table(result.workload)
    total = np.array(table.shape_total, dtype=np.float64)[table.job_shape_array]
    submitted = np.searchsorted(times, result.submit, side="left")
    ended = np.searchsorted(times, result.end, side="left")
    held = np.zeros((len(times) + 1, len(result.accounts), len(RESOURCES)), dtype=np.float64)
    np.add.at(held, (submitted, result.job_account), total)
    np.add.at(held, (ended, result.job_account), -total)
    caps = np.maximum(np.array(result.capacity, dtype=np.float64), 1.0)
    demand: FloatArray = np.minimum((np.cumsum(held, axis=0)[: len(times)] / caps).max(axis=2), 1.0)
    return demand


def water_fill(amount: float, demand: FloatArray, weight: FloatArray) -> FloatArray:
    """`amount` split in proportion to `weight`, nobody above its `demand`, the rest to the others."""
    out = np.zeros(len(demand), dtype=np.float64)
    amount = min(amount, float(demand.sum()))
    left = np.flatnonzero(demand > 0)
    while len(left) and amount > 1e-12:
        level = amount / float(weight[left].sum())
        capped = demand[left] <= level * weight[left]
        if not capped.any():
            out[left] = level * weight[left]
            break
        done = left[capped]
        out[done] = demand[done]
        amount -= float(demand[done].sum())
        left = left[~capped]
    return out


def _fill_tree(
    layout: TreeLayout, accounts: Mapping[int, int], weight: FloatArray, node_demand: FloatArray
) -> FloatArray:
    """(N,) what each node of the tree gets of the whole cluster, water-filled from the root down."""
    allotted = np.zeros(layout.size, dtype=np.float64)
    allotted[0] = 1.0
    for node in range(layout.size):  # preorder: a parent before its children
        kids = [k for k in layout.children[node] if node not in accounts]
        if kids:
            allotted[kids] = water_fill(allotted[node], node_demand[kids], weight[kids])
    return allotted


def _tree_of(workload: Workload) -> tuple[TreeLayout, dict[int, int], FloatArray]:
    layout = build_layout(workload, build_workload_table(workload))
    accounts = {node: index for index, node in enumerate(layout.account_node)}
    return layout, accounts, np.array([float(w) for w in layout.weight], dtype=np.float64)


def fair_shares(result: SimResult) -> FloatArray:
    """(S, A) each account's demand-capped weighted fair share (module docstring), over its tree if any."""
    workload = result.workload
    demand = demand_samples(result)
    if not len(demand):
        return demand
    layout, accounts, weight = _tree_of(workload)
    # Each node's demand: its accounts' summed, at most 1 (the users below an account hold none here).
    node_demand = np.zeros((len(demand), layout.size), dtype=np.float64)
    node_demand[:, list(accounts)] = demand[:, list(accounts.values())]
    for node in range(layout.size - 1, 0, -1):
        node_demand[:, layout.parent[node]] += node_demand[:, node]
    node_demand = np.minimum(node_demand, 1.0)
    out = np.zeros_like(demand)
    for sample in range(len(demand)):
        out[sample] = _fill_tree(layout, accounts, weight, node_demand[sample])[list(layout.account_node)]
    return out


def finish_time_fairness(result: SimResult) -> FloatArray:
    """(J,) Themis' finish-time fairness rho of each job (module docstring); nan for a job of no run time."""
    jobs = result.workload.jobs
    if not jobs:
        return np.zeros(0, dtype=np.float64)
    layout, accounts, weight = _tree_of(result.workload)
    # Every node wanting all of it: each account's slice of the cluster (1/N for N equal accounts).
    slices = _fill_tree(layout, accounts, weight, np.ones(layout.size))[list(layout.account_node)]
    caps = np.maximum(np.array(result.capacity, dtype=np.float64), 1.0)
    dominant = (np.array([j.total() for j in jobs], dtype=np.float64) / caps).max(axis=1)
    duration = np.array([j.duration for j in jobs], dtype=np.float64)
    mine = slices[result.job_account]
    alone = duration * np.maximum(1.0, np.divide(dominant, mine, out=np.full_like(mine, np.inf), where=mine > 0))
    rho: FloatArray = np.divide(
        result.end - result.submit, alone, out=np.full_like(alone, np.nan), where=(alone > 0) & np.isfinite(alone)
    )
    return rho


# An account joins a full cluster when, over FULL_STRETCH before its first submission (at least
# FULL_SAMPLES samples: the last ones before it where samples are sparser), the cluster held on
# average at least FULL_USE of some resource and other accounts had jobs pending at every sample.
# 75%, not more: jobs placed on nodes leave what no pending job fits (a live four-node sandbox, its
# memory-heavy jobs pending at every sample, ran at 80-91% of memory in the ten minutes before a
# newcomer joined). On average, not at every sample: the same trace under another order dipped to
# 71% for two of twenty samples 30 s apart while the same accounts waited, and a rule met at every
# sample then counted the newcomer in one arm of a comparison and not in the other.
FULL_USE: Final = 0.75
FULL_STRETCH: Final = 600.0
FULL_SAMPLES: Final = 2


def joined_full(result: SimResult, index: int, first: float, used: FloatArray) -> bool:
    """Whether account `index`, first submitting at `first`, joined a full cluster (FULL_USE's comment);
    `used` is `used_fractions(result)`."""
    times = result.sample_time
    before = int(np.searchsorted(times, first, side="left"))  # samples [0, before) are before it
    start = min(int(np.searchsorted(times, first - FULL_STRETCH, side="left")), before - FULL_SAMPLES)
    if start < 0:
        return False
    others = np.delete(result.sample_pending[start:before], index, axis=1).sum(axis=1)
    return bool(used[start:before].mean(axis=0).max() >= FULL_USE and (others > 0).all())


def times_to_fair_share(result: SimResult, fair: FloatArray, actual: FloatArray) -> FloatArray:
    """(A,) each account's time to fair share (module docstring): nan unless it joined a full cluster."""
    times = result.sample_time
    used = used_fractions(result)
    out = np.full(len(result.accounts), np.nan)
    for index in range(len(result.accounts)):
        mine = result.submit[result.job_account == index]
        if not len(mine) or not len(times):
            continue
        first = float(mine.min())
        if not joined_full(result, index, first, used):
            continue
        after = np.flatnonzero((times >= first) & (fair[:, index] > 0) & (actual[:, index] >= 0.9 * fair[:, index]))
        out[index] = float(times[after[0]] - first) if len(after) else math.inf
    return out


def tree_samples(result: SimResult, layout: TreeLayout) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """(S, N, 3) each node's running allocation at each sample (zeros but at leaves), and (S, N) backlogged.

    A job runs at the samples from its start (inclusive) to its end
    (exclusive) and waits from its submission to its start: the sample of
    an instant is taken after that instant's events and scheduling pass.
    """
    times = result.sample_time
    samples = len(times)
    table = build_workload_table(result.workload)
    total = np.array(table.shape_total, dtype=np.float64)[table.job_shape_array]
    leaf = layout.leaf_of_job
    submitted = np.searchsorted(times, result.submit, side="left")
    started = np.searchsorted(times, result.start, side="left")
    ended = np.searchsorted(times, result.end, side="left")
    usage = np.zeros((samples + 1, layout.size, len(RESOURCES)), dtype=np.float64)
    np.add.at(usage, (started, leaf), total)
    np.add.at(usage, (ended, leaf), -total)
    waiting = np.zeros((samples + 1, layout.size), dtype=np.int64)
    np.add.at(waiting, (submitted, leaf), 1)
    np.add.at(waiting, (started, leaf), -1)
    usage = np.cumsum(usage, axis=0)[:samples]
    pending = np.cumsum(waiting, axis=0)[:samples]
    for node in range(layout.size - 1, 0, -1):
        pending[:, layout.parent[node]] += pending[:, node]
    return usage, pending > 0


def compute_level_jain(result: SimResult) -> tuple[LevelJain, ...]:
    """Per depth of the account tree, Jain's index among backlogged siblings (module docstring)."""
    workload = result.workload
    if workload.tree is None or not len(result.sample_time):
        return ()
    layout = build_layout(workload, build_workload_table(workload))
    usage, backlogged = tree_samples(result, layout)
    shares = node_shares(layout, usage, result.capacity)
    samples = len(result.sample_time)
    out = []
    for depth in range(1, layout.max_depth + 1):
        total = np.zeros(samples)
        count = np.zeros(samples)
        for parent in (n for n in range(layout.size) if layout.depth[n] == depth - 1 and layout.children[n]):
            kids = list(layout.children[parent])
            x = shares[:, kids]
            mask = backlogged[:, kids]
            n = mask.sum(axis=1)
            square = (x * x * mask).sum(axis=1)
            valid = (n >= 2) & (square > 0)
            with np.errstate(invalid="ignore", divide="ignore"):
                jain = np.where(valid, (x * mask).sum(axis=1) ** 2 / (n * square), 0.0)
            total += jain
            count += valid
        judged = count > 0
        kinds = sorted({_kind(layout, n) for n in range(layout.size) if layout.depth[n] == depth})
        value = float((total[judged] / count[judged]).mean()) if judged.any() else math.nan
        out.append(LevelJain(depth, "+".join(kinds), value, int(judged.sum())))
    return tuple(out)


def _kind(layout: TreeLayout, node: int) -> str:
    if layout.is_user(node):
        return "users"
    return "accounts" if node in layout.account_node else "parents"


def shares_to_date(result: SimResult) -> FloatArray:
    """(S, A) each account's weighted dominant share averaged from the start of the run to each sample.

    Samples are taken at ticks (tick x interval); the ticks skipped while
    nothing ran or waited held no share and count in the time, not the sum.
    """
    shares = result.sample_share
    if not len(shares):
        return shares
    ticks = np.rint(result.sample_time / result.interval) + 1.0
    out: FloatArray = np.cumsum(shares, axis=0) / ticks[:, None]
    return out


def _number(value: float, digits: int = 4) -> float | None:
    """JSON has no nan or inf: null, and a large finite stand-in is worse."""
    if not math.isfinite(value):
        return None
    return round(value, digits)


def _seconds(value: float) -> float | str | None:
    """A time in seconds for JSON: "never" for inf (it did not happen), null for nan (not measured)."""
    if math.isinf(value):
        return "never"
    return _number(value, 1)


def render_metrics(metrics: PolicyMetrics) -> dict[str, Any]:
    """JSON-ready data of one policy's metrics (no series)."""
    return {
        "policy": metrics.policy,
        "jain": _number(metrics.jain),
        "jain_min": _number(metrics.jain_min),
        "fairness_samples": metrics.fairness_samples,
        "share_ratio": _number(metrics.share_ratio),
        "share_ratio_infinite": math.isinf(metrics.share_ratio),
        "longest_wait_s": _number(metrics.longest_wait, 1),
        "longest_wait_account": metrics.longest_wait_account,
        "mean_wait_s": _number(metrics.mean_wait, 1),
        "utilisation_while_waiting": {r: _number(v) for r, v in metrics.utilisation.items()},
        "utilisation_overall": {r: _number(v) for r, v in metrics.utilisation_overall.items()},
        "makespan_s": _number(metrics.makespan, 1),
        "backfilled_fraction": _number(metrics.backfilled),
        "jain_over_time": _number(metrics.jain_over_time),
        "fairness_error": _number(metrics.fairness_error),
        "time_to_fair_share_s": _seconds(metrics.time_to_fair_share),
        "finish_time_fairness_max": _number(metrics.rho_max),
        "jain_by_level": [
            {"depth": level.depth, "nodes": level.nodes, "jain": _number(level.jain), "samples": level.samples}
            for level in metrics.levels
        ]
        if metrics.levels
        else None,
        "plans": metrics.plans,
        "writes_per_cycle": None
        if metrics.writes is None
        else {
            "cycles": metrics.writes.cycles,
            "mean": _number(metrics.writes.mean, 2),
            "median": _number(metrics.writes.median, 1),
            "max": metrics.writes.max,
            "total": metrics.writes.total,
        },
        "accounts": [
            {
                "account": a.account,
                "weight": a.weight,
                "jobs": a.jobs,
                "mean_weighted_share_backlogged": _number(a.mean_share),
                "backlogged_samples": a.backlogged_samples,
                "wait_p50_s": _number(a.wait_p50, 1),
                "wait_p95_s": _number(a.wait_p95, 1),
                "wait_max_s": _number(a.wait_max, 1),
                "weighted_share_to_date_at_contention_end": _number(a.share_to_date),
                "weighted_share_over_run": _number(a.run_share),
                "time_to_fair_share_s": _seconds(a.time_to_fair_share),
                "finish_time_fairness": _number(a.rho),
            }
            for a in metrics.accounts
        ],
    }
