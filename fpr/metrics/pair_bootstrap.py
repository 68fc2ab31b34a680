"""Cluster bootstrap for statistics over pairs of queries: a resample draws queries with replacement and a
pair counts once per copy of each of its queries; percentile intervals at LEVEL.
"""
from __future__ import annotations

import numpy as np

PAIR_WITHIN = ("group", "identity")


LEVEL = 0.95


def percentile_interval(boots: np.ndarray) -> tuple[float, float]:
    b = np.asarray(boots, dtype=np.float64)
    b = b[np.isfinite(b)]
    if len(b) == 0:
        return float("nan"), float("nan")
    a = (1.0 - LEVEL) / 2.0
    lo, hi = np.quantile(b, [a, 1.0 - a])
    return float(lo), float(hi)


def resample_counts(idx: np.ndarray, n: int) -> np.ndarray:
    """Copies of each unit in each resample: ``(n_boot, n)``."""
    c = np.zeros((idx.shape[0], n), dtype=np.float64)
    np.add.at(c, (np.repeat(np.arange(idx.shape[0]), idx.shape[1]), idx.ravel()), 1.0)
    return c


def weighted_pair_sums(counts: np.ndarray, ia: np.ndarray, ib: np.ndarray, cols: np.ndarray,
                        chunk: int = 128) -> np.ndarray:
    """Per resample, per column: sum over pairs of ``copies(a) * copies(b) * cols[pair]`` -> ``(n_boot, k)``."""
    out = np.empty((counts.shape[0], cols.shape[1]))
    for start in range(0, counts.shape[0], chunk):
        c = counts[start:start + chunk]
        out[start:start + chunk] = (c[:, ia] * c[:, ib]) @ cols
    return out


def safe_ratio(num, den):
    """num / den, NaN where den is 0 (scalars or arrays)."""
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return float(r) if r.ndim == 0 else r
