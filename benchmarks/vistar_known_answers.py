"""VISTAR known answers: images whose right answer is known by construction.

TR (``vistar-tr``): signs rendered with PIL (three DejaVu faces shipped with matplotlib, three
text sizes) saying the intended string exactly, with a one-letter typo, something else, or
nothing, read by the real OCR (RapidOCR, its models ship in the wheel: offline). Seed 0's strings
calibrate the detector's box expansion (``vistar-tr.unclip``); seed 1's strings, disjoint from
seed 0's, check it.

LI (``vistar-li``): procedurally rendered ground planes with boxes and cylinders lit from a known
direction, their shadows cast by that direction; the geometric core
(:func:`fpr.scorers.vistar.li.light_direction`) gets the object and shadow masks (``truth``) or
finds them itself (``segmented``), and the table reports the angular error. Seed 0 calibrates,
seed 1 checks.

PSC (``vistar-psc``): a box's face and a bar, z-buffered, in four kinds (the bar penetrates the
face, occludes it at a gap, touches its side, or is a badge attached to it); the geometric core
gets the masks, confidences and a blurred, noisy inverse-depth map. Seed 0 calibrates the
conflict threshold, seeds 1 and 2 check (AUROC of each kind vs penetrations).

CPA (``vistar-cpa``): stick figures (COCO keypoints) standing, sitting (side or front view) or
lying, 0-5 per scene, reported as a detector would (duplicate boxes, low-confidence clutter); the
core counts them and classifies each posture. Seed 0 calibrates the confidence cut, seeds 1 and 2
check.

GC (``vistar-gc``): shaded spheres, clean and with one geometric defect each (torn strips, noise
texture patches, pinpoint highlight speckles, creases in the depth map); the AUROC of every
model-free cue, clean vs each defect, on seeds 0-2 (the cues have no threshold to calibrate).

CSE (``vistar-cse``): 2x2 storyboards with the same striped creature in every panel, or a
different one in each, over changing backgrounds; CSE-Con on the subject's boxes and on whole
panels (the ``_whole`` variant), with fpr's weight-free ``pixels-16`` encoder.

    python benchmarks/vistar_known_answers.py [--part tr|li|psc|cpa|gc|cse|all] [--out benchmarks/results/vistar_known_answers.md]

Tests import the renderers from here (one implementation of the known answers).
"""
from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw, ImageFont

FONTS = ("DejaVuSans.ttf", "DejaVuSerif-Bold.ttf", "DejaVuSansMono.ttf")
SIZES = (24, 40, 64)
CONDITIONS = ("exact", "typo", "wrong", "none")
# Sign vocabulary; a seed draws its strings from its own half so calibration and check never share a word.
# The tests' held-out strings (tests/scorers/vistar/test_tr.py) use none of these words.
WORDS = ("OPEN", "DAILY", "PIZZA", "BREAD", "CINEMA", "TOWER", "BEACH", "PALACE", "THEATER", "SCHOOL", "HOTEL",
         "GARDEN", "MARKET", "STATION", "BAKERY", "SALE", "NORTH", "BRIDGE", "MUSEUM", "LIBRARY", "FERRY",
         "TICKETS", "RIVER", "SQUARE", "PHARMACY", "BOOKS", "SUMMER", "FESTIVAL", "WELCOME", "HOME", "SILVER",
         "MOON", "GOLDEN", "CROWN", "OCEAN", "VIEW", "GREEN", "VALLEY", "FARM", "STORE")


def font_path(name: str) -> str:
    import matplotlib

    return os.path.join(os.path.dirname(matplotlib.__file__), "mpl-data", "fonts", "ttf", name)


def render_sign(text: str, font: str = "DejaVuSans.ttf", size: int = 40) -> np.ndarray:
    """A light sign with a dark border and ``text`` (may be empty) in dark letters, margins 60 px."""
    f = ImageFont.truetype(font_path(font), size)
    probe = text or "X"
    left, top, right, bottom = ImageDraw.Draw(Image.new("RGB", (1, 1))).textbbox((0, 0), probe, font=f)
    w, h = right - left + 80, bottom - top + 80
    img = Image.new("RGB", (w + 40, h + 40), (235, 228, 210))
    d = ImageDraw.Draw(img)
    d.rectangle((20, 20, w + 20, h + 20), fill=(250, 250, 250), outline=(90, 60, 40), width=3)
    if text:
        d.text((60 - left, 60 - top), text, font=f, fill=(20, 20, 20))
    return np.asarray(img)


def sign_strings(seed: int, n: int) -> list[str]:
    """``n`` strings of 2-3 words from the seed's half of the vocabulary; every other one in title case."""
    rng = np.random.default_rng(seed)
    half = WORDS[seed % 2::2]
    out = []
    for k in range(n):
        words = rng.choice(half, size=int(rng.integers(2, 4)), replace=False)
        s = " ".join(words)
        out.append(s if k % 2 == 0 else s.title())
    return out


def typo(text: str, rng: np.random.Generator) -> str:
    """One letter replaced by a different letter of the same case."""
    idx = [i for i, c in enumerate(text) if c.isalpha()]
    i = int(rng.choice(idx))
    pool = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    c = text[i]
    new = str(rng.choice([p for p in pool if p != c.upper()]))
    return text[:i] + (new if c.isupper() else new.lower()) + text[i + 1:]


def unrelated(text: str, pool: list[str]) -> str:
    """The first string of ``pool`` sharing no word with ``text`` (the 'wrong' sign)."""
    words = set(text.upper().split())
    return next(p for p in pool if not words & set(p.upper().split()))


def tr_condition_text(text: str, condition: str, rng: np.random.Generator, other: str) -> str:
    return {"exact": text, "typo": typo(text, rng), "wrong": other, "none": ""}[condition]


@dataclass(frozen=True)
class TRRow:
    seed: int
    string: str
    font: str
    size: int
    condition: str
    ocr: str
    score: float
    score_robust: float


def run_tr(seed: int, n_strings: int, unclip: float, conditions=CONDITIONS) -> list[TRRow]:
    from fpr.scorers.vistar import tr

    engine = tr.ocr_engine("rapidocr", unclip)
    strings = sign_strings(seed, n_strings)
    rng = np.random.default_rng(1000 + seed)
    rows = []
    for k, s in enumerate(strings):
        other = unrelated(s, strings[k + 1:] + strings[:k])
        for font in FONTS:
            for size in SIZES:
                for cond in conditions:
                    shown = tr_condition_text(s, cond, rng, other)
                    read = engine(render_sign(shown, font, size))
                    v = tr.tr_values(read, s)
                    rows.append(TRRow(seed, s, font, size, cond, read, v.score(0.5), v.score_robust(0.5)))
    return rows


