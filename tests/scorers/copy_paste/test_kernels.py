"""copy-paste's compiled local NCC: known answers, the correctly rounded dot product, independence of the batch."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fpr.scorers.copy_paste import match as cp_match, patches as cp_patches
from fpr.scorers.copy_paste.match import _local_ncc
from fpr.scorers.copy_paste.patches import PATCH


def _windows(rng, width, height):
    w = rng.standard_normal((width * height, PATCH * PATCH)).astype(np.float32)
    return w / np.linalg.norm(w, axis=1, keepdims=True)


def test_hand_computed_values_and_the_border():
    width, height = 6, 5
    windows = np.zeros((width * height, 64), np.float32)
    windows[:, 0] = np.arange(width * height, dtype=np.float32) / 100  # window at (x, y): (y * width + x) / 100
    windows[:, 1] = 0.5
    templates = np.zeros((1, 64), np.float32)
    templates[0, 0], templates[0, 1] = 2.0, 1.0
    # the transform puts the centre at (4 + 1, 4 + 0): nearest window x0 = 1, y0 = 0
    pred, x0, y0, inside, ncc = _local_ncc(templates, windows, width, height, np.array([5 + 4j]), 1 + 0j, 0j, 1)
    assert (x0[0], y0[0]) == (1, 0) and pred[0] == 5 + 4j
    assert not inside[0, 0].any() and inside[0, 1:].all()  # row y = -1 is outside
    for a in (1, 2):
        for b in range(3):
            x, y = 1 + b - 1, a - 1
            assert ncc[0, a, b] == np.float32(2 * float(windows[y * width + x, 0]) + 0.5), (a, b)
    assert (ncc[0, 0] == 0).all()


def test_values_agree_with_the_correctly_rounded_dot_products():
    """The fixed float64 tree is not correctly rounded in general, but within far less than a float32 ulp."""
    rng = np.random.default_rng(3)
    width, height = 30, 25
    windows = _windows(rng, width, height)
    templates = _windows(rng, 7, 1)
    centres = rng.uniform(0, 34, 7) + 1j * rng.uniform(0, 29, 7)
    _, x0, y0, inside, ncc = _local_ncc(templates, windows, width, height, centres, 0.98 + 0.05j, 1 - 2j, 2)
    checked = 0
    for k in range(7):
        for a in range(5):
            for b in range(5):
                x, y = x0[k] + b - 2, y0[k] + a - 2
                assert inside[k, a, b] == (0 <= x < width and 0 <= y < height)
                if inside[k, a, b]:
                    exact = math.fsum(float(t) * float(w) for t, w in zip(templates[k], windows[y * width + x]))
                    assert ncc[k, a, b] == np.float32(exact)
                    checked += 1
    assert checked > 100


def test_a_value_does_not_depend_on_the_other_templates():
    rng = np.random.default_rng(4)
    windows = _windows(rng, 20, 20)
    templates = _windows(rng, 9, 1)
    centres = rng.uniform(4, 20, 9) + 1j * rng.uniform(4, 20, 9)
    full = _local_ncc(templates, windows, 20, 20, centres, 1.02 - 0.01j, 0.3 + 0.7j, 2)[4]
    part = _local_ncc(templates[3:5], windows, 20, 20, centres[3:5], 1.02 - 0.01j, 0.3 + 0.7j, 2)[4]
    assert full[3:5].tobytes() == part.tobytes()


# --- verify and _support against their NumPy formulation before compilation (revision 5a58c08), kept here as
# the reference: fed the same local NCCs, the compiled decisions and sub-pixel positions must be the same bits.

def _offset_reference(lo, mid, hi):
    ok = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(mid)
    lo, mid, hi = np.where(ok, lo, 0.0), np.where(ok, mid, 1.0), np.where(ok, hi, 0.0)
    den = lo - 2 * mid + hi
    ok &= den < -1e-6
    return np.clip(np.where(ok, 0.5 * (lo - hi) / np.where(ok, den, -1.0), 0.0), -0.5, 0.5)


def _verify_reference(pred, x0, y0, inside, local, tol):
    from fpr.scorers.copy_paste.patches import DROP_MAX, NCC_MIN

    local = np.where(inside, local, -np.inf)
    rows = np.arange(len(pred))
    inner = local[:, 1:4, 1:4].reshape(len(pred), 9)
    j = inner.argmax(axis=1)
    v = inner[rows, j]
    if tol is None:
        fx, fy = pred.real - PATCH / 2 - x0, pred.imag - PATCH / 2 - y0
        L = np.where(inside, local, -4.0)
        gx, gy = (L[:, 2, 3] - L[:, 2, 1]) / 2, (L[:, 3, 2] - L[:, 1, 2]) / 2
        hxx, hyy = L[:, 2, 3] - 2 * L[:, 2, 2] + L[:, 2, 1], L[:, 3, 2] - 2 * L[:, 2, 2] + L[:, 1, 2]
        hxy = (L[:, 3, 3] - L[:, 3, 1] - L[:, 1, 3] + L[:, 1, 1]) / 4
        at = L[:, 2, 2] + gx * fx + gy * fy + 0.5 * (hxx * fx * fx + hyy * fy * fy) + hxy * fx * fy
        return (v >= NCC_MIN) & (at >= v - DROP_MAX), pred
    cy, cx = j // 3 + 1, j % 3 + 1
    dx = _offset_reference(local[rows, cy, cx - 1], v, local[rows, cy, cx + 1])
    dy = _offset_reference(local[rows, cy - 1, cx], v, local[rows, cy + 1, cx])
    pos = (x0 + cx - 2 + dx + PATCH / 2) + 1j * (y0 + cy - 2 + dy + PATCH / 2)
    return (v >= NCC_MIN) & (np.abs(pos - pred) <= tol), pos


def _hard_case(seed, n=4000):
    """Local NCCs crowded at the thresholds: ties, values at float32(0.7) and next to it, flat 3x3s, borders."""
    rng = np.random.default_rng(seed)
    width, height = 40, 30
    near = np.float32(0.7)
    pool = np.array([near, np.nextafter(near, np.float32(0)), np.nextafter(near, np.float32(1)),
                     near - np.float32(0.02),
                     np.float32(0.72), np.float32(0.9), np.float32(1.0), np.float32(-1.0)], np.float32)
    local = rng.uniform(0.55, 1.0, (n, 5, 5)).astype(np.float32)
    pick = rng.random((n, 5, 5)) < 0.5
    local[pick] = rng.choice(pool, pick.sum())
    centres = rng.uniform(-2, width + 10, n) + 1j * rng.uniform(-2, height + 10, n)
    return local, centres, width, height


def _patched_local(monkeypatch, local):
    real = cp_match._local_ncc

    def fake(templates, windows, width, height, centres, a, b, r):
        pred, x0, y0, inside, _ = real(templates, windows, width, height, centres, a, b, r)
        return pred, x0, y0, inside, np.where(inside, local[:, 2 - r:3 + r, 2 - r:3 + r], 0).astype(np.float32)
    monkeypatch.setattr(cp_match, "_local_ncc", fake)
    return real


@pytest.mark.parametrize("tol", [None, 2.0, 0.6, 0.3])
def test_verify_matches_its_numpy_reference_bit_for_bit(monkeypatch, tol):
    local, centres, width, height = _hard_case(5)
    real = _patched_local(monkeypatch, local)
    windows = np.zeros((width * height, 64), np.float32)
    templates = np.zeros((len(centres), 64), np.float32)
    a, b = 1.03 + 0.04j, -0.37 + 0.21j
    ok, pos = cp_match.verify(templates, windows, width, height, centres, a, b, tol)
    pred, x0, y0, inside, _ = real(templates, windows, width, height, centres, a, b, 2)
    want_ok, want_pos = _verify_reference(pred, x0, y0, inside, np.where(inside, local, 0).astype(np.float32), tol)
    assert ok.tobytes() == want_ok.tobytes() and pos.tobytes() == want_pos.tobytes()
    assert 0 < ok.sum() < len(ok)  # both decisions are exercised


def test_support_matches_its_numpy_reference(monkeypatch):
    from fpr.scorers.copy_paste.patches import NCC_MIN, QueryWindows

    local, centres, width, height = _hard_case(6)
    real = _patched_local(monkeypatch, local)
    query = QueryWindows(np.zeros((width * height, 64), np.float32), width, height, np.zeros((1, 64), np.float32), 1)
    templates = np.zeros((len(centres), 64), np.float32)
    got = cp_match._support(templates, query, centres, 0.97 - 0.02j, 1.5 + 0j)
    _, _, _, inside, _ = real(templates, query.windows, width, height, centres, 0.97 - 0.02j, 1.5 + 0j, 1)
    inner = np.where(inside, local[:, 1:4, 1:4], -1.0).astype(np.float32)
    assert got == int((inner.reshape(len(centres), 9).max(axis=1) >= NCC_MIN).sum())
    assert 0 < got < len(centres)


def test_best_matches_is_the_fixed_expressions_argmax_over_all_windows():
    """The search: each template's best window by the correctly rounded NCC, first on ties, whatever BLAS found."""
    from fpr.scorers.copy_paste.match import _best_matches

    rng = np.random.default_rng(8)
    windows = _windows(rng, 50, 9)
    templates = _windows(rng, 12, 1)
    windows[300] = windows[17]  # an exact tie: the first window wins
    templates[0] = windows[17]
    # a near tie below the BLAS error: window 200 is window 100 with one component nudged by an ulp
    windows[200] = windows[100]
    windows[200, 5] = np.nextafter(windows[100, 5], np.float32(2))
    templates[1] = windows[100]
    idx, val = _best_matches(templates, windows)
    # the product in the other layout (the scorer's: windows transposed, contiguous) decides the same
    idx_t, val_t = _best_matches(templates, windows, np.ascontiguousarray(windows.T))
    assert idx_t.tobytes() == idx.tobytes() and val_t.tobytes() == val.tobytes()
    for m in range(len(templates)):
        exact = np.array([np.float32(math.fsum(float(t) * float(w) for t, w in zip(templates[m], row)))
                          for row in windows])
        assert idx[m] == int(np.argmax(exact)) and val[m] == exact.max(), m
    assert idx[0] == 17


