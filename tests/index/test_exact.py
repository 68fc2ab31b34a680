"""Exact scores: float32(fl64(q . g)) against answers known by hand and by exact rational arithmetic."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from fpr.index import exact as E

pytestmark = pytest.mark.determinism

F32 = np.float32


@pytest.fixture(params=["numba", "numpy"])
def engine(request):
    return request.param


def _scores(q, g, engine, **kw):
    stats = E.ScoreStats()
    out = E.exact_scores(np.asarray(q, np.float32), np.asarray(g, np.float32), engine=engine, stats=stats, **kw)
    return out, stats


def _by_fractions(q: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The definition computed independently: exact rational dot product -> float64 -> float32."""
    qf = [[Fraction(float(x)) for x in row] for row in q]
    gf = [[Fraction(float(x)) for x in row] for row in g]
    # float(Fraction) is correctly rounded (integer true division), i.e. fl64 of the exact value
    return np.array([[F32(float(sum(a * b for a, b in zip(qr, gr)))) for gr in gf] for qr in qf], dtype=np.float32)


def _bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.int32)


def test_small_integers_need_no_fallback(engine):
    out, st = _scores([[1, 2, 3], [0, 0, 0]], [[4, 5, 6], [-1, 0.5, 0.25]], engine)
    assert out.tolist() == [[32.0, 0.75], [0.0, 0.0]]
    assert st.elements == 4 and st.fallbacks == 0


def test_a_float64_value_at_a_float32_midpoint_takes_the_fsum_path(engine):
    # q.g = 1 + 2^-24 exactly: the midpoint between float32 1 and 1 + 2^-23. The interval around the
    # float64 product straddles it, so the element is recomputed; the tie goes to even (1.0).
    out, st = _scores([[1, 1]], [[1, 2.0 ** -24]], engine)
    assert st.fallbacks == 1 and out[0, 0] == F32(1.0)
    # 2^-52 above the midpoint (exact in float64): rounds up to 1 + 2^-23, though summing the five
    # products left to right in float64 cancels 2^-24 and gives 1 + 2^-52, which would round to 1.0
    g = [[1, 2.0 ** -24, 2.0 ** 30, -2.0 ** 30, 2.0 ** -52]]
    assert ((1.0 + 2.0 ** -24) + 2.0 ** 30 - 2.0 ** 30) + 2.0 ** -52 == 1.0 + 2.0 ** -52
    out, st = _scores([[1, 1, 1, 1, 1]], g, engine)
    assert st.fallbacks == 1 and out[0, 0] == F32(1.0 + 2.0 ** -23)
    # 2^-52 below it: down to 1.0
    out, st = _scores([[1, 1, 1]], [[1, 2.0 ** -24, -2.0 ** -52]], engine)
    assert st.fallbacks == 1 and out[0, 0] == F32(1.0)


def test_fsum_helper_rounds_the_exact_sum_once():
    q = np.array([[2.0 ** 30, 1.0, -2.0 ** 30, 2.0 ** -40]], np.float64)
    g = np.ones_like(q)
    assert E._fsum_dots(q, g).tolist() == [F32(1.0 + 2.0 ** -40)]
    assert E._fsum_dots(-q, g).view(np.int32).tolist() == [F32(-1.0 - 2.0 ** -40).view(np.int32)]


def test_zero_is_positive_whatever_the_sign_of_the_sum(engine):
    # exact value -2^-140 * 2^-20 underflows float32 to -0.0; exact 0 from cancellation: both +0.0
    out, _ = _scores([[2.0 ** -140, 1.0, -1.0]], [[-2.0 ** -20, 0.0, 0.0], [0.0, 1.0, 1.0]], engine)
    assert _bits(out).tolist() == [[0, 0]]


