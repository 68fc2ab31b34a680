"""Background removal, a named preprocessing step (the paper's section 5.2 / Table 14).

A protocol's ``background`` is ``keep`` (the default) or ``remove:<segmenter>``: the
segmenter's foreground mask keeps the subject and every other pixel becomes white
(``FILL``) before resizing. Because it is a field of
:class:`~fpr.encoders.preprocess.Preprocessing`, it is part of the protocol key, so of
every embedding-cache key and index card; ``keep`` leaves keys exactly as before.

Segmenters (a registry, :func:`register_segmenter`):

- ``grabcut`` (the default; OpenCV, no weights, always runs): GrabCut initialised with
  the image minus a 4% border as "probably foreground" (generated and gallery images
  frame their subject), 5 iterations, on the image resized to a 256 px longer side (the
  mask is scaled back), OpenCV's random generator seeded so the mask is reproducible.
- ``deeplabv3``: torchvision's DeepLabV3-MobileNetV3-Large (COCO/VOC classes); the
  foreground is every pixel not labelled background. Its weights must already be in the
  torch hub cache (``$TORCH_HOME/hub/checkpoints``); nothing is downloaded.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

from fpr.cache import load_once
from fpr.errors import InputError, NotFoundError

KEEP = "keep"
DEFAULT_SEGMENTER = "grabcut"
FILL = (255, 255, 255)
WORK_SIDE = 256


@dataclass(frozen=True)
class Segmenter:
    name: str
    description: str
    mask: Callable[[Image.Image], np.ndarray]  # RGB image -> bool (H, W) foreground


_SEGMENTERS: dict[str, Segmenter] = {}


def register_segmenter(seg: Segmenter, *, replace_existing: bool = False) -> Segmenter:
    if seg.name in _SEGMENTERS and not replace_existing:
        raise ValueError(f"segmenter {seg.name!r} already registered")
    _SEGMENTERS[seg.name] = seg
    return seg


def segmenters() -> dict[str, Segmenter]:
    return dict(sorted(_SEGMENTERS.items()))


def parse_background(value: str | None) -> str:
    """``keep`` | ``remove`` | ``remove:<segmenter>`` -> canonical ``keep`` or ``remove:<segmenter>``."""
    v = (value or KEEP).strip().lower()
    if v == KEEP:
        return KEEP
    if v == "remove":
        v = f"remove:{DEFAULT_SEGMENTER}"
    if not v.startswith("remove:") or v.split(":", 1)[1] not in _SEGMENTERS:
        raise InputError(f"unknown background option '{value}'",
                         hint=f"use keep, remove, or remove:<segmenter> with one of {', '.join(_SEGMENTERS)}")
    return v


def _small(img: Image.Image, *, enlarge: bool = False) -> Image.Image:
    """The image with its longer side at most ``WORK_SIDE`` (exactly, when ``enlarge``)."""
    w, h = img.size
    s = WORK_SIDE / max(w, h)
    if s < 1 or (enlarge and s > 1):
        return img.resize((max(1, round(w * s)), max(1, round(h * s))), Image.BILINEAR)
    return img


def _upscale(mask: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    if mask.shape[::-1] == size:
        return mask
    return np.asarray(Image.fromarray(mask.astype(np.uint8) * 255).resize(size, Image.NEAREST)) > 127


def grabcut_mask(img: Image.Image) -> np.ndarray:
    try:
        import cv2
    except ImportError:
        raise NotFoundError("background removal with grabcut needs OpenCV",
                            hint="pip install 'fpr[vistar]' (opencv-python-headless)") from None
    # GrabCut's smoothness term is tuned in pixels: on small images (96 px world renders) it cuts the
    # subject into fragments, so small images are enlarged to the working side first
    # (mean IoU with the world's true masks 0.30 -> 0.63: benchmarks/segmenter_quality.py).
    small = _small(img.convert("RGB"), enlarge=True)
    arr = np.ascontiguousarray(np.asarray(small)[:, :, ::-1])  # BGR
    h, w = arr.shape[:2]
    mx, my = max(1, round(0.04 * w)), max(1, round(0.04 * h))
    if w - 2 * mx < 2 or h - 2 * my < 2:
        return np.ones((img.size[1], img.size[0]), bool)
    mask = np.zeros((h, w), np.uint8)
    cv2.setRNGSeed(0)
    cv2.grabCut(arr, mask, (mx, my, w - 2 * mx, h - 2 * my), np.zeros((1, 65), np.float64),
                np.zeros((1, 65), np.float64), 5, cv2.GC_INIT_WITH_RECT)
    fg = (mask == cv2.GC_FGD) | (mask == cv2.GC_PR_FGD)
    return _upscale(fg, img.size)


def deeplab_model():
    """DeepLabV3-MobileNetV3-Large with weights from the torch hub cache only, loaded once per process."""
    return load_once("deeplab segmenter", "deeplabv3-mobilenet-v3-large", _load_deeplab, keep=1)


def _load_deeplab():
    import torch
    from torchvision.models.segmentation import DeepLabV3_MobileNet_V3_Large_Weights, deeplabv3_mobilenet_v3_large

    w = DeepLabV3_MobileNet_V3_Large_Weights.DEFAULT
    path = Path(torch.hub.get_dir()) / "checkpoints" / w.url.rsplit("/", 1)[-1]
    if not path.is_file():
        raise NotFoundError(f"the deeplabv3 segmenter's weights are not in the torch hub cache ({path})",
                            hint="copy the file there (fpr downloads nothing), or use --background remove:grabcut")
    model = deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=21, aux_loss=True)
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return model.eval()


def deeplab_mask(img: Image.Image) -> np.ndarray:
    import torch

    model = deeplab_model()
    small = _small(img.convert("RGB"))
    x = torch.from_numpy(np.asarray(small, np.float32) / 255.0).permute(2, 0, 1)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    with torch.inference_mode():
        out = model(((x - mean) / std)[None])["out"][0]
    return _upscale((out.argmax(0) != 0).numpy(), img.size)


register_segmenter(Segmenter("grabcut", "OpenCV GrabCut from a border rectangle; no weights", grabcut_mask))
register_segmenter(Segmenter("deeplabv3", "torchvision DeepLabV3-MobileNetV3-Large, offline weights", deeplab_mask))


def remove_background(img: Image.Image, background: str) -> Image.Image:
    """The image with everything outside the segmenter's foreground set to ``FILL``."""
    bg = parse_background(background)
    if bg == KEEP:
        return img
    rgb = img.convert("RGB")
    fg = _SEGMENTERS[bg.split(":", 1)[1]].mask(rgb)
    if not fg.any():  # nothing found: keep the image rather than embed a blank one
        return rgb
    out = np.asarray(rgb).copy()
    out[~fg] = FILL
    return Image.fromarray(out)


def with_background(encoder, background: str):
    """The encoder with its protocol's background step set (changing its cache key and card)."""
    bg = parse_background(background)
    if bg != encoder.spec.preprocessing.background:
        encoder.spec = replace(encoder.spec, preprocessing=replace(encoder.spec.preprocessing, background=bg))
    return encoder


def background_of_key(preprocessing_key: str) -> str:
    """The background step recorded in a protocol key (an index card's ``preprocessing``)."""
    import json

    try:
        return json.loads(preprocessing_key).get("background", KEEP)
    except ValueError:
        return KEEP
