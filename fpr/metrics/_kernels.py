"""Compiled per-query kernels of the metric engine (numba): one pass over each row from memory, the others in cache.

For one query with relevant scores sorted into distinct values u_1 > ... > u_m
(multiplicities c_t), AP with scikit-learn's tie rule is

    AP = (1/R) * sum_t c_t * H_t / N_t,   H_t = c_1 + ... + c_t,   N_t = #items scoring >= u_t

(every relevant item of a tie block gets the precision at the block's end). So a row
needs only its relevant scores sorted (R log R) and, per item, the first t with
u_t <= score: O(G log R) with no sort of the row. First hit rank = N_1, last hit
rank = N_m (pessimistic over ties, as the NumPy engine). AP@k and R-precision
(:mod:`fpr.metrics.ranking`) come from the same counts: the relevant items of value u_t rank at N_t.

The row is read in blocks of :data:`BLOCK` items with vectorised loops of fixed trip count and
32-bit lanes: the relevance mask as 8-byte words (one OR per block), then N_m counted per block
(which blocks hold a candidate: an item at or above u_m, the lowest relevant score), then the other N_t
counted over those blocks only, :data:`GROUP` thresholds per read of a block, a chunk of blocks at a
time (kept in L1). A row whose first block is mostly candidates (i.i.d.-like scores) skips the list
and counts every block at once. Per pair on AMD EPYC (5k x 5k float32, one thread;
benchmarks/results/engine_floor.md): the mask and the relevant scores ~0.12-0.2 ns, the streaming
count ~0.13 ns (the memory floor, ``scores.sum()``, is ~0.17), each further group of four
thresholds ~0.11 ns over a dense row (~0.027 ns per item and threshold: compute-bound), a few
hundredths over the fifth to third of the blocks that hold candidates on retrieval scores (~1% of
the items).
The kernels release the GIL; the caller runs ranges of rows on a thread pool (dynamic
scheduling: numba's static ``prange`` split stalls on a machine whose cores are shared).
"""
from __future__ import annotations

import numpy as np

from fpr.compiled import njit, prefetch  # numba, cached where it can write (else in memory, said once)
from fpr.defaults import AP_AT_K

# A row is read in blocks of BLOCK items: one vectorised count per block of the scores at or above the
# lowest relevant one, so that later work touches only the blocks that hold such a candidate (on retrieval
# scores about 1% of a row's items are candidates, in a fifth to a third of its blocks). 64 float32 are one
# cache line pair; smaller blocks pay the per-block work more often, larger ones read more items again.
BLOCK = 64
# The candidate blocks are then counted against the other distinct relevant values, GROUP per read of a
# block (more gain nothing: the compares, not the reads, are the cost), CHUNK blocks at a time (16 x 64
# float32 = 4 KB stays in L1 through every pass; a 20 KB row re-read pass after pass does not).
GROUP = 4
CHUNK = 16
# ... or, with many distinct values and candidates one or two per block, item by item: each candidate binned
# by a binary search. Relative costs (AMD EPYC): a group's pass over one block ~7 ns (GROUP_COST), scanning a
# block to its last candidate (SCAN_COST) and binning one candidate (BIN_COST) about 12 and 3 times that: the
# item binning wins from about 60-100 distinct values with scattered candidates (R = 100 scattered over 3k
# items: 5.5 against 6.4 ns per pair), never below 62 (so no linear search is needed there).
GROUP_COST = 1
SCAN_COST = 12
BIN_COST = 3
# A row with at least a quarter of its first block at or above the lowest relevant score is counted over
# every block at once (no list first) up to this many distinct relevant values; more go through the list.
DENSE_MAX = 64
hint = prefetch()  # LLVM's prefetch: the next row's cache lines asked for while this one is counted
INSERTION_MAX = 32  # relevant scores sorted in place up to this many (np.sort allocates a copy per row)


