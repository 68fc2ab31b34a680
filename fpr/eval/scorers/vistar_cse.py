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
the subject found in each panel by a grounding model; fpr has no grounding tool here, so
``con`` uses whole panels and every ``note`` says so (``crops: whole panels``).
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
from fpr.eval.scorers import QueryBatch, Scorer, register_scorer
from fpr.images import load_rgb

DEFAULT_CLIP = "clip-vit-b-32"
DEFAULT_DINO = "dinov2-vitb14"
PANELS = re.compile(r"^\s*(\d+)\s*[xX\u00d7]\s*(\d+)\s*$")
CROPS = "whole panels (no grounding tool)"
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
    options = {"vistar-cse.clip_encoder": f"encoder with a text tower for coverage (default {DEFAULT_CLIP})",
               "vistar-cse.dino_encoder": f"encoder for consistency (default {DEFAULT_DINO})"}

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        extras = batch.extras or [{}] * len(batch)
        clip_id = str(batch.options.get("vistar-cse.clip_encoder", DEFAULT_CLIP))
        dino_id = str(batch.options.get("vistar-cse.dino_encoder", DEFAULT_DINO))
        rows = []
        for i in range(len(batch)):
            qid = batch.query_ids[i]
            grid = parse_panels(extras[i].get("panels"))
            if grid is None:
                rows += [(qid, m, float("nan"), "no panels column value (e.g. 2x2)") for m in self.metrics]
                continue
            subs = sub_prompt_list(extras[i].get("sub_prompts"))
            panels = split_panels(load_rgb(batch.paths[i]), *grid)
            note = f"panels {grid[0]}x{grid[1]}; crops: {CROPS}; consistency by {dino_id}, coverage by {clip_id}"
            if subs:
                clip = _encoder(clip_id, batch.device)
                cov = coverage(embed_pil(clip, panels), clip.embed_text(subs))
                cov_note = note
            else:
                cov, cov_note = float("nan"), "no sub_prompts (';'-separated) to cover"
            if len(panels) >= 2:
                con = consistency(embed_pil(_encoder(dino_id, batch.device), panels))
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
