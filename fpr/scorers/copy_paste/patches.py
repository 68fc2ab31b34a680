"""copy-paste's working images: the constants of its search, the calibrated domain, and the patches
(templates, sought) and windows (searched) made from an image at the working size.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from PIL import Image, ImageFilter

from fpr.scorers.copy_paste.kernels import kernel as _kernel
from fpr.scorers.copy_paste.kernels import row_norms

DEFAULT_ENCODER = "pixels-16"
WORK_SIDE = 128  # longer side of the greyscale working images (upsampled when smaller: finer sub-pixel checks)
PATCH = 8
STRIDE = 4  # reference patches overlap by half
SCALES = tuple(2.0 ** (-k / 4) for k in range(-2, 4))  # reference scale relative to the query: 1.41 .. 0.59
BLUR = 0.5  # Gaussian sigma (px at the working size): pixel noise and JPEG blocks carry no evidence
NCC_MIN = 0.7  # a copy re-blurred or re-lit keeps small spots' NCC above this, not at 0.8 (calibration)
TEXTURE_MIN = 0.03  # residual std (0..1 grey) after removing a patch's mean and gradient
TOLERANCE = 0.3  # px at the working size: the refit's last step keeps matches this close to it
MAX_ROTATION = np.deg2rad(12.0)
SCALE_SLACK = 0.12  # a consistent set may be this much larger/smaller than its scale level
MIN_DENOMINATOR = 24  # a reference with few textured patches cannot reach a high fraction by chance
MAX_PATCHES_PER_SCALE = 96  # the most textured ones
SEARCH_PATCHES = 24  # of which these are searched everywhere; all are verified
HYPOTHESIS_TOLERANCE = 2.0  # px: the search runs on every second query position
REFINE_TOLERANCE = 0.6  # px: the loosely collected matches are refined from this tolerance down to TOLERANCE
_MIDDLE_TOLERANCE = 0.4  # px: _align's second refit
DROP_MAX = 0.02  # strict check: NCC at the predicted position >= its peak within 1 px minus this
REFINE_POINTS = 32  # collected matches whose pairs propose the refined transform
EARLY_STOP = 0.9  # fraction verified after which no other proposal is tried
MAX_PROPOSALS = 3  # per reference and direction: the ones that collect most are refined
# Its calibrated domain (benchmarks/copy_paste_domain.py, benchmarks/results/copy_paste_domain.md): the built-in
# world's images: 96 px, textured share >= 0.112, detail >= 0.0073 on the calibration seeds (101, 102; 1188 images,
# queries and references); the floors below flag none of the validation seeds' (201, 202) nor of the quick demo's
# worlds (seeds 0-2, whose tails reach lower: a textured share of 0.096 and a detail of 0.0038, so the floors sit
# at about half of those, 0.05 and 0.003: the medians of photos enlarged 16x from 32 px are 0.154 and 0.0033), and
# all of the 8x8 digits shown at 64 px (where 35 of 40 non-copies were flagged, max score 0.981).
# A query below one of these floors is scored as usual, with the reason in its note and one warning per run.
DOMAIN_MIN_SIDE = 48  # px, longer side: half the world's 96 (upsampled > 2.7x to the working side)
# longer / shorter side: the world's renders are square; at 4:1 the working image's shorter side is 32 px, four
# rows of patches, and a strip (4000x20) leaves one row of 8-px patches to match
DOMAIN_MAX_ASPECT = 4.0
DOMAIN_MIN_TEXTURED = 0.05  # share of the working image's 8x8 grid patches with residual std >= TEXTURE_MIN
DOMAIN_MIN_DETAIL = 0.003  # share of its variance lost by halving and re-enlarging it: ~0 when upsampled or blurred
# 'textureless image' is the reason's phrase: run summaries count NaNs by it (fpr.metrics.reasons)
NO_QUERY_TEXTURE = ("textureless image: the query has no textured patch (uniform, blank, black or blurred): "
                    "copy-paste cannot check it")
DEFAULTS = {"max_refs": 5, "threshold": 0.380, "appearance_threshold": 0.98}  # threshold: see the calibration


_BASIS: dict[int, np.ndarray] = {}


def _basis(p: int) -> np.ndarray:
    """Orthonormal rows spanning constant, x-ramp and y-ramp patches (what detrending removes)."""
    if p not in _BASIS:
        yy, xx = np.mgrid[0:p, 0:p].astype(np.float32)
        b = np.stack([np.ones((p, p), np.float32), xx - xx.mean(), yy - yy.mean()]).reshape(3, -1)
        _BASIS[p] = b / np.linalg.norm(b, axis=1, keepdims=True)
    return _BASIS[p]


def _detrend(x: np.ndarray, in_place: bool = False) -> np.ndarray:
    """``x`` less its projection on the basis (``in_place``: into ``x``, which the caller owns; the same bits)."""
    b = _basis(PATCH)
    return np.subtract(x, (x @ b.T) @ b, out=x if in_place else None)


def _grey(image: Image.Image, side: float) -> np.ndarray:
    im = image.convert("L")
    w, h = im.size
    s = side / max(w, h)
    im = im.resize((max(PATCH, round(w * s)), max(PATCH, round(h * s))), Image.BILINEAR)
    return np.asarray(im.filter(ImageFilter.GaussianBlur(BLUR)), dtype=np.float32) / 255.0


def _detrended_rows(q: np.ndarray) -> np.ndarray:
    """Every PATCH x PATCH window of ``q`` as a row (positions row-major), detrended."""
    rows = np.empty(((q.shape[0] - PATCH + 1) * (q.shape[1] - PATCH + 1), PATCH * PATCH), np.float32)
    _kernel("_window_rows")(q, PATCH, rows)  # sliding_window_view's rows, copied in one compiled pass
    return _detrend(rows, in_place=True)


# Flat windows get a floor instead of a tiny norm, so they never reach a high NCC.
WINDOW_NORM_FLOOR = np.float32(TEXTURE_MIN * PATCH * 0.5)


def _windows(q: np.ndarray) -> np.ndarray:
    """The windows as unit rows, positions row-major: the definition of what QueryWindows.of lays out."""
    win = _detrended_rows(q)
    win /= np.maximum(np.linalg.norm(win, axis=1), WINDOW_NORM_FLOOR)[:, None]
    return win


@dataclass(frozen=True)
class Domain:
    """What decides whether an image is inside copy-paste's calibrated domain (see DOMAIN_MIN_*)."""

    side: int  # the image's longer side, px, as given
    textured: float  # share of the working image's grid patches (8x8, stride 4) that are textured
    detail: float  # share of the working image's variance lost by a 2x bilinear down-and-up resize
    aspect: float = 1.0  # longer side / shorter side, as given

    @classmethod
    def of(cls, image: Image.Image, grey: np.ndarray | None = None) -> "Domain":
        g = _grey(image, WORK_SIDE) if grey is None else grey
        t = np.lib.stride_tricks.sliding_window_view(g, (PATCH, PATCH))[::STRIDE, ::STRIDE].reshape(-1, PATCH * PATCH)
        std = np.linalg.norm(_detrend(np.ascontiguousarray(t, np.float32)), axis=1) / PATCH
        h, w = g.shape
        half = Image.fromarray(g).resize((max(1, w // 2), max(1, h // 2)), Image.BILINEAR)
        lost = g.astype(np.float64) - np.asarray(half.resize((w, h), Image.BILINEAR), np.float64)
        var = float(((g - g.mean(dtype=np.float64)) ** 2).sum())
        return cls(max(image.size), float((std >= TEXTURE_MIN).mean()) if len(std) else 0.0,
                   float((lost ** 2).sum()) / var if var > 0 else 0.0, max(image.size) / max(1, min(image.size)))

    def reasons(self) -> list[str]:
        out = []
        if self.side < DOMAIN_MIN_SIDE:
            out.append(f"tiny ({self.side} px < {DOMAIN_MIN_SIDE})")
        if self.aspect > DOMAIN_MAX_ASPECT:
            out.append(f"thin (sides {self.aspect:.0f}:1 > {DOMAIN_MAX_ASPECT:.0f}:1)")
        if self.textured < DOMAIN_MIN_TEXTURED:
            out.append(f"low texture ({self.textured:.0%} of patches textured < {DOMAIN_MIN_TEXTURED:.0%})")
        if self.detail < DOMAIN_MIN_DETAIL:
            out.append(f"upsampled or blurred (detail {self.detail:.4f} < {DOMAIN_MIN_DETAIL})")
        return out

    def note(self) -> str:
        """'' inside the domain, else why the score is less reliable there."""
        why = self.reasons()
        return ("outside copy-paste's calibrated domain (the built-in world's 96 px textured renders): query "
                + ", ".join(why) + "; non-copies may score high") if why else ""


@dataclass
class QueryWindows:
    """Every PATCH x PATCH window of the query, detrended, unit rows, at WORK_SIDE; and every second one."""

    # float32, positions row-major: (L, PATCH*PATCH), or (8, L, 8) blocked as .of stores them (the local
    # NCC's vectorisable layout, kernels._to_blocks; either gives the same NCCs)
    windows: np.ndarray
    width: int  # windows per row
    height: int  # windows per column
    coarse: np.ndarray  # (L2, PATCH*PATCH): positions (2i, 2j), for the search
    coarse_width: int
    # coarse transposed, contiguous: the search's product as the floor's layout (t @ w.T with w row-major
    # takes OpenBLAS's transposed path, 1.3-1.6x slower at these shapes); None: made from coarse when needed
    coarse_t: np.ndarray | None = None

    @classmethod
    def of(cls, image: Image.Image, grey: np.ndarray | None = None) -> "QueryWindows":
        """``grey``: the image's ``_grey(image, WORK_SIDE)`` when the caller has it already."""
        q = _grey(image, WORK_SIDE) if grey is None else grey
        win = _detrended_rows(q)
        h, w = q.shape[0] - PATCH + 1, q.shape[1] - PATCH + 1
        cw = (w + 1) // 2
        coarse = np.empty((cw * ((h + 1) // 2), PATCH * PATCH), np.float32)
        coarse_t = np.empty((PATCH * PATCH, len(coarse)), np.float32)
        blocks = np.empty((8, len(win), 8), np.float32)
        # _windows' division by the floored norms, fused with the layouts (one pass; the same bits)
        _kernel("_normalised_layouts")(win, row_norms(win), WINDOW_NORM_FLOOR, w, blocks.reshape(8, -1), coarse,
                                       coarse_t)
        return cls(blocks, w, h, coarse, cw, coarse_t)


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
    weight: np.ndarray  # (K,) texture energy (squared residual norm): strong marking edges count most

    @classmethod
    def of(cls, image: Image.Image, grey: np.ndarray | None = None) -> "ReferencePatches":
        """``grey``: the image's ``_grey(image, WORK_SIDE)`` when the caller has it (scale 1 is that image)."""
        image_l = image.convert("L")
        temps, cents, scs, counts, ranks, fcents, weights = [], [], [], [], [], [], []
        for si, s in enumerate(SCALES):
            r = grey if (s == 1.0 and grey is not None) else _grey(image_l, WORK_SIDE * s)
            if min(r.shape) < PATCH:
                counts.append(0)
                continue  # (nothing else to append: no patches at this scale)
            # patches on a half-overlapping grid: enough of them fall inside the subject; the kept ones,
            # their ranks, unit templates, weights and centres in one compiled pass (_select_patches: NumPy's)
            nx = (r.shape[1] - PATCH) // STRIDE + 1
            t = np.empty((((r.shape[0] - PATCH) // STRIDE + 1) * nx, PATCH * PATCH), np.float32)
            _kernel("_grid_rows")(r, PATCH, STRIDE, t)  # sliding_window_view(...)[::STRIDE, ::STRIDE]'s rows
            t = _detrend(t, in_place=True)
            tn = row_norms(t)
            out = (np.empty(t.shape, np.float32), np.empty(len(t), np.float32), np.empty(len(t), complex),
                   np.empty(len(t), complex), np.empty(len(t), np.int64))
            m = _kernel("_textured")(t, tn, nx, float(r.shape[1]), PATCH, STRIDE, TEXTURE_MIN, MAX_PATCHES_PER_SCALE,
                                     *out)
            for part, got in zip((temps, weights, cents, fcents, ranks), out):
                part.append(got[:m])
            scs.append(np.full(m, si))
            counts.append(m)
        t = np.concatenate(temps).astype(np.float32)
        # mean/gradient removal commutes with a left-right flip, so flipped templates stay unit and detrended
        flipped = np.ascontiguousarray(t.reshape(-1, PATCH, PATCH)[:, :, ::-1].reshape(len(t), PATCH * PATCH))
        return cls(t, np.concatenate(cents), np.concatenate(scs), np.array(counts), np.concatenate(ranks),
                   flipped, np.concatenate(fcents), np.concatenate(weights).astype(np.float64))

    def at_scale(self, si: int, mirrored: bool) -> tuple[np.ndarray, np.ndarray]:
        """(templates, centres) of scale ``si``, mirrored or not: ``[scale_index == si]``, as views (the patches
        are stored scale by scale, so that selection is one contiguous run)."""
        start = int(self.n_textured[:si].sum())
        run = slice(start, start + int(self.n_textured[si]))
        return (self.flipped if mirrored else self.templates)[run], \
            (self.flipped_centres if mirrored else self.centres)[run]

    @cached_property
    def search(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The searched patches, made once per reference (pixel_match asks per query): (their templates then
        their mirror images, contiguous; scale index; centres; mirrored centres)."""
        chosen = self.rank < SEARCH_PATCHES
        return (np.concatenate([self.templates[chosen], self.flipped[chosen]]), self.scale_index[chosen],
                self.centres[chosen], self.flipped_centres[chosen])
