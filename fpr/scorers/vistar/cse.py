"""``vistar-cse``: compositional scene evaluation (VISTAR's CSE) for multi-panel images.

The query image is a grid of panels given by its ``panels`` column (``ROWSxCOLS``, e.g.
``2x2``; equal cells, row-major) and the scene is described by ``sub_prompts``
(``;``-separated, one per intended panel content, in any order).

- ``cov`` (CSE-Cov): the mean over sub-prompts of the best CLIP cosine between the
  sub-prompt's text embedding and a panel's image embedding -- is every part of the
  scene shown somewhere?
- ``con`` (CSE-Con): the mean pairwise cosine between the DINOv2 embeddings of the
  subject, cropped by a grounding model in the K <= N panels where it is found -- is it
  the same subject in every panel? ``k`` is K (panels without the subject are left out,
  as VISTAR does; a low K is itself a failure to show the subject);
- ``score`` (CSE): ``sqrt(max(cov, 0) * max(con, 0))``;
- ``con_whole`` and ``score_whole`` (fpr's variant): the same over every whole panel
  (K = N), computable without a detector.

Both encoders go through fpr's encoder registry (``vistar-cse.clip_encoder``, default
``clip-vit-b-32``, needs a text tower; ``vistar-cse.dino_encoder``, default
``dinov2-vitb14``), so their weights resolve offline like any encoder's. The grounding is
the model judges' Grounding tool (OWLv2, :class:`fpr.scorers.judges.tools.Detector`): each
panel's best box for the subject text (``vistar-cse.subject``, default: the query's group)
scoring at least ``vistar-cse.box_threshold``. Without its weights (or with
``vistar-cse.grounding=off``) ``con``, ``k`` and ``score`` are NaN with the reason; the
``_whole`` variants still have values. Every ``note`` says which panels were used.
A query without ``panels`` gets NaN for every metric, one without ``sub_prompts`` NaN for
``cov`` and both scores, a one-panel image NaN for all but ``cov``, each with its reason;
fewer than two panels with the subject make ``con`` and ``score`` NaN (``k`` still counts).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fpr.cache import load_once
from fpr.encoders.embed import embed_pil
from fpr.encoders.registry import Encoder, load_encoder
from fpr.errors import InputError
from fpr.images import load_rgb, shape_reason
from fpr.scorers import QueryBatch, Scorer, register_scorer
from fpr.scorers.options import Option, resolve

DEFAULT_CLIP = "clip-vit-b-32"
DEFAULT_DINO = "dinov2-vitb14"
PANELS = re.compile(r"^\s*(\d+)\s*[xX\u00d7]\s*(\d+)\s*$")


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
    return load_once("vistar-cse encoders", (encoder_id, device), lambda: load_encoder(encoder_id, device=device))


def coverage(panel_vecs: np.ndarray, text_vecs: np.ndarray) -> float:
    """Mean over sub-prompts (rows of ``text_vecs``) of the best cosine to a panel."""
    return float((text_vecs.astype(np.float64) @ panel_vecs.astype(np.float64).T).max(axis=1).mean())


def consistency(vecs: np.ndarray) -> float:
    """Mean cosine over unordered pairs of panels."""
    v = vecs.astype(np.float64)
    i, j = np.triu_indices(len(v), k=1)
    return float(((v[i] * v[j]).sum(axis=1)).mean())


@dataclass(frozen=True)
class Grounded:
    """The subject's crops in the panels where the detector found it (K of N)."""

    crops: list
    found: list[int]  # panel indices, row-major
    panels: int


def ground_subject(detector, panels: list, subject: str, threshold: float) -> Grounded:
    """Each panel cut to the detector's best box for ``subject``; panels without a box are left out."""
    from fpr.scorers.judges.tools import box_pixels

    crops, found = [], []
    for k, p in enumerate(panels):
        boxes = detector.detect(p, subject, threshold=threshold, top=1)
        if boxes:
            crops.append(p.crop(box_pixels(boxes[0]["box"], p.width, p.height)))
            found.append(k)
    return Grounded(crops, found, len(panels))


def _nan_rows(qid: str, metrics, note: str) -> list[tuple]:
    return [(qid, m, float("nan"), note) for m in metrics]


def _geometric_mean(cov: float, con: float) -> float:
    return math.sqrt(max(cov, 0.0) * max(con, 0.0))


