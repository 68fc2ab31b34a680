"""Tools a judge agent can call (CIGEval): Grounding, Highlight, Difference; Scene Graph asks the judge itself.

Boxes are ``[x0, y0, x1, y1]`` fractions of the image width and height (so they
do not depend on the size an image is sent at). Images are RGB ``uint8`` arrays.

* :func:`highlight` keeps the box and darkens everything outside it to 1/4
  (integer division of every channel by 4).
* :func:`difference` resizes the second image to the first, marks pixels whose
  largest channel difference exceeds ``threshold`` (0-255), groups them into
  8-connected regions and returns the bounding box of each region at least
  ``min_area`` (fraction of the image) large, largest first.
* :class:`Detector` is an open-vocabulary detector, OWLv2 through
  ``transformers`` (``google/owlv2-base-patch16-ensemble``), whose weights are
  resolved offline like every encoder's: an explicit folder (scorer option
  ``cigeval.detector``), ``$FPR_WEIGHTS_DIR/owlv2-base-patch16-ensemble/``, or
  the Hugging Face cache. It is never downloaded here.
"""
from __future__ import annotations

import math
import threading
from pathlib import Path

import numpy as np
from PIL import Image

from fpr.encoders.weights import WeightsSource, candidate_locations, resolve_weights
from fpr.errors import InputError, NotFoundError

DETECTOR_ID = "owlv2-base-patch16-ensemble"
DETECTOR_SOURCE = WeightsSource(kind="hf", repo="google/owlv2-base-patch16-ensemble",
                                files=("model.safetensors", "pytorch_model.bin"), folder_name=DETECTOR_ID,
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


def difference(a: np.ndarray, b: np.ndarray, *, threshold: int = 32, min_area: float = 0.001,
               max_boxes: int = 10) -> list[dict]:
    """Boxes of the regions where ``b`` (resized to ``a``) differs from ``a``: ``{"box", "area"}``, largest first."""
    from scipy import ndimage

    h, w = a.shape[:2]
    if b.shape[:2] != (h, w):
        b = np.asarray(Image.fromarray(b).resize((w, h), Image.BILINEAR))
    changed = np.abs(a.astype(np.int16) - b.astype(np.int16)).max(axis=2) > threshold
    labels, n = ndimage.label(changed, structure=np.ones((3, 3), dtype=bool))
    out = []
    for k, sl in enumerate(ndimage.find_objects(labels), start=1):
        if sl is None:
            continue
        area = int((labels[sl] == k).sum())
        if area < max(1, min_area * h * w):
            continue
        ys, xs = sl
        out.append({"box": [round(xs.start / w, 4), round(ys.start / h, 4), round(xs.stop / w, 4),
                            round(ys.stop / h, 4)], "area": round(area / (h * w), 4)})
    out.sort(key=lambda r: (-r["area"], r["box"]))
    return out[:max_boxes]


class Detector:
    """OWLv2 open-vocabulary detection; weights resolved offline, loaded on first use."""

    def __init__(self, explicit: str | Path | None = None, device: str = "cpu"):
        self.resolved = resolve_weights(DETECTOR_ID, DETECTOR_SOURCE, explicit, required=explicit is not None)
        if not self.resolved.found:
            raise NotFoundError(
                f"weights for the grounding detector '{DETECTOR_ID}' are missing",
                where="looked in " + "; ".join(candidate_locations(DETECTOR_ID, DETECTOR_SOURCE)),
                hint=f"copy the files of {DETECTOR_SOURCE.repo} (config.json, model.safetensors, processor and "
                     f"tokenizer files) into one of those folders, pass --scorer-option cigeval.detector=FOLDER, "
                     f"or leave grounding out with --scorer-option cigeval.tools=highlight,difference,scene_graph")
        self.device = device
        self.checksum = self.resolved.checksum
        self._model = None
        self._processor = None
        self._lock = threading.Lock()

    def _load(self):
        if self._model is None:
            from transformers import Owlv2ForObjectDetection, Owlv2Processor

            folder = self.resolved.folder
            try:
                self._processor = Owlv2Processor.from_pretrained(folder, local_files_only=True)
                self._model = Owlv2ForObjectDetection.from_pretrained(folder, local_files_only=True).to(
                    self.device).eval()
            except (OSError, ValueError) as exc:
                raise NotFoundError(f"cannot load the grounding detector from {folder}: "
                                    f"{str(exc).splitlines()[0][:160]}",
                                    hint="the folder needs the model's config, weights, processor and tokenizer "
                                         "files as Hugging Face saves them") from None
        return self._model, self._processor

    def detect(self, image: Image.Image, text: str, *, threshold: float = 0.1, top: int = 5) -> list[dict]:
        """Boxes of ``text`` in ``image``: ``{"box": [x0, y0, x1, y1] fractions, "score"}``, best first."""
        import torch
        from torchvision.ops import box_iou

        with self._lock:
            model, processor = self._load()
            max_len = int(getattr(model.config.text_config, "max_position_embeddings", 16))
            inputs = processor(text=[[text]], images=image, return_tensors="pt", padding="max_length",
                               truncation=True, max_length=max_len)
            with torch.no_grad():
                out = model(**{k: v.to(self.device) for k, v in inputs.items()})
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
        return [{"box": [round(float(v), 4) for v in boxes[j]], "score": round(float(scores[j]), 4)} for j in keep]
