"""copy-paste's compiled NCC kernels: the local NCCs, the search's exact recheck, verification's decisions.

Each kernel is a plain function compiled by numba on first use (``kernel(name)``; numba's import and
compile stay out of fpr's import, ``cache=True`` keeps the machine code between processes: a fresh
clone pays the compile once). The scorer's constants come in as arguments, so this module depends on
nothing of copy_paste (which owns the algorithm and its definitions); what each kernel must reproduce is
said in its docstring and tested against its NumPy formulation in tests/scorers/test_kernels.py.
"""
from __future__ import annotations

import numpy as np


def _local_ncc_loops(templates, windows, width, height, x0, y0, r, inside, out):
    """``out[k, a, b]``: NCC of template k with the window at (x0[k] + b - r, y0[k] + a - r); ``inside``: it exists.

    Each NCC is one fixed expression, so its bits depend on nothing else (not the BLAS, the batch, the
    CPU's vector width): the 64 products are exact in float64, summed in eight interleaved partial sums
    (d mod 8, in order) combined as a fixed tree, then rounded to float32. Outside the image: 0.
    """
    n_k, n_d = templates.shape
    n = 2 * r + 1
    acc = np.empty(8)  # the eight partial sums, updated as one vector per step (same bits as eight scalars)
    tk = np.empty(n_d)
    for k in range(n_k):
        for d in range(n_d):
            tk[d] = templates[k, d]
        for a in range(n):
            y = y0[k] + a - r
            for b in range(n):
                x = x0[k] + b - r
                if x < 0 or x >= width or y < 0 or y >= height:
                    inside[k, a, b] = False
                    out[k, a, b] = 0.0
                    continue
                inside[k, a, b] = True
                row = y * width + x
                for j in range(8):
                    acc[j] = 0.0
                for i in range(0, n_d, 8):
                    for j in range(8):
                        acc[j] += tk[i + j] * np.float64(windows[row, i + j])
                low, high = (acc[0] + acc[1]) + (acc[2] + acc[3]), (acc[4] + acc[5]) + (acc[6] + acc[7])
                out[k, a, b] = np.float32(low + high)


def _local_ncc_blocked(templates, blocks, width, height, x0, y0, r, inside, out):
    """:func:`_local_ncc_loops` (the definition: same arguments, same bits) on the windows stored blocked:
    ``blocks[i, pos * 8 + j]`` = component ``8 i + j`` of the window at ``pos`` (see :func:`_to_blocks`).

    Why: in that layout one template row's ``2r + 1`` windows are ``8 (2r + 1)`` contiguous lanes per
    block ``i``, so the loop over lanes (block ``i`` unrolled inside it, in order) is one that LLVM's loop
    vectoriser takes; each lane is the definition's partial sum ``j`` of one window, accumulated in the
    same order from the same exact products, and the windows' trees are the definition's. A row that
    leaves the image on the left or right takes the per-window path (same expression, scalar).
    """
    _local_ncc_band_compiled(templates, blocks, width, height, x0, y0, r, r, 0, 2 * r, inside, out)


