"""Identity markings and body silhouettes of the built-in world.

Everything here lives on the *canonical canvas*: a ``CANVAS`` x ``CANVAS`` side
view of the animal, facing right, before any pose is applied. An identity's
markings are a function of one integer (its pattern seed); an image of the
identity warps this canvas (see :mod:`fpr.galleries.world.render`).

Markings are described by a label map (what kind of marking a pixel carries)
and turned into colour by a fixed per-species palette, so identity lives in
the *geometry* of the markings, not in its colours: a colour histogram cannot
tell two zebras apart.

Drift and siblings are made by :func:`mix_region`: the markings inside a
smooth, blob-shaped region are replaced by those of another pattern. The region
is grown until the *changed pixels* reach the requested fraction of what a
full replacement would change (:func:`calibrated_region`), so "drift 0.25"
means a quarter of the marking change of a different individual for every
species, whatever the size or number of its marking elements.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from fpr.keys import keyed_rng

CANVAS = 128
SPECIES = ("zebra", "leopard", "giraffe")
KINDS = {"zebra": "stripes", "leopard": "spots", "giraffe": "patches"}

# Palettes: label -> RGB in [0, 1]. Fixed per species (identity is geometry only).
PALETTES = {
    "zebra": np.array([[0.93, 0.92, 0.88], [0.08, 0.08, 0.09]], dtype=np.float32),
    "leopard": np.array([[0.85, 0.62, 0.32], [0.12, 0.09, 0.06], [0.62, 0.40, 0.18]], dtype=np.float32),
    "giraffe": np.array([[0.95, 0.90, 0.76], [0.55, 0.31, 0.13], [0.42, 0.22, 0.08]], dtype=np.float32),
}




_YY, _XX = np.meshgrid((np.arange(CANVAS, dtype=np.float32) + 0.5) / CANVAS,
                       (np.arange(CANVAS, dtype=np.float32) + 0.5) / CANVAS, indexing="ij")


def smooth_field(rng: np.random.Generator, n_waves: int = 8, fmin: float = 0.8, fmax: float = 3.0) -> np.ndarray:
    """A smooth random field on the canvas (sum of random plane waves), roughly unit variance."""
    ang = rng.uniform(0, 2 * np.pi, n_waves).astype(np.float32)
    freq = rng.uniform(fmin, fmax, n_waves).astype(np.float32) * 2 * np.pi
    phase = rng.uniform(0, 2 * np.pi, n_waves).astype(np.float32)
    kx, ky = freq * np.cos(ang), freq * np.sin(ang)
    f = np.cos(_XX[..., None] * kx + _YY[..., None] * ky + phase).sum(-1)
    return (f / np.sqrt(n_waves / 2)).astype(np.float32)


# ----------------------------------------------------------------------------- markings

def _stripes(rng: np.random.Generator) -> np.ndarray:
    cycles = rng.uniform(9.0, 12.0)
    tilt = rng.uniform(-0.35, 0.35)
    warp = smooth_field(rng, 10, 0.6, 2.5) * rng.uniform(0.9, 1.4) + smooth_field(rng, 6, 2.5, 4.0) * 0.35
    phi = cycles * (_XX + tilt * _YY) + warp
    width = smooth_field(rng, 5, 0.5, 2.0) * 0.25 + rng.uniform(-0.1, 0.1)
    return (np.sin(2 * np.pi * phi) > width).astype(np.uint8)


@dataclass(frozen=True)
class Rosettes:
    """A leopard pattern's rosettes: centre, semi-axes a >= b, orientation, ring breaks, solid or hollow."""

    cx: np.ndarray
    cy: np.ndarray
    a: np.ndarray
    b: np.ndarray
    th: np.ndarray
    gap_phase: np.ndarray
    gap_k: np.ndarray
    solid: np.ndarray

    @classmethod
    def draw(cls, rng: np.random.Generator) -> "Rosettes":
        # Jittered grid of rosettes: even coverage, random shape, size and breaks per rosette.
        g = 13
        cy, cx = np.meshgrid((np.arange(g) + 0.5) / g, (np.arange(g) + 0.5) / g, indexing="ij")
        cx = (cx.ravel() + rng.uniform(-0.42, 0.42, g * g) / g).astype(np.float32)
        cy = (cy.ravel() + rng.uniform(-0.42, 0.42, g * g) / g).astype(np.float32)
        keep = rng.random(g * g) < 0.8
        cx, cy = cx[keep], cy[keep]
        n = len(cx)
        a = rng.uniform(0.022, 0.038, n).astype(np.float32)
        b = a * rng.uniform(0.6, 1.0, n).astype(np.float32)
        th = rng.uniform(0, np.pi, n).astype(np.float32)
        gap_phase = rng.uniform(0, 2 * np.pi, n).astype(np.float32)
        gap_k = rng.integers(2, 5, n).astype(np.float32)
        solid = rng.random(n) < 0.3
        return cls(cx, cy, a, b, th, gap_phase, gap_k, solid)

    def labels(self, j: np.ndarray, dn: np.ndarray, ang: np.ndarray) -> np.ndarray:
        """Label map from each pixel's nearest rosette ``j``, its distance ``dn`` and angle ``ang`` in it."""
        ring = (dn < 1.0) & (dn > 0.55)
        broken = np.sin(self.gap_k[j] * ang + self.gap_phase[j]) > 0.55
        solid = self.solid[j]
        label = np.zeros(len(j), np.uint8)
        label[(dn <= 0.55) & ~solid] = 2
        label[(dn <= 0.55) & solid] = 1
        label[ring & ~broken] = 1
        label[ring & broken & solid] = 1
        return label.reshape(CANVAS, CANVAS)


