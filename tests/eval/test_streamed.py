"""Streamed evaluation == the in-memory engine on the full (Q, G) matrix, exactly.

Vectors are small multiples of 1/4 in few dimensions: every dot product is exact in float32
whatever the summation order (so blocks, BLAS kernels and FAISS all give the same numbers)
and there are many ties, which exercises the tie rule of the stored top-k.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fpr.eval import inputs, relevance, scoring, similarity
from fpr.eval import pipeline as P
from fpr.index import faiss_index as F
from fpr.metrics.ranking import retrieval_metrics, top_k


def _setup(seed=0, g=90, q=40, d=5):
    rng = np.random.default_rng(seed)
    groups = np.array([f"g{i % 3}" for i in range(g)], dtype=object)
    idents = np.array([f"id{rng.integers(0, 6)}" for _ in range(g)], dtype=object)
    v = (rng.integers(-2, 3, size=(g, d)) / 4).astype(np.float32)
    labels = relevance.GalleryLabels(np.arange(1000, 1000 + g), groups, idents, np.zeros((0, d), np.float32),
                             np.array([], object), np.array([], object), [], [f"p{i}" for i in range(g)])
    qdf = pd.DataFrame({"group": [f"g{rng.integers(0, 3)}" for _ in range(q)],
                        "identity": [f"id{rng.integers(0, 7)}" for _ in range(q)]})
    qv = (rng.integers(-2, 3, size=(q, d)) / 4).astype(np.float32)
    card = F.IndexCard(name="ix", gallery="g", gallery_fingerprint="f", encoder="e", weights_checksum="w",
                       preprocessing="{}", dim=d, n_items=0, n_references=0)
    gi = F.build(v, labels.item_ids, np.zeros((0, d), np.float32), np.zeros(0, np.int64), card)
    return labels, qdf, qv, v, gi


def _reference(labels, qdf, qv, v, scope, k):
    scope_mask, rel = labels.relevance(qdf, scope)
    ok = np.flatnonzero(rel.any(axis=1))
    scores = np.where(scope_mask[ok], qv[ok] @ v.T, np.float32(-np.inf)).astype(np.float32)
    m = retrieval_metrics(scores, rel[ok])
    idx, val = top_k(scores, k)
    return ok, m, idx, val, rel[ok], scope_mask[ok].sum(axis=1)


@pytest.mark.parametrize("scope", ["group", "all"])
@pytest.mark.parametrize("block", [1, 3, 7, None])
@pytest.mark.parametrize("source", ["index", "index-faiss-topk", "callable"])
def test_streamed_equals_in_memory(scope, block, source, monkeypatch):
    """``index``: the top-k from the block's scores (a flat index on the CPU); ``index-faiss-topk``: from
    FAISS candidates re-scored and checked (what a flat index on a GPU does), forced here on the CPU."""
    labels, qdf, qv, v, gi = _setup()
    k = 12
    ok, m, idx, val, rel, n_scope = _reference(labels, qdf, qv, v, scope, k)
    assert 0 < len(ok) < len(qdf)
    monkeypatch.setattr(scoring, "faiss_search_for_flat", lambda: source == "index-faiss-topk")
    src = gi if source.startswith("index") else (lambda q: q @ v.T)
    out = scoring.score_blocks(qv, ok, labels.codes(qdf), scope, src, k, block=block)
    np.testing.assert_array_equal(out.values["ap"], m.ap)
    np.testing.assert_array_equal(out.values["first_hit_rank"], m.first_hit_rank)
    np.testing.assert_array_equal(out.values["last_hit_rank"], m.last_hit_rank)
    np.testing.assert_array_equal(out.values["n_relevant"], m.n_relevant)
    np.testing.assert_array_equal(out.values["inp"], m.inp)
    np.testing.assert_array_equal(out.values["cmc5"], m.cmc(5))
    np.testing.assert_array_equal(out.values["n_scope"], n_scope)
    np.testing.assert_array_equal(out.top_rows, idx)
    np.testing.assert_array_equal(out.top_scores, val)
    np.testing.assert_array_equal(out.top_relevant, np.take_along_axis(rel, np.maximum(idx, 0), 1) & (idx >= 0))


def test_tie_rule_is_score_then_row_and_faiss_path_is_checked(monkeypatch):
    # one query, every gallery item tied except two: top-3 = best item, then the two lowest tied rows
    v = np.array([[0.0], [1.0], [0.5], [0.5], [0.5], [0.5], [0.25]], dtype=np.float32)
    idx, val = top_k(np.array([[0.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.25]], np.float32), 3)
    assert idx.tolist() == [[1, 2, 3]] and val.tolist() == [[1.0, 0.5, 0.5]]
    card = F.IndexCard(name="ix", gallery="g", gallery_fingerprint="f", encoder="e", weights_checksum="w",
                       preprocessing="{}", dim=1, n_items=0, n_references=0)
    gi = F.build(v, np.arange(7), np.zeros((0, 1), np.float32), np.zeros(0, np.int64), card)
    monkeypatch.setattr(scoring, "faiss_search_for_flat", lambda: True)  # the GPU path, on the CPU
    part = scoring._ScoreSource(gi, 7).part(None)
    q = np.ones((1, 1), np.float32)
    # margin 0: FAISS's own choice among the ties is re-ordered, and checked against the block scores
    monkeypatch.setattr(scoring, "TOPK_MARGIN", 0)
    calls = []
    real = scoring.top_k
    monkeypatch.setattr(scoring, "top_k", lambda s, k: calls.append(len(s)) or real(s, k))
    got, vals = part.top_k(q, q @ v.T, 3)
    assert got.tolist() == [[1, 2, 3]] and vals.tolist() == [[1.0, 0.5, 0.5]]
    assert calls == [1]  # the tie at the 3rd place is wider than what FAISS returned: ranked from the block
    calls.clear()
    got, _ = part.top_k(q, q @ v.T, 1)
    assert got.tolist() == [[1]] and calls == []  # no tie at the k-th place: FAISS's answer stands


@pytest.mark.parametrize("scope", ["group", "all"])
def test_a_flat_index_on_the_cpu_takes_its_top_k_from_the_block_not_faiss(scope, monkeypatch):
    """No second pass over the gallery: a FAISS search of a flat index (or of a group's flat
    sub-index) fails this test; the stored top-k is still the in-memory engine's, ties included."""
    labels, qdf, qv, v, gi = _setup(seed=5)
    k = 12
    ok, m, idx, val, rel, _ = _reference(labels, qdf, qv, v, scope, k)

    def no_search(*a, **kw):
        raise AssertionError("FAISS search called for a flat index")

    monkeypatch.setattr(scoring, "faiss_search_for_flat", lambda: False)
    monkeypatch.setattr(F.GalleryIndex, "search_rows", no_search)
    monkeypatch.setattr(F.GalleryIndex, "search", no_search)
    monkeypatch.setattr(scoring.faiss_index, "flat_searcher", no_search)
    out = scoring.score_blocks(qv, ok, labels.codes(qdf), scope, gi, k, block=4)
    np.testing.assert_array_equal(out.top_rows, idx)
    np.testing.assert_array_equal(out.top_scores, val)
    np.testing.assert_array_equal(out.values["ap"], m.ap)