@njit(nogil=True)
def _gather(s, rel, u, pos):
    """The relevant scores of row ``s`` (``rel``: its mask as bytes) into ``u``: their count, or -1 if one
    is NaN. The mask is read as 8-byte words, BLOCK bytes tested at once (one vectorised OR, indices
    rather than slices: a slice costs two atomic reference counts); only a non-zero word's bytes are
    looked at, their relevant positions appended to ``pos`` (len(row) + 8), and the scores read after."""
    g = s.shape[0]
    g8 = g - g % 8
    words = rel[:g8].view(np.uint64)  # x86 and ARM load unaligned words (a row starts at any byte)
    nw = words.shape[0]
    step = BLOCK // 8
    full = nw // step
    r = 0
    for b in range(full + 1):
        j = b * step
        e = j + step if b < full else nw
        acc = np.uint64(0)
        if b < full:
            for w in range(step):
                acc |= words[j + w]
        else:
            for w in range(j, e):
                acc |= words[w]
        if acc:
            for w in range(j, e):
                if words[w]:
                    r = _take(rel, pos, r, 8 * w, 8 * w + 8)
    return _load(s, pos, _take(rel, pos, r, g8, g), u)


@njit(nogil=True)
def _take(rel, pos, r, j, e):
    """Append the relevant positions among items [j, e) to ``pos[:r]`` (each written, kept if relevant:
    no branch); the new count."""
    for k in range(j, e):
        pos[r] = k
        r += rel[k] != 0
    return r


@njit(nogil=True)
def _load(s, pos, r, u):
    """``u[:r] = s[pos[:r]]``; r, or -1 if one is NaN. Without a branch per score: the row is not in cache
    yet, and no read waits for the test of the one before."""
    bad = False
    for k in range(r):
        v = s[pos[k]]
        bad |= v != v
        u[k] = v
    return -1 if bad else r


@njit(nogil=True)
def _row(s, rel, u, hist, bc, pos, nxt, nrel):
    """(ap, first, last, n_rel, ap@k, r-precision, bad) of one row; ``u``/``hist``/``bc``/``pos`` are scratch arrays
    (len(row), 2 len(row) + 1, 2 (len(row) / BLOCK + 1), len(row) + 8); ``nxt``/``nrel``: the next row's
    scores and mask, prefetched."""
    r = _gather(s, rel, u, pos)
    if r < 0:
        return np.nan, 0, 0, 0, np.nan, np.nan, True
    return _finish(s, u, r, hist, bc, nxt, nrel)


@njit(nogil=True)
def _row_idx(s, idx, u, hist, bc, nxt):
    """Same as :func:`_row` with the relevant columns given as indices (no pass to find them)."""
    r = _load(s, idx, idx.shape[0], u)
    if r < 0:
        return np.nan, 0, 0, 0, np.nan, np.nan, True
    return _finish(s, u, r, hist, bc, nxt, nxt)


@njit(nogil=True)
def _finish(s, u, r, hist, bc, nxt, nrel):
    """AP, ranks, AP@k and R-precision from the row ``s`` and its ``r`` relevant scores in ``u[:r]`` (``u`` in s's dtype, so
    every comparison is between two values of the row: exact)."""
    if r == 0:
        return np.nan, 0, 0, 0, np.nan, np.nan, False
    m = distinct(u, r, hist)
    if m <= DENSE_MAX and dense(s, u[0]):
        count_blocks(s, u, m, 0, 0, hist, bc, all_blocks(s, bc))
    else:
        c, nb = block_counts(s, u[0], bc, nxt, nrel)
        groups = (m + GROUP - 2) // GROUP  # the thresholds u[1:m] in groups of GROUP
        if groups * nb * GROUP_COST <= nb * SCAN_COST + c * BIN_COST:
            count_blocks(s, u, m, 1, c, hist, bc, nb)
        else:
            bin_blocks(s, u[0], u, m, hist, bc, nb)
    ap, first, last, n_rel, _ = walk(hist, m, r)
    apk, rprec = walk_cut(hist, m, r, AP_AT_K)
    return ap, first, last, n_rel, apk, rprec, False


