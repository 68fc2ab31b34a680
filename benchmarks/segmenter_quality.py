"""How well the background segmenters find the subject, and what removing the background costs retrieval.

The built-in world knows the truth: each rendered view's visible animal (the animal layer minus the
occluder) is the ground-truth foreground. For identities of every species we render gallery views
("real" poses) and one generated-style query view ("novel" pose) per identity, then report:

- IoU of each segmenter's mask with the truth (mean, and the share of images under 0.5), and
- query mAP of the built-in encoder with the background kept, removed with the true mask
  (what a perfect segmenter would give: the encoder's own cost of white backgrounds), and
  removed with each segmenter.

Run on two seeds: one to choose settings, one to check them (the table in
benchmarks/results/segmenter_quality.md comes from this script).

    python benchmarks/segmenter_quality.py [--identities 20] [--gallery 5] [--seeds 0,1]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("FPR_QUIET", "1")

import torch  # noqa: E402

from fpr.encoders import background as B  # noqa: E402
from fpr.encoders.registry import load_encoder  # noqa: E402
from fpr.galleries.world import identity_markings, val_identities  # noqa: E402
from fpr.galleries.world.patterns import SPECIES, keyed_rng  # noqa: E402
from fpr.galleries.world.render import animal_layer, compose, sample_view, visible_subject  # noqa: E402
from fpr.keys import keyed_rng
from fpr.metrics.ranking import retrieval_metrics_labels  # noqa: E402


def render(species: str, ident: int, seed: int, k: int, poses: str, size: int):
    rng = keyed_rng("segmenter-bench", species, ident, seed, k, poses)
    v = sample_view(rng, size, poses=poses)
    layer = animal_layer(identity_markings(species, ident), v)
    return compose(layer, v), visible_subject(layer, v)


def fill(img: Image.Image, fg: np.ndarray) -> Image.Image:
    if not fg.any():
        return img
    out = np.asarray(img).copy()
    out[~fg] = B.FILL
    return Image.fromarray(out)


def iou(a: np.ndarray, b: np.ndarray) -> float:
    union = (a | b).sum()
    return float((a & b).sum() / union) if union else 1.0


def run_seed(seed: int, args, encoder) -> list[dict]:
    imgs, truths, labels, is_query = [], [], [], []
    for species in SPECIES:
        for ident in val_identities(species, args.identities, seed=seed):
            for k in range(args.gallery + 1):
                img, truth = render(species, ident, seed, k, "novel" if k == 0 else "real", args.size)
                imgs.append(img)
                truths.append(truth)
                labels.append(f"{species}-{ident}")
                is_query.append(k == 0)
    labels, is_query = np.array(labels), np.array(is_query)
    masks = {"keep": None, "true mask": truths}
    timing = {}
    for name in args.segmenters:
        seg = B.segmenters()[name]
        t = time.perf_counter()
        masks[name] = [seg.mask(im) for im in imgs]
        timing[name] = (time.perf_counter() - t) / len(imgs) * 1000
    rows = []
    for name, ms in masks.items():
        views = imgs if ms is None else [fill(im, m) for im, m in zip(imgs, ms)]
        with torch.inference_mode():
            vec = encoder.embed_batch(torch.stack([encoder.preprocessing(v) for v in views]))
        vec = np.asarray(vec, np.float64)
        scores = vec[is_query] @ vec[~is_query].T
        m = retrieval_metrics_labels(scores, labels[is_query], labels[~is_query])
        ious = np.array([iou(a, b) for a, b in zip(ms, truths)]) if ms is not None and name != "true mask" else None
        rows.append({"seed": seed, "background": name, "mAP": float(np.nanmean(m.ap)),
                     "mean IoU": None if ious is None else float(ious.mean()),
                     "IoU < 0.5": None if ious is None else float((ious < 0.5).mean()),
                     "ms/img": timing.get(name)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--identities", type=int, default=20, help="per species")
    ap.add_argument("--gallery", type=int, default=5, help="gallery views per identity (plus one query view)")
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--encoder", default="fpr-world-v2")
    ap.add_argument("--segmenters", default="grabcut")
    args = ap.parse_args()
    args.segmenters = [s for s in args.segmenters.split(",") if s]
    encoder = load_encoder(args.encoder, device="cpu")
    print(f"encoder {args.encoder}; {len(SPECIES)} species x {args.identities} identities, 1 query + "
          f"{args.gallery} gallery views each, {args.size} px")
    print("| seed | background | query mAP | mean IoU | share IoU < 0.5 | ms / image |")
    print("|---|---|---|---|---|---|")
    for seed in (int(s) for s in args.seeds.split(",")):
        for r in run_seed(seed, args, encoder):
            f = lambda x, p=3: "" if x is None else f"{x:.{p}f}"  # noqa: E731
            print(f"| {r['seed']} | {r['background']} | {r['mAP']:.3f} | {f(r['mean IoU'])} | {f(r['IoU < 0.5'])} "
                  f"| {f(r['ms/img'], 1)} |", flush=True)


if __name__ == "__main__":
    main()
