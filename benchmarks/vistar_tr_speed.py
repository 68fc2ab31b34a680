"""vistar-tr speed: OCR seconds per image (RapidOCR PP-OCR ONNX, one thread) on rendered 512x512 signs.

Baseline in the same run: the text comparison alone (rapidfuzz + both Jaccards), so the ratio shows
that OCR is the cost.  python benchmarks/vistar_tr_speed.py [N]
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
from PIL import Image, ImageDraw, ImageFont


def main(n: int = 20) -> None:
    import matplotlib

    from fpr.scorers import vistar_tr as tr

    font = ImageFont.truetype(os.path.join(os.path.dirname(matplotlib.__file__), "mpl-data", "fonts", "ttf",
                                           "DejaVuSans.ttf"), 40)
    words = ["OPEN", "DAILY", "FRESH", "BREAD", "COFFEE", "SALE", "HOTEL", "EXIT"]
    rng = np.random.default_rng(0)
    imgs, texts = [], []
    for _ in range(n):
        t = " ".join(rng.choice(words, size=2, replace=False))
        img = Image.new("RGB", (512, 512), tuple(int(v) for v in rng.integers(150, 256, 3)))
        ImageDraw.Draw(img).text((int(rng.integers(10, 150)), int(rng.integers(50, 400))), t, font=font, fill="black")
        imgs.append(np.asarray(img))
        texts.append(t)
    engine = tr.ocr_engine("rapidocr")
    engine(imgs[0])  # warm-up (model load)
    t0 = time.perf_counter()
    read = [engine(im) for im in imgs]
    ocr_s = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    values = [tr.tr_values(r, t) for r, t in zip(read, texts)]  # VISTAR's and fpr's similarities
    cmp_s = (time.perf_counter() - t0) / n
    exact = np.mean([v.char_similarity_nospace == 1.0 for v in values])  # every letter right, spacing aside
    print(f"OCR {ocr_s * 1000:.1f} ms/image, compare {cmp_s * 1e6:.1f} us/image (ratio {ocr_s / cmp_s:.0f}x); "
          f"exact reads {exact:.0%} of {n}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
