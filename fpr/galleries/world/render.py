"""Rendering one image of an identity: pose, elastic warp, background, lighting, occlusion, blur, noise.

All randomness comes from the ``rng`` passed in, so an image is a pure function
of (markings, seed). :func:`sample_view` draws the nuisance parameters and
:func:`render_view` applies them; :func:`place_layer` moves, rescales or flips
a rendered animal layer (the copy-like methods paste a reference's own pixels).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from fpr.galleries.world.patterns import CANVAS, Markings, texture_rgba
from fpr.keys import keyed_rng

# Background families. "Gallery" families are the look of real photographs (gallery,
# references, training); "novel" families are only used for generated queries, so a
# faithful generation shows the subject in a context no real image had.
GALLERY_FAMILIES = ("grass", "savanna", "bush", "rock", "dusk")
NOVEL_FAMILIES = ("snow", "beach", "studio", "water")
FAMILIES = GALLERY_FAMILIES + NOVEL_FAMILIES

# family -> (colour A, colour B, blob scale in px, fine-noise strength, horizon?)
_FAMILY_LOOK = {
    "grass": ((0.30, 0.45, 0.18), (0.50, 0.60, 0.25), 12, 0.10, False),
    "savanna": ((0.70, 0.60, 0.38), (0.55, 0.48, 0.28), 20, 0.06, True),
    "bush": ((0.16, 0.26, 0.12), (0.40, 0.42, 0.22), 8, 0.12, False),
    "rock": ((0.45, 0.43, 0.40), (0.62, 0.60, 0.56), 16, 0.08, False),
    "dusk": ((0.55, 0.38, 0.30), (0.25, 0.20, 0.26), 24, 0.04, True),
    "snow": ((0.92, 0.94, 0.97), (0.78, 0.82, 0.90), 20, 0.03, True),
    "beach": ((0.86, 0.78, 0.58), (0.40, 0.62, 0.80), 30, 0.04, True),
    "studio": ((0.60, 0.62, 0.70), (0.85, 0.85, 0.88), 48, 0.01, False),
    "water": ((0.15, 0.35, 0.55), (0.30, 0.55, 0.70), 10, 0.05, False),
}
_BANK = 6  # tiles per family
_TILE = 2  # tile side = _TILE * output size


@lru_cache(maxsize=64)
def _background_bank(family: str, size: int) -> tuple[np.ndarray, ...]:
    a, b, scale, fine, horizon = _FAMILY_LOOK[family]
    a, b = np.array(a, np.float32), np.array(b, np.float32)
    side = size * _TILE
    tiles = []
    for k in range(_BANK):
        rng = keyed_rng("background", family, size, k)
        low = max(2, side // scale)
        blob = Image.fromarray((rng.random((low, low)) * 255).astype(np.uint8), "L").resize((side, side),
                                                                                             Image.BICUBIC)
        t = np.asarray(blob, np.float32)[..., None] / 255.0
        if horizon:
            y = np.linspace(0, 1, side, dtype=np.float32)[:, None, None]
            cut = rng.uniform(0.25, 0.55)
            t = np.clip(0.45 * t + 0.55 * (y > cut), 0, 1)
        img = a * (1 - t) + b * t
        img = img + rng.normal(0, fine, (side, side, 1)).astype(np.float32)
        tiles.append(np.clip(img, 0, 1).astype(np.float32))
    return tuple(tiles)


def background(family: str, size: int, rng: np.random.Generator) -> np.ndarray:
    bank = _background_bank(family, size)
    tile = bank[int(rng.integers(len(bank)))]
    side = tile.shape[0]
    y, x = rng.integers(0, side - size, 2)
    crop = tile[y:y + size, x:x + size]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    tint = rng.uniform(0.9, 1.1, 3).astype(np.float32)
    return crop * tint


@dataclass(frozen=True)
class View:
    """The nuisance parameters of one image (everything except the markings)."""

    size: int
    angle: float  # degrees
    scale: float  # canvas side / image side: above 1 the animal is smaller
    shift: tuple[float, float]  # fraction of the image side
    persp: tuple[float, float]
    mesh: tuple  # elastic offsets of the inner mesh vertices, canvas pixels
    family: str
    bg_seed: int
    light: tuple  # (brightness, gradient, direction, r, g, b)
    occlusion: tuple | None  # (cx, cy, rx, ry, angle, r, g, b) in image fractions / colour
    blur: float
    noise: float
    noise_seed: int
    mirror: bool = False  # the animal faces left (its canvas flipped before posing)


_OCCLUDER_COLOURS = np.array([[0.25, 0.38, 0.15], [0.40, 0.30, 0.18], [0.35, 0.33, 0.30], [0.18, 0.25, 0.10]])
MESH = 4  # the elastic warp is piecewise projective over MESH x MESH cells


# Pose ranges. "real" views are the look of photographs (gallery, references); "novel" views
# are what a generator produces for a new prompt (lying down, running, on a beach): a new
# viewpoint, size, position and lighting. Both can face either way (mirror).
POSES = {
    #         angle  scale         shift  persp        light (brightness, gradient, tint)   occlusion_p
    "real": (18.0, (0.78, 1.05), 0.08, (0.25, 0.15), ((0.75, 1.2), 0.35, 0.08), 0.4),
    "novel": (28.0, (0.75, 1.45), 0.12, (0.40, 0.25), ((0.62, 1.3), 0.55, 0.14), 0.25),
}


def sample_view(rng: np.random.Generator, size: int, families=GALLERY_FAMILIES, *, occlusion_p: float | None = None,
                strength: float = 1.0, poses: str = "real") -> View:
    """Draw nuisance parameters from pose set ``poses`` (:data:`POSES`); ``strength`` scales pose/warp ranges."""
    s = strength
    angle_r, (scale_lo, scale_hi), shift_r, (px, py), ((b_lo, b_hi), grad_hi, tint), occ_p = POSES[poses]
    occ_p = occ_p if occlusion_p is None else occlusion_p
    mesh = tuple(float(v) for v in rng.normal(0, 2.2 * s, (MESH + 1) * (MESH + 1) * 2))
    occ = None
    if rng.random() < occ_p:
        occ = (float(rng.uniform(0.2, 0.8)), float(rng.uniform(0.3, 0.9)), float(rng.uniform(0.06, 0.16)),
               float(rng.uniform(0.12, 0.35)), float(rng.uniform(-30, 30)),
               *(float(c) for c in _OCCLUDER_COLOURS[int(rng.integers(len(_OCCLUDER_COLOURS)))]
                                * rng.uniform(0.8, 1.2)))
    scale = float(rng.uniform(scale_lo, scale_hi))
    # (scale > 1: a smaller animal) a smaller animal can move further without leaving the frame
    shift_r = shift_r * s * (1.0 + 0.8 * max(0.0, scale - 1.0))
    return View(
        size=size,
        angle=float(rng.uniform(-angle_r, angle_r) * s),
        scale=scale,
        shift=(float(rng.uniform(-shift_r, shift_r)), float(rng.uniform(-shift_r, shift_r) * 0.7)),
        persp=(float(rng.uniform(-px, px) * s), float(rng.uniform(-py, py) * s)),
        mesh=mesh,
        family=str(families[int(rng.integers(len(families)))]),
        bg_seed=int(rng.integers(2 ** 31)),
        light=(float(rng.uniform(b_lo, b_hi)), float(rng.uniform(0, grad_hi)), float(rng.uniform(0, 2 * np.pi)),
               *(float(c) for c in rng.uniform(1 - tint, 1 + tint, 3))),
        occlusion=occ,
        blur=float(rng.uniform(0.0, 0.9)),
        noise=float(rng.uniform(0.0, 0.035)),
        noise_seed=int(rng.integers(2 ** 31)),
        mirror=bool(rng.random() < 0.5),
    )


def _homography(v: View) -> np.ndarray:
    """3x3 map from output pixel coordinates to canvas coordinates."""
    size = v.size
    # canvas -> output: centre, scale, rotate, mild perspective, shift.
    k = size / CANVAS / v.scale
    th = np.deg2rad(v.angle)
    c, s = np.cos(th), np.sin(th)
    C = np.array([[1, 0, -CANVAS / 2], [0, 1, -CANVAS / 2], [0, 0, 1]], np.float64)
    if v.mirror:
        C = C @ np.array([[-1, 0, CANVAS], [0, 1, 0], [0, 0, 1]], np.float64)
    R = np.array([[k * c, -k * s, 0], [k * s, k * c, 0], [0, 0, 1]], np.float64)
    Pm = np.array([[1, 0, 0], [0, 1, 0], [v.persp[0] / size, v.persp[1] / size, 1]], np.float64)
    T = np.array([[1, 0, size / 2 + v.shift[0] * size], [0, 1, size / 2 + v.shift[1] * size], [0, 0, 1]],
                 np.float64)
    fwd = T @ Pm @ R @ C
    return np.linalg.inv(fwd)


def _mesh_data(v: View) -> list:
    size = v.size
    H = _homography(v)
    g = np.linspace(0, size, MESH + 1)
    gx, gy = np.meshgrid(g, g)
    pts = np.stack([gx.ravel(), gy.ravel(), np.ones(gx.size)])
    src = H @ pts
    src = (src[:2] / src[2]).T.reshape(MESH + 1, MESH + 1, 2)
    src = src + np.asarray(v.mesh, np.float64).reshape(MESH + 1, MESH + 1, 2)
    data = []
    for i in range(MESH):
        for j in range(MESH):
            box = (int(round(g[j])), int(round(g[i])), int(round(g[j + 1])), int(round(g[i + 1])))
            ul, ll, lr, ur = src[i, j], src[i + 1, j], src[i + 1, j + 1], src[i, j + 1]
            data.append((box, (*ul, *ll, *lr, *ur)))
    return data


def animal_layer(markings: Markings, v: View) -> np.ndarray:
    """The posed animal as float32 RGBA (size, size, 4) in [0, 1]."""
    tex = texture_rgba(markings)
    out = tex.transform((v.size, v.size), Image.MESH, _mesh_data(v), resample=Image.BILINEAR)
    return np.asarray(out, np.float32) / 255.0


def compose(layer: np.ndarray, v: View) -> Image.Image:
    size = v.size
    rng = np.random.default_rng(v.bg_seed)
    bg = background(v.family, size, rng)
    alpha = layer[..., 3:4]
    img = bg * (1 - alpha) + layer[..., :3] * alpha
    if v.occlusion is not None:
        m = occluder_alpha(v)[..., None]
        img = img * (1 - m) + np.array(v.occlusion[5:], np.float32) * m
    bright, grad, direction, lr, lg, lb = v.light
    lin = np.linspace(-0.5, 0.5, size, dtype=np.float32)
    ramp = np.cos(direction) * lin[None, :] + np.sin(direction) * lin[:, None]
    img = img * (bright * (1 + grad * ramp))[..., None] * np.array([lr, lg, lb], np.float32)
    if v.noise > 0:
        nrng = np.random.default_rng(v.noise_seed)
        img = img + nrng.standard_normal((size, size, 1), dtype=np.float32) * v.noise
    out = Image.fromarray((np.clip(img, 0, 1) * 255 + 0.5).astype(np.uint8), "RGB")
    if v.blur > 0.15:
        out = out.filter(ImageFilter.GaussianBlur(v.blur))
    return out


def occluder_alpha(v: View) -> np.ndarray:
    """The occluding ellipse's coverage as float32 (size, size) in [0, 1]; zeros without one."""
    size = v.size
    if v.occlusion is None:
        return np.zeros((size, size), np.float32)
    cx, cy, rx, ry, ang = v.occlusion[:5]
    m = Image.new("L", (size, size), 0)
    ImageDraw.Draw(m).ellipse([(cx - rx) * size, (cy - ry) * size, (cx + rx) * size, (cy + ry) * size], fill=255)
    return np.asarray(m.rotate(ang, center=(cx * size, cy * size)), np.float32) / 255.0


