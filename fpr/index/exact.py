"""Gallery similarity as a function of the vectors alone, whatever BLAS computes it.

The score of a float32 query q and a float32 gallery vector g is defined as

    score(q, g) = float32(fl64(q . g))

the exact real dot product rounded to the nearest float64, then to float32 (zeros
are +0.0). It is a mathematical function of the two vectors, so it cannot depend on
the BLAS build, its kernel (``OPENBLAS_CORETYPE``, MKL, BLIS, FMA or not), its
thread count, or on which other queries share a block, a shard or a group.

Computed fast and still exactly: ``d = q64 @ g64.T`` through float64 BLAS. The
products of float32 numbers are exact in float64, so whatever order BLAS sums them
in, |d - q.g| <= gamma_D * sum_i |q_i g_i| <= gamma_D * |q| |g| with
gamma_D = D u / (1 - D u), u = 2^-53 (Higham, any summation tree; Cauchy-Schwarz).
With b at least that bound, q.g lies in [d - b, d + b]; rounding (to float64, then
to float32) is monotonic, so when float32(fl(d - b)) == float32(fl(d + b)) every
value of the interval -- fl64(q.g) included -- rounds to that float32, which is
the score. The rare elements where the two differ (a float32 rounding boundary
lies within b of d) are recomputed from the exact products with ``math.fsum``
(correctly rounded, so fl64(q.g) exactly; the compiled path runs a port of it). The norms only decide which path an
element takes, never its value. Not covered: a "BLAS" that does not sum the
products (Strassen-like dgemm; no standard BLAS does that).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fpr import settings

U = 2.0 ** -53
MAX_DIM = 1 << 30  # the slack in error_factor covers the roundings of the bound for dims below this
# float64 working set of one call beyond its float32 result: a chunk of gallery columns at a time.
WORK_BYTES = 32 * 2 ** 20
# "auto": the numba check pass when numba imports, else NumPy; "numba" / "numpy" force one (tests run both).
ENGINE = settings.get("FPR_SCORES_ENGINE")
_PAIR_BYTES = {"numba": 8, "numpy": 48}  # float64 bytes per (query, column) pair of a chunk, per engine


@dataclass
class ScoreStats:
    """Counts of one or more :func:`exact_scores` calls (for tests and benchmarks)."""

    elements: int = 0
    fallbacks: int = 0  # elements recomputed with math.fsum


def error_factor(dim: int) -> float:
    """c such that fl(fl(c * |q|) * |g|) >= gamma_D |q| |g| for norms computed by :func:`norms`.

    The slack 2^-20 covers the relative error of the computed norms (at most about gamma_D each)
    and of the two products, all far below 2^-20 for ``dim`` < :data:`MAX_DIM`.
    """
    if not 0 <= dim < MAX_DIM:
        raise ValueError(f"exact scores support dims below {MAX_DIM}, not {dim}")
    gamma = dim * U / (1 - dim * U)
    return gamma * (1 + 2.0 ** -20)


def norms(vectors: np.ndarray) -> np.ndarray:
    """(n,) float64 Euclidean norms of float32 rows: what :func:`exact_scores` bounds errors with.

    Any summation order is fine here: the norms only choose between the fast and the fsum path."""
    v = np.asarray(vectors, dtype=np.float32).astype(np.float64)
    return np.sqrt(np.einsum("ij,ij->i", v, v))


def exact_scores(queries: np.ndarray, vectors: np.ndarray, *, vector_norms: np.ndarray | None = None,
                 stats: ScoreStats | None = None, engine: str | None = None,
                 work_bytes: int = WORK_BYTES) -> np.ndarray:
    """(n, m) float32 scores float32(fl64(q . g)) of float32 queries (n, D) against vectors (m, D).

    ``vector_norms``: :func:`norms` of ``vectors``, when the caller keeps them (a gallery index).
    Memory beyond the result: about ``work_bytes`` (gallery columns are taken in chunks).
    Non-finite inputs are a ValueError: the score is not defined for them.
    """
    q = np.asarray(queries, dtype=np.float32)
    v = np.asarray(vectors, dtype=np.float32)
    if q.ndim != 2 or v.ndim != 2 or q.shape[1] != v.shape[1]:
        raise ValueError(f"exact scores need (n, D) and (m, D) vectors, got {q.shape} and {v.shape}")
    n, m, dim = len(q), len(v), q.shape[1]
    out = np.empty((n, m), dtype=np.float32)
    if not n or not m:
        return out
    q64 = q.astype(np.float64)
    nq = norms(q)
    ng = norms(v) if vector_norms is None else np.asarray(vector_norms, dtype=np.float64)
    if ng.shape != (m,):
        raise ValueError(f"vector_norms has shape {ng.shape}, expected ({m},)")
    if not (np.isfinite(nq).all() and np.isfinite(ng).all()):
        raise ValueError("exact scores are defined for finite vectors only (found NaN or inf)")
    kind = _engine(engine)
    bound_q = nq * error_factor(dim)
    step = int(max(1, min(m, work_bytes // (_PAIR_BYTES[kind] * n + 8 * dim))))
    fallbacks = 0
    for s in range(0, m, step):
        g64 = v[s:s + step].astype(np.float64)
        d = q64 @ g64.T
        fallbacks += _round_checked(d, q64, g64, bound_q, ng[s:s + step], out[:, s:s + step], kind)
    if stats is not None:
        stats.elements += n * m
        stats.fallbacks += fallbacks
    return out


def _engine(engine: str | None) -> str:
    choice = engine or ENGINE
    if choice not in ("auto", "numba", "numpy"):
        raise ValueError(f"unknown scores engine '{choice}' (valid: auto, numba, numpy)")
    if choice == "numpy":
        return "numpy"
    try:
        from fpr.index import _exact_kernels  # noqa: F401  (numba compiles on first use)
    except ImportError:
        if choice == "numba":
            raise
        return "numpy"
    return "numba"


def _round_checked(d: np.ndarray, q64: np.ndarray, g64: np.ndarray, bound_q: np.ndarray, ng: np.ndarray,
                   out: np.ndarray, kind: str) -> int:
    """Write the scores of one chunk into ``out``: float32(d) where the interval check proves it is
    the score, the fsum of the exact products elsewhere; returns how many took the fsum."""
    if kind == "numba":
        from fpr.index import _exact_kernels

        return int(_exact_kernels.round_checked(d, q64, g64, bound_q, ng, out))
    b = bound_q[:, None] * ng[None, :]
    lo = (d - b).astype(np.float32)
    rows, cols = np.nonzero(lo != (d + b).astype(np.float32))
    np.add(lo, np.float32(0), out=out)  # -0.0 + 0.0 is +0.0: one zero, whatever sign d had
    if len(rows):
        out[rows, cols] = _fsum_dots(q64[rows], g64[cols])
    return len(rows)


def _fsum_dots(q64: np.ndarray, g64: np.ndarray) -> np.ndarray:
    """float32(fl64(q_k . g_k)) row by row: the products are exact in float64, fsum rounds their sum once
    (the NumPy path; the compiled one has the same algorithm in :func:`fpr.index._exact_kernels.fsum_dot`)."""
    sums = np.array([math.fsum(p) for p in (q64 * g64).tolist()], dtype=np.float64)
    return sums.astype(np.float32) + np.float32(0)


__all__ = ["ScoreStats", "error_factor", "exact_scores", "norms"]