@pytest.mark.parametrize("shape", [(8, 8), (9, 8), (37, 128), (128, 85), (128, 128)])
def test_window_rows_and_normalised_layouts_are_numpys(shape):
    """The compiled gather gives exactly sliding_window_view's rows; the fused division and layouts give exactly
    NumPy's ``win / np.maximum(norm, floor)`` in the blocked layout and its every-second windows and their
    transpose (odd and even sizes; flat windows under the floor, zeros of both signs, subnormals, a NaN)."""
    from numpy.lib.stride_tricks import sliding_window_view

    from fpr.scorers.copy_paste.patches import WINDOW_NORM_FLOOR
    from fpr.scorers.copy_paste.kernels import kernel

    rng = np.random.default_rng(shape[0] * 1000 + shape[1])
    image = rng.random(shape, dtype=np.float32)
    image[0, 0], image[-1, -1] = -0.0, np.float32(1e-42)
    want = sliding_window_view(image, (PATCH, PATCH)).reshape(-1, PATCH * PATCH)
    rows = np.empty_like(want)
    kernel("_window_rows")(image, PATCH, rows)
    assert rows.tobytes() == np.ascontiguousarray(want).tobytes()

    win = (rows - rows.mean(axis=1, keepdims=True)).astype(np.float32)
    win[::5] *= np.float32(1e-3)  # flat: divided by the floor
    if len(win) > 2:
        win[1, :3] = [-0.0, 1e-45, 3e-39]
        win[2, 7] = np.nan
    norm = np.linalg.norm(win, axis=1)
    unit = win / np.maximum(norm, WINDOW_NORM_FLOOR)[:, None]
    h, w = shape[0] - PATCH + 1, shape[1] - PATCH + 1
    coarse_want = unit.reshape(h, w, -1)[::2, ::2].reshape(-1, PATCH * PATCH)
    coarse, coarse_t = np.empty_like(coarse_want), np.empty(coarse_want.T.shape, np.float32)
    blocks = np.empty((8, len(win) * 8), np.float32)
    kernel("_normalised_layouts")(win, norm, WINDOW_NORM_FLOOR, w, blocks, coarse, coarse_t)
    assert blocks.reshape(8, -1, 8).transpose(1, 0, 2).reshape(len(win), 64).tobytes() == unit.tobytes()
    assert coarse.tobytes() == np.ascontiguousarray(coarse_want).tobytes()
    assert coarse_t.tobytes() == np.ascontiguousarray(coarse_want.T).tobytes()


