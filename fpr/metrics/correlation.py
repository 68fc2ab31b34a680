"""Rank correlation and rater agreement statistics on plain arrays: Spearman, Kendall tau-b, Krippendorff's
alpha (interval metric) and McNemar's exact test.
"""
from __future__ import annotations

import numpy as np


def krippendorff_alpha_interval(data: np.ndarray) -> float:
    """Krippendorff's alpha with the interval metric; ``data`` is raters x units, NaN = missing.

    Only units with at least two values are pairable. ``alpha = 1 - D_o / D_e`` with
    ``D_o = (1/n) sum_u sum_{i != j in u} (v_i - v_j)^2 / (m_u - 1)`` and
    ``D_e = sum_{i != j over all pairable values} (v_i - v_j)^2 / (n (n - 1))``.
    """
    s = _alpha_unit_sums(np.asarray(data, dtype=np.float64))
    return _alpha_from_sums(*(x.sum() for x in s))


def _alpha_unit_sums(data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per unit (column): m (values), sum, sum of squares, and within-unit disagreement / (m - 1)."""
    ok = np.isfinite(data)
    m = ok.sum(axis=0).astype(np.float64)
    v = np.where(ok, data, 0.0)
    s1, s2 = v.sum(axis=0), (v * v).sum(axis=0)
    pairable = m >= 2
    m, s1, s2 = np.where(pairable, m, 0), np.where(pairable, s1, 0), np.where(pairable, s2, 0)
    within = np.where(pairable, 2.0 * (m * s2 - s1 * s1) / np.maximum(m - 1, 1), 0.0)
    return m, s1, s2, within


def _alpha_from_sums(n, s1, s2, within):
    """alpha from totals (scalars or arrays over bootstrap resamples)."""
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        d_o = within / n
        d_e = 2.0 * (n * s2 - s1 * s1) / (n * (n - 1))
        alpha = 1.0 - d_o / d_e
    alpha = np.where((n >= 2) & (d_e > 0), alpha, np.nan)
    return float(alpha) if alpha.ndim == 0 else alpha


def _rank_rows(x: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(x, axis=-1)


def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x = x - x.mean(axis=-1, keepdims=True)
    y = y - y.mean(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (x * y).sum(axis=-1) / np.sqrt((x * x).sum(axis=-1) * (y * y).sum(axis=-1))


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho (average ranks for ties); NaN when either side is constant."""
    return float(_pearson_rows(_rank_rows(np.asarray(x, float)), _rank_rows(np.asarray(y, float))))


def kendall(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's tau-b; NaN when either side is constant."""
    from scipy.stats import kendalltau

    if len(x) < 2 or np.unique(x).size < 2 or np.unique(y).size < 2:
        return float("nan")
    return float(kendalltau(x, y).statistic)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for discordant counts ``b`` and ``c`` (binomial, p = 1/2)."""
    from scipy.stats import binomtest

    if b + c == 0:
        return 1.0
    return float(binomtest(int(b), int(b + c), 0.5).pvalue)
