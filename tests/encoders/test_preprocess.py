"""Preprocessing protocols reproduce the reference transforms exactly (torchvision's PIL path)."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from torchvision import transforms as T

from fpr.encoders.preprocess import IMAGENET_MEAN, IMAGENET_STD, OPENAI_MEAN, OPENAI_STD, Preprocessing


@pytest.mark.parametrize("size,crop,interp,mean,std", [
    (224, 224, "bicubic", OPENAI_MEAN, OPENAI_STD),  # CLIP
    (256, 224, "bicubic", IMAGENET_MEAN, IMAGENET_STD),  # DINOv2 protocol
])
@pytest.mark.parametrize("wh", [(300, 517), (517, 300), (259, 900), (224, 224), (1000, 333)])
def test_shortest_side_resize_and_centre_crop_match_torchvision(size, crop, interp, mean, std, wh):
    p = Preprocessing(name="t", size=size, resize_mode="shortest", crop=crop, interpolation=interp, mean=mean, std=std)
    mode = T.InterpolationMode.BICUBIC if interp == "bicubic" else T.InterpolationMode.BILINEAR
    ref = T.Compose([T.Resize(size, interpolation=mode), T.CenterCrop(crop), T.ToTensor(), T.Normalize(mean, std)])
    img = Image.fromarray(np.random.default_rng(0).integers(0, 255, (wh[1], wh[0], 3), dtype=np.uint8))
    assert float((p(img) - ref(img)).abs().max()) == 0.0


def test_squash_matches_torchvision_resize_to_square():
    p = Preprocessing(name="s", size=64)
    ref = T.Compose([T.Resize((64, 64)), T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    img = Image.fromarray(np.random.default_rng(1).integers(0, 255, (90, 40, 3), dtype=np.uint8))
    assert float((p(img) - ref(img)).abs().max()) == 0.0


def test_key_changes_with_any_field():
    a = Preprocessing(name="a", size=224)
    assert a.key() != Preprocessing(name="a", size=224, interpolation="bicubic").key()
    assert a.key() != Preprocessing(name="a", size=225).key()
