"""The one decay of every decayed quantity: a tie win (docs/rule.md §3) and past usage (§6).

A quantity keeps 2^(-elapsed / half_life) of itself after `elapsed`, in the
half-life's own unit: cycles for `tie_half_life_cycles`, seconds for
`history.half_life`. `decay_weight` is that decay's integral over an
interval, the weight an interval of usage has in the decayed past
(policy/decayed_usage.py). The simulator's model of Slurm's own usage decay
(sim/policies.py) uses it too.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt


def decay_factor(elapsed: float, half_life: float) -> float:
    """What a quantity keeps of itself after `elapsed`: 2^(-elapsed / half_life), both in one unit."""
    return float(2.0 ** (-elapsed / half_life))


def decay_factors(elapsed: npt.NDArray[np.float64], half_life: float) -> npt.NDArray[np.float64]:
    """`decay_factor` of each element, for a whole array at once (numpy's exp2, whose last bit may
    differ from the scalar's pow); a negative `elapsed` grows a quantity instead."""
    factors: npt.NDArray[np.float64] = np.exp2(-elapsed / half_life)
    return factors


def decay_weight(start: float, stop: float, now: float, half_life: float) -> float:
    """The integral of 2^(-(now-t)/half_life) over t in [start, stop)."""
    if stop <= start:
        return 0.0
    rate = math.log(2.0) / half_life
    return (math.exp(-rate * (now - stop)) - math.exp(-rate * (now - start))) / rate
