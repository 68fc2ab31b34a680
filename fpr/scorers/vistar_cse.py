"""``vistar-cse``: compositional scene evaluation (VISTAR's CSE) for multi-panel images.

The query image is a grid of panels given by its ``panels`` column (``ROWSxCOLS``, e.g.
``2x2``; equal cells, row-major) and the scene is described by ``sub_prompts``
(``;``-separated, one per intended panel content, in any order).

- ``cov`` (CSE-Cov): the mean over sub-prompts of the best CLIP cosine between the
  sub-prompt's text embedding and a panel's image embedding -- is every part of the
  scene shown somewhere?
- ``con`` (CSE-Con): the mean pairwise cosine between the panels' DINOv2 embeddings of
  the subject -- is it the same subject in every panel?
- ``score`` (CSE): ``sqrt(max(cov, 0) * max(con, 0))``.

Both encoders go through fpr's encoder registry (``vistar-cse.clip_encoder``, default
``clip-vit-b-32``, needs a text tower; ``vistar-cse.dino_encoder``, default
``dinov2-vitb14``), so their weights resolve offline like any encoder's. VISTAR embeds
the subject found in each panel by a grounding model: ``con`` does the same with the
Grounding tool of the model judges (OWLv2, :class:`fpr.scorers.judges.tools.Detector`) when its
weights are found offline -- each panel is cropped to the best box for the subject text
(``vistar-cse.subject``, default: the query's group) -- and uses whole panels otherwise
(``vistar-cse.grounding=off``, weights missing, or no box in a panel). Every ``note`` says
which crops were used and why.
A query without ``panels`` gets NaN for all three metrics, one without ``sub_prompts``
NaN for ``cov`` and ``score``, a one-panel image NaN for ``con`` and ``score``, each with
its reason.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from fpr.encoders.embed import embed_pil
from fpr.encoders.registry import Encoder, load_encoder
from fpr.errors import InputError
from fpr.images import load_rgb
from fpr.scorers import QueryBatch, Scorer, register_scorer
from fpr.scorers.options import Option

DEFAULT_CLIP = "clip-vit-b-32"
DEFAULT_DINO = "dinov2-vitb14"
PANELS = re.compile(r"^\s*(\d+)\s*[xX\u00d7]\s*(\d+)\s*$")
WHOLE = "whole panels"
_ENCODERS: dict[tuple[str, str], Encoder] = {}


def parse_panels(value) -> tuple[int, int] | None:
    """``'2x2'`` -> (2, 2); empty -> None; anything else is an InputError."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or str(value).strip() == "":
        return None
    m = PANELS.match(str(value))
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise InputError(f"panels must look like ROWSxCOLS (e.g. 2x2), got '{value}'")
    return int(m.group(1)), int(m.group(2))


def split_panels(img, rows: int, cols: int) -> list:
    """Equal cells, row-major (the last row/column absorbs the remainder pixels)."""
    w, h = img.size
    xs = [round(c * w / cols) for c in range(cols + 1)]
    ys = [round(r * h / rows) for r in range(rows + 1)]
    return [img.crop((xs[c], ys[r], xs[c + 1], ys[r + 1])) for r in range(rows) for c in range(cols)]


def sub_prompt_list(value) -> list[str]:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    return [s.strip() for s in str(value).split(";") if s.strip()]


def _encoder(encoder_id: str, device: str) -> Encoder:
    key = (encoder_id, device)
    if key not in _ENCODERS:
        if len(_ENCODERS) >= 2:
            _ENCODERS.pop(next(iter(_ENCODERS)))
        _ENCODERS[key] = load_encoder(encoder_id, device=device)
    return _ENCODERS[key]


def coverage(panel_vecs: np.ndarray, text_vecs: np.ndarray) -> float:
    """Mean over sub-prompts (rows of ``text_vecs``) of the best cosine to a panel."""
    return float((text_vecs.astype(np.float64) @ panel_vecs.astype(np.float64).T).max(axis=1).mean())


def consistency(vecs: np.ndarray) -> float:
    """Mean cosine over unordered pairs of panels."""
    v = vecs.astype(np.float64)
    i, j = np.triu_indices(len(v), k=1)
    return float(((v[i] * v[j]).sum(axis=1)).mean())


