"""copy-paste's refinement of one proposal (verify, ``_align``, ``_refit``) in one compiled call, bit for bit.

copy_paste.pixel_match refines each of its best proposals with about 40 NumPy calls (masks, means, sums,
complex products, the strict and loose verifications); under a millisecond of arithmetic costs about 3 ms
per query of per-call overhead. :func:`refine_loops` does the same steps in one call, each written as the
NumPy expression it replaces computes it (tested against them in tests/scorers/test_align.py):

* ``np.sum`` of a contiguous float64 or complex128 array is ``0.0 + pairwise_sum`` (the reduction starts
  from add's identity, then adds numpy/_core/src/umath/loops_utils.h.src's pairwise sum: under 8 elements
  one running sum from -0.0; up to 128 eight partial sums, unrolled, combined as
  ``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))``, then the rest one by one; above that the halves
  split at a multiple of 8). A complex array is summed as its 2n interleaved doubles: four partial sums per
  part, ``(r0 + r2) + (r4 + r6)`` for the real one. :func:`fsum` and :func:`csum`.
* ``z.mean()`` is that sum divided by ``complex(n)`` through NumPy's complex division (Smith's method with
  a reciprocal: ``exact.cdiv``); so is a complex scalar over a Python float.
* ``array * scalar`` and ``array * array`` (complex) are Highway's fused multiply (``exact.cmul``,
  the scalar first when it comes first); a Python complex times a NumPy complex scalar is the scalar math's
  textbook product (no fused multiply-add): :func:`scalar_cmul`.
* ``np.abs`` of complex is ``exact.cabs``: the caller runs this kernel only where
  ``modulus_is_ported()`` (NumPy's own steps otherwise). Python's ``abs(complex)`` (libm's hypot) and
  ``np.angle`` (SVML) are not ported: their comparisons with a threshold are decided with
  ``exact.near``'s margin, and a comparison within it makes the call *undecided* (-2): the
  caller then runs NumPy's steps, the definition.

Compiled with numba on first use (:func:`kernel`), like the other kernels. numba's cache is keyed on this
file, so a change to a callee in exact or kernels needs this file touched too.
"""
from __future__ import annotations

import math
import threading

import numpy as np

# names bound to their compiled versions by kernel() (the plain functions until then: importable without numba)
from fpr.scorers.copy_paste.exact import best_transform_loops, cabs, cdiv, cmul, near
from fpr.scorers.copy_paste.kernels import _verify_near as verify_near

UNDECIDED = -2  # a comparison too close to call for NumPy's abs/angle: run NumPy's steps
TOO_FEW = -1  # fewer than 3 patches collected where the proposal puts them: the proposal is skipped

# refine_loops' constants, in this order (copy_paste passes its own)
CONSTANTS = ("half", "ncc_min", "drop", "hypothesis_tolerance", "refine_tolerance", "middle_tolerance",
             "tolerance", "scale_slack", "max_rotation", "min_dist", "refine_points")


def fsum_leaf(a, lo, n):
    """NumPy's pairwise sum of ``a[lo:lo + n]`` for ``n <= 128`` (no split)."""
    if n < 8:
        res = -0.0
        for i in range(n):
            res += a[lo + i]
        return res
    r = a[lo:lo + 8].copy()  # the eight partial sums (an array or eight scalars: the same IEEE additions)
    i = 8
    while i < n - n % 8:
        for j in range(8):
            r[j] += a[lo + i + j]
        i += 8
    res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


def csum_leaf(re, im, lo, m):
    """NumPy's pairwise sum of ``re[lo:lo + m] + 1j im[lo:lo + m]`` for ``m <= 64`` (128 doubles: no split):
    partial sum ``2j`` holds the real parts of elements ``j, j + 4, ...``, ``2j + 1`` their imaginary parts."""
    if m < 4:
        rr, ri = -0.0, -0.0
        for i in range(m):
            rr += re[lo + i]
            ri += im[lo + i]
        return rr, ri
    r = np.empty(8)
    for j in range(4):
        r[2 * j], r[2 * j + 1] = re[lo + j], im[lo + j]
    i = 4
    while i < m - m % 4:
        for j in range(4):
            r[2 * j] += re[lo + i + j]
            r[2 * j + 1] += im[lo + i + j]
        i += 4
    rr, ri = (r[0] + r[2]) + (r[4] + r[6]), (r[1] + r[3]) + (r[5] + r[7])
    while i < m:
        rr += re[lo + i]
        ri += im[lo + i]
        i += 1
    return rr, ri