def test_evaluate_streams_with_the_index(tmp_path):
    labels, qdf, qv, v, gi = _setup(seed=3)
    qdf = inputs.normalize_queries(qdf.assign(path=[f"q{i}.png" for i in range(len(qdf))], method="m"), base=tmp_path)
    pos = {p: i for i, p in enumerate(qdf["path"])}

    class Res:
        def __init__(self, paths):
            self.vectors = qv[[pos[p] for p in paths]]
            self.hashes = [f"h{pos[p]}" for p in paths]
            self.failed = {}

    def embed(paths, on_error="raise", desc=""):
        return Res(paths)

    settings = P.EvalSettings(scope="all", skip_missing_identities=True, top_k=4, block_size=5)
    ev = P.evaluate(qdf, labels, gi, embed, settings)
    ok, m, idx, val, rel, _ = _reference(labels, qdf, qv, v, "all", 4)
    np.testing.assert_array_equal(ev.per_query["ap"].to_numpy()[ok], m.ap)
    assert (ev.status[ok] == "ok").all() and (ev.status != "ok").sum() == len(qdf) - len(ok)
    first = ev.rankings[ev.rankings["query_id"] == qdf["query_id"][ok[0]]]
    assert first["item_id"].tolist() == (labels.item_ids[idx[0]]).tolist()
    assert first["rank"].tolist() == [1, 2, 3, 4]


