"""The per-row pass of :mod:`fpr.eval.recheck`, compiled (numba): one pass over a row's float32
proposals settles AP, ranks and the top-k candidates; exact scores only where the proposal cannot.

Each proposal p (whatever float32 BLAS computed it) is within b = bq32[i] * ng[j] + a32 of the exact
dot product x, so x lies in [p - b, p + b] and, rounding being monotonic, the score
float32(fl64(x)) lies in [lo, hi] = [float32(p - b), float32(p + b)] (both ends computed in float64,
as :mod:`fpr.index.exact` does). An item whose [lo, hi] falls between the same two distinct relevant
scores counts in AP exactly as its score would; one whose interval holds a relevant score (the band)
gets its exact score. The top-k bound L is the k-th largest lo of the row: at least k scores are
>= L, so an item with hi < L is strictly below the k-th score and only items with hi >= L are
candidates; their exact scores (lo itself where lo == hi) take the tie rule (score desc, column asc).
A row not ``safe`` (its proposals may have overflowed) takes [lo, hi] = [-inf, inf] for every item:
all of them rechecked, and a score that overflows float32 is left out of the top-k as top_k does.
"""
from __future__ import annotations

import numpy as np
from fpr.compiled import njit  # numba, cached where it can write (else in memory, said once)

from fpr.defaults import AP_AT_K
from fpr.index._exact_kernels import MAX_PARTIALS, fsum_dot
from fpr.metrics._kernels import bin_of, distinct, walk, walk_cut

# counts[i] columns: proposals past the row's one-comparison filter, band items rechecked, top-k
# candidates rechecked, relevant items (always exact)
N_COUNTS = 4


@njit(nogil=True)
def exact_one(q64, bq64, g32, ngj, partials):
    """float32(fl64(q . g)) of one pair, as :func:`fpr.index.exact.exact_scores` defines it (+0.0 for zero):
    a float64 dot in any order, its interval check, and the fsum of the exact products where that
    check cannot settle the float32 rounding."""
    d = 0.0
    for t in range(q64.shape[0]):
        d += q64[t] * np.float64(g32[t])
    b = bq64 * ngj
    v = np.float32(d - b)
    if v != np.float32(d + b):
        v = np.float32(fsum_dot(q64, g32, partials))
    if v == 0:
        v = np.float32(0.0)
    return v


@njit(nogil=True)
def floor32(thr, bmax):
    """A float32 t such that every proposal p < t has hi = float32(p + b) < thr for any b <= bmax.

    The margins (2 bmax, 2^-20 |thr|, 2^-100) are far wider than the float32 roundings involved, so the
    filter only ever lets through a few more items than needed, never fewer."""
    if thr == -np.inf:
        return np.float32(-np.inf)
    if thr == np.inf:
        return np.float32(np.inf)
    t = thr - 2.0 * bmax - abs(thr) * 2.0 ** -20 - 2.0 ** -100
    return np.float32(t - abs(t) * 2.0 ** -22)


@njit(nogil=True)
def interval(p, b, ok):
    """(lo, hi): float32 bounds of the score whose float32 proposal is p with error at most b; the whole
    line where the proposal may have overflowed (``ok`` False)."""
    if not ok:
        return np.float32(-np.inf), np.float32(np.inf)
    x = np.float64(p)
    return np.float32(x - b), np.float32(x + b)


@njit(nogil=True)
def _offer(heap, n, k, v):
    """Offer v to heap[:n], the k largest values seen (a min-heap once n == k); returns the new n."""
    if n < k:
        heap[n] = v
        n += 1
        if n == k:  # heapify
            for i in range((k >> 1) - 1, -1, -1):
                _sift_down(heap, k, i)
        return n
    if v > heap[0]:
        heap[0] = v
        _sift_down(heap, n, 0)
    return n


@njit(nogil=True)
def _sift_down(heap, n, i):
    """Restore the min-heap property of heap[:n] below position i."""
    while True:
        c = 2 * i + 1
        if c >= n:
            return
        if c + 1 < n and heap[c + 1] < heap[c]:
            c += 1
        if heap[c] < heap[i]:
            heap[c], heap[i] = heap[i], heap[c]
            i = c
        else:
            return


