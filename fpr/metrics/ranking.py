"""Retrieval metrics over a score matrix, vectorised across queries.

Definitions (ARCHITECTURE.md, pinned by tests):

- AP = (1/R) * sum_k rel_k * precision@k over the full scoped ranking, R = all
  relevant items in scope, no interpolation, no top-k cut.
- Ties are grouped as scikit-learn does: every relevant item in a block of equal
  scores gets the precision at the *end* of the block. AP therefore does not
  depend on the order of equal scores. Ranks use the same convention: an item's
  rank is the last position of its tie block (a tie never helps a query).
- CMC@k: 1 if the first relevant item's rank <= k. mINP: R / rank of the last
  relevant item.
- AP@k (k = ``fpr.defaults.AP_AT_K`` = 10; its mean over queries is MAP@k), as torchmetrics'
  ``retrieval_average_precision(preds, target, top_k=k)`` (``RetrievalMAP(top_k=k)``) defines it: the
  mean, over the relevant items ranked within the top k, of the precision at their rank; 0 when none
  is. ``AP@k = (1/h_k) * sum_{i <= k} rel_i * precision@i``, ``h_k`` = relevant items at rank <= k
  (not min(k, R): a query whose only hit in the top k is at rank 1 scores 1). With fpr's tie rule
  (ranks pessimistic over ties: a tie block that ends past k is outside the top k); without ties it
  equals torchmetrics' value. NaN when the query has no relevant item.
- R-precision (standard; Manning, Raghavan and Schuetze, *Introduction to Information Retrieval*,
  section 8.4): the precision at rank R, R = number of relevant items in scope: relevant items at
  rank <= R, divided by R (pessimistic over ties, like the ranks). NaN when R = 0.

Items outside a query's scope are passed as ``-inf`` scores with ``rel=False``;
they sort last and never count.

Two implementations give the same numbers: a compiled kernel (:mod:`fpr.metrics._kernels`,
numba; O(G log R) per query, no sort of the row) used when numba imports, and the NumPy
engine below (candidates + packed-key sorts), the fallback. ``FPR_METRICS_ENGINE``
(auto | numba | numpy) picks one; the tests run both.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from fpr import settings
from fpr.defaults import AP_AT_K

DEFAULT_CHUNK = 256
TOPK_ROWS_ELEMENTS = 1 << 22  # scores per step of top_k (bounds its temporaries next to a block's scores)
TOPK_SAMPLE_PER_K = 512  # top_k samples about this many columns per k of a row for its candidate bound
DENSE_BLOCK = 64  # rows per sort in the dense path (keeps its int64 temporaries in cache)
THREADS = min(4, os.cpu_count() or 1)
DENSE_FRACTION = 0.2  # above this share of candidates, sorting whole rows is cheaper


@dataclass
class RetrievalMetrics:
    ap: np.ndarray  # (Q,) float64; NaN when the query has no relevant item
    first_hit_rank: np.ndarray  # (Q,) int64, 1-based; 0 when no relevant item
    last_hit_rank: np.ndarray  # (Q,) int64
    n_relevant: np.ndarray  # (Q,) int64
    # (Q,) float64 top margin (fpr.metrics.top_margin); set by fpr.eval.scoring, None from the engine alone
    top_margin: np.ndarray | None = None
    ap_at_k: np.ndarray | None = None  # (Q,) float64 AP@k, k = AP_AT_K (see the module docstring)
    r_precision: np.ndarray | None = None  # (Q,) float64 precision at rank R

    def cmc(self, k: int) -> np.ndarray:
        return ((self.first_hit_rank >= 1) & (self.first_hit_rank <= k)).astype(np.float64)

    @property
    def inp(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.last_hit_rank > 0, self.n_relevant / np.maximum(self.last_hit_rank, 1), np.nan)


# "auto": the compiled kernel (fpr.metrics._kernels, numba) when numba imports, else NumPy;
# "numba" / "numpy" force one (tests run both).
ENGINE = settings.get("FPR_METRICS_ENGINE")


def _kernels():
    if ENGINE == "numpy":
        return None
    try:
        from fpr.metrics import _kernels
    except ImportError:
        if ENGINE == "numba":
            raise
        return None
    return _kernels


def _float_scores(scores: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(scores if scores.dtype in (np.float32, np.float64) else scores.astype(np.float64))


PARALLEL_MIN = 1 << 21  # score entries below which the kernel runs on the calling thread


def _compiled(kernel, scores: np.ndarray, *rel) -> RetrievalMetrics:
    q, g = scores.shape
    out = (np.empty(q), np.empty(q, np.int64), np.empty(q, np.int64), np.empty(q, np.int64), np.empty(q),
           np.empty(q))
    if q and g:
        if q * g < PARALLEL_MIN or THREADS == 1 or q == 1:
            bad = kernel(scores, *rel, *out, 0, q)
        else:
            step = max(1, min(DEFAULT_CHUNK, -(-q // (8 * THREADS))))
            with ThreadPoolExecutor(max_workers=THREADS) as pool:
                bad = any(pool.map(lambda s: kernel(scores, *rel, *out, s, min(s + step, q)), range(0, q, step)))
        if bad:
            raise ValueError("relevant items have NaN scores")
    else:
        out[0][:], out[1][:], out[2][:], out[3][:], out[4][:], out[5][:] = np.nan, 0, 0, 0, np.nan, np.nan
    return _metrics(out)


def _metrics(parts) -> RetrievalMetrics:
    """(ap, first, last, n_rel, ap_at_k, r_precision) arrays as :class:`RetrievalMetrics`."""
    ap, first, last, n_rel, apk, rprec = parts
    return RetrievalMetrics(ap, first, last, n_rel, ap_at_k=apk, r_precision=rprec)


def retrieval_metrics(scores: np.ndarray, relevant: np.ndarray, *, chunk: int = DEFAULT_CHUNK) -> RetrievalMetrics:
    """Per-query metrics for a (Q, G) score matrix and a boolean (Q, G) relevance mask."""
    scores = np.asarray(scores)
    relevant = np.asarray(relevant, dtype=bool)
    if scores.shape != relevant.shape or scores.ndim != 2:
        raise ValueError(f"scores {scores.shape} and relevant {relevant.shape} must be the same 2-D shape")
    k = _kernels()
    if k is not None:
        # the mask as bytes: the kernel ORs a block of flags in one vectorised step
        return _compiled(k.metrics_mask, _float_scores(scores), np.ascontiguousarray(relevant).view(np.uint8))
    return _chunked(scores, lambda s, e: np.flatnonzero(relevant[s:e]), chunk,
                    lambda s, e, flat: relevant[s:e].reshape(-1)[flat])


def retrieval_metrics_labels(scores: np.ndarray, query_labels, gallery_labels, *,
                             chunk: int = DEFAULT_CHUNK) -> RetrievalMetrics:
    """Same as :func:`retrieval_metrics` with relevance = equal labels; never builds a (Q, G) mask."""
    scores = np.asarray(scores)
    q_lab, g_lab = np.asarray(query_labels), np.asarray(gallery_labels)
    if scores.ndim != 2 or scores.shape != (len(q_lab), len(g_lab)):
        raise ValueError(f"scores {scores.shape} do not match {len(q_lab)} query and {len(g_lab)} gallery labels")
    uniq, codes = np.unique(np.concatenate([q_lab, g_lab]), return_inverse=True)
    q_codes, g_codes = codes[:len(q_lab)], codes[len(q_lab):]
    k = _kernels()
    if k is not None:
        n_codes = len(uniq)
        g_order = np.argsort(g_codes, kind="stable").astype(np.int64)
        g_count = np.bincount(g_codes, minlength=n_codes).astype(np.int64)
        g_start = (np.cumsum(g_count) - g_count).astype(np.int64)
        return _compiled(k.metrics_labels, _float_scores(scores), q_codes.astype(np.int64), g_order, g_start,
                         g_count)
    g_order = np.argsort(g_codes, kind="stable")
    g_sorted = g_codes[g_order]
    starts = np.searchsorted(g_sorted, q_codes, side="left")
    counts = np.searchsorted(g_sorted, q_codes, side="right") - starts
    g = scores.shape[1]

    def rel_flat(s: int, e: int) -> np.ndarray:
        c = counts[s:e]
        rows = np.repeat(np.arange(e - s), c)
        within = np.arange(int(c.sum())) - np.repeat(np.cumsum(c) - c, c)
        cols = g_order[np.repeat(starts[s:e], c) + within]
        return np.sort(rows * g + cols)

    def rel_of(s: int, e: int, flat: np.ndarray) -> np.ndarray:
        return g_codes[flat % g] == q_codes[s:e][flat // g]

    return _chunked(scores, rel_flat, chunk, rel_of)


def _chunked(scores: np.ndarray, rel_flat_for, chunk: int, rel_of) -> RetrievalMetrics:
    def one(s: int):
        e = min(s + chunk, len(scores))
        return _chunk_metrics(np.ascontiguousarray(scores[s:e]), rel_flat_for(s, e),
                              lambda flat: rel_of(s, e, flat))

    starts = range(0, len(scores), chunk)
    if len(starts) > 1 and THREADS > 1:
        # NumPy releases the GIL in comparisons, sorts and reductions: blocks run in parallel.
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            parts = list(pool.map(one, starts))
    else:
        parts = [one(s) for s in starts]
    if not parts:
        empty_f, empty_i = np.zeros(0), np.zeros(0, dtype=np.int64)
        return _metrics((empty_f, empty_i, empty_i, empty_i, empty_f, empty_f))
    return _metrics(tuple(np.concatenate(p) for p in zip(*parts)))


def _chunk_metrics(scores: np.ndarray, rel_flat: np.ndarray, rel_of):
    """Metrics for one block of rows; ``rel_flat`` = sorted flat indices of the relevant entries,
    ``rel_of(flat)`` = relevance of entries given by flat indices.

    Only items scoring at or above a query's lowest relevant score can change its
    AP or ranks, so each row is reduced to those *candidates* (one vectorised
    comparison) and only they are sorted. On retrieval data the candidates are a
    small fraction of the gallery; in the worst case this is a full sort.
    """
    q, g = scores.shape
    flat_scores = scores.reshape(-1)
    rel_rows = rel_flat // max(g, 1)
    n_rel = np.bincount(rel_rows, minlength=q).astype(np.int64)
    has = n_rel > 0
    ap = np.full(q, np.nan)
    first = np.zeros(q, dtype=np.int64)
    last = np.zeros(q, dtype=np.int64)
    if not has.any():
        return ap, first, last, n_rel, np.full(q, np.nan), np.full(q, np.nan)
    rel_vals = flat_scores[rel_flat]
    if np.isnan(rel_vals).any():
        raise ValueError("relevant items have NaN scores")
    low = np.full(q, np.inf, dtype=scores.dtype if scores.dtype.kind == "f" else np.float64)
    low[has] = np.minimum.reduceat(rel_vals, np.searchsorted(rel_rows, np.flatnonzero(has)))

    cand_mask = scores >= low[:, None]
    if np.count_nonzero(cand_mask) > DENSE_FRACTION * scores.size and not np.isnan(scores).any():
        # most items are candidates (i.i.d.-like scores): count items above each relevant score in
        # sorted rows instead of ordering every candidate (NaN rows keep the path below: a sort puts
        # NaN last, the candidate comparison drops it)
        return _dense_counts(scores, rel_flat, n_rel, has)
    cand = np.flatnonzero(cand_mask)  # row-major, so grouped by row
    del cand_mask
    if len(cand) > DENSE_FRACTION * scores.size:
        if q > DENSE_BLOCK:  # sort in smaller blocks
            parts = []
            for s in range(0, q, DENSE_BLOCK):
                lo, hi = s * g, min(s + DENSE_BLOCK, q) * g
                sub_rel = rel_flat[(rel_flat >= lo) & (rel_flat < hi)] - lo
                parts.append(_chunk_metrics(scores[s:s + DENSE_BLOCK], sub_rel,
                                            lambda flat, lo=lo: rel_of(flat + lo)))
            return tuple(np.concatenate(p) for p in zip(*parts))
        rows, vals, rel = _sort_dense(scores, low, rel_of)
    else:
        rows, vals, rel = _sort_within_rows(cand // g, flat_scores[cand], rel_of(cand))

    n = len(rows)
    idx = np.arange(n, dtype=np.int64)
    row_start = np.searchsorted(rows, np.arange(q), side="left")
    pos = idx - row_start[rows]  # 0-based rank within the row
    is_end = np.ones(n, dtype=bool)
    is_end[:-1] = (vals[:-1] != vals[1:]) | (rows[:-1] != rows[1:])
    block_end = np.minimum.accumulate(np.where(is_end, idx, n)[::-1])[::-1]

    cum_rel = np.cumsum(rel, dtype=np.int64)
    before_row = np.concatenate(([0], cum_rel))[row_start]  # relevant items in earlier rows
    rank_end = pos[block_end] + 1  # 1-based rank, pessimistic over ties
    rel_idx = np.flatnonzero(rel)
    precision = (cum_rel[block_end[rel_idx]] - before_row[rows[rel_idx]]) / rank_end[rel_idx]
    ap_sum = np.bincount(rows[rel_idx], weights=precision, minlength=q)
    ap = np.where(has, ap_sum / np.maximum(n_rel, 1), np.nan)

    first_of_row = np.full(q, 0, dtype=np.int64)
    first_of_row[rows[rel_idx][::-1]] = rel_idx[::-1]  # reversed so the earliest index wins
    first = np.where(has, rank_end[first_of_row], 0)
    # The lowest relevant item's tie block ends the row's candidates.
    last = np.where(has, np.bincount(rows, minlength=q), 0)
    return (ap, first.astype(np.int64), last.astype(np.int64), n_rel,
            *_cut_metrics(rows[rel_idx], rank_end[rel_idx], precision, n_rel, has))


def _cut_metrics(rows: np.ndarray, ranks: np.ndarray, precision: np.ndarray, n_rel: np.ndarray, has: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(AP@k, R-precision) per row from each relevant item's row, pessimistic rank and precision at it."""
    q = len(n_rel)
    top = ranks <= AP_AT_K
    hits = np.bincount(rows, weights=top, minlength=q)
    total = np.bincount(rows, weights=np.where(top, precision, 0.0), minlength=q)
    within_r = np.bincount(rows, weights=ranks <= n_rel[rows], minlength=q)
    with np.errstate(invalid="ignore", divide="ignore"):
        apk = np.where(has, np.where(hits > 0, total / np.maximum(hits, 1), 0.0), np.nan)
        return apk, np.where(has, within_r / np.maximum(n_rel, 1), np.nan)


