"""The rule, as the papers state it: DRF and H-DRF on exact numbers. Start reading here.

The ground floor of the policy: no numpy, no engine, nothing of slurm_drf
below or beside it. The engines the plan runs (`policy.engine.order.order_pending`
for a flat pool, `policy.engine.merge_engine.order_online` for a tree) are tuned
code that must give this module's order position by position, and the tie
wins it counts (tests/unit/policy/test_rule_equals_engines.py).

Notation (docs/rule.md §2 and §7). DRF (Ghodsi et al., NSDI 2011): a pool
of m resources of capacity R = (R_1 … R_m); account i holds U_i =
(u_i1 … u_im) and wants D_i, the demand of its next pending job, in
Slurm's order. Its *dominant share* is s_i = max_j u_ij / R_j, weighted
s_i / w_i (a resource with R_j = 0 is left out). *Progressive filling*
serves, again and again, the account of least weighted s_i, and adds D_i to
U_i; here every pending job is ordered, whether it fits now or not.
H-DRF (Bhattacharya et al., "Hierarchical scheduling for diverse datacenter
workloads", SoCC 2013): accounts are the nodes n of a tree, w_n relative to
n's siblings, jobs only at leaves. An internal node's consumption is its
children's, each waiting child *rescaled* to the least weighted share M of
its waiting siblings; a *blocked* child (nothing to place) counts as it is;
an account over its users sums them as they are (none rescaled: how many
users share an account's work buys it nothing). The walk goes from the root
to a leaf, taking the child of least share.

Equality: one for both. The loops compare shares as whole numbers of
2**-SHARE_BITS of the pool (`leaf_share`, `inner_share`), each rounded down
once where it is made (docs/rule.md §2, "Equal shares"): two accounts or
tree nodes whose exact shares differ by less than 2**-30 are a tie, which
the tie rule breaks by wins and rotation, not by a billionth of a share
(less than one GPU in a billion). A flat tree is the flat rule, position by
position. `weighted_share` is the exact fraction, for what is shown and
for reclaim.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Final, NamedTuple, Protocol

try:  # hashlib's blake2b, without the OpenSSL bindings `import hashlib` loads
    from _blake2 import blake2b
except ImportError:  # a Python without CPython's _blake2 module
    from hashlib import blake2b

# -------------------------------------------------------------------------
# The weighted dominant share (DRF, exact)


def weighted_share(usage: Sequence[int], capacity: Sequence[int], weight: Fraction) -> Fraction:
    """s_i / w_i = max_j(u_ij / R_j) / w_i over the resources of R_j > 0 (0 when there is none), exactly.

    What a plan shows and reclaim compares; the loops compare `leaf_share`'s whole numbers."""
    return max((Fraction(u, c) for u, c in zip(usage, capacity, strict=True) if c > 0), default=Fraction(0)) / weight


# -------------------------------------------------------------------------
# The tie key (docs/rule.md §2, "Ties never starve anyone")

TieKey = tuple[object, ...]


def rotation_key(epoch: int, key: str) -> int:
    """A per-epoch pseudo-random rank of an account or tree node; not its name's order."""
    return int.from_bytes(blake2b(f"{epoch}\0{key}".encode(), digest_size=8).digest(), "big")


def tie_key(share: object, vector: tuple[object, ...], wins: Fraction, epoch: int, key: str) -> TieKey:
    """What the loops minimise: the weighted share, then the sorted share vector (lexicographic),
    then fewer tie wins, then the epoch's rotation key; the key itself only makes entries unique
    (two rotation keys alike are a 2**-64 event). Never the name, the user or insertion order."""
    return (share, vector, wins, rotation_key(epoch, key), key)


class Order(NamedTuple):
    """An order: (account or leaf key, index in its pending jobs) per position; the tie wins after it."""

    jobs: list[tuple[str, int]]
    wins: dict[str, Fraction]


def _win(wins: dict[str, Fraction], key: str) -> None:
    """`key` was served while another waited at the very same (share, vector): one tie won."""
    wins[key] = wins.get(key, Fraction(0)) + 1