def test_prepared_images_equal_their_separate_preparation():
    """Sharing the working-size greyscale image between patches and windows changes no bit."""
    from PIL import Image

    from fpr.scorers.copy_paste.patches import QueryWindows, ReferencePatches

    from fpr.scorers.copy_paste.scorer import _Prepared

    rng = np.random.default_rng(12)
    image = Image.fromarray(rng.integers(0, 256, (90, 140, 3), dtype=np.uint8))
    prepared = _Prepared(image)
    patches, windows = prepared.patches, prepared.windows
    assert prepared.patches is patches  # made once
    alone_p, alone_w = ReferencePatches.of(image), QueryWindows.of(image)
    for field in ("templates", "centres", "scale_index", "n_textured", "rank", "flipped", "flipped_centres", "weight"):
        assert getattr(patches, field).tobytes() == getattr(alone_p, field).tobytes(), field
    for field in ("windows", "coarse", "coarse_t"):
        assert getattr(windows, field).tobytes() == getattr(alone_w, field).tobytes(), field
    assert (windows.width, windows.height, windows.coarse_width) == (alone_w.width, alone_w.height,
                                                                     alone_w.coarse_width)


@pytest.mark.parametrize("r", [1, 2, 3])
def test_blocked_local_ncc_equals_the_definition_bit_for_bit(r):
    """The vectorised kernel (windows stored blocked) against ``_local_ncc_loops`` (the definition) on random
    unit windows, every border (rows and columns leaving the image on each side, images narrower than a row
    of windows) and adversarial components: zeros of both signs, subnormals, huge and cancelling values."""
    from fpr.scorers.copy_paste.kernels import kernel

    rng = np.random.default_rng(40 + r)
    for width, height in ((30, 22), (3, 9), (1, 1), (2 * r + 1, 4)):
        windows = _windows(rng, width, height)
        nasty = rng.random(windows.shape) < 0.1
        windows[nasty] = rng.choice(np.array([0.0, -0.0, 1e-40, -1e-42, 3e38, -3e38, 1.0, -1.0, 0.5], np.float32),
                                    nasty.sum())
        n = 400
        templates = _windows(rng, n, 1)
        templates[::7] = windows[rng.integers(0, len(windows), len(templates[::7]))]  # exact self-matches
        templates[3::11, ::3] = -0.0
        x0 = rng.integers(-r - 2, width + r + 2, n)
        y0 = rng.integers(-r - 2, height + r + 2, n)
        k = 2 * r + 1
        want_in, want = np.empty((n, k, k), bool), np.empty((n, k, k), np.float32)
        kernel("_local_ncc_loops")(templates, windows, width, height, x0, y0, r, want_in, want)
        blocks = np.empty((8, len(windows) * 8), np.float32)
        kernel("_to_blocks")(windows, blocks)
        assert blocks.reshape(8, -1, 8).transpose(1, 0, 2).reshape(len(windows), 64).tobytes() == windows.tobytes()
        got_in, got = np.empty((n, k, k), bool), np.empty((n, k, k), np.float32)
        kernel("_local_ncc_blocked")(templates, blocks, width, height, x0, y0, r, got_in, got)
        assert got_in.tobytes() == want_in.tobytes()
        assert got.tobytes() == want.tobytes(), (width, height)
        assert want_in.any() and not want_in.all()


