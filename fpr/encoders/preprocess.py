"""Named preprocessing protocols.

A protocol fixes everything between the decoded RGB image and the tensor the
network sees. Its :meth:`Preprocessing.key` is part of every embedding-cache key
and of every index card, so two embeddings are only ever compared when they were
made the same way (the clean-fid lesson: preprocessing is part of the metric).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import torch
from PIL import Image

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)

_INTERPOLATIONS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "nearest": Image.NEAREST}


@dataclass(frozen=True)
class Preprocessing:
    """Resize (``squash`` to size x size, or ``shortest`` side to size), optional centre crop, normalise."""

    name: str
    size: int
    resize_mode: str = "squash"  # "squash" | "shortest"
    crop: int | None = None
    interpolation: str = "bilinear"
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD

    def __post_init__(self) -> None:
        if self.resize_mode not in ("squash", "shortest"):
            raise ValueError(f"resize_mode must be 'squash' or 'shortest', not {self.resize_mode!r}")
        if self.interpolation not in _INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {sorted(_INTERPOLATIONS)}")

    @property
    def output_size(self) -> int:
        return self.crop or self.size

    def key(self) -> str:
        """Canonical text of the whole protocol (not just its name)."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    def __call__(self, image: Image.Image) -> torch.Tensor:
        return self.to_tensor(self.resize_and_crop(image))

    def resize_and_crop(self, image: Image.Image) -> Image.Image:
        resample = _INTERPOLATIONS[self.interpolation]
        if self.resize_mode == "squash":
            image = image.resize((self.size, self.size), resample)
        else:
            w, h = image.size
            scale = self.size / min(w, h)
            new = (max(self.size, round(w * scale)), max(self.size, round(h * scale)))
            image = image.resize(new, resample)
        if self.crop:
            w, h = image.size
            left, top = (w - self.crop) // 2, (h - self.crop) // 2
            image = image.crop((left, top, left + self.crop, top + self.crop))
        return image

    def to_tensor(self, image: Image.Image) -> torch.Tensor:
        import numpy as np

        arr = np.asarray(image, dtype=np.float32) / 255.0
        t = torch.from_numpy(arr).permute(2, 0, 1).contiguous()
        mean = torch.tensor(self.mean, dtype=torch.float32).view(3, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32).view(3, 1, 1)
        return (t - mean) / std
