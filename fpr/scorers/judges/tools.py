"""Tools a judge agent can call (CIGEval): Grounding, Highlight, Difference; Scene Graph asks the judge itself.

Boxes are ``[x0, y0, x1, y1]`` fractions of the image width and height (so they
do not depend on the size an image is sent at). Images are RGB ``uint8`` arrays.

* :func:`highlight` keeps the box and darkens everything outside it to 1/4
  (integer division of every channel by 4).
* :func:`difference` is CIGEval's Difference tool as released
  (``HITsz-TMG/Agentic-CIGEval``, ``tools/diff.py``, commit d588766), step by step with
  OpenCV: the second image resized to the first (bilinear), both blurred (5x5
  Gaussian, sigma from the kernel size), their absolute difference turned grey
  (0.299 R + 0.587 G + 0.114 B), thresholded (> 45), dilated (3x3), its contours
  (outer and holes) boxed, boxes of more than 0.5% of the image kept, overlapping
  boxes merged, and the largest box returned (``max_boxes`` 1). ``merge="released"``
  (default) merges as the released loop does, quirks included (see
  :func:`merge_released`); ``merge="union"`` is fpr's variant that unites overlapping
  boxes until none overlap and keeps every box.
* :func:`load_detector` gives the Grounding tool's open-vocabulary detector through
  ``transformers``: GroundingDINO (CIGEval's, ``IDEA-Research/grounding-dino-tiny``, the
  Swin-T OGC weights; default) or OWLv2 (``google/owlv2-base-patch16-ensemble``, option
  ``cigeval.detector_model=owlv2``). Weights are resolved offline like every encoder's:
  an explicit folder (scorer option ``cigeval.detector``), ``$FPR_WEIGHTS_DIR/<id>/``, or
  the Hugging Face cache. They are never downloaded here.
"""
from __future__ import annotations

import math
import threading
from pathlib import Path

import numpy as np
from PIL import Image

from fpr.encoders.weights import WeightsSource, candidate_locations, resolve_weights
from fpr.errors import InputError, NotFoundError

OWLV2_ID = "owlv2-base-patch16-ensemble"
OWLV2_SOURCE = WeightsSource(kind="hf", repo="google/owlv2-base-patch16-ensemble",
                             files=("model.safetensors", "pytorch_model.bin"), folder_name=OWLV2_ID,
                             extra_files=("config.json",))
GDINO_ID = "grounding-dino-tiny"
GDINO_SOURCE = WeightsSource(kind="hf", repo="IDEA-Research/grounding-dino-tiny",
                             files=("model.safetensors", "pytorch_model.bin"), folder_name=GDINO_ID,
                             extra_files=("config.json",))
MIN_SIDE = 1e-3  # boxes narrower or lower than this fraction of the image are dropped


def box_pixels(box, width: int, height: int) -> tuple[int, int, int, int]:
    """A fractional box -> pixel bounds (x0, y0, x1, y1), x1/y1 exclusive, outward-rounded, clipped."""
    try:
        x0, y0, x1, y1 = (float(v) for v in box)
    except (TypeError, ValueError):
        raise InputError(f"a box is four numbers [x0, y0, x1, y1], got {box!r}") from None
    if not all(math.isfinite(v) for v in (x0, y0, x1, y1)) or x1 <= x0 or y1 <= y0:
        raise InputError(f"box {box!r} is empty or not finite (need x0 < x1, y0 < y1, fractions 0-1)")
    px0 = min(max(math.floor(x0 * width), 0), width)
    py0 = min(max(math.floor(y0 * height), 0), height)
    px1 = min(max(math.ceil(x1 * width), 0), width)
    py1 = min(max(math.ceil(y1 * height), 0), height)
    if px1 <= px0 or py1 <= py0:
        raise InputError(f"box {box!r} lies outside the image")
    return px0, py0, px1, py1


def highlight(image: np.ndarray, box) -> np.ndarray:
    """``image`` with every pixel outside ``box`` darkened to 1/4 (``value // 4``)."""
    h, w = image.shape[:2]
    x0, y0, x1, y1 = box_pixels(box, w, h)
    out = image // 4
    out[y0:y1, x0:x1] = image[y0:y1, x0:x1]
    return out