@pytest.mark.parametrize("seed", [0, 1])
def test_random_scores_equal_exact_rational_arithmetic(engine, seed):
    """3000 elements, half of them near-orthogonal pairs (tiny scores: float32 ulps below the float64
    error bound, so many take the fsum path) and half ordinary ones."""
    rng = np.random.default_rng(seed)
    d = 48
    q = rng.normal(size=(20, d)).astype(np.float32)
    g = rng.normal(size=(150, d)).astype(np.float32)
    unit = q[0].astype(np.float64) / np.linalg.norm(q[0])
    for j in range(0, 150, 2):  # project out q[0]: q[0] . g_j is a few float32 ulps of the terms
        g64 = g[j].astype(np.float64)
        g[j] = (g64 - (g64 @ unit) * unit).astype(np.float32)
    g[1::4] *= F32(1e-3)  # other magnitudes too
    out, st = _scores(q, g, engine)
    np.testing.assert_array_equal(_bits(out), _bits(_by_fractions(q, g)))
    assert st.elements == 3000 and 0 < st.fallbacks < 300


def test_chunks_and_engines_agree():
    rng = np.random.default_rng(5)
    q = rng.normal(size=(7, 33)).astype(np.float32)
    g = rng.normal(size=(101, 33)).astype(np.float32)
    whole, _ = _scores(q, g, "numba")
    for engine in ("numba", "numpy"):
        for work in (1, 2000, 1 << 20):  # one gallery column per chunk, a few, all at once
            out, _ = _scores(q, g, engine, work_bytes=work)
            np.testing.assert_array_equal(_bits(out), _bits(whole))
    out, _ = _scores(q, g, "numpy", vector_norms=E.norms(g))
    np.testing.assert_array_equal(_bits(out), _bits(whole))


def test_every_element_at_a_midpoint_is_recomputed(engine):
    q = np.ones((4, 2), np.float32)
    g = np.array([[1.0, 2.0 ** -24]] * 5, np.float32)
    out, st = _scores(q, g, engine)
    assert st.fallbacks == 20 and (out == F32(1.0)).all()


def test_compiled_fsum_equals_math_fsum():
    """The numba port against CPython's math.fsum: cancellation, ties to even across partials
    (sum([1e-16, 1, 1e16]) style), signs, zeros, and wide exponent ranges of float32 products."""
    from fpr.index import _exact_kernels as K

    rng = np.random.default_rng(3)
    partials = np.empty(K.MAX_PARTIALS)
    cases = [([1.0, 1.0, 1.0], [2.0 ** 53, 1.0, -2.0 ** -60]), ([1.0, 1.0, 1.0], [1e16, 1.0, 1e-16]),
             ([1.0, 1.0, 1.0, 1.0], [2.0 ** 60, 1.0, -2.0 ** 60, 2.0 ** -80]), ([0.0, -0.0], [1.0, 1.0]),
             ([], []), ([1.0, 1.0, 1.0], [-2.0 ** 53, -1.0, -2.0 ** -60])]
    for _ in range(2000):
        n = int(rng.integers(1, 40))
        scale = np.exp2(rng.integers(-120, 120, size=n)).astype(np.float32)
        cases.append(((rng.normal(size=n) * scale).astype(np.float32),
                      (rng.normal(size=n) * scale[::-1]).astype(np.float32)))
    for a, b in cases:
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        want = math.fsum((a64 * b64).tolist())
        got = K.fsum_dot(a64, b64, partials)
        assert got == want and (got != 0 or np.copysign(1, got) == np.copysign(1, want)), (a, b)


def test_non_finite_vectors_are_an_error(engine):
    with pytest.raises(ValueError, match="finite vectors only"):
        _scores([[1.0, np.nan]], [[1.0, 1.0]], engine)
    with pytest.raises(ValueError, match="finite vectors only"):
        _scores([[1.0, 1.0]], [[np.inf, 1.0]], engine)
    with pytest.raises(ValueError, match=r"\(n, D\) and \(m, D\)"):
        _scores([[1.0, 1.0]], [[1.0, 1.0, 1.0]], engine)


def test_error_factor_bounds_the_float64_error():
    assert E.error_factor(128) >= 128 * 2.0 ** -53
    with pytest.raises(ValueError, match="dims below"):
        E.error_factor(1 << 30)
