"""``copy-paste``: flags generations that reproduce a reference image instead of re-rendering the subject.

Paper section 5.1: an editing-style generator that pastes the reference subject
into a new scene gets near-perfect retrieval scores, which then reflect
memorisation, not identity preservation. A copy keeps the reference's *pixels in
their arrangement*: whatever it moved, resized, cropped, flipped, slightly
rotated, recoloured or recompressed, many small textured patches of the
reference are found in the query exactly where one similarity transform puts
them. A re-rendering of the subject (a new pose, viewpoint, body warp)
reproduces the markings but not their exact arrangement, so only a few patches
land within a fraction of a pixel of where the transform predicts.

Per query and reference (the ``copy-paste.max_refs`` most similar by appearance,
default 5), both in greyscale at 96 px on the longer side, lightly blurred:

1. the reference is cut into 8x8 patches (half-overlapping) at 9 scales
   (x1.41 .. x0.35, steps of 2^(1/4)); the 48 most textured per scale are kept;
2. the 24 most textured patches per scale, and their mirror images (for a
   mirrored copy), are matched at every second position of the query by
   normalised cross-correlation after removing each window's mean and linear
   gradient (flat areas and smooth gradients match nothing; brightness, contrast
   and mild colour changes do not matter); best matches with NCC >= 0.8 propose,
   per scale and mirror, the similarity transform (rotation up to 12 degrees,
   scale within 12% of the level) most of them agree with (within 2 px);
3. every patch of that scale is then *verified* at full resolution where the
   transform puts it: collected loosely (within 2 px), the transform refitted,
   and counted when its NCC peak within 1 px is >= 0.8 and lies, located to a
   sub-pixel, within 0.3 px of the prediction (this also recovers patches whose
   best match was a look-alike, e.g. repeated spots).

Metrics
``score``
    in [0, 1], higher = more copy-like: the fraction of the reference's textured
    patches (at least 24 counted) verified in one arrangement, max over the
    checked references, scales and mirror. Also reported as ``pixel``.
``flag``
    1 when ``score >= copy-paste.threshold`` (default: see DEFAULTS, calibrated).
``pixel_matches``
    the number of verified patches behind the score.
``mirrored``
    1 when the best evidence came from the mirrored query.
``appearance``
    max cosine similarity between the query and its references under a general
    encoder (option ``copy-paste.encoder``, default ``pixels-16``). It ranks the
    references, and decides alone when no reference has a textured patch (flat
    cartoons): then ``score`` is the appearance, the flag is
    ``appearance >= 0.98`` (``copy-paste.appearance_threshold``) and a ``note``
    says so.

The default threshold is calibrated on calibration seeds of the built-in world
and validated on other seeds by ``benchmarks/calibrate_copy_paste.py`` (table in
``benchmarks/results/copy_paste_calibration.md``); ``docs/workflows.md`` says how
to recalibrate it on one's own labelled queries. Limitations: copies rotated by
more than about 12 degrees, or warped, are not caught; a subject smaller than
about a third of the frame leaves few patches; periodic textures shared by
reference and query (brick walls, tiles) can produce consistent matches.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view
from PIL import Image, ImageFilter

from fpr import progress
from fpr.encoders.embed import embed_paths
from fpr.errors import InputError
from fpr.eval.encoding import cached_encoder
from fpr.eval.scorers import QueryBatch, Scorer, register_scorer
from fpr.images import load_rgb

DEFAULT_ENCODER = "pixels-16"
WORK_SIDE = 96  # longer side of the greyscale working images
PATCH = 8
STRIDE = 4  # reference patches overlap by half
SCALES = tuple(2.0 ** (-k / 4) for k in range(-2, 7))  # reference scale relative to the query: 1.41 .. 0.35
BLUR = 0.8  # Gaussian sigma (px at the working size): pixel noise and JPEG blocks carry no evidence
NCC_MIN = 0.8
TEXTURE_MIN = 0.03  # residual std (0..1 grey) after removing a patch's mean and gradient
TOLERANCE = 0.3  # px at the working size (match positions are sub-pixel): a copy is exact, a re-rendering not
MAX_ROTATION = np.deg2rad(12.0)
SCALE_SLACK = 0.12  # a consistent set may be this much larger/smaller than its scale level
MIN_DENOMINATOR = 24  # a reference with few textured patches cannot reach a high fraction by chance
MAX_PATCHES_PER_SCALE = 48  # the most textured ones
SEARCH_PATCHES = 24  # of which these are searched everywhere; all are verified
HYPOTHESIS_TOLERANCE = 2.0  # px: the search runs on every second query position
DEFAULTS = {"max_refs": 5, "threshold": 0.219, "appearance_threshold": 0.98}  # threshold: see the calibration


_BASIS: dict[int, np.ndarray] = {}


def _basis(p: int) -> np.ndarray:
    """Orthonormal rows spanning constant, x-ramp and y-ramp patches (what detrending removes)."""
    if p not in _BASIS:
        yy, xx = np.mgrid[0:p, 0:p].astype(np.float32)
        b = np.stack([np.ones((p, p), np.float32), xx - xx.mean(), yy - yy.mean()]).reshape(3, -1)
        _BASIS[p] = b / np.linalg.norm(b, axis=1, keepdims=True)
    return _BASIS[p]


def _detrend(x: np.ndarray) -> np.ndarray:
    b = _basis(PATCH)
    return x - (x @ b.T) @ b


def _grey(image: Image.Image, side: float) -> np.ndarray:
    im = image.convert("L")
    w, h = im.size
    s = side / max(w, h)
    im = im.resize((max(PATCH, round(w * s)), max(PATCH, round(h * s))), Image.BILINEAR)
    return np.asarray(im.filter(ImageFilter.GaussianBlur(BLUR)), dtype=np.float32) / 255.0


def _windows(q: np.ndarray) -> np.ndarray:
    win = _detrend(sliding_window_view(q, (PATCH, PATCH)).reshape(-1, PATCH * PATCH))
    norm = np.linalg.norm(win, axis=1)
    # Flat windows get a floor instead of a tiny norm, so they never reach a high NCC.
    win /= np.maximum(norm, TEXTURE_MIN * PATCH * 0.5)[:, None]
    return win


@dataclass
class QueryWindows:
    """Every PATCH x PATCH window of the query, detrended, unit rows, at WORK_SIDE; and every second one."""

    windows: np.ndarray  # (L, PATCH*PATCH) float32, row-major over positions
    width: int  # windows per row
    height: int  # windows per column
    coarse: np.ndarray  # (L2, PATCH*PATCH): positions (2i, 2j), for the search
    coarse_width: int

    @classmethod
    def of(cls, image: Image.Image) -> "QueryWindows":
        q = _grey(image, WORK_SIDE)
        win = np.ascontiguousarray(_windows(q), dtype=np.float32)
        h, w = q.shape[0] - PATCH + 1, q.shape[1] - PATCH + 1
        coarse = np.ascontiguousarray(win.reshape(h, w, -1)[::2, ::2].reshape(-1, PATCH * PATCH))
        return cls(win, w, h, coarse, (w + 1) // 2)


@dataclass
class ReferencePatches:
    """A reference's textured patches at every scale: unit templates, centres, scale index."""

    templates: np.ndarray  # (K, PATCH*PATCH)
    centres: np.ndarray  # (K,) complex x + iy, at that scale
    scale_index: np.ndarray  # (K,)
    n_textured: np.ndarray  # (len(SCALES),) patches kept per scale
    rank: np.ndarray  # (K,) texture rank within its scale (0 = most textured)
    flipped: np.ndarray  # (K, PATCH*PATCH): the templates mirrored left-right (a mirrored copy's patches)
    flipped_centres: np.ndarray  # (K,) their centres in the mirrored reference

    @classmethod
    def of(cls, image: Image.Image) -> "ReferencePatches":
        grey = image.convert("L")
        temps, cents, scs, counts, ranks, fcents = [], [], [], [], [], []
        for si, s in enumerate(SCALES):
            r = _grey(grey, WORK_SIDE * s)
            if min(r.shape) < PATCH:
                counts.append(0)
                continue  # (nothing else to append: no patches at this scale)
            # patches on a half-overlapping grid: enough of them fall inside the subject
            win = sliding_window_view(r, (PATCH, PATCH))[::STRIDE, ::STRIDE]
            ny, nx = win.shape[:2]
            t = _detrend(win.reshape(-1, PATCH * PATCH))
            tn = np.linalg.norm(t, axis=1)
            keep = np.flatnonzero(tn / PATCH >= TEXTURE_MIN)
            if len(keep) > MAX_PATCHES_PER_SCALE:
                keep = np.sort(keep[np.argsort(-tn[keep], kind="stable")[:MAX_PATCHES_PER_SCALE]])
            yy, xx = np.divmod(keep, nx)
            order = np.argsort(-tn[keep], kind="stable")
            rank = np.empty(len(keep), int)
            rank[order] = np.arange(len(keep))
            ranks.append(rank)
            temps.append(t[keep] / tn[keep, None])
            cents.append((xx * STRIDE + PATCH / 2) + 1j * (yy * STRIDE + PATCH / 2))
            fcents.append((r.shape[1] - (xx * STRIDE + PATCH / 2)) + 1j * (yy * STRIDE + PATCH / 2))
            scs.append(np.full(len(keep), si))
            counts.append(len(keep))
        t = np.concatenate(temps).astype(np.float32)
        # mean/gradient removal commutes with a left-right flip, so flipped templates stay unit and detrended
        flipped = np.ascontiguousarray(t.reshape(-1, PATCH, PATCH)[:, :, ::-1].reshape(len(t), -1))
        return cls(t, np.concatenate(cents), np.concatenate(scs), np.array(counts), np.concatenate(ranks),
                   flipped, np.concatenate(fcents))


