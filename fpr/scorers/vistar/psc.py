"""``vistar-psc``: physical-spatial consistency (VISTAR's PSC) -- do two solid objects occupy the same space?

What the paper (004, sec. 3.3.5) fixes, and fpr follows:

- instances and their masks come from an instance segmenter, a per-pixel depth map from a
  monocular DPT model;
- for every pair of overlapping masks A, B the "chaos" ratio
  ``C = |d_inter(A) - d_inter(B)| / (|d_non(A) - d_non(B)| + eps)``, with ``d_inter`` the mean
  depth of an object inside the overlap and ``d_non`` outside it; ``C`` near 0 signals a
  penetration (the two surfaces meet at one depth where they overlap although the objects lie
  at different depths elsewhere);
- attachment: when the smaller object's bounding box lies largely inside the larger one's
  (a tie on a shirt), the pair is scored with a relaxed conflict function;
- each pair's conflict is weighted by the product of the two instances' segmentation
  confidences; the image's PSC is the worst pair.
- The paper reports a pairwise-prediction accuracy of 78.5% against human preferences.

What the paper leaves open, and fpr's choice (each an option, calibrated on known-answer
renders, ``benchmarks/vistar_known_answers.py --part psc``):

- *Inside the overlap.* A depth map holds one depth per pixel, so two masks' mean depths over
  their shared pixels are equal by construction and C would be 0 for every pair. fpr reads
  "object X inside the overlap" as X's own pixels within ``band`` (a fraction of the shorter
  image side, at least 2 px) of the other object's mask -- the seam on X's side; shared pixels
  count for both. "Outside" is the rest of X's mask (when X is all seam, its seam). A pair
  overlaps when both seams are non-empty (the masks touch or overlap).
- *Conflict function.* ``conflict(C) = max(0, 1 - C / chaos_threshold)``: 1 at C = 0, nothing
  from ``chaos_threshold`` on. The relaxed function for an attachment is
  ``attach_relax * conflict(C)``; "largely enclosed" is at least ``attach_enclosure`` of the
  smaller box's area inside the larger box.
- *Worst case.* The weighted conflict ``w = c_A * c_B * conflict`` is a penalty, so the score
  is the worst pair's plausibility, ``score = min over pairs of (1 - w)`` in [0, 1], 1 = no
  penetration; no overlapping pair: 1 with ``pairs`` = 0 (nothing can penetrate).
- *eps* = 1e-6 of the depth map's range (the ratio does not depend on the depth unit).

Models (departures from the paper, both loaded offline from a local folder or the Hugging Face
cache; a missing one is a one-line error naming it and the command that fetches it):
the segmenter is a transformers universal-segmentation model (default
``facebook/mask2former-swin-tiny-coco-instance``, Mask2Former, MIT-licensed code) in place of
YOLOv8-seg (AGPL-3.0, not loadable through transformers); the depth model is DPT as in the paper
(default ``Intel/dpt-large``), whose output is relative inverse depth -- C is a ratio of
differences of that map.

Metrics: ``score``; ``chaos``, ``conflict`` and ``attached`` of the worst pair (NaN with no pair);
``pairs`` (overlapping pairs) and ``instances`` (after the confidence cut).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from fpr import progress
from fpr.cache import load_once
from fpr.images import load_rgb, shape_reason
from fpr.scorers import QueryBatch, Scorer, register_scorer
from fpr.scorers.encoding import check_local_model
from fpr.scorers.options import Option, resolve

DEFAULT_SEGMENTER = "facebook/mask2former-swin-tiny-coco-instance"
DEFAULT_DEPTH = "Intel/dpt-large"
EPS_OF_RANGE = 1e-6


@dataclass(frozen=True)
class PscSettings:
    band: float = 0.02  # seam width, fraction of the shorter image side
    chaos_threshold: float = 1.0  # calibrated on seed 0 renders (benchmarks/results/vistar_known_answers.md)
    attach_enclosure: float = 0.9
    attach_relax: float = 0.25


@dataclass(frozen=True)
class Instance:
    mask: np.ndarray  # bool (H, W)
    confidence: float
    label: str = ""


@dataclass(frozen=True)
class PairResult:
    a: int
    b: int
    chaos: float
    conflict: float  # after the attachment relaxation, before confidence weighting
    weighted: float  # c_A * c_B * conflict
    attached: bool
    d_inter: tuple[float, float]
    d_non: tuple[float, float]


@dataclass(frozen=True)
class PscResult:
    score: float
    pairs: tuple[PairResult, ...]
    instances: int

    @property
    def worst(self) -> PairResult | None:
        return max(self.pairs, key=lambda p: p.weighted) if self.pairs else None


# --------------------------------------------------------------------------- geometric core (pure)

def chaos_ratio(d_inter_a: float, d_inter_b: float, d_non_a: float, d_non_b: float, eps: float) -> float:
    """VISTAR's chaos metric C for one pair (C near 0: a penetration)."""
    return abs(d_inter_a - d_inter_b) / (abs(d_non_a - d_non_b) + eps)


