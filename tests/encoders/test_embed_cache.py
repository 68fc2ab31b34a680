"""The embedding path: cache == fresh bit for bit, subset == slice, batch-size invariance, image modes."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from fpr.encoders import embed as E
from fpr.encoders.cache import EmbeddingCache
from fpr.encoders.preprocess import Preprocessing
from fpr.encoders.registry import EncoderSpec, load_encoder, register, unregister
from fpr.encoders.weights import WeightsSource
from fpr.errors import InputError
from tests.conftest import write_image


class TinyCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                       torch.nn.ReLU(), torch.nn.Conv2d(8, 16, 3, stride=2),
                                       torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())

    def forward(self, x):
        return self.net(x)


@pytest.fixture
def tiny_encoder():
    spec = EncoderSpec(id="test-tiny-cnn", family="test", dim=16,
                       preprocessing=Preprocessing(name="squash32-imagenet", size=32),
                       weights=WeightsSource(kind="none"), build=lambda w: TinyCNN())
    register(spec, replace=True)
    yield load_encoder("test-tiny-cnn", device="cpu")
    unregister("test-tiny-cnn")


@pytest.fixture
def images(tmp_path):
    return [str(write_image(tmp_path / f"img{i}.png", seed=i)) for i in range(40)]


def test_cached_equals_fresh_bit_for_bit(tiny_encoder, images, tmp_path):
    fresh = E.embed_paths(tiny_encoder, images, cache=None, workers=0).vectors
    cache = E.cache_for(tiny_encoder, root=tmp_path / "c")
    first = E.embed_paths(tiny_encoder, images, cache=cache, workers=0)
    assert first.n_computed == 40 and first.n_from_cache == 0
    again = E.embed_paths(tiny_encoder, images, cache=E.cache_for(tiny_encoder, root=tmp_path / "c"), workers=0)
    assert again.n_from_cache == 40 and again.n_computed == 0
    assert again.vectors.tobytes() == first.vectors.tobytes() == fresh.tobytes()


def test_subset_equals_slice_and_batch_size_invariance(tiny_encoder, images):
    whole = E.embed_paths(tiny_encoder, images, cache=None, batch_size=32, workers=0).vectors
    part = E.embed_paths(tiny_encoder, images[10:17], cache=None, batch_size=32, workers=0).vectors
    one = E.embed_paths(tiny_encoder, images, cache=None, batch_size=1, workers=0).vectors
    np.testing.assert_allclose(part, whole[10:17], atol=1e-5)
    np.testing.assert_allclose(one, whole, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(whole, axis=1), 1.0, atol=1e-5)
    assert whole.dtype == np.float32


def test_worker_processes_give_the_same_vectors(tiny_encoder, images):
    a = E.embed_paths(tiny_encoder, images, cache=None, workers=0).vectors
    b = E.embed_paths(tiny_encoder, images, cache=None, workers=2).vectors
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_incremental_cache_only_embeds_new_images(tiny_encoder, images, tmp_path):
    cache = E.cache_for(tiny_encoder, root=tmp_path / "c")
    E.embed_paths(tiny_encoder, images[:20], cache=cache, workers=0)
    before = E.EMBED_STATS["images_embedded"]
    res = E.embed_paths(tiny_encoder, images, cache=cache, workers=0)
    assert E.EMBED_STATS["images_embedded"] - before == 20
    assert res.n_from_cache == 20


def test_duplicate_content_is_embedded_once(tiny_encoder, tmp_path):
    a = write_image(tmp_path / "a.png", seed=1)
    b = tmp_path / "b.png"
    b.write_bytes(a.read_bytes())
    res = E.embed_paths(tiny_encoder, [a, b], cache=None, workers=0)
    assert res.n_computed == 1
    assert res.vectors[0].tobytes() == res.vectors[1].tobytes()


def test_cache_key_depends_on_preprocessing(tiny_encoder):
    spec2 = EncoderSpec(id="test-tiny-cnn", family="test", dim=16,
                        preprocessing=Preprocessing(name="squash48-imagenet", size=48),
                        weights=WeightsSource(kind="none"), build=lambda w: TinyCNN())
    from fpr.encoders.registry import embedding_key

    assert embedding_key(spec2, tiny_encoder.weights, device="cpu", precision="fp32") != tiny_encoder.cache_key


def test_cache_key_separates_device_class_and_precision(tiny_encoder):
    from fpr.encoders.registry import embedding_key

    spec, w = tiny_encoder.spec, tiny_encoder.weights
    assert (tiny_encoder.device_class, tiny_encoder.precision) == ("cpu", "fp32")
    assert tiny_encoder.cache_key == embedding_key(spec, w, device="cpu", precision="fp32")
    keys = {embedding_key(spec, w, device=d, precision=p) for d, p in
            [("cpu", "fp32"), ("cuda", "bf16"), ("cuda", "fp16"), ("cuda", "fp32"), ("mps", "fp32")]}
    assert len(keys) == 5
    prov = tiny_encoder.provenance
    assert prov == {"encoder": "test-tiny-cnn", "weights_checksum": "none", "preprocessing": spec.preprocessing.key(),
                    "device": "cpu", "precision": "fp32", "embedding_key": tiny_encoder.cache_key}
    meta = E.cache_for(tiny_encoder)._meta
    assert (meta["device"], meta["precision"]) == ("cpu", "fp32")


def test_damaged_cache_database_is_reported_set_aside_and_recomputed(tiny_encoder, images, tmp_path, capsys):
    from fpr import progress

    fresh = E.embed_paths(tiny_encoder, images[:5], cache=None, workers=0).vectors
    cache = E.cache_for(tiny_encoder, root=tmp_path / "c")
    E.embed_paths(tiny_encoder, images[:5], cache=cache, workers=0)
    cache.compact()
    cache.close()
    db = cache.dir / "vectors.sqlite"
    data = db.read_bytes()
    db.write_bytes(b"this is not a database" + data[22:])
    progress.set_enabled(True)
    try:
        again = E.embed_paths(tiny_encoder, images[:5], cache=E.cache_for(tiny_encoder, root=tmp_path / "c"),
                              workers=0)
        # a second reader does not see (nor report) it again
        assert len(EmbeddingCache(cache.key, 16, root=tmp_path / "c")) == 5
    finally:
        progress.set_enabled(False)
    err = capsys.readouterr().err
    assert again.n_computed == 5 and again.n_from_cache == 0
    assert again.vectors.tobytes() == fresh.tobytes()
    assert err.count("damaged embedding-cache database") == 1 and "vectors.sqlite" in err and "recomputed" in err
    assert db.with_name("vectors.sqlite.damaged").read_bytes()[:22] == b"this is not a database"


def test_damaged_cache_entry_is_reported_removed_and_recomputed(tmp_path, capsys):
    import sqlite3

    from fpr import progress

    cache = EmbeddingCache("k", 4, root=tmp_path)
    cache.add(["h0", "h1"], np.ones((2, 4), np.float32))
    cache.close()
    with sqlite3.connect(cache.dir / "vectors.sqlite") as con:
        con.execute("UPDATE vectors SET vec = ? WHERE hash = 'h1'", (b"\x00" * 7,))
    progress.set_enabled(True)
    try:
        got = EmbeddingCache("k", 4, root=tmp_path).get_many(["h0", "h1"])
    finally:
        progress.set_enabled(False)
    assert set(got) == {"h0"} and "damaged embedding-cache entry" in capsys.readouterr().err
    assert len(EmbeddingCache("k", 4, root=tmp_path)) == 1


@pytest.mark.parametrize("content", ["wrong_dim", "not_zip", "no_vectors"])
def test_any_damaged_legacy_shard_is_set_aside(tmp_path, content, capsys):
    from fpr import progress

    cache = EmbeddingCache("k", 4, root=tmp_path)
    cache.add(["h0"], np.ones((1, 4), np.float32))
    bad = cache.dir / "shard-bad.npz"
    if content == "wrong_dim":
        np.savez(bad, hashes=np.asarray(["h1"], dtype="S64"), vectors=np.ones((1, 3), np.float32))
    elif content == "no_vectors":
        np.savez(bad, hashes=np.asarray(["h1"], dtype="S64"))
    else:
        bad.write_bytes(b"not a zip")
    progress.set_enabled(True)
    try:
        fresh = EmbeddingCache("k", 4, root=tmp_path)
        assert set(fresh.get_many(["h0", "h1"])) == {"h0"}
    finally:
        progress.set_enabled(False)
    assert "shard-bad.npz" in capsys.readouterr().err
    assert (cache.dir / "shard-bad.npz.damaged").exists() and not bad.exists()


def test_legacy_shards_are_imported_bit_for_bit(tmp_path):
    vecs = np.random.default_rng(0).random((6, 4)).astype(np.float32)
    d = tmp_path / "k"
    d.mkdir()
    for i in range(0, 6, 2):  # the 0.1 layout: shard-*.npz with S64 hashes
        np.savez(d / f"shard-{i}.npz", hashes=np.asarray([f"h{i}", f"h{i + 1}"], dtype="S64"), vectors=vecs[i:i + 2])
    cache = EmbeddingCache("k", 4, root=tmp_path)
    got = cache.get_many([f"h{i}" for i in range(6)])
    assert [got[f"h{i}"].tobytes() for i in range(6)] == [v.tobytes() for v in vecs]
    assert not list(d.glob("shard-*.npz")) and len(cache) == 6


@pytest.mark.parametrize("mode", ["L", "P", "RGBA", "CMYK", "I;16", "LA"])
def test_any_pil_mode_embeds(tiny_encoder, tmp_path, mode):
    p = tmp_path / f"m.{'tif' if mode in ('CMYK', 'I;16') else 'png'}"
    arr = (np.random.default_rng(0).random((20, 20)) * 255).astype("uint8")
    if mode == "I;16":
        Image.fromarray(arr.astype(np.uint16) * 200).save(p)
    else:
        Image.fromarray(arr, "L").convert(mode).save(p)
    v = E.embed_paths(tiny_encoder, [p], cache=None, workers=0).vectors
    assert np.isfinite(v).all()


def test_exif_orientation_is_applied(tiny_encoder, tmp_path):
    arr = np.zeros((30, 60, 3), np.uint8)
    arr[:, :20] = 255
    upright = Image.fromarray(arr)
    upright.rotate(90, expand=True).save(tmp_path / "upright.jpg", quality=100)
    exif = Image.Exif()
    exif[0x0112] = 8  # "rotate 90 CW to display"
    upright.save(tmp_path / "tagged.jpg", exif=exif, quality=100)
    from fpr.images import load_rgb

    assert load_rgb(tmp_path / "tagged.jpg").size == (30, 60)


@pytest.mark.parametrize("make", ["missing", "empty", "truncated", "not_image"])
def test_bad_files_raise_one_line_or_skip(tiny_encoder, tmp_path, make):
    good = write_image(tmp_path / "good.png", seed=3)
    bad = tmp_path / "bad.png"
    if make == "empty":
        bad.write_bytes(b"")
    elif make == "truncated":
        data = write_image(tmp_path / "full.png", seed=4, size=64).read_bytes()
        bad.write_bytes(data[: len(data) // 2])
    elif make == "not_image":
        bad.write_text("hello")
    with pytest.raises(InputError) as exc:
        E.embed_paths(tiny_encoder, [good, bad], cache=None, workers=0)
    assert str(bad) in exc.value.one_line() and "\n" not in exc.value.one_line()
    res = E.embed_paths(tiny_encoder, [good, bad], cache=None, workers=0, on_error="skip")
    assert list(res.failed) == [1] and np.isfinite(res.vectors[0]).all() and np.isnan(res.vectors[1]).all()


def test_each_file_is_read_once_and_bytes_past_the_budget_are_reread(tiny_encoder, images, monkeypatch):
    reads = []
    real = E.read_bytes
    monkeypatch.setattr(E, "read_bytes", lambda p: reads.append(str(p)) or real(p))
    fresh = E.embed_paths(tiny_encoder, images[:6], cache=None, workers=0)
    assert sorted(reads) == sorted(images[:6])  # hashed and decoded from one read
    reads.clear()
    monkeypatch.setattr(E, "KEEP_BYTES", 0)  # nothing kept: the decoder reads the files itself
    again = E.embed_paths(tiny_encoder, images[:6], cache=None, workers=0)
    assert sorted(reads) == sorted(images[:6] * 2)
    assert again.vectors.tobytes() == fresh.vectors.tobytes()
