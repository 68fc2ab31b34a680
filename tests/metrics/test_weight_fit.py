"""Simplex-grid weight fit: the grid by count, renormalised weighted sums and strict PPA by hand, the fit's
tie-break toward equal weights, and recovery of a hidden judge's weights (the fit script's known answer)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fpr.metrics.weight_fit import fit_ppa_weights, simplex_grid, strict_ppa, weighted_scores


def test_the_grid_is_every_composition_of_one():
    g = simplex_grid(3, 0.5)
    assert sorted(map(tuple, g)) == sorted([(0, 0, 1), (0, 0.5, 0.5), (0, 1, 0), (0.5, 0, 0.5), (0.5, 0.5, 0),
                                            (1, 0, 0)])
    assert len(simplex_grid(3, 0.05)) == math.comb(22, 2)  # 21 levels, stars and bars: C(20 + 2, 2)
    with pytest.raises(ValueError, match="does not divide"):
        simplex_grid(3, 0.3)


def test_weighted_sums_renormalise_over_measured_components_and_strict_ppa_by_hand():
    comps = np.array([[1.0, 0.5, np.nan], [np.nan, np.nan, np.nan]])
    s = weighted_scores(comps, np.array([[0.2, 0.3, 0.5]]))
    assert s[0, 0] == pytest.approx((0.2 * 1 + 0.3 * 0.5) / 0.5) and math.isnan(s[0, 1])
    a, b = np.array([[0.9, 0.5, 0.5]]), np.array([[0.1, 0.5, 0.2]])
    # pair 1 right (0.9 > 0.1, a preferred); pair 2 a tie: not strictly right; pair 3 wrong (b preferred, 0.5 > 0.2)
    assert strict_ppa(a, b, np.array([True, True, False])).tolist() == [pytest.approx(1 / 3)]


def test_the_fit_finds_the_predictive_component_nearest_equal_weights():
    # humans follow component 0; component 1 points the other way; component 2 is constant
    a = np.array([[1.0, 0.0, 0.5], [1.0, 0.0, 0.5]])
    b = np.array([[0.0, 1.0, 0.5], [0.0, 1.0, 0.5]])
    fit = fit_ppa_weights(a, b, np.array([True, True]))
    assert fit.ppa == 1.0 and fit.equal_ppa == 0.0  # equal weights tie every pair: not strictly right
    # every w0 > w1 is perfect; the nearest to (1/3, 1/3, 1/3) in L1 on the 0.05 grid
    assert fit.weights == pytest.approx((0.35, 0.3, 0.35))
    with pytest.raises(ValueError):
        fit_ppa_weights(a, b[:1], np.array([True]))


def test_a_hidden_judges_weights_are_recovered():
    rng = np.random.default_rng(0)
    a, b = rng.random((400, 3)), rng.random((400, 3))
    hidden = np.array([0.6, 0.1, 0.3])
    fit = fit_ppa_weights(a, b, a @ hidden > b @ hidden)
    assert fit.ppa >= 0.98 and np.abs(np.array(fit.weights) - hidden).max() <= 0.1
