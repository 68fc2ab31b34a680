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


def _damage(folder, what):
    card = json.loads((folder / "card.json").read_text())
    if what == "faiss_garbage":
        (folder / "index.faiss").write_bytes(b"definitely not faiss")
    elif what == "faiss_truncated":
        data = (folder / "index.faiss").read_bytes()
        (folder / "index.faiss").write_bytes(data[: len(data) // 2])
    elif what == "faiss_missing":
        (folder / "index.faiss").unlink()
    elif what == "card_bad_json":
        (folder / "card.json").write_text('{"name": "ix", ')
    elif what == "card_not_object":
        (folder / "card.json").write_text("[1, 2]")
    elif what == "card_missing_key":
        card.pop("dim")
        (folder / "card.json").write_text(json.dumps(card))
    elif what == "card_unknown_key":
        card["dimm"] = 8
        (folder / "card.json").write_text(json.dumps(card))
    elif what == "card_wrong_type":
        card["dim"] = "eight"
        (folder / "card.json").write_text(json.dumps(card))
    elif what == "item_ids_corrupt":
        (folder / "item_ids.npy").write_bytes(b"\x93NUMPY garbage")
    elif what == "item_ids_short":
        np.save(folder / "item_ids.npy", np.arange(49))
    elif what == "item_ids_floats":
        np.save(folder / "item_ids.npy", np.zeros(50))
    elif what == "references_shape":
        np.save(folder / "references.npy", np.zeros((3, 7), np.float32))
    elif what == "reference_ids_long":
        np.save(folder / "reference_ids.npy", np.arange(4))
    elif what == "reference_ids_pickle":
        np.save(folder / "reference_ids.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)


DAMAGES = {"faiss_garbage": "index.faiss", "faiss_truncated": "index.faiss", "faiss_missing": "index.faiss",
           "card_bad_json": "card.json", "card_not_object": "card.json", "card_missing_key": "card.json",
           "card_unknown_key": "card.json", "card_wrong_type": "card.json", "item_ids_corrupt": "item_ids.npy",
           "item_ids_short": "item_ids.npy", "item_ids_floats": "item_ids.npy",
           "references_shape": "references.npy", "reference_ids_long": "reference_ids.npy",
           "reference_ids_pickle": "reference_ids.npy"}


@pytest.mark.parametrize("what", list(DAMAGES))
def test_damaged_index_files_are_one_conflict_line(tmp_path, what):
    gi, _ = make()
    F.save(gi, tmp_path / "ix")
    _damage(tmp_path / "ix", what)
    with pytest.raises(ConflictError) as err:
        F.load(tmp_path / "ix")
    msg = err.value.one_line()
    assert msg.startswith(f"index 'ix' is damaged ({tmp_path / 'ix' / DAMAGES[what]}): ")
    assert "rebuild it with 'fpr index build --gallery" in msg and "--name ix --overwrite'" in msg
    assert "\n" not in msg
    if not what.startswith("card"):
        assert "--gallery g --encoder enc" in msg  # the card is readable: the hint is the exact command


def test_cards_of_fpr_0_1_0_load_with_unknown_provenance(tmp_path):
    gi, x = make()
    F.save(gi, tmp_path / "ix")
    card = json.loads((tmp_path / "ix" / "card.json").read_text())
    for k in ("device", "precision", "embedding_key"):
        card.pop(k)
    (tmp_path / "ix" / "card.json").write_text(json.dumps(card))
    back = F.load(tmp_path / "ix")
    assert (back.card.device, back.card.precision, back.card.embedding_key) == ("unknown",) * 3
    np.testing.assert_array_equal(back.vectors(), x)


def test_the_0_1_0_fixture_index_loads(tmp_path):
    import tarfile
    from pathlib import Path

    with tarfile.open(Path(__file__).parents[1] / "fixtures" / "workspace-0.1.0.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    gi = F.load(tmp_path / "ws" / "indices" / "pets-pixels-16")
    assert gi.card.encoder == "pixels-16" and gi.card.device == "unknown" and gi.ntotal == gi.card.n_items > 0


def test_new_cards_carry_device_precision_and_embedding_key(tmp_path):
    gi, _ = make()
    gi.card.device, gi.card.precision, gi.card.embedding_key = "cpu", "fp32", "abc"
    F.save(gi, tmp_path / "ix")
    card = json.loads((tmp_path / "ix" / "card.json").read_text())
    assert (card["device"], card["precision"], card["embedding_key"]) == ("cpu", "fp32", "abc")


def test_a_damaged_card_in_a_version_folder_is_named_by_its_index(tmp_path):
    gi, _ = make(name="pets")
    folder = tmp_path / "pets" / "v20261123T025713-5cdad1ff"
    F.save(gi, folder)
    (folder / "card.json").write_text("{")
    with pytest.raises(ConflictError, match=r"^index 'pets' is damaged .*--name pets --overwrite'$"):
        F.load(folder)
    with pytest.raises(ConflictError, match="index 'given' is damaged"):
        F.load(folder, name="given")