def test_query_windows_store_the_blocked_layout_of_the_row_major_windows():
    """QueryWindows.of keeps the blocked layout; through _local_ncc both layouts give the same values."""
    from PIL import Image

    from fpr.scorers.copy_paste.patches import QueryWindows, _grey, _windows as row_major

    image = Image.fromarray(np.random.default_rng(13).integers(0, 256, (70, 101, 3), dtype=np.uint8))
    qw = QueryWindows.of(image)
    rows = row_major(_grey(image, 128))
    assert qw.windows.shape == (8, len(rows), 8)
    assert qw.windows.transpose(1, 0, 2).reshape(len(rows), 64).tobytes() == rows.tobytes()
    rng = np.random.default_rng(14)
    templates = _windows(rng, 50, 1)
    centres = rng.uniform(-5, 140, 50) + 1j * rng.uniform(-5, 100, 50)
    a, b = 0.97 + 0.03j, 1.25 - 0.5j
    got = _local_ncc(templates, qw.windows, qw.width, qw.height, centres, a, b, 2)
    want = _local_ncc(templates, rows, qw.width, qw.height, centres, a, b, 2)
    for g, w in zip(got, want):
        assert g.tobytes() == w.tobytes()


@pytest.mark.parametrize("tol", [None, 2.0, 0.3])
def test_fused_verify_and_support_equal_their_step_by_step_form(tol):
    """verify and _support on blocked windows (one compiled call each) against the step-by-step path (NumPy
    predictions, rint and offsets, the definition's local NCCs, the decision kernels) on row-major windows:
    the same masks, positions and counts, bit for bit, at half-integer predictions (rint's ties) and borders."""
    from fpr.scorers.copy_paste.kernels import kernel

    rng = np.random.default_rng(21)
    width, height = 40, 31
    windows = _windows(rng, width, height)
    blocks = np.empty((8, len(windows) * 8), np.float32)
    kernel("_to_blocks")(windows, blocks)
    blocked = blocks.reshape(8, len(windows), 8)
    n = 600
    centres = rng.uniform(-4, width + 12, n) + 1j * rng.uniform(-4, height + 12, n)
    centres[:100] = np.round(centres[:100] * 2) / 2  # half-integer centres: rint rounds half to even
    templates = windows[rng.integers(0, len(windows), n)].copy()  # exact matches somewhere, mostly elsewhere
    templates[::3] = _windows(rng, len(templates[::3]), 1)
    for k in range(200, 500):  # the window the identity puts template k on, or the one above or below it
        dy = (k - 200) % 3 - 1 if k >= 400 else 0  # (peaks on the inner 3x3's top and bottom rows: the loose
        x, y = int(np.rint(centres[k].real - 4)), int(np.rint(centres[k].imag - 4)) + dy  # check reads row 0/4)
        if 0 <= x < width and 0 <= y < height:
            templates[k] = windows[y * width + x]
    found = 0
    query_rows = cp_patches.QueryWindows(windows, width, height, np.zeros((1, 64), np.float32), 1)
    query_blocked = cp_patches.QueryWindows(blocked, width, height, np.zeros((1, 64), np.float32), 1)
    for a, b in ((1 + 0j, 0j), (1 + 0j, 0.5 - 0.5j), (0.97 + 0.04j, 1.3 - 0.2j), (1.05 - 0.02j, -2.5 + 0j)):
        ok_r, pos_r = cp_match.verify(templates, windows, width, height, centres, a, b, tol)
        ok_b, pos_b = cp_match.verify(templates, blocked, width, height, centres, a, b, tol)
        assert ok_b.tobytes() == ok_r.tobytes() and pos_b.tobytes() == pos_r.tobytes()
        assert cp_match._support(templates, query_blocked, centres, a, b) == cp_match._support(templates, query_rows, centres, a, b)
        found += int(ok_r.sum())
    assert 0 < found < 4 * n