def _dense_counts(scores: np.ndarray, rel_flat: np.ndarray, n_rel: np.ndarray, has: np.ndarray):
    """:func:`_chunk_metrics` of a NaN-free block from counts: for each relevant item, the items and the
    relevant items scoring at or above it (the end of its tie block, as the candidate path counts).

    The same integers as the candidate path, divided and summed per row in the same order (score
    descending; within a tie block every relevant item has the same precision), so the same bits.
    Rows are sorted by value only (no index sort), then searched once per row.
    """
    q, g = scores.shape
    srt = np.sort(scores, axis=1)  # ascending
    rel_rows = rel_flat // g
    rel_vals = scores.reshape(-1)[rel_flat]
    order = np.lexsort((-rel_vals.astype(np.float64), rel_rows))
    rows, vals = rel_rows[order], rel_vals[order]
    bounds = np.searchsorted(rows, np.arange(q + 1))
    at_or_above = np.empty(len(vals), dtype=np.int64)  # items scoring >= the relevant item's score
    for r in np.flatnonzero(has):
        a, b = bounds[r], bounds[r + 1]
        at_or_above[a:b] = g - np.searchsorted(srt[r], vals[a:b], side="left")
    n = len(vals)
    idx = np.arange(n, dtype=np.int64)
    is_end = np.ones(n, dtype=bool)
    is_end[:-1] = (vals[:-1] != vals[1:]) | (rows[:-1] != rows[1:])
    block_end = np.minimum.accumulate(np.where(is_end, idx, n)[::-1])[::-1]
    rel_at_or_above = block_end - bounds[rows] + 1
    precision = rel_at_or_above / at_or_above
    ap_sum = np.bincount(rows, weights=precision, minlength=q)
    ap = np.where(has, ap_sum / np.maximum(n_rel, 1), np.nan)
    first = np.where(has, at_or_above[np.minimum(bounds[:-1], max(n - 1, 0))], 0)
    last = np.where(has, at_or_above[np.maximum(bounds[1:] - 1, 0)], 0)
    return (ap, first.astype(np.int64), last.astype(np.int64), n_rel,
            *_cut_metrics(rows, at_or_above, precision, n_rel, has))