class VistarCSE(Scorer):
    name = "vistar-cse"
    description = "compositional scenes: sub-prompt coverage (CLIP) x subject consistency across panels (DINOv2)"
    needs = frozenset({"image"})
    metrics = ("score", "cov", "con", "k", "score_whole", "con_whole")
    primary_metric = "score"
    options = (
        Option("clip_encoder", str, DEFAULT_CLIP, "encoder with a text tower for coverage"),
        Option("dino_encoder", str, DEFAULT_DINO, "encoder for consistency"),
        Option("grounding", str, "auto", "auto (OWLv2 when its weights are found), off, or a weights folder"),
        Option("subject", str, None, "text the grounding looks for (default: the query's group)"),
        Option("box_threshold", float, 0.1, "lowest detector score a subject box needs", minimum=0.0),
    )

    @staticmethod
    def _detector(choice: str, device: str):
        """(detector or None, why there is none)."""
        if choice == "off":
            return None, "grounding off (vistar-cse.grounding=off)"
        from fpr.errors import NotFoundError
        from fpr.scorers.judges.tools import Detector

        try:
            return Detector(None if choice == "auto" else choice, device=device if device != "auto" else "cpu"), ""
        except NotFoundError as exc:
            if choice != "auto":
                raise
            return None, f"grounding weights not found ({exc.where})"

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        opt = resolve(self.name, self.options, batch.options)
        extras = batch.extras or [{}] * len(batch)
        clip_id, dino_id = opt["clip_encoder"], opt["dino_encoder"]
        rows = []
        detector, why = self._detector(opt["grounding"], batch.device)
        for i in range(len(batch)):
            qid = batch.query_ids[i]
            grid = parse_panels(extras[i].get("panels"))
            if grid is None:
                rows += _nan_rows(qid, self.metrics, "no panels column value (e.g. 2x2)")
                continue
            subs = sub_prompt_list(extras[i].get("sub_prompts"))
            panels = split_panels(load_rgb(batch.paths[i]), *grid)
            # a 1x1 image's panels are 0 px, a strip's too thin to embed
            unreadable = next(filter(None, (shape_reason(p.size) for p in panels)), None)
            if unreadable:
                rows += _nan_rows(qid, self.metrics, f"{unreadable} (a panel of {grid[0]}x{grid[1]})")
                continue
            subject = opt["subject"] or str(batch.groups[i])
            head = f"panels {grid[0]}x{grid[1]}; consistency by {dino_id}, coverage by {clip_id}"
            if subs:
                clip = _encoder(clip_id, batch.device)
                cov, cov_note = coverage(embed_pil(clip, panels), clip.embed_text(subs)), head
            else:
                cov, cov_note = float("nan"), "no sub_prompts (';'-separated) to cover"
            if len(panels) < 2:
                rows += [(qid, "cov", cov, cov_note)]
                rows += _nan_rows(qid, ("score", "con", "k", "score_whole", "con_whole"),
                                  "one panel: consistency needs at least two")
                continue
            dino = _encoder(dino_id, batch.device)
            # fpr's variant: every whole panel (K = N), no detector needed
            con_whole = consistency(embed_pil(dino, panels))
            whole_note = f"{head}; whole panels, all {len(panels)}"
            # VISTAR's: the subject's crops in the K <= N panels where it is found
            if detector is None:
                con, k, con_note = float("nan"), float("nan"), f"no subject grounding: {why}"
            else:
                g = ground_subject(detector, panels, subject, opt["box_threshold"])
                k = float(len(g.found))
                con_note = (f"{head}; '{subject}' found in {len(g.found)} of {g.panels} panels "
                            f"{[n + 1 for n in g.found]} (OWLv2 {detector.checksum[:19]})")
                if len(g.crops) >= 2:
                    con = consistency(embed_pil(dino, g.crops))
                else:
                    con, con_note = float("nan"), (f"subject in fewer than two panels: {con_note}: consistency "
                                                   "needs the subject in at least two")
            for name, c, note in (("score", con, con_note), ("score_whole", con_whole, whole_note)):
                if math.isnan(cov) or math.isnan(c):
                    rows.append((qid, name, float("nan"), cov_note if math.isnan(cov) else note))
                else:
                    rows.append((qid, name, _geometric_mean(cov, c), note))
            rows += [(qid, "cov", cov, cov_note), (qid, "con", con, con_note), (qid, "k", k, con_note),
                     (qid, "con_whole", con_whole, whole_note)]
        return pd.DataFrame(rows, columns=["query_id", "metric", "value", "note"])


register_scorer(VistarCSE())