def tr_table(rows: list[TRRow]) -> list[str]:
    out = ["| seed | condition | n | score (VISTAR) mean / min | score_robust mean / min / max | "
           "share score_robust >= 0.95 |", "|---|---|---|---|---|---|"]
    for seed in sorted({r.seed for r in rows}):
        for cond in CONDITIONS:
            sel = [r for r in rows if r.seed == seed and r.condition == cond]
            if not sel:
                continue
            a = np.array([r.score for r in sel])
            b = np.array([r.score_robust for r in sel])
            out.append(f"| {seed} | {cond} | {len(sel)} | {a.mean():.3f} / {a.min():.3f} | "
                       f"{b.mean():.3f} / {b.min():.3f} / {b.max():.3f} | {(b >= 0.95).mean():.3f} |")
    for name in ("score", "score_robust"):
        ordered = []
        for key in {(r.seed, r.string, r.font, r.size) for r in rows}:
            got = {r.condition: getattr(r, name) for r in rows if (r.seed, r.string, r.font, r.size) == key}
            if len(got) == len(CONDITIONS):
                ordered.append(got["exact"] > got["typo"] > got["wrong"] >= got["none"])
        if ordered:
            out.append(f"\n{name}: exact > typo > wrong >= none on {sum(ordered)} of {len(ordered)} signs.")
    return out


def calibrate_unclip(seed: int, n_strings: int, candidates=(1.3, 1.45, 1.6)) -> tuple[float, list[str]]:
    """The box expansion whose exact renders most often reach score_robust >= 0.95, then the higher mean, then
    the tighter box: a box expanded into the next word is read as an extra letter ('PARKING GANY' was seen
    at RapidOCR's default 1.6 while exploring, on a string that is now one of the tests' held-out strings)."""
    lines = ["| unclip | exact renders | mean score_robust | min | share >= 0.95 |", "|---|---|---|---|---|"]
    best = None
    for u in candidates:
        b = np.array([r.score_robust for r in run_tr(seed, n_strings, u, conditions=("exact",))])
        lines.append(f"| {u} | {len(b)} | {b.mean():.4f} | {b.min():.3f} | {(b >= 0.95).mean():.3f} |")
        key = ((b >= 0.95).mean(), b.mean())
        if best is None or key > best[0]:
            best = (key, u)
    return best[1], lines


# --------------------------------------------------------------------------- LI: lit scenes

PALETTE = ((200, 40, 40), (40, 80, 200), (40, 160, 60), (220, 140, 20), (150, 50, 180))
GROUND = (205, 195, 175)
AMBIENT = 0.55  # light reaching shadows and faces turned away from the light


@dataclass
class Scene:
    rgb: np.ndarray
    objects: list  # each object's visible mask (bool)
    shadow: np.ndarray  # visible cast shadow (bool)
    light: np.ndarray  # unit vector toward the light, x right, y up, z toward the viewer
    tilt_deg: float


def _hull(points: np.ndarray) -> np.ndarray:
    """Convex hull (monotone chain) of 2-D points, counter-clockwise."""
    pts = sorted(map(tuple, points))

    def half(seq):
        out = []
        for p in seq:
            while len(out) >= 2 and ((out[-1][0] - out[-2][0]) * (p[1] - out[-2][1])
                                     - (out[-1][1] - out[-2][1]) * (p[0] - out[-2][0])) <= 0:
                out.pop()
            out.append(p)
        return out

    lower, upper = half(pts), half(reversed(pts))
    return np.array(lower[:-1] + upper[:-1])


def render_scene(light, seed: int, *, tilt_deg: float = 30.0, size: int = 320, n_objects: int = 3) -> Scene:
    """Upright boxes on a noisy ground, seen by an orthographic camera looking down at ``tilt_deg``, lit by a
    directional light along ``light``: shadows are the boxes projected along the light onto the ground."""
    light = np.asarray(light, float) / np.linalg.norm(light)
    rng = np.random.default_rng(seed)
    tilt = np.radians(tilt_deg)
    scale, row0 = size / 3.2, size * 0.55

    def to_image(p):  # world (x, y, z) -> image (col, row)
        p = np.atleast_2d(p)
        return np.stack([size / 2 + scale * p[:, 0], row0 - scale * (p[:, 1] * np.cos(tilt) - p[:, 2] * np.sin(tilt))],
                        axis=1)

    boxes = []
    while len(boxes) < n_objects:  # footprints at least 0.5 apart
        x0, z0 = rng.uniform(-0.75, 0.75), rng.uniform(-0.4, 0.4)
        if all(np.hypot(x0 - b[0], z0 - b[1]) >= 0.5 for b in boxes):
            boxes.append((x0, z0, rng.uniform(0.06, 0.11), rng.uniform(0.06, 0.11), rng.uniform(0.25, 0.42)))
    # uneven ground: a brightness gradient (+-12%) in a random direction, and pixel noise
    yy, xx = np.mgrid[-1:1:size * 1j, -1:1:size * 1j]
    theta = rng.uniform(0, 2 * np.pi)
    shade = 1 + 0.12 * (np.cos(theta) * xx + np.sin(theta) * yy)
    img = np.clip(np.array(GROUND, float) * shade[..., None] + rng.normal(0, 6, (size, size, 3)), 0, 255)

    def poly_mask(poly) -> np.ndarray:
        m = Image.new("L", (size, size), 0)
        ImageDraw.Draw(m).polygon([tuple(map(float, q)) for q in poly], fill=1)
        return np.asarray(m).astype(bool)

    shadow = np.zeros((size, size), bool)
    for x0, z0, w, d, h in boxes:
        corners = np.array([[x0 + sx * w / 2, y, z0 + sz * d / 2] for sx in (-1, 1) for sz in (-1, 1) for y in (0, h)])
        ground = corners - (corners[:, 1:2] / light[1]) * light  # along the light down to y = 0
        hull = _hull(ground[:, [0, 2]])
        shadow |= poly_mask(to_image(np.column_stack([hull[:, 0], np.zeros(len(hull)), hull[:, 1]])))
    img[shadow] *= AMBIENT
    objects = []
    for k, (x0, z0, w, d, h) in sorted(enumerate(boxes), key=lambda kb: kb[1][1]):  # far (low z) first
        front = [[x0 - w / 2, 0, z0 + d / 2], [x0 + w / 2, 0, z0 + d / 2], [x0 + w / 2, h, z0 + d / 2],
                 [x0 - w / 2, h, z0 + d / 2]]
        top = [[x0 - w / 2, h, z0 + d / 2], [x0 + w / 2, h, z0 + d / 2], [x0 + w / 2, h, z0 - d / 2],
               [x0 - w / 2, h, z0 - d / 2]]
        colour = np.array(PALETTE[k % len(PALETTE)], float)
        mask = np.zeros((size, size), bool)
        for face, normal in ((front, (0, 0, 1)), (top, (0, 1, 0))):
            m = poly_mask(to_image(np.array(face, float)))
            img[m] = colour * (AMBIENT + (1 - AMBIENT) * max(0.0, float(np.dot(normal, light))))
            mask |= m
        for o in objects:  # nearer boxes hide farther ones
            o &= ~mask
        objects.append(mask)
    visible_shadow = shadow & ~np.any(objects, axis=0)
    return Scene(img.round().astype(np.uint8), objects, visible_shadow, light, tilt_deg)