def pairwise(re, im, lo, n, unit, leaf_max):
    """NumPy's recursive pairwise sum without recursion (numba's cache crashes on recursive functions): the
    halves ``left + right`` split at ``n2 = n // 2 - (n // 2) % 8`` doubles (``unit`` doubles per element),
    walked depth first with an explicit stack. Real sums pass ``im`` = ``re`` and read the first value."""
    if n <= leaf_max:
        return _leaf(re, im, lo, n, unit)
    s_lo, s_n, s_stage = np.empty(64, np.int64), np.empty(64, np.int64), np.zeros(64, np.int64)
    s_left_r, s_left_i = np.empty(64), np.empty(64)
    d = 0
    s_lo[0], s_n[0] = lo, n
    while True:
        doubles = s_n[d] * unit
        half = (doubles // 2 - (doubles // 2) % 8) // unit
        if s_stage[d] == 0:
            c_lo, c_n = s_lo[d], half
        else:
            c_lo, c_n = s_lo[d] + half, s_n[d] - half
        if c_n > leaf_max:
            d += 1
            s_lo[d], s_n[d], s_stage[d] = c_lo, c_n, 0
            continue
        vr, vi = _leaf(re, im, c_lo, c_n, unit)
        while True:  # hand the value up: a left half waits for its right half
            if s_stage[d] == 0:
                s_left_r[d], s_left_i[d], s_stage[d] = vr, vi, 1
                break
            vr, vi = s_left_r[d] + vr, s_left_i[d] + vi
            d -= 1
            if d < 0:
                return vr, vi


def _leaf(re, im, lo, n, unit):
    if unit == 1:
        v = fsum_leaf(re, lo, n)
        return v, v
    return csum_leaf(re, im, lo, n)


def fsum(a, lo, n):
    """NumPy's pairwise sum of the float64s ``a[lo:lo + n]`` (``np.sum`` is ``0.0 +`` this)."""
    return pairwise(a, a, lo, n, 1, 128)[0]


def csum(re, im, lo, m):
    """NumPy's pairwise sum of the complex numbers ``re[lo:lo + m] + 1j im[lo:lo + m]``, as (real, imag):
    its float loop on the 2m interleaved doubles (four partial sums per part)."""
    return pairwise(re, im, lo, m, 2, 64)


def scalar_cmul(ar, ai, br, bi):
    """NumPy's complex scalar product (scalarmath: the textbook formula, each product rounded)."""
    return ar * br - ai * bi, ar * bi + ai * br


def refit(pr, pi, qr, qi, out):
    """copy_paste._refit: least-squares ``q = a p + b``; ``out[:4]`` = a.re, a.im, b.re, b.im."""
    m = pr.shape[0]
    sr, si = csum(pr, pi, 0, m)
    pmr, pmi = cdiv(0.0 + sr, 0.0 + si, float(m), 0.0)  # p.mean()
    sr, si = csum(qr, qi, 0, m)
    qmr, qmi = cdiv(0.0 + sr, 0.0 + si, float(m), 0.0)
    sq, nr, ni = np.empty(m), np.empty(m), np.empty(m)
    for k in range(m):
        dr, di = pr[k] - pmr, pi[k] - pmi
        d = cabs(dr, di)
        sq[k] = d * d  # ** 2 is np.square
        nr[k], ni[k] = cmul(qr[k] - qmr, qi[k] - qmi, dr, -di)  # (q - qm) * conj(p - pm)
    den = 0.0 + fsum(sq, 0, m)
    ar, ai = 1.0, 0.0
    if den > 1e-9:
        sr, si = csum(nr, ni, 0, m)
        ar, ai = cdiv(0.0 + sr, 0.0 + si, den, 0.0)
    mr, mi = scalar_cmul(ar, ai, pmr, pmi)
    out[0], out[1], out[2], out[3] = ar, ai, qmr - mr, qmi - mi


def predict(cr, ci, ar, ai, br, bi, pred_re, pred_im):
    """``a * centres + b`` (NumPy's fused complex multiply, the scalar first)."""
    for k in range(cr.shape[0]):
        zr, zi = cmul(ar, ai, cr[k], ci[k])
        pred_re[k], pred_im[k] = zr + br, zi + bi


def collect(templates, blocks, width, height, cr, ci, ar, ai, br, bi, c, ok, pos_re, pos_im):
    """copy_paste.verify, loose (``c[3]``: HYPOTHESIS_TOLERANCE); returns how many are ok."""
    n = cr.shape[0]
    pred_re, pred_im, px, py = np.empty(n), np.empty(n), np.empty(n), np.empty(n)
    predict(cr, ci, ar, ai, br, bi, pred_re, pred_im)
    verify_near(templates, blocks, width, height, pred_re, pred_im, c[0], False, c[1], c[2], ok, px, py)
    count = 0
    for k in range(n):
        jr, ji = cmul(0.0, 1.0, py[k], 0.0)  # pos = px + 1j * py
        pos_re[k], pos_im[k] = px[k] + jr, 0.0 + ji
        ok[k] = ok[k] and cabs(pos_re[k] - pred_re[k], pos_im[k] - pred_im[k]) <= c[3]
        count += ok[k]
    return count


def refine_loops(templates, blocks, width, height, cr, ci, ar, ai, br, bi, c):
    """pixel_match's refinement of the proposal ``z -> a z + b``: the strict inlier count after ``_align``,
    TOO_FEW when its loose collection finds fewer than 3, UNDECIDED when NumPy's steps must decide."""
    n = cr.shape[0]
    ok, pos_re, pos_im = np.empty(n, np.bool_), np.empty(n), np.empty(n)
    if collect(templates, blocks, width, height, cr, ci, ar, ai, br, bi, c, ok, pos_re, pos_im) < 3:
        return TOO_FEW
    # best_transform(centres[top], pos[top], REFINE_TOLERANCE, evaluate=(centres[ok], pos[ok]))
    idx = np.flatnonzero(ok)
    step = max(1, idx.shape[0] // int(c[10]))
    top = idx[::step]
    p, q = np.empty(top.shape[0], np.complex128), np.empty(top.shape[0], np.complex128)
    for s in range(top.shape[0]):
        p[s], q[s] = complex(cr[top[s]], ci[top[s]]), complex(pos_re[top[s]], pos_im[top[s]])
    ep, eq = np.empty(idx.shape[0], np.complex128), np.empty(idx.shape[0], np.complex128)
    for s in range(idx.shape[0]):
        ep[s], eq[s] = complex(cr[idx[s]], ci[idx[s]]), complex(pos_re[idx[s]], pos_im[idx[s]])
    fit = np.empty(8)
    if best_transform_loops(p, q, ep, eq, c[4], c[9], c[7], c[8], True, fit) < 0:
        return UNDECIDED
    ar, ai, br, bi = fit[0], fit[1], fit[2], fit[3]
    ok2, pos2_re, pos2_im = np.empty(n, np.bool_), np.empty(n), np.empty(n)
    sel = np.empty(n, np.bool_)
    for tol in (c[4], c[5], c[6]):
        m = 0
        for k in range(n):
            zr, zi = cmul(ar, ai, cr[k], ci[k])
            sel[k] = ok[k] and cabs((zr + br) - pos_re[k], (zi + bi) - pos_im[k]) <= tol
            m += sel[k]
        if m < 3:
            break
        idx = np.flatnonzero(sel)
        fit_r = np.empty(4)
        refit(cr[idx], ci[idx], pos_re[idx], pos_im[idx], fit_r)
        # _plausible: Python's abs (libm's hypot) and np.angle, decided with a margin
        modulus, angle = math.hypot(fit_r[0], fit_r[1]), abs(math.atan2(fit_r[1], fit_r[0]))
        if near(abs(modulus - 1.0), c[7]) or near(angle, c[8]):
            return UNDECIDED
        if not (abs(modulus - 1.0) <= c[7] and angle <= c[8]):
            break
        if collect(templates, blocks, width, height, cr, ci, fit_r[0], fit_r[1], fit_r[2], fit_r[3], c, ok2,
                   pos2_re, pos2_im) < 3:
            break
        ar, ai, br, bi = fit_r[0], fit_r[1], fit_r[2], fit_r[3]
        ok, ok2 = ok2, ok
        pos_re, pos2_re = pos2_re, pos_re
        pos_im, pos2_im = pos2_im, pos_im
    pred_re, pred_im, px, py = np.empty(n), np.empty(n), np.empty(n), np.empty(n)
    predict(cr, ci, ar, ai, br, bi, pred_re, pred_im)
    verify_near(templates, blocks, width, height, pred_re, pred_im, c[0], True, c[1], c[2], ok, px, py)
    return int(ok.sum())


_CALLEES = ("fsum_leaf", "csum_leaf", "_leaf", "pairwise", "fsum", "csum", "scalar_cmul", "refit", "predict",
            "collect")
_COMPILED: dict = {}
_LOCK = threading.Lock()  # the HTTP service matches in worker threads: none may see the callees half bound


def kernel(name: str):
    """The compiled version of one of this module's functions (its callees bound to theirs on first use)."""
    if name not in _COMPILED:
        with _LOCK:
            _compile(name)
    return _COMPILED[name]


def _compile(name: str) -> None:
    global best_transform_loops, cabs, cdiv, cmul, near, verify_near
    if not _COMPILED:
        from fpr.compiled import njit

        from fpr.scorers.copy_paste import exact
        from fpr.scorers.copy_paste import kernels

        best_transform_loops = exact.compiled("best_transform_loops")
        cabs, cdiv, cmul, near = (exact.compiled(f) for f in ("cabs", "cdiv", "cmul", "near"))
        verify_near = kernels.kernel("_verify_near")
        for callee in _CALLEES:  # callees first: each caller binds the compiled ones
            globals()[callee] = njit(nogil=True, error_model="numpy")(globals()[callee])
        _COMPILED.update({callee: globals()[callee] for callee in _CALLEES})  # published once all are bound
    if name not in _COMPILED:
        from fpr.compiled import njit

        _COMPILED[name] = njit(nogil=True, error_model="numpy")(globals()[name])
