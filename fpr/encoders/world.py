"""``fpr-world-v1``: the encoder trained on the built-in world, shipped inside the package.

It lets the whole flow (``fpr demo``) run on a fresh machine with no download and
no GPU. Its card (``weights/fpr-world-v1.json``) records the architecture,
preprocessing, training data, metrics and the exact command that reproduces it;
``docs/world.md`` repeats that command.
"""
from __future__ import annotations

import json
from importlib import resources

from fpr.encoders.registry import register
from fpr.encoders.weights import WeightsSource

WORLD_ENCODER_ID = "fpr-world-v1"
PACKAGE_WEIGHTS = f"encoders/weights/{WORLD_ENCODER_ID}.safetensors"
PACKAGE_CARD = f"encoders/weights/{WORLD_ENCODER_ID}.json"


def shipped_card() -> dict | None:
    path = resources.files("fpr").joinpath(PACKAGE_CARD)
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def _register() -> None:
    card = shipped_card()
    if card is None:  # a source tree before the weights were trained
        return
    from fpr.encoders.trained import spec_from_card

    card = dict(card, family="builtin-cnn")
    register(spec_from_card(card, WeightsSource(kind="package", package_path=PACKAGE_WEIGHTS,
                                                files=(f"{WORLD_ENCODER_ID}.safetensors",)),
                            tags=("builtin", "world")), replace=True)


_register()
