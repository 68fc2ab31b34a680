"""Exact scores (fpr.index.exact) vs the old float32 ``q @ v.T`` on realistic block sizes.

Both run in the same process on the same arrays, in interleaved rounds (old, exact, old,
exact, ...) with the same repetitions, so a change in machine load hits both. Printed per
case: median [min-max] seconds of each, the ratio of medians, how many elements took the
fsum fallback, and the load average before and after. Then the same comparison end to end:
:func:`fpr.eval.pipeline.score_blocks` (AP, ranks, CMC, mINP, top-10; default blocks) with
the gallery vectors as an array (exact scores) vs a ``q @ v.T`` callable (the old numbers).

Data: two kinds of L2-normalised gallery and queries --
- "embedding-like": identities with noisy views (scores mostly 0.2-0.9, as real embeddings);
- "random": i.i.d. Gaussian directions (scores around 0, where float32 ulps are smallest and
  the fallback is most frequent: the worst case).

    python benchmarks/bench_exact_scores.py [--queries 256] [--gallery 50000] [--dims 128,512] [--rounds 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fpr.eval import pipeline as P  # noqa: E402
from fpr.index.exact import ScoreStats, exact_scores, norms  # noqa: E402


def data(kind: str, n_q: int, n_g: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if kind == "random":
        g = rng.normal(size=(n_g, dim)).astype(np.float32)
        q = rng.normal(size=(n_q, dim)).astype(np.float32)
    else:
        centres = rng.normal(size=(max(1, n_g // 20), dim)).astype(np.float32)
        g = centres[rng.integers(0, len(centres), n_g)] + 0.8 * rng.normal(size=(n_g, dim)).astype(np.float32)
        q = centres[rng.integers(0, len(centres), n_q)] + 0.8 * rng.normal(size=(n_q, dim)).astype(np.float32)
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return q, g


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} s [{min(xs):.3f}-{max(xs):.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=256)
    ap.add_argument("--gallery", type=int, default=50000)
    ap.add_argument("--dims", default="128,512")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()}  cpus: {os.cpu_count()}")
    for dim in [int(d) for d in args.dims.split(",")]:
        for kind in ("embedding-like", "random"):
            q, g = data(kind, args.queries, args.gallery, dim)
            ng = norms(g)  # an index keeps these (GalleryIndex.norms)
            exact_scores(q[:2], g[:2])  # compile the check pass outside the timings
            old_t, new_t = [], []
            stats = ScoreStats()
            for _ in range(args.rounds):
                old_t.append(timed(lambda: q @ g.T))
                new_t.append(timed(lambda: exact_scores(q, g, vector_norms=ng, stats=stats)))
            old, new = q @ g.T, exact_scores(q, g, vector_norms=ng)
            ratio = statistics.median(new_t) / statistics.median(old_t)
            print(f"{args.queries} x {args.gallery} x {dim} {kind}: float32 q @ v.T {spread(old_t)}, "
                  f"exact_scores {spread(new_t)}, ratio {ratio:.2f}x; fsum fallbacks "
                  f"{stats.fallbacks // args.rounds} of {stats.elements // args.rounds} elements per call; "
                  f"elements differing from float32 BLAS {int((old != new).sum())}, "
                  f"max |diff| {float(np.abs(old - new).max()):.2e}")
    end_to_end(args.queries * 4, args.gallery, 128, args.rounds)
    print(f"load average after: {os.getloadavg()}")


def end_to_end(n_q: int, n_g: int, dim: int, rounds: int) -> None:
    q, g = data("embedding-like", n_q, n_g, dim)
    ids = np.arange(n_g) % max(1, n_g // 20)
    labels = P.GalleryLabels(np.arange(n_g), np.zeros(n_g, object), ids.astype(object), np.zeros((0, dim)),
                             np.array([], object), np.array([], object), [], [""] * n_g)
    import pandas as pd

    codes = labels.codes(pd.DataFrame({"group": [0] * n_q, "identity": list(ids[:n_q].astype(object))}))
    ok = np.arange(n_q)
    old_t, new_t = [], []
    for _ in range(rounds):
        old_t.append(timed(lambda: P.score_blocks(q, ok, codes, "all", lambda x: x @ g.T, 10)))
        new_t.append(timed(lambda: P.score_blocks(q, ok, codes, "all", g, 10)))
    ratio = statistics.median(new_t) / statistics.median(old_t)
    print(f"score_blocks {n_q} x {n_g} x {dim} (scope all, top-10): float32 q @ v.T {spread(old_t)}, "
          f"exact {spread(new_t)}, ratio {ratio:.2f}x")


if __name__ == "__main__":
    main()