@njit(nogil=True)
def block_rows(P, Q64, G32, bq32, bq64, ng, a32, ng_max, safe, rel_order, rel_start, rel_count, k,
               ap, first, last, n_rel, apk, rprec, top_idx, top_val, counts, start, end):
    """Rows [start, end) of a block: P (n, G) float32 proposals; Q64 the queries in float64; G32 the
    gallery; bq32 / bq64 the per-query error factors of the float32 proposals / the float64 check;
    ``safe[i]`` False where the proposals may have overflowed (every item of that row is then rechecked);
    row i's relevant columns are rel_order[rel_start[i]:rel_start[i] + rel_count[i]]."""
    g = P.shape[1]
    rmax = 0
    for i in range(start, end):
        rmax = max(rmax, rel_count[i])
    u = np.empty(max(rmax, 1), np.float64)
    rv = np.empty(max(rmax, 1), np.float32)
    hist = np.empty(2 * rmax + 1, np.int64)
    mark = np.zeros(g, np.uint8)
    cand = np.empty(g, np.int64)
    cval = np.empty(g, np.float32)
    heap = np.empty(max(k, 1), np.float32)
    partials = np.empty(MAX_PARTIALS, np.float64)
    for i in range(start, end):
        q64 = Q64[i]
        b32 = bq32[i]
        b64 = bq64[i]
        ok = safe[i]
        r = rel_count[i]
        s0 = rel_start[i]
        for t in range(r):
            j = rel_order[s0 + t]
            mark[j] = 1
            v = exact_one(q64, b64, G32[j], ng[j], partials)
            rv[t] = v
            u[t] = v
        m = 0
        low = np.inf
        if r > 0:
            m = distinct(u, r, hist)
            low = u[0]
        bmax = b32 * ng_max + a32
        topthr = -np.inf if k > 0 else np.inf
        hn = 0
        nc = 0
        band = 0
        proc = 0
        t32 = floor32(min(low, topthr), bmax) if ok else np.float32(-np.inf)
        row = P[i]
        for j in range(g):
            p = row[j]
            if p < t32:  # below both thresholds: one comparison decides it (the common case)
                continue
            proc += 1
            lo, hi = interval(p, b32 * ng[j] + a32, ok)
            if k > 0 and hi >= topthr:
                cand[nc] = j
                nc += 1
                hn = _offer(heap, hn, k, lo)
                if hn == k and heap[0] > topthr:  # the bound rose: so does the row's filter
                    topthr = heap[0]
                    if ok:
                        t32 = floor32(min(low, topthr), bmax)
            if r > 0 and hi >= low and mark[j] == 0:
                if lo >= low:
                    a = bin_of(u, m, lo)
                    if a == bin_of(u, m, hi):  # no relevant score inside [lo, hi]: the comparisons are settled
                        hist[a] += 1
                        continue
                v = exact_one(q64, b64, G32[j], ng[j], partials)
                band += 1
                if v >= low:
                    hist[bin_of(u, m, v)] += 1
        for t in range(r):
            hist[bin_of(u, m, rv[t])] += 1
            mark[rel_order[s0 + t]] = 0
        if r > 0:
            ap[i], first[i], last[i], n_rel[i], _ = walk(hist, m, r)
            apk[i], rprec[i] = walk_cut(hist, m, r, AP_AT_K)
        else:
            ap[i], first[i], last[i], n_rel[i], apk[i], rprec[i] = np.nan, 0, 0, 0, np.nan, np.nan
        topk = 0
        if k > 0:
            bound = heap[0]
            n2 = 0
            for c in range(nc):
                j = cand[c]
                lo, hi = interval(row[j], b32 * ng[j] + a32, ok)
                if hi >= bound:
                    if lo == hi:
                        v = np.float32(0.0) if lo == 0 else lo
                    else:
                        v = exact_one(q64, b64, G32[j], ng[j], partials)
                        topk += 1
                    if v == np.inf or v == -np.inf:  # finite scores only, as top_k (only in a row not safe)
                        continue
                    cand[n2] = j
                    cval[n2] = v
                    n2 += 1
            order = np.argsort(-cval[:n2], kind="mergesort")  # stable: equal scores keep column order
            for t in range(k):
                if t < n2:
                    top_idx[i, t] = cand[order[t]]
                    top_val[i, t] = cval[order[t]]
                else:  # fewer finite scores than k: -1 pads, as top_k
                    top_idx[i, t] = -1
                    top_val[i, t] = -np.inf
        counts[i, 0] = proc
        counts[i, 1] = band
        counts[i, 2] = topk
        counts[i, 3] = r


