"""Top margin (fpr.metrics.top_margin): mean exact score of the identity's gallery images minus the best
impostor's, on hand-computed rows; it orders queries AP ties at 1; NaN rules; the recheck path's bits."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fpr.metrics.ranking import retrieval_metrics
from fpr.metrics.specs import metric, rule_columns, summary_columns, summary_labels
from fpr.metrics.top_margin import top_margin

F32 = np.float32


def test_hand_computed_rows():
    s = np.array([[0.75, 0.5, 0.25, 0.125],     # relevant 0.75, 0.5 (mean 0.625); best impostor 0.25
                  [0.25, 0.75, 0.5, 0.125],     # relevant 0.25 (rank 3) -> below the impostor 0.75
                  [0.5, 0.5, 0.5, -np.inf]], F32)  # relevant 0.5 tied with the impostor; -inf out of scope
    rel = np.array([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0]], bool)
    assert top_margin(s, rel).tolist() == [0.625 - 0.25, 0.25 - 0.75, 0.0]


def test_float32_scores_are_taken_as_they_are_stored():
    s = np.array([[0.1, 0.2, 0.3]], F32)
    rel = np.array([[True, True, False]])
    want = math.fsum([float(F32(0.1)), float(F32(0.2))]) / 2 - float(F32(0.3))
    assert top_margin(s, rel)[0] == want


def test_it_orders_queries_that_ap_ties_at_one():
    s = np.array([[0.9, 0.8, 0.3, 0.1], [0.9, 0.8, 0.7, 0.1], [0.6, 0.55, 0.5, 0.1]], F32)
    rel = np.array([[1, 1, 0, 0]] * 3, bool)
    assert retrieval_metrics(s, rel).ap.tolist() == [1.0, 1.0, 1.0]  # AP: a three-way tie
    m = top_margin(s, rel)
    assert m[0] > m[1] > m[2] > 0
    np.testing.assert_allclose(m, [0.85 - 0.3, 0.85 - 0.7, 0.575 - 0.5], atol=1e-7)


def test_monotone_in_the_relevant_scores_and_the_best_impostor():
    base = np.array([0.6, 0.4, 0.5, 0.2, 0.1], F32)
    rel = np.array([[1, 1, 0, 0, 0]], bool)
    m0 = top_margin(base[None], rel)[0]
    up = base.copy()
    up[1] = 0.45  # a relevant score rises
    assert top_margin(up[None], rel)[0] > m0
    up = base.copy()
    up[2] = 0.55  # the best impostor rises
    assert top_margin(up[None], rel)[0] < m0
    up = base.copy()
    up[3] = 0.45  # another impostor rises, still below the best: nothing changes
    assert top_margin(up[None], rel)[0] == m0


def test_nan_without_a_relevant_item_or_without_an_impostor():
    s = np.array([[0.5, 0.25], [0.5, 0.25], [0.5, -np.inf], [0.5, 0.25]], F32)
    rel = np.array([[0, 0], [1, 1], [1, 0], [0, 1]], bool)
    m = top_margin(s, rel)
    assert np.isnan(m[:3]).all() and m[3] == 0.25 - 0.5
    assert top_margin(np.zeros((2, 0), F32), np.zeros((2, 0), bool)).shape == (2,)
    assert top_margin(np.zeros((0, 3), F32), np.zeros((0, 3), bool)).shape == (0,)


def test_the_mean_does_not_depend_on_the_order_of_the_relevant_items():
    rng = np.random.default_rng(3)
    s = (rng.normal(size=(1, 50)) * np.logspace(-6, 6, 50)).astype(F32)
    rel = np.ones((1, 50), bool)
    rel[0, 7] = False
    perm = rng.permutation(50)
    assert top_margin(s, rel).view(np.int64)[0] == top_margin(s[:, perm], rel[:, perm]).view(np.int64)[0]


def test_declared_as_a_per_query_metric_with_an_interval():
    spec = metric("top_margin")
    assert (spec.summary, spec.rule, spec.interval, spec.higher_is_better) == ("top_margin", "top_margin", True, True)
    assert summary_columns()["top_margin"] == "top_margin" and rule_columns()["top_margin"] == "top_margin"
    assert summary_labels()["top_margin"] == "top margin" and "not AP" in spec.description


@pytest.mark.determinism
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_recheck_path_computes_the_definitions_bits(seed):
    """From the relevant items' and the best impostor's exact scores only, whatever the proposals (any
    float32 product within the error bound): the same bits as the definition over every exact score, with
    exact ties, duplicated gallery vectors and zero-margin rows."""
    from fpr.eval import recheck as R
    from fpr.index import exact as E

    rng = np.random.default_rng(seed)
    g, q, d = 200, 30, 16
    v = rng.normal(size=(g, d)).astype(F32)
    v[50:80] = v[0]  # exact ties, relevant and impostor alike
    qv = rng.normal(size=(q, d)).astype(F32)
    qv[:5] = v[:5]
    gk, qk = rng.integers(0, 6, g), rng.integers(0, 7, q)  # key 6: no relevant item
    rel = qk[:, None] == gk[None, :]
    want = top_margin(E.exact_scores(qv, v), rel)
    gal = R.RecheckedGallery(v)
    exact64 = qv.astype(np.float64) @ v.astype(np.float64).T
    room = 0.999 * R.proposal_error_factor(d) * E.norms(qv)[:, None] * E.norms(v)[None, :] \
        - 2.0 ** -23 * np.abs(exact64)  # as tests/eval/test_recheck.py: inside the bound after rounding
    wobble = (exact64 + rng.uniform(-1, 1, exact64.shape) * room).astype(F32)
    for proposals in (None, wobble):
        got = gal.block(qv, R.Relevance.from_mask(rel), 0, proposals=proposals).metrics.top_margin
        np.testing.assert_array_equal(got.view(np.int64), want.view(np.int64))
    assert np.isnan(want[qk == 6]).all() and np.isfinite(want[qk != 6]).all()
