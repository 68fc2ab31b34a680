"""Compiled per-query kernels of the metric engine (numba), one pass over each row.

For one query with relevant scores sorted into distinct values u_1 > ... > u_m
(multiplicities c_t), AP with scikit-learn's tie rule is

    AP = (1/R) * sum_t c_t * H_t / N_t,   H_t = c_1 + ... + c_t,   N_t = #items scoring >= u_t

(every relevant item of a tie block gets the precision at the block's end). So a row
needs only its relevant scores sorted (R log R) and, per item, the first t with
u_t <= score (a binary search over m values, skipped after one comparison for items
below the lowest relevant score): O(G log R) with no sort of the row. First hit
rank = N_1, last hit rank = N_m (pessimistic over ties, as the NumPy engine). AP@k and R-precision
(:mod:`fpr.metrics.ranking`) come from the same counts: the relevant items of value u_t rank at N_t.
The kernels release the GIL; the caller runs ranges of rows on a thread pool (dynamic
scheduling: numba's static ``prange`` split stalls on a machine whose cores are shared).
"""
from __future__ import annotations

import numpy as np

from fpr.compiled import njit  # numba, cached where it can write (else in memory, said once)
from fpr.defaults import AP_AT_K

LINEAR_MAX = 48  # up to this many distinct relevant values a linear count beats a binary search
# A row with m <= PASSES_MAX distinct relevant values is counted with one vectorised pass per distinct
# value instead of binning item by item (the same integers: each pass counts the items >= one relevant
# value) when that is cheaper: m passes cost about m * G / 8 (8 comparisons per SIMD instruction), the
# binning about c * (m + PASS_COST) / 8 for the c items at or above the lowest relevant value.
PASSES_MAX = 64
PASS_COST = 48


@njit(nogil=True)
def _row(s, rel, u, hist):
    """(ap, first, last, n_rel, bad) of one row; ``u``/``hist`` are scratch arrays of len(row)."""
    g = s.shape[0]
    r = 0
    for j in range(g):
        if rel[j]:
            v = s[j]
            if v != v:
                return np.nan, 0, 0, 0, np.nan, np.nan, True
            u[r] = v
            r += 1
    return _finish(s, u, r, hist)


@njit(nogil=True)
def _row_idx(s, idx, u, hist):
    """Same as :func:`_row` with the relevant columns given as indices (no pass to find them)."""
    r = idx.shape[0]
    for k in range(r):
        v = s[idx[k]]
        if v != v:
            return np.nan, 0, 0, 0, np.nan, np.nan, True
        u[k] = v
    return _finish(s, u, r, hist)


@njit(nogil=True)
def _finish(s, u, r, hist):
    """AP, ranks, AP@k and R-precision from the row ``s`` and its ``r`` relevant scores in ``u[:r]``."""
    g = s.shape[0]
    if r == 0:
        return np.nan, 0, 0, 0, np.nan, np.nan, False
    m = distinct(u, r, hist)
    low = u[0]
    one = np.empty(1, s.dtype)  # u's values (read from s) back in s's dtype, exactly: SIMD comparisons
    one[0] = low
    wide = m <= PASSES_MAX and count_ge(s, one[0]) * (m + PASS_COST) >= m * g
    if wide:  # many items at or above the lowest relevant score (i.i.d.-like rows): m counting passes
        above = 0
        for t in range(m - 1, -1, -1):
            one[0] = u[t]
            n = count_ge(s, one[0])
            hist[t] = n - above
            above = n
    elif m <= LINEAR_MAX:
        for j in range(g):
            v = s[j]
            if v >= low:
                a = 0
                for b in range(1, m):  # count of distinct relevant values <= v, minus one (vectorises)
                    a += u[b] <= v
                hist[a] += 1
    else:
        for j in range(g):
            v = s[j]
            if v >= low:
                hist[bin_of(u, m, v)] += 1
    ap, first, last, n_rel, _ = walk(hist, m, r)
    apk, rprec = walk_cut(hist, m, r, AP_AT_K)
    return ap, first, last, n_rel, apk, rprec, False


