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

Items outside a query's scope are passed as ``-inf`` scores with ``rel=False``;
they sort last and never count.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_CHUNK = 1024


@dataclass
class RetrievalMetrics:
    ap: np.ndarray  # (Q,) float64
    first_hit_rank: np.ndarray  # (Q,) int64, 1-based; 0 when no relevant item
    last_hit_rank: np.ndarray  # (Q,) int64
    n_relevant: np.ndarray  # (Q,) int64
    n_scope: np.ndarray  # (Q,) int64

    def cmc(self, k: int) -> np.ndarray:
        return ((self.first_hit_rank >= 1) & (self.first_hit_rank <= k)).astype(np.float64)

    @property
    def inp(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.last_hit_rank > 0, self.n_relevant / np.maximum(self.last_hit_rank, 1), np.nan)


def retrieval_metrics(scores: np.ndarray, relevant: np.ndarray, *, chunk: int = DEFAULT_CHUNK) -> RetrievalMetrics:
    """Per-query metrics for a (Q, G) score matrix and a boolean (Q, G) relevance mask."""
    scores = np.asarray(scores)
    relevant = np.asarray(relevant, dtype=bool)
    if scores.shape != relevant.shape or scores.ndim != 2:
        raise ValueError(f"scores {scores.shape} and relevant {relevant.shape} must be the same 2-D shape")
    parts = [_chunk_metrics(scores[s:s + chunk], relevant[s:s + chunk]) for s in range(0, len(scores), chunk)]
    if not parts:
        empty_f, empty_i = np.zeros(0), np.zeros(0, dtype=np.int64)
        return RetrievalMetrics(empty_f, empty_i, empty_i, empty_i, empty_i)
    return RetrievalMetrics(*(np.concatenate(p) for p in zip(*parts)))


def _chunk_metrics(scores: np.ndarray, relevant: np.ndarray):
    q, g = scores.shape
    s = scores.astype(np.float64, copy=False)
    order = np.argsort(-s, axis=1, kind="stable")
    s_sorted = np.take_along_axis(s, order, axis=1)
    rel_sorted = np.take_along_axis(relevant, order, axis=1)
    cum_rel = np.cumsum(rel_sorted, axis=1, dtype=np.int64)

    # Position (0-based) of the end of each item's tie block.
    is_end = np.ones((q, g), dtype=bool)
    if g > 1:
        is_end[:, :-1] = s_sorted[:, :-1] != s_sorted[:, 1:]
    pos = np.broadcast_to(np.arange(g, dtype=np.int64), (q, g))
    end_idx = np.where(is_end, pos, g)
    block_end = np.minimum.accumulate(end_idx[:, ::-1], axis=1)[:, ::-1]

    n_rel = cum_rel[:, -1] if g else np.zeros(q, dtype=np.int64)
    rel_at_end = np.take_along_axis(cum_rel, block_end, axis=1)
    precision_at_end = rel_at_end / (block_end + 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ap = np.where(n_rel > 0, (precision_at_end * rel_sorted).sum(axis=1) / np.maximum(n_rel, 1), np.nan)

    rank = block_end + 1  # 1-based rank with the pessimistic tie convention
    has = n_rel > 0
    first_pos = np.where(has, rel_sorted.argmax(axis=1), 0)
    last_pos = np.where(has, g - 1 - rel_sorted[:, ::-1].argmax(axis=1), 0)
    rows = np.arange(q)
    first = np.where(has, rank[rows, first_pos], 0)
    last = np.where(has, rank[rows, last_pos], 0)
    n_scope = np.isfinite(s).sum(axis=1)
    return ap, first.astype(np.int64), last.astype(np.int64), n_rel.astype(np.int64), n_scope.astype(np.int64)


def average_precision(scores: np.ndarray, relevant: np.ndarray) -> float:
    """AP of one query (1-D inputs); NaN when nothing is relevant."""
    return float(retrieval_metrics(np.asarray(scores)[None, :], np.asarray(relevant)[None, :]).ap[0])


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and scores of the k best items per row (finite scores only; -1 pads)."""
    q, g = scores.shape
    k = min(k, g)
    if k == 0:
        return np.zeros((q, 0), np.int64), np.zeros((q, 0))
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    part_scores = np.take_along_axis(scores, part, axis=1)
    order = np.argsort(-part_scores, axis=1, kind="stable")
    idx = np.take_along_axis(part, order, axis=1)
    val = np.take_along_axis(part_scores, order, axis=1)
    idx = np.where(np.isfinite(val), idx, -1)
    return idx.astype(np.int64), val
