"""Built-in workloads, generated reproducibly from a seed.

Sits at the start of the simulator's flow, beside `importers`: each
scenario turns (seed, nodes, jobs, window) into a `Workload`. All draws
come from one `numpy.random.Generator` seeded with `seed`, in a fixed
order, so the same arguments give the same jobs on every machine.

Job shapes come from a few profiles on nodes of 64 CPUs, 512,000 MiB and
8 GPUs: CPU-heavy (8-64 CPUs, 2,000 MiB per CPU), memory-heavy (2-8 CPUs,
96,000-192,000 MiB), GPU-heavy (1-8 GPUs with 4 CPUs and 32,000 MiB each),
small (4 CPUs, 16,000 MiB) and any (one of the first three). Run times
are log-normal (median 40 minutes, 2 minutes to 6 hours); time limits
equal run times (perfect estimates, the usual assumption when studying
EASY backfill). Each account offers a set load: the sum over its jobs of
dominant share of a node x run time, per node and second of its
submission span. Job counts split `jobs` in proportion to those loads;
the window, unless given, is what makes the loads come true on `nodes`
nodes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from types import MappingProxyType
from typing import Final

import numpy as np

from slurm_drf.model.types import FloatArray, IntArray
from slurm_drf.sim.workload import (
    AccountTree,
    NodeType,
    Workload,
    WorkloadError,
    WorkloadJob,
    check_sizes,
    format_duration,
)

NODE: Final = NodeType(cpu=64, mem=512_000, gpu=8)
MEDIAN_RUN: Final = 40 * 60.0
MIN_RUN: Final = 120.0
MAX_RUN: Final = 6 * 3600.0


# Job profiles: (probability, cpu, mem MiB, gpu) per node; one node per job.
Profile = tuple[tuple[float, int, int, int], ...]
_CPU: Final[Profile] = ((0.35, 8, 16_000, 0), (0.35, 16, 32_000, 0), (0.2, 32, 64_000, 0), (0.1, 64, 128_000, 0))
_MEM: Final[Profile] = tuple(
    (pc * pm, cpu, mem, 0)
    for pc, cpu in ((0.4, 2), (0.4, 4), (0.2, 8))
    for pm, mem in ((0.4, 96_000), (0.4, 128_000), (0.2, 192_000))
)
_GPU: Final[Profile] = ((0.4, 4, 32_000, 1), (0.3, 8, 64_000, 2), (0.2, 16, 128_000, 4), (0.1, 32, 256_000, 8))
# GPU jobs light on CPUs (2 CPUs and 16,000 MiB per GPU): GPU work that leaves most CPUs free.
_GPU_LEAN: Final[Profile] = ((0.4, 2, 16_000, 1), (0.3, 4, 32_000, 2), (0.2, 8, 64_000, 4), (0.1, 16, 128_000, 8))
PROFILES: Final[dict[str, Profile]] = {
    "cpu": _CPU,
    "mem": _MEM,
    "gpu": _GPU,
    "small": ((1.0, 4, 16_000, 0),),
    "gpu-lean": _GPU_LEAN,
    # CPU jobs small enough to fill the CPUs GPU jobs leave on each node.
    "cpu-small": ((0.5, 4, 8_000, 0), (0.5, 8, 16_000, 0)),
    "any": tuple((p / 3, c, m, g) for p, c, m, g in (*_CPU, *_MEM, *_GPU)),
    # One GPU with an eighth of a node, and a whole node: the two shapes of a GPU cluster's queue.
    "gpu-one": ((1.0, 8, 64_000, 1),),
    "gpu-node": ((1.0, 64, 512_000, 8),),
}


def _dominant(cpu: int, mem: int, gpu: int) -> float:
    """A job's dominant share of one node."""
    return max(cpu / NODE.cpu, mem / NODE.mem, gpu / NODE.gpu)


def mean_dominant(profile: str) -> float:
    """The expected dominant share of one node of a job of `profile`."""
    return sum(p * _dominant(c, m, g) for p, c, m, g in PROFILES[profile])