def test_vectorised_sim_equals_the_per_query_definition(tmp_path):
    rng = np.random.default_rng(4)
    d = 6
    refs = rng.normal(size=(12, d)).astype(np.float32)
    labels = relevance.GalleryLabels(np.arange(3), np.array(["a", "a", "b"], object), np.array(["x", "y", "x"], object),
                             refs, np.array(["a"] * 6 + ["b"] * 6, object),
                             np.array(["x", "x", "y", "y", "y", "z", "x", "x", "x", "x", "q", "q"], object),
                             [f"r{i}.png" for i in range(12)], ["p0", "p1", "p2"])
    ex = {f"/e{i}.png": rng.normal(size=d) for i in range(4)}
    qdf = pd.DataFrame({"group": ["a", "a", "b", "a", "b", "a", "b"], "identity": ["x", "y", "x", "z", "x", "x", "w"],
                        "sim_reference": ["", "", "", "/e0.png", "", "", ""],
                        "reference_list": [[], [], [], [], ["/e1.png", "/e2.png"], ["/e1.png", "/e2.png"], []]})
    qv = rng.normal(size=(7, d)).astype(np.float32)

    class Res:
        def __init__(self, paths):
            self.vectors = np.stack([ex[p] for p in paths]).astype(np.float32)

    sims, nrefs, sources = similarity.pairwise_sim(qdf, qv, labels, lambda paths, **kw: Res(paths))
    exf = {p: v.astype(np.float32).astype(np.float64) for p, v in ex.items()}
    q64 = qv.astype(np.float64)
    rk = relevance.identity_keys(labels.ref_groups, labels.ref_identities)
    expect = [np.mean(refs[rk == "a\x1fx"].astype(np.float64) @ q64[0]),
              np.mean(refs[rk == "a\x1fy"].astype(np.float64) @ q64[1]),
              np.mean(refs[rk == "b\x1fx"].astype(np.float64) @ q64[2]),
              exf["/e0.png"] @ q64[3],
              np.mean([exf["/e1.png"] @ q64[4], exf["/e2.png"] @ q64[4]]),
              np.mean([exf["/e1.png"] @ q64[5], exf["/e2.png"] @ q64[5]]), np.nan]
    np.testing.assert_allclose(sims, expect, rtol=0, atol=1e-12)
    assert nrefs.tolist() == [2, 3, 4, 1, 2, 2, 0]
    assert sources == ["identity", "identity", "identity", "sim_reference", "reference_paths", "reference_paths", None]


