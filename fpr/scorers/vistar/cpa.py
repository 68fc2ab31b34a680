"""``vistar-cpa``: character portrayal accuracy (VISTAR's CPA) -- the right number of people, posture, expression.

What the paper (004, sec. 3.3.4) fixes, and fpr follows: people are detected, each person's
posture is classified from body keypoints by rule-based geometry (standing, sitting, ...) and
each face's expression by a classifier; three per-dimension match scores against the prompt's
annotations are combined as ``CPA = w_c S_count + w_p S_posture + w_e S_expression`` with weights
fitted to maximise pairwise human-preference accuracy (PPA; the paper reports 81.2% for CPA).

What the paper leaves open, and fpr's choice:

- *Annotations* come from the structured prompt's control parameters ``count``, ``posture``,
  ``expression`` (columns ``expected_count``, ``expected_posture``, ``expected_expression``;
  words from ``fpr/scorers/vistar/data/cpa_lexicon.json``, e.g. "smiling" is ``happy``).
- *Match scores*: ``S_count`` = 1 if the detected count equals the expected one, else 0;
  ``S_posture`` = min(k, N) / N with k the people classified in the expected posture and N the
  expected count (when given and > 0, else the detected count; nobody detected: 0); ``S_expression``
  likewise. A dimension the prompt does not annotate is left out and the weights renormalised
  over the annotated ones (an expected count of 0 leaves posture and expression out). Nothing
  annotated: NaN with the reason.
- *Weights*: the paper prints none, so the default is equal thirds
  (``fpr/scorers/vistar/data/cpa_weights.json``, with its provenance); ``benchmarks/fit_cpa_weights.py``
  fits them on a labelled pairs file (grid over the simplex, step 0.05, maximising strict PPA;
  in place of Bayesian optimisation: exhaustive at that resolution, reproducible) and writes that
  file; ``vistar-cpa.weights=c,p,e`` overrides it per run.
- *Posture rules* on COCO keypoints (image y down, keypoints below 0.3 confidence unused):
  ``lying`` when the hip-to-shoulder axis is more than 55 degrees from upright; else ``sitting``
  when the thighs (hip to knee) are more than 50 degrees from hanging straight down or shorter
  than 0.45 torso lengths (a thigh pointing at the camera); else ``standing``. Shoulders and hips
  are the mean of the visible side(s); ``unknown`` when both shoulders, both hips, or (not lying)
  every hip-knee pair is unseen.
- *Counting*: person detections at or above ``min_confidence``, duplicates removed by
  class-agnostic non-maximum suppression at IoU ``nms_iou`` (0.7, YOLOv8's default).

Models (departures from the paper, all loaded offline from a local folder or the Hugging Face
cache; a missing one is a one-line error naming it and the command that fetches it): people by a
transformers object detector (default ``PekingU/rtdetr_r50vd``, Apache-2.0) in place of YOLOv8
(AGPL-3.0); keypoints by ViTPose (default ``usyd-community/vitpose-base-simple``, Apache-2.0) in
place of MediaPipe Pose; expressions by a transformers image classifier (default
``trpakov/vit-face-expression``, a ViT on FER-2013 -- the paper's "dedicated ViT classifier";
check its licence for your use) on a face crop placed from the nose, eye and ear keypoints in
place of DeepFace's face detector, in-process.

Metrics: ``score`` (CPA), ``count_match``, ``posture_match``, ``expression_match`` (NaN when not
annotated, with the reason), ``count`` (people detected).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

from fpr import progress
from fpr.cache import load_once
from fpr.errors import InputError
from fpr.images import load_rgb, shape_reason
from fpr.scorers import QueryBatch, Scorer, register_scorer
from fpr.scorers.encoding import check_local_model
from fpr.scorers.options import Option, resolve

DIMENSIONS = ("count", "posture", "expression")
DEFAULT_DETECTOR = "PekingU/rtdetr_r50vd"
DEFAULT_POSE = "usyd-community/vitpose-base-simple"
DEFAULT_EXPRESSION = "trpakov/vit-face-expression"
KEYPOINT_CONF = 0.3
LYING_TORSO_DEG = 55.0
SITTING_THIGH_DEG = 50.0
SHORT_THIGH = 0.45  # thigh / torso length below which a thigh is foreshortened (pointing at the camera)
# COCO keypoint indices
NOSE, L_EYE, R_EYE, L_EAR, R_EAR = 0, 1, 2, 3, 4
L_SHOULDER, R_SHOULDER, L_HIP, R_HIP, L_KNEE, R_KNEE = 5, 6, 11, 12, 13, 14


# --------------------------------------------------------------------------- vocabulary and weights

@lru_cache(maxsize=1)
def lexicon() -> dict[str, dict[str, str]]:
    """{"postures": word -> canonical, "expressions": word -> canonical} from the package's data file."""
    doc = json.loads(resources.files("fpr.scorers.vistar").joinpath("data/cpa_lexicon.json").read_text())
    return {kind: {w: canon for canon, words in doc[kind].items() for w in [canon, *words]}
            for kind in ("postures", "expressions")}