@dataclass(frozen=True)
class LIRow:
    seed: int
    direction: str
    masks: str  # truth or segmented
    found: bool
    angle_deg: float
    score: float


def run_li(seed: int, scenes_per_direction: int, shadow_ratio: float, object_chroma: float = 30.0,
           tilt_deg: float = 30.0) -> list[LIRow]:
    from fpr.scorers.vistar import li

    rows = []
    for d in li.light_directions():
        for k in range(scenes_per_direction):
            sc = render_scene(d.vector, seed * 100_000 + k * 100 + int(d.azimuth_deg) + int(d.elevation_deg),
                              tilt_deg=tilt_deg)
            seg = li.segment_lab(sc.rgb, object_chroma=object_chroma, shadow_ratio=shadow_ratio)
            for masks, (objs, shadow) in (("truth", (sc.objects, sc.shadow)), ("segmented", (seg.objects, seg.shadow))):
                est = li.light_direction(objs, shadow, tilt_deg)
                if est.vector is None:
                    rows.append(LIRow(seed, d.name, masks, False, float("nan"), float("nan")))
                else:
                    score, angle = li.li_score(np.array(est.vector), np.array(d.vector))
                    rows.append(LIRow(seed, d.name, masks, True, angle, score))
    return rows


def _li_line(label: str, sel: list[LIRow]) -> str:
    err = np.array([r.angle_deg for r in sel if r.found])
    sc = np.array([r.score for r in sel if r.found])
    stats = f"{np.median(err):.1f} | {err.max():.1f} | {sc.mean():.3f} |" if len(err) else "- | - | - |"
    return f"| {label} | {len(sel)} | {len(err)} | {stats}"


def li_table(rows: list[LIRow]) -> list[str]:
    out = ["| seed | direction | masks | scenes | with an estimate | median error (deg) | max error (deg) | "
           "mean LI score |", "|---|---|---|---|---|---|---|---|"]
    order = {d: k for k, d in enumerate(dict.fromkeys(r.direction for r in rows))}  # the data file's order
    keys = sorted({(r.seed, r.direction, r.masks) for r in rows}, key=lambda k: (k[0], k[2] != "truth", order[k[1]]))
    for key in keys:
        out.append(_li_line(" | ".join(map(str, key)), [r for r in rows if (r.seed, r.direction, r.masks) == key]))
    for seed in sorted({r.seed for r in rows}):
        for masks in ("truth", "segmented"):
            out.append(_li_line(f"{seed} | all | {masks}", [r for r in rows if r.seed == seed and r.masks == masks]))
    return out


def calibrate_shadow_ratio(seed: int, scenes: int, candidates=(0.6, 0.7, 0.8, 0.9)) -> tuple[float, list[str]]:
    """The shadow threshold with the most segmented scenes estimated within 15 degrees (then lower median error)."""
    lines = ["| shadow_ratio | scenes | with an estimate | within 15 deg | median error (deg) |", "|---|---|---|---|---|"]
    best = None
    for c in candidates:
        rows = [r for r in run_li(seed, scenes, c) if r.masks == "segmented"]
        err = np.array([r.angle_deg for r in rows if r.found])
        within = int((err <= 15).sum())
        med = float(np.median(err)) if len(err) else float("inf")
        lines.append(f"| {c} | {len(rows)} | {len(err)} | {within} | {med:.1f} |")
        if best is None or (within, -med) > best[0]:
            best = ((within, -med), c)
    return best[1], lines


# --------------------------------------------------------------------------- PSC: solids in depth

PSC_CLASSES = ("penetrate", "occlude", "touch", "attach")


@dataclass
class SolidsScene:
    kind: str
    masks: list  # visible (modal) mask of each solid, bool
    depth: np.ndarray  # what a monocular model would give: inverse depth (DPT's output), blurred, noisy
    confidences: list


def _bar_depth(xs: np.ndarray, xa: float, xb: float, za: float, zb: float) -> np.ndarray:
    return za + (zb - za) * (xs - xa) / (xb - xa)


