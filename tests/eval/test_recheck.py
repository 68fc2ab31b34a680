"""The recheck path (fpr.eval.recheck): float32 proposals + exact rechecks give the same bits as the
exact scores through the metric engine and top_k, on hand-computed rows, adversarial rows (1-ulp gaps,
ties, zeros of either sign, many equal relevant scores, cancellation that float32 cannot resolve),
random and clustered data, and proposals perturbed anywhere within the error bound (any BLAS); the top
margin (fpr.metrics.top_margin: the relevant items' and the best impostor's exact scores) likewise."""
from __future__ import annotations

import numpy as np
import pytest

from fpr.eval import recheck as R
from fpr.index import exact as E
from fpr.metrics.ranking import retrieval_metrics, top_k
from fpr.metrics.top_margin import top_margin

pytestmark = pytest.mark.determinism

F32 = np.float32


def _full(q: np.ndarray, v: np.ndarray, rel: np.ndarray, k: int):
    """The previous path: every score exact, then the metric engine and top_k."""
    s = E.exact_scores(q, v)
    m = retrieval_metrics(s, rel)
    m.top_margin = top_margin(s, rel)  # the definition, from every exact score
    idx, val = top_k(s, k)
    return m, idx, val


def _rechecked(q, v, rel, k, proposals=None, stats=None):
    res = R.RecheckedGallery(v).block(q, R.Relevance.from_mask(rel), k, proposals=proposals, stats=stats)
    return res.metrics, res.top_rows, res.top_scores


def _assert_same_bits(a, b):
    (ma, ia, va), (mb, ib, vb) = a, b
    np.testing.assert_array_equal(ma.ap.view(np.int64), mb.ap.view(np.int64))
    np.testing.assert_array_equal(ma.top_margin.view(np.int64), mb.top_margin.view(np.int64))
    for f in ("first_hit_rank", "last_hit_rank", "n_relevant"):
        np.testing.assert_array_equal(getattr(ma, f), getattr(mb, f))
    np.testing.assert_array_equal(ia, ib)
    np.testing.assert_array_equal(np.asarray(va, np.float32).view(np.int32), np.asarray(vb, np.float32).view(np.int32))


def test_a_hand_computed_row():
    # q = e1: each score is the gallery vector's first component; (-0.0, 1) scores +0.0
    q = np.array([[1, 0]], F32)
    v = np.array([[0.5, 0], [0.9, 0], [0.5, 1], [0.5, -1], [0.25, 0], [-0.0, 1]], F32)
    rel = np.array([[True, False, True, False, True, False]])
    m, idx, val = _rechecked(q, v, rel, 3)
    # ranking: 0.9 | {0.5 x3: two relevant} ends at 4 | 0.25 (relevant) at 5 | 0
    assert m.ap[0] == (2 * (2 / 4) + 1 * (3 / 5)) / 3
    assert (m.first_hit_rank[0], m.last_hit_rank[0], m.n_relevant[0]) == (4, 5, 3)
    assert idx.tolist() == [[1, 0, 2]] and val.tolist() == [[F32(0.9), 0.5, 0.5]]
    _assert_same_bits((m, idx, val), _full(q, v, rel, 3))