def _spots(rng: np.random.Generator) -> np.ndarray:
    r = Rosettes.draw(rng)
    j, dn, u, v = _nearest_rosette(r.cx, r.cy, np.cos(r.th), np.sin(r.th), r.a, r.b)
    return r.labels(j, dn, np.arctan2(v, u))


_BLOCK = 4  # pixel block side of the rosette search: each block tests only the rosettes that can be nearest


@lru_cache(maxsize=1)
def _pixel_blocks() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat pixel indices per _BLOCK x _BLOCK block (row-major over blocks), and the pixel-centre span
    (lo, hi) of each block column (= of each block row: the canvas is square)."""
    nb = CANVAS // _BLOCK
    idx = np.arange(CANVAS * CANVAS).reshape(nb, _BLOCK, nb, _BLOCK).transpose(0, 2, 1, 3).reshape(nb * nb, -1)
    centres = _XX[0].astype(np.float64).reshape(nb, _BLOCK)
    lo, hi = centres[:, 0].copy(), centres[:, -1].copy()
    for arr in (idx, lo, hi):
        arr.setflags(write=False)
    return idx, lo, hi


def _nearest_rosette(cx, cy, c, s, a, b) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per canvas pixel: the rosette of least elliptical distance d (first on ties), d, and its (u, v).

    Bit for bit what the dense (pixels x rosettes) argmin gives, at a fraction of the work: d >= e / a
    and d <= e / b (e the Euclidean distance, b <= a), so a rosette whose lower bound over a pixel block
    exceeds the block's least upper bound (with a margin far above float32 rounding) can never be the
    nearest; the rest are tested in index order with the dense code's float32 element operations.
    """
    idx, lo, hi = _pixel_blocks()
    nb = len(lo)

    def span(p):  # per block column (row) and rosette: least and greatest squared axis distance
        p = p.astype(np.float64)[None, :]
        near = np.maximum(np.maximum(lo[:, None] - p, p - hi[:, None]), 0.0)
        return near ** 2, np.maximum(p - lo[:, None], hi[:, None] - p) ** 2

    near_x, far_x = span(cx)
    near_y, far_y = span(cy)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    near = (near_y[:, None, :] + near_x[None, :, :]).reshape(nb * nb, -1)  # block (row, column), rosette
    far = (far_y[:, None, :] + far_x[None, :, :]).reshape(nb * nb, -1)
    upper = np.sqrt((far / b64 ** 2).min(1))  # the block's every pixel has a rosette at d <= upper
    cand = near <= ((upper[:, None] * 1.001 + 1e-3) * a64) ** 2
    k = int(cand.sum(1).max())
    order = np.argsort(~cand, axis=1, kind="stable")[:, :k]  # candidates first, in index order
    valid = np.take_along_axis(cand, order, 1)
    J = order[:, None, :]
    dx = _XX.ravel()[idx][:, :, None] - cx[J]
    dy = _YY.ravel()[idx][:, :, None] - cy[J]
    u = (dx * c[J] + dy * s[J]) / a[J]
    v = (-dx * s[J] + dy * c[J]) / b[J]
    d = np.sqrt(u * u + v * v)
    d = np.where(valid[:, None, :], d, np.float32(np.inf))
    pos = d.argmin(2)[..., None]
    flat = idx.ravel()
    out_j = np.empty(CANVAS * CANVAS, np.intp)
    out_d, out_u, out_v = (np.empty(CANVAS * CANVAS, np.float32) for _ in range(3))
    out_j[flat] = np.take_along_axis(np.broadcast_to(J, d.shape), pos, 2).ravel()
    out_d[flat] = np.take_along_axis(d, pos, 2).ravel()
    out_u[flat] = np.take_along_axis(u, pos, 2).ravel()
    out_v[flat] = np.take_along_axis(v, pos, 2).ravel()
    return out_j, out_d, out_u, out_v