Rect = tuple[int, int, int, int]  # x, y, w, h in pixels, as OpenCV's boundingRect
DIFF_THRESHOLD = 45  # grey level of the blurred difference (CIGEval)
DIFF_MIN_AREA = 0.005  # a box must exceed this share of the image (CIGEval: 0.5%)
MERGES = ("released", "union")


def _cv2():
    try:
        import cv2
    except ImportError:
        raise NotFoundError("the difference tool needs OpenCV", hint="pip install opencv-python-headless "
                                                                      "(in 'fpr[judges]')") from None
    return cv2


def _overlap(r: Rect, o: Rect) -> bool:
    x, y, w, h = r
    ox, oy, ow, oh = o
    return x < ox + ow and x + w > ox and y < oy + oh and y + h > oy


def merge_released(rects: list[Rect]) -> list[Rect]:
    """Overlapping boxes merged as CIGEval's released loop merges them, two quirks included.

    The first remaining box absorbs, in order, every later box it overlaps (growing as it
    goes); the new width and height are computed from the *already moved* left/top edge
    (``w = max(x + w, ox + ow) - x`` after ``x = min(x, ox)``); and the loop stops at the
    first box that absorbed nothing, dropping the boxes after it.
    """
    todo, out = list(rects), []
    while todo:
        x, y, w, h = todo.pop(0)
        absorbed = False
        for other in list(todo):
            ox, oy, ow, oh = other
            if _overlap((x, y, w, h), other):
                x, y = min(x, ox), min(y, oy)
                w, h = max(x + w, ox + ow) - x, max(y + h, oy + oh) - y
                todo.remove(other)
                absorbed = True
        out.append((x, y, w, h))
        if not absorbed:
            break
    return out


def merge_union(rects: list[Rect]) -> list[Rect]:
    """fpr's variant: any two overlapping boxes become their bounding box, until no two overlap."""
    boxes = list(rects)
    changed = True
    while changed:
        changed = False
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                if _overlap(boxes[i], boxes[j]):
                    (x, y, w, h), (ox, oy, ow, oh) = boxes[i], boxes.pop(j)
                    x1, y1 = max(x + w, ox + ow), max(y + h, oy + oh)
                    boxes[i] = (min(x, ox), min(y, oy), x1 - min(x, ox), y1 - min(y, oy))
                    changed = True
                    break
            if changed:
                break
    return boxes


def difference_mask(a: np.ndarray, b: np.ndarray, *, threshold: int = DIFF_THRESHOLD) -> np.ndarray:
    """CIGEval's changed-pixel mask (uint8 0/255): blur, absolute difference, grey, threshold, dilate."""
    cv2 = _cv2()
    h, w = a.shape[:2]
    if b.shape[:2] != (h, w):
        b = cv2.resize(np.ascontiguousarray(b), (w, h))  # OpenCV's default: bilinear
    blur_a = cv2.GaussianBlur(np.ascontiguousarray(a), (5, 5), 0)
    blur_b = cv2.GaussianBlur(np.ascontiguousarray(b), (5, 5), 0)
    grey = cv2.cvtColor(cv2.absdiff(blur_a, blur_b), cv2.COLOR_RGB2GRAY)  # our arrays are RGB
    _, mask = cv2.threshold(grey, threshold, 255, cv2.THRESH_BINARY)
    return cv2.dilate(mask, np.ones((3, 3), np.uint8))