@njit(nogil=True)
def count_ge(s, x):
    """How many of ``s`` are >= x (NaN never): a branchless pass the compiler vectorises."""
    c = 0
    for j in range(s.shape[0]):
        c += s[j] >= x
    return c


@njit(nogil=True)
def distinct(u, r, hist):
    """Sort the relevant scores ``u[:r]``: their distinct values ascending into ``u[:m]``, multiplicities
    into ``hist[m:2m]``, ``hist[:m]`` zeroed for the counts; returns m (the callers' shared first step)."""
    vals = np.sort(u[:r])  # ascending
    m = 0
    for i in range(r):
        if m == 0 or vals[i] != u[m - 1]:
            u[m] = vals[i]
            hist[m] = 0
            m += 1
    for t in range(m):
        hist[m + t] = 0
    t = 0
    for i in range(r):
        while vals[i] != u[t]:
            t += 1
        hist[m + t] += 1
    return m


@njit(nogil=True)
def bin_of(u, m, v):
    """Index of the highest of the m distinct relevant values ``u[:m]`` that is <= v (v >= u[0])."""
    lo = 0
    n = m
    while n > 1:  # lower bound by halving
        half = n >> 1
        if u[lo + half] <= v:
            lo += half
        n -= half
    return lo


@njit(nogil=True)
def walk(hist, m, r):
    """(ap, first, last, n_rel, False) from the counts ``hist[:m]`` (items whose score falls at or above
    each distinct relevant value and below the next) and the multiplicities ``hist[m:2m]``."""
    # walk from the highest distinct relevant value down
    ap = 0.0
    n_ge = 0
    h = 0
    first = 0
    for t in range(m - 1, -1, -1):
        n_ge += hist[t]
        c = hist[m + t]
        h += c
        ap += c * (h / n_ge)
        if first == 0:
            first = n_ge
    return ap / r, first, n_ge, r, False


@njit(nogil=True)
def walk_cut(hist, m, r, k):
    """(AP@k, R-precision) from the counts of :func:`walk`: the relevant items of the t-th distinct value
    rank at N_t (pessimistic over ties); AP@k averages their precision over those at rank <= k (0 when
    none is), R-precision counts those at rank <= R."""
    n_ge = 0
    h = 0
    total = 0.0
    hits = 0
    within_r = 0
    for t in range(m - 1, -1, -1):
        n_ge += hist[t]
        c = hist[m + t]
        h += c
        if n_ge <= k:
            total += c * (h / n_ge)
            hits += c
        if n_ge <= r:
            within_r += c
    return (total / hits if hits else 0.0), within_r / r


@njit(nogil=True)
def metrics_mask(scores, relevant, ap, first, last, n_rel, apk, rprec, start, end):
    """Rows [start, end) with a boolean relevance mask; returns True if a relevant score is NaN."""
    g = scores.shape[1]
    u = np.empty(g, dtype=np.float64)
    hist = np.empty(2 * g + 1, dtype=np.int64)
    bad = False
    for i in range(start, end):
        ap[i], first[i], last[i], n_rel[i], apk[i], rprec[i], b = _row(scores[i], relevant[i], u, hist)
        bad |= b
    return bad


@njit(nogil=True)
def metrics_labels(scores, q_codes, g_order, g_start, g_count, ap, first, last, n_rel, apk, rprec, start, end):
    """Rows [start, end) with relevance = equal label codes: the relevant columns of label c are
    ``g_order[g_start[c]:g_start[c] + g_count[c]]`` (gallery rows sorted by label)."""
    g = scores.shape[1]
    u = np.empty(g, dtype=np.float64)
    hist = np.empty(2 * g + 1, dtype=np.int64)
    bad = False
    for i in range(start, end):
        c = q_codes[i]
        ap[i], first[i], last[i], n_rel[i], apk[i], rprec[i], b = _row_idx(
            scores[i], g_order[g_start[c]:g_start[c] + g_count[c]], u, hist)
        bad |= b
    return bad