@njit(nogil=True)
def margin_rows(P, Q64, G32, bq32, bq64, ng, a32, ng_max, safe, rel_order, rel_start, rel_count, rel_sum,
                best_other, counts, start, end):
    """The parts of :func:`fpr.metrics.top_margin.top_margin` for rows [start, end) of a block (arguments as
    :func:`block_rows`): ``rel_sum[i]`` the correctly rounded sum of the relevant items' exact scores and
    ``best_other[i]`` the highest exact score of the other items (NaN where there is none above -inf).

    The best impostor from the proposals: L, the highest lower bound lo over the impostors, is at most the
    highest score, which lies in its own item's [lo, hi]; so only impostors with hi >= L can hold it, and
    they get their exact scores (lo itself where lo == hi). One pass over the row keeps the highest lo seen
    so far and its filter (:func:`floor32`: a proposal below it has hi below that lo, so below L), which
    settles most proposals with one comparison; the candidates kept on the way are then checked against the
    final L. ``counts[i]``: exact scores computed for impostors."""
    g = P.shape[1]
    mark = np.zeros(g, np.uint8)
    cand = np.empty(g, np.int64)
    clo = np.empty(g, np.float32)
    chi = np.empty(g, np.float32)
    ones = np.ones(max(g, 1), np.float32)
    u = np.empty(max(g, 1), np.float64)
    partials = np.empty(MAX_PARTIALS, np.float64)
    for i in range(start, end):
        q64 = Q64[i]
        b32 = bq32[i]
        b64 = bq64[i]
        ok = safe[i]
        r = rel_count[i]
        s0 = rel_start[i]
        for t in range(r):
            j = rel_order[s0 + t]
            mark[j] = 1
            u[t] = exact_one(q64, b64, G32[j], ng[j], partials)
        rel_sum[i] = _fsum(u, r, ones, partials)
        row = P[i]
        bmax = b32 * ng_max + a32
        t32 = np.float32(-np.inf)
        nc = 0
        low = -np.inf
        for j in range(g):
            p = row[j]
            if p < t32 or mark[j]:
                continue
            lo, hi = interval(p, b32 * ng[j] + a32, ok)
            cand[nc] = j
            clo[nc] = lo
            chi[nc] = hi
            nc += 1
            if lo > low:  # the bound rose: so does the row's filter (never in a row not safe: lo is -inf)
                low = lo
                t32 = floor32(low, bmax)
        best = -np.inf
        n_exact = 0
        for c in range(nc):
            if chi[c] >= low:
                lo = clo[c]
                if lo == chi[c]:
                    v = np.float32(0.0) if lo == 0 else lo
                else:
                    v = exact_one(q64, b64, G32[cand[c]], ng[cand[c]], partials)
                    n_exact += 1
                if v > best:
                    best = v
        best_other[i] = best if best > -np.inf else np.nan
        counts[i] = n_exact
        for t in range(r):
            mark[rel_order[s0 + t]] = 0


@njit(nogil=True)
def _fsum(u, r, ones, partials):
    """math.fsum(u[:r]): the correctly rounded sum, infinities as math.fsum takes them (a score of a row
    that overflowed float32 is +-inf; fsum_dot's partials are for finite values)."""
    pos = False
    neg = False
    for t in range(r):
        if u[t] == np.inf:
            pos = True
        elif u[t] == -np.inf:
            neg = True
    if pos and neg:
        return np.nan
    if pos:
        return np.inf
    if neg:
        return -np.inf
    return fsum_dot(u[:r], ones[:r], partials) if r > 0 else 0.0
