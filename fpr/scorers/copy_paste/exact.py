"""NumPy's complex128 arithmetic written out in real arithmetic for copy-paste's compiled kernels, bit for bit.

copy-paste's values must not change when a NumPy step is compiled, but numba's complex operators round
differently from NumPy's loops (measured on NumPy 2.4, x86-64 with AVX-512):

* **division** (``CDOUBLE_divide`` in numpy/_core/src/umath/loops.c.src, a scalar loop): Smith's method
  with a reciprocal, ``rat = d/c; scl = 1/(c + d*rat); ((a + b*rat)*scl, (b - a*rat)*scl)`` for
  ``|c| >= |d|`` (the mirror image otherwise; a zero divisor divides each part by ``|c|``, ``|d|``).
  numba's ``/`` divides by ``den`` instead of multiplying by its reciprocal: other last bits.
* **multiplication** (Highway's ``MulComplex`` in loops_arithm_fp.dispatch.cpp.src, every array
  stride, broadcasts included): ``(fma(ar, br, -(ai*bi)), fma(ar, bi, ai*br))``: one rounding fewer
  than the textbook formula numba uses. The operand order matters (the imaginary part is not symmetric).
* ``np.abs`` (a SIMD hypot) and ``np.arctan2`` (SVML) differ from libm's ``hypot``/``atan2`` in the last
  bit or two (35% and 7% of random inputs), so the kernels do not port them: they compare libm's value
  with the threshold and report the decision as *undecided* when it lies within ``MARGIN`` (relative) of
  it; the caller then runs the NumPy formulation, whose decisions are the definition.

Addition and subtraction are componentwise IEEE operations in every implementation. The ports are tested
against NumPy on random and edge-case inputs (zeros, infinities, NaN, huge and tiny exponents) in
tests/scorers/test_exact.py. They are plain functions compiled by numba on first use
(numba's import stays out of fpr's import).
"""
from __future__ import annotations

import math

import numpy as np

# relative distance from a threshold below which libm's hypot/atan2 cannot decide for NumPy's: NumPy's
# modulus (larger * sqrt(fma(r, r, 1)), or libm's hypot off its SIMD path) and arctan2 (SVML, <= 4 ulps)
# and libm's (<= 1 ulp) are each within a few ulps of the exact value (measured apart: at most 1.4 ulps for
# the modulus, 2 for the angle, on 10^6 random inputs); 2e-15 is 9 ulps at 2 px. Exact geometric ties
# (a transform from integer positions putting a point at exactly 2 px) stay undecided: NumPy decides them.
MARGIN = 2e-15


def fma(x: float, y: float, z: float) -> float:
    """x*y + z rounded once: a placeholder bound to LLVM's fma when the kernels compile (see compiled())."""
    raise RuntimeError("exact.fma runs compiled only: call compiled('cmul')")


def cdiv(ar: float, ai: float, br: float, bi: float) -> tuple[float, float]:
    """(ar + i ai) / (br + i bi) as NumPy's complex128 division rounds it (Smith's method, reciprocal)."""
    br_abs, bi_abs = abs(br), abs(bi)
    if br_abs >= bi_abs:
        if br_abs == 0 and bi_abs == 0:  # a complex inf or nan, as NumPy: each part over a signless zero
            return ar / br_abs, ai / bi_abs  # (compiled with NumPy's error model: IEEE, no exception)
        rat = bi / br
        scl = 1.0 / (br + bi * rat)
        return (ar + ai * rat) * scl, (ai - ar * rat) * scl
    rat = br / bi
    scl = 1.0 / (bi + br * rat)
    return (ar * rat + ai) * scl, (ai * rat - ar) * scl


def cmul(ar: float, ai: float, br: float, bi: float) -> tuple[float, float]:
    """(ar + i ai) * (br + i bi) as NumPy's SIMD loop rounds it: one fused multiply-add per part."""
    return fma(ar, br, -(ai * bi)), fma(ar, bi, ai * br)