def canonical(word: str, kind: str) -> str:
    """The canonical posture or expression of ``word``; an unknown word is one line naming the choices."""
    table = lexicon()[kind]
    key = " ".join(str(word).strip().lower().replace("_", " ").split())
    if key not in table:
        raise InputError(f"unknown {kind[:-1]} '{word}'", hint=f"{kind}: " + ", ".join(sorted(set(table.values()))))
    return table[key]


@dataclass(frozen=True)
class Weights:
    count: float
    posture: float
    expression: float

    def of(self, dim: str) -> float:
        return getattr(self, dim)


def packaged_weights() -> tuple[Weights, dict]:
    doc = json.loads(resources.files("fpr.scorers.vistar").joinpath("data/cpa_weights.json").read_text())
    return Weights(**{d: float(doc["weights"][d]) for d in DIMENSIONS}), doc["provenance"]


def parse_weights(text: str) -> Weights:
    parts = [p for p in str(text).replace(";", ",").split(",") if p.strip()]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) != 3 or min(values) < 0 or sum(values) <= 0:
        raise InputError(f"scorer option vistar-cpa.weights must be three numbers >= 0 (count,posture,expression) "
                         f"with a positive sum, got '{text}'", hint="e.g. --scorer-option vistar-cpa.weights=0.2,0.3,0.5")
    return Weights(*values)


# --------------------------------------------------------------------------- core (pure)

@dataclass(frozen=True)
class Person:
    box: tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels
    score: float
    keypoints: np.ndarray | None = None  # (17, 3): x, y, confidence (COCO order)
    expression: dict[str, float] | None = None  # canonical expression -> probability


@dataclass(frozen=True)
class Expected:
    count: int | None = None
    posture: str | None = None  # canonical
    expression: str | None = None  # canonical

    def annotated(self) -> tuple[str, ...]:
        people = self.count is None or self.count > 0
        return tuple(d for d, v in (("count", self.count), ("posture", self.posture if people else None),
                                    ("expression", self.expression if people else None)) if v is not None)


@dataclass(frozen=True)
class CpaResult:
    score: float
    matches: dict[str, float]  # annotated dimension -> S
    count: int
    postures: tuple[str, ...] = field(default_factory=tuple)
    expressions: tuple[str, ...] = field(default_factory=tuple)


def iou(a: tuple, b: tuple) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def count_people(people: list[Person], min_confidence: float, nms_iou: float) -> list[Person]:
    """Detections at or above ``min_confidence``, highest first, each dropped when it overlaps a kept one at
    IoU above ``nms_iou``."""
    kept: list[Person] = []
    for p in sorted((p for p in people if p.score >= min_confidence), key=lambda p: -p.score):
        if all(iou(p.box, k.box) <= nms_iou for k in kept):
            kept.append(p)
    return kept


def _angle_deg(v: np.ndarray, ref: np.ndarray) -> float:
    c = float(v @ ref) / (float(np.linalg.norm(v)) * float(np.linalg.norm(ref)) + 1e-12)
    return math.degrees(math.acos(max(-1.0, min(1.0, c))))