def render_solids(kind: str, seed: int, *, size: int = 160) -> SolidsScene:
    """A box's front face (constant depth) and a bar (depth linear along it) on a far wall, z-buffered.

    ``penetrate``: the bar comes from the viewer and ends 0.2-0.8 behind the face, inside the box's
    silhouette (only its part in front shows); ``occlude``: the bar passes over the box 0.5-2 in front of
    it; ``touch``: the bar ends against the box's side at the face's depth, beside its silhouette
    (contact at one depth: what the chaos ratio cannot tell from a penetration); ``attach``: a small flat
    plate on the face (a badge), 0.02 in front of it. Masks are eroded or dilated by up to one pixel and
    the depth map blurred (sigma 1 px) with 1% noise, as from real models; confidences are in [0.7, 1].
    """
    from scipy import ndimage

    rng = np.random.default_rng([seed, PSC_CLASSES.index(kind)])
    S = size
    z = np.full((S, S), 10.0)
    label = np.zeros((S, S), int)
    ys, xs = np.mgrid[0:S, 0:S].astype(float)
    z_box = rng.uniform(4.0, 6.0)
    bx0, bx1 = rng.uniform(0.40, 0.50) * S, rng.uniform(0.80, 0.92) * S
    by0, by1 = rng.uniform(0.15, 0.30) * S, rng.uniform(0.70, 0.85) * S
    box = (xs >= bx0) & (xs < bx1) & (ys >= by0) & (ys < by1)
    z[box], label[box] = z_box, 1
    h = rng.uniform(8, 14)
    y0 = rng.uniform(by0 + 0.2 * (by1 - by0), by1 - 0.2 * (by1 - by0) - h)
    rows = (ys >= y0) & (ys < y0 + h)
    xa = rng.uniform(0.04, 0.15) * S
    if kind == "penetrate":
        L, dz = rng.uniform(1.0, 2.5), rng.uniform(0.2, 0.8)
        xb = bx0 + rng.uniform(0.15, 0.35) * (bx1 - bx0)
        zbar = _bar_depth(xs, xa, xb, z_box - L, z_box + dz)
        bar = rows & (xs >= xa) & (xs < xb)
    elif kind == "occlude":
        g, L = rng.uniform(0.5, 2.0), rng.uniform(0.0, 1.5)
        xb = bx1 + rng.uniform(0.02, 0.06) * S
        zbar = _bar_depth(xs, xa, xb, z_box - g - L, z_box - g)
        bar = rows & (xs >= xa) & (xs < xb)
    elif kind == "touch":
        L = rng.uniform(1.0, 2.5)
        zbar = _bar_depth(xs, xa, bx0, z_box - L, z_box)
        bar = rows & (xs >= xa) & (xs < bx0)
    elif kind == "attach":
        w = rng.uniform(0.12, 0.25) * (bx1 - bx0)
        px0 = rng.uniform(bx0 + 0.1 * (bx1 - bx0), bx1 - 0.1 * (bx1 - bx0) - w)
        py0 = rng.uniform(by0 + 0.1 * (by1 - by0), by1 - 0.1 * (by1 - by0) - w)
        zbar = np.full((S, S), z_box - 0.02)
        bar = (xs >= px0) & (xs < px0 + w) & (ys >= py0) & (ys < py0 + w)
    else:
        raise ValueError(kind)
    front = bar & (zbar < z)
    z[front], label[front] = zbar[front], 2
    depth = ndimage.gaussian_filter(1.0 / z, 1.0)
    depth = depth + rng.normal(0, 0.01 * float(np.ptp(depth)), depth.shape)
    masks = []
    for k in (1, 2):
        m = label == k
        step = int(rng.integers(-1, 2))
        m = ndimage.binary_dilation(m) if step > 0 else ndimage.binary_erosion(m) if step < 0 else m
        masks.append(m)
    return SolidsScene(kind, masks, depth, [float(rng.uniform(0.7, 1.0)) for _ in masks])


@dataclass(frozen=True)
class PSCRow:
    seed: int
    kind: str
    score: float
    chaos: float
    attached: bool


def run_psc(seed: int, scenes: int, settings=None) -> list[PSCRow]:
    from fpr.scorers.vistar.psc import Instance, PscSettings, psc

    settings = settings or PscSettings()
    rows = []
    for kind in PSC_CLASSES:
        for k in range(scenes):
            sc = render_solids(kind, seed * 1000 + k)
            r = psc([Instance(m, c) for m, c in zip(sc.masks, sc.confidences)], sc.depth, settings)
            w = r.worst
            rows.append(PSCRow(seed, kind, r.score, float("nan") if w is None else w.chaos,
                               bool(w is not None and w.attached)))
    return rows


def auroc(positive: list[float], negative: list[float]) -> float:
    """P(a positive scores above a negative), ties half (Mann-Whitney)."""
    p, n = np.asarray(positive, float)[:, None], np.asarray(negative, float)[None, :]
    return float(((p > n) + 0.5 * (p == n)).mean())


def psc_separation(rows: list[PSCRow], other: str) -> float:
    """AUROC of ``other`` vs ``penetrate`` on the PSC score (1: every penetration scores below every other)."""
    return auroc([r.score for r in rows if r.kind == other], [r.score for r in rows if r.kind == "penetrate"])


def calibrate_chaos_threshold(seed: int, scenes: int, candidates=(0.35, 0.5, 0.75, 1.0, 1.5)) -> tuple[float, list[str]]:
    """The conflict function's threshold with the best accuracy of 'score < 0.5 = penetration' on
    penetrate vs occlude renders of ``seed``."""
    from fpr.scorers.vistar.psc import PscSettings

    lines = ["| chaos_threshold | scenes | accuracy (score < 0.5 = penetration) | AUROC penetrate vs occlude |",
             "|---|---|---|---|"]
    best = None
    for c in candidates:
        rows = [r for r in run_psc(seed, scenes, PscSettings(chaos_threshold=c)) if r.kind in ("penetrate", "occlude")]
        acc = float(np.mean([(r.score < 0.5) == (r.kind == "penetrate") for r in rows]))
        lines.append(f"| {c} | {len(rows)} | {acc:.3f} | {psc_separation(rows, 'occlude'):.3f} |")
        if best is None or acc > best[0]:
            best = (acc, c)
    return best[1], lines


def psc_table(rows: list[PSCRow]) -> list[str]:
    lines = ["| seed | kind | n | score mean / min / max | chaos median | flagged attached | share score < 0.5 |"
             " AUROC vs penetrate |", "|---|---|---|---|---|---|---|---|"]
    for seed in sorted({r.seed for r in rows}):
        sel = [r for r in rows if r.seed == seed]
        for kind in PSC_CLASSES:
            k = [r for r in sel if r.kind == kind]
            sc = np.array([r.score for r in k])
            sep = "-" if kind == "penetrate" else f"{psc_separation(sel, kind):.3f}"
            lines.append(f"| {seed} | {kind} | {len(k)} | {sc.mean():.3f} / {sc.min():.3f} / {sc.max():.3f} | "
                         f"{np.nanmedian([r.chaos for r in k]):.3f} | {sum(r.attached for r in k)} | "
                         f"{float((sc < 0.5).mean()):.3f} | {sep} |")
    return lines


