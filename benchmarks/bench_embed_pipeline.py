"""Embedding pipeline vs the bare model forward (same model, batch size, device).

bare: ``Encoder.embed_batch`` over tensors decoded and preprocessed beforehand (not timed);
pipeline: ``embed_paths`` from files (hash, read once, decode + protocol, forward, normalise), no
cache, with its default decoding (on a CPU: threads between forward passes; ``--workers N``: N worker
processes with one thread each beside the forward). Ratio = bare time / pipeline time (1.0 = the
pipeline costs nothing beyond the forward). Each round times both, alternating which goes first
(the machine is shared); ``--rounds`` rounds give the median and the spread (min-max).

Encoders: the built-in ``fpr-world-v2`` (the default) and ``fpr-world-v1``, a random-init
resnet18 at 224 px, and ``pixels-16`` (no network: the pipeline's own cost shows). Images:
``world96`` are renders of the built-in world (96 px PNGs, what the built-in encoders are made
for); ``jpeg256`` are 256 px JPEGs of colour noise, the stress case (noise is the slowest content
to decode). ``decode`` is the decode + protocol CPU time per image in one thread, the work the
workers add beside the forward; ``bound`` is the ratio a pipeline could reach at best if the bare
forward kept every core busy: cores x forward / (cores x forward + decode).

    python benchmarks/bench_embed_pipeline.py [--n 512] [--n-cnn 96] [--batch-size 32] [--workers N] [--rounds 3]
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
from fpr.encoders.world import SHIPPED_IDS, WORLD_ENCODER_ID  # noqa: E402
from fpr.galleries.world import build_world  # noqa: E402
from fpr.images import decode_rgb, read_bytes  # noqa: E402


def noise_jpegs(root: Path, n: int) -> list[str]:
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        arr = np.clip(rng.uniform(0, 255, 3) + rng.normal(0, 40, (256, 256, 3)), 0, 255).astype(np.uint8)
        p = root / f"{i}.jpg"
        Image.fromarray(arr).save(p, quality=90)
        paths.append(str(p))
    return paths


def world_pngs(root: Path, n: int) -> list[str]:
    per_identity = 10 + 3 + 3 * 6  # gallery + references + queries x methods, roughly
    build = build_world(root, seed=0, identities=max(2, -(-n // (3 * per_identity)) + 1))
    paths = [r.path for r in build.records] + [q["path"] for q in build.queries]
    if len(paths) < n:
        raise SystemExit(f"the world has {len(paths)} images, fewer than --n {n}")
    return paths[:n]


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def decode_ms(enc, paths: list[str]) -> float:
    """Decode + protocol per image, one thread, in this process (CPU time)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        t = time.process_time()
        for p in paths:
            enc.preprocessing(decode_rgb(read_bytes(p)))
        return (time.process_time() - t) / len(paths) * 1e3
    finally:
        torch.set_num_threads(threads)


def measure(enc_id: str, data: str, paths: list[str], args) -> dict:
    enc = load_encoder(enc_id, device=args.device)
    n = len(paths)
    imgs = torch.stack([enc.preprocessing(decode_rgb(read_bytes(p))) for p in paths])
    if enc.device.type == "cuda":
        imgs = imgs.pin_memory()
    dec = decode_ms(enc, paths[:64])

    def bare() -> tuple[float, np.ndarray]:
        t = time.perf_counter()
        out = np.concatenate([enc.embed_batch(imgs[s:s + args.batch_size]) for s in range(0, n, args.batch_size)])
        if enc.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t, out

    def pipe() -> tuple[float, np.ndarray]:
        t = time.perf_counter()
        res = E.embed_paths(enc, paths, batch_size=args.batch_size, workers=args.workers, cache=None)
        return time.perf_counter() - t, res.vectors

    enc.embed_batch(imgs[:args.batch_size])  # warm-up
    E.embed_paths(enc, paths[:8], workers=0, cache=None)
    bares, pipes, ratios = [], [], []
    load_before = load()
    for r in range(args.rounds):
        first, second = (bare, pipe) if r % 2 == 0 else (pipe, bare)
        t1, v1 = first()
        t2, v2 = second()
        tb, tp = (t1, t2) if first is bare else (t2, t1)
        if enc.device.type != "cuda":
            assert v1.tobytes() == v2.tobytes(), "pipeline and bare forward disagree"
        bares.append(tb)
        pipes.append(tp)
        ratios.append(tb / tp)
    fwd = statistics.median(bares) / n * 1e3
    cores = os.cpu_count() or 1
    return {"encoder": enc_id, "images": data, "n": n, "device": enc.device.type,
            "decode ms/img": dec, "bare ms/img": fwd, "pipeline ms/img": statistics.median(pipes) / n * 1e3,
            "ratio": statistics.median(ratios), "spread": f"{min(ratios):.2f}-{max(ratios):.2f}",
            "bound": cores * fwd / (cores * fwd + dec), "load": f"{load_before} -> {load()}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--n-cnn", type=int, default=96)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=None, help="decode processes (default: the pipeline's own)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--only", default="", help="comma-separated encoder ids to run (default: all)")
    args = ap.parse_args()
    register_resnet18()
    tmp = Path(tempfile.mkdtemp(prefix="fpr-pipe-"))
    (tmp / "jpeg").mkdir()
    jpegs = noise_jpegs(tmp / "jpeg", max(args.n, args.n_cnn))
    world = world_pngs(tmp / "world", args.n)
    builtin = [WORLD_ENCODER_ID] + [i for i in SHIPPED_IDS if i != WORLD_ENCODER_ID]
    plan = [(e, d) for e in builtin for d in ("world96", "jpeg256")]
    plan += [("bench-resnet18", "jpeg256"), ("pixels-16", "jpeg256")]
    if args.only:
        plan = [p for p in plan if p[0] in args.only.split(",")]
    print(f"cores {os.cpu_count()}, torch threads {torch.get_num_threads()}, "
          f"workers {'default' if args.workers is None else args.workers}, "
          f"batch {args.batch_size}, {args.rounds} rounds; load (1/5/15 min) at start {load()}", flush=True)
    cols = ["encoder", "images", "n", "device", "decode ms/img", "bare ms/img", "pipeline ms/img", "ratio",
            "spread", "bound", "load"]
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols), flush=True)
    for enc_id, data in plan:
        paths = world if data == "world96" else jpegs[:args.n_cnn if enc_id == "bench-resnet18" else args.n]
        row = measure(enc_id, data, paths, args)
        print("| " + " | ".join(f"{row[c]:.2f}" if isinstance(row[c], float) else str(row[c]) for c in cols) + " |",
              flush=True)


if __name__ == "__main__":
    main()
