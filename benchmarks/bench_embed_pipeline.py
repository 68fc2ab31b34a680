"""Embedding pipeline vs the model's own batched forward (same model, batch size, device).

forward (the anchor): the encoder's network on ready batches of ``--batch-size`` (decoded and
preprocessed beforehand, not timed), torch's default threads -- the fastest a user's own loop
gets, with bits that depend on the batch; forward-nhwc: the same with the batches in channels-last
layout (what the anchor gains from the layout alone); protocol: ``Encoder.embed_batch`` on ready
batches of cores x 32 (fpr's CPU forward, fpr.encoders.cpu_forward: zero-padded micro-batches of
32, channels-last, one thread each, one per core at once; bits independent of batch, position and
thread count; a call of 32 images is one micro-batch, one core); pipeline: ``embed_paths`` from
files (hash, read once, decode + protocol + forward per micro-batch in a thread per core,
normalise), no cache, default decoding. ``x/forward`` = forward time / x time (1.0 = as fast as
the anchor). The four are timed in rotating order in each of ``--rounds`` rounds: median and
spread (min-max) of the per-round ratios. ``--load-procs K``
runs K busy single-threaded processes throughout (another job on the machine).

Encoders: the shipped built-in CNNs, a random-init resnet18 at 224 px, and ``pixels-16`` (no
network: the pipeline's own cost shows). Images: ``world96`` renders of the built-in world (96 px
PNGs); ``jpeg256`` 256 px JPEGs of colour noise (the slowest content to decode). ``decode`` is
the decode + protocol CPU time per image in one thread; ``bound`` = cores x forward /
(cores x forward + decode), the ratio if decoding simply added its CPU time to a forward that
used all cores as well as the anchor does (the pipeline can beat it: one thread per micro-batch
wastes no time at barriers, and channels-last saves the layout reorders). ``cpu ms/img``: the
process's CPU time per image (all its threads; torch's waiting threads spin, so under load the
multi-threaded anchor's grows with the wait), the work a path costs whatever the scheduling.

    python benchmarks/bench_embed_pipeline.py [--n 512] [--n-cnn 96] [--batch-size 32] [--rounds 3]
        [--only fpr-world-v3,bench-resnet18] [--load-procs 1]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
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
from fpr.encoders.cpu_forward import CPU_FORWARD, CPU_MICROBATCH  # noqa: E402
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


def _load_proc(stop_after: float) -> subprocess.Popen:
    """A process that keeps one core busy with NumPy matmuls (single-threaded), like another job."""
    code = ("import os,time;os.environ['OPENBLAS_NUM_THREADS']='1';import numpy as np;"
            f"a=np.ones((256,256));t=time.time()\nwhile time.time()-t<{stop_after}: a@a")
    return subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})


def measure(enc_id: str, data: str, paths: list[str], args) -> dict:
    """Three paths on the same images, interleaved round by round (the order rotates):

    forward: the anchor, the encoder's network called on ready batches of ``--batch-size`` with
    torch's default threads (what a user's own loop would do; its bits depend on the batch);
    protocol: ``Encoder.embed_batch`` on the same ready batches (fpr's batch-independent CPU
    forward, fpr.encoders.cpu_forward, + normalisation); pipeline: ``embed_paths`` from the files
    (hash, read, decode + protocol, forward, normalise), no cache."""
    enc = load_encoder(enc_id, device=args.device)
    n = len(paths)
    imgs = torch.stack([enc.preprocessing(decode_rgb(read_bytes(p))) for p in paths])
    if enc.device.type == "cuda":
        imgs = imgs.pin_memory()
    dec = decode_ms(enc, paths[:64])
    b = args.batch_size

    def sync() -> None:
        if enc.device.type == "cuda":
            torch.cuda.synchronize()

    def forward() -> np.ndarray:
        with torch.inference_mode():
            out = [enc.model(imgs[s:s + b].to(enc.device)) for s in range(0, n, b)]
        sync()
        return torch.cat(out).float().cpu().numpy()

    def forward_nhwc() -> np.ndarray:
        with torch.inference_mode():
            out = [enc.model(imgs[s:s + b].to(enc.device).contiguous(memory_format=torch.channels_last))
                   for s in range(0, n, b)]
        sync()
        return torch.cat(out).float().cpu().numpy()

    pb = (os.cpu_count() or 1) * CPU_MICROBATCH if enc.device.type == "cpu" else b

    def protocol() -> np.ndarray:
        out = np.concatenate([enc.embed_batch(imgs[s:s + pb]) for s in range(0, n, pb)])
        sync()
        return out

    def pipeline() -> np.ndarray:
        return E.embed_paths(enc, paths, batch_size=b, workers=args.workers, cache=None).vectors

    timed = {"forward": forward, "forward-nhwc": forward_nhwc, "protocol": protocol, "pipeline": pipeline}
    for f in timed.values():  # warm-up
        f()
    times: dict[str, list[float]] = {k: [] for k in timed}
    cpu: dict[str, list[float]] = {k: [] for k in timed}  # process CPU time (all threads, spinning included)
    outs: dict[str, np.ndarray] = {}
    load_before = load()
    names = list(timed)
    for r in range(args.rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            c, t = time.process_time(), time.perf_counter()
            outs[k] = timed[k]()
            times[k].append(time.perf_counter() - t)
            cpu[k].append(time.process_time() - c)
    if enc.device.type != "cuda":
        assert outs["protocol"].tobytes() == outs["pipeline"].tobytes(), "pipeline and protocol forward disagree"
    med = {k: statistics.median(v) for k, v in times.items()}

    def ratio(k: str) -> tuple[float, str]:
        rs = [f / x for f, x in zip(times["forward"], times[k])]
        return statistics.median(rs), f"{min(rs):.2f}-{max(rs):.2f}"

    cores = os.cpu_count() or 1
    fwd = med["forward"] / n * 1e3
    (rp, sp), (rq, sq), (rc, _) = ratio("pipeline"), ratio("protocol"), ratio("forward-nhwc")
    return {"encoder": enc_id, "images": data, "n": n, "device": enc.device.type, "decode ms/img": dec,
            "forward ms/img": fwd, "nhwc/forward": rc, "protocol ms/img": med["protocol"] / n * 1e3,
            "pipeline ms/img": med["pipeline"] / n * 1e3, "protocol/forward": rq, "spread ": sq,
            "pipeline/forward": rp, "spread": sp, "bound": cores * fwd / (cores * fwd + dec),
            "cpu ms/img forward|protocol|pipeline": "|".join(
                f"{statistics.median(cpu[k]) / n * 1e3:.2f}" for k in ("forward", "protocol", "pipeline")),
            "load": f"{load_before} -> {load()}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--n-cnn", type=int, default=96)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=None, help="decode processes (default: the pipeline's own)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--only", default="", help="comma-separated encoder ids to run (default: all)")
    ap.add_argument("--load-procs", type=int, default=0,
                    help="start this many busy single-threaded processes for the whole run (another job's load)")
    args = ap.parse_args()
    loaders = [_load_proc(3600) for _ in range(args.load_procs)]
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
    print("command: python benchmarks/bench_embed_pipeline.py " + " ".join(sys.argv[1:]))
    print(f"protocol {CPU_FORWARD}; cores {os.cpu_count()}, torch threads {torch.get_num_threads()}, "
          f"workers {'default' if args.workers is None else args.workers}, "
          f"batch {args.batch_size}, {args.rounds} rounds; load (1/5/15 min) at start {load()}", flush=True)
    cols = ["encoder", "images", "n", "device", "decode ms/img", "forward ms/img", "nhwc/forward", "protocol ms/img",
            "pipeline ms/img", "protocol/forward", "spread ", "pipeline/forward", "spread", "bound",
            "cpu ms/img forward|protocol|pipeline", "load"]
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols), flush=True)
    for enc_id, data in plan:
        paths = world if data == "world96" else jpegs[:args.n_cnn if enc_id == "bench-resnet18" else args.n]
        row = measure(enc_id, data, paths, args)
        print("| " + " | ".join(f"{row[c]:.2f}" if isinstance(row[c], float) else str(row[c]) for c in cols) + " |",
              flush=True)
    for p in loaders:
        p.kill()


if __name__ == "__main__":
    main()
