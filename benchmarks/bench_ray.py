"""Embedding throughput: the local engine vs ``--engine ray`` with 1 and 2 actors, on this machine.

Each configuration embeds the same N images with a cold embedding cache (a fresh
``FPR_CACHE_DIR`` per run) through ``fpr.api.embed``; the Ray runs use one local
Ray runtime started once before timing (its start-up is printed apart). Encoders:
the built-in ``fpr-world-v2`` (the demo encoder, 96 px) and a random-init
``resnet18`` at 224 px (timm, no download; the CPU cost of a real 224 px CNN).

    python benchmarks/bench_ray.py [--images 48,192] [--rounds 2] [--out benchmarks/results/ray.md]

Configurations: ``local`` (torch's default threads, DataLoader decode workers as
chosen by fpr), ``local-1t`` (one torch thread, decoding in the same process: the
resources of one Ray actor, which gets ``OMP_NUM_THREADS`` = its 1 CPU), ``ray`` with
1 and 2 actors, each at two sizes N1 < N2. Ray's extra time over ``local-1t`` (the same
work on the same resources) is split into a fixed part per command (the actors'
start, shipping the encoder) and a part per image (object store, task scheduling,
shard files): extra(N) = fixed + N x per-image, from the two sizes (medians). Each size runs
``--rounds`` rounds of all four configurations, the order rotated each round
(benchmarks/_timing.py): seconds median [min - max], the ratio to ``local`` round by round,
the load average before and after. Physical limit: the resnet18 rows' compute rate (counted
FLOPs x images / median seconds) against a torch 2048^3 sgemm measured in the same run.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("FPR_QUIET", "1")

import fpr.api as api  # noqa: E402
from fpr.engines import ray_runtime  # noqa: E402
import _timing as T  # noqa: E402


def make_images(root: Path, n: int, size: int = 96) -> list[str]:
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        arr = np.clip(rng.uniform(0, 255, size=3) + rng.normal(0, 50, size=(size, size, 3)), 0, 255).astype(np.uint8)
        p = root / f"{i:05d}.jpg"
        Image.fromarray(arr).save(p, quality=90)
        paths.append(str(p))
    return paths


def embed(encoder: str, paths: list[str], cache_root: Path, threads: int | None = None, **kwargs) -> np.ndarray:
    import torch

    os.environ["FPR_CACHE_DIR"] = str(cache_root)
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return api.embed(encoder, paths, device="cpu", **kwargs).vectors
    finally:
        torch.set_num_threads(before)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", default="48,192", help="Two sizes (comma): fixed and per-image overhead.")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shard-size", type=int, default=16)
    ap.add_argument("--encoders", default="fpr-world-v2,bench-resnet18")
    ap.add_argument("--out", default=None, help="Also write the table (markdown) here.")
    args = ap.parse_args()
    from bench_ablate import register_resnet18, resnet18_gflop

    register_resnet18()
    import ray
    import torch

    sizes = [int(x) for x in str(args.images).split(",")]
    lines = ["# Ray engine vs local: embedding throughput on this machine",
             "",
             f"{os.cpu_count()} CPU cores shared with other work (load average {T.load()} at the start), "
             f"torch {torch.__version__} with {torch.get_num_threads()} threads locally, Ray {ray.__version__}; "
             f"96 px JPEG inputs, cold embedding cache, shards of {args.shard_size}; seconds, median [min - max] "
             f"of {args.rounds} interleaved rounds (order rotated each round)."]
    t = time.perf_counter()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
             runtime_env=ray_runtime.local_runtime_env())
    startup = time.perf_counter() - t
    lines.append(f"Ray local runtime start-up (once per command when no cluster is given; not in the times "
                 f"below): {startup:.1f} s.")
    peak = T.sgemm_gflops(backend="torch")
    gflop = resnet18_gflop()
    lines.append(f"Physical limit: torch sgemm 2048^3 {peak.fmt('.1f')} GFLOP/s in this run; resnet18 "
                 f"{gflop:.2f} GFLOP per 224 px image (counted); the last column is the resnet18 rows' compute "
                 f"rate over the sgemm rate.")
    lines += ["", "| encoder | images | engine | actors | wall s | images/s (median) | x local per round | "
                  "compute / sgemm |", "|---|---|---|---|---|---|---|---|"]
    configs = [("local", None), ("local-1t", None), ("ray", 1), ("ray", 2)]
    overhead = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "img").mkdir()
        all_paths = make_images(root / "img", max(sizes))
        for encoder in [e.strip() for e in args.encoders.split(",") if e.strip()]:
            med: dict = {}
            for n in sizes:
                paths = all_paths[:n]
                ref: list = []
                calls = iter(range(10 ** 6))

                def contender(engine, actors, paths=paths, n=n):
                    kw = {"engine": "ray", "ray": {"actors": actors, "shard_size": args.shard_size}} \
                        if engine == "ray" else ({"threads": 1, "workers": 0} if engine == "local-1t" else {})
                    return lambda: embed(encoder, paths, root / f"cache-{encoder}-{n}-{next(calls)}", **kw)

                def same(name, vecs):
                    if not ref:
                        ref.append(vecs)
                    elif not np.array_equal(ref[0], vecs):
                        raise SystemExit(f"{encoder} {name}: embeddings differ from the first run's")

                times = T.interleaved({c: contender(*c) for c in configs}, args.rounds, check=same)
                for engine, actors in configs:
                    t = times[(engine, actors)]
                    med[(n, engine, actors)] = T.spread(t).median
                    per_s = n / T.spread(t).median
                    limit = f"{per_s * gflop / peak.median:.2f}" if encoder == "bench-resnet18" else "-"
                    lines.append(f"| {encoder} | {n} | {engine} | {actors or '-'} | {T.spread(t).fmt('.2f')} | "
                                 f"{per_s:.1f} | {T.ratios(times[('local', None)], t).fmt('.2f')} | {limit} |")
                    print(lines[-1], flush=True)
            if len(sizes) >= 2:  # Ray's cost = fixed (actor start, shipping the encoder) + per image
                n1, n2 = sizes[0], sizes[-1]
                extra1 = med[(n1, "ray", 1)] - med[(n1, "local-1t", None)]
                extra2 = med[(n2, "ray", 1)] - med[(n2, "local-1t", None)]
                per_image = (extra2 - extra1) / (n2 - n1)
                overhead.append(f"| {encoder} | {extra1 - n1 * per_image:.2f} | {per_image * 1e3:.1f} | "
                                f"{extra2 / n2 * 1e3:.1f} |")
    if overhead:
        lines += ["", "Ray's overhead against the same work on the same resources (Ray, 1 actor = 1 CPU, vs "
                      "local-1t = one torch thread, decoding in process), from the two sizes: "
                      "extra(N) = fixed + N x per image.", "",
                  "| encoder | fixed s per command | per image ms | overall ms/image at the larger size |",
                  "|---|---|---|---|", *overhead]
    ray.shutdown()
    lines += ["", "All runs' embeddings were checked equal (bit for bit) to the first run's of their size.",
              f"Load average at the end: {T.load()}."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
