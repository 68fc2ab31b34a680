"""``vistar-gc``: geometric consistency (VISTAR's GC) from image-space cues, each in [0, 1] (1 = no defect).

Weight-free cues (scikit-image), on the image resized to ``WORK_SIDE`` px on its longer side:

- ``contour``: contour integrity -- the share of Canny edge pixels that lie on long
  connected contours (8-connected components of at least ``max(20, 5% of the shorter
  side)`` pixels); broken, fragmented outlines score low. No edges: missing.
- ``lbp``: texture regularity -- uniform LBP codes (P=8, R=1) histogrammed per tile of a
  4x4 grid; 1 - the mean Jensen-Shannon distance (base 2, in [0, 1]) between a tile's
  histogram and the whole image's.
- ``highlight``: highlight continuity -- highlights are pixels with brightness (HSV V)
  >= 0.92 and saturation <= 0.25; the share of highlight pixels in components of at least
  ``max(9, 0.05% of the image)`` pixels; speckled, broken highlights score low. No
  highlights: 1 (nothing is broken).

Depth cues, from a monocular depth model of ``transformers`` (``vistar-gc.depth_model``,
default ``depth-anything/Depth-Anything-V2-Small-hf``) loaded from the local Hugging Face
cache only (offline; ``none`` turns them off); when it is not there both are missing,
with that reason, not an error:

- ``depth_normals``: the mean cosine between neighbouring surface normals of the depth
  map (normalised to [0, 1], on a 128-px grid), clipped at 0;
- ``depth_curvature``: ``1 / (1 + 100 * mean |Laplacian|)`` of that depth map (interior pixels).

``padim``: PaDiM anomaly of the query against the real images of its identity (its
reference images): patch features of a 4x4 grid of crops (any registered encoder,
``vistar-gc.padim_encoder``, default ``dinov2-vitb14``; a seeded subset of at most 32
dimensions, as PaDiM does), a Gaussian per grid position (Ledoit-Wolf covariance), the
query's largest Mahalanobis distance ``d``; the cue is ``min(1, d95 / d)`` with ``d95``
the 95th percentile of the references' own distances (each from a model fitted without
it). No references, or the encoder's weights not here: missing, with the reason (``padim encoder
missing: ...``), and the other cues are scored. ``vistar-gc.padim=off`` turns it off.

Scores over fixed cue sets, so two images' values are comparable: ``score`` (VISTAR's GC)
is the minimum of all six cues; ``score_no_depth`` of the four without a depth model;
``score_weight_free`` of contour, lbp and highlight (no model at all). A set with a
missing cue is NaN, its ``note`` naming the missing cues and why -- never the minimum of
whatever could be computed. ``note`` of each score is JSON with every cue's value, the
set, and the reasons.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from fpr import progress
from fpr.cache import load_once
from fpr.images import load_rgb
from fpr.scorers import QueryBatch, Scorer, register_scorer
from fpr.scorers.options import Option, resolve

WORK_SIDE = 256
CUES = ("contour", "lbp", "highlight", "depth_normals", "depth_curvature", "padim")
# Each score is the minimum over a fixed set of cues (VISTAR's GC: all six), NaN when one of them is missing.
CUE_SETS = {"score": CUES,
            "score_no_depth": ("contour", "lbp", "highlight", "padim"),
            "score_weight_free": ("contour", "lbp", "highlight")}
DEFAULT_DEPTH = "depth-anything/Depth-Anything-V2-Small-hf"
DEFAULT_PADIM = "dinov2-vitb14"
PADIM_GRID = 4
PADIM_DIMS = 32


def _work_array(img) -> np.ndarray:
    """RGB float array in [0, 1], longer side ``WORK_SIDE``."""
    from PIL import Image

    w, h = img.size
    s = WORK_SIDE / max(w, h)
    if s != 1:
        img = img.resize((max(1, round(w * s)), max(1, round(h * s))), Image.BILINEAR)
    return np.asarray(img.convert("RGB"), dtype=np.float64) / 255.0


# --------------------------------------------------------------------------- weight-free cues

def contour_integrity(rgb: np.ndarray) -> tuple[float, str | None]:
    from skimage.color import rgb2gray
    from skimage.feature import canny
    from skimage.measure import label

    edges = canny(rgb2gray(rgb), sigma=1.5)
    n = int(edges.sum())
    if n == 0:  # nothing drawn, nothing broken: a value, so every image has the cue
        return 1.0, "no edges (nothing to fragment)"
    lab = label(edges, connectivity=2)
    sizes = np.bincount(lab.ravel())[1:]
    min_len = max(32, int(0.1 * min(rgb.shape[:2])))
    return float(sizes[sizes >= min_len].sum() / n), None


def lbp_regularity(rgb: np.ndarray, tiles: int = 4) -> tuple[float, str | None]:
    from scipy.spatial.distance import jensenshannon
    from skimage.color import rgb2gray
    from skimage.feature import local_binary_pattern

    gray = (rgb2gray(rgb) * 255).astype(np.uint8)
    codes = local_binary_pattern(gray, P=8, R=1, method="uniform").astype(int)  # 0..9
    whole = np.bincount(codes.ravel(), minlength=10).astype(float)
    whole /= whole.sum()
    h, w = codes.shape
    dists = []
    for r in range(tiles):
        for c in range(tiles):
            t = codes[r * h // tiles:(r + 1) * h // tiles, c * w // tiles:(c + 1) * w // tiles]
            if t.size == 0:
                continue
            hist = np.bincount(t.ravel(), minlength=10).astype(float)
            dists.append(float(jensenshannon(hist / hist.sum(), whole, base=2)))
    return float(1.0 - np.mean(dists)), None


def highlight_continuity(rgb: np.ndarray) -> tuple[float, str | None]:
    from skimage.color import rgb2hsv
    from skimage.measure import label

    hsv = rgb2hsv(rgb)
    mask = (hsv[..., 2] >= 0.92) & (hsv[..., 1] <= 0.25)
    n = int(mask.sum())
    if n == 0:  # no highlight, no broken highlight: a value, so every image has the cue
        return 1.0, "no highlights (nothing to break)"
    sizes = np.bincount(label(mask, connectivity=2).ravel())[1:]
    min_area = max(9, int(0.0005 * mask.size))
    return float(sizes[sizes >= min_area].sum() / n), None


# --------------------------------------------------------------------------- depth cues

def _depth_grid(depth: np.ndarray, side: int = 128) -> np.ndarray:
    from PIL import Image

    d = np.asarray(Image.fromarray(depth.astype(np.float32)).resize((side, side), Image.BILINEAR), np.float64)
    lo, hi = d.min(), d.max()
    return (d - lo) / (hi - lo) if hi > lo else np.zeros_like(d)


def depth_normal_smoothness(depth: np.ndarray) -> float:
    """Mean cosine between neighbouring normals of the (normalised, 128-px) depth map, clipped at 0."""
    d = _depth_grid(depth)
    side = d.shape[0]
    gy, gx = np.gradient(d * side)  # depth in pixel units: a full-range ramp is a 45-degree slope
    n = np.stack([-gx, -gy, np.ones_like(d)], axis=-1)
    n /= np.linalg.norm(n, axis=-1, keepdims=True)
    cos = np.concatenate([(n[:, 1:] * n[:, :-1]).sum(-1).ravel(), (n[1:] * n[:-1]).sum(-1).ravel()])
    return float(max(0.0, cos.mean()))


def depth_curvature_regularity(depth: np.ndarray) -> float:
    from scipy.ndimage import laplace

    d = _depth_grid(depth)
    return float(1.0 / (1.0 + 100.0 * np.abs(laplace(d)[1:-1, 1:-1]).mean()))  # interior: no border terms


def depth_estimator(model_id: str):
    """(processor, model) from the local Hugging Face cache, or the reason it is unavailable (kept too: a
    missing model is looked for once per process)."""
    return load_once("vistar-gc depth", model_id, lambda: _load_depth(model_id))


def _load_depth(model_id: str):
    from huggingface_hub import try_to_load_from_cache

    if "/" in model_id and not Path(model_id).is_dir() and not isinstance(
            try_to_load_from_cache(model_id, "config.json"), str):
        return f"depth model missing: {model_id} is not in the local Hugging Face cache (offline)"
    try:
        from transformers import AutoImageProcessor, AutoModelForDepthEstimation
    except ImportError:
        return "depth model missing: transformers is not installed (pip install 'fpr[vistar]')"
    try:
        proc = AutoImageProcessor.from_pretrained(model_id, local_files_only=True)
        model = AutoModelForDepthEstimation.from_pretrained(model_id, local_files_only=True).eval()
    except OSError as exc:  # not in the local cache: the cue is missing, with the reason
        return (f"depth model missing: {model_id} is not in the local Hugging Face cache (offline): "
                f"{str(exc).splitlines()[0][:160]}")
    return proc, model


def predict_depth(est, img) -> np.ndarray:
    import torch

    proc, model = est
    with torch.inference_mode():
        out = model(**proc(images=img.convert("RGB"), return_tensors="pt"))
    return out.predicted_depth[0].float().cpu().numpy()


# --------------------------------------------------------------------------- PaDiM

def _grid_crops(img, grid: int = PADIM_GRID) -> list:
    w, h = img.size
    return [img.crop((c * w // grid, r * h // grid, (c + 1) * w // grid, (r + 1) * h // grid))
            for r in range(grid) for c in range(grid)]


class Padim:
    """Per grid position: mean and inverse Ledoit-Wolf covariance of patch features of real images."""

    def __init__(self, feats: np.ndarray, seed: int = 0, *, leave_one_out: bool = True):
        # feats: (images, positions, dim)
        rng = np.random.default_rng(seed)
        dim = feats.shape[2]
        self.dims = np.sort(rng.choice(dim, size=min(dim, PADIM_DIMS), replace=False))
        self.mean, self.prec = self._fit(feats[:, :, self.dims].astype(np.float64))
        # the references' own distances, each from a model fitted without it (in-sample ones are too small)
        if leave_one_out and len(feats) >= 3:
            self.ref_d = np.array([Padim(np.delete(feats, k, axis=0), seed, leave_one_out=False).distance(feats[k])
                                   for k in range(len(feats))])
        else:
            self.ref_d = np.array([self.distance(x) for x in feats])

    @staticmethod
    def _fit(f: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        from sklearn.covariance import LedoitWolf

        prec = []
        for p in range(f.shape[1]):
            x = f[:, p]
            cov = LedoitWolf().fit(x).covariance_ if len(x) >= 2 else np.zeros((f.shape[2],) * 2)
            prec.append(np.linalg.inv(cov + 0.01 * np.eye(f.shape[2])))
        return f.mean(axis=0), prec

    def distance(self, feats: np.ndarray) -> float:
        """Largest Mahalanobis distance over positions; ``feats`` is (positions, dim)."""
        f = feats[:, self.dims].astype(np.float64) - self.mean
        return float(max(math.sqrt(max(0.0, f[p] @ self.prec[p] @ f[p])) for p in range(len(f))))

    def cue(self, feats: np.ndarray) -> float:
        d95 = float(np.quantile(self.ref_d, 0.95))
        d = self.distance(feats)
        return 1.0 if d <= d95 or d == 0 else float(d95 / d)


def _padim_features(enc, img) -> np.ndarray:
    from fpr.encoders.embed import embed_pil

    return embed_pil(enc, _grid_crops(img))


# --------------------------------------------------------------------------- scorer

def cue_set_score(values: dict[str, float], missing: dict[str, str], cues: tuple[str, ...]) -> tuple[float, str]:
    """(min over ``cues``, JSON note); NaN when any of them is missing."""
    absent = {c: missing.get(c, "not computed") for c in cues if math.isnan(values[c])}
    note = {"cues": {c: (None if math.isnan(values[c]) else round(values[c], 6)) for c in cues}, "over": list(cues)}
    if absent:
        note["missing"] = absent
        return float("nan"), json.dumps(note)
    remarks = {c: missing[c] for c in cues if c in missing}
    if remarks:
        note["remarks"] = remarks
    return float(min(values[c] for c in cues)), json.dumps(note)


class VistarGC(Scorer):
    name = "vistar-gc"
    description = "geometric consistency: min over a fixed set of image-space cues (contours, LBP, highlights, depth, PaDiM)"
    needs = frozenset({"image"})
    metrics = tuple(CUE_SETS) + CUES
    primary_metric = "score"
    options = (
        Option("depth_model", str, DEFAULT_DEPTH, "transformers depth model id in the local HF cache, or none"),
        Option("padim_encoder", str, DEFAULT_PADIM, "encoder for PaDiM patch features"),
        Option("padim", str, "on", "PaDiM cue on or off", choices=("on", "off")),
    )

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        opt = resolve(self.name, self.options, batch.options)
        depth_id, padim_on = opt["depth_model"], opt["padim"]
        est = "turned off (vistar-gc.depth_model=none)" if depth_id == "none" else depth_estimator(depth_id)
        enc, no_encoder = None, ""
        if padim_on == "on" and any(batch.reference_paths):
            from fpr.encoders.registry import load_encoder
            from fpr.errors import NotFoundError

            try:
                enc = load_encoder(opt["padim_encoder"], device=batch.device)
            except NotFoundError as exc:  # its weights are not here: the cue is missing with the reason, as depth's
                no_encoder = f"padim encoder missing: {exc.one_line()}"
        models: dict[tuple, Padim] = {}
        rows = []
        for i in progress.bar(range(len(batch)), desc="vistar-gc", unit="img"):
            qid = batch.query_ids[i]
            img = load_rgb(batch.paths[i])
            rgb = _work_array(img)
            values: dict[str, float] = {}
            missing: dict[str, str] = {}  # why a cue is missing, or a remark on its value
            for cue, fn in (("contour", contour_integrity), ("lbp", lbp_regularity),
                            ("highlight", highlight_continuity)):
                v, why = fn(rgb)
                values[cue] = v
                if why:
                    missing[cue] = why
            if isinstance(est, str):
                for cue in ("depth_normals", "depth_curvature"):
                    values[cue], missing[cue] = float("nan"), est
            else:
                depth = predict_depth(est, img)
                values["depth_normals"] = depth_normal_smoothness(depth)
                values["depth_curvature"] = depth_curvature_regularity(depth)
            refs = tuple(batch.reference_paths[i])
            if padim_on == "off":
                values["padim"], missing["padim"] = float("nan"), "turned off (vistar-gc.padim=off)"
            elif not refs:
                values["padim"], missing["padim"] = float("nan"), "no reference images to fit PaDiM on"
            elif enc is None:
                values["padim"], missing["padim"] = float("nan"), no_encoder
            else:
                if refs not in models:
                    models[refs] = Padim(np.stack([_padim_features(enc, load_rgb(p)) for p in refs]))
                values["padim"] = models[refs].cue(_padim_features(enc, img))
            rows += [(qid, name, *cue_set_score(values, missing, cues)) for name, cues in CUE_SETS.items()]
            rows += [(qid, cue, values[cue], missing.get(cue)) for cue in CUES]
        return pd.DataFrame(rows, columns=["query_id", "metric", "value", "note"])


register_scorer(VistarGC())