def _start_wins(wins: Mapping[str, float | Fraction] | None) -> dict[str, Fraction]:
    """The wins a plan starts from (decayed counts, as the state keeps them), exactly."""
    return {key: Fraction(value) for key, value in (wins or {}).items()}


# -------------------------------------------------------------------------
# The greedy loop (DRF's progressive filling), flat


def flat_order(
    pending: Mapping[str, Sequence[Sequence[int]]],
    usage: Mapping[str, Sequence[int]],
    capacity: Sequence[int],
    weights: Mapping[str, Fraction],
    epoch: int = 1,
    wins: Mapping[str, float | Fraction] | None = None,
) -> Order:
    """Serve the account of least tie key; add its next job's D_i to its U_i; repeat.

    `pending[i]` lists i's demand vectors in Slurm's order (an array record's
    TRES times its tasks); `usage[i]` its running U_i (missing: zeros);
    `weights[i]` its w_i (missing: 1). A job's level is its account's
    weighted share when it is served, so this is also the order of levels.
    """
    tie_wins = _start_wins(wins)
    held = {a: [int(x) for x in usage.get(a, [0] * len(capacity))] for a in pending}
    served = dict.fromkeys(pending, 0)

    usable = [k for k, c in enumerate(capacity) if c > 0]
    caps = [capacity[k] for k in usable]

    def entry(account: str) -> tuple[TieKey, str]:
        at = leaf_share([held[account][k] for k in usable], caps, weights.get(account, Fraction(1)))
        return tie_key(at.share, at.vector, tie_wins.get(account, Fraction(0)), epoch, account), account

    heap = [entry(a) for a, jobs in pending.items() if jobs]
    heapq.heapify(heap)
    out: list[tuple[str, int]] = []
    while heap:
        key, account = heapq.heappop(heap)
        if heap and heap[0][0][:2] == key[:2]:
            _win(tie_wins, account)
        index = served[account]
        out.append((account, index))
        held[account] = [u + int(d) for u, d in zip(held[account], pending[account][index], strict=True)]
        served[account] = index + 1
        if served[account] < len(pending[account]):
            heapq.heappush(heap, entry(account))
    return Order(out, tie_wins)


# -------------------------------------------------------------------------
# A tree node's share (H-DRF, docs/rule.md §7), in whole numbers of 2**-SHARE_BITS

# Consumption and shares are whole numbers of 2**-SHARE_BITS of the pool, rounded down once where
# made; a child's direction (consumption over share, what rescaling multiplies by M) is a whole
# number of 2**-DIRECTION_BITS. Equal states give equal shares; the rounding is a billionth of the
# pool. The sizes keep a busy pool's numbers below 2**52, where the merge engine runs in int64.
SHARE_BITS: Final = 30
DIRECTION_BITS: Final = 36
SHARE_ONE: Final = 1 << SHARE_BITS


@dataclass(frozen=True, slots=True)
class NodeShare:
    """A node's consumption of each usable resource (`units`, in 2**-SHARE_BITS of its capacity), its
    weighted dominant share and share vector (largest first, one entry per usable resource), all whole
    numbers of 2**-SHARE_BITS, rounded down."""

    units: tuple[int, ...]
    share: int
    vector: tuple[int, ...]