def _local_ncc_band(templates, blocks, width, height, x0, y0, r, rx, a_lo, a_hi, inside, out):
    """:func:`_local_ncc_blocked` on part of each template's (2r+1) x (2r+1) grid: rows ``a_lo..a_hi`` and the
    ``2 rx + 1`` middle columns (``r - rx .. r + rx``); the other entries of ``inside`` and ``out`` are not
    written. The same expression for every window it computes."""
    n_k = templates.shape[0]
    n = 2 * rx + 1  # windows per row computed; column c of them is column c + r - rx of the grid
    lanes = 8 * n
    rep = np.empty((8, lanes))  # the template's block i, repeated once per window of a row (float64: exact)
    acc = np.empty(lanes)
    for k in range(n_k):
        for i in range(8):
            for c in range(n):
                for j in range(8):
                    rep[i, c * 8 + j] = templates[k, i * 8 + j]
        xs = x0[k] - rx
        for a in range(a_lo, a_hi + 1):
            y = y0[k] + a - r
            if y < 0 or y >= height:
                for c in range(n):
                    inside[k, a, c + r - rx] = False
                    out[k, a, c + r - rx] = 0.0
                continue
            if xs >= 0 and xs + n <= width:
                base = (y * width + xs) * 8
                b0, b1, b2, b3 = blocks[0, base:], blocks[1, base:], blocks[2, base:], blocks[3, base:]
                b4, b5, b6, b7 = blocks[4, base:], blocks[5, base:], blocks[6, base:], blocks[7, base:]
                for m in range(lanes):
                    v = 0.0
                    v += rep[0, m] * np.float64(b0[m])
                    v += rep[1, m] * np.float64(b1[m])
                    v += rep[2, m] * np.float64(b2[m])
                    v += rep[3, m] * np.float64(b3[m])
                    v += rep[4, m] * np.float64(b4[m])
                    v += rep[5, m] * np.float64(b5[m])
                    v += rep[6, m] * np.float64(b6[m])
                    v += rep[7, m] * np.float64(b7[m])
                    acc[m] = v
                for c in range(n):
                    o = c * 8
                    low = (acc[o] + acc[o + 1]) + (acc[o + 2] + acc[o + 3])
                    high = (acc[o + 4] + acc[o + 5]) + (acc[o + 6] + acc[o + 7])
                    inside[k, a, c + r - rx] = True
                    out[k, a, c + r - rx] = np.float32(low + high)
                continue
            for c in range(n):
                x = xs + c
                if x < 0 or x >= width:
                    inside[k, a, c + r - rx] = False
                    out[k, a, c + r - rx] = 0.0
                    continue
                inside[k, a, c + r - rx] = True
                base = (y * width + x) * 8
                for j in range(8):
                    v = 0.0
                    for i in range(8):
                        v += rep[i, j] * np.float64(blocks[i, base + j])
                    acc[j] = v
                low, high = (acc[0] + acc[1]) + (acc[2] + acc[3]), (acc[4] + acc[5]) + (acc[6] + acc[7])
                out[k, a, c + r - rx] = np.float32(low + high)


def _to_blocks(windows, blocks):
    """``blocks[i, pos * 8 + j] = windows[pos, 8 i + j]``: the layout of :func:`_local_ncc_blocked` (a copy)."""
    for i in range(8):
        for pos in range(windows.shape[0]):
            for j in range(8):
                blocks[i, pos * 8 + j] = windows[pos, i * 8 + j]


def _fixed_dot(u, v):
    """The NCC expression of :func:`_local_ncc_loops` for two rows (exact float64 products, the fixed tree)."""
    acc = np.zeros(8)
    for i in range(0, u.shape[0], 8):
        for j in range(8):
            acc[j] += np.float64(u[i + j]) * np.float64(v[i + j])
    return np.float32(((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])))


def _best_match_loops(ncc, templates, windows, top, margin, idx, val):
    """Per template: the window with the highest NCC as :func:`_local_ncc_loops` computes it, and that NCC.

    ``ncc`` is the BLAS product and ``top`` its row argmax. Per row, the floor (float32, rounded down) = its
    maximum less ``margin``, the BLAS error bound; the windows at or above it (usually the argmax alone,
    found by a branch-free count) are recomputed, so the result is the argmax (first on ties) of the fixed
    expression over *all* windows: it cannot depend on the BLAS. (NumPy's argmax stays: SIMD, where a
    compiled scan is branchy.)
    """
    n_m, n_l = ncc.shape
    for m in range(n_m):
        floor64 = np.float64(ncc[m, top[m]]) - margin
        floor = np.float32(floor64)
        if np.float64(floor) > floor64:  # rounded up: one float32 step down
            floor = np.nextafter(floor, np.float32(-np.inf))
        count = 0
        for l in range(n_l):
            count += ncc[m, l] >= floor
        if count == 1:
            idx[m], val[m] = top[m], _fixed_dot_compiled(templates[m], windows[top[m]])
            continue
        best, at = np.float32(-np.inf), 0
        for l in range(n_l):
            if ncc[m, l] >= floor:
                v = _fixed_dot_compiled(templates[m], windows[l])
                if v > best:
                    best, at = v, l
        idx[m], val[m] = at, best


