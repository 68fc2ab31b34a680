"""The check pass of :func:`fpr.index.exact.exact_scores`, compiled (numba): one pass, no temporaries."""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def round_checked(d, bound_q, ng, out, pos):
    """out[i, j] = float32(d[i, j]) where float32(d - b) == float32(d + b), b = bound_q[i] * ng[j].

    Elsewhere out is NaN and the flat position i * m + j goes to ``pos`` while it has room;
    returns the number of such elements (more than len(pos): the caller scans for NaN).
    """
    n, m = d.shape
    cap = pos.shape[0]
    misses = 0
    nan = np.float32(np.nan)
    zero = np.float32(0.0)
    for i in range(n):
        bq = bound_q[i]
        for j in range(m):
            x = d[i, j]
            b = bq * ng[j]
            lo = np.float32(x - b)
            if lo == np.float32(x + b):
                out[i, j] = zero if lo == zero else lo  # one zero (+0.0), whatever sign d had
            else:
                out[i, j] = nan
                if misses < cap:
                    pos[misses] = i * m + j
                misses += 1
    return misses
