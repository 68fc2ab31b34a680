"""copy-paste's calibrated domain: the floors of fpr.scorers.copy_paste.scorer.Domain, measured.

    PYTHONPATH=. python benchmarks/copy_paste_domain.py

copy-paste's threshold is calibrated on the built-in world (benchmarks/calibrate_copy_paste.py). This script
measures, per image, what ``Domain`` reads (longer side; share of textured 8x8 grid patches at the working
size; ``detail``, the share of the working image's variance lost by halving and re-enlarging it) on

- the calibration seeds' images (101, 102: queries and references), which the floors must stay below;
- the validation seeds' (201, 202), where the floors must flag nothing;
- inputs outside it: scikit-learn's 8x8 handwritten digits shown at 64 px (the issue's case), scikit-image's
  photos shrunk to 16-64 px and re-enlarged to 512, and shrunk to 24 px;

and, on the digits, copy-paste's score of a digit against 3 other writers' images of the same digit (none is a
copy): how many the calibrated threshold flags. The table goes to --out and stdout.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.calibrate_copy_paste import world_queries  # noqa: E402


def demo_images(seeds, folder: Path) -> list[Path]:
    """Every image of ``fpr demo --quick``'s world at each seed (gallery, references and queries)."""
    from fpr.galleries.world import build_world
    from fpr.workflows.demo import QUICK

    out = []
    for seed in seeds:
        build = build_world(folder / f"demo-quick-{seed}", seed=seed, cache=True, **QUICK)
        out += sorted({Path(r.path) for r in build.records} | {Path(q["path"]) for q in build.queries})
    return out


def world_images(seeds, identities: int, folder: Path) -> list[Path]:
    out = []
    for seed in seeds:
        q = world_queries(seed, identities, folder)
        refs = {r for rs in q["reference_paths"] for r in str(rs).split(";") if r}
        out += sorted({Path(p) for p in q["path"]} | {Path(r) for r in refs})
    return out


def digits(n: int) -> list[Image.Image]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return [Image.fromarray((a / 16 * 255).astype(np.uint8)).convert("RGB").resize((64, 64), Image.BILINEAR)
            for a in d.images[:n]], d.target[:n]


def photos() -> dict[str, list[Image.Image]]:
    import skimage.data as sd

    out: dict[str, list[Image.Image]] = {"photo": []}
    for name in ("astronaut", "coffee", "chelsea", "rocket", "camera", "cat"):
        im = Image.fromarray(getattr(sd, name)()).convert("RGB")
        out["photo"].append(im)
        h = 512 * im.height // im.width
        for s in (16, 32, 48, 64):
            out.setdefault(f"photo from {s} px, at 512", []).append(
                im.resize((s, max(1, s * im.height // im.width)), Image.BILINEAR).resize((512, h), Image.BICUBIC))
        out.setdefault("photo at 24 px", []).append(im.resize((24, max(1, 24 * im.height // im.width))))
    return out


def row(name: str, domains: list) -> dict:
    side = np.array([d.side for d in domains])
    tex = np.array([d.textured for d in domains])
    det = np.array([d.detail for d in domains])
    outside = sum(bool(d.reasons()) for d in domains)
    return {"images": name, "n": len(domains), "side min": int(side.min()), "textured min": f"{tex.min():.3f}",
            "textured median": f"{np.median(tex):.3f}", "detail min": f"{det.min():.4f}",
            "detail median": f"{np.median(det):.4f}", "outside": f"{outside} ({outside / len(domains):.0%})"}


def digit_scores(ims, labels, folder: Path, n_queries: int) -> pd.DataFrame:
    """Each of the first ``n_queries`` digits against 3 other images of the same digit (other writers)."""
    from fpr.scorers import QueryBatch
    from fpr.scorers.copy_paste.scorer import CopyPaste

    paths = []
    for k, im in enumerate(ims):
        paths.append(str(folder / f"digit-{k}.png"))
        im.save(paths[-1])
    qs, refs = [], []
    for k in range(n_queries):
        same = [j for j in range(len(ims)) if labels[j] == labels[k] and j != k][:3]
        qs.append(k)
        refs.append([paths[j] for j in same])
    batch = QueryBatch([f"d{k}" for k in qs], [paths[k] for k in qs], ["x"] * len(qs), ["digits"] * len(qs),
                       [None] * len(qs), refs, device="cpu")
    df = CopyPaste().score(batch)
    return df


def main(argv=None) -> None:
    from fpr.scorers.copy_paste.patches import DEFAULTS, DOMAIN_MIN_DETAIL, DOMAIN_MIN_SIDE, DOMAIN_MIN_TEXTURED, Domain

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--identities", type=int, default=6, help="identities per species per world (as calibrated)")
    ap.add_argument("--digits", type=int, default=180)
    ap.add_argument("--digit-queries", type=int, default=40)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "copy_paste_domain.md"))
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="cp-domain-"))
    rows = []
    for label, seeds in (("world, calibration seeds 101 102", (101, 102)), ("world, validation seeds 201 202",
                                                                             (201, 202))):
        rows.append(row(label, [Domain.of(Image.open(p).convert("RGB")) for p in world_images(seeds,
                                                                                            args.identities, tmp)]))
    # the demo's own worlds (fpr demo --quick, seeds 0-2: the images every new user scores first) must be inside
    rows.append(row("world, the quick demo's seeds 0 1 2", [Domain.of(Image.open(p).convert("RGB"))
                                                             for p in demo_images((0, 1, 2), tmp)]))
    ims, labels = digits(args.digits)
    rows.append(row("sklearn digits (8x8) at 64 px", [Domain.of(im) for im in ims]))
    for name, group in photos().items():
        rows.append(row(f"skimage {name}", [Domain.of(im) for im in group]))
    table = pd.DataFrame(rows)
    scores = digit_scores(ims, labels, tmp, args.digit_queries)
    wide = scores.pivot(index="query_id", columns="metric", values="value")
    noted = scores[scores["metric"] == "score"]["note"].str.startswith("outside copy-paste's calibrated").sum()
    t = DEFAULTS["threshold"]
    lines = [
        "# copy-paste: its calibrated domain", "",
        "`PYTHONPATH=. python benchmarks/copy_paste_domain.py` (floors in `fpr/scorers/copy_paste/scorer.py`: "
        f"side >= {DOMAIN_MIN_SIDE} px, textured share >= {DOMAIN_MIN_TEXTURED}, detail >= {DOMAIN_MIN_DETAIL}; "
        "an image below one is 'outside').", "",
        "| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns),
        *("| " + " | ".join(str(v) for v in r) + " |" for r in table.itertuples(index=False)), "",
        f"Digits, each of {len(wide)} against 3 other writers' images of the same digit (no copy among them): "
        f"score median {wide['score'].median():.3f}, max {wide['score'].max():.3f}; flagged at the calibrated "
        f"{t}: {int((wide['flag'] == 1).sum())} of {len(wide)}; with the out-of-domain note: {noted} of {len(wide)}.",
        ""]
    text = "\n".join(lines)
    Path(args.out).write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