def _patches(rng: np.random.Generator) -> np.ndarray:
    g = 9
    cy, cx = np.meshgrid((np.arange(g) + 0.5) / g, (np.arange(g) + 0.5) / g, indexing="ij")
    cx = (cx.ravel() + rng.uniform(-0.45, 0.45, g * g) / g).astype(np.float32)
    cy = (cy.ravel() + rng.uniform(-0.45, 0.45, g * g) / g).astype(np.float32)
    wob = smooth_field(rng, 6, 2.0, 5.0) * 0.012
    d = np.sqrt((_XX.ravel()[:, None] - cx) ** 2 + (_YY.ravel()[:, None] - cy) ** 2)
    part = np.partition(d, 1, axis=1)
    gap = (part[:, 1] - part[:, 0]).reshape(CANVAS, CANVAS) + wob
    width = rng.uniform(0.013, 0.02)
    shade = (rng.random(len(cx)) < 0.5).astype(np.uint8)  # two browns, per patch
    label = (1 + shade[d.argmin(1)]).reshape(CANVAS, CANVAS).astype(np.uint8)
    label[gap < width] = 0
    return label


_MAKERS = {"zebra": _stripes, "leopard": _spots, "giraffe": _patches}


@lru_cache(maxsize=8192)
def base_labels(species: str, pattern_seed: int) -> np.ndarray:
    """The label map of one pure pattern (read-only array)."""
    lab = _MAKERS[species](keyed_rng("pattern", species, int(pattern_seed)))
    lab.setflags(write=False)
    return lab


# ----------------------------------------------------------------------------- silhouettes

def _draw_body(species: str) -> Image.Image:
    s = CANVAS * 4  # draw at 4x and downsample: anti-aliased alpha
    im = Image.new("L", (s, s), 0)
    d = ImageDraw.Draw(im)

    def P(x, y):
        return (x * s, y * s)

    def ell(cx, cy, rx, ry):
        d.ellipse([P(cx - rx, cy - ry), P(cx + rx, cy + ry)], fill=255)

    def poly(*pts):
        d.polygon([P(x, y) for x, y in pts], fill=255)

    def leg(x, top, bottom, w):
        poly((x - w, top), (x + w, top), (x + w * 0.7, bottom), (x - w * 0.7, bottom))

    if species == "zebra":
        ell(0.47, 0.46, 0.30, 0.15)
        poly((0.66, 0.40), (0.74, 0.20), (0.84, 0.18), (0.80, 0.45), (0.68, 0.52))
        poly((0.76, 0.16), (0.86, 0.14), (0.97, 0.30), (0.93, 0.35), (0.80, 0.30))
        for x in (0.24, 0.32, 0.62, 0.70):
            leg(x, 0.50, 0.90, 0.035)
        poly((0.17, 0.40), (0.19, 0.42), (0.12, 0.70), (0.09, 0.69))
    elif species == "leopard":
        ell(0.48, 0.52, 0.31, 0.12)
        ell(0.83, 0.44, 0.085, 0.075)
        poly((0.74, 0.46), (0.80, 0.38), (0.86, 0.46), (0.78, 0.58))
        poly((0.88, 0.44), (0.97, 0.47), (0.95, 0.51), (0.87, 0.50))
        for x in (0.26, 0.34, 0.63, 0.71):
            leg(x, 0.55, 0.84, 0.032)
        poly((0.18, 0.48), (0.20, 0.52), (0.10, 0.72), (0.02, 0.80), (0.01, 0.77), (0.08, 0.69))
    elif species == "giraffe":
        ell(0.42, 0.50, 0.22, 0.12)
        poly((0.52, 0.44), (0.74, 0.08), (0.82, 0.10), (0.64, 0.52))
        poly((0.72, 0.06), (0.82, 0.04), (0.93, 0.13), (0.90, 0.17), (0.77, 0.14))
        for x in (0.26, 0.33, 0.52, 0.59):
            leg(x, 0.54, 0.96, 0.028)
        poly((0.21, 0.45), (0.22, 0.47), (0.16, 0.68), (0.14, 0.67))
    else:  # pragma: no cover - guarded by SPECIES
        raise ValueError(species)
    return im.filter(ImageFilter.GaussianBlur(2)).resize((CANVAS, CANVAS), Image.BILINEAR)