def _offset32(lo, mid, hi):
    """Sub-pixel offset of a peak from a parabola through three float32 samples (0 where a neighbour is missing);
    float32 arithmetic throughout."""
    if not (np.isfinite(lo) and np.isfinite(mid) and np.isfinite(hi)):
        return np.float32(0.0)
    den = (lo - np.float32(2.0) * mid) + hi
    if not den < np.float32(-1e-6):
        return np.float32(0.0)
    return min(max((np.float32(0.5) * (lo - hi)) / den, np.float32(-0.5)), np.float32(0.5))


def _inner_peak(ncc, inside, k):
    """(NCC, row, column) of the first maximum of template k's inner 3x3 (rows and columns 1..3 of its 5x5,
    row-major, as argmax; outside the image -inf)."""
    ninf = np.float32(-np.inf)
    v, ja, jb = ninf, 1, 1
    first = True
    for a in range(1, 4):
        for b in range(1, 4):
            val = ncc[k, a, b] if inside[k, a, b] else ninf
            if first or val > v:
                v, ja, jb, first = val, a, b, False
    return v, ja, jb


def _verify_loops(ncc, inside, x0, y0, fx, fy, strict, ncc_min, drop, half, ok, px, py):
    """:func:`verify`'s decisions from the 5x5 local NCCs, per template (see there); loose: sub-pixel peaks.

    float32 where NCCs meet NCCs or thresholds (the thresholds as float32), float64 once the sub-pixel
    offsets (float64) enter: each value is one fixed expression.
    """
    ninf = np.float32(-np.inf)
    ncc_min, drop = np.float32(ncc_min), np.float32(drop)
    two, four = np.float32(2.0), np.float32(4.0)
    q = np.empty((3, 3), np.float32)  # strict: the 3x3 around the nearest sample, -4 outside (NCC >= -1)
    for k in range(ncc.shape[0]):
        v, ja, jb = _inner_peak_compiled(ncc, inside, k)
        if strict:
            for a in range(3):
                for b in range(3):
                    q[a, b] = ncc[k, a + 1, b + 1] if inside[k, a + 1, b + 1] else np.float32(-4.0)
            gx, gy = (q[1, 2] - q[1, 0]) / two, (q[2, 1] - q[0, 1]) / two
            hxx, hyy = (q[1, 2] - two * q[1, 1]) + q[1, 0], (q[2, 1] - two * q[1, 1]) + q[0, 1]
            hxy = (((q[2, 2] - q[2, 0]) - q[0, 2]) + q[0, 0]) / four
            x, y = fx[k], fy[k]
            at = (((q[1, 1] + gx * x) + gy * y) + 0.5 * ((hxx * x) * x + (hyy * y) * y)) + (hxy * x) * y
            ok[k] = v >= ncc_min and at >= v - drop
        else:
            lo = ncc[k, ja, jb - 1] if inside[k, ja, jb - 1] else ninf
            hi = ncc[k, ja, jb + 1] if inside[k, ja, jb + 1] else ninf
            dx = _offset32_compiled(lo, v, hi)
            lo = ncc[k, ja - 1, jb] if inside[k, ja - 1, jb] else ninf
            hi = ncc[k, ja + 1, jb] if inside[k, ja + 1, jb] else ninf
            dy = _offset32_compiled(lo, v, hi)
            px[k] = (np.float64(x0[k] + jb - 2) + np.float64(dx)) + half
            py[k] = (np.float64(y0[k] + ja - 2) + np.float64(dy)) + half
            ok[k] = v >= ncc_min


def _support_loops(ncc, inside, ncc_min):
    """How many templates reach ``ncc_min`` (as float32) somewhere inside their 3x3 (outside counts -1)."""
    ncc_min = np.float32(ncc_min)
    count = 0
    for k in range(ncc.shape[0]):
        m = np.float32(-1.0)
        for a in range(3):
            for b in range(3):
                if inside[k, a, b] and ncc[k, a, b] > m:
                    m = ncc[k, a, b]
        if m >= ncc_min:
            count += 1
    return count