@dataclass(frozen=True, slots=True)
class _Account:
    """How one account of a scenario submits.

    It offers `load` times the cluster in its jobs' dominant resources while
    it submits, from `start` to `stop` (fractions of the window); `flood` of
    its jobs arrive in the first 3% of its span instead.
    """

    name: str
    profile: str
    load: float
    start: float = 0.0
    stop: float = 1.0
    flood: float = 0.0
    arrays: bool = False


@dataclass(frozen=True, slots=True)
class _Drawn:
    account: _Account
    cpu: IntArray
    mem: IntArray
    gpu: IntArray
    runtime: FloatArray


def _draw(rng: np.random.Generator, account: _Account, count: int) -> _Drawn:
    table = PROFILES[account.profile]
    pick = rng.choice(len(table), size=count, p=[row[0] for row in table])
    column = np.array([row[1:] for row in table], dtype=np.int64)[pick]
    drawn = rng.lognormal(mean=np.log(MEDIAN_RUN), sigma=0.9, size=count)
    runtime: FloatArray = np.round(np.clip(drawn, MIN_RUN, MAX_RUN)).astype(np.float64)
    return _Drawn(account, column[:, 0], column[:, 1], column[:, 2], runtime)


def _generate(
    rng: np.random.Generator, accounts: list[_Account], nodes: int, jobs: int, window: float | None
) -> tuple[WorkloadJob, ...]:
    """Jobs of every account: counts follow the loads, submit times the window."""
    weight = [a.load * (a.stop - a.start) / mean_dominant(a.profile) for a in accounts]
    counts = _apportion(jobs, weight)
    drawn = [_draw(rng, a, n) for a, n in zip(accounts, counts, strict=True)]
    if window is None:
        work = sum(_work(d) for d in drawn)
        offered = sum(a.load * (a.stop - a.start) for a in accounts)
        window = max(600.0, round(work / (nodes * offered)))
    out: list[WorkloadJob] = []
    for d in drawn:
        out.extend(_submit(rng, d, window))
    return tuple(out)


def _work(drawn: _Drawn) -> float:
    """Node-seconds of dominant share the drawn jobs need: sum of dominant share of a node x run time."""
    shares = [
        _dominant(c, m, g) for c, m, g in zip(drawn.cpu.tolist(), drawn.mem.tolist(), drawn.gpu.tolist(), strict=True)
    ]
    return float(np.dot(shares, drawn.runtime))


def _apportion(total: int, weights: list[float]) -> list[int]:
    """`total` split in proportion to `weights` (largest remainders), at least 1 each."""
    exact = [total * w / sum(weights) for w in weights]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: (counts[i] - exact[i], i))
    for index in by_remainder[: total - sum(counts)]:
        counts[index] += 1
    return [max(1, c) for c in counts]


def _submit(rng: np.random.Generator, drawn: _Drawn, window: float) -> list[WorkloadJob]:
    account = drawn.account
    count = len(drawn.runtime)
    start, stop = account.start * window, account.stop * window
    arrays: list[tuple[str | None, int]] = [(None, 0)] * count
    if account.arrays:
        # Job arrays of 5 to 60 tasks, each submitted at once; one shape per array.
        sizes: list[int] = []
        while sum(sizes) < count:
            sizes.append(min(int(rng.integers(5, 61)), count - sum(sizes)))
        times = np.repeat(np.sort(rng.uniform(start, stop, size=len(sizes))), sizes)
        first = np.repeat(np.cumsum([0, *sizes[:-1]]), sizes)
        drawn = _Drawn(account, drawn.cpu[first], drawn.mem[first], drawn.gpu[first], drawn.runtime)
        arrays = [(f"{account.name}-a{number}", task) for number, size in enumerate(sizes) for task in range(size)]
    else:
        flood = int(count * account.flood)
        times = np.concatenate(
            [
                rng.uniform(start, start + 0.03 * (stop - start), size=flood),
                rng.uniform(start, stop, size=count - flood),
            ]
        )
    submits = np.round(np.sort(times))
    return [_job(account.name, index, float(submits[index]), drawn, index, arrays[index]) for index in range(count)]


def _job(
    account: str, number: int, submit: float, drawn: _Drawn, index: int, array: tuple[str | None, int] = (None, 0)
) -> WorkloadJob:
    """Job `index` of `drawn`, as job `number` of `account`, submitted at `submit`."""
    shape = (int(drawn.cpu[index]), int(drawn.mem[index]), int(drawn.gpu[index]))
    return replace(
        _fixed(account, number, submit, float(drawn.runtime[index]), shape), array_id=array[0], array_index=array[1]
    )