def _one_ulp_row(n: int, seed: int):
    """Exact scores 0.5 + j ulp(0.5) for j in 0..n/3 (three copies each), behind a +-2^20 cancellation that
    a float32 product cannot resolve: every proposal is off by far more than the gaps."""
    rng = np.random.default_rng(seed)
    ulp = np.spacing(F32(0.5))
    a = F32(0.5) + ulp * rng.integers(0, max(1, n // 3), n).astype(F32)
    v = np.stack([a, np.full(n, 2.0 ** 20, F32), np.full(n, -2.0 ** 20, F32)], axis=1).astype(F32)
    q = np.ones((1, 3), F32)
    return q, v


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scores_one_ulp_apart_behind_a_cancellation(seed):
    q, v = _one_ulp_row(60, seed)
    exact = E.exact_scores(q, v)[0]
    assert np.array_equal(exact, v[:, 0])  # the exact scores are the first components
    rel = (np.random.default_rng(seed + 10).random((1, 60)) < 0.3)
    st = R.RecheckStats()
    got = _rechecked(q, v, rel, 7, stats=st)
    _assert_same_bits(got, _full(q, v, rel, 7))
    assert st.band > 0 and st.topk > 0  # the bound is wide here: the comparisons were rechecked


def test_ties_zeros_of_both_signs_and_many_equal_relevant_scores():
    q = np.array([[1, 1, 1, 2.0 ** -20]], F32)
    rows = ([[0, 0, 0, -2.0 ** -140]] * 3  # exact -2^-160: float32 -0.0, scored +0.0
            + [[1, -1, 0, 0]] * 4  # exact 0 from cancellation
            + [[-0.0, 0, -0.0, 0]] * 3  # -0.0 + 0 ...: 0
            + [[0.25, 0, 0, 0]] * 40  # many equal scores
            + [[-0.25, 0, 0, 0]] * 5 + [[0.5, 0, 0, 0]] * 2)
    v = np.array(rows, F32)
    g = len(v)
    rng = np.random.default_rng(3)
    masks = [np.zeros(g, bool), np.ones(g, bool), rng.random(g) < 0.5]
    masks[0][[0, 5, 9]] = True  # relevant only among the zeros
    rel = np.array(masks)
    qs = np.repeat(q, 3, axis=0)
    for k in (1, 5, 12, g):
        got = _rechecked(qs, v, rel, k)
        _assert_same_bits(got, _full(qs, v, rel, k))
    assert got[2][0, :2].tolist() == [0.5, 0.5] and got[1][0, :3].tolist() == [55, 56, 10]


@pytest.mark.parametrize("data", ["gaussian", "clustered"])
@pytest.mark.parametrize("seed", [0, 1])
def test_random_and_clustered_blocks_match_the_full_path(data, seed):
    rng = np.random.default_rng(seed)
    g, n, d = 700, 40, 32
    if data == "gaussian":
        v = rng.standard_normal((g, d)).astype(F32)
        q = rng.standard_normal((n, d)).astype(F32)
        rel = rng.random((n, g)) < rng.choice([0.0, 0.01, 0.3], (n, 1))
    else:
        ids = 35
        c = rng.standard_normal((ids, d)).astype(F32)
        gl = np.arange(g) % ids
        v = c[gl] + 0.8 * rng.standard_normal((g, d)).astype(F32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        ql = rng.integers(0, ids, n)
        q = c[ql] + 0.8 * rng.standard_normal((n, d)).astype(F32)
        q /= np.linalg.norm(q, axis=1, keepdims=True)
        rel = ql[:, None] == gl[None, :]
    v[::17] = v[5]  # exact duplicates: tied scores in every row
    for k in (1, 10):
        _assert_same_bits(_rechecked(q, v, rel, k), _full(q, v, rel, k))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_any_proposal_within_the_bound_gives_the_same_bits(seed):
    """A stand-in for every BLAS: the exact products perturbed anywhere inside the error bound."""
    rng = np.random.default_rng(seed)
    g, n, d = 500, 24, 16
    v = rng.standard_normal((g, d)).astype(F32)
    v[::7] = v[3]
    q = rng.standard_normal((n, d)).astype(F32)
    rel = rng.random((n, g)) < 0.1
    gal = R.RecheckedGallery(v)
    bound = (E.norms(q) * gal.c32)[:, None] * gal.ng[None, :] + gal.a32
    exact64 = q.astype(np.float64) @ v.astype(np.float64).T
    # room for the float32 rounding of the perturbed value (2^-24 relative) and the float64 product's error
    room = 0.999 * bound - 2.0 ** -23 * np.abs(exact64)
    noise = rng.uniform(-1, 1, exact64.shape) * room
    noise[:, ::5] = np.sign(noise[:, ::5]) * room[:, ::5]  # at the edge of the bound
    p = (exact64 + noise).astype(F32)
    assert (np.abs(p - exact64) <= bound * (1 - 1e-6)).all() and (np.abs(p - exact64) > 0.99 * bound).any()
    st = R.RecheckStats()
    _assert_same_bits(_rechecked(q, v, rel, 10, proposals=p, stats=st), _full(q, v, rel, 10))
    assert st.elements == n * g and st.relevant == rel.sum()


def test_rows_that_could_overflow_float32_are_rechecked_whole():
    q = np.array([[1e19, 1e19], [1, 0]], F32)
    v = np.array([[2e19, 2e19], [1e19, -1e19], [-2e19, -2e19], [1, 2], [3, 0]], F32)  # +-4e38: +-inf
    rel = np.array([[True, False, False, True, False], [False, False, True, False, True]])
    st = R.RecheckStats()
    got = _rechecked(q, v, rel, 4, stats=st)
    _assert_same_bits(got, _full(q, v, rel, 4))
    assert got[1][0].tolist() == [3, 4, 1, -1]  # +-inf scores are left out of the top-k, -1 pads
    assert st.passed_filter >= 5


def test_empty_and_irrelevant_rows():
    v = np.eye(4, dtype=F32)
    q = np.array([[1, 2, 3, 4], [0, 0, 0, 0]], F32)
    rel = np.zeros((2, 4), bool)
    m, idx, val = _rechecked(q, v, rel, 2)
    assert np.isnan(m.ap).all() and m.n_relevant.tolist() == [0, 0]
    assert idx.tolist() == [[3, 2], [0, 1]] and val.tolist() == [[4, 3], [0, 0]]
    _assert_same_bits((m, idx, val), _full(q, v, rel, 2))
    m, idx, _ = _rechecked(q, v, rel, 0)
    assert idx.shape == (2, 0)


def test_the_proposal_bound_is_gamma_d_of_the_float32_unit():
    d = 128
    assert R.proposal_error_factor(d) >= d * 2.0 ** -24 / (1 - d * 2.0 ** -24)
    assert R.proposal_error_factor(d) < 1.001 * d * 2.0 ** -24
    with pytest.raises(ValueError, match="dims below"):
        R.proposal_error_factor(R.MAX_DIM)