def classify_posture(kp: np.ndarray | None) -> str:
    """standing / sitting / lying / unknown from COCO keypoints (x, y, confidence), image y down."""
    if kp is None:
        return "unknown"
    kp = np.asarray(kp, float)
    ok = kp[:, 2] >= KEYPOINT_CONF
    sides = [[i for i in pair if ok[i]] for pair in ((L_SHOULDER, R_SHOULDER), (L_HIP, R_HIP))]
    if not all(sides):  # one visible side of each pair is enough: a figure in profile hides the other
        return "unknown"
    shoulder, hip = (kp[idx, :2].mean(axis=0) for idx in sides)
    torso = shoulder - hip
    if np.linalg.norm(torso) == 0:
        return "unknown"
    if _angle_deg(torso, np.array([0.0, -1.0])) > LYING_TORSO_DEG:
        return "lying"
    thighs = [kp[k, :2] - kp[h, :2] for h, k in ((L_HIP, L_KNEE), (R_HIP, R_KNEE)) if ok[h] and ok[k]]
    if not thighs:
        return "unknown"
    angle = float(np.mean([_angle_deg(t, np.array([0.0, 1.0])) for t in thighs]))
    short = float(np.mean([np.linalg.norm(t) for t in thighs])) < SHORT_THIGH * float(np.linalg.norm(torso))
    return "sitting" if angle > SITTING_THIGH_DEG or short else "standing"


def classify_expression(probs: dict[str, float] | None) -> str:
    """The most probable canonical expression, or unknown."""
    if not probs:
        return "unknown"
    return max(sorted(probs), key=lambda k: probs[k])


def match_share(labels: list[str], want: str, expected_count: int | None) -> float:
    """min(k, N) / N: k people with the wanted label, N the expected count (if > 0) else the people found."""
    n = expected_count if expected_count else len(labels)
    if n == 0:
        return 0.0
    return min(sum(label == want for label in labels), n) / n


def cpa(people: list[Person], expected: Expected, weights: Weights) -> CpaResult:
    """VISTAR's CPA of one image from its (already counted) people and the prompt's annotations."""
    postures = [classify_posture(p.keypoints) for p in people]
    expressions = [classify_expression(p.expression) for p in people]
    dims = expected.annotated()
    matches: dict[str, float] = {}
    if "count" in dims:
        matches["count"] = float(len(people) == expected.count)
    if "posture" in dims:
        matches["posture"] = match_share(postures, expected.posture, expected.count)
    if "expression" in dims:
        matches["expression"] = match_share(expressions, expected.expression, expected.count)
    total = sum(weights.of(d) for d in dims)
    score = sum(weights.of(d) * s for d, s in matches.items()) / total if total > 0 else float("nan")
    return CpaResult(score, matches, len(people), tuple(postures), tuple(expressions))


def expected_from(extras: dict | None) -> Expected:
    """The prompt's annotations from the query's ``expected_count/posture/expression`` columns."""
    extras = extras or {}

    def given(key: str) -> str | None:
        v = extras.get(key)
        if v is None or (isinstance(v, float) and math.isnan(v)) or not str(v).strip():
            return None
        return str(v).strip()

    count = given("expected_count")
    if count is not None and not count.isdigit():
        raise InputError(f"expected_count must be a whole number >= 0, not '{count}'")
    posture, expression = given("expected_posture"), given("expected_expression")
    return Expected(int(count) if count is not None else None,
                    canonical(posture, "postures") if posture else None,
                    canonical(expression, "expressions") if expression else None)


# --------------------------------------------------------------------------- model path

