"""copy-paste's compiled refinement (fpr/scorers/copy_paste/align.py) against the NumPy code it replaces,
bit for bit."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fpr.scorers.copy_paste import match as cp_match, patches as cp_patches
from fpr.scorers.copy_paste import align as al


def _adversarial(rng, n):
    """float64s that stress a summation's order: huge and tiny exponents, cancellation, signed zeros,
    subnormals, and a few infinities and NaNs."""
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-300, 300, n)
    pick = rng.random(n)
    x[pick < 0.1] = rng.choice([0.0, -0.0, 5e-324, -5e-324, 2.2e-308, 1e308, -1e308], int((pick < 0.1).sum()))
    x[(pick > 0.5) & (pick < 0.6)] *= 1e-300
    return x


# sizes on both sides of every branch: < 8 doubles, 8..128, the splits at multiples of 8 (complex: half)
SIZES = [0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 63, 64, 65, 66, 96, 127, 128, 129, 130, 136, 200, 255, 256, 257,
         511, 1000, 1031, 4099]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sums_and_means_are_numpys_bit_for_bit(seed):
    """np.sum is 0.0 + the ported pairwise sum, z.mean() its complex division by n: random and adversarial."""
    from fpr.scorers.copy_paste.exact import compiled

    fsum, csum, cdiv = al.kernel("fsum"), al.kernel("csum"), compiled("cdiv")
    rng = np.random.default_rng(seed)
    for n in SIZES + list(rng.integers(0, 3000, 40)):
        for x, y in ((rng.standard_normal(n) * 10.0 ** rng.integers(-3, 8, n), rng.standard_normal(n)),
                     (_adversarial(rng, n), _adversarial(rng, n)),
                     (np.full(n, -0.0), np.full(n, -0.0))):
            z = x + 1j * y
            with np.errstate(all="ignore"):  # the adversarial sums overflow, as intended
                sr, si = csum(x, y, 0, n)
                assert _same([0.0 + fsum(x, 0, n)], [np.sum(x)]), n
                assert _same([0.0 + sr, 0.0 + si], [np.sum(z).real, np.sum(z).imag]), n
                if n:
                    mean = z.mean()
                    assert _same(cdiv(0.0 + sr, 0.0 + si, float(n), 0.0), [mean.real, mean.imag]), n


def _same(got, want) -> bool:
    """The same float64 bits, NaN matching any NaN."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return bool(((got.view(np.int64) == want.view(np.int64)) | (np.isnan(got) & np.isnan(want))).all())


def test_the_sum_is_not_a_plain_loop():
    """A hand-computed answer: 1e16 and fifteen ones. A running sum loses every one (1e16 + 1 ties to even,
    1e16); the pairwise sum keeps 14: partial sum 0 is 1e16 + x[8] = 1e16, partials 1..7 are 1 + 1 = 2, and
    ((1e16 + 2) + (2 + 2)) + ((2 + 2) + (2 + 2)) = 1e16 + 14 exactly (even, below 2^54)."""
    fsum = al.kernel("fsum")
    x = np.array([1e16] + [1.0] * 15)
    assert 0.0 + fsum(x, 0, 16) == np.sum(x) == 1e16 + 14.0
    plain = 0.0
    for v in x:
        plain += v
    assert plain == 1e16 != np.sum(x)


@pytest.mark.parametrize("seed", [3, 4])
def test_refit_is_numpys_bit_for_bit(seed):
    """copy_paste._refit (NumPy) against the compiled refit, on noisy similarities, collinear and coincident
    points (den <= 1e-9: a = 1), and 3 to 300 points."""
    refit = al.kernel("refit")
    rng = np.random.default_rng(seed)
    for trial in range(400):
        m = int(rng.integers(3, 300)) if trial % 4 else int(rng.integers(3, 8))
        p = rng.uniform(0, 128, m) + 1j * rng.uniform(0, 128, m)
        if trial % 10 == 1:
            p[:] = p[0] + rng.standard_normal(m) * 1e-7  # coincident: den below 1e-9
        a = complex(rng.uniform(0.85, 1.15), rng.uniform(-0.2, 0.2))
        q = a * p + complex(*rng.uniform(-20, 20, 2)) + (rng.standard_normal(m) + 1j * rng.standard_normal(m)) * 0.3
        want = cp_match._refit(p, q)
        out = np.empty(4)
        refit(p.real.copy(), p.imag.copy(), q.real.copy(), q.imag.copy(), out)
        assert np.array([out[0] + 1j * out[1], out[2] + 1j * out[3]]).tobytes() == np.array(want).tobytes()


