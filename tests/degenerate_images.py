"""Degenerate images a user's folder may hold (issue #33): made here, in every mode and shape fpr must read.

Each is a file as a camera, an editor or a generator writes it; ``fpr.images`` reads them all the one way
(EXIF orientation, any mode to RGB, the first frame of an animation). Scorers must give each a value or NaN
with its reason."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

# name -> file suffix; the order the contract tests use
DEGENERATE = {"uniform-grey": "png", "black": "png", "one-pixel": "png", "upsampled-8x8": "png",
              "strip-4000x20": "png", "alpha-only": "png", "cmyk": "jpg", "sixteen-bit": "png",
              "palette": "png", "animated": "gif", "exif-rotated": "jpg"}


def _texture(h: int, w: int, seed: int) -> np.ndarray:
    """A smooth colour texture (blurred noise): real-looking content for the modes that are not degenerate
    by their pixels."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (max(1, h // 8), max(1, w // 8), 3), dtype=np.uint8)
    return np.asarray(Image.fromarray(small).resize((w, h), Image.BICUBIC))


def write_degenerate_images(folder: Path) -> dict[str, Path]:
    """Write every image of :data:`DEGENERATE` into ``folder``; name -> path."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {name: folder / f"{name}.{suffix}" for name, suffix in DEGENERATE.items()}
    Image.new("RGB", (64, 64), (128, 128, 128)).save(out["uniform-grey"])
    Image.new("RGB", (64, 64), (0, 0, 0)).save(out["black"])
    Image.new("RGB", (1, 1), (200, 30, 60)).save(out["one-pixel"])
    tiny = np.random.default_rng(1).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    Image.fromarray(tiny).resize((512, 512), Image.BILINEAR).save(out["upsampled-8x8"])
    Image.fromarray(_texture(20, 4000, 2)).save(out["strip-4000x20"])
    rgba = np.dstack([_texture(64, 64, 3), np.zeros((64, 64), np.uint8)])
    Image.fromarray(rgba, "RGBA").save(out["alpha-only"])
    Image.fromarray(_texture(64, 64, 4)).convert("CMYK").save(out["cmyk"], quality=95)
    grey16 = (np.asarray(Image.fromarray(_texture(64, 64, 5)).convert("L"), np.uint16) * 257)
    Image.fromarray(grey16).save(out["sixteen-bit"])
    Image.fromarray(_texture(64, 64, 6)).convert("P", palette=Image.ADAPTIVE, colors=16).save(out["palette"])
    frames = [Image.fromarray(_texture(64, 64, 7 + k)).convert("P") for k in range(2)]
    frames[0].save(out["animated"], save_all=True, append_images=frames[1:], duration=100, loop=0)
    rotated = Image.fromarray(_texture(48, 80, 9))
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    rotated.save(out["exif-rotated"], exif=exif.tobytes(), quality=95)
    return out
