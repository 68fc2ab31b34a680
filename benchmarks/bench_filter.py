"""``fpr filter`` throughput (images/s) on this machine, end to end from a queries file to kept/rejected files.

Production path: :func:`fpr.workflows.filter.filter_queries` (what ``fpr filter`` runs), cold embedding
cache per call. Encoders: ``pixels-16`` (decode-bound) and a random-init ``resnet18`` at 224 px (a
realistic CNN cost, no download); optionally with the ``copy-paste`` scorer (pixel-level check against
each query's references). Anchor, timed the same way in the same rounds: ``fpr.api.embed`` of the same
query images with the same encoder and a cold cache (what ``fpr embed`` runs: the embedding a filter cannot
skip), so filter/embed says what ranking, the rule, scorers and writing add. Interleaved rounds, order
rotated (benchmarks/_timing.py), median [min - max], ratios round by round, load printed. Physical
limit: the resnet18 rows' compute rate (counted FLOPs x images / seconds) against a torch 2048^3 sgemm
measured in the same run.

    python benchmarks/bench_filter.py [--n 600] [--n-cnn 240] [--n-copy 120] [--chunk-size 200] [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("FPR_QUIET", "1")

import fpr.api as api  # noqa: E402
from fpr.workflows.filter import filter_queries  # noqa: E402
from fpr.galleries.curate import GallerySpec  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing as T  # noqa: E402
from bench_ablate import register_resnet18, resnet18_gflop  # noqa: E402


def make(root: Path, n_queries: int, size: int = 256) -> Path:
    rng = np.random.default_rng(0)
    rows = []
    bases = {}
    for g in range(2):
        for i in range(10):
            bases[(g, i)] = rng.uniform(0, 255, size=3)
            for k in range(12):
                arr = np.clip(bases[(g, i)] + rng.normal(0, 50, size=(size, size, 3)), 0, 255).astype(np.uint8)
                p = root / "real" / f"g{g}" / f"i{i}" / f"{k}.jpg"
                p.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(arr).save(p, quality=90)
                rows.append({"path": str(p), "identity": f"i{i}", "group": f"g{g}",
                             "role": "reference" if k < 2 else "gallery"})
    pd.DataFrame(rows).to_csv(root / "gallery.csv", index=False)
    q = []
    for j in range(n_queries):
        g, i = j % 2, (j // 2) % 10
        arr = np.clip(bases[(g, i)] + rng.normal(0, 70, size=(size, size, 3)), 0, 255).astype(np.uint8)
        p = root / "gen" / f"{j:06d}.jpg"
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(arr).save(p, quality=90)
        q.append({"path": str(p), "identity": f"i{i}", "group": f"g{g}", "method": "m"})
    pd.DataFrame(q).to_csv(root / "queries.csv", index=False)
    return root


def compare(root: Path, ws: Path, index: str, encoder: str, n: int, rule: str, chunk: int, tag: str,
            rounds: int, peak: "T.Spread | None", gflop: float | None) -> None:
    """``filter_queries`` vs ``api.embed`` of the same ``n`` images, interleaved, cold cache per call."""
    qfile = root / f"q{n}.csv"
    rows = pd.read_csv(root / "queries.csv").head(n)
    rows.to_csv(qfile, index=False)
    paths = rows["path"].tolist()
    calls = iter(range(10 ** 6))
    kept: list[int] = []

    def cold() -> None:
        os.environ["FPR_CACHE_DIR"] = str(root / f"cache-{tag}-{next(calls)}")

    def run_filter():
        cold()
        res = filter_queries(index, qfile, rule, root / f"kept-{tag}.csv", rejected=root / f"rej-{tag}.csv",
                             workspace=ws, chunk_size=chunk)
        kept.append(res.n_kept)
        return res

    def run_embed():
        cold()
        return api.embed(encoder, paths, device="cpu")

    times = T.interleaved({"filter": run_filter, "embed": run_embed}, rounds)
    if len(set(kept)) != 1:
        raise SystemExit(f"{tag}: the rounds kept different numbers of images: {kept}")
    img_s = T.spread([n / t for t in times["filter"]])
    line = (f"| {tag} | {n} | {T.spread(times['filter']).fmt('.2f')} | {img_s.fmt('.1f')} | "
            f"{T.spread(times['embed']).fmt('.2f')} | {T.ratios(times['filter'], times['embed']).fmt('.2f')} | "
            f"{kept[0]} |")
    if gflop and peak:
        rate = img_s.median * gflop  # GFLOP/s of the encoder's work at the median filter speed
        line += f" {rate:.1f} GFLOP/s = {rate / peak.median:.2f} |"
    else:
        line += " - |"
    print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--n-cnn", type=int, default=240)
    ap.add_argument("--n-copy", type=int, default=120)
    ap.add_argument("--chunk-size", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    register_resnet18()
    import torch

    print(f"load average before: {T.load()}; {os.cpu_count()} cores; torch threads {torch.get_num_threads()}; "
          f"query images 256x256 JPEG")
    with tempfile.TemporaryDirectory() as tmp:
        root = make(Path(tmp), max(args.n, args.n_cnn, args.n_copy))
        ws = root / "ws"
        api.import_gallery("b", api.read_manifest(root / "gallery.csv"), GallerySpec(), workspace=ws)
        os.environ["FPR_CACHE_DIR"] = str(root / "cache-index")
        api.build_index("b", "pixels-16", workspace=ws)
        api.build_index("b", "bench-resnet18", workspace=ws)
        peak = T.sgemm_gflops(backend="torch")
        gflop = resnet18_gflop()
        print(f"seconds, median [min - max] of {args.rounds} interleaved rounds, cold embedding cache each; "
              f"anchor: fpr.api.embed of the same images; torch sgemm 2048^3 {peak.fmt('.1f')} GFLOP/s, "
              f"resnet18 {gflop:.2f} GFLOP/image\n")
        print("| configuration | images | filter s | filter img/s | anchor: embed s | filter / embed per round | "
              "kept | resnet18 compute / sgemm rate |")
        print("|---|---|---|---|---|---|---|---|")
        compare(root, ws, "b-pixels-16", "pixels-16", args.n, "top1 and ap >= 0.5", args.chunk_size, "pixels-16",
                args.rounds, None, None)
        compare(root, ws, "b-bench-resnet18", "bench-resnet18", args.n_cnn, "top1 and ap >= 0.5", args.chunk_size,
                "resnet18", args.rounds, peak, gflop)
        compare(root, ws, "b-pixels-16", "pixels-16", args.n_copy, "ap >= 0 and not copy_paste", args.chunk_size,
                "pixels-16 + copy-paste", args.rounds, None, None)
    print(f"\nload average after: {T.load()}")


if __name__ == "__main__":
    main()
