"""``fpr filter`` at scale on one machine: 10k / 30k / 100k generated images, throughput per stage and peak RSS.

Production path: :func:`fpr.workflows.filter.filter_queries` (what ``fpr filter`` runs), one child process per
size (so ``ru_maxrss`` of that child is the run's peak resident memory), cold embedding cache, the cheapest
encoder (``pixels-16``) over 32x32 JPEG queries (``bench_filter.make``: 2 groups x 10 identities x 12 gallery
images), rule ``top1 and ap >= 0.5`` (no scorer), chunks of 1,000. Each stage's seconds are the time spent in
the functions the filter calls for it, summed over chunks (wrappers installed in the child):

* embed: ``embed_paths`` (read + SHA-256 + decode + protocol + forward, fused on threads);
* search: ``score_blocks`` (exact scores against the gallery, AP / ranks / top-k);
* sim: ``pairwise_sim`` (similarity to the identity's references);
* scorers: ``run_scorers`` (none in the rule: ~0);
* write: the chunk parts and the final outputs (``_write_part``, ``_assemble``);
* other: the rest (reading and normalising the queries, the rule, frames).

Then, in the same child, two pieces of the fused embed stage on one thread over the first 5,000 queries:
``decode_paths`` alone (read, hash, decode, protocol) and ``embed_decoded`` of those pixels (the forward).
And the copy-paste scorer (the only pixel-level scorer a default keep-rule uses) on ``--copy-paste N`` queries
(default 300), since at tens of images/s per core 100k would take hours: its rate is printed as measured on N.
``--decode-only N``: only the decode stage's CPU cost per image at generated-image sizes (512 and 1024 px
JPEG) into the MiewID (440 px) and CLIP (224 px) protocols, for the GPU-node plan in docs/scale.md.

    python benchmarks/bench_filter_scale.py [--sizes 10000,30000,100000] [--chunk-size 1000] [--copy-paste 300]
    python benchmarks/bench_filter_scale.py --decode-only 200
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("FPR_QUIET", "1")

import _timing as T  # noqa: E402

STAGES = ("embed", "search", "sim", "scorers", "write")


def _timed(mod, name: str, acc: dict, stage: str) -> None:
    fn = getattr(mod, name)

    def wrapper(*a, **kw):
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            acc[stage] += time.perf_counter() - t0
    setattr(mod, name, wrapper)


def child(root: Path, ws: Path, n: int, chunk: int, rule: str, tag: str) -> dict:
    """One filter run of ``n`` queries with the stage wrappers; returns seconds per stage and peak RSS."""
    from fpr.eval import pipeline
    from fpr.workflows import filter as F

    acc = dict.fromkeys(STAGES, 0.0)
    _timed(F, "embed_paths", acc, "embed")
    _timed(pipeline, "score_blocks", acc, "search")
    _timed(pipeline, "pairwise_sim", acc, "sim")
    _timed(pipeline, "run_scorers", acc, "scorers")
    _timed(F, "_write_part", acc, "write")
    _timed(F, "_assemble", acc, "write")
    os.environ["FPR_CACHE_DIR"] = str(root / f"cache-{tag}-{n}")
    qfile = root / f"q{n}.csv"
    t0 = time.perf_counter()
    res = F.filter_queries("b-pixels-16", qfile, rule, root / f"kept-{tag}-{n}.csv",
                           rejected=root / f"rej-{tag}-{n}.csv", workspace=ws, chunk_size=chunk, device="cpu")
    total = time.perf_counter() - t0
    return {"n": n, "total": total, "stages": acc, "kept": res.n_kept,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def pieces(root: Path, n: int) -> dict:
    """Decode alone and the forward alone, one thread, on the first ``n`` queries (cold: no cache)."""
    import pandas as pd
    import torch

    import fpr.api as api
    from fpr.encoders.embed import decode_paths, embed_decoded

    torch.set_num_threads(1)
    enc = api.load_encoder("pixels-16", device="cpu")
    paths = pd.read_csv(root / "queries.csv")["path"].head(n).tolist()
    t0 = time.perf_counter()
    dec = decode_paths(enc.preprocessing, paths)
    t1 = time.perf_counter()
    embed_decoded(enc, dec, cache=None)
    t2 = time.perf_counter()
    return {"n": n, "decode": t1 - t0, "forward": t2 - t1}


def decode_rates(root: Path, n: int) -> list[str]:
    """``decode_paths`` (read, SHA-256, decode, protocol) on one thread for generated-image sizes (512 and
    1024 px JPEG, quality 90, smooth content as a generator's) into the MiewID (440 px squash) and CLIP
    (224 px shortest side + centre crop) protocols: the CPU cost per image of the decode stage."""
    import numpy as np
    import torch
    from PIL import Image

    from fpr.encoders.clip import CLIP_PREPROCESSING
    from fpr.encoders.embed import decode_paths
    from fpr.encoders.miewid import PREPROCESSING as MIEWID

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    lines = []
    for px in (512, 1024):
        paths = []
        for i in range(n):
            low = rng.uniform(0, 255, size=(px // 32, px // 32, 3)).astype(np.uint8)  # smooth, compressible
            img = Image.fromarray(low).resize((px, px), Image.BICUBIC)
            p = root / f"dec{px}" / f"{i}.jpg"
            p.parent.mkdir(parents=True, exist_ok=True)
            img.save(p, quality=90)
            paths.append(str(p))
        mb = sum(Path(p).stat().st_size for p in paths) / n / 1024
        for name, prep in (("miewid 440", MIEWID), ("clip 224", CLIP_PREPROCESSING)):
            t0, c0 = time.perf_counter(), time.process_time()
            decode_paths(prep, paths)
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            lines.append(f"| {px} px JPEG ({mb:.0f} KiB) | {name} | {n} | {1000 * dt / n:.1f} | {1000 * cpu / n:.1f} "
                         f"| {n / cpu:.0f} |")
    return lines


def run_child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def prepare(root: Path, n_max: int, sizes: list[int]) -> Path:
    import pandas as pd

    import fpr.api as api
    from bench_filter import make
    from fpr.galleries.curate import GallerySpec

    t0 = time.perf_counter()
    make(root, n_max, size=32)
    print(f"generated {n_max} query images (32x32 JPEG) in {time.perf_counter() - t0:.0f} s", flush=True)
    q = pd.read_csv(root / "queries.csv")
    for n in sizes:
        q.head(n).to_csv(root / f"q{n}.csv", index=False)
    ws = root / "ws"
    api.import_gallery("b", api.read_manifest(root / "gallery.csv"), GallerySpec(), workspace=ws)
    os.environ["FPR_CACHE_DIR"] = str(root / "cache-index")
    api.build_index("b", "pixels-16", workspace=ws)
    return ws


def row(r: dict) -> str:
    n, st = r["n"], r["stages"]
    other = r["total"] - sum(st.values())
    cells = [f"{n / st[s]:,.0f} ({st[s]:.1f} s)" if st[s] > 0.05 else f"- ({st[s]:.2f} s)" for s in STAGES]
    return (f"| {n:,} | {r['total']:.1f} | {n / r['total']:,.0f} | " + " | ".join(cells)
            + f" | {other:.1f} | {r['peak_rss_mb']:,.0f} | {r['kept']:,} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,30000,100000")
    ap.add_argument("--chunk-size", type=int, default=1000)
    ap.add_argument("--pieces", type=int, default=5000)
    ap.add_argument("--copy-paste", type=int, default=300)
    ap.add_argument("--child", nargs=4, metavar=("ROOT", "N", "RULE", "TAG"), help=argparse.SUPPRESS)
    ap.add_argument("--pieces-child", nargs=2, metavar=("ROOT", "N"), help=argparse.SUPPRESS)
    ap.add_argument("--decode-only", type=int, default=0, metavar="N",
                    help="only the decode stage at 512 and 1024 px into the MiewID and CLIP protocols, N images")
    args = ap.parse_args()
    if args.decode_only:
        print(f"{T.machine()}; decode_paths on one thread\n\n"
              "| source | protocol | images | wall ms/image | CPU ms/image | img/s per core (CPU) |\n"
              "|---|---|---|---|---|---|")
        with tempfile.TemporaryDirectory() as tmp:
            print("\n".join(decode_rates(Path(tmp), args.decode_only)))
        print(f"\nload average after: {T.load()}")
        return
    if args.child:
        root, n, rule, tag = args.child
        print(json.dumps(child(Path(root), Path(root) / "ws", int(n), args.chunk_size, rule, tag)))
        return
    if args.pieces_child:
        print(json.dumps(pieces(Path(args.pieces_child[0]), int(args.pieces_child[1]))))
        return
    sizes = sorted(int(s) for s in args.sizes.split(","))
    print(f"{T.machine()}; sizes {sizes}; chunk {args.chunk_size}; encoder pixels-16; 32x32 JPEG queries", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        prepare(root, max(sizes), sizes + [args.copy_paste])
        print("\n| images | total s | end to end img/s | " + " | ".join(f"{s} img/s (s)" for s in STAGES)
              + " | other s | peak RSS MiB | kept |")
        print("|---|---|---|" + "---|" * len(STAGES) + "---|---|---|", flush=True)
        warm = run_child(["--chunk-size", str(args.chunk_size), "--child", str(root), str(args.copy_paste),
                          "top1 and ap >= 0.5", "warm"])  # numba compiles its kernels once (cached on disk)
        print(f"| warm-up: {warm['n']} images, {warm['total']:.1f} s (numba compiles; not counted) |", flush=True)
        for n in sizes:
            r = run_child(["--chunk-size", str(args.chunk_size), "--child", str(root), str(n),
                           "top1 and ap >= 0.5", "plain"])
            print(row(r) + f"  <!-- load {T.load()} -->", flush=True)
        p = run_child(["--pieces-child", str(root), str(min(args.pieces, max(sizes)))])
        print(f"\none thread, first {p['n']:,} queries: decode_paths {p['n'] / p['decode']:,.0f} img/s "
              f"({p['decode']:.1f} s), embed_decoded (forward) {p['n'] / p['forward']:,.0f} img/s "
              f"({p['forward']:.1f} s); load {T.load()}", flush=True)
        if args.copy_paste:
            r = run_child(["--chunk-size", str(args.chunk_size), "--child", str(root), str(args.copy_paste),
                           "top1 and ap >= 0.5 and not copy_paste", "copy"])
            print("\nwith the copy-paste scorer:\n" + row(r) + f"  <!-- load {T.load()} -->", flush=True)
    print(f"\nload average after: {T.load()}")


if __name__ == "__main__":
    main()
