"""The encoders trained on the built-in world, shipped inside the package.

``fpr-world-v3`` (the default, :data:`WORLD_ENCODER_ID`) is trained on world
version 2, whose generations take new views (pose, size, position, mirror,
lighting), with a *twin* class per identity (a quarter of its markings redrawn)
so that it ranks partly changed markings below exact ones; ``fpr-world-v2``
(the same world, no twins, a smaller run on a CPU) and ``fpr-world-v1`` (world
version 1, reference-like poses) stay loadable so older runs and indices can be
reproduced. They let the whole flow
(``fpr demo``) run on a fresh machine with no download and no GPU. Each card
(``weights/<id>.json``) records the architecture, preprocessing, training data,
metrics and the exact command that reproduces it; ``docs/world.md`` repeats it.
"""
from __future__ import annotations

import json
from importlib import resources

from fpr.encoders.registry import register
from fpr.encoders.weights import WeightsSource

WORLD_ENCODER_ID = "fpr-world-v3"
# fpr-general-v2: the general-purpose stand-in (for CLIP/DINOv2, not them) of the paper's 2x2: an attribute network,
# a declared layout share (pixels-16) and a declared identity share (fpr-world-v3); fpr-general-v1 (no layout share)
# stays loadable. See fpr.encoders.blend and docs/world.md
GENERAL_ENCODER_ID = "fpr-general-v2"
SHIPPED_IDS = ("fpr-world-v1", "fpr-world-v2", "fpr-world-v3", "fpr-general-v1", GENERAL_ENCODER_ID)
PACKAGE_WEIGHTS = f"encoders/weights/{WORLD_ENCODER_ID}.safetensors"
PACKAGE_CARD = f"encoders/weights/{WORLD_ENCODER_ID}.json"
# SHA-256 of the shipped weights files, as committed (sha256sum fpr/encoders/weights/*.safetensors); a retrained
# file must update its line here, or 'fpr encoders list' reports it as 'mismatch'
SHIPPED_SHA256 = {
    "fpr-world-v1": "8f97e54afe3b323ced2b559940e6721bf3fe0433f580fa0768740aa7d1f364d6",
    "fpr-world-v2": "798e368c2c6333dc89ae49f3e5600a85453b48681caab4bbe7b72335600ad207",
    "fpr-world-v3": "0ae44860848b1a55e37a1eb6b6ff0f58ab0afae17d48de26e3d75e4ea493d930",
    "fpr-general-v1": "c6f69ea73401ca9f170cda032352a5753670ced214cd859bc2ec85420eae4214",
    "fpr-general-v2": "1b3352ad5b9906b9e6552d9f03c8ba9c06807b901aef2b0171d6fae6be69d9c0",
}


def shipped_card(encoder_id: str = WORLD_ENCODER_ID) -> dict | None:
    path = resources.files("fpr").joinpath(f"encoders/weights/{encoder_id}.json")
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def _register() -> None:
    from fpr.encoders.trained import spec_from_card

    for encoder_id in SHIPPED_IDS:
        card = shipped_card(encoder_id)
        if card is None:  # a source tree before the weights were trained
            continue
        card = dict(card, family="builtin-cnn")
        register(spec_from_card(card, WeightsSource(kind="package",
                                                    package_path=f"encoders/weights/{encoder_id}.safetensors",
                                                    files=(f"{encoder_id}.safetensors",),
                                                    published_sha256=((f"{encoder_id}.safetensors",
                                                                       SHIPPED_SHA256[encoder_id]),),
                                                    published_from="the fpr package"),
                                tags=("builtin", "world")), replace=True)


_register()
