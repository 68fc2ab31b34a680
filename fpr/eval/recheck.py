"""AP, ranks and the exact top-k of a block of queries from float32 proposals, rechecked exactly.

The numbers are those of the exact scores (:mod:`fpr.index.exact`, ``float32(fl64(q . g))``) put
through the metric engine and :func:`fpr.metrics.ranking.top_k`, bit for bit, but the block's scores
are never all computed exactly. AP, ranks, CMC, mINP and the top-k depend on the scores only through
comparisons, so a float32 product (any BLAS, any kernel, any summation order) proposes every score and
a rigorous bound on its error says which comparisons it settles:

    |p - q.g| <= gamma_D(2^-24) |q| |g| + a,   gamma_D(u) = D u / (1 - D u)

(Higham's bound for a dot product of D terms with products and sums rounded in float32, any order,
FMA or not; Cauchy-Schwarz; ``a`` covers gradual underflow and flush-to-zero of results, at most one
smallest-normal per operation). The per-row pass (:mod:`fpr.eval._recheck_kernels`) computes the
relevant items' exact scores, then rechecks only the items whose interval holds a relevant score and
the top-k candidates whose interval is wider than one float32. A row whose proposals could overflow
float32 (|q| |g| near 2^128) is rechecked element by element.

Not covered: a "float32" product done in lower precision (bf16/TF32 matmul modes, a GPU's fast math),
inputs flushed to zero before multiplying (DAZ; numpy and OpenBLAS never set it), and non-finite
vectors (a ValueError, as for the exact scores).

``FPR_EXACT_PATH`` picks the path of :func:`fpr.eval.scoring.score_blocks`: ``recheck`` (this one, the
default when numba imports) or ``full`` (every score of the block computed exactly, then the metric
engine and the top-k: the previous path, kept for comparison; the only one without numba).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields

import numpy as np

from fpr import settings
from fpr.errors import InputError
from fpr.index import exact
from fpr.metrics.ranking import THREADS, RetrievalMetrics
from fpr.metrics.top_margin import margin_from_parts

U32 = 2.0 ** -24
MAX_DIM = 1 << 20  # gamma_D(2^-24) needs D u < 1; far below that the slack of the factor holds
PATH = settings.get("FPR_EXACT_PATH")
PROPOSAL_BYTES = 64 * 2 ** 20  # one block's float32 proposals (the pass's only (block, G) array)
ROWS_PER_TASK = 4  # rows per task of the thread pool (dynamic scheduling on shared cores)
OVERFLOW_SAFE = 2.0 ** 120  # |q| |g| below this: no partial sum of the product can overflow float32


@dataclass
class RecheckStats:
    """What the per-row pass looked at; the rechecked share is (relevant + band + topk + impostor) / elements."""

    elements: int = 0  # queries x gallery columns of the blocks
    passed_filter: int = 0  # proposals not decided by the row's one-comparison filter
    relevant: int = 0  # relevant items: their exact scores are the AP's thresholds
    band: int = 0  # other items whose interval held a relevant score: exact score computed
    topk: int = 0  # top-k candidates whose interval was wider than one float32: exact score computed
    impostor: int = 0  # impostors whose interval reached the best impostor's lower bound (top margin)

    @property
    def rechecked(self) -> int:
        return self.relevant + self.band + self.topk + self.impostor

    def add(self, other: "RecheckStats") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def proposal_error_factor(dim: int) -> float:
    """c such that fl(fl(c * |q|) * |g|) >= gamma_D(2^-24) |q| |g| for norms from :func:`exact.norms`
    (the slack 2^-20 covers the roundings of the norms and of the two products, as in
    :func:`fpr.index.exact.error_factor`)."""
    if not 0 <= dim < MAX_DIM:
        raise ValueError(f"the float32 proposals support dims below {MAX_DIM}, not {dim}")
    gamma = dim * U32 / (1 - dim * U32)
    return gamma * (1 + 2.0 ** -20)


def underflow_slack(dim: int) -> float:
    """Absolute error allowance for underflow: each of the D products and D - 1 sums loses less than
    the smallest float32 normal (2^-126) when its result is subnormal or flushed to zero."""
    return 2.0 * (dim + 1) * 2.0 ** -126


def available() -> bool:
    """Whether the recheck path runs here (numba imports and ``FPR_EXACT_PATH`` does not say ``full``)."""
    if PATH not in ("auto", "recheck", "full"):
        raise InputError(f"unknown FPR_EXACT_PATH '{PATH}'", where="the environment",
                         hint="set FPR_EXACT_PATH to auto, recheck or full, or unset it")
    if PATH == "full":
        return False
    try:
        from fpr.eval import _recheck_kernels  # noqa: F401  (numba compiles on first use)
    except ImportError:
        if PATH == "recheck":
            raise
        return False
    return True


@dataclass
class Relevance:
    """Row i's relevant gallery columns: ``order[start[i]:start[i] + count[i]]``."""

    order: np.ndarray  # int64
    start: np.ndarray  # int64, one per query
    count: np.ndarray  # int64, one per query

    @classmethod
    def from_mask(cls, mask: np.ndarray) -> "Relevance":
        rows, cols = np.nonzero(np.asarray(mask, dtype=bool))
        q = len(mask)
        start = np.searchsorted(rows, np.arange(q)).astype(np.int64)
        return cls(cols.astype(np.int64), start, np.bincount(rows, minlength=q).astype(np.int64))