def leaf_share(usage: Sequence[int], caps: Sequence[int], weight: Fraction) -> NodeShare:
    """A leaf: the flat shares u_j·q / (R_j·p) (w = p/q) over the usable resources, each rounded down once
    from the exact fraction, so that equal flat shares stay equal whatever the weights."""
    p, q = weight.numerator, weight.denominator
    units = tuple((u << SHARE_BITS) // c for u, c in zip(usage, caps, strict=True))
    shares = sorted(((u * q << SHARE_BITS) // (c * p) for u, c in zip(usage, caps, strict=True)), reverse=True)
    return NodeShare(units, shares[0] if shares else 0, tuple(shares))


def inner_share(
    children: Sequence[tuple[NodeShare, bool]], counted: Sequence[int], weight: Fraction, rescale: bool = True
) -> NodeShare:
    """An internal node from its children's (share, blocked): H-DRF's rescaling.

    M is the least share of the children not blocked; each of them of share
    S > 0 counts as its consumption · M / S (its share becomes M): M times
    the sum of their directions (units · 2**DIRECTION_BITS // S), shifted
    back. Blocked children and children of share 0 count as they are; with
    `rescale=False` (an account over its users, docs/rule.md §7) every child
    does. A resource outside `counted` (the paper's saturated ones) has share 0.
    """
    width = len(children[0][0].units) if children else 0
    least = min((s.share for s, blocked in children if not blocked), default=0)
    direction, rest = [0] * width, [0] * width
    for child, blocked in children:
        if rescale and not blocked and child.share > 0:
            direction = [y + (u << DIRECTION_BITS) // child.share for y, u in zip(direction, child.units, strict=True)]
        else:
            rest = [b + u for b, u in zip(rest, child.units, strict=True)]
    return node_share(
        [(least * y >> DIRECTION_BITS) + b for y, b in zip(direction, rest, strict=True)], counted, weight
    )


def node_share(total: Sequence[int], counted: Sequence[int], weight: Fraction) -> NodeShare:
    """A node of consumption `total`: its shares total_j · q // p over `counted`, 0 for the rest."""
    p, q = weight.numerator, weight.denominator
    shares = sorted((total[k] * q // p for k in counted), reverse=True) + [0] * (len(total) - len(counted))
    return NodeShare(tuple(total), shares[0] if shares else 0, tuple(shares))


# -------------------------------------------------------------------------
# The H-DRF walk, tree


class Tree(Protocol):
    """A node of the account tree (`policy.engine.hierarchy.TreeNode` is one); jobs and usage only at leaves."""

    @property
    def name(self) -> str: ...
    @property
    def weight(self) -> Fraction: ...
    @property
    def children(self) -> Sequence[Tree]: ...
    @property
    def usage(self) -> Sequence[int]: ...
    @property
    def jobs(self) -> Iterable[Iterable[int]]: ...
    @property
    def rescale(self) -> bool: ...  # False: an account over its users, its children summed as they are


# A node's share from its children's (share, blocked), the counted resources, its weight and `rescale`.
InnerShare = Callable[[Sequence[tuple[NodeShare, bool]], Sequence[int], Fraction, bool], NodeShare]


@dataclass(frozen=True, slots=True)
class _Nodes:
    """A tree in preorder (the root is 0), chains contracted: each node's key, weight, children,
    running usage and pending demand vectors (over every resource; only leaves have them), and
    whether it rescales its children (the chain's bottom's)."""

    keys: list[str]
    weights: list[Fraction]
    children: list[list[int]]
    usage: list[list[int]]
    jobs: list[list[list[int]]]
    rescale: list[bool]


def _lay_out(root: Tree, width: int) -> _Nodes:
    """A chain of single children is one node: the top's key and weight, the bottom's children or jobs."""
    nodes = _Nodes([], [], [], [], [], [])
    todo: list[tuple[Tree, int, str]] = [(root, -1, "")]
    while todo:
        top, up, key = todo.pop()
        bottom, path = top, key
        while up >= 0 and len(bottom.children) == 1:
            bottom = bottom.children[0]
            path = f"{path}/{bottom.name}"
        index = len(nodes.keys)
        nodes.keys.append(key)
        nodes.weights.append(Fraction(top.weight) if up >= 0 else Fraction(1))
        nodes.children.append([])
        if up >= 0:
            nodes.children[up].append(index)
        nodes.usage.append([int(x) for x in bottom.usage] or [0] * width)
        nodes.jobs.append([[int(x) for x in job] for job in bottom.jobs])
        nodes.rescale.append(bottom.rescale)
        todo.extend((c, index, f"{path}/{c.name}" if path else c.name) for c in reversed(bottom.children))
    return nodes


def _node_shares(
    nodes: _Nodes, served: Sequence[int], capacity: Sequence[int], saturated: Sequence[int], inner: InnerShare
) -> list[tuple[NodeShare, bool]]:
    """Every node's (share, blocked), from the leaves up (children follow their parent in preorder).

    Shares are over the usable resources; `saturated` indexes them. A leaf is
    blocked when every job it has left (none: vacuously) wants a saturated
    resource, an internal node when all its children are.
    """
    usable = [r for r, c in enumerate(capacity) if c > 0]
    counted = [k for k in range(len(usable)) if k not in saturated]
    state: list[tuple[NodeShare, bool]] = [(NodeShare((), 0, ()), True)] * len(nodes.keys)
    for n in reversed(range(len(nodes.keys))):
        if nodes.children[n]:
            parts = [state[c] for c in nodes.children[n]]
            share = inner(parts, counted, nodes.weights[n], nodes.rescale[n])
            state[n] = (share, all(blocked for _, blocked in parts))
        else:
            held, caps = [nodes.usage[n][r] for r in usable], [capacity[r] for r in usable]
            blocked = all(any(job[usable[k]] > 0 for k in saturated) for job in nodes.jobs[n][served[n] :])
            state[n] = (leaf_share(held, caps, nodes.weights[n]), blocked)
    return state


def hdrf_order(
    root: Tree,
    capacity: Sequence[int],
    epoch: int = 1,
    wins: Mapping[str, float | Fraction] | None = None,
    occupied: Sequence[int] | None = None,
    inner: InnerShare = inner_share,
) -> Order:
    """Walk from the root to a leaf, at each node taking the child of least tie key among those with
    a job left below them (blocked ones included); give that leaf its next job; repeat.

    Every node is recomputed from the leaves at every step (slow on purpose).
    A node's key is its path of names below the root. A resource *saturates*
    once `occupied` (default: the leaves' usage) plus the demand served
    reaches its capacity; once every one has, none counts as saturated (the
    pool is full). The plan runs the rule with occupied = capacity: nothing
    saturates, a node is blocked when nothing below it waits. `inner` is
    H-DRF's node rule; tests pass the paper's naive ones.
    """
    nodes = _lay_out(root, len(capacity))
    keys, children = nodes.keys, nodes.children
    if all(not children[c] for c in children[0]):  # a flat tree is the flat rule, exact
        pending = {keys[c]: nodes.jobs[c] for c in children[0]}
        usage = {keys[c]: nodes.usage[c] for c in children[0]}
        return flat_order(pending, usage, capacity, {keys[c]: nodes.weights[c] for c in children[0]}, epoch, wins)
    tie_wins = _start_wins(wins)
    usable = [r for r, c in enumerate(capacity) if c > 0]
    total = [int(occupied[r]) if occupied is not None else sum(u[r] for u in nodes.usage) for r in usable]
    served = [0] * len(keys)
    out: list[tuple[str, int]] = []
    while True:
        waiting = [False] * len(keys)
        for n in reversed(range(len(keys))):
            waiting[n] = served[n] < len(nodes.jobs[n]) or any(waiting[c] for c in children[n])
        if not waiting[0]:
            return Order(out, tie_wins)
        saturated = [k for k, r in enumerate(usable) if total[k] >= capacity[r]]
        state = _node_shares(nodes, served, capacity, saturated if len(saturated) < len(usable) else [], inner)
        n = 0
        while children[n]:
            ranked = sorted(
                (tie_key(state[c][0].share, state[c][0].vector, tie_wins.get(keys[c], Fraction(0)), epoch, keys[c]), c)
                for c in children[n]
                if waiting[c]
            )
            n = ranked[0][1]
            if len(ranked) > 1 and ranked[1][0][:2] == ranked[0][0][:2]:
                _win(tie_wins, keys[n])
        demand = nodes.jobs[n][served[n]]
        out.append((keys[n], served[n]))
        nodes.usage[n] = [u + d for u, d in zip(nodes.usage[n], demand, strict=True)]
        total = [t + demand[r] for t, r in zip(total, usable, strict=True)]
        served[n] += 1