def psc_section(scenes: int, check_seeds=(1, 2)) -> list[str]:
    from fpr.scorers.vistar.psc import PscSettings

    t0 = time.time()
    threshold, cal = calibrate_chaos_threshold(0, scenes)
    rows = [r for s in check_seeds for r in run_psc(s, scenes, PscSettings(chaos_threshold=threshold))]
    intro = (f"{render_solids.__doc__.split(chr(10))[0]} {scenes} scenes per kind and seed, {160} px. The "
             f"geometric core (`fpr.scorers.vistar.psc.psc`) gets the renderer's masks, confidences and inverse "
             f"depth; kinds: penetrate (a bar ending behind a box's face), occlude (the bar in front at a gap), "
             f"touch (the bar against the box's side at the face's depth), attach (a badge on the face). AUROC: "
             f"P(a scene of that kind scores above a penetration), ties half.")
    return section("PSC: solids that penetrate, occlude, touch, attach", intro,
                   ("the conflict function's threshold, penetrate vs occlude", cal),
                   f"`vistar-psc.chaos_threshold={threshold}`", psc_table(rows), t0,
                   "seeds " + " and ".join(map(str, check_seeds)))


# --------------------------------------------------------------------------- CPA: people, counted and posed

POSTURES = ("standing", "sitting", "lying")
# A stick figure's COCO keypoints in torso lengths (x right, y down; mid-hip at (0, 1)): face, shoulders,
# elbows, wrists, hips, knees, ankles. Sitting: side view (thighs level) or front view (thighs toward the camera).
_FACE = [(0, -0.35), (-0.06, -0.42), (0.06, -0.42), (-0.12, -0.38), (0.12, -0.38)]
_UPPER = [(-0.2, 0), (0.2, 0), (-0.25, 0.5), (0.25, 0.5), (-0.27, 0.95), (0.27, 0.95), (-0.12, 1), (0.12, 1)]
_LEGS = {"standing": [(-0.12, 1.9), (0.12, 1.9), (-0.12, 2.8), (0.12, 2.8)],
         "sitting-side": [(0.75, 1.05), (0.95, 1.05), (0.75, 1.95), (0.95, 1.95)],
         "sitting-front": [(-0.16, 1.3), (0.16, 1.3), (-0.16, 2.15), (0.16, 2.15)]}


def figure_keypoints(posture: str, rng: np.random.Generator, x: float, y: float, torso: float) -> np.ndarray:
    """(17, 3) keypoints of one figure in ``posture`` at (x, y) (mid-hip), ``torso`` px long: tilted up to
    12 degrees (lying: 70-110 degrees), 3% jitter, confidences 0.5-1 with 5% of keypoints unseen (< 0.2)."""
    legs = _LEGS["standing" if posture != "sitting" else ("sitting-side", "sitting-front")[int(rng.integers(2))]]
    pts = np.array(_FACE + _UPPER + legs, float) - np.array([0.0, 1.0])
    if rng.random() < 0.5:
        pts[:, 0] *= -1  # facing the other way
    tilt = np.radians(rng.uniform(70, 110) * rng.choice([-1, 1]) if posture == "lying" else rng.uniform(-12, 12))
    rot = np.array([[np.cos(tilt), -np.sin(tilt)], [np.sin(tilt), np.cos(tilt)]])
    xy = (pts @ rot.T + rng.normal(0, 0.03, pts.shape)) * torso + np.array([x, y])
    conf = rng.uniform(0.5, 1.0, len(pts))
    conf[rng.random(len(pts)) < 0.05] = rng.uniform(0.0, 0.2)
    return np.column_stack([xy, conf])


@dataclass
class PeopleScene:
    count: int
    postures: list
    detections: list  # fpr.scorers.vistar.cpa.Person: true people, duplicate boxes and low-confidence clutter


def render_people(seed: int, count: int, posture: str) -> PeopleScene:
    """``count`` figures in ``posture`` on a 640 px wide canvas as a detector would report them: each true
    person at confidence 0.5-0.99, a third of them again as a shifted duplicate box (IoU > 0.7) at lower
    confidence, and 0-3 clutter boxes at confidence 0.05-0.45."""
    from fpr.scorers.vistar.cpa import Person

    rng = np.random.default_rng([seed, count, POSTURES.index(posture)])
    dets = []
    for k in range(count):
        torso = rng.uniform(40, 70)
        x, y = (k + 0.5) * 640 / max(count, 1) + rng.uniform(-10, 10), rng.uniform(200, 260)
        kp = figure_keypoints(posture, rng, x, y, torso)
        x0, y0 = kp[:, :2].min(axis=0) - 5
        x1, y1 = kp[:, :2].max(axis=0) + 5
        score = float(rng.uniform(0.5, 0.99))
        dets.append(Person((x0, y0, x1, y1), score, kp))
        if rng.random() < 1 / 3:
            d = 0.03 * (x1 - x0)
            dets.append(Person((x0 + d, y0 + d, x1 + d, y1), score * rng.uniform(0.6, 0.95), kp))
    for _ in range(int(rng.integers(0, 4))):
        cx, cy = rng.uniform(0, 640), rng.uniform(100, 400)
        dets.append(Person((cx - 20, cy - 40, cx + 20, cy + 40), float(rng.uniform(0.05, 0.45)), None))
    return PeopleScene(count, [posture] * count, dets)


@dataclass(frozen=True)
class CPARow:
    seed: int
    count: int
    posture: str
    counted: int
    postures: tuple


def run_cpa(seed: int, scenes: int, min_confidence: float = 0.5, counts=(0, 1, 2, 3, 5), nms_iou: float = 0.7
            ) -> list[CPARow]:
    from fpr.scorers.vistar.cpa import classify_posture, count_people

    rows = []
    for n in counts:
        for posture in POSTURES:
            for k in range(scenes):
                sc = render_people(seed * 1000 + k, n, posture)
                kept = count_people(sc.detections, min_confidence, nms_iou)
                rows.append(CPARow(seed, n, posture, len(kept), tuple(classify_posture(p.keypoints) for p in kept)))
    return rows


