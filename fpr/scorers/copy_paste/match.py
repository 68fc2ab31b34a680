"""copy-paste's matching of one pair of images: proposals from the most textured patches, refined and
verified (:func:`pixel_match`), on the compiled kernels of ``kernels``, ``exact`` and ``align``.
"""
from __future__ import annotations

import threading

import numpy as np

from fpr.scorers.copy_paste.kernels import kernel as _kernel
from fpr.scorers.copy_paste.patches import (DROP_MAX, EARLY_STOP, HYPOTHESIS_TOLERANCE, MAX_PROPOSALS, MAX_ROTATION,
    MIN_DENOMINATOR, NCC_MIN, PATCH, QueryWindows, REFINE_POINTS, REFINE_TOLERANCE, ReferencePatches, SCALE_SLACK,
    TOLERANCE, _MIDDLE_TOLERANCE)

_PAIRS: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.triu_indices(n, 1)``, built once per n (it is asked for thousands of times per batch)."""
    if n not in _PAIRS:
        _PAIRS[n] = np.triu_indices(n, 1)
    return _PAIRS[n]


def best_transform(p: np.ndarray, q: np.ndarray, tol: float = 0.3,
                   evaluate: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[int, complex, complex]:
    """The similarity ``z -> a z + b`` (complex) that maps most correspondences ``p -> q`` within ``tol`` px.

    Hypotheses: every pair (rotation <= MAX_ROTATION, scale within SCALE_SLACK of 1) and
    every single point as a pure shift; counted on ``evaluate`` (other correspondences) when
    given, else on ``p -> q``. Returns (inliers, a, b). Computed by a compiled port of
    :func:`_best_transform_numpy` (the definition), which runs itself when the port cannot decide a
    comparison for it (a modulus or angle within 1e-13 of its threshold).
    """
    from fpr.scorers.copy_paste.exact import best_transform_compiled

    ep, eq = evaluate if evaluate is not None else (p, q)
    got = best_transform_compiled(np.ascontiguousarray(p, np.complex128), np.ascontiguousarray(q, np.complex128),
                                  np.ascontiguousarray(ep, np.complex128), np.ascontiguousarray(eq, np.complex128),
                                  float(tol), 2.0 * PATCH, SCALE_SLACK, float(MAX_ROTATION))
    return got if got is not None else _best_transform_numpy(p, q, tol, evaluate)


def _best_transform_numpy(p: np.ndarray, q: np.ndarray, tol: float = 0.3,
                          evaluate: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[int, complex, complex]:
    """:func:`best_transform` in NumPy: its definition (the compiled port must give the same bits)."""
    n = len(p)
    if n == 0:
        return 0, 1 + 0j, 0j
    ep, eq = evaluate if evaluate is not None else (p, q)
    shifts = q - p
    votes = (np.abs(shifts[:, None] - (eq - ep)[None, :]) <= tol).sum(axis=1)
    k = int(votes.argmax())
    best = (int(votes[k]), 1 + 0j, complex(shifts[k]))
    if n < 2:
        return best
    i, j = _pairs(n)
    dp = p[j] - p[i]
    ok = np.abs(dp) > 2 * PATCH
    i, j, dp = i[ok], j[ok], dp[ok]
    if len(i) == 0:
        return best
    a = (q[j] - q[i]) / dp
    # np.arctan2(imag, real) is what np.angle computes, without its per-call overhead
    ok = (np.abs(np.abs(a) - 1) <= SCALE_SLACK) & (np.abs(np.arctan2(a.imag, a.real)) <= MAX_ROTATION)
    if not ok.any():
        return best
    a, i = a[ok], i[ok]
    b = q[i] - a * p[i]
    counts = (np.abs(a[:, None] * ep[None, :] + b[:, None] - eq[None, :]) <= tol).sum(axis=1)
    h = int(counts.argmax())
    if counts[h] > best[0]:
        best = (int(counts[h]), complex(a[h]), complex(b[h]))
    return best


def _best_matches(templates: np.ndarray, windows: np.ndarray,
                  windows_t: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(index, NCC) of each template's best window: the search's decisions, independent of the BLAS kernel.

    ``templates @ windows.T`` (float32 BLAS, the search's floor) finds the candidates: its error is at
    most gamma_64 |t| |w| (u = 2^-24, any summation order, rows of norm <= 1 up to rounding), the
    fixed expression's at most a float32 half-ulp plus float64 rounding, so the true best by the fixed
    expression lies within ``2 gamma_64 + 2.5e-7`` (with 1% slack on the gamma term) of the BLAS row
    maximum. ``windows_t``: ``windows.T`` stored contiguous (faster; any layout gives the same result).
    """
    wt = windows_t if windows_t is not None else windows.T
    ncc = np.matmul(templates, wt, out=_product_buffer(len(templates), wt.shape[1]))  # (2n, L2)
    gamma = 64 * 2.0 ** -24 / (1 - 64 * 2.0 ** -24)
    idx, val = np.empty(len(templates), np.int64), np.empty(len(templates), np.float32)
    _kernel("_best_match_loops")(ncc, templates, windows, ncc.argmax(axis=1), 2 * gamma * 1.01 + 2.5e-7, idx, val)
    return idx, val