class VistarCSE(Scorer):
    name = "vistar-cse"
    description = "compositional scenes: sub-prompt coverage (CLIP) x subject consistency across panels (DINOv2)"
    needs = frozenset({"image"})
    metrics = ("score", "cov", "con")
    primary_metric = "score"
    options = (Option("clip_encoder", str, DEFAULT_CLIP, "encoder with a text tower for coverage"),
               Option("dino_encoder", str, DEFAULT_DINO, "encoder for consistency"),
               Option("grounding", str, "auto", "auto (OWLv2 crops when its weights are found), off, or a folder"),
               Option("subject", str, None, "text the grounding looks for (none: the query's group)"),
               Option("box_threshold", float, 0.1, "lowest detector score a subject box needs", minimum=0.0))

    def _detector(self, batch: QueryBatch):
        """(detector or None, why whole panels are used when None)."""
        choice = self.option_values(batch.options)["grounding"]
        if choice == "off":
            return None, "grounding off"
        from fpr.errors import NotFoundError
        from fpr.scorers.judges.tools import Detector

        try:
            return Detector(None if choice == "auto" else choice, device=batch.device if batch.device != "auto"
                            else "cpu"), ""
        except NotFoundError as exc:
            if choice != "auto":
                raise
            return None, f"grounding weights not found ({exc.where})"

    @staticmethod
    def _crops(detector, panels: list, subject: str, threshold: float) -> tuple[list, int]:
        """Each panel cut to the detector's best box for ``subject`` (the whole panel when none)."""
        from fpr.scorers.judges.tools import box_pixels

        out, found = [], 0
        for p in panels:
            boxes = detector.detect(p, subject, threshold=threshold, top=1)
            if boxes:
                out.append(p.crop(box_pixels(boxes[0]["box"], p.width, p.height)))
                found += 1
            else:
                out.append(p)
        return out, found

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        extras = batch.extras or [{}] * len(batch)
        opts = self.option_values(batch.options)
        clip_id, dino_id = opts["clip_encoder"], opts["dino_encoder"]
        rows = []
        detector, why = self._detector(batch)
        for i in range(len(batch)):
            qid = batch.query_ids[i]
            grid = parse_panels(extras[i].get("panels"))
            if grid is None:
                rows += [(qid, m, float("nan"), "no panels column value (e.g. 2x2)") for m in self.metrics]
                continue
            subs = sub_prompt_list(extras[i].get("sub_prompts"))
            panels = split_panels(load_rgb(batch.paths[i]), *grid)
            subject = str(opts["subject"] or batch.groups[i])
            crops, crops_text = panels, f"{WHOLE} ({why})"
            if detector is not None and len(panels) >= 2:
                crops, found = self._crops(detector, panels, subject,
                                           opts["box_threshold"])
                crops_text = (f"grounded '{subject}' in {found} of {len(panels)} panels (OWLv2 "
                              f"{detector.checksum[:19]}; whole panel where no box)")
            note = (f"panels {grid[0]}x{grid[1]}; crops: {crops_text}; consistency by {dino_id}, "
                    f"coverage by {clip_id}")
            if subs:
                clip = _encoder(clip_id, batch.device)
                cov = coverage(embed_pil(clip, panels), clip.embed_text(subs))
                cov_note = note
            else:
                cov, cov_note = float("nan"), "no sub_prompts (';'-separated) to cover"
            if len(panels) >= 2:
                con = consistency(embed_pil(_encoder(dino_id, batch.device), crops))
                con_note = note
            else:
                con, con_note = float("nan"), "one panel: consistency needs at least two"
            if math.isnan(cov) or math.isnan(con):
                score, score_note = float("nan"), cov_note if math.isnan(cov) else con_note
            else:
                score, score_note = math.sqrt(max(cov, 0.0) * max(con, 0.0)), note
            rows += [(qid, "score", score, score_note), (qid, "cov", cov, cov_note), (qid, "con", con, con_note)]
        return pd.DataFrame(rows, columns=["query_id", "metric", "value", "note"])


register_scorer(VistarCSE())