class KeyIndex:
    """Gallery columns by relevance key (relevance = equal keys), sorted once per gallery part."""

    def __init__(self, g_keys: np.ndarray):
        self.keys = np.asarray(g_keys)
        self.order = np.argsort(self.keys, kind="stable").astype(np.int64)  # ascending columns per key
        self.sorted = self.keys[self.order]

    def of(self, q_keys: np.ndarray) -> Relevance:
        lo = np.searchsorted(self.sorted, q_keys, side="left")
        hi = np.searchsorted(self.sorted, q_keys, side="right")
        return Relevance(self.order, lo.astype(np.int64), (hi - lo).astype(np.int64))


@dataclass
class BlockResult:
    metrics: RetrievalMetrics
    top_rows: np.ndarray  # (n, k) int64 gallery columns
    top_scores: np.ndarray  # (n, k) float32 exact scores


def auto_block(n_columns: int) -> int:
    """Queries per block so the block's float32 proposals take about :data:`PROPOSAL_BYTES`."""
    return int(max(1, min(4096, PROPOSAL_BYTES // max(1, 4 * n_columns))))


class RecheckedGallery:
    """Gallery vectors ready for :meth:`block` (their norms, error factors and the largest norm)."""

    def __init__(self, vectors: np.ndarray, vector_norms: np.ndarray | None = None):
        self.v = np.ascontiguousarray(vectors, dtype=np.float32)
        if self.v.ndim != 2:
            raise ValueError(f"gallery vectors must be (G, D), got {self.v.shape}")
        self.ng = exact.norms(self.v) if vector_norms is None else np.asarray(vector_norms, dtype=np.float64)
        if self.ng.shape != (len(self.v),):
            raise ValueError(f"vector_norms has shape {self.ng.shape}, expected ({len(self.v)},)")
        if not np.isfinite(self.ng).all():
            raise ValueError("exact scores are defined for finite vectors only (found NaN or inf)")
        dim = self.v.shape[1]
        self.c32 = proposal_error_factor(dim)
        self.c64 = exact.error_factor(dim)
        self.a32 = underflow_slack(dim)
        self.ng_max = float(self.ng.max()) if len(self.ng) else 0.0
        self._buf = np.empty((0, len(self.v)), np.float32)

    def proposals(self, q: np.ndarray) -> np.ndarray:
        """float32 q @ v.T into a buffer reused across blocks (its bits may depend on the BLAS; the
        results of :meth:`block` do not)."""
        if len(self._buf) < len(q):
            self._buf = np.empty((len(q), len(self.v)), np.float32)
        out = self._buf[:len(q)]
        with np.errstate(over="ignore", invalid="ignore"):  # rows that can overflow are not `safe`: rechecked
            np.matmul(q, self.v.T, out=out)
        return out

    def block(self, queries: np.ndarray, rel: Relevance, k: int, *, proposals: np.ndarray | None = None,
              stats: RecheckStats | None = None) -> BlockResult:
        """Metrics and top-k (k <= G) of a block of queries. ``proposals``: a float32 (n, G) stand-in
        for the product (tests pass perturbed ones: any values within the error bound give the same
        result)."""
        from fpr.eval import _recheck_kernels as K

        q = np.ascontiguousarray(queries, dtype=np.float32)
        n, g = len(q), len(self.v)
        if q.ndim != 2 or q.shape[1] != self.v.shape[1]:
            raise ValueError(f"queries of shape {q.shape} for gallery vectors {self.v.shape}")
        k = min(int(k), g)
        nq = exact.norms(q)
        if not np.isfinite(nq).all():
            raise ValueError("exact scores are defined for finite vectors only (found NaN or inf)")
        p = self.proposals(q) if proposals is None else np.ascontiguousarray(proposals, dtype=np.float32)
        if p.shape != (n, g):
            raise ValueError(f"proposals of shape {p.shape}, expected {(n, g)}")
        out = (np.empty(n), np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n),
               np.empty(n))
        top_rows = np.empty((n, k), np.int64)
        top_scores = np.empty((n, k), np.float32)
        counts = np.zeros((n, K.N_COUNTS), np.int64)
        q64 = q.astype(np.float64)
        args = (p, q64, self.v, nq * self.c32, nq * self.c64, self.ng, self.a32, self.ng_max,
                nq * self.ng_max < OVERFLOW_SAFE, rel.order, rel.start, rel.count, k, *out, top_rows,
                top_scores, counts)
        if n and g:
            _over_rows(K.block_rows, args, n)
        elif n:
            out[0][:] = out[4][:] = out[5][:] = np.nan
            out[1][:] = out[2][:] = out[3][:] = 0
        rel_sum, best_other, margin_counts = np.zeros(n), np.full(n, np.nan), np.zeros(n, np.int64)
        margin_args = (p, q64, self.v, nq * self.c32, nq * self.c64, self.ng, self.a32, self.ng_max,
                       nq * self.ng_max < OVERFLOW_SAFE, rel.order, rel.start, rel.count, rel_sum, best_other,
                       margin_counts)
        if n and g:
            _over_rows(K.margin_rows, margin_args, n)
        if stats is not None:
            tot = counts.sum(axis=0)
            stats.add(RecheckStats(n * g, int(tot[0]), int(tot[3]), int(tot[1]), int(tot[2]),
                                   int(margin_counts.sum())))
        return BlockResult(RetrievalMetrics(*out[:4], top_margin=margin_from_parts(rel_sum, rel.count, best_other),
                                            ap_at_k=out[4], r_precision=out[5]),
                           top_rows, top_scores)



def _over_rows(kernel, args: tuple, n: int) -> None:
    """``kernel(*args, start, end)`` over rows [0, n): in one call, or in tasks of :data:`ROWS_PER_TASK` rows on
    :data:`THREADS` threads (dynamic scheduling; each row is computed alone, so the bits do not depend on it)."""
    if THREADS == 1 or n <= ROWS_PER_TASK:
        kernel(*args, 0, n)
        return
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        list(pool.map(lambda s: kernel(*args, s, min(s + ROWS_PER_TASK, n)), range(0, n, ROWS_PER_TASK)))

__all__ = ["BlockResult", "KeyIndex", "RecheckStats", "RecheckedGallery", "Relevance", "auto_block",
           "available", "proposal_error_factor"]