# --------------------------------------------------------------------------
# The scenarios


def _mixed(rng: np.random.Generator, nodes: int, jobs: int, window: float | None) -> Workload:
    accounts = [
        _Account("climate", "cpu", 1.1, flood=0.5),
        _Account("genomics", "mem", 0.75),
        _Account("vision", "gpu", 0.75),
    ]
    return Workload(
        "mixed",
        "CPU-heavy (climate), memory-heavy (genomics) and GPU-heavy (vision) accounts, "
        "all backlogged; climate floods the queue first",
        _generate(rng, accounts, nodes, jobs, window),
        nodes,
        NODE,
    )


def _bursty(rng: np.random.Generator, nodes: int, jobs: int, window: float | None) -> Workload:
    accounts = [
        _Account(name, profile, 0.45, arrays=True)
        for name, profile in (("astro", "cpu"), ("bio", "mem"), ("chem", "any"), ("deep", "gpu"))
    ]
    return Workload(
        "bursty",
        "four accounts submitting job arrays of 5-60 tasks at random times",
        _generate(rng, accounts, nodes, jobs, window),
        nodes,
        NODE,
    )


def _newcomer(rng: np.random.Generator, nodes: int, jobs: int, window: float | None) -> Workload:
    accounts = [
        _Account("climate", "cpu", 0.9),
        _Account("genomics", "mem", 0.7),
        _Account("vision", "gpu", 0.7),
        _Account("newlab", "any", 0.7, start=0.4),
    ]
    return Workload(
        "newcomer",
        "three accounts keep the cluster busy; newlab starts submitting at 40% of the window",
        _generate(rng, accounts, nodes, jobs, window),
        nodes,
        NODE,
    )


def _gpu_newcomer(rng: np.random.Generator, nodes: int, jobs: int, window: float | None) -> Workload:
    accounts = [
        _Account("climate", "cpu", 1.0),
        _Account("genomics", "mem", 1.0),
        _Account("vision", "gpu", 0.8, start=0.3),
    ]
    return Workload(
        "gpu-newcomer",
        "CPU-heavy (climate) and memory-heavy (genomics) accounts keep the cluster full; GPU-heavy vision "
        "starts submitting at 30% of the window",
        _generate(rng, accounts, nodes, jobs, window),
        nodes,
        NODE,
    )


def _weighted(rng: np.random.Generator, nodes: int, jobs: int, window: float | None) -> Workload:
    accounts = [_Account(name, "any", 0.8) for name in ("alpha", "beta", "gamma")]
    weights = MappingProxyType({"alpha": Fraction(2), "beta": Fraction(1), "gamma": Fraction(1)})
    return Workload(
        "weighted",
        "three accounts with the same job mix and weights 2:1:1",
        _generate(rng, accounts, nodes, jobs, window),
        nodes,
        NODE,
        weights,
    )


def _burst(rng: np.random.Generator, nodes: int, jobs: int, window: float | None) -> Workload:
    """physics floods the cluster with GPU jobs on day 1; on day 2 physics and chemistry submit the same queue.

    Half the jobs are physics' burst, submitted at 0; the rest are one
    queue drawn once and submitted by both accounts at the start of day 2.
    The day, unless given, is whole hours long enough for the burst to run
    at 80% of the cluster, so the cluster is idle again when day 2 begins.
    """
    each = jobs // 4
    burst = _draw(rng, _Account("physics", "gpu", 1.0), jobs - 2 * each)
    queue = _draw(rng, _Account("chemistry", "gpu", 1.0), each)
    if window is None:
        window = 3600.0 * max(1, math.ceil(_work(burst) / (0.8 * nodes) / 3600))
    out = [_job("physics", i, 0.0, burst, i) for i in range(len(burst.runtime))]
    for account, first in (("physics", len(out)), ("chemistry", 0)):
        out.extend(_job(account, first + i, window, queue, i) for i in range(each))
    return Workload(
        "burst",
        f"physics runs a burst of GPU jobs on day 1 ({format_duration(window)}) while chemistry is idle; "
        "then both submit the same queue",
        tuple(out),
        nodes,
        NODE,
    )