@lru_cache(maxsize=None)
def body_alpha(species: str) -> np.ndarray:
    """Silhouette alpha in [0, 1] on the canvas (read-only)."""
    a = np.asarray(_draw_body(species), dtype=np.float32) / 255.0
    a.setflags(write=False)
    return a


@lru_cache(maxsize=None)
def body_mask(species: str) -> np.ndarray:
    m = body_alpha(species) > 0.5
    m.setflags(write=False)
    return m


# ----------------------------------------------------------------------------- mixing

@lru_cache(maxsize=4096)
def region_field(*keys) -> np.ndarray:
    """A smooth blob-shaped field used to choose which part of the body changes."""
    rng = keyed_rng("region", *keys)
    f = smooth_field(rng, 6, 0.8, 2.2)
    f.setflags(write=False)
    return f


def changed_pixels(species: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Body pixels whose marking colour differs between label maps ``a`` and ``b``."""
    pal = PALETTES[species]
    diff = np.abs(pal[a] - pal[b]).max(-1) > 0.05
    return diff & body_mask(species)


def calibrated_region(species: str, old: np.ndarray, new: np.ndarray, fraction: float, field: np.ndarray
                      ) -> np.ndarray:
    """Region {field > t} (on the body) whose replacement changes ``fraction`` of the pixels a full one would.

    Pixels are added in order of decreasing ``field``, so the region is made of
    smooth blobs; the threshold is exact up to one pixel.
    """
    body = body_mask(species)
    if fraction <= 0:
        return np.zeros_like(body)
    if fraction >= 1:
        return body.copy()
    ch = changed_pixels(species, old, new)
    vals = np.where(body, field, -np.inf).ravel()
    order = np.argsort(-vals, kind="stable")
    n_body = int(body.sum())
    order = order[:n_body]
    csum = np.cumsum(ch.ravel()[order])
    target = fraction * csum[-1]
    k = int(np.searchsorted(csum, target, side="left")) + 1
    region = np.zeros(CANVAS * CANVAS, dtype=bool)
    region[order[:k]] = True
    return region.reshape(CANVAS, CANVAS)


def mix_region(old: np.ndarray, new: np.ndarray, region: np.ndarray) -> np.ndarray:
    return np.where(region, new, old).astype(np.uint8)


def drift_fraction(species: str, ref: np.ndarray, drifted: np.ndarray, full: np.ndarray) -> float:
    """Measured drift: changed pixels of ``drifted`` over those of a full replacement ``full``."""
    denom = changed_pixels(species, ref, full).sum()
    return float(changed_pixels(species, ref, drifted).sum() / max(denom, 1))


@dataclass(frozen=True)
class Markings:
    """How to build one label map: a base pattern, optionally with regions replaced by other patterns.

    ``layers`` is a tuple of (pattern_seed, fraction, region_key): applied in order,
    each replaces a calibrated ``fraction`` of the current markings by that pattern.
    """

    species: str
    base: int
    layers: tuple = ()

    def labels(self) -> np.ndarray:
        return _labels_cached(self)

    def with_layer(self, pattern_seed: int, fraction: float, region_key: str) -> "Markings":
        return Markings(self.species, self.base, self.layers + ((int(pattern_seed), float(fraction), region_key),))


# Sized for a trainer's worker that renders thousands of identities (and their twins) every epoch.
@lru_cache(maxsize=8192)
def _labels_cached(m: Markings) -> np.ndarray:
    lab = base_labels(m.species, m.base)
    for seed, frac, key in m.layers:
        new = base_labels(m.species, seed)
        region = calibrated_region(m.species, lab, new, frac, region_field(m.species, key))
        lab = mix_region(lab, new, region)
    lab.setflags(write=False)
    return lab


@lru_cache(maxsize=8192)
def texture_rgba(m: Markings) -> Image.Image:
    """The identity's RGBA canvas: marking colours, alpha = silhouette."""
    lab = m.labels()
    rgb = PALETTES[m.species][lab]
    # A little fixed shading along the body (belly lighter, back darker) for a 3-D look.
    shade = (1.06 - 0.12 * (1 - _YY))[..., None]
    rgb = np.clip(rgb * shade, 0, 1)
    arr = np.empty((CANVAS, CANVAS, 4), np.uint8)
    arr[..., :3] = (rgb * 255 + 0.5).astype(np.uint8)
    arr[..., 3] = (body_alpha(m.species) * 255 + 0.5).astype(np.uint8)
    return Image.fromarray(arr, "RGBA")