def difference(a: np.ndarray, b: np.ndarray, *, threshold: int = DIFF_THRESHOLD, min_area: float = DIFF_MIN_AREA,
               max_boxes: int | None = 1, merge: str = "released") -> list[dict]:
    """Boxes where ``b`` (resized to ``a``) differs from ``a``: ``{"box": fractions, "area": box share}``,
    largest first, at most ``max_boxes`` (None: all)."""
    if merge not in MERGES:
        raise InputError(f"unknown difference merge '{merge}'", hint=f"valid: {', '.join(MERGES)}")
    cv2 = _cv2()
    mask = difference_mask(a, b, threshold=threshold)
    h, w = mask.shape
    contours, _ = cv2.findContours(mask, cv2.RETR_TREE, cv2.CHAIN_APPROX_SIMPLE)
    rects = [tuple(int(v) for v in cv2.boundingRect(c)) for c in contours]
    rects = [r for r in rects if r[2] * r[3] > min_area * h * w]  # box area, strictly above (as released)
    boxes = merge_released(rects) if merge == "released" else merge_union(rects)
    boxes.sort(key=lambda r: r[2] * r[3], reverse=True)  # stable: equal areas keep their order
    return [{"box": [round(x / w, 4), round(y / h, 4), round((x + bw) / w, 4), round((y + bh) / h, 4)],
             "area": round(bw * bh / (h * w), 4)} for x, y, bw, bh in boxes[:max_boxes]]


class _HfDetector:
    """An open-vocabulary detector from ``transformers``: weights resolved offline, loaded on first use."""

    model_id = ""
    source: WeightsSource

    def __init__(self, explicit: str | Path | None = None, device: str = "cpu"):
        self.resolved = resolve_weights(self.model_id, self.source, explicit, required=explicit is not None)
        if not self.resolved.found:
            looked = "; ".join(candidate_locations(self.model_id, self.source))
            raise NotFoundError(
                f"weights for the grounding detector '{self.model_id}' are missing", where="looked in " + looked,
                hint=f"fetch them with: huggingface-cli download {self.source.repo} --local-dir "
                     f"$FPR_WEIGHTS_DIR/{self.model_id} (or pass --scorer-option cigeval.detector=FOLDER, or leave "
                     f"grounding out with --scorer-option cigeval.tools=highlight,difference,scene_graph)")
        self.device = device
        self.checksum = self.resolved.checksum
        self._model = None
        self._processor = None
        self._lock = threading.Lock()

    classes: tuple[str, str] = ("", "")  # the transformers model and processor class names

    def _load(self):
        if self._model is None:
            import transformers

            model_cls, processor_cls = (getattr(transformers, n) for n in self.classes)
            folder = self.resolved.folder
            try:
                self._processor = processor_cls.from_pretrained(folder, local_files_only=True)
                self._model = model_cls.from_pretrained(folder, local_files_only=True).to(self.device).eval()
            except (OSError, ValueError) as exc:
                raise NotFoundError(f"cannot load the grounding detector from {folder}: "
                                    f"{str(exc).splitlines()[0][:160]}",
                                    hint="the folder needs the model's config, weights, processor and tokenizer "
                                         "files as Hugging Face saves them") from None
        return self._model, self._processor

    def _forward(self, make_inputs):
        """The model's outputs on ``make_inputs(model, processor)`` (one call at a time: the model is shared)."""
        import torch

        with self._lock:
            model, processor = self._load()
            inputs = make_inputs(model, processor)
            with torch.no_grad():
                return model(**{k: v.to(self.device) for k, v in inputs.items()})


def _box_dicts(boxes, scores, order: list[int]) -> list[dict]:
    return [{"box": [round(float(v), 4) for v in boxes[j]], "score": round(float(scores[j]), 4)} for j in order]


class Owlv2Detector(_HfDetector):
    """OWLv2 (``google/owlv2-base-patch16-ensemble``), fpr's former grounding model (option ``owlv2``)."""

    model_id = OWLV2_ID
    source = OWLV2_SOURCE
    default_threshold = 0.1

    classes = ("Owlv2ForObjectDetection", "Owlv2Processor")

    def detect(self, image: Image.Image, text: str, *, threshold: float = 0.1, top: int = 5) -> list[dict]:
        """Boxes of ``text`` in ``image``: ``{"box": [x0, y0, x1, y1] fractions, "score"}``, best first."""
        import torch
        from torchvision.ops import box_iou

        def inputs(model, processor):
            max_len = int(getattr(model.config.text_config, "max_position_embeddings", 16))
            return processor(text=[[text]], images=image, return_tensors="pt", padding="max_length",
                             truncation=True, max_length=max_len)

        out = self._forward(inputs)
        scores = torch.sigmoid(out.logits[0, :, 0].float()).cpu()
        cx, cy, bw, bh = out.pred_boxes[0].float().cpu().unbind(-1)
        side = float(max(image.size))  # OWLv2 pads to a square at the bottom/right: boxes are fractions of it
        boxes = torch.stack([(cx - bw / 2) * side / image.width, (cy - bh / 2) * side / image.height,
                             (cx + bw / 2) * side / image.width, (cy + bh / 2) * side / image.height], -1).clamp(0, 1)
        keep = []
        for j in torch.argsort(scores, descending=True).tolist():
            if scores[j] < threshold or len(keep) >= top:
                break
            if boxes[j, 2] - boxes[j, 0] < MIN_SIDE or boxes[j, 3] - boxes[j, 1] < MIN_SIDE:
                continue  # clipped to (almost) nothing
            if keep and float(box_iou(boxes[j:j + 1], boxes[keep]).max()) > 0.5:
                continue
            keep.append(j)
        return _box_dicts(boxes, scores, keep)


