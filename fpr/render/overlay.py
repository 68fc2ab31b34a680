"""An evidence map (:mod:`fpr.metrics.evidence`) blended over its query image, as ``fpr explain`` writes it.

Green where the pixels carry the true identity's evidence, magenta where they speak against it (variant
``margin``: where they match the best impostor better);
the opacity is the value's size relative to the map's largest (so every overlay shows its own strongest
regions; compare values, not colours, across queries). ``legend=True`` adds a strip below the image naming
the two colours; the image part keeps the query's exact size and pixel grid.
"""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw, ImageFont

TRUE_COLOUR = (0, 190, 60)
AGAINST_COLOUR = (225, 0, 170)
MAX_OPACITY = 0.65


def blend(image: Image.Image, values: np.ndarray) -> Image.Image:
    """``image`` (RGB) with ``values`` (H, W; >0 the true identity's evidence, <0 against it) in two colours."""
    rgb = np.asarray(image.convert("RGB"), np.float64)
    v = np.asarray(values, np.float64)
    if v.shape != rgb.shape[:2]:
        raise ValueError(f"map {v.shape} does not match the image {rgb.shape[:2]}")
    peak = float(np.abs(v).max()) if v.size else 0.0
    a = (np.abs(v) / peak * MAX_OPACITY if peak > 0 else np.zeros_like(v))[..., None]
    colour = np.where((v > 0)[..., None], np.array(TRUE_COLOUR, np.float64), np.array(AGAINST_COLOUR, np.float64))
    out = rgb * (1 - a) + colour * a
    return Image.fromarray(np.clip(np.round(out), 0, 255).astype(np.uint8), "RGB")


def legend_strip(width: int, height: int = 12) -> Image.Image:
    """A white strip naming the two colours: a green square 'true', a magenta square 'against'."""
    strip = Image.new("RGB", (width, height), (255, 255, 255))
    d = ImageDraw.Draw(strip)
    font = ImageFont.load_default()
    s = height - 4
    x = 2
    for colour, word in ((TRUE_COLOUR, "true"), (AGAINST_COLOUR, "against")):
        d.rectangle([x, 2, x + s, 2 + s], fill=colour)
        x += s + 2
        d.text((x, 0), word, fill=(0, 0, 0), font=font)
        x += int(d.textlength(word, font=font)) + 6
    return strip


def overlay(image: Image.Image, values: np.ndarray, *, legend: bool = True) -> Image.Image:
    """The blended image, with the legend strip below it when ``legend``."""
    out = blend(image, values)
    if not legend:
        return out
    strip = legend_strip(out.width)
    page = Image.new("RGB", (out.width, out.height + strip.height), (255, 255, 255))
    page.paste(out, (0, 0))
    page.paste(strip, (0, out.height))
    return page