@njit(nogil=True)
def block_counts(s, low, bc, nxt, nrel):
    """The blocks of BLOCK items holding a score >= ``low``: their indices into ``bc[:nb]``, their counts
    into ``bc[h:h + nb]`` (h = len(bc) // 2), appended without a branch so that the later passes loop over
    a list (a test per block there mispredicts once per candidate block); returns (total count, nb). A
    fixed trip count and 32-bit lanes (a block holds at most BLOCK) keep the count one compare and one
    subtract per vector. Each block asks for the same block of the next row (``nxt``, and its mask ``nrel``):
    the scattered reads of a row's relevant scores then find it in cache instead of stalling the hardware
    prefetcher's stream (1.2x on a shuffled gallery; the dense path, compute-bound, gains nothing from it)."""
    g = s.shape[0]
    full = g // BLOCK
    h = bc.shape[0] // 2
    c = 0
    nb = 0
    for b in range(full):
        j = b * BLOCK
        n = np.int32(0)
        for k in range(BLOCK):
            n = np.int32(n + (s[j + k] >= low))
        bc[nb] = b
        bc[h + nb] = n
        for k in range(0, BLOCK, 16):  # 16 float32 per cache line (float64: every other line, then the stream)
            hint(nxt, j + k)
        hint(nrel, j)
        c += n
        nb += n != 0
    n = np.int32(0)
    for k in range(full * BLOCK, g):
        n = np.int32(n + (s[k] >= low))
    bc[nb] = full
    bc[h + nb] = n
    return c + n, nb + (n != 0)


@njit(nogil=True)
def count_blocks(s, u, m, t0, c, hist, bc, nb):
    """The counts ``hist[:m]`` (items in [u_t, u_t+1)) from N_t = #items >= u_t, each N_t with t >= t0
    counted in the blocks ``bc[:nb]`` (those holding an item >= u_0: every item >= u_t is in one), GROUP
    thresholds per read of a block (the last group padded with a repeated threshold when it holds three),
    N_0 = ``c`` when t0 = 1. The blocks are taken CHUNK at a time, every threshold counted over a chunk
    before the next: a chunk stays in L1 for all its passes (a whole row of 20 KB does not)."""
    full = s.shape[0] // BLOCK
    nf = nb - (nb > 0 and bc[nb - 1] == full)  # the whole blocks; the partial last one is read to the end
    hist[0] = c  # distinct() left hist[:m] zero; N_0 is counted below when t0 = 0
    for i0 in range(0, max(nf, 1), CHUNK):
        i1 = min(i0 + CHUNK, nf)
        tail = full * BLOCK if i1 == nf else s.shape[0]  # the items after the last whole block, once
        t = t0
        while m - t >= GROUP - 1:
            n = count4(s, bc, i0, i1, tail, u[t], u[t + 1], u[t + 2], u[min(t + 3, m - 1)])
            for i in range(min(GROUP, m - t)):
                hist[t + i] += n[i]
            t += GROUP
        for k in range(t, m):  # one or two left: a pass each (cheaper than a group's four compares)
            hist[k] += count1(s, bc, i0, i1, tail, u[k])
    for k in range(m - 1):
        hist[k] -= hist[k + 1]


@njit(nogil=True)
def dense(s, low):
    """Whether at least a quarter of the row's first block scores >= ``low``: then most of the row is likely
    to (i.i.d.-like scores) and every block is counted at once, without first listing the candidate
    blocks (a guess: it picks the cheaper path, never the numbers)."""
    e = min(BLOCK, s.shape[0])
    n = 0
    for k in range(e):
        n += s[k] >= low
    return 4 * n >= e


@njit(nogil=True)
def all_blocks(s, bc):
    """Every whole block of the row listed in ``bc`` (the counts read the partial last one anyway); their number."""
    full = s.shape[0] // BLOCK
    for b in range(full):
        bc[b] = b
    return full


@njit(nogil=True)
def count4(s, bc, i0, i1, tail, x0, x1, x2, x3):
    """How many items of the blocks ``bc[i0:i1]`` and of ``s[tail:]`` score >= each of x0..x3 (NaN never):
    one read of a block feeds four 32-bit counts (the compiler keeps them in vector registers)."""
    n0 = n1 = n2 = n3 = 0
    for i in range(i0, i1):
        j = max(bc[i], 0) * BLOCK  # known >= 0: no negative-index wrap, so no vector gathers
        c0 = c1 = c2 = c3 = np.int32(0)
        for k in range(BLOCK):
            v = s[j + k]
            c0 = np.int32(c0 + (v >= x0))
            c1 = np.int32(c1 + (v >= x1))
            c2 = np.int32(c2 + (v >= x2))
            c3 = np.int32(c3 + (v >= x3))
        n0 += c0
        n1 += c1
        n2 += c2
        n3 += c3
    for k in range(tail, s.shape[0]):
        v = s[k]
        n0 += v >= x0
        n1 += v >= x1
        n2 += v >= x2
        n3 += v >= x3
    return n0, n1, n2, n3