def covering_occluder(canvas_mask: np.ndarray, v: View, rng: np.random.Generator, *, reach: float = 2.0) -> tuple:
    """An occluder (``View.occlusion``) over where ``canvas_mask`` lands in view ``v``: an ellipse on the
    region's centroid along its principal axes, ``reach`` standard deviations wide (the mesh warp's few
    pixels are ignored). Used to hide a drifted region, the way a real generation can crop or cover it."""
    ys, xs = np.nonzero(canvas_mask)
    fwd = np.linalg.inv(_homography(v))  # canvas -> output pixels
    pts = fwd @ np.stack([xs + 0.5, ys + 0.5, np.ones(len(xs))])
    xy = (pts[:2] / pts[2]).T / v.size  # image fractions
    centre = xy.mean(0)
    evals, evecs = np.linalg.eigh(np.cov(xy.T) + 1e-6 * np.eye(2))
    major, minor = evecs[:, 1], np.sqrt(np.maximum(evals, 0)) * reach
    # PIL rotates counter-clockwise on screen, where y points down: the major axis (x, y) is at atan2(-y, x)
    angle = float(np.degrees(np.arctan2(-major[1], major[0])))
    colour = _OCCLUDER_COLOURS[int(rng.integers(len(_OCCLUDER_COLOURS)))] * rng.uniform(0.8, 1.2)
    return (float(centre[0]), float(centre[1]), float(max(minor[1], 0.04)), float(max(minor[0], 0.04)), angle,
            *(float(c) for c in colour))


