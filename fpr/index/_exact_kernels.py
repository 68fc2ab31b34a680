"""The check pass of :func:`fpr.index.exact.exact_scores`, compiled (numba): one pass, no temporaries.

Elements the interval check cannot settle are recomputed in place with :func:`fsum_dot`, a port of
CPython's ``math.fsum`` (Shewchuk's exact partials, then one correctly rounded result, ties to even
as in CPython's ``_fsum_exact`` tail), so the compiled and the NumPy path give the same bits.
"""
from __future__ import annotations

import numpy as np
from fpr.compiled import njit  # numba, cached where it can write (else in memory, said once)

# Products of float32 numbers span about 2^-298 .. 2^256: at most ~11 non-overlapping float64
# partials; the room here is far beyond that.
MAX_PARTIALS = 64


@njit(nogil=True)
def round_checked(d, q64, g64, bound_q, ng, out):
    """out[i, j] = float32(d[i, j]) where float32(d - b) == float32(d + b), b = bound_q[i] * ng[j];
    elsewhere float32 of the correctly rounded exact sum of q64[i] * g64[j]. Returns how many
    elements took that second path."""
    n, m = d.shape
    misses = 0
    zero = np.float32(0.0)
    partials = np.empty(MAX_PARTIALS, dtype=np.float64)
    for i in range(n):
        bq = bound_q[i]
        for j in range(m):
            x = d[i, j]
            b = bq * ng[j]
            lo = np.float32(x - b)
            if lo != np.float32(x + b):
                lo = np.float32(fsum_dot(q64[i], g64[j], partials))
                misses += 1
            out[i, j] = zero if lo == zero else lo  # one zero (+0.0), whatever sign the sum had
    return misses


@njit(nogil=True)
def fsum_dot(a, b, partials):
    """The float64 nearest to sum_k a[k] * b[k] (exact products: float32 values held in float64)."""
    n = 0
    for k in range(a.shape[0]):
        x = a[k] * b[k]
        i = 0
        for t in range(n):
            y = partials[t]
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo != 0.0:
                partials[i] = lo
                i += 1
            x = hi
        n = i
        if x != 0.0:
            if n >= MAX_PARTIALS:
                raise ValueError("fsum_dot: more partials than products of float32 numbers can need")
            partials[n] = x
            n += 1
    if n == 0:
        return 0.0
    # sum the partials from the top, stopping at the first inexact addition; round half to even
    n -= 1
    hi = partials[n]
    lo = 0.0
    while n > 0:
        x = hi
        n -= 1
        y = partials[n]
        hi = x + y
        yr = hi - x
        lo = y - yr
        if lo != 0.0:
            break
    if n > 0 and ((lo < 0.0 and partials[n - 1] < 0.0) or (lo > 0.0 and partials[n - 1] > 0.0)):
        y = lo * 2.0
        x = hi + y
        yr = x - hi
        if y == yr:
            hi = x
    return hi
