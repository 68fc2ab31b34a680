"""Top margin: a per-query score beside AP that does not tie at the top and keeps the gallery's judgement.

Definition (pinned by ``tests/metrics/test_top_margin.py``). For one query, with ``s_j`` its exact scores
(:func:`fpr.index.exact.exact_scores`: float32 of the exact inner product) against the gallery images in
its scope, ``R`` the relevant items (the query's identity) and ``I`` the other items in scope (impostors)::

    top_margin = mean_{j in R} s_j  -  max_{j in I} s_j

in float64: the mean is the correctly rounded sum of the relevant scores (``math.fsum``, so it does not
depend on their order) divided by ``|R|``; the maximum is taken over the impostors' float32 scores. An
item scored ``-inf`` is out of scope (the metric engine's convention). NaN when the query has no
relevant item or no impostor in scope. (A score that overflowed float32 is +-inf and the margin follows
IEEE arithmetic; +inf and -inf among the relevant scores give NaN.)

What it is: how far, in the encoder's similarity, the query sits above the nearest other identity on
average over its own identity's gallery images. It is positive when the identity's gallery images
score on average above every impostor, and it keeps growing past the point where AP saturates at 1 (a
query whose relevant items all lead the ranking by a wide gap scores higher than one that leads by a
hair). It is not AP, not a rank statistic and not the paper's metric: its scale is the encoder's cosine
scale, so values are compared within one encoder and gallery, like Sim. Unlike Sim (mean cosine to the
reference images) it is judged against the gallery: copying the reference's scene or pixels does not
raise it unless the copy also scores above the gallery's other identities.

Chosen among candidates (min/mean/max margin, identity log-odds and Smooth-AP at three temperatures)
on world seeds 0-2 and validated on held-out seeds 7-9: ``benchmarks/top_score.py``,
``benchmarks/results/top_score.md``.

Cost: the relevant items' exact scores and the best impostor's. The recheck path
(:mod:`fpr.eval.recheck`) finds the best impostor from the float32 proposals and their error bound and
computes exact scores only for the impostors whose interval reaches the highest lower bound.
"""
from __future__ import annotations

import math

import numpy as np


def margin_from_parts(rel_sum: np.ndarray, n_rel: np.ndarray, best_impostor: np.ndarray) -> np.ndarray:
    """top_margin from the correctly rounded sum of the relevant scores, their count and the best impostor's
    score (NaN where there is none); NaN where ``n_rel`` is 0. The one place the parts are combined."""
    rel_sum = np.asarray(rel_sum, dtype=np.float64)
    n_rel = np.asarray(n_rel)
    imp = np.asarray(best_impostor, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n_rel > 0, rel_sum / np.maximum(n_rel, 1), np.nan)
        return mean - imp


def top_margin(scores: np.ndarray, relevant: np.ndarray) -> np.ndarray:
    """(Q,) top margin of a (Q, G) score matrix and its boolean relevance mask (the definition, in NumPy;
    the full exact path and the tests use it, the recheck path computes the same bits from fewer scores)."""
    s = np.asarray(scores)
    rel = np.asarray(relevant, dtype=bool)
    if s.shape != rel.shape or s.ndim != 2:
        raise ValueError(f"scores {s.shape} and relevant {rel.shape} must be the same 2-D shape")
    q = len(s)
    imp = np.full(q, np.nan)
    if s.shape[1]:
        other = np.where(rel, -np.inf, s).max(axis=1).astype(np.float64)
        imp = np.where(other > -np.inf, other, np.nan)
    rows, cols = np.nonzero(rel)
    vals = s[rows, cols].astype(np.float64)
    n_rel = np.bincount(rows, minlength=q)
    bounds = np.cumsum(n_rel)[:-1] if q else []
    sums = np.array([_fsum(v) for v in np.split(vals, bounds)]) if q else np.zeros(0)
    return margin_from_parts(sums, n_rel, imp)


def _fsum(values: np.ndarray) -> float:
    """math.fsum, NaN where it refuses (+inf and -inf together: a row whose scores overflowed float32)."""
    if np.isinf(values).any():
        pos, neg = bool((values == np.inf).any()), bool((values == -np.inf).any())
        return float("nan") if pos and neg else float("inf") if pos else float("-inf")
    return math.fsum(values)


__all__ = ["margin_from_parts", "top_margin"]