def conflict(chaos: float, threshold: float) -> float:
    """fpr's conflict function: 1 at C = 0, falling linearly to 0 at C = ``threshold``."""
    return max(0.0, 1.0 - chaos / threshold)


def bbox(mask: np.ndarray) -> tuple[int, int, int, int]:
    """(y0, x0, y1, x1), end-exclusive, of a non-empty mask."""
    ys, xs = np.nonzero(mask)
    return int(ys.min()), int(xs.min()), int(ys.max()) + 1, int(xs.max()) + 1


def enclosure(inner: np.ndarray, outer: np.ndarray) -> float:
    """The share of ``inner``'s bounding-box area that lies inside ``outer``'s bounding box."""
    a, b = bbox(inner), bbox(outer)
    h = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    w = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    return h * w / ((a[2] - a[0]) * (a[3] - a[1]))


def band_pixels(shape: tuple[int, int], band: float) -> float:
    return max(2.0, band * min(shape))


def pair_result(i: int, j: int, inst: list[Instance], near: list[np.ndarray], depth: np.ndarray, eps: float,
                s: PscSettings) -> PairResult | None:
    """One pair's chaos and conflict, or None when the masks neither overlap nor touch (within the band).
    ``near[k]``: pixels within the band of instance k's mask."""
    a, b = inst[i], inst[j]
    seam_a, seam_b = a.mask & near[j], b.mask & near[i]
    if not seam_a.any() or not seam_b.any():
        return None
    non_a, non_b = a.mask & ~seam_a, b.mask & ~seam_b
    di = (float(depth[seam_a].mean()), float(depth[seam_b].mean()))
    dn = (float(depth[non_a].mean()) if non_a.any() else di[0], float(depth[non_b].mean()) if non_b.any() else di[1])
    c = chaos_ratio(di[0], di[1], dn[0], dn[1], eps)
    small, large = (a, b) if a.mask.sum() <= b.mask.sum() else (b, a)
    attached = enclosure(small.mask, large.mask) >= s.attach_enclosure
    k = conflict(c, s.chaos_threshold) * (s.attach_relax if attached else 1.0)
    return PairResult(i, j, c, k, a.confidence * b.confidence * k, attached, di, dn)


def psc(instances: list[Instance], depth: np.ndarray, settings: PscSettings = PscSettings()) -> PscResult:
    """VISTAR's PSC of one image from instance masks (with confidences) and a depth map of the same size."""
    from scipy import ndimage

    depth = np.asarray(depth, dtype=np.float64)
    inst = [x for x in instances if x.mask.any()]
    for x in inst:
        if x.mask.shape != depth.shape:
            raise ValueError(f"mask shape {x.mask.shape} differs from the depth map's {depth.shape}")
    eps = EPS_OF_RANGE * max(float(np.ptp(depth)), 1e-12)
    radius = band_pixels(depth.shape, settings.band)
    near = [ndimage.distance_transform_edt(~x.mask) <= radius for x in inst]
    pairs = [p for i in range(len(inst)) for j in range(i + 1, len(inst))
             if (p := pair_result(i, j, inst, near, depth, eps, settings)) is not None]
    score = min((1.0 - p.weighted for p in pairs), default=1.0)
    return PscResult(score, tuple(pairs), len(inst))


# --------------------------------------------------------------------------- model path

def load_models(segmenter: str, depth_model: str) -> tuple:
    """(seg processor, seg model, depth processor, depth model), offline, cached per process."""
    def load() -> tuple:
        check_local_model(segmenter, "vistar-psc segmenter")
        check_local_model(depth_model, "vistar-psc depth model")
        from transformers import AutoImageProcessor, AutoModelForDepthEstimation, AutoModelForUniversalSegmentation

        return (AutoImageProcessor.from_pretrained(segmenter, local_files_only=True),
                AutoModelForUniversalSegmentation.from_pretrained(segmenter, local_files_only=True).eval(),
                AutoImageProcessor.from_pretrained(depth_model, local_files_only=True),
                AutoModelForDepthEstimation.from_pretrained(depth_model, local_files_only=True).eval())

    return load_once("vistar-psc", (segmenter, depth_model), load)


