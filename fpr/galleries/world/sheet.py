"""A contact sheet of the world: per species, real images of one identity, a reference, and every method's query.

    .venv/bin/python -m fpr.galleries.world.sheet docs/world-grid.png
"""
from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image, ImageDraw

from fpr.galleries.world import METHODS, World, WorldConfig


def contact_sheet(seed: int = 0, size: int = 96) -> Image.Image:
    w = World(WorldConfig(seed=seed, identities=2, references=2, queries=2, size=size))
    cols = ["gallery", "gallery", "other id", "reference"] + list(METHODS)
    label_h = 14
    sheet = Image.new("RGB", (len(cols) * size, len(w.config.species) * size + label_h), (255, 255, 255))
    d = ImageDraw.Draw(sheet)
    for c, name in enumerate(cols):
        d.text((c * size + 3, 1), name, fill=(0, 0, 0))
    for r, sp in enumerate(w.config.species):
        a, b = w.ids[sp][:2]
        tiles = [w.real_image(sp, a, "gallery", 0), w.real_image(sp, a, "gallery", 1),
                 w.real_image(sp, b, "gallery", 0), w.real_image(sp, a, "reference", 1)]
        tiles += [w.query_image(m, sp, a, 1)[0] for m in METHODS]  # query 1 is made from reference 1
        for c, im in enumerate(tiles):
            sheet.paste(im, (c * size, label_h + r * size))
    return sheet


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "world-grid.png")
    contact_sheet().quantize(128).save(out, optimize=True)
    print(out)
