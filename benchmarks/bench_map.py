"""mAP engine vs a per-query loop vs scikit-learn, on Q x G similarity matrices.

Baselines, run in the same process on the same matrices:
- per-query loop: argsort each query's row, cumulative hits / rank (the style of
  the paper's released evaluation scripts; it ignores ties, so on tie-free
  float scores it agrees with the exact definition);
- scikit-learn: ``average_precision_score`` per query.

Data: L2-normalised embeddings of ``n_identities`` identities (G/n_identities
images each) at a noise level that gives a realistic mAP; queries are noisy
views of random identities. A second, adversarial case uses i.i.d. Gaussian
scores (relevant items anywhere in the ranking), the engine's worst case.

    python benchmarks/bench_map.py [--sizes 1000,5000,20000] [--sklearn-sample 500]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fpr.metrics import ranking as M  # noqa: E402
from fpr.metrics.ranking import retrieval_metrics_labels  # noqa: E402


def per_query_loop(scores: np.ndarray, q_labels: np.ndarray, g_labels: np.ndarray) -> np.ndarray:
    aps = np.empty(len(scores))
    for i in range(len(scores)):
        order = np.argsort(-scores[i])
        hits = (g_labels == q_labels[i])[order]
        cum = np.cumsum(hits)
        aps[i] = (cum / np.arange(1, len(hits) + 1))[hits].sum() / hits.sum()
    return aps


def sklearn_per_query(scores: np.ndarray, q_labels: np.ndarray, g_labels: np.ndarray) -> np.ndarray:
    from sklearn.metrics import average_precision_score

    return np.array([average_precision_score(g_labels == q_labels[i], scores[i]) for i in range(len(scores))])


def best_of(fn, repeats: int):
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def make_case(kind: str, q: int, g: int, n_identities: int, seed: int):
    rng = np.random.default_rng(seed)
    g_labels = np.repeat(np.arange(n_identities), int(np.ceil(g / n_identities)))[:g]
    q_labels = rng.integers(0, n_identities, q)
    if kind == "gaussian":
        return rng.standard_normal((q, g)).astype(np.float32), q_labels, g_labels
    dim = 128
    centers = rng.standard_normal((n_identities, dim))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)

    def views(labels):
        x = centers[labels] + 0.12 * rng.standard_normal((len(labels), dim))
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    return views(q_labels) @ views(g_labels).T, q_labels, g_labels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,5000,20000", help="Q = G sizes, comma separated")
    ap.add_argument("--identities", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sklearn-sample", type=int, default=500,
                    help="queries timed and checked with scikit-learn (its time is scaled to Q)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    retrieval_metrics_labels(np.zeros((2, 3), np.float32), np.array([0, 1]), np.array([0, 1, 1]))  # JIT warm-up
    print(f"identities={args.identities} (engine times: best of {args.repeats}; numba kernel and NumPy fallback)")
    print(f"{'case':<10} {'Q=G':>6} {'kernel s':>9} {'numpy s':>8} {'loop s':>8} {'sklearn s':>10} {'x loop':>7} "
          f"{'numpy x loop':>12} {'x sklearn':>10} {'mAP':>6} {'max|d| sk':>10} {'max|d| loop':>11}")
    for n in [int(x) for x in args.sizes.split(",")]:
        for kind in ("embedding", "gaussian"):
            scores, ql, gl = make_case(kind, n, n, args.identities, args.seed)
            M.ENGINE = "numba"
            t_engine, m = best_of(lambda: retrieval_metrics_labels(scores, ql, gl), args.repeats)
            M.ENGINE = "numpy"
            t_numpy, m_np = best_of(lambda: retrieval_metrics_labels(scores, ql, gl), args.repeats)
            M.ENGINE = "auto"
            assert np.allclose(m.ap, m_np.ap, rtol=0, atol=1e-12)
            t_loop, loop_ap = best_of(lambda: per_query_loop(scores, ql, gl), 1)
            n_sk = min(args.sklearn_sample, n)
            t_sk, sk_ap = best_of(lambda: sklearn_per_query(scores[:n_sk], ql[:n_sk], gl), 1)
            t_sk_full = t_sk * n / n_sk
            d_sk = float(np.abs(m.ap[:n_sk] - sk_ap).max())
            d_loop = float(np.abs(m.ap - loop_ap).max())
            print(f"{kind:<10} {n:6d} {t_engine:9.4f} {t_numpy:8.3f} {t_loop:8.3f} {t_sk_full:10.2f} "
                  f"{t_loop / t_engine:7.1f} {t_loop / t_numpy:12.2f} {t_sk_full / t_engine:10.1f} {np.mean(m.ap):6.3f} "
                  f"{d_sk:10.1e} {d_loop:11.1e}", flush=True)
            del scores


if __name__ == "__main__":
    main()
