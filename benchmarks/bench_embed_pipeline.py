"""Embedding pipeline vs the bare model forward (same model, batch size, device).

bare: ``Encoder.embed_batch`` over tensors decoded and preprocessed beforehand (not timed);
pipeline: ``embed_paths`` from files (hash, read once, decode + protocol in worker processes with
one thread each, forward, normalise), no cache. Ratio = bare time / pipeline time (1.0 = the
pipeline costs nothing beyond the forward). Encoders: the built-in ``fpr-world-v1``, a
random-init resnet18 at 224 px, and ``pixels-16`` (no model: pure decode cost). 3 rounds: median and spread.

    python benchmarks/bench_embed_pipeline.py [--n 256] [--batch-size 32] [--workers 2] [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("FPR_QUIET", "1")

import torch  # noqa: E402

from bench_ablate import register_resnet18  # noqa: E402
from fpr.encoders import embed as E  # noqa: E402
from fpr.encoders.registry import load_encoder  # noqa: E402
from fpr.images import decode_rgb, read_bytes  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--n-cnn", type=int, default=96)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    register_resnet18()
    tmp = Path(tempfile.mkdtemp(prefix="fpr-pipe-"))
    rng = np.random.default_rng(0)
    paths = []
    for i in range(max(args.n, args.n_cnn)):
        arr = np.clip(rng.uniform(0, 255, 3) + rng.normal(0, 40, (256, 256, 3)), 0, 255).astype(np.uint8)
        p = tmp / f"{i}.jpg"
        Image.fromarray(arr).save(p, quality=90)
        paths.append(str(p))
    print(f"torch threads {torch.get_num_threads()}, workers {args.workers}, batch {args.batch_size}, "
          f"{args.rounds} rounds")
    for enc_id, n in (("fpr-world-v1", args.n), ("bench-resnet18", args.n_cnn), ("pixels-16", args.n)):
        enc = load_encoder(enc_id, device=args.device)
        imgs = torch.stack([enc.preprocessing(decode_rgb(read_bytes(p))) for p in paths[:n]])
        if enc.device.type == "cuda":
            imgs = imgs.pin_memory()
        enc.embed_batch(imgs[:args.batch_size])  # warm-up
        ratios, bares, pipes = [], [], []
        for _ in range(args.rounds):
            t = time.perf_counter()
            bare = np.concatenate([enc.embed_batch(imgs[s:s + args.batch_size]) for s in range(0, n, args.batch_size)])
            if enc.device.type == "cuda":
                torch.cuda.synchronize()
            tb = time.perf_counter() - t
            t = time.perf_counter()
            res = E.embed_paths(enc, paths[:n], batch_size=args.batch_size, workers=args.workers, cache=None)
            tp = time.perf_counter() - t
            assert np.array_equal(res.vectors, bare) or enc.device.type == "cuda"
            bares.append(tb)
            pipes.append(tp)
            ratios.append(tb / tp)
        print(f"{enc_id:<15} n={n:4d} device={enc.device.type}: bare {statistics.median(bares):.2f} s "
              f"({n / statistics.median(bares):.0f} img/s), pipeline {statistics.median(pipes):.2f} s "
              f"({n / statistics.median(pipes):.0f} img/s); bare/pipeline median {statistics.median(ratios):.2f} "
              f"(spread {min(ratios):.2f}-{max(ratios):.2f})", flush=True)


if __name__ == "__main__":
    main()