@pytest.mark.determinism
@pytest.mark.parametrize("scope", ["all", "group"])
@pytest.mark.parametrize("source", ["index", "array", "exact-callable"])
def test_a_querys_scores_do_not_depend_on_its_block(source, scope):
    """Real-valued embeddings: scores are exact (fpr.index.exact), so a query scored alone, in a block
    of 2, 3, 5 or 64, among all 41 (what different local blocks or Ray shards see) and with 1 or 2
    BLAS threads has bit-identical scores, AP and top-k. With a plain float32 ``q @ v.T`` the last
    bits follow the BLAS kernel chosen for the block's height. A callable gallery_scores keeps the
    guarantee only if it is itself exact: here it is built on exact_scores."""
    from threadpoolctl import threadpool_limits

    from fpr.index.exact import exact_scores

    rng = np.random.default_rng(1)
    g, q, d = 300, 41, 128
    v = rng.normal(size=(g, d)).astype(np.float32)
    qv = rng.normal(size=(q, d)).astype(np.float32)
    groups = np.array([f"g{j % 2}" for j in range(g)], object)
    labels = relevance.GalleryLabels(np.arange(g), groups, np.array([f"i{j % 30}" for j in range(g)], object),
                             np.zeros((0, d), np.float32), np.array([], object), np.array([], object), [],
                             [f"p{j}" for j in range(g)])
    qdf = pd.DataFrame({"group": [f"g{j % 2}" for j in range(q)], "identity": [f"i{j % 30}" for j in range(q)]})
    card = F.IndexCard(name="ix", gallery="g", gallery_fingerprint="f", encoder="e", weights_checksum="w",
                       preprocessing="{}", dim=d, n_items=0, n_references=0)
    src = {"index": lambda: F.build(v, labels.item_ids, np.zeros((0, d), np.float32), np.zeros(0, np.int64), card),
           "array": lambda: v, "exact-callable": lambda: (lambda x: exact_scores(x, v))}[source]()
    ok = np.arange(q)
    whole = scoring.score_blocks(qv, ok, labels.codes(qdf), scope, src, 10, block=None)
    # the definition: float32 of the exact inner product, here from float64 BLAS in one call
    ref = np.where(scope == "all" or np.equal.outer(qdf["group"].to_numpy(), groups), exact_scores(qv, v), -np.inf)
    np.testing.assert_array_equal(whole.top_scores, np.take_along_axis(ref, whole.top_rows, 1))
    from fpr.metrics.top_margin import top_margin  # the definition, from the scoped exact scores
    rel = np.equal.outer(qdf["identity"].to_numpy(), labels.identities) & np.isfinite(ref)
    np.testing.assert_array_equal(whole.values["top_margin"].view(np.int64), top_margin(ref, rel).view(np.int64))
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            for block in (1, 2, 3, 5, 64, None):
                out = scoring.score_blocks(qv, ok, labels.codes(qdf), scope, src, 10, block=block)
                np.testing.assert_array_equal(out.top_scores.view(np.int32), whole.top_scores.view(np.int32))
                np.testing.assert_array_equal(out.top_rows, whole.top_rows)
                np.testing.assert_array_equal(out.values["ap"], whole.values["ap"])
                np.testing.assert_array_equal(out.values["first_hit_rank"], whole.values["first_hit_rank"])
                np.testing.assert_array_equal(out.values["top_margin"].view(np.int64),
                                              whole.values["top_margin"].view(np.int64))


@pytest.mark.determinism
def test_sim_is_the_correctly_rounded_sum_of_its_rounded_products():
    """row_dots = fsum_k fl(a_k b_k), checked against rational arithmetic: a function of the values,
    not of the order a vectorised dot product adds them in (the last bit differs from einsum's here)."""
    from fractions import Fraction

    rng = np.random.default_rng(11)
    a = rng.normal(size=(40, 33))
    b = rng.normal(size=(40, 33)) * np.logspace(-8, 8, 33)  # wide magnitudes: cancellation matters
    got = similarity.row_dots(a, b)
    for i in range(len(a)):
        exact = sum(Fraction(float(x)) for x in (a[i] * b[i]))
        assert got[i] == float(exact), i  # Fraction -> float rounds to nearest, as fsum does
    assert (got != np.einsum("ij,ij->i", a, b)).any()  # the test can tell the two apart
