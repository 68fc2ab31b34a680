"""AP@k (MAP@k) and R-precision: hand-computed answers on the compiled kernel, the NumPy fallback and the
recheck path, and an independent loop (torchmetrics' definition of AP@k written out) on random rankings."""
from __future__ import annotations

import numpy as np
import pytest

import fpr.metrics.ranking as M
from fpr.defaults import AP_AT_K
from fpr.metrics.ranking import retrieval_metrics, retrieval_metrics_labels
from fpr.metrics.specs import metric


@pytest.fixture(autouse=True, params=["numba", "numpy"])
def engine(request, monkeypatch):
    monkeypatch.setattr(M, "ENGINE", request.param)
    return request.param


def _one(scores, rel):
    m = retrieval_metrics(np.array([scores], dtype=np.float64), np.array([rel], dtype=bool))
    return float(m.ap_at_k[0]), float(m.r_precision[0])


def loop_reference(scores: np.ndarray, rel: np.ndarray, k: int) -> tuple[float, float]:
    """torchmetrics' retrieval_average_precision(top_k=k) and R-precision, written out for distinct scores."""
    order = np.argsort(-scores, kind="stable")
    r = rel[order]
    hits, total = 0, 0.0
    for i in range(min(k, len(r))):
        if r[i]:
            hits += 1
            total += hits / (i + 1)
    n_rel = int(rel.sum())
    return (total / hits if hits else 0.0), r[:n_rel].sum() / n_rel


def test_the_column_names_the_cutoff():
    assert AP_AT_K == 10 and metric("ap10").summary == "map@10"


def test_hand_computed_ranking():
    # ranking R N R N N N N N N N N R (12 items, 3 relevant at ranks 1, 3, 12)
    rel = [1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    scores = list(range(12, 0, -1))
    apk, rprec = _one(scores, rel)
    assert apk == pytest.approx((1 / 1 + 2 / 3) / 2)  # the hits in the top 10: ranks 1 and 3
    assert rprec == pytest.approx(2 / 3)  # the top R = 3 holds 2 relevant items


def test_no_hit_in_the_top_k_is_zero_and_no_relevant_item_is_nan():
    rel = [0] * 10 + [1]
    apk, rprec = _one(list(range(11, 0, -1)), rel)
    assert apk == 0.0 and rprec == 0.0
    apk, rprec = _one([3.0, 2.0, 1.0], [0, 0, 0])
    assert np.isnan(apk) and np.isnan(rprec)


def test_a_single_early_hit_scores_one_whatever_r():
    # torchmetrics divides by the hits within the top k, not by min(k, R)
    rel = [1] + [0] * 10 + [1, 1]
    apk, rprec = _one(list(range(13, 0, -1)), rel)
    assert apk == 1.0 and rprec == pytest.approx(1 / 3)


def test_ties_are_pessimistic_like_the_ranks():
    # [R, (R, N tied), N]: R = 2, the tied relevant item ranks 3 > R; both within the top 10
    apk, rprec = _one([5.0, 3.0, 3.0, 1.0], [1, 1, 0, 0])
    assert rprec == pytest.approx(1 / 2)
    assert apk == pytest.approx((1 + 2 / 3) / 2)
    # a tie block straddling rank 10: 9 non-relevant above, the relevant item tied with one more -> rank 11
    scores = [9.0 + i for i in range(9, 0, -1)] + [1.0, 1.0]
    apk, _ = _one(scores, [0] * 9 + [1, 0])
    assert apk == 0.0


def test_random_rankings_match_the_written_out_definition():
    rng = np.random.default_rng(3)
    for _ in range(50):
        g = int(rng.integers(2, 40))
        s = rng.permutation(g).astype(np.float64)  # distinct scores: no tie rule involved
        rel = rng.random(g) < 0.3
        rel[rng.integers(g)] = True
        apk, rprec = _one(s, rel)
        ref = loop_reference(s, rel, AP_AT_K)
        assert apk == pytest.approx(ref[0], abs=1e-12) and rprec == pytest.approx(ref[1], abs=1e-12)


def test_labels_path_and_recheck_path_agree_with_the_mask_path():
    from fpr.eval import recheck
    from fpr.index.exact import exact_scores

    rng = np.random.default_rng(5)
    q, g, d = 7, 60, 8
    qv = rng.normal(size=(q, d)).astype(np.float32)
    gv = rng.normal(size=(g, d)).astype(np.float32)
    ql, gl = rng.integers(0, 4, q), rng.integers(0, 4, g)
    s = exact_scores(qv, gv)
    mask = retrieval_metrics(s, ql[:, None] == gl[None, :])
    lab = retrieval_metrics_labels(s, ql, gl)
    np.testing.assert_array_equal(mask.ap_at_k, lab.ap_at_k)
    np.testing.assert_array_equal(mask.r_precision, lab.r_precision)
    for i in range(q):
        ref = loop_reference(s[i].astype(np.float64), ql[i] == gl, AP_AT_K)
        assert mask.ap_at_k[i] == pytest.approx(ref[0], abs=1e-12)
        assert mask.r_precision[i] == pytest.approx(ref[1], abs=1e-12)
    if not recheck.available():
        return
    keys = recheck.KeyIndex(gl)
    res = recheck.RecheckedGallery(gv, None).block(qv, keys.of(ql), 5)
    np.testing.assert_allclose(res.metrics.ap_at_k, mask.ap_at_k, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(res.metrics.r_precision, mask.r_precision)
