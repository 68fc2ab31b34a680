"""``vistar-li``: lighting integrity (VISTAR's LI) -- does the light come from where the prompt says?

The expected direction is one of fpr's 16 named light directions
(``fpr/scorers/vistar/data/light_directions.json``: a phrase for the prompt, a unit vector for
the score; frame x right, y up, z toward the viewer, pointing at the light). It is read
from the query's ``light_direction`` column (a name such as ``upper-left-front``, a phrase,
or ``x,y,z``), else from the first phrase found in the prompt (the longest one wins:
"light from upper-left front" over "light from upper-left").

The estimate follows VISTAR's pipeline: objects and their cast shadows are segmented,
each object is paired with the shadow touching it, each pair gives a 3-D light direction,
and the scene's direction is the median over pairs (per component, renormalised). One
pair's direction (:func:`pair_direction`) is geometry under an orthographic camera looking
down at the ground at ``camera_tilt`` degrees: the object's base is the middle of its
lowest image row, its height is its image height / cos(tilt); the shadow's tip is the
shadow pixel farthest from the base on the ground (image offsets (du, dv) -> ground
(du, -dv / sin(tilt))); the light then lies along (-gx / h, 1, -gz / h).

Segmentation (:func:`segment_lab`) is deterministic, no model: no permissively licensed
shadow or object detector loads offline here (VISTAR uses YOLOv8, AGPL). In CIE Lab, the
ground's colour is the median of the image border; objects are pixels of chroma at least
``object_chroma``; shadows are the other pixels darker than ``shadow_ratio`` x the
ground's L*; 8-connected components smaller than 0.05% of the image are dropped. This
suits saturated objects on a plain ground and little else -- a known limit, stated in
``docs/evaluators.md``.

Metrics: ``score`` = 1 - angle / (pi / 2) (VISTAR's LI-Score; angles beyond 90 degrees
would make it negative, the paper states [0, 1], so it is clipped at 0), ``angle_deg``
the angle itself, ``pairs`` the number of object-shadow pairs the median used. No
expected direction: all three NaN with the reason in ``note``; no object with a
visible shadow: ``score`` and ``angle_deg`` NaN with the reason, ``pairs`` 0 (a real count).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

from fpr import progress
from fpr.errors import InputError
from fpr.images import load_rgb
from fpr.scorers import QueryBatch, Scorer, register_scorer
from fpr.scorers.options import Option, resolve

MIN_SHADOW_PIXELS = 12  # fewer visible shadow pixels than this: no tip to measure


@dataclass(frozen=True)
class LightDirection:
    name: str
    phrase: str
    azimuth_deg: float
    elevation_deg: float
    vector: tuple[float, float, float]


@lru_cache(maxsize=1)
def light_directions() -> tuple[LightDirection, ...]:
    """fpr's 16 named directions, from the package's data file."""
    doc = json.loads(resources.files("fpr.scorers.vistar").joinpath("data/light_directions.json").read_text())
    return tuple(LightDirection(d["name"], d["phrase"], float(d["azimuth_deg"]), float(d["elevation_deg"]),
                                tuple(float(x) for x in d["vector"])) for d in doc["directions"])


def parse_direction(value) -> np.ndarray:
    """A name, a phrase or ``x,y,z`` -> unit vector; anything else is an InputError."""
    text = str(value).strip().lower()
    for d in light_directions():
        if text in (d.name, d.phrase):
            return np.array(d.vector)
    parts = [p for p in re.split(r"[,\s]+", text) if p]
    if len(parts) == 3:
        try:
            v = np.array([float(p) for p in parts])
        except ValueError:
            v = None
        if v is not None and np.linalg.norm(v) > 0:
            return v / np.linalg.norm(v)
    raise InputError(f"light_direction '{value}' is not a known direction or an x,y,z vector",
                     hint="names: " + ", ".join(d.name for d in light_directions()))


def expected_direction(extras: dict | None, prompt: str | None) -> tuple[np.ndarray | None, str]:
    """(unit vector, where it came from) from the ``light_direction`` column, else a phrase in the prompt."""
    v = (extras or {}).get("light_direction")
    if v is not None and not (isinstance(v, float) and math.isnan(v)) and str(v).strip():
        return parse_direction(v), f"light_direction '{v}'"
    text = (prompt or "").lower()
    found = [d for d in light_directions() if d.phrase in text]
    if not found:
        return None, "no light_direction column value and no direction phrase in the prompt"
    best = max(found, key=lambda d: len(d.phrase))
    return np.array(best.vector), f"prompt phrase '{best.phrase}'"


def li_score(estimate: np.ndarray, expected: np.ndarray) -> tuple[float, float]:
    """(VISTAR's LI-Score clipped to [0, 1], angle in degrees) between two directions."""
    a = np.asarray(estimate, float) / np.linalg.norm(estimate)
    b = np.asarray(expected, float) / np.linalg.norm(expected)
    angle = math.acos(float(np.clip(a @ b, -1.0, 1.0)))
    return max(0.0, 1.0 - angle / (math.pi / 2)), math.degrees(angle)


# --------------------------------------------------------------------------- geometry (pure)

@dataclass(frozen=True)
class PairEstimate:
    """One object and its shadow: image points (x right, y down, pixels) and the light direction they give."""

    base: tuple[float, float]
    tip: tuple[float, float]
    image_height: float
    vector: tuple[float, float, float]


def pair_direction(obj: np.ndarray, shadow: np.ndarray, camera_tilt_deg: float) -> PairEstimate | None:
    """The light direction from one object mask and its shadow mask (booleans, same shape); None if the
    shadow has too few pixels or the object no height."""
    ys, xs = np.nonzero(obj)
    sy, sx = np.nonzero(shadow)
    if len(ys) == 0 or len(sy) < MIN_SHADOW_PIXELS:
        return None
    top, bottom = ys.min(), ys.max()
    h_img = float(bottom - top + 1)
    low = ys >= bottom - 1  # the lowest two rows: the object's contact with the ground
    base_x, base_y = float(xs[low].mean()) + 0.5, float(bottom) + 0.5  # pixel centres, as the tip's
    tilt = math.radians(camera_tilt_deg)
    gx = sx + 0.5 - base_x
    gz = -(base_y - (sy + 0.5)) / math.sin(tilt)  # up the image = away from the viewer = -z
    k = int(np.argmax(gx * gx + gz * gz))
    h = h_img / math.cos(tilt)
    v = np.array([-gx[k] / h, 1.0, -gz[k] / h])
    v /= np.linalg.norm(v)
    return PairEstimate((base_x, base_y), (float(sx[k]) + 0.5, float(sy[k]) + 0.5), h_img, tuple(v.tolist()))


@dataclass(frozen=True)
class LightEstimate:
    vector: tuple[float, float, float] | None  # None: no pair gave a direction
    pairs: tuple[PairEstimate, ...]
    objects: int
    reason: str | None


def associate(objects: list[np.ndarray], shadow: np.ndarray) -> list[np.ndarray]:
    """Each object's shadow: the shadow pixels reached first from that object's foot, flooding through the
    shadow mask (a priority flood from every foot at once, so two touching shadows split where their fronts
    meet). The foot is the lowest quarter of the object's image height (at least 3 rows), grown by 2 px:
    a cast shadow starts where the object stands, while another object's shadow may pass behind its body."""
    from scipy import ndimage
    from skimage.segmentation import watershed

    markers = np.zeros(shadow.shape, dtype=np.int32)
    for k, m in enumerate(objects, 1):
        ys = np.nonzero(m)[0]
        if len(ys) == 0:
            continue
        bottom = ys.max()
        foot = m & (np.arange(m.shape[0])[:, None] >= bottom - max(3, (bottom - ys.min() + 1) // 4))
        seeds = ndimage.binary_dilation(foot, iterations=2) & shadow & (markers == 0)
        markers[seeds] = k
    if not markers.any():
        return [np.zeros(shadow.shape, bool) for _ in objects]
    flood = watershed(np.zeros(shadow.shape), markers, mask=shadow, connectivity=2)
    return [flood == k for k in range(1, len(objects) + 1)]


def light_direction(objects: list[np.ndarray], shadow: np.ndarray, camera_tilt_deg: float) -> LightEstimate:
    """The scene's light direction from object masks and a shadow mask: the per-component median of the
    pairs' directions, renormalised (VISTAR: the median of the reliable object-shadow pairs)."""
    if not 0 < camera_tilt_deg < 90:
        raise InputError(f"camera tilt must be strictly between 0 and 90 degrees, got {camera_tilt_deg:g}")
    pairs = [p for p in (pair_direction(o, s, camera_tilt_deg) for o, s in zip(objects, associate(objects, shadow)))
             if p is not None]
    if not objects:
        return LightEstimate(None, (), 0, "no object found")
    if not pairs:
        return LightEstimate(None, (), len(objects), f"none of {len(objects)} objects has a visible shadow")
    med = np.median(np.array([p.vector for p in pairs]), axis=0)
    norm = float(np.linalg.norm(med))
    if norm == 0:
        return LightEstimate(None, tuple(pairs), len(objects), "the pairs' directions cancel out")
    return LightEstimate(tuple((med / norm).tolist()), tuple(pairs), len(objects), None)


# --------------------------------------------------------------------------- segmentation (deterministic)

@dataclass(frozen=True)
class Segmentation:
    objects: list[np.ndarray]
    shadow: np.ndarray


def segment_lab(rgb: np.ndarray, *, object_chroma: float, shadow_ratio: float) -> Segmentation:
    """Objects (saturated components) and shadows (darker than the ground) by thresholds in CIE Lab."""
    from scipy import ndimage
    from skimage.color import rgb2lab

    lab = rgb2lab(np.asarray(rgb, dtype=np.float64)[..., :3] / 255.0)
    border = np.concatenate([lab[0], lab[-1], lab[:, 0], lab[:, -1]])
    ground_l = float(np.median(border[:, 0]))
    chroma = np.hypot(lab[..., 1], lab[..., 2])
    obj = chroma >= object_chroma
    shadow = ~obj & (lab[..., 0] < shadow_ratio * ground_l)
    min_px = max(4, int(0.0005 * obj.size))
    eight = np.ones((3, 3), bool)

    def keep(mask: np.ndarray) -> list[np.ndarray]:
        lab_, n = ndimage.label(mask, structure=eight)
        sizes = np.bincount(lab_.ravel(), minlength=n + 1)
        return [lab_ == c for c in range(1, n + 1) if sizes[c] >= min_px]

    shadows = keep(shadow)
    return Segmentation(keep(obj), np.any(shadows, axis=0) if shadows else np.zeros(obj.shape, bool))


# --------------------------------------------------------------------------- scorer

class VistarLI(Scorer):
    name = "vistar-li"
    description = "lighting: light direction from objects and their cast shadows vs the prompt's (1 - angle / 90 deg)"
    needs = frozenset({"image"})
    metrics = ("score", "angle_deg", "pairs")
    primary_metric = "score"
    options = (
        Option("camera_tilt", float, 30.0, "degrees the camera looks down at the ground (orthographic model)",
               minimum=1.0),
        Option("object_chroma", float, 30.0, "lowest CIE Lab chroma of an object pixel", minimum=0.0),
        Option("shadow_ratio", float, 0.7, "a shadow pixel is darker than this x the ground's L*", minimum=0.0),
    )

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        opt = resolve(self.name, self.options, batch.options)
        if opt["camera_tilt"] >= 90:
            raise InputError(f"scorer option vistar-li.camera_tilt must be below 90, got {opt['camera_tilt']:g}")
        extras = batch.extras or [{}] * len(batch)
        rows = []
        for i in progress.bar(range(len(batch)), desc="vistar-li", unit="img"):
            qid = batch.query_ids[i]
            expected, source = expected_direction(extras[i], batch.prompts[i])
            if expected is None:  # nothing to compare with: the image is not even segmented
                rows += [(qid, m, float("nan"), source) for m in self.metrics]
                continue
            seg = segment_lab(np.asarray(load_rgb(batch.paths[i])), object_chroma=opt["object_chroma"],
                              shadow_ratio=opt["shadow_ratio"])
            est = light_direction(seg.objects, seg.shadow, opt["camera_tilt"])
            if est.vector is None:
                note = f"{est.reason} (expected from {source})"
                rows += [(qid, "score", float("nan"), note), (qid, "angle_deg", float("nan"), note),
                         (qid, "pairs", 0.0, note)]
                continue
            score, angle = li_score(np.array(est.vector), expected)
            note = json.dumps({"estimate": [round(x, 4) for x in est.vector],
                               "expected": [round(float(x), 4) for x in expected], "expected_from": source,
                               "objects": est.objects, "pairs": len(est.pairs)})
            rows += [(qid, "score", score, note), (qid, "angle_deg", angle, note),
                     (qid, "pairs", float(len(est.pairs)), note)]
        return pd.DataFrame(rows, columns=["query_id", "metric", "value", "note"])


register_scorer(VistarLI())
