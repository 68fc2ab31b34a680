"""Named preprocessing protocols.

A protocol fixes everything between the decoded RGB image and the tensor the
network sees. Its :meth:`Preprocessing.key` is part of every embedding-cache key
and of every index card, so two embeddings are only ever compared when they were
made the same way (the clean-fid lesson: preprocessing is part of the metric).
"""
from __future__ import annotations

import functools
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
    background: str = "keep"  # "keep" | "remove:<segmenter>" (fpr.encoders.background), applied before resizing

    def __post_init__(self) -> None:
        if self.resize_mode not in ("squash", "shortest"):
            raise ValueError(f"resize_mode must be 'squash' or 'shortest', not {self.resize_mode!r}")
        if self.interpolation not in _INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {sorted(_INTERPOLATIONS)}")

    @property
    def output_size(self) -> int:
        return self.crop or self.size

    def key(self) -> str:
        """Canonical text of the whole protocol (not just its name); ``background: keep`` is left out, so
        keys made before the field existed stay valid."""
        d = asdict(self)
        if d["background"] == "keep":
            del d["background"]
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    def __call__(self, image: Image.Image) -> torch.Tensor:
        return self.to_tensor(self.resized(image))

    def resized(self, image: Image.Image) -> Image.Image:
        """Everything before normalisation: the background step, then resize and crop."""
        if self.background != "keep":
            from fpr.encoders.background import remove_background

            image = remove_background(image, self.background)
        return self.resize_and_crop(image)

    def pixels(self, image: Image.Image) -> torch.Tensor:
        """The protocol's pixels before normalisation: uint8 (H, W, 3), a quarter of the float tensor's
        bytes. :meth:`normalize` turns a batch of them into exactly what ``self(image)`` gives."""
        import numpy as np

        return torch.from_numpy(np.array(self.resized(image), dtype=np.uint8))

    def normalize(self, pixels: torch.Tensor) -> torch.Tensor:
        """uint8 (B, H, W, 3) pixels -> float32 (B, 3, H, W), on the pixels' device, bit-identical to
        :meth:`to_tensor` image by image. On a CPU: the same float32 operations, batched (each value's
        result depends on that value alone). Elsewhere each value is looked up in a 3 x 256 table that
        :meth:`to_tensor` computed on the CPU, so no device's arithmetic can round differently."""
        if pixels.device.type == "cpu":
            x = pixels.permute(0, 3, 1, 2).to(torch.float32, memory_format=torch.contiguous_format)
            x.div_(255.0)
            x.sub_(torch.tensor(self.mean, dtype=torch.float32).view(1, 3, 1, 1))
            return x.div_(torch.tensor(self.std, dtype=torch.float32).view(1, 3, 1, 1))
        lut = _lookup_table(self.mean, self.std, str(pixels.device))
        offsets = torch.arange(3, device=pixels.device).view(1, 3, 1, 1) * 256
        return torch.take(lut, pixels.permute(0, 3, 1, 2).long() + offsets)

    def resize_and_crop(self, image: Image.Image) -> Image.Image:
        resample = _INTERPOLATIONS[self.interpolation]
        if self.resize_mode == "squash":
            image = image.resize((self.size, self.size), resample)
        else:
            # Same arithmetic as torchvision's Resize(int): the long side is truncated, not rounded.
            w, h = image.size
            if w <= h:
                new = (self.size, int(self.size * h / w))
            else:
                new = (int(self.size * w / h), self.size)
            image = image.resize(new, resample)
        if self.crop:
            w, h = image.size
            left, top = int(round((w - self.crop) / 2.0)), int(round((h - self.crop) / 2.0))  # torchvision's
            image = image.crop((left, top, left + self.crop, top + self.crop))
        return image

    def to_tensor(self, image: Image.Image) -> torch.Tensor:
        import numpy as np

        arr = np.asarray(image, dtype=np.float32) / 255.0
        t = torch.from_numpy(arr).permute(2, 0, 1).contiguous()
        mean = torch.tensor(self.mean, dtype=torch.float32).view(3, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32).view(3, 1, 1)
        return (t - mean) / std


@functools.lru_cache(maxsize=16)
def _lookup_table(mean: tuple[float, ...], std: tuple[float, ...], device: str = "cpu") -> torch.Tensor:
    """(3, 256) on ``device``: what :meth:`Preprocessing.to_tensor` (on the CPU) maps each 8-bit value of
    each channel to."""
    import numpy as np

    ramp = Image.fromarray(np.repeat(np.arange(256, dtype=np.uint8)[None, :, None], 3, axis=2))  # 1 x 256 px
    return Preprocessing(name="lut", size=1, mean=mean, std=std).to_tensor(ramp)[:, 0, :].contiguous().to(device)


def from_open_clip_cfg(name: str, preprocess_cfg: dict, image_size: int | None = None) -> Preprocessing:
    """The protocol open_clip's eval transform applies for a ``preprocess_cfg`` (open_clip_config.json).

    Missing keys take open_clip's defaults (224, OpenAI mean/std, bicubic, resize
    the shortest side then centre-crop). ``squash`` resizes to size x size with no
    crop. open_clip's ``longest`` (resize + pad) has no fpr protocol yet.
    """
    cfg = dict(preprocess_cfg or {})
    size = cfg.get("size") or image_size or 224
    if isinstance(size, (list, tuple)):
        if len(set(size)) != 1:
            raise ValueError(f"non-square preprocessing size {size} is not supported")
        size = size[0]
    size = int(size)
    mode = cfg.get("resize_mode") or "shortest"
    if mode not in ("shortest", "squash"):
        raise ValueError(f"open_clip resize_mode '{mode}' is not supported (shortest or squash)")
    return Preprocessing(
        name=name, size=size, resize_mode=mode, crop=size if mode == "shortest" else None,
        interpolation=cfg.get("interpolation") or "bicubic",
        mean=tuple(float(v) for v in cfg.get("mean") or OPENAI_MEAN),
        std=tuple(float(v) for v in cfg.get("std") or OPENAI_STD),
    )


def differences(a: Preprocessing, b: Preprocessing) -> list[str]:
    """Fields (other than the name) in which two protocols differ, as ``field: a != b``."""
    from dataclasses import fields

    out = []
    for f in fields(Preprocessing):
        if f.name == "name":
            continue
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if isinstance(va, tuple):
            same = len(va) == len(vb) and all(abs(x - y) < 1e-6 for x, y in zip(va, vb))
        else:
            same = va == vb
        if not same:
            out.append(f"{f.name}: {va} != {vb}")
    return out
