"""Approximate search indices (IVF, HNSW): recall on the card, AP still exact."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from fpr.errors import InputError
from fpr.eval import relevance, scoring
from fpr.index import faiss_index as F
from fpr.index.exact import exact_scores
from fpr.metrics.ranking import retrieval_metrics


def _card(d):
    return F.IndexCard(name="ix", gallery="g", gallery_fingerprint="f", encoder="e", weights_checksum="w",
                       preprocessing="{}", dim=d, n_items=0, n_references=0)


def _vectors(n=1500, d=16, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_approx_card_carries_measured_recall(tmp_path, kind):
    x = _vectors()
    gi = F.build(x, np.arange(len(x)), np.zeros((0, 16), np.float32), np.zeros(0, np.int64), _card(16),
                 index_type=kind)
    c = gi.card
    assert c.index_type == kind and c.recall_k == 10 and c.recall_queries == 1000
    # recomputed independently: numpy brute force vs the approximate index on the same sample
    sample = np.sort(np.random.default_rng(0).choice(len(x), size=1000, replace=False))
    exact = np.argsort(-(x[sample] @ x.T), axis=1, kind="stable")[:, :10]
    _, got = gi.search_rows(x[sample], 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got.tolist(), exact.tolist())])
    assert c.recall_at_k == pytest.approx(recall, abs=1e-12)
    assert 0.5 < c.recall_at_k <= 1.0
    assert not gi.exact_search
    F.save(gi, tmp_path / "ix")
    card = json.loads((tmp_path / "ix" / "card.json").read_text())
    assert card["index_type"] == kind and card["recall_at_k"] == c.recall_at_k
    back = F.load(tmp_path / "ix")
    assert back.card.index_type == kind and back.approx is not None
    np.testing.assert_array_equal(back.search_rows(x[:5], 10)[1], gi.search_rows(x[:5], 10)[1])
    np.testing.assert_array_equal(back.vectors(), x)


def test_old_cards_load_as_flat(tmp_path):
    x = _vectors(50, 8)
    gi = F.build(x, np.arange(50), np.zeros((0, 8), np.float32), np.zeros(0, np.int64), _card(8))
    F.save(gi, tmp_path / "ix")
    card = json.loads((tmp_path / "ix" / "card.json").read_text())
    for f in ("index_type", "nlist", "nprobe", "hnsw_m", "ef_search", "recall_k", "recall_at_k", "recall_queries"):
        card.pop(f)
    (tmp_path / "ix" / "card.json").write_text(json.dumps(card))
    back = F.load(tmp_path / "ix")
    assert back.card.index_type == "flat" and back.card.recall_at_k is None and back.exact_search


def test_unknown_type_is_an_input_error():
    with pytest.raises(InputError, match="unknown index type"):
        F.build(_vectors(10, 4), np.arange(10), np.zeros((0, 4), np.float32), np.zeros(0, np.int64), _card(4),
                index_type="lsh")


@pytest.mark.determinism
def test_ap_stays_exact_with_an_approximate_index():
    x = _vectors(1200, 16, seed=1)
    gi = F.build(x, np.arange(len(x)), np.zeros((0, 16), np.float32), np.zeros(0, np.int64), _card(16),
                 index_type="hnsw")
    rng = np.random.default_rng(2)
    ids = np.array([f"i{rng.integers(0, 40)}" for _ in range(len(x))], dtype=object)
    labels = relevance.GalleryLabels(np.arange(len(x)), np.array(["g"] * len(x), object), ids, np.zeros((0, 16), np.float32),
                             np.array([], object), np.array([], object), [], [""] * len(x))
    qdf = pd.DataFrame({"group": ["g"] * 30, "identity": ids[:30]})
    qv = x[:30] + 0.1 * _vectors(30, 16, seed=3)
    out = scoring.score_blocks(qv, np.arange(30), labels.codes(qdf), "all", gi, 10, block=8)
    scores = exact_scores(qv, x)  # the scores' definition: float32 of the exact inner product
    np.testing.assert_allclose(scores, qv.astype(np.float64) @ x.T.astype(np.float64), rtol=0, atol=1e-6)
    m = retrieval_metrics(scores, ids[:30, None] == ids[None, :])
    np.testing.assert_array_equal(out.values["ap"], m.ap)
    # top-k: the index's answers, re-scored with the exact scores and in tie-rule order
    np.testing.assert_array_equal(out.top_scores, np.take_along_axis(scores, out.top_rows, 1))
    assert (np.diff(out.top_scores, axis=1) <= 0).all()