def segment_instances(proc, model, img, min_confidence: float) -> list[Instance]:
    """Instances (binary masks at the image's size, confidences, labels) above ``min_confidence``."""
    import torch

    with torch.no_grad():
        out = model(**proc(images=img, return_tensors="pt"))
    res = proc.post_process_instance_segmentation(out, threshold=min_confidence, target_sizes=[img.size[::-1]],
                                                  return_binary_maps=True)[0]
    masks = res["segmentation"].cpu().numpy().astype(bool) if len(res["segments_info"]) else []
    labels = model.config.id2label
    return [Instance(m, float(info["score"]), labels.get(info["label_id"], str(info["label_id"])))
            for m, info in zip(masks, res["segments_info"])]


def predict_depth(proc, model, img) -> np.ndarray:
    """The depth model's map at the image's size (DPT: relative inverse depth)."""
    import torch

    with torch.no_grad():
        out = model(**proc(images=img, return_tensors="pt"))
    return proc.post_process_depth_estimation(out, target_sizes=[img.size[::-1]])[0]["predicted_depth"].float().numpy()


def result_rows(qid: str, r: PscResult) -> list[tuple]:
    w = r.worst
    note = json.dumps({"instances": r.instances, "pairs": len(r.pairs),
                       "worst": None if w is None else {k: (round(v, 5) if isinstance(v, float) else v)
                                                         for k, v in asdict(w).items()}})
    nan = float("nan")
    return [(qid, "score", r.score, note),
            (qid, "chaos", nan if w is None else w.chaos, note if w else "no overlapping pair"),
            (qid, "conflict", nan if w is None else w.weighted, note if w else "no overlapping pair"),
            (qid, "attached", nan if w is None else float(w.attached), note if w else "no overlapping pair"),
            (qid, "pairs", float(len(r.pairs)), note), (qid, "instances", float(r.instances), note)]


class VistarPSC(Scorer):
    name = "vistar-psc"
    description = "physical-spatial consistency: worst confidence-weighted penetration (chaos ratio) over mask pairs"
    needs = frozenset({"image"})
    metrics = ("score", "chaos", "conflict", "attached", "pairs", "instances")
    primary_metric = "score"
    options = (
        Option("segmenter", str, DEFAULT_SEGMENTER, "transformers instance segmenter: HF id in the local cache or "
                                                    "a folder"),
        Option("depth_model", str, DEFAULT_DEPTH, "transformers depth model: HF id in the local cache or a folder"),
        Option("min_confidence", float, 0.5, "instances below this segmentation confidence are dropped", minimum=0.0),
        Option("band", float, PscSettings.band, "seam width as a fraction of the shorter image side", minimum=0.0),
        Option("chaos_threshold", float, PscSettings.chaos_threshold, "chaos ratio from which a pair has no "
                                                                      "conflict", minimum=1e-9),
        Option("attach_enclosure", float, PscSettings.attach_enclosure, "share of the smaller box inside the larger "
                                                                        "one that makes an attachment", minimum=0.0),
        Option("attach_relax", float, PscSettings.attach_relax, "factor on an attached pair's conflict", minimum=0.0),
    )

    def provenance(self, batch: QueryBatch) -> dict:
        opt = resolve(self.name, self.options, batch.options)
        return {"segmenter": opt["segmenter"], "depth_model": opt["depth_model"]}

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        opt = resolve(self.name, self.options, batch.options)
        settings = PscSettings(opt["band"], opt["chaos_threshold"], opt["attach_enclosure"], opt["attach_relax"])
        sp, sm, dp, dm = load_models(opt["segmenter"], opt["depth_model"])
        rows = []
        for i in progress.bar(range(len(batch)), desc="vistar-psc", unit="img"):
            img = load_rgb(batch.paths[i])
            why = shape_reason(img.size)  # nothing to segment, or a side the resize rounds to 0 px
            if why:
                rows += [(batch.query_ids[i], m, float("nan"), why) for m in self.metrics]
                continue
            inst = segment_instances(sp, sm, img, opt["min_confidence"])
            rows += result_rows(batch.query_ids[i], psc(inst, predict_depth(dp, dm, img), settings))
        return pd.DataFrame(rows, columns=["query_id", "metric", "value", "note"])


register_scorer(VistarPSC())

__all__ = ["Instance", "PairResult", "PscResult", "PscSettings", "chaos_ratio", "conflict", "enclosure", "psc"]