def calibrate_min_confidence(seed: int, scenes: int, candidates=(0.3, 0.4, 0.5, 0.6)) -> tuple[float, list[str]]:
    lines = ["| min_confidence | scenes | count accuracy |", "|---|---|---|"]
    best = None
    for c in candidates:
        rows = run_cpa(seed, scenes, c)
        acc = float(np.mean([r.counted == r.count for r in rows]))
        lines.append(f"| {c} | {len(rows)} | {acc:.3f} |")
        if best is None or acc > best[0]:
            best = (acc, c)
    return best[1], lines


def cpa_table(rows: list[CPARow], no_nms: list[CPARow]) -> list[str]:
    lines = ["| seed | true posture | scenes | count accuracy | without NMS | people | posture accuracy | classified as |",
             "|---|---|---|---|---|---|---|---|"]
    for seed in sorted({r.seed for r in rows}):
        for posture in POSTURES:
            sel = [r for r in rows if r.seed == seed and r.posture == posture]
            got = [p for r in sel for p in r.postures]
            share = {p: got.count(p) for p in sorted(set(got))}
            acc = np.mean([p == posture for p in got]) if got else float("nan")
            raw = [r for r in no_nms if r.seed == seed and r.posture == posture]
            lines.append(f"| {seed} | {posture} | {len(sel)} | {np.mean([r.counted == r.count for r in sel]):.3f} | "
                         f"{np.mean([r.counted == r.count for r in raw]):.3f} | "
                         f"{len(got)} | {acc:.3f} | {', '.join(f'{k} {v}' for k, v in share.items())} |")
    return lines


def cpa_section(scenes: int, check_seeds=(1, 2)) -> list[str]:
    t0 = time.time()
    conf, cal = calibrate_min_confidence(0, scenes)
    rows = [r for s in check_seeds for r in run_cpa(s, scenes, conf)]
    no_nms = [r for s in check_seeds for r in run_cpa(s, scenes, conf, nms_iou=1.0)]
    intro = ("Stick figures (COCO keypoints, torso 40-70 px) standing, sitting (side or front view) or lying, "
             "tilted up to 12 degrees (lying 70-110), 3% jitter, 5% of keypoints unseen; reported as a detector "
             "would: true people at confidence 0.5-0.99, a third again as a duplicate box at lower confidence, "
             f"0-3 clutter boxes at 0.05-0.45. Counts 0, 1, 2, 3, 5; {scenes} scenes per count, posture and seed. "
             "The core (`vistar_cpa.count_people`, `vistar_cpa.classify_posture`) gets detections and keypoints.")
    return section("CPA: counted people in known postures", intro, ("the detection confidence cut", cal),
                   f"`vistar-cpa.min_confidence={conf}`", cpa_table(rows, no_nms), t0, "seeds " + " and ".join(map(str, check_seeds)))


# --------------------------------------------------------------------------- GC: clean vs geometrically corrupted

GC_CORRUPTIONS = ("tear", "texture", "speckle", "crease")
GC_CUES = ("contour", "lbp", "highlight", "depth_normals", "depth_curvature")


@dataclass
class ShadedScene:
    rgb: np.ndarray  # float RGB in [0, 1]
    depth: np.ndarray


def render_spheres(seed: int, size: int = 256) -> ShadedScene:
    """Two to four shaded spheres (diffuse + a specular highlight) on a smooth gradient, and their depth."""
    rng = np.random.default_rng([seed, 77])
    yy, xx = np.mgrid[0:size, 0:size].astype(float)
    rgb = np.stack([0.55 + 0.2 * yy / size, 0.6 + 0.1 * xx / size, 0.7 * np.ones_like(xx)], axis=-1)
    depth = np.full((size, size), 10.0)
    light = np.array([-0.4, -0.5, 0.77])
    light /= np.linalg.norm(light)
    half = (light + np.array([0, 0, 1.0])) / np.linalg.norm(light + np.array([0, 0, 1.0]))
    for _ in range(int(rng.integers(2, 5))):
        r = rng.uniform(0.12, 0.22) * size
        cx, cy = rng.uniform(r, size - r), rng.uniform(r, size - r)
        dx, dy = (xx - cx) / r, (yy - cy) / r
        inside = dx * dx + dy * dy < 1
        z = np.sqrt(np.clip(1 - dx * dx - dy * dy, 0, None))
        zd = 5.0 - z * r / size * 4
        front = inside & (zd < depth)
        n = np.stack([dx, dy, z], axis=-1)
        colour = np.array(PALETTE[int(rng.integers(len(PALETTE)))], float) / 255
        shade = 0.25 + 0.75 * np.clip(n @ light, 0, None)
        spec = np.clip(n @ half, 0, None) ** 60
        col = np.clip(colour[None, None] * shade[..., None] + spec[..., None], 0, 1)
        rgb[front], depth[front] = col[front], zd[front]
    return ShadedScene(rgb, depth)


def corrupt(scene: ShadedScene, kind: str, seed: int) -> ShadedScene:
    """The scene with one geometric defect: ``tear`` (strips shifted sideways, breaking outlines and the depth
    surface), ``texture`` (three patches of noise texture), ``speckle`` (scattered pinpoint highlights),
    ``crease`` (ridges folded into the depth map)."""
    rng = np.random.default_rng([seed, 78, GC_CORRUPTIONS.index(kind)])
    rgb, depth = scene.rgb.copy(), scene.depth.copy()
    size = rgb.shape[0]
    if kind == "tear":
        for _ in range(8):
            y0, h, dx = int(rng.integers(0, size - 10)), int(rng.integers(3, 9)), int(rng.integers(4, 11))
            dx *= int(rng.choice([-1, 1]))
            rgb[y0:y0 + h] = np.roll(rgb[y0:y0 + h], dx, axis=1)
            depth[y0:y0 + h] = np.roll(depth[y0:y0 + h], dx, axis=1)
    elif kind == "texture":
        for _ in range(3):
            y0, x0 = rng.integers(0, size - 40, 2)
            rgb[y0:y0 + 40, x0:x0 + 40] = rng.random((40, 40, 1)) * np.ones(3)
    elif kind == "speckle":
        ys, xs = rng.integers(0, size - 1, (2, 150))
        for y, x in zip(ys, xs):
            rgb[y:y + 2, x:x + 2] = 1.0
    elif kind == "crease":
        yy, xx = np.mgrid[0:size, 0:size].astype(float)
        for _ in range(3):
            y0, x0 = rng.integers(0, size - 64, 2)
            box = (yy >= y0) & (yy < y0 + 64) & (xx >= x0) & (xx < x0 + 64)
            depth[box] += 0.4 * np.abs(np.sin((xx[box] - x0) / 64 * 4 * np.pi))
    else:
        raise ValueError(kind)
    return ShadedScene(rgb, depth)


