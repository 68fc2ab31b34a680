"""mAP engine vs a per-query loop, on Q x G similarity matrices, timed the same way.

The engine is timed on the path ``run_query`` uses: ``retrieval_metrics(scores, rel)`` with a boolean
relevance mask (both engines: the numba kernel and the NumPy fallback; their AP must be the same bits).
The anchor, in the same process on the same matrices and mask, interleaved round by round with the
same repetitions: the per-query loop (argsort each query's row, cumulative hits / rank: the style of
the paper's released evaluation scripts; it ignores ties, so on tie-free float scores it agrees with
the exact definition). scikit-learn's ``average_precision_score`` checks the values on a sample.

Data: L2-normalised embeddings of ``n_identities`` identities (G/n_identities
images each) at a noise level that gives a realistic mAP; queries are noisy
views of random identities. A second, adversarial case uses i.i.d. Gaussian
scores (relevant items anywhere in the ranking), the engine's worst case.

    python benchmarks/bench_map.py [--sizes 1000,5000,20000] [--rounds 5] [--sklearn-sample 300]
                                   [--cases embedding,gaussian]
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
from fpr.metrics import ranking as M  # noqa: E402


def per_query_loop(scores: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """The paper-style loop: per query, argsort the row, cumulative hits / rank at each hit."""
    aps = np.empty(len(scores))
    for i in range(len(scores)):
        order = np.argsort(-scores[i])
        hits = rel[i][order]
        cum = np.cumsum(hits)
        aps[i] = (cum / np.arange(1, len(hits) + 1))[hits].sum() / hits.sum()
    return aps


def sklearn_per_query(scores: np.ndarray, rel: np.ndarray) -> np.ndarray:
    from sklearn.metrics import average_precision_score

    return np.array([average_precision_score(rel[i], scores[i]) for i in range(len(scores))])


def timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def spread(xs: list[float], fmt: str = "{:.4f}") -> str:
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"


def make_case(kind: str, q: int, g: int, n_identities: int, seed: int):
    rng = np.random.default_rng(seed)
    g_labels = np.repeat(np.arange(n_identities), int(np.ceil(g / n_identities)))[:g]
    q_labels = rng.integers(0, n_identities, q)
    if kind == "gaussian":
        # drawn in blocks of rows into float32: the same values as one float64 (q, g) draw cast afterwards
        # (the generator's stream is sequential), without holding that float64 matrix (3.2 GB at 20k)
        scores = np.empty((q, g), dtype=np.float32)
        for start in range(0, q, 1024):
            scores[start:start + 1024] = rng.standard_normal((min(1024, q - start), g))
        return scores, q_labels, g_labels
    dim = 128
    centers = rng.standard_normal((n_identities, dim))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)

    def views(labels):
        x = centers[labels] + 0.12 * rng.standard_normal((len(labels), dim))
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    return views(q_labels) @ views(g_labels).T, q_labels, g_labels


def engine(name: str, scores: np.ndarray, rel: np.ndarray):
    """The mask path ``run_query`` uses (fpr.eval.scoring: ``retrieval_metrics(scores, rel)``), one engine."""
    M.ENGINE = name
    try:
        return M.retrieval_metrics(scores, rel)
    finally:
        M.ENGINE = "auto"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,5000", help="Q = G sizes, comma separated (20000: minutes per round)")
    ap.add_argument("--identities", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds; every contender runs once per round")
    ap.add_argument("--sklearn-sample", type=int, default=300,
                    help="queries checked with scikit-learn (values only, not timed)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", default="embedding,gaussian", help="which score cases, comma separated")
    args = ap.parse_args()

    M.retrieval_metrics(np.zeros((2, 3), np.float32), np.zeros((2, 3), bool))  # JIT warm-up, outside the timing
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores; "
          f"identities={args.identities}; seconds median [min-max] of {args.rounds} interleaved rounds, each "
          f"contender once per round (order rotated); ratios per round")
    print(f"{'case':<10} {'Q=G':>6} {'kernel s':>22} {'numpy s':>22} {'loop s':>22} {'loop/kernel':>20} "
          f"{'loop/numpy':>20} {'mAP':>6} {'max|d| sk':>10} {'max|d| loop':>11}")
    for n in [int(x) for x in args.sizes.split(",")]:
        for kind in args.cases.split(","):
            scores, ql, gl = make_case(kind, n, n, args.identities, args.seed)
            rel = ql[:, None] == gl[None, :]  # the relevance mask, built outside the timing as run_query does
            fns = {"kernel": lambda: engine("numba", scores, rel), "numpy": lambda: engine("numpy", scores, rel),
                   "loop": lambda: per_query_loop(scores, rel)}
            names = list(fns)
            t: dict[str, list[float]] = {k: [] for k in names}
            out = {}
            for r in range(args.rounds):
                for name in names[r % 3:] + names[:r % 3]:
                    secs, out[name] = timed(fns[name])
                    t[name].append(secs)
            m, m_np, loop_ap = out["kernel"], out["numpy"], out["loop"]
            np.testing.assert_array_equal(m.ap, m_np.ap)  # the two engines: the same bits
            n_sk = min(args.sklearn_sample, n)
            d_sk = float(np.abs(m.ap[:n_sk] - sklearn_per_query(scores[:n_sk], rel[:n_sk])).max())
            d_loop = float(np.abs(m.ap - loop_ap).max())
            r_k = [a / b for a, b in zip(t["loop"], t["kernel"])]
            r_n = [a / b for a, b in zip(t["loop"], t["numpy"])]
            print(f"{kind:<10} {n:6d} {spread(t['kernel']):>22} {spread(t['numpy']):>22} {spread(t['loop']):>22} "
                  f"{spread(r_k, '{:.1f}'):>20} {spread(r_n, '{:.2f}'):>20} {np.mean(m.ap):6.3f} {d_sk:10.1e} "
                  f"{d_loop:11.1e}", flush=True)
            del scores, rel
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