def visible_subject(layer: np.ndarray, v: View) -> np.ndarray:
    """Ground-truth foreground of a rendered view: the animal where it is not hidden by the occluder (bool)."""
    return (layer[..., 3] * (1.0 - occluder_alpha(v))) >= 0.5


def render_view(markings: Markings, v: View) -> Image.Image:
    return compose(animal_layer(markings, v), v)


def place_layer(layer: np.ndarray, *, scale: float = 1.0, shift: tuple[float, float] = (0.0, 0.0),
                mirror: bool = False) -> np.ndarray:
    """A rendered RGBA layer flipped, rescaled about its centre and moved (fractions of the side): a pasted copy.

    Colours are resized premultiplied by alpha, so edges do not darken; what leaves the frame is cropped.
    """
    size = layer.shape[0]
    lay = layer[:, ::-1] if mirror else layer
    if abs(scale - 1.0) > 1e-6:
        n = max(2, int(round(size * scale)))
        pre = np.concatenate([lay[..., :3] * lay[..., 3:4], lay[..., 3:4]], axis=-1)
        chans = [np.asarray(Image.fromarray(np.ascontiguousarray(pre[..., c]), "F").resize((n, n), Image.BILINEAR))
                 for c in range(4)]
        pre = np.stack(chans, axis=-1)
    else:
        n, pre = size, np.concatenate([lay[..., :3] * lay[..., 3:4], lay[..., 3:4]], axis=-1)
    out = np.zeros((size, size, 4), np.float32)
    y0 = int(round((size - n) / 2 + shift[1] * size))
    x0 = int(round((size - n) / 2 + shift[0] * size))
    ys, xs = max(0, y0), max(0, x0)
    ye, xe = min(size, y0 + n), min(size, x0 + n)
    if ye > ys and xe > xs:
        out[ys:ye, xs:xe] = pre[ys - y0:ye - y0, xs - x0:xe - x0]
    a = np.clip(out[..., 3:4], 0, 1)
    out[..., :3] = np.where(a > 1e-6, out[..., :3] / np.maximum(a, 1e-6), 0)
    out[..., 3:4] = a
    return np.clip(out, 0, 1)