def gc_cues(scene: ShadedScene) -> dict[str, float]:
    from fpr.scorers.vistar import gc

    rgb = scene.rgb
    return {"contour": gc.contour_integrity(rgb)[0], "lbp": gc.lbp_regularity(rgb)[0],
            "highlight": gc.highlight_continuity(rgb)[0], "depth_normals": gc.depth_normal_smoothness(scene.depth),
            "depth_curvature": gc.depth_curvature_regularity(scene.depth)}


def run_gc(seed: int, scenes: int) -> list[tuple[str, dict]]:
    """(condition, cues) for each clean scene and each of its corruptions."""
    rows = []
    for k in range(scenes):
        clean = render_spheres(seed * 1000 + k)
        rows.append(("clean", gc_cues(clean)))
        rows += [(kind, gc_cues(corrupt(clean, kind, seed * 1000 + k))) for kind in GC_CORRUPTIONS]
    return rows


def gc_table(rows_by_seed: dict[int, list]) -> list[str]:
    cols = GC_CUES + ("weight-free min",)
    lines = ["| seed | corruption | n | " + " | ".join(f"AUROC {c}" for c in cols) + " |",
             "|---|---|---|" + "---|" * len(cols)]

    def value(cues: dict, c: str) -> float:
        return min(cues["contour"], cues["lbp"], cues["highlight"]) if c == "weight-free min" else cues[c]

    for seed, rows in rows_by_seed.items():
        clean = [cues for kind, cues in rows if kind == "clean"]
        for kind in GC_CORRUPTIONS:
            bad = [cues for k, cues in rows if k == kind]
            aucs = [auroc([value(c, col) for c in clean], [value(c, col) for c in bad]) for col in cols]
            lines.append(f"| {seed} | {kind} | {len(bad)} | " + " | ".join(f"{a:.3f}" for a in aucs) + " |")
    return lines


def gc_section(scenes: int, seeds=(0, 1, 2)) -> list[str]:
    t0 = time.time()
    table = gc_table({s: run_gc(s, scenes) for s in seeds})
    intro = (f"{render_spheres.__doc__.splitlines()[0]} Defects: {' '.join(corrupt.__doc__.split(': ', 1)[1].split())} "
             f"{scenes} clean scenes per seed, each also with every corruption; every cue of `vistar-gc` that "
             "needs no model, computed by the scorer's own functions (the depth cues on the renderer's depth "
             "map, standing in for the depth model). AUROC: P(a clean scene's cue above a corrupted one's), ties "
             "half; 0.5 = the cue does not see that defect. The cues have no free threshold, so nothing is "
             "calibrated: all seeds are checks.")
    return ["## GC: clean vs geometrically corrupted renders", "", intro, "", *table, "",
            f"({time.time() - t0:.0f} s)", ""]


# --------------------------------------------------------------------------- CSE: storyboards, one subject or many

@dataclass
class Storyboard:
    image: Image.Image  # 2x2 grid, 256 px
    boxes: list  # the subject's box in each panel (x0, y0, x1, y1), panel pixels: the grounding's stand-in


def _creature(d: ImageDraw.ImageDraw, x: float, y: float, s: float, colour: tuple, stripes: int, flip: bool) -> tuple:
    """A striped body with a head, ``s`` px long, centred at (x, y); returns its box."""
    body = (x - s / 2, y - s / 4, x + s / 2, y + s / 4)
    d.ellipse(body, fill=colour)
    for k in range(stripes):
        sx = x - s / 2 + (k + 1) * s / (stripes + 1)
        d.line((sx, y - s / 5, sx, y + s / 5), fill=(20, 20, 20), width=max(2, int(s / 25)))
    hx = x + (-1 if flip else 1) * s * 0.55
    d.ellipse((hx - s / 6, y - s / 2.8, hx + s / 6, y - s / 2.8 + s / 3), fill=colour)
    return (min(body[0], hx - s / 6), y - s / 2.8, max(body[2], hx + s / 6), body[3])