def _steady(rng: np.random.Generator, nodes: int, jobs: int, window: float | None) -> Workload:
    accounts = [_Account(name, "gpu", 0.75) for name in ("astro", "bio")]
    return Workload(
        "steady",
        "two accounts with the same GPU job mix and load, both backlogged from start to end",
        _generate(rng, accounts, nodes, jobs, window),
        nodes,
        NODE,
    )


WHOLE_NODE_SMALL: Final = 6


def _whole_node(rng: np.random.Generator, nodes: int, jobs: int, window: float | None) -> Workload:
    """Six accounts of 1-GPU jobs keep a GPU cluster full; from 20% of the window, `wholenode` submits
    jobs that each take a whole node (8 GPUs, every CPU and all memory), as much again.

    A whole-node job can start only where every GPU of a node is free: the
    scheduler must drain a node for it (a reservation that no smaller job may
    delay), and any small job of higher priority started there breaks the drain.
    """
    accounts = [_Account(f"small{i}", "gpu-one", 0.25) for i in range(WHOLE_NODE_SMALL)]
    accounts.append(_Account("wholenode", "gpu-node", 0.3, start=0.2))
    return Workload(
        "whole-node",
        f"{WHOLE_NODE_SMALL} accounts of 1-GPU jobs keep the cluster full; wholenode, whose jobs each take a "
        "whole node, joins at 20% of the window",
        _generate(rng, accounts, nodes, jobs, window),
        nodes,
        NODE,
    )


# The long-jobs scenario (issue 39): hog's 4-GPU jobs run 12-36 h, newcomer's 2-GPU ones 8 h, from 6 h on.
LONG_HOG: Final = (16, 128_000, 4)
LONG_NEWCOMER: Final = (8, 64_000, 2)
LONG_CPU: Final = (16, 96_000, 0)
LONG_JOIN: Final = 6 * 3600.0


