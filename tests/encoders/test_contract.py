"""Contract over the encoder registry: every encoder that needs no download embeds two fixed images to
golden values (L2-normalised, its declared dim), so a change to a model, its weights or its protocol
shows as a changed number, not only as a changed shape.

Regenerate the golden file only on purpose: ``FPR_WRITE_GOLDEN=1 pytest tests/encoders/test_contract.py``."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fpr.encoders.embed import embed_paths
from fpr.encoders.registry import all_specs, load_encoder

GOLDEN = Path(__file__).parent / "golden" / "embeddings.json"
OFFLINE_KINDS = ("none", "package")


def _images(tmp: Path) -> list[str]:
    """Two fixed images: a colour gradient and seeded stripes (PNG, exact pixels)."""
    y, x = np.mgrid[0:96, 0:96]
    grad = np.stack([x * 2.6, y * 2.6, (x + y) * 1.3], axis=-1).astype(np.uint8)
    rng = np.random.default_rng(7)
    stripes = np.where(((x + 3 * y) // 7) % 2 == 0, 30, 220)[..., None] + rng.integers(0, 25, (96, 96, 3))
    paths = []
    for name, arr in (("grad.png", grad), ("stripes.png", np.clip(stripes, 0, 255).astype(np.uint8))):
        Image.fromarray(arr, "RGB").save(tmp / name)
        paths.append(str(tmp / name))
    return paths


def _offline_ids() -> list[str]:
    return sorted(i for i, s in all_specs().items() if s.weights.kind in OFFLINE_KINDS)


def test_every_offline_encoder_matches_its_golden_embedding(tmp_path):
    paths = _images(tmp_path)
    got = {}
    for enc_id in _offline_ids():
        enc = load_encoder(enc_id, device="cpu")
        vecs = embed_paths(enc, paths, cache=False).vectors
        assert vecs.shape == (2, enc.spec.dim) and vecs.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
        got[enc_id] = {"dim": int(enc.spec.dim), "head": np.round(vecs[:, :8].astype(np.float64), 6).tolist(),
                       "cosine": round(float(vecs[0] @ vecs[1]), 6)}
    if os.environ.get("FPR_WRITE_GOLDEN"):
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert sorted(got) == sorted(want), "an offline encoder was added or removed: regenerate on purpose"
    for enc_id, g in got.items():
        w = want[enc_id]
        assert g["dim"] == w["dim"], enc_id
        # 1e-5: the same weights on another CPU kind or BLAS may differ in the last bits of a float32 forward
        np.testing.assert_allclose(g["head"], w["head"], atol=1e-5, err_msg=enc_id)
        assert abs(g["cosine"] - w["cosine"]) < 1e-5, enc_id


@pytest.mark.parametrize("enc_id", ["pixels-16"])
def test_pixels_16_is_its_definition(enc_id, tmp_path):
    """An independent computation: the 16x16 area-mean thumbnail of the protocol's input, mean-centred."""
    paths = _images(tmp_path)
    enc = load_encoder(enc_id, device="cpu")
    vec = embed_paths(enc, paths[:1], cache=False).vectors[0]
    arr = np.asarray(Image.open(paths[0]).convert("RGB").resize((64, 64), Image.BILINEAR), dtype=np.float64)
    x = (arr / 255.0 - 0.5) / 0.5
    thumb = x.reshape(16, 4, 16, 4, 3).mean(axis=(1, 3)).transpose(2, 0, 1).reshape(-1)
    thumb -= thumb.mean()
    np.testing.assert_allclose(vec, thumb / np.linalg.norm(thumb), atol=2e-3)
