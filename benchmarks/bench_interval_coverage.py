"""Coverage of fpr's seeded percentile-bootstrap 95% interval of a mean, by number of queries.

Why: a summary row's interval is only worth printing where it covers the true mean about
95% of the time. For each n, ``--reps`` samples of n per-query values are drawn from a
known distribution (so the true mean is known), fpr's interval (the same function the
summaries use, :func:`fpr.metrics.summary.bootstrap_ci`, 1000 resamples) is computed for
each, and the share of intervals that contain the true mean is printed. Distributions:
AP-like Beta(5, 1.5) (mean 0.77, skewed to 1), bimodal Beta(0.5, 0.5) (hit-or-miss queries),
and a 0/1 outcome with p = 0.8 (CMC@1, a copy-paste flag). Calibration on ``--seed 0``, checked
on ``--seed 1``; :data:`fpr.metrics.summary.MIN_QUERIES_FOR_INTERVAL` is chosen from it.

    python benchmarks/bench_interval_coverage.py [--reps 1000] [--seed 0]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fpr.metrics.summary import bootstrap_ci  # noqa: E402

DISTRIBUTIONS = {
    "beta(5,1.5)": (lambda rng, n: rng.beta(5, 1.5, n), 5 / 6.5),
    "beta(0.5,0.5)": (lambda rng, n: rng.beta(0.5, 0.5, n), 0.5),
    "bernoulli(0.8)": (lambda rng, n: (rng.random(n) < 0.8).astype(float), 0.8),
}
SIZES = (2, 3, 4, 5, 6, 8, 10, 15, 20, 30)


def coverage(draw, truth: float, n: int, reps: int, seed: int) -> float:
    rng = np.random.default_rng([seed, n])
    hits = 0
    for r in range(reps):
        lo, hi = bootstrap_ci(draw(rng, n), seed=seed, key=("coverage", str(n), str(r)))
        hits += lo <= truth <= hi
    return hits / reps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"coverage of the 95% interval ({args.reps} samples per cell, seed {args.seed})")
    print("| n | " + " | ".join(DISTRIBUTIONS) + " |")
    print("|---|" + "---|" * len(DISTRIBUTIONS))
    for n in SIZES:
        cells = [coverage(draw, truth, n, args.reps, args.seed) for draw, truth in DISTRIBUTIONS.values()]
        print(f"| {n} | " + " | ".join(f"{c:.3f}" for c in cells) + " |", flush=True)


if __name__ == "__main__":
    main()