def cabs(x: float, y: float) -> float:
    """NumPy's ``abs(x + iy)`` on its SIMD path (simd_cabsolute in loops_unary_complex.dispatch.c.src, any
    stride it can load): ``larger * sqrt(fma(r, r, 1))`` with ``r = smaller / larger``; infinities win over
    NaN. The fma is the FMA3/AVX-512 build's; :func:`modulus_is_ported` checks this machine's NumPy."""
    re, im = abs(x), abs(y)
    re_inf, im_inf = re == math.inf, im == math.inf
    if re_inf:
        im = math.inf
    if im_inf:
        re = math.inf
    re_num, im_num = not math.isnan(re), not math.isnan(im)
    if not re_num:
        im = math.nan
    if not im_num:
        re = math.nan
    larger, smaller = max(re, im), min(im, re)
    ratio = 0.0 if (larger == 0 or smaller == math.inf) else smaller / larger
    return math.sqrt(fma(ratio, ratio, 1.0)) * larger


def hypot_le(x: float, y: float, tol: float, exact: bool) -> int:
    """NumPy's ``abs(x + iy) <= tol``: 1 true, 0 false, 2 undecided.

    ``exact``: :func:`cabs` is this machine's NumPy modulus, so it decides. Otherwise libm's hypot does,
    except within MARGIN of ``tol`` (undecided); with a zero part the modulus is the other part's
    magnitude, exact in both."""
    if exact:
        return int(cabs(x, y) <= tol)
    if x == 0 or y == 0:
        return int(abs(x) + abs(y) <= tol)
    h = math.hypot(x, y)
    if abs(h - tol) <= MARGIN * tol:
        return 2
    return int(h <= tol)


def near(value: float, threshold: float) -> bool:
    """True when ``value`` (from libm) is too close to ``threshold`` to decide a comparison for NumPy."""
    return abs(value - threshold) <= MARGIN * max(abs(threshold), 1.0)


def best_transform_loops(p, q, ep, eq, tol, min_dist, slack, max_rotation, exact, out):
    """copy_paste.best_transform's NumPy formulation, compiled; ``out[:4]`` = a.re, a.im, b.re, b.im.

    Returns the inlier count, or -1 when a decision was undecided (then the caller runs NumPy's)."""
    n, m = p.shape[0], ep.shape[0]
    # a pure shift per correspondence, counted on the evaluated ones; argmax keeps the first maximum
    votes_best, k = -1, 0
    for s in range(n):
        sr, si = q[s].real - p[s].real, q[s].imag - p[s].imag
        votes = 0
        for e in range(m):
            d = hypot_le(sr - (eq[e].real - ep[e].real), si - (eq[e].imag - ep[e].imag), tol, exact)
            if d == 2:
                return -1
            votes += d
        if votes > votes_best:
            votes_best, k = votes, s
    best = votes_best
    out[0], out[1], out[2], out[3] = 1.0, 0.0, q[k].real - p[k].real, q[k].imag - p[k].imag
    if n < 2:
        return best
    # pairs (i < j, row-major as np.triu_indices) far enough apart, with a plausible rotation and scale
    h_best, h_count = -1, -1
    for i in range(n):
        for j in range(i + 1, n):
            dpr, dpi = p[j].real - p[i].real, p[j].imag - p[i].imag
            far = hypot_le(dpr, dpi, min_dist, exact)  # NumPy: abs(dp) > min_dist, i.e. not (<=)
            if far == 2:
                return -1
            if far == 1:
                continue
            ar, ai = cdiv(q[j].real - q[i].real, q[j].imag - q[i].imag, dpr, dpi)
            modulus = cabs(ar, ai) if exact else math.hypot(ar, ai)
            angle = abs(math.atan2(ai, ar))  # (SVML in NumPy: never ported, always with a margin)
            if (not exact and near(abs(modulus - 1.0), slack)) or near(angle, max_rotation):
                return -1
            if not (abs(modulus - 1.0) <= slack and angle <= max_rotation):
                continue
            mr, mi = cmul(ar, ai, p[i].real, p[i].imag)
            br, bi = q[i].real - mr, q[i].imag - mi
            count = 0
            for e in range(m):
                zr, zi = cmul(ar, ai, ep[e].real, ep[e].imag)
                d = hypot_le((zr + br) - eq[e].real, (zi + bi) - eq[e].imag, tol, exact)
                if d == 2:
                    return -1
                count += d
            if count > h_count:  # the first maximum over the plausible pairs, as argmax
                h_best, h_count = 1, count
                out[4], out[5], out[6], out[7] = ar, ai, br, bi
    if h_best == 1 and h_count > best:
        out[0], out[1], out[2], out[3] = out[4], out[5], out[6], out[7]
        best = h_count
    return best


