"""Raw (un-normalised) features: what the official k-means clusters; never stored in the embedding cache."""
from __future__ import annotations

import numpy as np

from fpr.encoders.embed import EMBED_STATS, embed_paths
from fpr.encoders.registry import load_encoder
from tests.conftest import write_image


def test_raw_features_bypass_the_cache(tmp_path):
    enc = load_encoder("pixels-16")
    paths = [str(write_image(tmp_path / f"{k}.png", seed=k, size=24)) for k in range(3)]
    raw = embed_paths(enc, paths, normalize=False).vectors
    norms = np.linalg.norm(raw, axis=1)
    assert not np.allclose(norms, 1.0)
    before = EMBED_STATS["images_embedded"]
    unit = embed_paths(enc, paths).vectors  # the cache held nothing raw: computed afresh, normalised
    assert EMBED_STATS["images_embedded"] == before + 3
    np.testing.assert_allclose(unit, raw / norms[:, None], rtol=1e-5, atol=1e-6)
    again = embed_paths(enc, paths, normalize=False)  # raw never comes from the (normalised) cache
    assert again.n_from_cache == 0 and EMBED_STATS["images_embedded"] == before + 6
    np.testing.assert_allclose(again.vectors, raw)