def best_transform(p: np.ndarray, q: np.ndarray, tol: float = 0.3) -> tuple[int, complex, complex]:
    """The similarity ``z -> a z + b`` (complex) that maps most correspondences ``p -> q`` within ``tol`` px.

    Hypotheses: every pair (rotation <= MAX_ROTATION, scale within SCALE_SLACK of 1) and
    every single point as a pure shift. Returns (inliers, a, b).
    """
    n = len(p)
    if n == 0:
        return 0, 1 + 0j, 0j
    shifts = q - p
    votes = (np.abs(shifts[:, None] - shifts[None, :]) <= tol).sum(axis=1)
    k = int(votes.argmax())
    best = (int(votes[k]), 1 + 0j, complex(shifts[k]))
    if n < 2:
        return best
    i, j = np.triu_indices(n, 1)
    dp = p[j] - p[i]
    ok = np.abs(dp) > 2 * PATCH
    i, j, dp = i[ok], j[ok], dp[ok]
    if len(i) == 0:
        return best
    a = (q[j] - q[i]) / dp
    ok = (np.abs(np.abs(a) - 1) <= SCALE_SLACK) & (np.abs(np.angle(a)) <= MAX_ROTATION)
    if not ok.any():
        return best
    a, i = a[ok], i[ok]
    b = q[i] - a * p[i]
    counts = (np.abs(a[:, None] * p[None, :] + b[:, None] - q[None, :]) <= tol).sum(axis=1)
    h = int(counts.argmax())
    if counts[h] > best[0]:
        best = (int(counts[h]), complex(a[h]), complex(b[h]))
    return best


