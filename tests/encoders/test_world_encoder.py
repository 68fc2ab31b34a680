"""The shipped encoder (fpr-world-v3; v1 and v2 stay registered): registered, loads from the package, embeds (dim, unit norm), documented."""
from __future__ import annotations

import numpy as np
import torch

from fpr.encoders import registry
from fpr.encoders.world import WORLD_ENCODER_ID, shipped_card


def test_shipped_encoder_is_registered_and_available():
    spec = registry.get_spec(WORLD_ENCODER_ID)
    assert spec.family == "builtin-cnn" and spec.weights.kind == "package"
    row = registry.describe(spec)
    assert row["status"] == "available" and row["found_in"] == "package"


def test_shipped_card_documents_its_reproduction():
    card = shipped_card()
    assert card is not None and card["id"] == WORLD_ENCODER_ID
    assert card["command"].startswith("fpr encoders train") and f"--id {WORLD_ENCODER_ID}" in card["command"]
    assert card["seed"] == 0 and card["training_data"]["name"] == "world"
    assert card["metrics"]["val_map"] is not None


def test_shipped_encoder_embeds_unit_vectors():
    from fpr.galleries.world import render_identity

    enc = registry.load_encoder(WORLD_ENCODER_ID, device="cpu")
    imgs = [render_identity(sp, 7, k, size=96) for sp in ("zebra", "leopard", "giraffe") for k in range(2)]
    x = torch.stack([enc.preprocessing(im) for im in imgs])
    v = enc.embed_batch(x)
    assert v.shape == (6, enc.spec.dim) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    # deterministic: same input, same output
    np.testing.assert_array_equal(v, enc.embed_batch(x))


def test_shipped_encoder_oracle_map_on_unseen_identities():
    from fpr.encoders.train import validate
    from fpr.eval.pipeline import leave_one_out_map
    from fpr.galleries.training import WorldSource

    enc = registry.load_encoder(WORLD_ENCODER_ID, device="cpu")
    src = WorldSource(identities=2, val_identities=10, val_images=8)
    res = validate(enc.model, src.validation(), enc.preprocessing, torch.device("cpu"), leave_one_out_map)
    assert res["*"] >= 0.8, res


def test_older_versions_stay_loadable_next_to_v3():
    from fpr.cli.demo import demo_cmd
    from fpr.workflows.demo import DEMO_ENCODER
    from fpr.encoders.world import SHIPPED_IDS
    from fpr.encoders.world import shipped_card as card_of

    assert SHIPPED_IDS == ("fpr-world-v1", "fpr-world-v2", "fpr-world-v3", "fpr-general-v1", "fpr-general-v2")
    assert WORLD_ENCODER_ID == "fpr-world-v3"
    default = next(p.default for p in demo_cmd.params if p.name == "encoder")
    assert DEMO_ENCODER == default == WORLD_ENCODER_ID
    assert card_of("fpr-world-v1")["training_data"]["world_version"] == "1"
    assert card_of("fpr-world-v2")["training_data"]["world_version"] == "2"
    v3 = card_of("fpr-world-v3")
    assert v3["training_data"]["world_version"] == "2" and v3["training_data"]["twins"] == 0.25
    assert v3["training_data"]["n_classes"] == 2 * 3 * 800 and v3["metrics"]["val_map"] >= 0.98
    assert v3["command"].startswith("fpr encoders train ") and "--twins 0.25" in v3["command"]
    enc = registry.load_encoder("fpr-world-v1", device="cpu")
    assert enc.spec.dim == 128