def test_reference_patch_views_equal_the_mask_selections():
    """ReferencePatches.at_scale and .search (views and cached arrays) equal the boolean selections they replace."""
    from PIL import Image

    from fpr.scorers.copy_paste.patches import SCALES, SEARCH_PATCHES, ReferencePatches

    image = Image.fromarray(np.random.default_rng(15).integers(0, 256, (60, 150, 3), dtype=np.uint8))
    ref = ReferencePatches.of(image.resize((20, 50)))  # small: the largest scales keep few patches, some none
    assert 0 in set(ref.n_textured) or len(set(ref.n_textured)) > 1
    for ref in (ref, ReferencePatches.of(image)):
        for si in range(len(SCALES)):
            for mirrored in (False, True):
                t, c = ref.at_scale(si, mirrored)
                at = ref.scale_index == si
                assert t.tobytes() == (ref.flipped if mirrored else ref.templates)[at].tobytes()
                assert c.tobytes() == (ref.flipped_centres if mirrored else ref.centres)[at].tobytes()
        chosen = ref.rank < SEARCH_PATCHES
        templates, scale, centres, flipped_centres = ref.search
        assert templates.tobytes() == np.concatenate([ref.templates[chosen], ref.flipped[chosen]]).tobytes()
        assert scale.tobytes() == ref.scale_index[chosen].tobytes()
        assert centres.tobytes() == ref.centres[chosen].tobytes()
        assert flipped_centres.tobytes() == ref.flipped_centres[chosen].tobytes()
        assert ref.search is ref.search  # made once


