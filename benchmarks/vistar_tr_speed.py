"""vistar-tr speed: the scorer as `fpr score --scorers vistar-tr` runs it, against RapidOCR called stock.

Contenders, timed in interleaved rounds (benchmarks/_timing.py), on the same rendered 512x512 signs:

* ``scorer``: ``get_scorer("vistar-tr").score(QueryBatch)`` over PNG files: what production runs (decode,
  fpr's RapidOCR settings: longer side capped at 960 px, no angle classifier, one ONNX thread, calibrated
  box expansion; then the text comparison);
* ``rapidocr-stock``: ``RapidOCR()`` with the library's defaults (its thread count, its shorter-side
  736 px limit, the angle classifier) on the same decoded arrays: what a user gets without fpr's settings;
* ``compare``: the text comparison alone (``tr_values``), so the table shows that OCR is the cost.

Printed: milliseconds per image, median [min - max] over the rounds, ratios round by round, the share of
exact reads (every letter right, spacing aside) of each reader, and the load before and after. No
physical limit is printed: the two ONNX networks' FLOPs are not counted here.

    PYTHONPATH=. python benchmarks/vistar_tr_speed.py --images 20 --rounds 3
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _timing as T  # noqa: E402

WORDS = ["OPEN", "DAILY", "FRESH", "BREAD", "COFFEE", "SALE", "HOTEL", "EXIT"]


def render_signs(n: int, folder: Path, seed: int = 0) -> tuple[list[str], list[str]]:
    """n signs of two words in black DejaVu Sans 40 pt on a light plain background, as PNG files."""
    import matplotlib

    font = ImageFont.truetype(os.path.join(os.path.dirname(matplotlib.__file__), "mpl-data", "fonts", "ttf",
                                           "DejaVuSans.ttf"), 40)
    rng = np.random.default_rng(seed)
    paths, texts = [], []
    for i in range(n):
        text = " ".join(rng.choice(WORDS, size=2, replace=False))
        img = Image.new("RGB", (512, 512), tuple(int(v) for v in rng.integers(150, 256, 3)))
        ImageDraw.Draw(img).text((int(rng.integers(10, 150)), int(rng.integers(50, 400))), text, font=font,
                                 fill="black")
        path = folder / f"sign{i:03d}.png"
        img.save(path)
        paths.append(str(path))
        texts.append(text)
    return paths, texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    from rapidocr_onnxruntime import RapidOCR

    from fpr.scorers import QueryBatch, get_scorer
    from fpr.scorers.vistar import tr

    print(f"# vistar-tr speed: {T.machine()}")
    print(f"load average before: {T.load()}")
    with tempfile.TemporaryDirectory() as tmp:
        paths, texts = render_signs(args.images, Path(tmp))
        arrays = [np.asarray(Image.open(p).convert("RGB")) for p in paths]
        n = len(paths)
        batch = QueryBatch(query_ids=[f"q{i}" for i in range(n)], paths=paths, identities=["sign"] * n,
                           groups=["sign"] * n, prompts=[f'a sign that says "{t}"' for t in texts],
                           reference_paths=[[] for _ in range(n)], extras=[{"expected_text": t} for t in texts])
        scorer = get_scorer("vistar-tr")
        stock = RapidOCR()

        def read_stock() -> list[str]:
            out = []
            for a in arrays:
                result, _ = stock(a)
                out.append(" ".join(str(r[1]) for r in result) if result else "")
            return out

        reads = [tr.ocr_engine("rapidocr")(a) for a in arrays]  # the scorer's engine, loaded once
        contenders = {
            "scorer": lambda: scorer.score(batch),
            "rapidocr-stock": read_stock,
            "compare": lambda: [tr.tr_values(r, t) for r, t in zip(reads, texts)],
        }
        for fn in contenders.values():  # warm-up: model loads, first allocations
            fn()
        results: dict[str, object] = {}
        times = T.interleaved(contenders, args.rounds, check=lambda name, out: results.__setitem__(name, out))

    frame = results["scorer"]
    nospace = frame[frame.metric == "char_similarity_nospace"].value.to_numpy()
    stock_exact = [tr.char_similarity_nospace(r, t) == 1.0 for r, t in zip(results["rapidocr-stock"], texts)]
    per_image = {k: [s / n for s in v] for k, v in times.items()}
    print(f"{n} signs of 512x512, {args.rounds} interleaved rounds; ms per image, median [min - max]:")
    for name, xs in per_image.items():
        print(f"  {name:15s} {T.spread(xs).fmt('.4f', 1e3)}")
    print(f"  scorer / rapidocr-stock per round: {T.ratios(per_image['scorer'], per_image['rapidocr-stock'])}")
    print(f"  scorer / compare per round: {T.ratios(per_image['scorer'], per_image['compare']).fmt('.0f')}")
    print(f"exact reads: scorer {np.mean(nospace == 1.0):.0%}, rapidocr-stock {np.mean(stock_exact):.0%} of {n}")
    print(f"load average after: {T.load()}")


if __name__ == "__main__":
    main()
