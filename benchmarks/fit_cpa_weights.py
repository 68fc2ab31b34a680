"""Fit vistar-cpa's weights (count, posture, expression) to human pairwise preferences.

    python benchmarks/fit_cpa_weights.py --pairs PAIRS.csv --out fpr/scorers/vistar/data/cpa_weights.json
    python benchmarks/fit_cpa_weights.py --check [--out benchmarks/results/cpa_weight_fit.md]

PAIRS.csv: one row per judged pair of images of the same prompt, columns ``a_count, a_posture,
a_expression, b_count, b_posture, b_expression`` (each image's vistar-cpa ``*_match`` values;
empty = not annotated) and ``preferred`` (``a``, ``b`` or ``tie``; ties are dropped, as VISTAR's
PPA does). The weights maximise strict PPA on a 0.05 simplex grid
(:func:`fpr.metrics.weight_fit.fit_ppa_weights`); the weights file records where they came from.

``--check`` validates the fitter on known answers: simulated judges who prefer by a hidden weight
vector (plus noise) on seed 0's pairs; the fit must reach the hidden weights' PPA there, and is
then scored on seed 1's pairs from the same judges.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from fpr.metrics.weight_fit import fit_ppa_weights, strict_ppa, weighted_scores

DIMS = ("count", "posture", "expression")
HIDDEN = ((0.2, 0.3, 0.5), (0.6, 0.2, 0.2), (0.1, 0.8, 0.1))


def read_pairs(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    df = pd.read_csv(path)
    need = [f"{s}_{d}" for s in "ab" for d in DIMS] + ["preferred"]
    missing = [c for c in need if c not in df.columns]
    if missing:
        sys.exit(f"error: {path} lacks column(s) {', '.join(missing)} -- columns: {', '.join(need)}")
    pref = df["preferred"].astype(str).str.strip().str.lower()
    bad = ~pref.isin(["a", "b", "tie"])
    if bad.any():
        sys.exit(f"error: {path} row {int(bad.to_numpy().argmax()) + 2}: preferred must be a, b or tie")
    keep = (pref != "tie").to_numpy()
    a = df[[f"a_{d}" for d in DIMS]].to_numpy(float)[keep]
    b = df[[f"b_{d}" for d in DIMS]].to_numpy(float)[keep]
    return a, b, (pref[keep] == "a").to_numpy()


def simulate(seed: int, n: int, hidden: tuple[float, ...], noise: float = 0.1) -> tuple[np.ndarray, ...]:
    """Pairs of match vectors (count 0/1, posture and expression shares in quarters) and the preference of a
    judge who scores by ``hidden`` weights plus Gaussian noise; exact judge ties are dropped."""
    rng = np.random.default_rng(seed)
    a = np.column_stack([rng.integers(0, 2, n), rng.integers(0, 5, n) / 4, rng.integers(0, 5, n) / 4]).astype(float)
    b = np.column_stack([rng.integers(0, 2, n), rng.integers(0, 5, n) / 4, rng.integers(0, 5, n) / 4]).astype(float)
    w = np.asarray(hidden)[None, :]
    da = a @ w.T + rng.normal(0, noise, (n, 1))
    db = b @ w.T + rng.normal(0, noise, (n, 1))
    keep = (da != db)[:, 0]
    return a[keep], b[keep], (da > db)[keep, 0]


def ppa_of(weights, a, b, pref) -> float:
    w = np.asarray([weights], float)
    return float(strict_ppa(weighted_scores(a, w), weighted_scores(b, w), pref)[0])


def check(n: int) -> str:
    lines = ["# vistar-cpa weight fit: known answers", "",
             f"`python benchmarks/fit_cpa_weights.py --check` ({time.strftime('%Y-%m-%d')}). Simulated judges "
             f"prefer by hidden weights plus N(0, 0.1) noise; {n} pairs per seed (count match 0/1, posture and "
             f"expression shares in quarters). Fit on seed 0, checked on seed 1.", "",
             "| hidden (c, p, e) | fitted (c, p, e) | PPA seed 0: hidden / fitted / equal | "
             "PPA seed 1: hidden / fitted / equal |", "|---|---|---|---|"]
    for hidden in HIDDEN:
        a0, b0, p0 = simulate(0, n, hidden)
        a1, b1, p1 = simulate(1, n, hidden)
        fit = fit_ppa_weights(a0, b0, p0)
        eq = (1 / 3,) * 3
        lines.append(f"| {hidden} | {tuple(round(x, 2) for x in fit.weights)} | "
                     f"{ppa_of(hidden, a0, b0, p0):.3f} / {fit.ppa:.3f} / {ppa_of(eq, a0, b0, p0):.3f} | "
                     f"{ppa_of(hidden, a1, b1, p1):.3f} / {ppa_of(fit.weights, a1, b1, p1):.3f} / "
                     f"{ppa_of(eq, a1, b1, p1):.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=Path)
    ap.add_argument("--check", action="store_true", help="validate the fitter on simulated judges")
    ap.add_argument("--n", type=int, default=2000, help="pairs per seed for --check")
    ap.add_argument("--step", type=float, default=0.05)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.check:
        text = check(args.n)
    elif args.pairs:
        if not args.pairs.is_file():
            sys.exit(f"error: pairs file not found ({args.pairs}) -- give a CSV of judged pairs")
        a, b, pref = read_pairs(args.pairs)
        if len(a) == 0:
            sys.exit(f"error: {args.pairs} has no pair with a preference -- ties are dropped")
        fit = fit_ppa_weights(a, b, pref, args.step)
        text = json.dumps({"weights": dict(zip(DIMS, fit.weights)), "provenance": {
            "source": f"fitted by benchmarks/fit_cpa_weights.py to maximise strict PPA (simplex grid, step {args.step})",
            "fitted_on": {"file": args.pairs.name, "sha256": hashlib.sha256(args.pairs.read_bytes()).hexdigest(),
                          "pairs": fit.pairs, "ppa": round(fit.ppa, 4), "equal_weights_ppa": round(fit.equal_ppa, 4),
                          "date": time.strftime("%Y-%m-%d")},
            "command": f"python benchmarks/fit_cpa_weights.py --pairs {args.pairs.name} --step {args.step}"}},
            indent=2) + "\n"
    else:
        sys.exit("error: give --pairs PAIRS.csv (or --check) -- see --help")
    print(text, end="")
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