def _scene(seed):
    """A textured reference and a query holding it moved, rotated 5 degrees, 8% larger and re-noised."""
    from PIL import Image, ImageFilter

    rng = np.random.default_rng(seed)
    ref = Image.fromarray(rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)).resize((160, 160), Image.BILINEAR)
    ref = ref.filter(ImageFilter.GaussianBlur(1.5))
    moved = ref.rotate(5, resample=Image.BICUBIC, expand=False).resize((173, 173), Image.BICUBIC)
    query = Image.fromarray(np.full((200, 200, 3), 128, np.uint8))
    query.paste(moved, (14, 9))
    noisy = np.asarray(query, np.float64) + rng.normal(0, 2.0, (200, 200, 3))
    return cp_patches.QueryWindows.of(Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))), cp_patches.ReferencePatches.of(ref)


@pytest.mark.parametrize("seed", [5, 6])
def test_refine_equals_verify_and_align_in_numpy(seed, monkeypatch):
    """Every scale's proposal near the true transform and perturbed ones (some collect fewer than 3): the
    compiled refinement's count equals verify + _align in NumPy, and pixel_match's result with it."""
    query, ref = _scene(seed)
    rng = np.random.default_rng(seed)
    cases, refined = [], 0
    for si in range(len(cp_patches.SCALES)):
        if ref.n_textured[si] < 3:
            continue
        t_at, c_at = ref.at_scale(si, False)
        s = 1.08 / cp_patches.SCALES[si]  # the query holds the reference 8% larger; scale si is the reference times SCALES[si]
        for _ in range(12):
            a = s * complex(math.cos(math.radians(5)), -math.sin(math.radians(5))) * complex(1 + rng.normal(0, 0.03),
                                                                                            rng.normal(0, 0.03))
            b = complex(*rng.uniform(-30, 60, 2))
            cases.append((t_at, c_at, a, b))
    for t_at, c_at, a, b in cases:
        got = cp_match._refine(t_at, c_at, query, a, b)
        with monkeypatch.context() as m:
            m.setattr(cp_match, "_align_is_compiled", lambda: False)
            want = cp_match._refine(t_at, c_at, query, a, b)
        assert got == want, (a, b)
        refined += got is not None and got >= 3
    assert refined >= 1 and refined < len(cases)  # both outcomes exercised
    got = cp_match.pixel_match(query, ref)
    monkeypatch.setattr(cp_match, "_align_is_compiled", lambda: False)
    assert got == cp_match.pixel_match(query, ref) and got[1] > 20  # the copy is found


def test_an_undecided_refinement_runs_numpys_steps(monkeypatch):
    """When the kernel cannot decide (UNDECIDED), _refine's answer is NumPy's, not the kernel's."""
    query, ref = _scene(7)
    t_at, c_at = ref.at_scale(2, False)
    monkeypatch.setattr(cp_match, "_align_is_compiled", lambda: False)
    proposals = [(1.08 * complex(math.cos(0.087), -math.sin(0.087)), complex(b, c)) for b in range(0, 40, 4)
                 for c in range(0, 40, 4)]
    want = [cp_match._refine(t_at, c_at, query, a, b) for a, b in proposals]
    monkeypatch.setattr(cp_match, "_align_is_compiled", lambda: True)
    monkeypatch.setattr(al, "kernel", lambda name: lambda *args: al.UNDECIDED)
    assert [cp_match._refine(t_at, c_at, query, a, b) for a, b in proposals] == want