def _sort_dense(scores: np.ndarray, low: np.ndarray, rel_of):
    """Candidates of a block where most items are candidates: sort whole rows, then drop non-candidates."""
    q, g = scores.shape
    order = np.argsort(-scores, axis=1)
    flat = (order + (np.arange(q) * g)[:, None]).reshape(-1)
    vals = scores.reshape(-1)[flat]
    rows = np.repeat(np.arange(q), g)
    keep = vals >= low[rows]
    flat, vals, rows = flat[keep], vals[keep], rows[keep]
    return rows, vals, rel_of(flat)


def _sort_within_rows(rows: np.ndarray, vals: np.ndarray, rel: np.ndarray):
    """Order candidates by (row, score descending); ties in any order (AP does not depend on it)."""
    if vals.dtype == np.float32 and len(rows) and rows[-1] < (1 << 31):
        # One sort of packed uint64 keys (row | order-preserving score bits | relevance) is several
        # times faster than a two-key lexsort, and exact: the score bits are kept, not rounded.
        bits = (vals + np.float32(0.0)).view(np.uint32)  # + 0.0 folds -0.0 into +0.0, as == does
        ascending = np.where(bits & np.uint32(0x80000000), ~bits, bits | np.uint32(0x80000000))
        key = (rows.astype(np.uint64) << np.uint64(33)) | ((~ascending).astype(np.uint64) << np.uint64(1)) \
            | rel.astype(np.uint64)
        key.sort()
        desc = ((key >> np.uint64(1)) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        asc = ~desc
        bits = np.where(asc & np.uint32(0x80000000), asc & np.uint32(0x7FFFFFFF), ~asc)
        return (key >> np.uint64(33)).astype(np.int64), bits.view(np.float32), (key & np.uint64(1)).astype(bool)
    order = np.lexsort((-vals.astype(np.float64), rows))
    return rows[order], vals[order], rel[order]


def average_precision(scores: np.ndarray, relevant: np.ndarray) -> float:
    """AP of one query (1-D inputs); NaN when nothing is relevant."""
    return float(retrieval_metrics(np.asarray(scores)[None, :], np.asarray(relevant)[None, :]).ap[0])


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and scores of the k best items per row (finite scores only; -1 pads).

    Tie rule: score descending, then column ascending, so the result never depends on how
    a partial sort breaks ties (the streamed evaluation's FAISS top-k follows the same rule).

    Rows are taken :data:`TOPK_ROWS_ELEMENTS` scores at a time (:func:`_top_k_sampled`); a row whose
    candidates are not all finite goes to :func:`_top_k_rows`, the rule written out over the whole row
    (tests check the two agree on tie-heavy and non-finite rows).
    """
    scores = np.asarray(scores)
    q, g = scores.shape
    k = min(k, g)
    if k == 0 or q == 0:
        return np.zeros((q, k), np.int64), np.zeros((q, k), dtype=scores.dtype)
    idx = np.empty((q, k), dtype=np.int64)
    val = np.empty((q, k), dtype=scores.dtype)
    step = max(1, TOPK_ROWS_ELEMENTS // g)
    for r in range(0, q, step):
        idx[r:r + step], val[r:r + step] = _top_k_sampled(scores[r:r + step], k)
    return idx, val


def _top_k_sampled(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`top_k` of a few rows in about three passes over them instead of a partial sort.

    The k-th largest score of any subset of a row is a lower bound of the row's k-th largest, so
    every item at or above a strided sample's k-th largest is a candidate and the candidates hold the
    row's top k with every item tied at the k-th place; the rule is then applied to the candidates
    only (about G / TOPK_SAMPLE_PER_K of them per row on unordered scores). Correct for any order
    of the row; an adversarial one only makes more candidates.
    """
    q, g = scores.shape
    stride = max(1, g // (TOPK_SAMPLE_PER_K * k))
    sample = scores[:, ::stride]
    m = sample.shape[1]
    if m < k:  # fewer sampled columns than k (tiny rows): the whole row is the sample
        sample, m = scores, g
    bound = np.partition(sample, m - k, axis=1)[:, m - k]
    # partition counts a NaN as the largest, which would lift the bound: such rows take the whole-row path
    good = np.isfinite(bound) & ~np.isnan(sample).any(axis=1)
    rows, cols = np.nonzero((scores >= bound[:, None]) & good[:, None])
    vals = scores[rows, cols]
    bad_inf = np.isposinf(vals)  # the rule keeps finite scores only: such a row takes the whole-row path
    if bad_inf.any():
        good[rows[bad_inf]] = False
        keep = good[rows]
        rows, cols, vals = rows[keep], cols[keep], vals[keep]
    order = np.lexsort((cols, -vals.astype(np.float64), rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    pos = np.arange(len(rows)) - np.searchsorted(rows, np.arange(q))[rows]
    first = pos < k
    idx = np.full((q, k), -1, dtype=np.int64)
    val = np.full((q, k), -np.inf, dtype=scores.dtype)
    idx[rows[first], pos[first]] = cols[first]
    val[rows[first], pos[first]] = vals[first]
    if not good.all():
        slow = np.flatnonzero(~good)
        idx[slow], val[slow] = _top_k_rows(scores[slow], k)
    return idx, val


def _top_k_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`top_k` by the rule over the whole row (the reference, and the path for wide ties)."""
    q = scores.shape[0]
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    kth = np.take_along_axis(scores, part, axis=1).min(axis=1)  # the k-th best score
    fin = np.isfinite(kth)
    above = scores > kth[:, None]
    at = (scores == kth[:, None]) & fin[:, None]
    need = k - above.sum(axis=1)
    take = above | (at & (np.cumsum(at, axis=1) <= need[:, None]))  # lowest columns of the tie at the k-th place
    take &= np.isfinite(scores)
    rows, cols = np.nonzero(take)
    vals = scores[rows, cols]
    order = np.lexsort((cols, -vals.astype(np.float64), rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    start = np.searchsorted(rows, np.arange(q))
    pos = np.arange(len(rows)) - start[rows]
    idx = np.full((q, k), -1, dtype=np.int64)
    val = np.full((q, k), -np.inf, dtype=scores.dtype)
    idx[rows, pos] = cols
    val[rows, pos] = vals
    return idx, val
