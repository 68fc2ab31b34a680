"""The metric contract: hand-computed cases, scikit-learn and an independent loop as oracles."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

import fpr.metrics.ranking as M
from fpr.metrics.ranking import average_precision, retrieval_metrics, retrieval_metrics_labels, top_k


@pytest.fixture(autouse=True, params=["numba", "numpy"])
def engine(request, monkeypatch):
    """Every test runs on the compiled kernel and on the NumPy fallback."""
    monkeypatch.setattr(M, "ENGINE", request.param)
    return request.param


def loop_ap_with_ties(scores: np.ndarray, rel: np.ndarray) -> float:
    """Independent reference: walk distinct score thresholds from the top (sklearn's definition)."""
    total = rel.sum()
    ap, prev_hits = 0.0, 0
    for t in sorted(set(scores[np.isfinite(scores)].tolist()), reverse=True):
        above = scores >= t
        hits = int(rel[above].sum())
        ap += (hits - prev_hits) / total * (hits / above.sum())
        prev_hits = hits
    return ap


# ---- hand-computed cases ----------------------------------------------------------------

def test_single_relevant_item_ap_is_reciprocal_rank():
    assert average_precision(np.array([0.9, 0.8, 0.7, 0.1]), np.array([0, 0, 1, 0])) == pytest.approx(1 / 3)
    assert average_precision(np.array([0.9, 0.8]), np.array([1, 0])) == 1.0


def test_two_relevant_items_hand_computed():
    # ranking: R N R N -> (1/1 + 2/3) / 2
    ap = average_precision(np.array([4.0, 3.0, 2.0, 1.0]), np.array([1, 0, 1, 0]))
    assert ap == pytest.approx((1 + 2 / 3) / 2)


def test_ties_take_precision_at_end_of_block():
    # all three tied: the one relevant item gets precision 1/3 whatever the order
    assert average_precision(np.array([1.0, 1.0, 1.0]), np.array([0, 1, 0])) == pytest.approx(1 / 3)
    # [R, (R, N tied), N]: first gets 1/1, second gets precision at block end = 2/3
    ap = average_precision(np.array([5.0, 3.0, 3.0, 1.0]), np.array([1, 1, 0, 0]))
    assert ap == pytest.approx((1 + 2 / 3) / 2)


def test_ranks_use_the_same_tie_rule():
    m = retrieval_metrics(np.array([[3.0, 3.0, 2.0, 1.0]]), np.array([[False, True, False, True]]))
    assert m.first_hit_rank[0] == 2  # tied with a non-relevant item: end of the block
    assert m.last_hit_rank[0] == 4
    assert m.inp[0] == pytest.approx(2 / 4)
    assert m.cmc(1)[0] == 0.0 and m.cmc(2)[0] == 1.0


def test_query_without_relevant_item_is_nan_not_zero():
    m = retrieval_metrics(np.array([[0.5, 0.4]]), np.array([[False, False]]))
    assert np.isnan(m.ap[0]) and m.first_hit_rank[0] == 0 and m.n_relevant[0] == 0 and np.isnan(m.inp[0])


def test_out_of_scope_items_never_count():
    scores = np.array([[np.inf * -1, 0.2, 0.9, -np.inf]])
    rel = np.array([[False, True, False, False]])
    m = retrieval_metrics(scores, rel)
    assert m.ap[0] == pytest.approx(0.5) and m.last_hit_rank[0] == 2


def test_negative_zero_ties_with_zero():
    m = retrieval_metrics(np.array([[0.0, -0.0]], dtype=np.float32), np.array([[False, True]]))
    assert m.ap[0] == pytest.approx(0.5)


# ---- cross-checks -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_sklearn_on_hundreds_of_random_cases_with_ties(dtype):
    rng = np.random.default_rng(7)
    scores, rels = [], []
    for t in range(400):
        g = 30
        s = rng.integers(0, 5, size=g).astype(dtype)  # heavy ties
        if t % 2:
            s = s + rng.normal(0, 0.3, size=g).astype(dtype) * (rng.random(g) < 0.5)
        r = rng.random(g) < 0.25
        r[rng.integers(g)] = True
        scores.append(s)
        rels.append(r)
    scores, rels = np.array(scores, dtype=dtype), np.array(rels)
    m = retrieval_metrics(scores, rels, chunk=33)
    for i in range(len(scores)):
        ref = 1.0 if rels[i].all() else average_precision_score(rels[i], scores[i].astype(np.float64))
        assert abs(m.ap[i] - ref) <= 1e-9
        assert abs(m.ap[i] - loop_ap_with_ties(scores[i].astype(np.float64), rels[i])) <= 1e-9


def test_invariant_to_gallery_order():
    rng = np.random.default_rng(3)
    s = rng.integers(0, 4, size=(50, 40)).astype(np.float64)
    r = rng.random((50, 40)) < 0.2
    r[:, 0] = True
    perm = rng.permutation(40)
    a, b = retrieval_metrics(s, r), retrieval_metrics(s[:, perm], r[:, perm])
    np.testing.assert_allclose(a.ap, b.ap, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(a.first_hit_rank, b.first_hit_rank)


def test_label_path_equals_mask_path_and_dense_equals_sparse(monkeypatch):
    rng = np.random.default_rng(11)
    s = rng.integers(0, 6, size=(70, 90)).astype(np.float32)
    ql, gl = rng.integers(0, 8, 70), rng.integers(0, 9, 90)
    a = retrieval_metrics(s, ql[:, None] == gl[None, :], chunk=16)
    b = retrieval_metrics_labels(s, ql, gl, chunk=23)
    monkeypatch.setattr(M, "DENSE_FRACTION", 0.0)  # force the whole-row sort path
    monkeypatch.setattr(M, "DENSE_BLOCK", 5)
    c = retrieval_metrics_labels(s, ql, gl)
    for x in (b, c):
        np.testing.assert_allclose(a.ap, x.ap, equal_nan=True, atol=1e-12)
        np.testing.assert_array_equal(a.first_hit_rank, x.first_hit_rank)
        np.testing.assert_array_equal(a.last_hit_rank, x.last_hit_rank)


def test_chunking_and_threads_do_not_change_results(monkeypatch):
    rng = np.random.default_rng(5)
    s = rng.normal(size=(200, 60)).astype(np.float32)
    r = rng.random((200, 60)) < 0.1
    r[:, 1] = True
    whole = retrieval_metrics(s, r, chunk=1000)
    monkeypatch.setattr(M, "THREADS", 1)
    pieces = retrieval_metrics(s, r, chunk=7)
    np.testing.assert_array_equal(whole.ap, pieces.ap)


def test_cmc_and_minp_against_brute_force():
    rng = np.random.default_rng(9)
    s = rng.normal(size=(100, 50))
    r = rng.random((100, 50)) < 0.1
    r[:, 0] = True
    m = retrieval_metrics(s, r)
    for i in range(100):
        order = np.argsort(-s[i])
        ranks = np.flatnonzero(r[i][order]) + 1
        assert m.first_hit_rank[i] == ranks[0]
        assert m.inp[i] == pytest.approx(len(ranks) / ranks[-1])
        for k in (1, 5, 10):
            assert m.cmc(k)[i] == float(ranks[0] <= k)


def test_top_k_orders_and_pads():
    idx, val = top_k(np.array([[0.1, 0.9, -np.inf, 0.5]]), 4)
    assert idx.tolist() == [[1, 3, 0, -1]]
    assert val[0, :3].tolist() == [0.9, 0.5, 0.1]


@pytest.mark.parametrize("sample_per_k", [None, 1, 2])
@pytest.mark.parametrize("rows_per_call", [None, 1, 7])
@pytest.mark.parametrize("k", [1, 3, 8, 20, 70])
def test_top_k_equals_the_rule_written_out_on_ties_and_non_finite_rows(k, rows_per_call, sample_per_k, monkeypatch):
    """The sampled-bound path of top_k == the whole-row rule (_top_k_rows) == a full stable sort, with
    wide ties at the k-th place, -0.0, -inf scopes, +inf, NaN, rows with fewer than k finite scores and
    ascending rows (the sample's worst order); whole or a few rows per step, whole-row or sparse samples."""
    from fpr.metrics import ranking
    from fpr.metrics.ranking import _top_k_rows

    if rows_per_call:
        monkeypatch.setattr(ranking, "TOPK_ROWS_ELEMENTS", rows_per_call * 50)
    if sample_per_k:
        monkeypatch.setattr(ranking, "TOPK_SAMPLE_PER_K", sample_per_k)

    rng = np.random.default_rng(7)
    q, g = 60, 50
    s = (rng.integers(-3, 4, size=(q, g)) / 2).astype(np.float32)
    s[::5] = rng.normal(size=(len(s[::5]), g)).astype(np.float32)  # tie-free rows
    s[1::7] = -0.0 * s[1::7]
    s[:, ::9] = -np.inf
    s[2, :45] = -np.inf  # fewer than k finite
    s[3, 4] = np.inf
    s[4, 6] = np.nan
    s[6] = 0.5  # one tie over the whole row
    s[8] = np.sort(s[8])  # ascending: the strided sample's bound is low, many candidates
    s[9, 20:] = np.nan
    s[11, ::2] = np.inf
    idx, val = top_k(s, k)
    ref_idx, ref_val = _top_k_rows(s, min(k, g))
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_array_equal(val, ref_val)
    for i in range(q):  # the rule itself on finite rows: stable sort by score descending
        if np.isfinite(s[i]).all():
            order = np.argsort(-s[i].astype(np.float64), kind="stable")[:k]
            assert idx[i].tolist() == order.tolist()


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError):
        retrieval_metrics(np.zeros((2, 3)), np.zeros((2, 4), bool))


def test_engines_agree_exactly_on_ties_and_edge_rows(engine):
    """Every code path (kernel mask/labels; NumPy sparse packed-key, float64 lexsort, dense whole-row,
    dense sub-blocks) against scikit-learn, with ties, -0.0, -inf scopes, empty and all-relevant rows."""
    rng = np.random.default_rng(21)
    q, g = 90, 70
    s32 = (rng.integers(-3, 4, size=(q, g)) / 2).astype(np.float32)
    s32[::7] = -0.0 * s32[::7]  # signed zeros tie with +0.0
    s32[:, ::9] = -np.inf  # out of scope
    s32[5:9] = rng.normal(size=(4, g)).astype(np.float32)  # tie-free rows
    ql, gl = rng.integers(0, 6, q), rng.integers(0, 6, g)
    rel = (ql[:, None] == gl[None, :]) & np.isfinite(s32)
    rel[0] = False  # no relevant item
    rel[1] = np.isfinite(s32[1])  # every scoped item relevant
    rel[6] = np.isfinite(s32[6]) & (np.arange(g) % 8 != 1)  # > 48 distinct relevant values: the kernel's binary search
    assert len(set(s32[6][rel[6]].tolist())) > 48
    ref = np.array([np.nan if not rel[i].any() else 1.0 if rel[i][np.isfinite(s32[i])].all() and
                    np.isfinite(s32[i]).all() else average_precision_score(rel[i][np.isfinite(s32[i])],
                                                                            s32[i][np.isfinite(s32[i])])
                    for i in range(q)])
    outs = [retrieval_metrics(s32, rel), retrieval_metrics(s32.astype(np.float64), rel)]
    if engine == "numpy":
        for frac, block in ((0.0, 5), (0.0, 1000)):
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(M, "DENSE_FRACTION", frac)
                mp.setattr(M, "DENSE_BLOCK", block)
                outs.append(retrieval_metrics(s32, rel))
    for m in outs:
        np.testing.assert_allclose(m.ap, ref, rtol=0, atol=1e-9, equal_nan=True)
        for i in (0, 1, 2, 5, 30):
            if rel[i].any():
                order = np.argsort(-s32[i].astype(np.float64), kind="stable")
                pos = np.flatnonzero(rel[i][order])
                end = lambda p: int(np.sum(s32[i] >= s32[i][order][p]))  # noqa: E731  (pessimistic tie rank)
                assert m.first_hit_rank[i] == end(pos[0]) and m.last_hit_rank[i] == end(pos[-1])
        assert m.first_hit_rank[0] == 0 and np.isnan(m.ap[0]) and m.ap[1] == 1.0
    # labels: relevance by equal labels (the -inf columns are never relevant there: give them a foreign label)
    gl2 = np.where(np.isfinite(s32).all(axis=0), gl, 99)
    lab = retrieval_metrics_labels(s32, ql, gl2)
    mask = retrieval_metrics(s32, ql[:, None] == gl2[None, :])
    np.testing.assert_array_equal(lab.ap, mask.ap)
    np.testing.assert_array_equal(lab.last_hit_rank, mask.last_hit_rank)
    if engine == "numba":
        from fpr.metrics import _kernels  # the compiled path really ran
        assert M._kernels() is _kernels


def test_nan_relevant_scores_are_an_error_in_both_engines():
    with pytest.raises(ValueError, match="NaN"):
        retrieval_metrics(np.array([[np.nan, 1.0]]), np.array([[True, False]]))
    m = retrieval_metrics(np.array([[np.nan, 1.0, 0.5]]), np.array([[False, False, True]]))
    assert m.ap[0] == 0.5 and m.first_hit_rank[0] == 2


def test_dense_blocks_are_counted_in_sorted_rows_with_the_same_bits(engine, monkeypatch):
    """i.i.d. scores make most items candidates: the NumPy engine then counts in sorted rows
    (_dense_counts), with the bits of its candidate path (forced here by DENSE_FRACTION > 1), the
    kernel's ranks and its AP to the last bits, and the tie-aware loop's values; a NaN block keeps the
    candidate path."""
    rng = np.random.default_rng(5)
    s = rng.standard_normal((120, 400)).astype(np.float32)
    s[:20] = (rng.integers(-3, 4, size=(20, 400)) / 2).astype(np.float32)  # ties
    s[20:30, ::5] = -np.inf
    rel = (rng.random((120, 400)) < 0.03) & np.isfinite(s)
    rel[30] = False
    calls = []
    real = M._dense_counts
    monkeypatch.setattr(M, "_dense_counts", lambda *a: calls.append(1) or real(*a))
    m = retrieval_metrics(s, rel)
    assert (len(calls) > 0) == (engine == "numpy")
    monkeypatch.setattr(M, "DENSE_FRACTION", 1.1)  # the candidate path only
    c = retrieval_metrics(s, rel)
    monkeypatch.setattr(M, "ENGINE", "numba")
    k = retrieval_metrics(s, rel)
    monkeypatch.setattr(M, "ENGINE", engine)
    for f in ("ap", "first_hit_rank", "last_hit_rank", "n_relevant"):
        np.testing.assert_array_equal(getattr(m, f), getattr(c, f))
    for f in ("first_hit_rank", "last_hit_rank", "n_relevant"):
        np.testing.assert_array_equal(getattr(m, f), getattr(k, f))
    np.testing.assert_allclose(m.ap, k.ap, rtol=1e-14, atol=0)  # the kernel sums in its own order
    for i in range(0, 120, 7):
        if rel[i].any():
            assert m.ap[i] == pytest.approx(loop_ap_with_ties(s[i], rel[i]), abs=1e-12)
    monkeypatch.setattr(M, "DENSE_FRACTION", 0.2)
    s[40, 3] = np.nan  # a non-relevant NaN: excluded from the ranking either way
    rel[40, 3] = False
    n = retrieval_metrics(s, rel)  # the NaN's sub-block takes the candidate path, the others count
    np.testing.assert_array_equal(np.delete(n.ap, 40), np.delete(m.ap, 40))
    assert n.ap[40] == pytest.approx(loop_ap_with_ties(np.delete(s[40], 3), np.delete(rel[40], 3)), abs=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dense_rows_listed_blocks_and_item_binning_give_the_same_bits(dtype):
    """The kernel counts a row one of three ways, chosen by its layout: every block at once (the row's first
    block mostly at or above the lowest relevant score), only the listed blocks holding such a candidate, or
    item by item (more than 61 distinct relevant values, candidates one per block). Items far below every
    relevant score change neither AP nor any rank, so the same rows with 64 of them in front (never dense)
    and with 63 after each item (one candidate per block) must give the same bits on every path, for 1 to
    ~130 distinct relevant values (every group of four thresholds and remainder) and non-relevant NaN; the
    loop written out pins the values."""
    rng = np.random.default_rng(5)
    g, q = 160, 48
    s = (rng.integers(-400, 400, (q, g)) / 16).astype(dtype)  # ties, and up to ~150 distinct values in a row
    s[rng.random((q, g)) < 0.05] = -0.0
    rel = rng.random((q, g)) < np.linspace(0.004, 0.9, q)[:, None]
    s[(rng.random((q, g)) < 0.02) & ~rel] = np.nan  # a non-relevant NaN never counts
    low = np.full((q, 64), -1e30, dtype)
    front = np.hstack([low, s]), np.hstack([np.zeros(low.shape, bool), rel])
    spread = np.dstack([s[:, :, None], np.full((q, g, 63), -1e30, dtype)]).reshape(q, -1), \
        np.dstack([rel[:, :, None], np.zeros((q, g, 63), bool)]).reshape(q, -1)
    m = np.array([len(set(s[i][rel[i]].tolist())) for i in range(q)])
    assert m.min() <= 4 and (m > 61).sum() >= 10 and len(set(m % 4)) == 4
    base = retrieval_metrics(s, rel)
    for other in (retrieval_metrics(*front), retrieval_metrics(*spread)):
        for f in ("ap", "ap_at_k", "r_precision"):
            np.testing.assert_array_equal(getattr(base, f).view(np.int64), getattr(other, f).view(np.int64))
        for f in ("first_hit_rank", "last_hit_rank", "n_relevant"):
            np.testing.assert_array_equal(getattr(base, f), getattr(other, f))
    for i in range(0, q, 5):
        if rel[i].any():
            assert base.ap[i] == pytest.approx(loop_ap_with_ties(s[i], rel[i]), abs=1e-12)
            assert base.last_hit_rank[i] == int(np.sum(s[i] >= s[i][rel[i]].min()))
    assert np.isnan(base.ap).sum() <= 2
    bad = s.copy()
    bad[7, np.flatnonzero(rel[7])[0]] = np.nan
    with pytest.raises(ValueError, match="NaN"):  # the labels path reads the relevant scores by index
        retrieval_metrics_labels(bad, np.arange(q) % 3, np.where(rel[7], 7 % 3, 5))


@pytest.mark.parametrize("g", [1, 7, 8, 9, 63, 64, 65, 129, 200])
def test_block_and_word_edges_of_the_row_against_the_loop(g):
    """The kernel reads the mask as 8-byte words in blocks of 64 items and rows start at any byte (g not a
    multiple of 8): relevant items and candidates on either side of each word and block edge, in the tail
    after the last whole word, alone in a block, and a NaN relevant score inside a word are all counted
    as the independent loop counts them (AP and both ranks)."""
    rng = np.random.default_rng(g)
    q = 60
    s = (rng.integers(-8, 9, (q, g)) / 8).astype(np.float32)  # ties
    rel = np.zeros((q, g), bool)
    for i in range(q):
        cols = rng.choice(g, size=min(g, 1 + i % 5), replace=False)
        edges = [c for c in (0, 7, 8, 63, 64, g - 1) if c < g]
        rel[i, cols] = True
        rel[i, edges[i % len(edges)]] = True
    s[rng.random((q, g)) < 0.05] = np.nan  # non-relevant NaN never counts
    s[rel & np.isnan(s)] = 0.25
    m = retrieval_metrics(s, rel)
    for i in range(q):
        ref = loop_ap_with_ties(s[i], rel[i])
        assert m.ap[i] == pytest.approx(ref, abs=1e-12)
        ends = sorted((int(np.sum(s[i] >= v)) for v in s[i][rel[i]]))
        assert (m.first_hit_rank[i], m.last_hit_rank[i], m.n_relevant[i]) == (ends[0], ends[-1], rel[i].sum())
    bad = s.copy()
    bad[3, np.flatnonzero(rel[3])[0]] = np.nan  # a relevant NaN inside a word: the one-line error
    with pytest.raises(ValueError, match="NaN"):
        retrieval_metrics(bad, rel)
