"""Streamed scoring: queries in blocks against the gallery (never Q x G in memory), AP, ranks, CMC and
mINP from the metric engine over the full scoped ranking, and the exact top-k of each query.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from fpr import settings
from fpr.eval import recheck
from fpr.eval.frames import empty_rankings
from fpr.eval.relevance import LabelCodes, check_scope
from fpr.index import exact, faiss_index
from fpr.metrics.ranking import retrieval_metrics, top_k
from fpr.metrics.specs import ranking_metrics
from fpr.metrics.top_margin import top_margin

BLOCK_BYTES = int(settings.get("FPR_EVAL_BLOCK_MB") * 2 ** 20)


BYTES_PER_PAIR = 24  # float32 score + bool masks + the metric engine's per-pair temporaries
# The float64 product behind the exact scores is taken a chunk of gallery columns at a time in this
# much memory, whatever the block; auto_block leaves it out of FPR_EVAL_BLOCK_MB.
SCORE_WORK_BYTES = min(exact.WORK_BYTES, BLOCK_BYTES // 4)


MAX_BLOCK = 4096


TOPK_MARGIN = 16  # extra FAISS results fetched per query to check the tie rule at the k-th place


@dataclass
class Scored:
    """Per-query metric values (for the ``ok`` rows, in their order) and the top-k rankings."""

    values: dict[str, np.ndarray]
    top_rows: np.ndarray  # (n_ok, k) gallery rows, -1 padded
    top_scores: np.ndarray  # (n_ok, k) float32
    top_relevant: np.ndarray  # (n_ok, k) bool
    ok: np.ndarray

    def rankings(self, query_ids: np.ndarray, item_ids: np.ndarray) -> pd.DataFrame:
        if not self.top_rows.shape[1] or not len(self.ok):
            return empty_rankings()
        rows_q, rows_r = np.nonzero(self.top_rows >= 0)
        cols = self.top_rows[rows_q, rows_r]
        return pd.DataFrame({"query_id": query_ids[self.ok][rows_q], "rank": rows_r + 1,
                             "item_id": np.asarray(item_ids)[cols],
                             "score": self.top_scores[rows_q, rows_r].astype(np.float64),
                             "relevant": self.top_relevant[rows_q, rows_r]})


def auto_block(n_columns: int) -> int:
    """Queries per block so one block's (block, G) arrays and the scores' float64 working set
    (:data:`SCORE_WORK_BYTES`) stay within ``FPR_EVAL_BLOCK_MB``."""
    budget = BLOCK_BYTES - SCORE_WORK_BYTES
    return int(max(1, min(MAX_BLOCK, budget // max(1, BYTES_PER_PAIR * n_columns))))


def score_blocks(qvecs: np.ndarray, ok: np.ndarray, codes: LabelCodes, scope: str, gallery_scores, k: int, *,
                 block: int | None = None, stats: recheck.RecheckStats | None = None) -> Scored:
    """AP, ranks, CMC, mINP, top margin and top-k for the queries ``ok``, streamed in blocks of queries.

    Peak memory grows with block x G (scope all) or block x G_group (scope group: the
    queries are taken group by group and scored against that group's gallery rows only),
    plus Q x k for the rankings; never Q x G. Scope and relevance masks are built per
    block from label codes. AP and ranks come from the metric engine over each query's
    full scoped ranking (exact, no top-k cut).

    For an index or an array of gallery vectors whose top-k needs no FAISS search, the block's scores
    are float32 proposals rechecked exactly where a comparison needs it (:mod:`fpr.eval.recheck`,
    ``FPR_EXACT_PATH``; ``stats`` counts the rechecks): the same bits as the exact scores through the
    metric engine and :func:`fpr.metrics.ranking.top_k`, at about the cost of a float32 product.

    Scores from an index or an array of gallery vectors are the exact scores of
    :func:`fpr.index.exact.exact_scores`, float32 of the exact inner product: a query's
    scores, AP, ranks and top-k do not depend on its block, its block-mates, the BLAS
    kernel or its threads. A callable ``gallery_scores`` is used as it is: its numbers are
    whatever it computes, so that guarantee holds only if the callable gives it (one built on
    ``exact_scores`` does; a plain ``q @ v.T`` does not).

    Top-k rankings follow one tie rule: score descending, then gallery (FAISS) row
    ascending. For a flat (exact) index on the CPU, and for gallery vectors or a callable,
    they are taken from the block's exact scores already in memory (one partial sort per
    query, :func:`fpr.metrics.ranking.top_k`): no second pass over the gallery. FAISS
    ``search`` is used where it adds something: an approximate index (IVF, HNSW) for scope
    all, and a flat index when FAISS runs on a GPU (scope all searches the index, scope
    group a flat sub-index of the group's rows). The search returns k + margin candidates;
    they are re-scored with the block's exact scores (the numbers AP used) and ordered by
    the tie rule, and for a flat index a query whose candidates miss an item scoring at or
    above its k-th score (a tie wider than the margin, or a rounding difference between
    FAISS and the block product) is ranked from the block's scores instead, so a flat
    index's stored top-k is exact either way. An approximate index's top-k may miss items
    (its measured recall is on its card).
    """
    check_scope(scope)
    ok = np.asarray(ok, dtype=np.int64)
    n = len(ok)
    kk = max(0, int(k))
    specs = ranking_metrics()
    values = {m.column: np.zeros(n) for m in specs}
    top_rows = np.full((n, kk), -1, dtype=np.int64)
    top_scores = np.full((n, kk), -np.inf, dtype=np.float32)
    top_rel = np.zeros((n, kk), dtype=bool)
    source = _ScoreSource(gallery_scores, len(codes.g_group))
    for cols, pos in _scope_parts(codes, scope, ok):
        part = source.part(cols)
        g_key = codes.g_key if cols is None else codes.g_key[cols]
        if part.rechecked is not None:
            _score_rechecked(part.rechecked, qvecs, ok, pos, codes.q_key, g_key, kk, block, stats, values,
                             (top_rows, top_scores, top_rel), cols)
            continue
        step = block or auto_block(part.n)
        for s in range(0, len(pos), step):
            p = pos[s:s + step]
            rows = ok[p]
            qb = np.ascontiguousarray(qvecs[rows], dtype=np.float32)
            scores = part.scores(qb)
            rel = codes.q_key[rows][:, None] == g_key[None, :]
            m = retrieval_metrics(scores, rel)
            m.top_margin = top_margin(scores, rel)
            for spec in specs:
                values[spec.column][p] = spec.compute(m, part.n)
            if kk:
                idx, val = part.top_k(qb, scores, kk)
                width = idx.shape[1]
                found = idx >= 0
                local = np.where(found, idx, 0)
                top_rows[p, :width] = np.where(found, local if cols is None else cols[local], -1)
                top_scores[p, :width] = val
                top_rel[p, :width] = np.take_along_axis(rel, local, axis=1) & found
            del scores, rel
    return Scored(values, top_rows, top_scores, top_rel, ok)


def _score_rechecked(gallery: recheck.RecheckedGallery, qvecs: np.ndarray, ok: np.ndarray, pos: np.ndarray,
                     q_key: np.ndarray, g_key: np.ndarray, k: int, block: int | None,
                     stats: recheck.RecheckStats | None, values: dict[str, np.ndarray], tops: tuple,
                     cols: np.ndarray | None) -> None:
    """The queries ``ok[pos]`` of one scope part through the recheck path, written into ``values`` and
    ``tops`` (top rows, scores, relevance)."""
    top_rows, top_scores, top_rel = tops
    keys = recheck.KeyIndex(g_key)
    n = len(gallery.v)
    step = block or recheck.auto_block(n)
    for s in range(0, len(pos), step):
        p = pos[s:s + step]
        rows = ok[p]
        qk = q_key[rows]
        res = gallery.block(np.ascontiguousarray(qvecs[rows], dtype=np.float32), keys.of(qk), k, stats=stats)
        for spec in ranking_metrics():
            values[spec.column][p] = spec.compute(res.metrics, n)
        width = res.top_rows.shape[1]
        if width:
            found = res.top_rows >= 0  # -1 pads a row with fewer than k finite scores
            local = np.where(found, res.top_rows, 0)
            top_rows[p, :width] = np.where(found, local if cols is None else cols[local], -1)
            top_scores[p, :width] = res.top_scores
            top_rel[p, :width] = (g_key[local] == qk[:, None]) & found


def _scope_parts(codes: LabelCodes, scope: str, ok: np.ndarray):
    """(gallery columns or None for all, positions in ``ok``) per scope part."""
    if scope == "all":
        yield None, np.arange(len(ok))
        return
    qg = codes.q_group[ok]
    order = np.argsort(qg, kind="stable")
    g_order = np.argsort(codes.g_group, kind="stable")  # ascending rows within each group
    g_sorted = codes.g_group[g_order]
    bounds = np.flatnonzero(np.diff(qg[order])) + 1
    for pos in np.split(order, bounds):
        g = qg[pos[0]]
        lo, hi = np.searchsorted(g_sorted, g, "left"), np.searchsorted(g_sorted, g, "right")
        cols = g_order[lo:hi]
        yield (None if len(cols) == len(codes.g_group) else cols), pos


def whole_gallery_scores(gallery_scores, n_items: int) -> Callable[[np.ndarray], np.ndarray]:
    """(Q, dim) query vectors -> (Q, G) float32 similarities against every gallery row, as scorers see them."""
    return _ScoreSource(gallery_scores, n_items).part(None).scores


class _ScoreSource:
    """Where block scores and top-k candidates come from: an index, gallery vectors or a scores callable."""

    def __init__(self, gallery_scores, n_items: int):
        self.is_index = hasattr(gallery_scores, "vectors") and hasattr(gallery_scores, "search_rows")
        self.is_array = isinstance(gallery_scores, np.ndarray)
        if self.is_array and (gallery_scores.ndim != 2 or len(gallery_scores) != n_items):
            raise ValueError(f"gallery vectors of shape {gallery_scores.shape} for {n_items} gallery rows")
        self.src = gallery_scores
        self.n_items = n_items

    def part(self, cols: np.ndarray | None) -> "_Part":
        if not (self.is_index or self.is_array):
            fn = self.src
            return _Part(len(cols) if cols is not None else self.n_items,
                         (lambda q: fn(q)) if cols is None else (lambda q: fn(q)[:, cols]), None, True)
        if self.is_array:
            v = np.ascontiguousarray(self.src if cols is None else self.src[cols], dtype=np.float32)
            norms = exact.norms(v)
            return _Part(len(v), _exact_part_scores(v, norms), None, True, _rechecked(v, norms))
        flat_search = faiss_search_for_flat()
        if cols is None:
            v = self.src.vectors()
            exact_index = self.src.exact_search
            search = self.src.search_rows if flat_search or not exact_index else None
            return _Part(len(v), _exact_part_scores(v, self.src.norms()), search, exact_index,
                         _rechecked(v, self.src.norms()) if search is None else None)
        v = np.ascontiguousarray(self.src.vectors()[cols])
        return _Part(len(v), _exact_part_scores(v, self.src.norms()[cols]),
                     faiss_index.flat_searcher(v).search if flat_search else None, True,
                     None if flat_search else _rechecked(v, self.src.norms()[cols]))


def _rechecked(v: np.ndarray, norms: np.ndarray) -> recheck.RecheckedGallery | None:
    """The recheck path's view of gallery vectors, or None where the full exact path runs
    (``FPR_EXACT_PATH=full``, no numba)."""
    return recheck.RecheckedGallery(v, norms) if recheck.available() else None


def faiss_search_for_flat() -> bool:
    """Whether a flat index's top-k comes from a FAISS search: only where FAISS runs on a GPU. On the
    CPU the search would be a second pass over the gallery for numbers the block already holds (it
    took about two thirds of a 20k x 200k evaluation; benchmarks/results/topk_from_block.md)."""
    return faiss_index.gpu_available()


def _exact_part_scores(v: np.ndarray, norms: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    return lambda q: exact.exact_scores(q, v, vector_norms=norms, work_bytes=SCORE_WORK_BYTES)


@dataclass
class _Part:
    n: int
    scores_fn: Callable[[np.ndarray], np.ndarray]
    search: Callable | None  # (q, k) -> (scores, local rows)
    exact: bool
    rechecked: recheck.RecheckedGallery | None = None  # set where the recheck path scores this part

    def scores(self, q: np.ndarray) -> np.ndarray:
        return np.asarray(self.scores_fn(q), dtype=np.float32)

    def top_k(self, q: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(local rows, scores) of the k best per query by the tie rule (see :func:`score_blocks`)."""
        k = min(k, self.n)
        if self.search is None or k == 0:
            return top_k(scores, k)
        _, cand = self.search(q, min(self.n, k + TOPK_MARGIN))
        cand = np.asarray(cand, dtype=np.int64)
        found = cand >= 0
        cs = np.where(found, np.take_along_axis(scores, np.where(found, cand, 0), axis=1), -np.inf)
        order = np.lexsort((np.where(found, cand, np.iinfo(np.int64).max), -cs.astype(np.float64)), axis=-1)
        cand = np.take_along_axis(np.where(found, cand, -1), order, axis=1)[:, :k]
        cs = np.take_along_axis(cs, order, axis=1)[:, :k]
        if self.exact:
            kth = cs[:, -1]
            short = (cand[:, -1] < 0) | (np.count_nonzero(scores >= kth[:, None], axis=1)
                                          != np.count_nonzero(cs >= kth[:, None], axis=1))
            if short.any():
                cand[short], cs[short] = top_k(scores[short], k)
        return cand, cs.astype(np.float32)