def load_models(detector: str, pose: str, expression: str) -> tuple:
    """((det proc, det model), (pose proc, pose model), (expr proc, expr model)), offline, once per process."""
    def load() -> tuple:
        check_local_model(detector, "vistar-cpa person detector")
        check_local_model(pose, "vistar-cpa pose model")
        check_local_model(expression, "vistar-cpa expression classifier")
        from transformers import (AutoImageProcessor, AutoModelForImageClassification, AutoModelForObjectDetection,
                                  VitPoseForPoseEstimation)

        def pair(model_id, cls):
            return (AutoImageProcessor.from_pretrained(model_id, local_files_only=True),
                    cls.from_pretrained(model_id, local_files_only=True).eval())

        return (pair(detector, AutoModelForObjectDetection), pair(pose, VitPoseForPoseEstimation),
                pair(expression, AutoModelForImageClassification))

    return load_once("vistar-cpa", (detector, pose, expression), load)


def detect_people(det, img, min_confidence: float) -> list[tuple[tuple[float, float, float, float], float]]:
    """(box, score) of every detection labelled ``person`` at or above ``min_confidence``."""
    import torch

    proc, model = det
    with torch.no_grad():
        out = model(**proc(images=img, return_tensors="pt"))
    res = proc.post_process_object_detection(out, threshold=min_confidence, target_sizes=[img.size[::-1]])[0]
    names = {int(k): str(v).lower() for k, v in model.config.id2label.items()}
    return [(tuple(float(x) for x in box), float(s)) for box, s, lab in
            zip(res["boxes"].tolist(), res["scores"].tolist(), res["labels"].tolist()) if names.get(int(lab)) == "person"]


def estimate_keypoints(pose, img, boxes: list[tuple]) -> list[np.ndarray]:
    """(17, 3) keypoints (x, y, confidence) for each box."""
    import torch

    if not boxes:
        return []
    proc, model = pose
    coco = [[[b[0], b[1], b[2] - b[0], b[3] - b[1]] for b in boxes]]
    with torch.no_grad():
        out = model(**proc(images=img, boxes=coco, return_tensors="pt"))
    res = proc.post_process_pose_estimation(out, boxes=coco)[0]
    return [np.column_stack([r["keypoints"].numpy(), r["scores"].numpy()]) for r in res]


def face_box(kp: np.ndarray, box: tuple) -> tuple[int, int, int, int] | None:
    """A square around the visible nose, eye and ear keypoints (at least 12% of the person's height), or None."""
    face = kp[[NOSE, L_EYE, R_EYE, L_EAR, R_EAR]]
    face = face[face[:, 2] >= KEYPOINT_CONF]
    if len(face) == 0:
        return None
    cx, cy = face[:, :2].mean(axis=0)
    spread = float(np.ptp(face[:, :2], axis=0).max()) if len(face) > 1 else 0.0
    half = max(1.1 * spread, 0.06 * (box[3] - box[1]), 4.0)
    return int(cx - half), int(cy - half), int(math.ceil(cx + half)), int(math.ceil(cy + half))


def classify_faces(expr, img, crops: list[tuple | None]) -> list[dict[str, float] | None]:
    """Canonical expression probabilities for each face crop (None where there is no face); classifier labels
    outside the lexicon are left out."""
    import torch

    proc, model = expr
    have = [c for c in crops if c is not None]
    if not have:
        return [None] * len(crops)
    with torch.no_grad():
        probs = model(**proc(images=[img.crop(c) for c in have], return_tensors="pt")).logits.softmax(-1).numpy()
    table = lexicon()["expressions"]
    labels = [table.get(str(model.config.id2label[i]).strip().lower()) for i in range(probs.shape[1])]
    out, it = [], iter(probs)
    for c in crops:
        if c is None:
            out.append(None)
            continue
        row = next(it)
        d: dict[str, float] = {}
        for lab, p in zip(labels, row):
            if lab is not None:
                d[lab] = d.get(lab, 0.0) + float(p)
        out.append(d)
    return out


def people_in(models: tuple, img, min_confidence: float, nms_iou: float) -> list[Person]:
    det, pose, expr = models
    found = count_people([Person(b, s) for b, s in detect_people(det, img, min_confidence)], min_confidence, nms_iou)
    kps = estimate_keypoints(pose, img, [p.box for p in found])
    faces = classify_faces(expr, img, [face_box(k, p.box) for k, p in zip(kps, found)])
    return [Person(p.box, p.score, k, f) for p, k, f in zip(found, kps, faces)]