def test_row_norms_are_numpys_bit_for_bit():
    """The compiled row norms against np.linalg.norm(axis=1): random rows over magnitudes whose squares
    underflow and overflow, signed zeros, subnormals, NaN and infinity; and the probe says the port is used."""
    from fpr.scorers.copy_paste import kernels as ck

    rng = np.random.default_rng(16)
    x = rng.standard_normal((50_000, 64)).astype(np.float32)
    x *= (10.0 ** rng.integers(-25, 21, (len(x), 1))).astype(np.float32)
    pick = rng.random(x.shape) < 0.02
    x[pick] = rng.choice(np.array([0.0, -0.0, 1e-45, -1e-40, 3e38, np.inf, -np.inf, np.nan], np.float32), pick.sum())
    with np.errstate(over="ignore", invalid="ignore"):  # deliberate overflows
        want = np.linalg.norm(x, axis=1)
    got = ck.row_norms(x)
    assert ck._NORMS_PORTED == [True]  # this machine's NumPy sums as the port does
    same = (got.view(np.int32) == want.view(np.int32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), np.flatnonzero(~same)[:5]
    assert np.isinf(got).any() and (got == 0).any() and np.isnan(got).any()
    strided = x[:, ::2].copy()  # not rows of 64: NumPy's own
    with np.errstate(over="ignore", invalid="ignore"):
        assert ck.row_norms(strided).tobytes() == np.linalg.norm(strided, axis=1).tobytes()


def _textured_reference(t, tn, nx, width):
    """ReferencePatches.of's NumPy selection of one scale's patches before it was compiled (revision c3c6750):
    (templates, weights, centres, mirrored centres, ranks)."""
    from fpr.scorers.copy_paste.patches import MAX_PATCHES_PER_SCALE, STRIDE, TEXTURE_MIN

    keep = np.flatnonzero(tn / PATCH >= TEXTURE_MIN)
    if len(keep) > MAX_PATCHES_PER_SCALE:
        keep = np.sort(keep[np.argsort(-tn[keep], kind="stable")[:MAX_PATCHES_PER_SCALE]])
    yy, xx = np.divmod(keep, nx)
    order = np.argsort(-tn[keep], kind="stable")
    rank = np.empty(len(keep), int)
    rank[order] = np.arange(len(keep))
    return (t[keep] / tn[keep, None], tn[keep] ** 2, (xx * STRIDE + PATCH / 2) + 1j * (yy * STRIDE + PATCH / 2),
            (width - (xx * STRIDE + PATCH / 2)) + 1j * (yy * STRIDE + PATCH / 2), rank)


@pytest.mark.parametrize("n", [1, 50, 96, 97, 400])
def test_textured_patch_selection_is_numpys(n):
    """The compiled selection against NumPy's: norms at float32(0.03) * 8 and its neighbours (the float32
    comparison NumPy makes with the Python float; a float64 one would differ), many equal norms (the stable
    sorts' index order), more than MAX_PATCHES_PER_SCALE, none kept."""
    from fpr.scorers.copy_paste.patches import MAX_PATCHES_PER_SCALE, STRIDE, TEXTURE_MIN
    from fpr.scorers.copy_paste.kernels import kernel

    rng = np.random.default_rng(n)
    edge = np.float32(TEXTURE_MIN) * np.float32(PATCH)
    assert float(edge / np.float32(PATCH)) != TEXTURE_MIN  # the float32 comparison is the one that decides
    for trial in range(30):
        t = rng.standard_normal((n, PATCH * PATCH)).astype(np.float32)
        tn = rng.choice(np.array([edge, np.nextafter(edge, np.float32(0)), np.nextafter(edge, np.float32(1)), 0.3,
                                  0.5, 0.0, 1.0], np.float32), n) if trial % 2 else \
            rng.uniform(0, 1.2, n).astype(np.float32)
        if trial == 29:
            tn[:] = 0.1  # none kept
        nx, width = int(rng.integers(1, 40)), float(rng.integers(200, 300))
        out = (np.empty(t.shape, np.float32), np.empty(n, np.float32), np.empty(n, complex), np.empty(n, complex),
               np.empty(n, np.int64))
        m = kernel("_textured")(t, tn, nx, width, PATCH, STRIDE, TEXTURE_MIN, MAX_PATCHES_PER_SCALE, *out)
        want = _textured_reference(t, tn, nx, width)
        for got, w in zip(out, want):
            assert got[:m].tobytes() == w.tobytes(), trial
    assert m == 0


def test_grid_rows_are_the_strided_windows():
    from numpy.lib.stride_tricks import sliding_window_view

    from fpr.scorers.copy_paste.patches import STRIDE
    from fpr.scorers.copy_paste.kernels import kernel

    rng = np.random.default_rng(3)
    for shape in ((8, 8), (9, 17), (45, 31), (128, 90)):
        image = rng.random(shape, np.float32)
        want = sliding_window_view(image, (PATCH, PATCH))[::STRIDE, ::STRIDE]
        got = np.empty((want.shape[0] * want.shape[1], PATCH * PATCH), np.float32)
        kernel("_grid_rows")(image, PATCH, STRIDE, got)
        assert got.tobytes() == want.reshape(-1, PATCH * PATCH).tobytes()