def _long_jobs(rng: np.random.Generator, nodes: int, jobs: int, window: float | None) -> Workload:
    """hog fills every GPU with 12-36 h 4-GPU jobs from the start (four tenths of the jobs, all
    submitted at 0); newcomer joins six hours in with 8 h 2-GPU jobs (two tenths, over the next
    twelve hours); cpu runs 1-4 h CPU and memory work throughout the window (48 h unless given).

    Nothing of hog's ends for hours: ordering alone gives the newcomer its share only as hog's jobs
    end, which is what guarantees and reclaim exist for (docs/rule.md §9).
    """
    window = 48 * 3600.0 if window is None else window
    hog, newcomer = max(1, jobs * 4 // 10), max(1, jobs * 2 // 10)
    cpu = max(0, jobs - hog - newcomer)
    out: list[WorkloadJob] = []
    runs = np.round(rng.uniform(12 * 3600.0, 36 * 3600.0, size=hog) / 60.0) * 60.0
    out.extend(_fixed("hog", k, 0.0, float(runs[k]), LONG_HOG) for k in range(hog))
    join = min(LONG_JOIN, window / 2)
    times = np.round(np.sort(rng.uniform(join, join + (window - join) / 3, size=newcomer)))
    out.extend(_fixed("newcomer", k, float(times[k]), 8 * 3600.0, LONG_NEWCOMER) for k in range(newcomer))
    times = np.round(np.sort(rng.uniform(0.0, window, size=cpu)))
    runs = np.round(rng.uniform(3600.0, 4 * 3600.0, size=cpu) / 60.0) * 60.0
    out.extend(_fixed("cpu", k, float(times[k]), float(runs[k]), LONG_CPU) for k in range(cpu))
    return Workload(
        "long-jobs",
        "hog keeps every GPU busy with 12-36 h jobs; newcomer joins at 6 h with 8 h 2-GPU jobs; cpu runs CPU and "
        "memory work throughout",
        tuple(sorted(out, key=lambda job: job.submit)),
        nodes,
        NODE,
    )


def _fixed(account: str, number: int, submit: float, runtime: float, shape: tuple[int, int, int]) -> WorkloadJob:
    """Job `number` of `account` of one shape (cpu, mem, gpu) and run time."""
    return WorkloadJob(
        job_id=f"{account}-{number}",
        account=account,
        user=f"{account}-u{number % 3}",
        submit=submit,
        duration=runtime,
        limit=runtime,
        cpu=shape[0],
        mem=shape[1],
        gpu=shape[2],
    )


# The tree scenario: (user, account, profile, load, flood) per user; the accounts' parents below.
TREE_USERS: Final = (
    ("sys-a", "systems", "cpu-small", 0.55, 0.0),
    ("sys-b", "systems", "cpu-small", 0.55, 0.0),
    ("ml-alice", "ml", "gpu-lean", 0.45, 0.6),
    ("ml-bob", "ml", "gpu-lean", 0.25, 0.0),
    ("lab-carol", "lab", "gpu-lean", 0.35, 0.0),
    ("lab-dan", "lab", "gpu-lean", 0.35, 0.0),
    ("astro-erin", "astro", "gpu-lean", 0.6, 0.0),
)
TREE_PARENTS: Final = MappingProxyType({"systems": "cs", "ml": "cs", "lab": "physics", "astro": "physics"})


def _tree(rng: np.random.Generator, nodes: int, jobs: int, window: float | None) -> Workload:
    """Two divisions: cs = {systems (CPU only), ml (GPU)}, physics = {lab, astro} (both GPU).

    The GPU jobs take 2 CPUs per GPU, so a full cluster of GPU work leaves
    three quarters of the CPUs to systems, which no one else wants: the
    naive roll-up counts them in cs's share and hands the GPUs to physics,
    so ml, cs's GPU account, starves. Flat DRF splits the GPUs between the
    three GPU accounts, two of them physics'. In ml, alice floods the queue
    with 60% of her jobs at the start; bob submits steadily.
    """
    users = [_Account(user, profile, load, flood=flood) for user, _, profile, load, flood in TREE_USERS]
    account_of = {user: account for user, account, *_ in TREE_USERS}
    out = [
        replace(job, account=account_of[job.account], user=job.account)
        for job in _generate(rng, users, nodes, jobs, window)
    ]
    return Workload(
        "tree",
        "two divisions: cs (systems: CPU only; ml: GPU) and physics (lab, astro: GPU); in ml, alice floods the queue",
        tuple(out),
        nodes,
        NODE,
        tree=AccountTree(parents=TREE_PARENTS),
    )


# The gaming scenario (issue 35): the account that plays a strategy, and the day its work is judged over.
GAMING_ACCOUNT: Final = "g"
GAMING_DAY: Final = 24 * 3600.0
GAMING_ACCOUNTS: Final = (("cpu", "cpu"), ("mem", "mem"), ("gpu", "gpu"), ("any", "any"), (GAMING_ACCOUNT, "gpu"))
GAMING_LOAD: Final = 0.5


def _gaming(rng: np.random.Generator, nodes: int, jobs: int, window: float | None) -> Workload:
    """Five accounts, each offering half the cluster in its dominant resource over the window (2.5x what it
    holds in all, so all stay backlogged); g, GPU-heavy, is the one `sim.gaming` makes play a strategy.

    Every account has one user (named after it), so `hdrf` on this flat workload orders as `drf`
    until a strategy gives g more users. At the default size the window is about a day.
    """
    accounts = [_Account(name, profile, GAMING_LOAD) for name, profile in GAMING_ACCOUNTS]
    out = [replace(job, user=job.account) for job in _generate(rng, accounts, nodes, jobs, window)]
    return Workload(
        "gaming",
        f"five backlogged accounts (CPU-, memory-, GPU-heavy, mixed, and GPU-heavy {GAMING_ACCOUNT}, the one that "
        "games in `sim.gaming`), one user each",
        tuple(out),
        nodes,
        NODE,
    )


TIE_ACCOUNTS: Final = 200


def _tie(rng: np.random.Generator, nodes: int, jobs: int, window: float | None) -> Workload:
    accounts = [_Account(f"acct{i:03d}", "small", 2.0 / TIE_ACCOUNTS) for i in range(TIE_ACCOUNTS)]
    return Workload(
        "tie",
        f"{TIE_ACCOUNTS} identical accounts of small jobs: each one's fair share is under 1% of the cluster",
        _generate(rng, accounts, nodes, jobs, window),
        nodes,
        NODE,
    )


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    summary: str
    nodes: int
    jobs: int
    build: Callable[[np.random.Generator, int, int, float | None], Workload]
    # The policies (sim.policies names) the scenario exists to show: `simulate` runs them beside its defaults.
    shows: tuple[str, ...] = ()


SCENARIOS: Final = {
    s.name: s
    for s in (
        Scenario("mixed", "GPU-, memory- and CPU-heavy accounts, all backlogged (default)", 24, 2400, _mixed),
        Scenario("bursty", "job arrays submitted in bursts", 24, 2400, _bursty),
        Scenario("newcomer", "a new account joins a busy cluster", 24, 2400, _newcomer, ("drf-placed",)),
        Scenario(
            "gpu-newcomer",
            "a GPU-heavy account joins a cluster kept full by CPU- and memory-heavy ones",
            8,
            800,
            _gpu_newcomer,
            ("drf-placed",),
        ),
        Scenario("weighted", "weights 2:1:1 on the same job mix", 24, 2400, _weighted),
        Scenario(
            "whole-node",
            "accounts of 1-GPU jobs and one of whole-node jobs (a node must drain for each)",
            20,
            3000,
            _whole_node,
            ("drf-history",),
        ),
        Scenario("tie", "many identical small accounts (where drf-naive starves the last by name)", 24, 6000, _tie),
        Scenario(
            "burst",
            "an account that ran a burst yesterday meets one that did not (history)",
            8,
            900,
            _burst,
            ("drf-history",),
        ),
        Scenario(
            "steady",
            "two identical accounts, steady load (history changes little)",
            8,
            1200,
            _steady,
            ("drf-history",),
        ),
        Scenario(
            "tree",
            "an account tree: naive roll-up vs H-DRF vs flat DRF (hdrf, hdrf-rollup)",
            8,
            1200,
            _tree,
            ("hdrf", "hdrf-rollup"),
        ),
        Scenario(
            "gaming",
            "five backlogged accounts, one GPU-heavy account (g) to play gaming strategies (sim.gaming)",
            8,
            1600,
            _gaming,
        ),
        Scenario(
            "long-jobs",
            "day-long GPU jobs hold the cluster when a newcomer joins (guarantees, reclaim)",
            8,
            200,
            _long_jobs,
            ("drf-reclaim",),
        ),
    )
}
# The scenarios of memory of past use (docs/evaluation.md, *Fair share over time*).
HISTORY_SCENARIOS: Final = ("burst", "steady")
# The scenarios of the account tree (docs/evaluation.md, *Hierarchy (tree)*).
TREE_SCENARIOS: Final = ("tree",)
# The scenarios of guarantees and reclaim (docs/evaluation.md, *Guarantees and reclaim*).
RECLAIM_SCENARIOS: Final = ("long-jobs",)
# The scenario of gaming strategies (docs/evaluation.md, *Gaming*).
GAMING_SCENARIOS: Final = ("gaming",)
DEFAULT_SCENARIO: Final = "mixed"


def build_scenario(
    name: str, seed: int = 1, nodes: int | None = None, jobs: int | None = None, window: float | None = None
) -> Workload:
    """The named scenario's workload; the same arguments always give the same jobs."""
    scenario = SCENARIOS.get(name)
    if scenario is None:
        raise WorkloadError(f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}")
    nodes = scenario.nodes if nodes is None else nodes
    jobs = scenario.jobs if jobs is None else jobs
    if nodes < 1 or jobs < 1:
        raise WorkloadError(f"scenario {name}: expected at least one node and one job, got {nodes} and {jobs}")
    check_sizes(f"scenario {name}", nodes, jobs)
    if name == "burst" and jobs < 4:
        raise WorkloadError(
            f"scenario burst: expected at least 4 jobs (a burst and a queue of each account), got {jobs}"
        )
    if name == "tie" and jobs < TIE_ACCOUNTS:
        raise WorkloadError(f"scenario tie: expected at least {TIE_ACCOUNTS} jobs (one per account), got {jobs}")
    if window is not None and window <= 0:
        raise WorkloadError(f"--duration must be > 0, got {window}")
    rng = np.random.default_rng(seed)
    return replace(scenario.build(rng, nodes, jobs, window), seed=seed)