_BUFFERS = threading.local()  # per thread: the HTTP service matches in worker threads


def _product_buffer(rows: int, cols: int) -> np.ndarray:
    """A C-contiguous (rows, cols) float32 array reused by the search's products: a fresh 0.7 MB result per
    product costs the allocator's page faults each time (same sgemm call, same bits)."""
    buf = getattr(_BUFFERS, "search", None)
    if buf is None or buf.size < rows * cols:
        buf = _BUFFERS.search = np.empty(max(rows * cols, 1 << 18), np.float32)
    return buf[:rows * cols].reshape(rows, cols)


def _local_ncc(templates: np.ndarray, windows: np.ndarray, width: int, height: int, centres: np.ndarray,
               a: complex, b: complex, r: int):
    """NCC of each template with the (2r+1)^2 windows around where ``z -> a z + b`` puts it.

    ``windows`` in either layout of :attr:`QueryWindows.windows`: row-major runs the definition
    (``_local_ncc_loops``), blocked its vectorised form (the same bits). Returns (predicted centres, window
    x0, window y0 of the nearest sample, inside mask, NCC (K, 2r+1, 2r+1)).
    """
    pred = a * centres + b
    x0 = np.rint(pred.real - PATCH / 2).astype(np.int64)
    y0 = np.rint(pred.imag - PATCH / 2).astype(np.int64)
    n = 2 * r + 1
    inside = np.empty((len(centres), n, n), bool)
    ncc = np.empty((len(centres), n, n), np.float32)
    t = np.ascontiguousarray(templates, dtype=np.float32)
    if windows.ndim == 3:
        _kernel("_local_ncc_blocked")(t, windows.reshape(8, -1), width, height, x0, y0, r, inside, ncc)
    else:
        _kernel("_local_ncc_loops")(t, windows, width, height, x0, y0, r, inside, ncc)
    return pred, x0, y0, inside, ncc


