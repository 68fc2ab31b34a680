"""``fpr filter`` throughput (images/s) on this machine, end to end from a queries file to kept/rejected files.

Cold embedding cache per measurement. Encoders: ``pixels-16`` (decode-bound) and a
random-init ``resnet18`` at 224 px (a realistic CNN cost, no download); optionally
with the ``copy-paste`` scorer (pixel-level check against each query's references).

    python benchmarks/bench_filter.py [--n 600] [--n-cnn 240] [--n-copy 120] [--chunk-size 200]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
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
from bench_ablate import register_resnet18  # noqa: E402


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


def run(root: Path, ws: Path, index: str, n: int, rule: str, chunk: int, tag: str) -> None:
    qfile = root / f"q{n}.csv"
    pd.read_csv(root / "queries.csv").head(n).to_csv(qfile, index=False)
    os.environ["FPR_CACHE_DIR"] = str(root / f"cache-{tag}")
    t = time.perf_counter()
    res = filter_queries(index, qfile, rule, root / f"kept-{tag}.csv", rejected=root / f"rej-{tag}.csv",
                         workspace=ws, chunk_size=chunk)
    wall = time.perf_counter() - t
    print(f"{tag:28s} {n:5d} images  {wall:7.2f} s  {n / wall:7.1f} img/s end to end  "
          f"(chunk loop {res.images_per_s:.1f} img/s), kept {res.n_kept}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--n-cnn", type=int, default=240)
    ap.add_argument("--n-copy", type=int, default=120)
    ap.add_argument("--chunk-size", type=int, default=200)
    args = ap.parse_args()
    register_resnet18()
    import torch

    print(f"torch threads {torch.get_num_threads()}, cpus {os.cpu_count()}; query images 256x256 JPEG")
    with tempfile.TemporaryDirectory() as tmp:
        root = make(Path(tmp), max(args.n, args.n_cnn, args.n_copy))
        ws = root / "ws"
        api.import_gallery("b", api.read_manifest(root / "gallery.csv"), GallerySpec(), workspace=ws)
        os.environ["FPR_CACHE_DIR"] = str(root / "cache-index")
        api.build_index("b", "pixels-16", workspace=ws)
        api.build_index("b", "bench-resnet18", workspace=ws)
        run(root, ws, "b-pixels-16", args.n, "top1 and ap >= 0.5", args.chunk_size, "pixels-16")
        run(root, ws, "b-bench-resnet18", args.n_cnn, "top1 and ap >= 0.5", args.chunk_size, "resnet18")
        run(root, ws, "b-pixels-16", args.n_copy, "ap >= 0 and not copy_paste", args.chunk_size,
            "pixels-16 + copy-paste")


if __name__ == "__main__":
    main()