def render_storyboard(seed: int, consistent: bool, panel: int = 128) -> Storyboard:
    """Four panels, each a new background (colour, two clutter shapes) with a striped creature at its own
    place, size (+-15%) and facing; ``consistent``: the same creature (colour, stripes) in every panel,
    else a different one in each."""
    rng = np.random.default_rng([seed, 79, int(consistent)])
    img = Image.new("RGB", (2 * panel, 2 * panel))
    looks = rng.permutation(len(PALETTE))
    stripes = rng.permutation([2, 3, 4, 5])
    boxes = []
    for k in range(4):
        tile = Image.new("RGB", (panel, panel), tuple(int(v) for v in rng.integers(150, 256, 3)))
        d = ImageDraw.Draw(tile)
        for _ in range(2):
            cx, cy, r = rng.uniform(0, panel), rng.uniform(0, panel), rng.uniform(8, 20)
            d.rectangle((cx - r, cy - r, cx + r, cy + r), fill=tuple(int(v) for v in rng.integers(60, 200, 3)))
        j = 0 if consistent else k
        s = 60 * rng.uniform(0.85, 1.15)
        box = _creature(d, rng.uniform(40, panel - 40), rng.uniform(45, panel - 35), s, PALETTE[looks[j]],
                        int(stripes[j]), bool(rng.random() < 0.5))
        img.paste(tile, ((k % 2) * panel, (k // 2) * panel))
        boxes.append(tuple(int(round(v)) for v in box))
    return Storyboard(img, boxes)


def run_cse(seed: int, grids: int) -> list[tuple[bool, float, float]]:
    """(consistent, con on the subject's boxes, con_whole on whole panels) per grid, pixels-16 embeddings."""
    from fpr.encoders.embed import embed_pil
    from fpr.encoders.registry import load_encoder
    from fpr.scorers.vistar.cse import consistency, split_panels

    enc = load_encoder("pixels-16", device="cpu")
    rows = []
    for consistent in (True, False):
        for k in range(grids):
            sb = render_storyboard(seed * 1000 + k, consistent)
            panels = split_panels(sb.image, 2, 2)
            crops = [p.crop(b) for p, b in zip(panels, sb.boxes)]
            rows.append((consistent, consistency(embed_pil(enc, crops)), consistency(embed_pil(enc, panels))))
    return rows


def cse_section(grids: int, seeds=(0, 1, 2)) -> list[str]:
    t0 = time.time()
    lines = ["| seed | grids per kind | con: consistent mean / inconsistent mean / AUROC | "
             "con_whole: consistent mean / inconsistent mean / AUROC |", "|---|---|---|---|"]
    for seed in seeds:
        rows = run_cse(seed, grids)
        cells = []
        for col in (1, 2):
            yes, no = [r[col] for r in rows if r[0]], [r[col] for r in rows if not r[0]]
            cells.append(f"{np.mean(yes):.3f} / {np.mean(no):.3f} / {auroc(yes, no):.3f}")
        lines.append(f"| {seed} | {grids} | {cells[0]} | {cells[1]} |")
    intro = (f"{' '.join(render_storyboard.__doc__.split())} The encoder is `pixels-16` (fpr's weight-free "
             "baseline: no DINOv2 weights here) and the subject's boxes are the renderer's, standing in for the "
             "OWLv2 grounding; so this checks CSE-Con's formula and panel handling (`vistar_cse.split_panels`, "
             "`vistar_cse.consistency`), not DINOv2 or OWLv2. CSE-Cov needs CLIP's text tower and is not covered. "
             "AUROC: P(a consistent grid's value above an inconsistent one's), ties half; nothing is calibrated.")
    return ["## CSE: storyboards with one subject or four", "", intro, "", *lines, "",
            f"({time.time() - t0:.0f} s)", ""]


def section(title: str, intro: str, calibration: tuple[str, list[str]], chosen: str, check: list[str],
            t0: float, check_seeds: str = "seed 1") -> list[str]:
    """One part of the table: what was rendered, the calibration on seed 0, the check on seed 1."""
    return ([f"## {title}", "", intro, "", f"Calibration (seed 0): {calibration[0]}", ""] + calibration[1]
            + ["", f"Chosen: {chosen}. Check ({check_seeds}):", ""] + check + ["", f"({time.time() - t0:.0f} s)", ""])


def tr_section(n_calibration: int, n_check: int) -> list[str]:
    t0 = time.time()
    unclip, cal = calibrate_unclip(0, n_calibration)
    rows = run_tr(1, n_check, unclip)
    bad = [r for r in rows if r.condition == "exact" and r.score_robust < 0.95]
    check = tr_table(rows) + ["", "Exact renders under 0.95 on seed 1: " + (
        "none." if not bad else "; ".join(f"'{r.string}' {r.font} {r.size}px read '{r.ocr}' ({r.score_robust:.3f})"
                                          for r in bad))]
    intro = (f"Fonts {', '.join(FONTS)}; sizes {', '.join(map(str, SIZES))} px; {n_calibration} strings on seed 0 "
             f"({'; '.join(sign_strings(0, n_calibration))}), {n_check} held-out strings on seed 1 "
             f"({'; '.join(sign_strings(1, n_check))}); seed 1 renders every condition.")
    return section("TR: rendered signs read by RapidOCR", intro,
                   ("the detector's box expansion, on exact renders", cal), f"`vistar-tr.unclip={unclip}`", check, t0)


def li_section(scenes: int) -> list[str]:
    t0 = time.time()
    ratio, cal = calibrate_shadow_ratio(0, scenes)
    rows = run_li(1, scenes, ratio)
    intro = (f"Three upright boxes per scene on an unevenly lit (+-12%), noisy ground, orthographic camera looking "
             f"down 30 degrees (the scorer's default vistar-li.camera_tilt), {scenes} scenes per named direction "
             f"and seed. `truth`: the renderer's own object and shadow masks into the geometric core "
             f"(vistar_li.light_direction); `segmented`: the scorer's Lab segmentation. Error: angle between the "
             f"estimate and the true direction.")
    return section("LI: rendered scenes with a known light direction", intro,
                   ("the shadow threshold, segmented masks", cal), f"`vistar-li.shadow_ratio={ratio}`",
                   li_table(rows), t0)


def merge_sections(old: str, new: str) -> str:
    """``old``'s text with each ``## `` section that ``new`` has replaced by ``new``'s (others kept, in order;
    new sections appended), so one part can be rerun without losing the others' tables."""
    def split(text: str) -> tuple[str, list[tuple[str, str]]]:
        head, *parts = text.split("\n## ")
        return head, [(p.split("\n", 1)[0], "## " + p) for p in parts]

    head, old_parts = split(old)
    new_head, new_parts = split(new)
    fresh = dict(new_parts)
    out = [new_head] + [fresh.pop(t, body) for t, body in old_parts] + list(fresh.values())
    return "\n".join(x.rstrip("\n") + "\n" for x in out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("tr", "li", "psc", "cpa", "gc", "cse", "all"), default="all")
    ap.add_argument("--strings", type=int, default=6)
    ap.add_argument("--scenes", type=int, default=4)
    ap.add_argument("--psc-scenes", type=int, default=24)
    ap.add_argument("--cpa-scenes", type=int, default=20)
    ap.add_argument("--gc-scenes", type=int, default=12)
    ap.add_argument("--cse-grids", type=int, default=16)
    ap.add_argument("--calibration-strings", type=int, default=12)
    ap.add_argument("--out", default=None, help="markdown file; sections of parts not rerun are kept")
    args = ap.parse_args()
    lines = ["# VISTAR known answers", "",
             f"`python benchmarks/vistar_known_answers.py --part <part>` per section "
             f"(last: --part {args.part}, {time.strftime('%Y-%m-%d')}, 2 shared CPU cores).", ""]
    if args.part in ("tr", "all"):
        lines += tr_section(args.calibration_strings, args.strings)
    if args.part in ("li", "all"):
        lines += li_section(args.scenes)
    if args.part in ("psc", "all"):
        lines += psc_section(args.psc_scenes)
    if args.part in ("cpa", "all"):
        lines += cpa_section(args.cpa_scenes)
    if args.part in ("gc", "all"):
        lines += gc_section(args.gc_scenes)
    if args.part in ("cse", "all"):
        lines += cse_section(args.cse_grids)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        if os.path.exists(args.out):
            with open(args.out) as fh:
                text = merge_sections(fh.read(), text)
        with open(args.out, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