_COMPILED: dict = {}


def compiled(name: str):
    """The numba-compiled version of one of this module's functions (compiled with its callees on first use)."""
    global fma, cdiv, cmul, cabs, hypot_le, near
    if not _COMPILED:
        from fpr.compiled import njit, wait_ahead
        from fpr.scorers.copy_paste.kernels import KERNEL_SET

        wait_ahead(KERNEL_SET)  # a process compiling them into numba's cache: load them from there
        fma = _fma_intrinsic()
        for f in ("cdiv", "cmul", "cabs", "hypot_le", "near"):  # callees first: the kernels bind the compiled ones
            _COMPILED[f] = njit(nogil=True, error_model="numpy")(globals()[f])
        cdiv, cmul, cabs, hypot_le, near = (_COMPILED[f] for f in ("cdiv", "cmul", "cabs", "hypot_le", "near"))
    if name not in _COMPILED:
        from fpr.compiled import njit

        _COMPILED[name] = njit(nogil=True, error_model="numpy")(globals()[name])
    return _COMPILED[name]


def _fma_intrinsic():
    """LLVM's fma on float64, callable from compiled code (x*y + z with one rounding; a hardware FMA here)."""
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    @intrinsic
    def llvm_fma(typingctx, x, y, z):
        sig = types.float64(types.float64, types.float64, types.float64)

        def codegen(context, builder, signature, args):
            d = ir.DoubleType()
            f = builder.module.declare_intrinsic("llvm.fma", [d], ir.FunctionType(d, [d, d, d]))
            return builder.call(f, args)
        return sig, codegen
    return llvm_fma


def best_transform_compiled(p: np.ndarray, q: np.ndarray, ep: np.ndarray, eq: np.ndarray, tol: float,
                            min_dist: float, slack: float, max_rotation: float) -> tuple[int, complex, complex] | None:
    """(inliers, a, b) as copy_paste.best_transform's NumPy code computes them, or None when undecided."""
    if len(p) == 0:
        return 0, 1 + 0j, 0j
    out = np.empty(8)
    count = compiled("best_transform_loops")(p, q, ep, eq, tol, min_dist, slack, max_rotation, modulus_is_ported(),
                                             out)
    if count < 0:
        return None
    return int(count), complex(out[0], out[1]), complex(out[2], out[3])


_PORTED: list[bool] = []


def modulus_is_ported() -> bool:
    """Whether :func:`cabs` gives this machine's ``np.abs`` bits on a probe set (once per process): random
    moduli over many exponents, near-ties from integer geometry, zeros, infinities and NaN. NumPy builds
    without FMA (or that take libm's hypot) fail it; best_transform then decides with libm and a margin."""
    if not _PORTED:
        rng = np.random.default_rng(20261126)
        z = np.empty(20_000, np.complex128)
        z.real = rng.standard_normal(len(z)) * 10.0 ** rng.integers(-30, 30, len(z))
        z.imag = rng.standard_normal(len(z)) * 10.0 ** rng.integers(-30, 30, len(z))
        z[:8000] = (rng.integers(-40, 40, 8000) + 1j * rng.integers(-40, 40, 8000)) / rng.integers(1, 50, 8000)
        z[:8] = [0, 3, 4j, complex(math.inf, math.nan), complex(math.nan, math.inf), complex(math.nan, 1),
                 complex(1e308, 1e308), complex(5e-324, 5e-324)]
        got = moduli(z)
        want = np.abs(z)
        _PORTED.append(bool(((got.view(np.int64) == want.view(np.int64)) | (np.isnan(got) & np.isnan(want))).all()))
    return _PORTED[0]


def moduli_loops(z, out):
    """``out[k] = cabs(z[k])``."""
    for k in range(z.shape[0]):
        out[k] = cabs(z[k].real, z[k].imag)


def moduli(z: np.ndarray) -> np.ndarray:
    """:func:`cabs` of every element of a complex128 array (compiled, cached like the kernels)."""
    out = np.empty(len(z))
    compiled("moduli_loops")(np.ascontiguousarray(z, np.complex128), out)
    return out