def result_rows(qid: str, r: CpaResult, expected: Expected) -> list[tuple]:
    note = json.dumps({"expected": {d: getattr(expected, d) for d in DIMENSIONS}, "count": r.count,
                       "postures": list(r.postures), "expressions": list(r.expressions),
                       "matches": r.matches})
    rows = [(qid, "score", r.score, note if r.matches else "the prompt annotates no count, posture or expression")]
    for d in DIMENSIONS:
        rows.append((qid, f"{d}_match", r.matches.get(d, float("nan")),
                     note if d in r.matches else f"the prompt annotates no {d}"
                     + (" (expected count 0)" if d != "count" and expected.count == 0 else "")))
    rows.append((qid, "count", float(r.count), note))
    return rows


class VistarCPA(Scorer):
    name = "vistar-cpa"
    description = "character portrayal: weighted person-count, posture and expression match with the prompt"
    needs = frozenset({"image"})
    metrics = ("score", "count_match", "posture_match", "expression_match", "count")
    primary_metric = "score"
    options = (
        Option("detector", str, DEFAULT_DETECTOR, "transformers object detector with a 'person' label: HF id in "
                                                  "the local cache or a folder"),
        Option("pose_model", str, DEFAULT_POSE, "ViTPose model: HF id in the local cache or a folder"),
        Option("expression_model", str, DEFAULT_EXPRESSION, "transformers facial-expression classifier: HF id in "
                                                            "the local cache or a folder"),
        Option("min_confidence", float, 0.5, "person detections below this confidence are not counted", minimum=0.0),
        Option("nms_iou", float, 0.7, "a detection overlapping a more confident one above this IoU is a duplicate",
               minimum=0.0),
        Option("weights", str, "", "count,posture,expression weights (empty: fpr/scorers/vistar/data/cpa_weights.json)"),
    )

    def weights(self, opt: dict) -> tuple[Weights, dict]:
        if opt["weights"].strip():
            return parse_weights(opt["weights"]), {"source": "vistar-cpa.weights option"}
        return packaged_weights()

    def provenance(self, batch: QueryBatch) -> dict:
        opt = resolve(self.name, self.options, batch.options)
        w, source = self.weights(opt)
        return {"detector": opt["detector"], "pose_model": opt["pose_model"],
                "expression_model": opt["expression_model"], "weights": [w.count, w.posture, w.expression],
                "weights_source": source.get("source")}

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        opt = resolve(self.name, self.options, batch.options)
        weights, _ = self.weights(opt)
        extras = batch.extras or [{}] * len(batch)
        expected = [expected_from(e) for e in extras]
        models = load_models(opt["detector"], opt["pose_model"], opt["expression_model"]) if any(
            e.annotated() for e in expected) else None
        rows = []
        for i in progress.bar(range(len(batch)), desc="vistar-cpa", unit="img"):
            if not expected[i].annotated():  # nothing to compare with: the image is not even read
                rows += result_rows(batch.query_ids[i], CpaResult(float("nan"), {}, 0), expected[i])[:-1]
                rows.append((batch.query_ids[i], "count", float("nan"), "the prompt annotates nothing to check"))
                continue
            image = load_rgb(batch.paths[i])
            why = shape_reason(image.size)  # the detector's resize would round a side to 0 px
            if why:
                rows += [(batch.query_ids[i], m, float("nan"), why) for m in self.metrics]
                continue
            people = people_in(models, image, opt["min_confidence"], opt["nms_iou"])
            rows += result_rows(batch.query_ids[i], cpa(people, expected[i], weights), expected[i])
        return pd.DataFrame(rows, columns=["query_id", "metric", "value", "note"])


register_scorer(VistarCPA())

__all__ = ["Expected", "Person", "Weights", "classify_expression", "classify_posture", "count_people", "cpa",
           "expected_from", "match_share"]
