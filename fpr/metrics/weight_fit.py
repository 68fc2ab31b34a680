"""Fitting a weighted sum of components to human preferences: the weights on a simplex grid that
maximise VISTAR's strict pairwise-prediction accuracy (PPA).

VISTAR fits its composite metrics' weights (e.g. CPA's count, posture and expression) by Bayesian
optimisation to maximise PPA. fpr searches the whole simplex on a grid instead: exhaustive at its
resolution, deterministic, and the same answer on every machine. Ties among the best weights go to
the one nearest equal weights (then the first in grid order), so an uninformative component does
not take weight by accident.

A component may be NaN (not measured for that image): the weighted sum is then renormalised over
the measured components, as the scorers do.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import numpy as np


def simplex_grid(k: int, step: float) -> np.ndarray:
    """All weight vectors of ``k`` non-negative multiples of ``step`` summing to 1, shape (n, k)."""
    n = round(1 / step)
    if abs(n * step - 1) > 1e-9:
        raise ValueError(f"step {step} does not divide 1")
    rows = [c + (n - sum(c),) for c in product(range(n + 1), repeat=k - 1) if sum(c) <= n]
    return np.array(rows, dtype=float) / n


def weighted_scores(components: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(n_items, k) components (NaN: not measured) x (n_w, k) weights -> (n_w, n_items) renormalised sums."""
    c = np.asarray(components, float)
    have = ~np.isnan(c)
    num = np.nan_to_num(c) @ weights.T
    den = have.astype(float) @ weights.T
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan).T


def strict_ppa(score_a: np.ndarray, score_b: np.ndarray, preferred_a: np.ndarray) -> np.ndarray:
    """Per row of scores (..., n_pairs): the share of pairs where the preferred image scores strictly higher."""
    right = np.where(preferred_a, score_a > score_b, score_b > score_a)
    return right.mean(axis=-1)


@dataclass(frozen=True)
class WeightFit:
    weights: tuple[float, ...]
    ppa: float
    equal_ppa: float  # PPA of equal weights, for comparison
    pairs: int
    candidates: int


def fit_ppa_weights(a: np.ndarray, b: np.ndarray, preferred_a: np.ndarray, step: float = 0.05) -> WeightFit:
    """The simplex-grid weights maximising strict PPA on pairs (a[i] vs b[i], ``preferred_a[i]`` True when
    humans preferred a); judge ties must be dropped before."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    pref = np.asarray(preferred_a, bool)
    if a.shape != b.shape or a.ndim != 2 or len(pref) != len(a) or len(a) == 0:
        raise ValueError("a and b must be (n_pairs, k) with one preference per pair")
    k = a.shape[1]
    grid = simplex_grid(k, step)
    ppa = strict_ppa(weighted_scores(a, grid), weighted_scores(b, grid), pref)
    dist = np.abs(grid - 1 / k).sum(axis=1)
    best = int(np.lexsort((np.arange(len(grid)), dist, -ppa))[0])
    equal = np.full((1, k), 1 / k)
    eq = float(strict_ppa(weighted_scores(a, equal), weighted_scores(b, equal), pref)[0])
    return WeightFit(tuple(float(x) for x in grid[best]), float(ppa[best]), eq, len(a), len(grid))


__all__ = ["WeightFit", "fit_ppa_weights", "simplex_grid", "strict_ppa", "weighted_scores"]
