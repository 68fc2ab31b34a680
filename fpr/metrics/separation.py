"""AUROC of scores between a positive and a negative set, with a stratified bootstrap interval.

``auroc(pos, neg)`` is the Mann-Whitney probability that a positive outscores a negative,
ties counting one half. The interval resamples positives and negatives separately (each
set keeps its size), seeded through :func:`fpr.keys.keyed_rng`, percentile 95% by default.
"""
from __future__ import annotations

import numpy as np

from fpr.errors import InputError
from fpr.keys import keyed_rng


def auroc(pos, neg) -> float:
    """P(pos > neg) + 0.5 P(pos = neg) over all pairs, in O((|pos| + |neg|) log |neg|)."""
    p, n = np.asarray(pos, np.float64), np.sort(np.asarray(neg, np.float64))
    if not len(p) or not len(n):
        raise InputError(f"AUROC needs positives and negatives, got {len(p)} and {len(n)}")
    if np.isnan(p).any() or np.isnan(n).any():
        raise InputError("AUROC of scores with NaN", hint="drop the queries a scorer could not score first")
    lo, hi = np.searchsorted(n, p, side="left"), np.searchsorted(n, p, side="right")
    return float((lo + 0.5 * (hi - lo)).sum() / (len(p) * len(n)))


def auroc_interval(pos, neg, *, seed: int = 0, key: tuple = (), n_boot: int = 1000, level: float = 0.95
                   ) -> tuple[float, float, float]:
    """(AUROC, lower, upper): percentile interval over ``n_boot`` stratified resamples."""
    p, n = np.asarray(pos, np.float64), np.asarray(neg, np.float64)
    point = auroc(p, n)
    rng = keyed_rng("auroc-bootstrap", seed, *key)
    boot = np.array([auroc(p[rng.integers(0, len(p), len(p))], n[rng.integers(0, len(n), len(n))])
                     for _ in range(n_boot)])
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(boot, [a, 1.0 - a])
    return point, float(lo), float(hi)


__all__ = ["auroc", "auroc_interval"]