def _offset(lo: np.ndarray, mid: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Sub-pixel offset of a peak from a parabola through three samples (0 where a neighbour is missing)."""
    ok = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(mid)
    lo, mid, hi = np.where(ok, lo, 0.0), np.where(ok, mid, 1.0), np.where(ok, hi, 0.0)
    den = lo - 2 * mid + hi
    ok &= den < -1e-6
    return np.clip(np.where(ok, 0.5 * (lo - hi) / np.where(ok, den, -1.0), 0.0), -0.5, 0.5)


def verify(templates: np.ndarray, windows: np.ndarray, width: int, height: int, centres: np.ndarray,
           a: complex, b: complex, tol: float = TOLERANCE) -> tuple[np.ndarray, np.ndarray]:
    """Templates found where the transform ``z -> a z + b`` puts them: the NCC peak within 1 px of the
    prediction is >= NCC_MIN and, located to a sub-pixel, within ``tol`` (default TOLERANCE) of it.

    NCC is computed only on the 5x5 windows around each prediction (cheap), so every patch of
    the scale is checked; this also recovers patches whose best match elsewhere was a look-alike
    (repeated spots or stripes). Returns (inlier mask, refined query positions).
    """
    pred = a * centres + b
    x0 = np.rint(pred.real - PATCH / 2).astype(int)
    y0 = np.rint(pred.imag - PATCH / 2).astype(int)
    d = np.arange(-2, 3)
    xs = x0[:, None, None] + d[None, None, :]
    ys = y0[:, None, None] + d[None, :, None]
    inside = (xs >= 0) & (xs < width) & (ys >= 0) & (ys < height)
    local = np.einsum("kd,kabd->kab", templates, windows[np.where(inside, ys * width + xs, 0)])
    local = np.where(inside, local, -np.inf)
    rows = np.arange(len(centres))
    inner = local[:, 1:4, 1:4].reshape(len(centres), 9)
    j = inner.argmax(axis=1)
    v = inner[rows, j]
    cy, cx = j // 3 + 1, j % 3 + 1
    dx = _offset(local[rows, cy, cx - 1], v, local[rows, cy, cx + 1])
    dy = _offset(local[rows, cy - 1, cx], v, local[rows, cy + 1, cx])
    pos = (x0 + cx - 2 + dx + PATCH / 2) + 1j * (y0 + cy - 2 + dy + PATCH / 2)
    return (v >= NCC_MIN) & (np.abs(pos - pred) <= tol), pos


def _refit(p: np.ndarray, q: np.ndarray) -> tuple[complex, complex]:
    """Least-squares similarity ``q = a p + b`` (complex)."""
    pm, qm = p.mean(), q.mean()
    den = float(np.sum(np.abs(p - pm) ** 2))
    a = complex(np.sum((q - qm) * np.conj(p - pm)) / den) if den > 1e-9 else 1 + 0j
    return a, complex(qm - a * pm)


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
    search = ref.rank < SEARCH_PATCHES
    n = int(search.sum())
    ncc = np.concatenate([ref.templates[search], ref.flipped[search]]) @ query.coarse.T  # (2n, L2)
    idx = ncc.argmax(axis=1)
    val = ncc[np.arange(len(idx)), idx]
    y, x = np.divmod(idx, query.coarse_width)
    q_all = (2 * x + PATCH / 2) + 1j * (2 * y + PATCH / 2)
    scale = ref.scale_index[search]
    for mirrored in (False, True):
        part = slice(n, 2 * n) if mirrored else slice(0, n)
        q, good = q_all[part], val[part] >= NCC_MIN
        cen = (ref.flipped_centres if mirrored else ref.centres)[search]
        for si in np.unique(scale[good]):
            sel = good & (scale == si)
            n0, a, b = best_transform(cen[sel], q[sel], HYPOTHESIS_TOLERANCE)
            if n0 < 2:
                continue
            at = ref.scale_index == si
            t_at = (ref.flipped if mirrored else ref.templates)[at]
            c_at = (ref.flipped_centres if mirrored else ref.centres)[at]
            # the proposal is coarse: collect loosely, refit, then verify strictly (twice at most)
            inl, pos = verify(t_at, query.windows, query.width, query.height, c_at, a, b, HYPOTHESIS_TOLERANCE)
            if inl.sum() < 3:
                continue
            a, b = _refit(c_at[inl], pos[inl])
            inl, pos = verify(t_at, query.windows, query.width, query.height, c_at, a, b)
            for _ in range(2):
                if inl.sum() < 3:
                    break
                a2, b2 = _refit(c_at[inl], pos[inl])
                if abs(abs(a2) - 1) > SCALE_SLACK or abs(np.angle(a2)) > MAX_ROTATION:
                    break
                inl2, pos2 = verify(t_at, query.windows, query.width, query.height, c_at, a2, b2)
                if inl2.sum() <= inl.sum():
                    break
                inl, pos = inl2, pos2
            count = int(inl.sum())
            frac = count / max(int(ref.n_textured[si]), MIN_DENOMINATOR)
            if (count, frac) > (best[1], best[0]):
                best = (frac, count, mirrored)
    return best


def _option(batch: QueryBatch, key: str) -> float:
    raw = batch.options.get(f"copy-paste.{key}", DEFAULTS[key])
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise InputError(f"scorer option copy-paste.{key} must be a number, got '{raw}'") from None


class CopyPaste(Scorer):
    name = "copy-paste"
    description = ("flags generations that reproduce a reference image (pasted, moved, resized, mirrored, "
                   "recoloured, on a new background) instead of re-rendering the subject")
    needs = frozenset({"image", "references"})
    metrics = ("score", "flag", "pixel", "pixel_matches", "mirrored", "appearance")
    primary_metric = "flag"  # what a keep-rule means by `copy_paste`
    options = {
        "copy-paste.encoder": f"general encoder for the appearance signal (default {DEFAULT_ENCODER})",
        "copy-paste.max_refs": f"references pixel-checked per query, most similar first (default {DEFAULTS['max_refs']})",
        "copy-paste.threshold": f"flag at this score (default {DEFAULTS['threshold']}, calibrated on the world)",
        "copy-paste.appearance_threshold": f"flag at this appearance when no reference has texture to match "
                                           f"(default {DEFAULTS['appearance_threshold']})",
    }

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        max_refs = int(_option(batch, "max_refs"))
        threshold = _option(batch, "threshold")
        app_t = _option(batch, "appearance_threshold")
        rows = [i for i, refs in enumerate(batch.reference_paths) if refs]
        if not rows:
            return pd.DataFrame(columns=["query_id", "metric", "value", "note"])
        enc = cached_encoder(str(batch.options.get("copy-paste.encoder", DEFAULT_ENCODER)), batch.device)
        ref_paths = sorted({p for i in rows for p in batch.reference_paths[i]})
        ref_vecs = dict(zip(ref_paths, embed_paths(enc, ref_paths, desc="copy-paste: embedding references").vectors))
        q_vecs = embed_paths(enc, [batch.paths[i] for i in rows], desc="copy-paste: embedding queries").vectors
        patches: OrderedDict[str, ReferencePatches] = OrderedDict()  # references are shared by many queries
        out = []
        for j, i in enumerate(progress.bar(rows, desc="copy-paste: matching", unit="query")):
            refs = batch.reference_paths[i]
            sims = np.array([float(ref_vecs[r].astype(np.float64) @ q_vecs[j].astype(np.float64)) for r in refs])
            order = np.argsort(-sims, kind="stable")[:max(1, max_refs)]
            qw = QueryWindows.of(load_rgb(batch.paths[i]))
            frac, count, mirrored, checkable = 0.0, 0, False, False
            for k in order:
                rp = patches.get(refs[k])
                if rp is None:
                    rp = patches[refs[k]] = ReferencePatches.of(load_rgb(refs[k]))
                    if len(patches) > 256:
                        patches.popitem(last=False)
                checkable = checkable or len(rp.templates) > 0
                f, c, m = pixel_match(qw, rp)
                if (c, f) > (count, frac):
                    frac, count, mirrored = f, c, m
            appearance = float(sims.max())
            note = ""
            if checkable:
                score = float(frac)
                flag = float(score >= threshold)
            else:  # nothing textured to match: only a near-duplicate appearance can tell
                frac = count = mirrored = float("nan")
                score, flag = float(np.clip(appearance, 0, 1)), float(appearance >= app_t)
                note = "no reference has a textured patch: score = appearance"
            qid = batch.query_ids[i]
            out += [(qid, "score", score, note), (qid, "flag", flag, note), (qid, "pixel", frac, note),
                    (qid, "pixel_matches", float(count), note), (qid, "mirrored", float(mirrored), note),
                    (qid, "appearance", appearance, "")]
        return pd.DataFrame(out, columns=["query_id", "metric", "value", "note"])


register_scorer(CopyPaste())
