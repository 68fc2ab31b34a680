"""Signs that a run measured nothing: constant embeddings, constant scorer values, an oracle at chance.

Random-initialised or placeholder weights in the right file layout load without error and give
numbers that look like results (Sim 1.000 for every method, CLIP-T about 0, a consistency of 1.000).
These checks run after an evaluation and return warning lines naming the likely cause; the run
workflow prints them (one line each, not silenced by ``-q``) and records them in the provenance.

Thresholds (why these):
- embeddings: the mean pairwise cosine of the evaluated queries' unit vectors >= ``EMBED_COSINE``
  (0.999): at that level every printed Sim (three decimals) rounds to about 1.000, so the encoder
  does not tell the queries apart. Distinct images under trained encoders sit far below it.
- a scorer metric: >= ``MIN_CONSTANT_QUERIES`` (5) finite values, all equal within 1e-9 relative; not a
  judge's cost count and not an indicator stuck at exactly 0 or 1 (one call per query, no copy flagged, the
  identity always among the offered choices may well be constant).
- oracle: the oracle queries' mean AP is not above the mean chance AP by more than two standard
  errors (of the per-query difference AP - chance AP), with at least 5 oracle queries. Chance AP of a
  query with R relevant among N candidates, ranked uniformly at random, is exactly
  ``H_N/N + (R-1)/(N-1) * (1 - H_N/N)`` (:func:`chance_ap`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from fpr.scorers.judges.costs import COST_METRICS

EMBED_COSINE = 0.999
MIN_CONSTANT_QUERIES = 5
MIN_ORACLE_QUERIES = 5
CAUSE = "random or placeholder weights?"


def mean_pairwise_cosine(vecs: np.ndarray) -> float:
    """Mean cosine over distinct pairs of rows (rows L2-normalised here); O(n*dim) via the norm of the sum."""
    v = np.asarray(vecs, dtype=np.float64)
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    n = len(v)
    s = v.sum(axis=0)
    # sum over all ordered pairs (i, j) of cos = ||sum||^2; minus the n diagonal terms
    return float((s @ s - n) / (n * (n - 1)))


def constant_embeddings(qvecs: np.ndarray, encoder_id: str) -> str | None:
    """A warning when the evaluated queries' embeddings are (nearly) identical; None otherwise."""
    rows = np.asarray(qvecs)
    if rows.ndim != 2 or rows.shape[1] == 0:  # a Ray run does not bring the query vectors back
        return None
    rows = rows[np.isfinite(rows).all(axis=1)]
    if len(rows) < 3:
        return None
    cos = mean_pairwise_cosine(rows)
    if cos < EMBED_COSINE:
        return None
    return (f"the {len(rows)} query embeddings of encoder '{encoder_id}' are nearly constant (mean pairwise "
            f"cosine {cos:.4f}): the encoder does not tell the images apart ({CAUSE} "
            f"'fpr encoders list' shows whether its weights are verified)")


def constant_scorers(aux: pd.DataFrame) -> list[str]:
    """One warning per scorer metric whose values are equal across >= 5 queries."""
    if aux is None or aux.empty or not {"scorer", "metric", "value"} <= set(aux.columns):
        return []
    out = []
    values = aux.assign(value=pd.to_numeric(aux["value"], errors="coerce")).dropna(subset=["value"])
    for (scorer, metric), g in values.groupby(["scorer", "metric"], sort=True):
        v = g["value"].to_numpy(dtype=np.float64)
        if len(v) < MIN_CONSTANT_QUERIES:
            continue
        if metric in COST_METRICS or v[0] in (0.0, 1.0):  # a call per query, an indicator always 0 or always 1:
            continue                                         # legitimately equal, not a sign of broken weights
        if v.max() - v.min() <= 1e-9 * max(1.0, abs(float(v.mean()))):
            out.append(f"scorer '{scorer}' gives {metric} = {v[0]:.4g} for all {len(v)} queries: a value that "
                       f"ignores its input ({CAUSE} check the scorer's model weights)")
    return out


def chance_ap(n_relevant: np.ndarray, n_candidates: np.ndarray) -> np.ndarray:
    """Expected AP of a uniformly random ranking of N candidates holding R relevant ones.

    A relevant item at rank r has, in expectation, 1 + (r-1)(R-1)/(N-1) relevant items at or above
    it; averaging precision = that / r over r uniform on 1..N gives H_N/N + (R-1)/(N-1) (1 - H_N/N).
    """
    r = np.asarray(n_relevant, dtype=np.float64)
    n = np.asarray(n_candidates, dtype=np.int64)
    harmonic = np.array([np.sum(1.0 / np.arange(1, k + 1)) for k in n]) if len(n) else np.zeros(0)
    a = harmonic / np.maximum(n, 1)
    b = np.where(n > 1, (r - 1) / np.maximum(n - 1, 1), 1.0)
    return a + b * (1 - a)


def oracle_at_chance(ap: np.ndarray, n_relevant: np.ndarray, n_candidates: np.ndarray,
                     encoder_id: str) -> str | None:
    """A warning when the oracle queries' mAP is within two standard errors of chance; None otherwise."""
    ap = np.asarray(ap, dtype=np.float64)
    keep = np.isfinite(ap)
    if keep.sum() < MIN_ORACLE_QUERIES:
        return None
    ap, chance = ap[keep], chance_ap(np.asarray(n_relevant)[keep], np.asarray(n_candidates)[keep])
    diff = ap - chance
    se = float(diff.std(ddof=1) / np.sqrt(len(diff)))
    if diff.mean() > 2 * se:
        return None
    return (f"the oracle (real reference images as queries) scores mAP {ap.mean():.3f} under encoder "
            f"'{encoder_id}', within noise of chance ({chance.mean():.3f}, {len(ap)} queries): the encoder "
            f"does not recognise identities ({CAUSE})")
