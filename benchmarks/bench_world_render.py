"""Throughput of the built-in world's renderer, against a baseline measured in the same run.

Baseline: what a real-image pipeline does per image -- decode a PNG of the same
size from memory and convert it to RGB. The ratio (render rate / decode rate)
is what transfers between machines; the absolute rates depend on the CPU and on
whatever else runs on it.

    .venv/bin/python benchmarks/bench_world_render.py [--size 96] [--n 600] [--procs 2]
"""
from __future__ import annotations

import argparse
import io
import os
import time
from concurrent.futures import ProcessPoolExecutor

from PIL import Image


def _warm(size: int) -> None:
    from fpr.galleries.world import SPECIES, render_identity

    # fill the marking caches: steady state is what training and galleries see
    for i in range(30):
        render_identity(SPECIES[i % 3], 1_000_000 + i, "warm", size=size)


def _render_chunk(args: tuple[int, int, int]) -> tuple[int, float]:
    from fpr.galleries.world import SPECIES, render_identity

    start, n, size = args
    _warm(size)  # no-op after the first call in a process (cached)
    t = time.perf_counter()
    for i in range(start, start + n):
        render_identity(SPECIES[i % 3], 1_000_000 + i % 30, i, size=size)
    return n, time.perf_counter() - t


def bench(size: int, n: int, procs: int) -> dict:
    from fpr.galleries.world import SPECIES, render_identity

    # baseline: decode PNGs of rendered images (same size) + convert to RGB
    blobs = []
    for i in range(30):
        buf = io.BytesIO()
        render_identity(SPECIES[i % 3], 1_000_000 + i, "blob", size=size).save(buf, format="PNG")
        blobs.append(buf.getvalue())
    t = time.perf_counter()
    for i in range(n):
        with Image.open(io.BytesIO(blobs[i % len(blobs)])) as im:
            im.convert("RGB").load()
    decode_rate = n / (time.perf_counter() - t)

    _, dt = _render_chunk((0, n, size))
    single = n / dt
    multi = None
    if procs > 1:
        per = n // procs
        with ProcessPoolExecutor(procs, initializer=_warm, initargs=(size,)) as pool:
            list(pool.map(_render_chunk, [(0, 1, size)] * procs))  # start and warm every process
            t = time.perf_counter()
            done = sum(k for k, _ in pool.map(_render_chunk, [(j * per, per, size) for j in range(procs)]))
            multi = done / (time.perf_counter() - t)  # wall-clock throughput of all processes together
    return {"size": size, "n": n, "render_img_s_1proc": single, f"render_img_s_{procs}proc": multi,
            "baseline_png_decode_img_s": decode_rate, "ratio_render_over_decode": single / decode_rate,
            "cpus": os.cpu_count()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--procs", type=int, default=2)
    a = ap.parse_args()
    r = bench(a.size, a.n, a.procs)
    for k, v in r.items():
        print(f"{k}: {v:.1f}" if isinstance(v, float) else f"{k}: {v}")
    print(f"ratio (render / PNG decode, 1 process): {r['ratio_render_over_decode']:.3f}")


if __name__ == "__main__":
    main()
