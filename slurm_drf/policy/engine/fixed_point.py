"""Shares as whole numbers of 2**-SHARE_BITS, in numpy: the one arithmetic both engines order by.

`policy.rule` states it (`leaf_share`: each share u·q / (c·p), w = p/q,
rounded down once to a whole number of 2**-SHARE_BITS); here it is done on
arrays, exactly, in int64 where every number stays below 2**52 (checked
before) and on Python integers (dtype object) where not.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from slurm_drf.policy.rule import SHARE_BITS

# Every amount stays below this in int64 (checked before), where floats hold it exactly.
SAFE: Final = 1 << 52

# Whole numbers: int64, or Python integers (dtype object) where a pool's amounts do not fit.
Amounts = npt.NDArray[Any]


def fits_int64(most: Sequence[int], caps: Sequence[int], p: int, q: int) -> bool:
    """Whether shares of amounts up to `most[r]` of each capacity `caps[r]` (every one > 0), under
    weights of numerators up to `p` and denominators up to `q`, stay below 2**52 in int64 (`shift_div`'s
    bound), the products that make them too."""
    units = max((m << SHARE_BITS) // c + 1 for m, c in zip(most, caps, strict=True))
    return max(most) * q < SAFE and max(caps) * p < SAFE and units * q < SAFE


def shift_div(a: Amounts, shift: int, b: Amounts) -> Amounts:
    """floor(a · 2**shift / b), exactly, for 0 <= a, 0 < b and a result below 2**52.

    int64: the float quotient is within 1/2 of the exact one, so its floor
    is at most 1 off; the remainder a · 2**shift - q · b, computed modulo
    2**64 (numpy's int64 wraps), is then small and exact, and says which.
    """
    if a.dtype == object:
        return (a << shift) // b
    estimate = a / b
    estimate *= float(1 << shift)
    quotient = np.floor(estimate, out=estimate).astype(np.int64)
    rest = a << shift
    rest -= quotient * b
    quotient += rest >= b
    quotient -= rest < 0
    return quotient


def mul_shift(m: Amounts, y: Amounts, shift: int) -> Amounts:
    """floor(m · y / 2**shift), exactly, for 0 <= m, y below 2**53 and a result below 2**52 (as `shift_div`)."""
    if m.dtype == object:
        return (m * y) >> shift
    estimate = y.astype(np.float64)
    estimate *= m.astype(np.float64) * (1.0 / (1 << shift))
    product = np.floor(estimate, out=estimate).astype(np.int64)
    rest = m * y
    rest -= product << shift
    product += rest >= 1 << shift
    product -= rest < 0
    return product


def descending(values: Amounts) -> Amounts:
    """Each row sorted largest first (three columns, the usual cpu, mem, gpu, by a sorting network)."""
    if values.shape[1] != 3:
        ordered: Amounts = np.sort(values, axis=1)[:, ::-1]
        return ordered
    a, b, c = values[:, 0], values[:, 1], values[:, 2]
    network: Amounts = np.empty_like(values)
    high, low = np.maximum(a, b), np.minimum(a, b)
    np.maximum(high, c, out=network[:, 0])
    rest = np.minimum(high, c, out=high)  # two columns' worth of room besides the result
    np.maximum(low, rest, out=network[:, 1])
    np.minimum(low, rest, out=network[:, 2])
    return network


def share_vectors(
    amounts: npt.NDArray[np.int64], caps: Sequence[int], weights: Sequence[Fraction], of: npt.NDArray[np.int64]
) -> Amounts:
    """`rule.leaf_share(amounts[k], caps, weights[of[k]]).vector` of every row k: its shares over the
    usable resources `caps` (every one > 0), largest first, whole numbers of 2**-SHARE_BITS."""
    rows, width = amounts.shape
    if not rows or not width:
        return np.zeros((rows, max(width, 1)), dtype=np.int64)
    by_object = {id(w): w for w in weights}.values()  # accounts share a few weight objects
    most_p, most_q = max(w.numerator for w in by_object), max(w.denominator for w in by_object)
    fits = fits_int64(amounts.max(axis=0).tolist(), caps, most_p, most_q)
    dtype: Any = np.int64 if fits else object
    p = np.array([w.numerator for w in weights], dtype=dtype)[of][:, None]
    q = np.array([w.denominator for w in weights], dtype=dtype)[of][:, None]
    values = amounts if fits else amounts.astype(object)
    return descending(shift_div(values * q, SHARE_BITS, np.array(caps, dtype=dtype)[None, :] * p))