def verify(templates: np.ndarray, windows: np.ndarray, width: int, height: int, centres: np.ndarray,
           a: complex, b: complex, tol: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Templates found where the transform ``z -> a z + b`` puts them.

    The NCC peak within 1 px of the prediction must be >= NCC_MIN and then, strictly (``tol``
    None), the NCC *at* the predicted sub-pixel position may fall at most DROP_MAX below that
    peak: a copy's patch sits exactly there, and an edge patch (a stripe), which cannot be
    located along its edge, is still checked across it; loosely (``tol`` in px), the peak,
    located to a sub-pixel, must lie within ``tol`` of the prediction.

    NCC is computed only on the 5x5 windows around each prediction (cheap), so every patch of
    the scale is checked; this also recovers patches whose best match elsewhere was a look-alike
    (repeated spots or stripes). Returns (inlier mask, query positions: refined to a sub-pixel when
    loose, the predictions when strict).
    """
    n = len(centres)
    ok, px, py = np.empty(n, bool), np.empty(n), np.empty(n)
    if windows.ndim == 3:  # blocked (QueryWindows.of): the steps below in one compiled call, the same bits
        pred = a * centres + b
        _kernel("_verify_near")(np.ascontiguousarray(templates, dtype=np.float32), windows.reshape(8, -1), width,
                                height, pred.real, pred.imag, PATCH / 2, tol is None, NCC_MIN, DROP_MAX, ok, px, py)
    else:
        pred, x0, y0, inside, local = _local_ncc(templates, windows, width, height, centres, a, b, 2)
        fx, fy = pred.real - PATCH / 2 - x0, pred.imag - PATCH / 2 - y0  # the prediction within its nearest sample
        _kernel("_verify_loops")(local, inside, x0, y0, fx, fy, tol is None, NCC_MIN, DROP_MAX, PATCH / 2, ok, px,
                                 py)
    if tol is None:
        return ok, pred
    pos = px + 1j * py
    return ok & (np.abs(pos - pred) <= tol), pos


def _support(templates: np.ndarray, query: "QueryWindows", centres: np.ndarray, a: complex, b: complex) -> int:
    """How many templates reach NCC_MIN within 1 px of where ``z -> a z + b`` puts them (a cheap first check)."""
    if query.windows.ndim == 3:  # blocked: the steps below in one compiled call, the same bits
        pred = a * centres + b
        return int(_kernel("_support_near")(np.ascontiguousarray(templates, dtype=np.float32),
                                            query.windows.reshape(8, -1), query.width, query.height, pred.real,
                                            pred.imag, PATCH / 2, NCC_MIN))
    _, _, _, inside, local = _local_ncc(templates, query.windows, query.width, query.height, centres, a, b, 1)
    return int(_kernel("_support_loops")(local, inside, NCC_MIN))


def _refit(p: np.ndarray, q: np.ndarray) -> tuple[complex, complex]:
    """Least-squares similarity ``q = a p + b`` (complex)."""
    pm, qm = p.mean(), q.mean()
    den = float(np.sum(np.abs(p - pm) ** 2))
    a = complex(np.sum((q - qm) * np.conj(p - pm)) / den) if den > 1e-9 else 1 + 0j
    return a, complex(qm - a * pm)


def _plausible(a: complex) -> bool:
    return abs(abs(a) - 1) <= SCALE_SLACK and abs(np.angle(a)) <= MAX_ROTATION


def _align(templates: np.ndarray, centres: np.ndarray, query: "QueryWindows", ok: np.ndarray, pos: np.ndarray):
    """Coarse to fine: the inlier mask of the patches verified strictly after refining a proposal.

    ``ok, pos``: the patches collected where the coarse proposal (every second position) puts
    them (NCC peak within HYPOTHESIS_TOLERANCE). The pair hypothesis most of them agree with at
    REFINE_TOLERANCE (sub-pixel positions; look-alikes 1-2 px off are outliers) is refitted on its
    inliers, and the fit is repeated on the matches within shrinking tolerances, collecting again
    each time.
    """
    def collect(a, b):
        return verify(templates, query.windows, query.width, query.height, centres, a, b, HYPOTHESIS_TOLERANCE)

    idx = np.flatnonzero(ok)
    top = idx[::max(1, len(idx) // REFINE_POINTS)]  # spread over the collected set (stored by position)
    _, a1, b1 = best_transform(centres[top], pos[top], REFINE_TOLERANCE, evaluate=(centres[ok], pos[ok]))
    for tol in (REFINE_TOLERANCE, _MIDDLE_TOLERANCE, TOLERANCE):
        sel = ok & (np.abs(a1 * centres + b1 - pos) <= tol)
        if sel.sum() < 3:
            break
        a2, b2 = _refit(centres[sel], pos[sel])
        if not _plausible(a2):
            break
        ok2, pos2 = collect(a2, b2)
        if ok2.sum() < 3:
            break
        a1, b1, ok, pos = a2, b2, ok2, pos2
    return verify(templates, query.windows, query.width, query.height, centres, a1, b1)[0]


def _refine(templates: np.ndarray, centres: np.ndarray, query: "QueryWindows", a: complex, b: complex) -> int | None:
    """The strict inliers of proposal ``z -> a z + b`` after :func:`_align` (None: it collects fewer than 3).

    Blocked windows, where this machine's ``np.abs`` is ported: one compiled call
    (``align.refine_loops``, the same bits), which hands back to the NumPy steps below (the
    definition) when a comparison is too close to call for NumPy's abs or angle."""
    if query.windows.ndim == 3 and _align_is_compiled():
        from fpr.scorers.copy_paste import align

        c = _ALIGN_CONSTANTS
        count = align.kernel("refine_loops")(
            np.ascontiguousarray(templates, dtype=np.float32), query.windows.reshape(8, -1), query.width,
            query.height, np.ascontiguousarray(centres.real), np.ascontiguousarray(centres.imag), a.real, a.imag,
            b.real, b.imag, c)
        if count != align.UNDECIDED:
            return None if count == align.TOO_FEW else int(count)
    ok, pos = verify(templates, query.windows, query.width, query.height, centres, a, b, HYPOTHESIS_TOLERANCE)
    if ok.sum() < 3:
        return None
    return int(_align(templates, centres, query, ok, pos).sum())


# align.CONSTANTS' values
_ALIGN_CONSTANTS = np.array([PATCH / 2, NCC_MIN, DROP_MAX, HYPOTHESIS_TOLERANCE, REFINE_TOLERANCE, _MIDDLE_TOLERANCE,
                             TOLERANCE, SCALE_SLACK, float(MAX_ROTATION), 2.0 * PATCH, REFINE_POINTS])


def _align_is_compiled() -> bool:
    from fpr.scorers.copy_paste.exact import modulus_is_ported

    return modulus_is_ported()


def pixel_match(query: QueryWindows, ref: ReferencePatches) -> tuple[float, int, bool]:
    """(fraction, count, mirrored) of the reference's textured patches found in the query in one arrangement.

    Search: the SEARCH_PATCHES most textured patches per scale (and their mirror images, for a
    mirrored copy) are matched at every second query position; their best matches propose a
    transform per scale and mirror (within HYPOTHESIS_TOLERANCE). Verification then checks every
    patch of that scale at full resolution where the transform puts it.
    """
    if len(ref.templates) == 0:
        return 0.0, 0, False
    best = (0.0, 0, False)
    templates, scale, centres, flipped_centres = ref.search
    n = len(scale)
    idx, val = _best_matches(templates, query.coarse, query.coarse_t)
    y, x = np.divmod(idx, query.coarse_width)
    q_all = (2 * x + PATCH / 2) + 1j * (2 * y + PATCH / 2)
    hyps = []
    for mirrored in (False, True):
        part = slice(n, 2 * n) if mirrored else slice(0, n)
        q, good = q_all[part], val[part] >= NCC_MIN
        cen = flipped_centres if mirrored else centres
        for si in np.unique(scale[good]):
            sel = good & (scale == si)
            n0, a, b = best_transform(cen[sel], q[sel], HYPOTHESIS_TOLERANCE)
            if n0 >= 2:
                hyps.append((n0, -int(si), mirrored, a, b))
    # every proposal collects the patches it predicts (one cheap check); only the MAX_PROPOSALS that
    # collect most are refined and verified, most first, until one is nearly complete
    collected = []
    for n0, si, mirrored, a, b in hyps:
        si = -si
        t_at, c_at = ref.at_scale(si, mirrored)
        support = _support(t_at, query, c_at, a, b)
        if support >= 3:
            collected.append((support, si, mirrored, t_at, c_at, a, b))
    collected.sort(key=lambda h: h[:2], reverse=True)
    for _, si, mirrored, t_at, c_at, a, b in collected[:MAX_PROPOSALS]:
        if best[0] >= EARLY_STOP:
            break
        count = _refine(t_at, c_at, query, a, b)
        if count is None:
            continue
        frac = count / max(int(ref.n_textured[si]), MIN_DENOMINATOR)
        if (count, frac) > (best[1], best[0]):
            best = (frac, count, mirrored)
    return best


def compile_kernels() -> None:
    """Compile every kernel with the argument types matching uses (or load them from numba's cache): match a
    noise image against itself."""
    from PIL import Image

    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (48, 48), dtype=np.uint8)).convert("RGB")
    pixel_match(QueryWindows.of(image), ReferencePatches.of(image))