def caption(text: str) -> str:
    """GroundingDINO's caption convention: lower case, stripped, ending with a full stop."""
    t = text.lower().strip()
    return t if t.endswith(".") else t + "."


def drop_enclosing(boxes: list[list[float]]) -> list[int]:
    """Indices kept by CIGEval's clean-up: by area, smallest first, a box strictly enclosing a kept one is dropped."""
    order = sorted(range(len(boxes)), key=lambda j: (boxes[j][2] - boxes[j][0]) * (boxes[j][3] - boxes[j][1]))
    kept: list[int] = []
    for j in order:
        b = boxes[j]
        if not any(b[0] < boxes[k][0] and b[1] < boxes[k][1] and b[2] > boxes[k][2] and b[3] > boxes[k][3]
                   for k in kept):
            kept.append(j)
    return kept


class GroundingDinoDetector(_HfDetector):
    """GroundingDINO (Swin-T OGC, ``IDEA-Research/grounding-dino-tiny``), CIGEval's grounding model.

    As the released tool calls it: box threshold 0.2 (strictly above; its text threshold, also 0.2, only
    picks the phrase a box is labelled with, which fpr does not return); a box's score is its best
    token's sigmoid probability; boxes strictly enclosing a smaller kept box are dropped; best first.
    """

    model_id = GDINO_ID
    source = GDINO_SOURCE
    default_threshold = 0.2

    classes = ("GroundingDinoForObjectDetection", "GroundingDinoProcessor")

    def detect(self, image: Image.Image, text: str, *, threshold: float = 0.2, top: int = 5) -> list[dict]:
        """Boxes of ``text`` in ``image``: ``{"box": [x0, y0, x1, y1] fractions, "score"}``, best first."""
        import torch

        out = self._forward(lambda model, processor: processor(images=image, text=caption(text), return_tensors="pt"))
        scores = torch.sigmoid(out.logits[0].float()).max(-1).values.cpu()
        cx, cy, bw, bh = out.pred_boxes[0].float().cpu().unbind(-1)  # fractions of the (unpadded) image
        boxes = torch.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], -1).clamp(0, 1)
        hits = [j for j in range(len(scores)) if scores[j] > threshold
                and boxes[j, 2] - boxes[j, 0] >= MIN_SIDE and boxes[j, 3] - boxes[j, 1] >= MIN_SIDE]
        kept = [hits[k] for k in drop_enclosing([boxes[j].tolist() for j in hits])]
        kept.sort(key=lambda j: -float(scores[j]))
        return _box_dicts(boxes, scores, kept[:top])


DETECTORS = {"grounding-dino": GroundingDinoDetector, "owlv2": Owlv2Detector}


def load_detector(model: str, folder: str | Path | None = None, device: str = "cpu") -> _HfDetector:
    """The grounding detector ``model`` (``grounding-dino``, CIGEval's, or ``owlv2``), weights resolved offline."""
    cls = DETECTORS.get(model)
    if cls is None:
        raise InputError(f"unknown grounding detector '{model}'", hint=f"valid: {', '.join(DETECTORS)}")
    return cls(folder, device=device)


Detector = Owlv2Detector  # the name vistar-cse's grounding uses (OWLv2 there)
