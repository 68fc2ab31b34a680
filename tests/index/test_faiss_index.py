from __future__ import annotations

import json

import numpy as np
import pytest

from fpr.errors import ConflictError, InputError
from fpr.index import faiss_index as F


def make(n=50, d=8, seed=0, name="ix"):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    card = F.IndexCard(name=name, gallery="g", gallery_fingerprint="sha256:abc", encoder="enc",
                       weights_checksum="sha256:w", preprocessing="{}", dim=d, n_items=0, n_references=0)
    refs = x[:3] * 1.0
    return F.build(x, np.arange(100, 100 + n), refs, np.array([1, 2, 3]), card), x


def test_search_equals_brute_force():
    gi, x = make()
    q = np.random.default_rng(1).normal(size=(7, 8)).astype(np.float32)
    scores, ids = gi.search(q, 5)
    brute = q @ x.T
    order = np.argsort(-brute, axis=1)[:, :5]
    np.testing.assert_array_equal(ids, order + 100)
    np.testing.assert_allclose(scores, np.take_along_axis(brute, order, 1), atol=1e-6)
    np.testing.assert_allclose(gi.all_scores(q), brute, atol=1e-6)


def test_save_load_roundtrip_and_card(tmp_path):
    gi, x = make()
    F.save(gi, tmp_path / "ix")
    card = json.loads((tmp_path / "ix" / "card.json").read_text())
    assert card["encoder"] == "enc" and card["dim"] == 8 and card["n_items"] == 50 and "faiss" in card["versions"]
    back = F.load(tmp_path / "ix", encoder="enc", gallery_fingerprint="sha256:abc")
    np.testing.assert_array_equal(back.vectors(), x)
    np.testing.assert_array_equal(back.item_ids, gi.item_ids)
    np.testing.assert_array_equal(back.ref_vectors, gi.ref_vectors)


@pytest.mark.parametrize("kw,msg", [({"encoder": "other"}, "built with encoder 'enc'"),
                                    ({"gallery_fingerprint": "sha256:zzz"}, "no longer matches gallery"),
                                    ({"weights_checksum": "sha256:v"}, "weights changed")])
def test_loading_with_another_encoder_or_gallery_is_an_error(tmp_path, kw, msg):
    gi, _ = make()
    F.save(gi, tmp_path / "ix")
    with pytest.raises(ConflictError, match=msg):
        F.load(tmp_path / "ix", **kw)


def test_query_dim_mismatch_is_an_error():
    gi, _ = make()
    with pytest.raises(ConflictError, match="dim"):
        gi.search(np.zeros((1, 4), np.float32), 3)


def test_failed_save_keeps_the_previous_index(tmp_path, monkeypatch):
    gi, x = make()
    F.save(gi, tmp_path / "ix")
    gi2, _ = make(seed=5)

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(F.np, "save", boom)
    with pytest.raises(InputError, match="disk full"):  # one line naming the folder, not a traceback
        F.save(gi2, tmp_path / "ix")
    monkeypatch.undo()
    back = F.load(tmp_path / "ix")
    np.testing.assert_array_equal(back.vectors(), x)
    assert [p.name for p in tmp_path.iterdir()] == ["ix"]