@njit(nogil=True)
def bin_blocks(s, low, u, m, hist, bc, nb):
    """Add each item scoring >= ``low`` to the count of its distinct relevant value's bin (``hist[:m]``, by
    binary search: this path is taken only for m > 61), reading only the blocks ``bc[:nb]``, each up to its
    last candidate (its count is known: a block usually holds one, on average half of it is read)."""
    h = bc.shape[0] // 2
    for i in range(nb):
        left = bc[h + i]
        k = max(bc[i], 0) * BLOCK
        while left:
            v = s[k]
            if v >= low:
                left -= 1
                hist[bin_of(u, m, v)] += 1
            k += 1


@njit(nogil=True)
def count1(s, bc, i0, i1, tail, x):
    """:func:`count4` for one threshold."""
    n = 0
    for i in range(i0, i1):
        j = max(bc[i], 0) * BLOCK
        c = np.int32(0)
        for k in range(BLOCK):
            c = np.int32(c + (s[j + k] >= x))
        n += c
    for k in range(tail, s.shape[0]):
        n += s[k] >= x
    return n


@njit(nogil=True)
def distinct(u, r, hist):
    """Sort the relevant scores ``u[:r]``: their distinct values ascending into ``u[:m]``, multiplicities
    into ``hist[m:2m]``, ``hist[:m]`` zeroed for the counts; returns m (the callers' shared first step,
    fpr.eval._recheck_kernels's too: only ``u[:r]`` and ``hist[:2m]`` are touched)."""
    if r <= INSERTION_MAX:  # in place: np.sort would allocate a copy for every row
        for i in range(1, r):
            v = u[i]
            k = i
            while k > 0 and u[k - 1] > v:
                u[k] = u[k - 1]
                k -= 1
            u[k] = v
    else:
        u[:r] = np.sort(u[:r])  # ascending
    m = 0
    for i in range(r):  # in place: u[m - 1] is the last distinct value kept, m <= i
        if m == 0 or u[i] != u[m - 1]:
            u[m] = u[i]
            hist[m] = 1
            m += 1
        else:
            hist[m - 1] += 1
    for t in range(m - 1, -1, -1):  # the multiplicities up to hist[m:2m] (each read before a write reaches it)
        hist[m + t] = hist[t]
        hist[t] = 0
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
def _scratch(scores):
    """Per-thread scratch: relevant values in the scores' dtype, counts and multiplicities, candidate blocks, relevant positions."""
    g = scores.shape[1]
    return (np.empty(g, dtype=scores.dtype), np.empty(2 * g + 1, dtype=np.int64),
            np.empty(2 * (g // BLOCK + 1), dtype=np.int64), np.empty(g + 8, dtype=np.int64))


@njit(nogil=True)
def metrics_mask(scores, relevant, ap, first, last, n_rel, apk, rprec, start, end):
    """Rows [start, end) with the relevance mask as bytes (uint8); returns True if a relevant score is NaN."""
    u, hist, bc, pos = _scratch(scores)
    bad = False
    for i in range(start, end):
        n = min(i + 1, end - 1)
        ap[i], first[i], last[i], n_rel[i], apk[i], rprec[i], b = _row(scores[i], relevant[i], u, hist, bc, pos,
                                                                        scores[n], relevant[n])
        bad |= b
    return bad


@njit(nogil=True)
def metrics_labels(scores, q_codes, g_order, g_start, g_count, ap, first, last, n_rel, apk, rprec, start, end):
    """Rows [start, end) with relevance = equal label codes: the relevant columns of label c are
    ``g_order[g_start[c]:g_start[c] + g_count[c]]`` (gallery rows sorted by label)."""
    u, hist, bc, _ = _scratch(scores)
    bad = False
    for i in range(start, end):
        c = q_codes[i]
        ap[i], first[i], last[i], n_rel[i], apk[i], rprec[i], b = _row_idx(
            scores[i], g_order[g_start[c]:g_start[c] + g_count[c]], u, hist, bc, scores[min(i + 1, end - 1)])
        bad |= b
    return bad