def _window_rows(image, p, out):
    """``out[y * w + x] = image[y:y + p, x:x + p].ravel()`` for every position (w = width - p + 1): what
    ``sliding_window_view(image, (p, p)).reshape(-1, p * p)`` copies, in one pass (a copy: the same bits)."""
    h, w = image.shape[0] - p + 1, image.shape[1] - p + 1
    for y in range(h):
        for x in range(w):
            row = y * w + x
            for dy in range(p):
                for dx in range(p):
                    out[row, dy * p + dx] = image[y + dy, x + dx]


def _grid_rows(image, p, stride, out):
    """``out[i * nx + j] = image[i * stride:i * stride + p, j * stride:j * stride + p].ravel()``: what
    ``sliding_window_view(image, (p, p))[::stride, ::stride].reshape(-1, p * p)`` copies, in one pass."""
    nx = (image.shape[1] - p) // stride + 1
    for row in range(out.shape[0]):
        y, x = (row // nx) * stride, (row % nx) * stride
        for dy in range(p):
            for dx in range(p):
                out[row, dy * p + dx] = image[y + dy, x + dx]


def _textured(t, tn, nx, width, patch, stride, texture_min, max_keep, temps, weights, centres, flipped, rank):
    """copy_paste.ReferencePatches.of's selection of one scale's patches, in one pass; returns how many.

    NumPy's rules, kept: ``tn / patch >= texture_min`` divides float32 by float32(patch) and compares with
    float32(texture_min) (a Python float meeting a float32 array is cast to it: NEP 50); the most textured
    ``max_keep`` and the ranks come from stable sorts of ``-tn`` (mergesort: equal norms keep index order),
    the kept ones in index order; ``t / tn`` and ``tn ** 2`` in float32; a centre ``(x + patch / 2) + 1j * (y +
    patch / 2)`` is (x', y') exactly (``1j * y'`` is ``(0 * y' - 0, y')``, +0 for the grid's y' >= 0)."""
    limit, p32 = np.float32(texture_min), np.float32(patch)
    keep = np.empty(tn.shape[0], np.int64)
    m = 0
    for k in range(tn.shape[0]):
        if np.float32(tn[k] / p32) >= limit:
            keep[m] = k
            m += 1
    keep = keep[:m]
    if m > max_keep:
        keep = np.sort(keep[np.argsort(-tn[keep], kind="mergesort")[:max_keep]])
        m = max_keep
    order = np.argsort(-tn[keep], kind="mergesort")
    for i in range(m):
        rank[order[i]] = i
        k = keep[i]
        for d in range(t.shape[1]):
            temps[i, d] = np.float32(t[k, d] / tn[k])
        weights[i] = np.float32(tn[k] * tn[k])
        x, y = np.float64((k % nx) * stride) + patch / 2, np.float64((k // nx) * stride) + patch / 2
        centres[i], flipped[i] = complex(x, y), complex(width - x, y)
    return m


def _normalised_layouts(win, norm, floor, width, blocks, coarse, coarse_t):
    """The detrended windows ``win`` (L, 64) divided by ``max(norm, floor)`` per row (float32, as NumPy's
    ``win /= np.maximum(norm, floor)[:, None]``: the correctly rounded float32 quotient, whether LLVM divides
    in float32 or in float64 and rounds once, the same number), written in one pass into the blocked
    layout (:func:`_to_blocks`) and, at positions (2i, 2j), into ``coarse`` and its transpose ``coarse_t``.
    ``floor`` is float32; a NaN norm divides as NumPy's maximum propagates it."""
    cw = (width + 1) // 2
    row = np.empty(win.shape[1], np.float32)
    for pos in range(win.shape[0]):
        d = norm[pos] if (norm[pos] >= floor or np.isnan(norm[pos])) else floor
        for m in range(row.shape[0]):  # branch-free, so the loop vectoriser takes the divisions
            row[m] = win[pos, m] / d
        for i in range(8):
            for j in range(8):
                blocks[i, pos * 8 + j] = row[i * 8 + j]
        y, x = pos // width, pos % width
        if y % 2 == 0 and x % 2 == 0:
            dst = (y // 2) * cw + x // 2
            for m in range(row.shape[0]):
                coarse[dst, m] = row[m]
                coarse_t[m, dst] = row[m]


def _row_norms(x, out):
    """``out[p] = np.linalg.norm(x[p])`` for float32 rows of 64 as NumPy computes it: ``sqrt`` of
    ``add.reduce(x * x)``, whose float32 pairwise summation (numpy/_core/src/umath/loops_utils.h.src) on a row
    of 64 keeps eight partial sums (element j, j + 8, ... in order) combined as ``((r0 + r1) + (r2 + r3)) +
    ((r4 + r5) + (r6 + r7))``; each square rounded to float32 first. :func:`row_norms` checks it against this
    machine's NumPy before use."""
    r = np.empty(8, np.float32)
    for p in range(x.shape[0]):
        for j in range(8):
            r[j] = x[p, j] * x[p, j]
        for i in range(8, 64, 8):
            for j in range(8):
                r[j] += x[p, i + j] * x[p, i + j]
        out[p] = np.sqrt(((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7])))


_NORMS_PORTED: list[bool] = []


def row_norms(x: np.ndarray) -> np.ndarray:
    """``np.linalg.norm(x, axis=1)`` of C-contiguous float32 rows of 64, the same bits: compiled
    (:func:`_row_norms`, 5x faster on 128 px windows) when it gives this machine's NumPy bits on a probe set
    (checked once per process: random rows over many magnitudes, signed zeros, subnormals, overflow, NaN),
    NumPy's otherwise (a NumPy whose reduction sums in another order)."""
    if not _NORMS_PORTED:
        rng = np.random.default_rng(20261126)
        probe = rng.standard_normal((4000, 64)).astype(np.float32)
        probe *= (10.0 ** rng.integers(-20, 19, (4000, 1))).astype(np.float32)
        probe[:8, :4] = [[0.0, -0.0, 1e-45, -3e-39], [3e38, 1.0, -2.0, 0.5], [np.nan, 1, 2, 3], [np.inf, 0, 0, 0],
                         [-0.0, -0.0, -0.0, -0.0], [1e-20, 1e-20, 1e-23, 0], [1e19, 1e19, 1e19, 1e19], [1, 1, 1, 1]]
        probe[4] = -0.0
        got = np.empty(len(probe), np.float32)
        kernel("_row_norms")(probe, got)
        with np.errstate(over="ignore", invalid="ignore"):  # the probe's overflows are deliberate
            want = np.linalg.norm(probe, axis=1)
        _NORMS_PORTED.append(bool(((got.view(np.int32) == want.view(np.int32)) | (np.isnan(got) & np.isnan(want))).all()))
    if not (_NORMS_PORTED[0] and x.dtype == np.float32 and x.ndim == 2 and x.shape[1] == 64 and x.flags.c_contiguous):
        return np.linalg.norm(x, axis=1)
    out = np.empty(len(x), np.float32)
    kernel("_row_norms")(x, out)
    return out


def _near(templates, blocks, width, height, pred_re, pred_im, half, r, x0, y0, fx, fy, inside, ncc):
    """:func:`_local_ncc_blocked` around predicted centres, with copy_paste._local_ncc's NumPy steps before it:
    ``x0 = rint(pred.real - half)`` (round half to even, as np.rint), ``fx = (pred.real - half) - x0`` (the
    prediction within its nearest sample), the same for y: one call instead of a dozen NumPy ones."""
    _nearest_compiled(pred_re, pred_im, half, x0, y0, fx, fy)
    _local_ncc_blocked_compiled(templates, blocks, width, height, x0, y0, r, inside, ncc)


def _nearest(pred_re, pred_im, half, x0, y0, fx, fy):
    """Each prediction's nearest window, ``x0 = rint(pred.real - half)`` (round half to even, as np.rint),
    and the prediction within it, ``fx = (pred.real - half) - x0``; the same for y."""
    for k in range(pred_re.shape[0]):
        xr, yr = pred_re[k] - half, pred_im[k] - half
        x0[k], y0[k] = np.int64(np.rint(xr)), np.int64(np.rint(yr))
        fx[k], fy[k] = xr - np.float64(x0[k]), yr - np.float64(y0[k])


def _window_ncc(templates, blocks, k, pos):
    """The NCC of template k with the window at ``pos`` (blocked layout): the definition's expression (eight
    partial sums over the exact float64 products, in order, the fixed tree, rounded to float32)."""
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    base = pos * 8
    for i in range(8):
        t, w = templates[k, i * 8:], blocks[i, base:]
        s0 += np.float64(t[0]) * np.float64(w[0])
        s1 += np.float64(t[1]) * np.float64(w[1])
        s2 += np.float64(t[2]) * np.float64(w[2])
        s3 += np.float64(t[3]) * np.float64(w[3])
        s4 += np.float64(t[4]) * np.float64(w[4])
        s5 += np.float64(t[5]) * np.float64(w[5])
        s6 += np.float64(t[6]) * np.float64(w[6])
        s7 += np.float64(t[7]) * np.float64(w[7])
    return np.float32(((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)))


def _verify_near(templates, blocks, width, height, pred_re, pred_im, half, strict, ncc_min, drop, ok, px, py):
    """copy_paste.verify's local NCCs and decisions in one call: :func:`_verify_loops` on the 5x5 NCCs, of
    which only the ones its decisions read are computed (the same values): strictly the inner 3x3 (9 of
    25); loosely the inner three rows (15) and, above or below the inner peak when it lies on the inner
    3x3's top or bottom row, that one window (the sub-pixel parabola's vertical neighbour)."""
    n = pred_re.shape[0]
    x0, y0, fx, fy = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n), np.empty(n)
    inside, ncc = np.zeros((n, 5, 5), np.bool_), np.zeros((n, 5, 5), np.float32)
    _nearest_compiled(pred_re, pred_im, half, x0, y0, fx, fy)
    _local_ncc_band_compiled(templates, blocks, width, height, x0, y0, 2, 1 if strict else 2, 1, 3, inside, ncc)
    if not strict:
        for k in range(n):
            _, ja, jb = _inner_peak_compiled(ncc, inside, k)
            if ja != 2:  # row 0 or 4 at column jb: one window, the same expression
                a = ja - 1 if ja == 1 else ja + 1
                x, y = x0[k] + jb - 2, y0[k] + a - 2
                if 0 <= x < width and 0 <= y < height:
                    inside[k, a, jb] = True
                    ncc[k, a, jb] = _window_ncc_compiled(templates, blocks, k, y * width + x)
    _verify_loops_compiled(ncc, inside, x0, y0, fx, fy, strict, ncc_min, drop, half, ok, px, py)


def _support_near(templates, blocks, width, height, pred_re, pred_im, half, ncc_min):
    """copy_paste._support in one call (:func:`_near` within 1 px, then :func:`_support_loops`)."""
    n = pred_re.shape[0]
    x0, y0, fx, fy = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n), np.empty(n)
    inside, ncc = np.empty((n, 3, 3), np.bool_), np.empty((n, 3, 3), np.float32)
    _near_compiled(templates, blocks, width, height, pred_re, pred_im, half, 1, x0, y0, fx, fy, inside, ncc)
    return _support_loops_compiled(ncc, inside, ncc_min)


# kernels that other kernels call, in an order where each one's callees come first: the callers bind their
# compiled versions (``<name>_compiled``; the plain functions until then, so the module imports without numba)
_CALLEES = ("_offset32", "_fixed_dot", "_local_ncc_band", "_local_ncc_blocked", "_inner_peak", "_verify_loops",
            "_support_loops", "_nearest", "_near", "_window_ncc")
for _name in _CALLEES:
    globals()[_name + "_compiled"] = globals()[_name]
_COMPILED: dict = {}  # numba's import and compile stay out of the module import: compiled on first use
KERNEL_SET = "copy-paste"  # this module's, exact's and align's kernels (fpr.compiled.wait_ahead)


def kernel(name: str):
    """The compiled version of one of this module's kernels (compiled, or loaded from numba's cache, on first use)."""
    if name not in _COMPILED:
        from fpr.compiled import njit, wait_ahead

        if not _COMPILED:
            wait_ahead(KERNEL_SET)  # a process compiling them into numba's cache: load them from there
            for callee in _CALLEES:
                _COMPILED[callee] = globals()[callee + "_compiled"] = njit(nogil=True)(globals()[callee])
        if name not in _COMPILED:
            _COMPILED[name] = njit(nogil=True)(globals()[name])
    return _COMPILED[name]
