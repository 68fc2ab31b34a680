"""copy-paste's ports of NumPy's complex arithmetic, bit for bit against NumPy itself, and its compiled
best_transform against the NumPy formulation (the definition) on random, grid and adversarial inputs."""
from __future__ import annotations

import numpy as np
import pytest

from fpr.scorers.copy_paste import match as cp_match, patches as cp_patches
from fpr.scorers.copy_paste import exact as ex


def _edge_values() -> np.ndarray:
    tiny, huge = np.finfo(np.float64).tiny, np.finfo(np.float64).max
    v = [0.0, -0.0, 1.0, -1.0, 0.5, 3.0, np.inf, -np.inf, np.nan, tiny, -tiny, tiny / 2 ** 30, huge, -huge,
         1e-300, 1e300, -1e-200, 2.0 ** 1000, 2.0 ** -1070, 1 + 2 ** -52, 16.0]
    return np.array(v)


def _operands(seed: int, n: int = 200_000) -> tuple[np.ndarray, np.ndarray]:
    """Random complex pairs over many exponents, plus every pair of edge values in every part."""
    rng = np.random.default_rng(seed)
    parts = rng.standard_normal((4, n)) * 10.0 ** rng.integers(-300, 300, (4, n))
    parts[:, : n // 2] = rng.standard_normal((4, n // 2)) * 10.0 ** rng.integers(-8, 8, (4, n // 2))
    e = _edge_values()
    g = np.stack(np.meshgrid(e, e, e, e, indexing="ij")).reshape(4, -1)  # 21^4 = 194481 edge combinations
    return _complex(np.concatenate([parts[0], g[0]]), np.concatenate([parts[1], g[1]])), \
        _complex(np.concatenate([parts[2], g[2]]), np.concatenate([parts[3], g[3]]))


def _complex(re: np.ndarray, im: np.ndarray) -> np.ndarray:
    """re + i im with the parts kept as given (``re + 1j * im`` turns an infinite part into NaNs)."""
    out = np.empty(len(re), np.complex128)
    out.real, out.imag = re, im
    return out


def _apply(name: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    from numba import njit

    f = ex.compiled(name)

    @njit
    def run(x, y, out):
        for k in range(x.shape[0]):
            r, i = f(x[k].real, x[k].imag, y[k].real, y[k].imag)
            out[k] = complex(r, i)
    out = np.empty(len(x), np.complex128)
    run(x, y, out)
    return out


def _same_bits(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Equal float64 bits per part (every NaN counts as equal: NumPy's NaN payloads are not part of the value)."""
    g, w = got.view(np.float64).reshape(-1, 2), want.view(np.float64).reshape(-1, 2)
    both_nan = np.isnan(g) & np.isnan(w)
    return ((g.view(np.int64) == w.view(np.int64)) | both_nan).all(axis=1)


@pytest.mark.parametrize("seed", [0, 1])
def test_division_is_numpys_bit_for_bit(seed):
    x, y = _operands(seed)
    with np.errstate(all="ignore"):
        want = x / y
    same = _same_bits(_apply("cdiv", x, y), want)
    assert same.all(), (x[~same][:3], y[~same][:3])


@pytest.mark.parametrize("seed", [2, 3])
def test_multiplication_is_numpys_bit_for_bit_contiguous_and_broadcast(seed):
    x, y = _operands(seed)
    with np.errstate(all="ignore"):
        want = x * y
        bcast = (x[:300, None] * y[None, :700]).ravel()  # the stride-0 loop best_transform's counting uses
    assert _same_bits(_apply("cmul", x, y), want).all()
    assert _same_bits(_apply("cmul", np.repeat(x[:300], 700), np.tile(y[:700], 300)), bcast).all()


def test_the_textbook_formulas_would_differ():
    """Why the ports exist: numba's own complex operators round differently from NumPy's loops."""
    from numba import njit

    x, y = _operands(4, 20_000)
    x, y = x[:20_000], y[:20_000]

    @njit
    def numba_ops(x, y, q, m):
        for k in range(x.shape[0]):
            q[k], m[k] = x[k] / y[k], x[k] * y[k]
    q, m = np.empty_like(x), np.empty_like(x)
    numba_ops(x, y, q, m)
    assert not _same_bits(q, x / y).all() and not _same_bits(m, x * y).all()


def test_the_modulus_is_numpys_bit_for_bit():
    """cabs ports NumPy's SIMD modulus as built with FMA (this machine's); elsewhere the scorer does not use it."""
    if not ex.modulus_is_ported():
        pytest.skip("this NumPy's modulus is not the FMA SIMD loop: best_transform decides with libm and a margin")
    x, _ = _operands(9)
    rng = np.random.default_rng(9)
    ties = (rng.integers(-40, 40, 100_000) + 1j * rng.integers(-40, 40, 100_000)) / rng.integers(1, 50, 100_000)
    z = np.concatenate([x, ties])
    got = ex.moduli(z)
    want = np.abs(z)
    assert ((got.view(np.int64) == want.view(np.int64)) | (np.isnan(got) & np.isnan(want))).all()


def test_a_modulus_decision_with_libm_is_exact_or_undecided():
    hl = ex.compiled("hypot_le")
    assert hl(2.0, 0.0, 2.0, False) == 1 and hl(0.0, -2.0, 2.0, False) == 1
    assert hl(np.nextafter(2.0, 3), 0.0, 2.0, False) == 0
    assert hl(1.2, 1.6, 2.0, False) == 2  # 2 to within an ulp: libm cannot decide for NumPy's abs
    assert hl(1.0, 1.0, 2.0, False) == 1 and hl(3.0, 1.0, 2.0, False) == 0 and hl(np.nan, 1.0, 2.0, False) == 0
    rng = np.random.default_rng(5)
    z = rng.standard_normal(2000) + 1j * rng.standard_normal(2000)
    tol = np.abs(z)  # the threshold at NumPy's own modulus: undecided (no part is zero)
    assert all(hl(w.real, w.imag, t, False) == 2 for w, t in zip(z, tol))


def _reference(p, q, tol, evaluate):
    return cp_match._best_transform_numpy(p, q, tol, evaluate)


def _cases(seed: int):
    """(p, q, tol, evaluate): the search's integer grids, sub-pixel refinement sets, copies with exact
    transforms (distances at the tolerance), duplicates, tiny sets."""
    rng = np.random.default_rng(seed)
    for _ in range(300):
        n = int(rng.integers(0, 25))
        kind = rng.integers(0, 4)
        p = (rng.integers(0, 30, n) * 4 + 4) + 1j * (rng.integers(0, 30, n) * 4 + 4)
        if kind == 0:  # the search: every second position, integer coordinates
            a = np.exp(1j * rng.uniform(-0.25, 0.25)) * rng.uniform(0.85, 1.15)
            q = np.round(a * p + rng.uniform(-20, 20) + 1j * rng.uniform(-20, 20))
            wrong = rng.random(n) < 0.4  # outliers: look-alikes elsewhere
            q[wrong] = rng.integers(4, 120, wrong.sum()) * 2.0
        elif kind == 1:  # refinement: sub-pixel positions
            q = 1.01 * p + (3 - 2j) + (rng.standard_normal(n) + 1j * rng.standard_normal(n)) * 0.3
        elif kind == 2:  # an exact shift by 2 px along an axis: distances exactly at the tolerance
            q = p + 2.0
            q[::3] += 2.0
        else:  # duplicates
            p = np.repeat(p[: max(1, n // 3)], 3)[:n]
            q = p + rng.integers(-3, 3, len(p)) * 1.0
        p, q = p.astype(np.complex128), q.astype(np.complex128)
        tol = float(rng.choice([2.0, 0.6, 0.4, 0.3]))
        evaluate = None
        if n and rng.random() < 0.4:
            keep = rng.random(len(p)) < 0.5
            evaluate = (p[keep] + 0.25, q[keep] + 0.25)
        yield p, q, tol, evaluate


@pytest.mark.parametrize("seed,ported", [(6, True), (7, True), (8, False)])
def test_compiled_best_transform_is_the_numpy_formulations(seed, ported, monkeypatch):
    """Both ways of deciding a modulus (the port; libm with a margin) against NumPy's own code."""
    if ported and not ex.modulus_is_ported():
        pytest.skip("this NumPy's modulus is not the FMA SIMD loop")
    monkeypatch.setattr(ex, "modulus_is_ported", lambda: ported)
    decided = 0
    for p, q, tol, evaluate in _cases(seed):
        got = cp_match.best_transform(p, q, tol, evaluate)
        want = _reference(p, q, tol, evaluate)
        assert (got[0], complex(got[1]), complex(got[2])) == (want[0], complex(want[1]), complex(want[2]))
        assert np.array([got[1], got[2]]).tobytes() == np.array([want[1], want[2]]).tobytes()
        ep, eq = evaluate if evaluate is not None else (p, q)
        decided += ex.best_transform_compiled(p, q, ep, eq, tol, 2.0 * cp_patches.PATCH, cp_patches.SCALE_SLACK,
                                              float(cp_patches.MAX_ROTATION)) is not None
    assert decided > 200  # the compiled path decides nearly all of them (the rest fall back to NumPy)
