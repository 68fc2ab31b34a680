"""``fpr explain``: where in a query image its identity evidence lies, and where the image speaks against it.

For each query of a stored run: hide one square patch at a time, embed the occluded copies with the run's
encoder (its index's weights and protocol), and measure how the query's identity margin against the best
impostor moves (the map's definition: :mod:`fpr.metrics.evidence`); write the map blended over the query
(:mod:`fpr.render.overlay`). Its localisation of the built-in world's redrawn markings is measured by
``benchmarks/explain_localization.py`` (``benchmarks/results/explain_localization.md``).
"""
from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from fpr import progress
from fpr.defaults import EMBED_BATCH_SIZE, EXPLAIN_VARIANT
from fpr.errors import InputError
from fpr.eval import relevance
from fpr.files import atomic_write_bytes, safe_stem
from fpr.images import check_image, load_rgb
from fpr.metrics.evidence import (EVIDENCE_VARIANTS, FILLS, EvidenceMap, evidence_map, lowest_point, occlude,
                                  occlusion_boxes)
from fpr.store import records as db
from fpr.store.workspace import Workspace
from fpr.workflows.common import index_encoder, require_current_index
from fpr.workflows.runs import load_run, run_ids

# Chosen on world seeds 100 and 101 by the highest pointing-game hit rate (benchmarks/explain_localization.py
# --calibrate: benchmarks/results/explain_localization_calibration.md, patches of 1/4, 1/6, 1/8 of the side, and
# explain_localization_calibration_small.md, 1/12: hit 0.908 against 0.896 at 1/8), reported on held-out seeds
# 200-202.
PATCH = 1 / 12  # patch side, a share of the image's shorter side (8 px at 96 px)
STRIDE = 1 / 24  # step between patches, a share of the shorter side (half the patch)
FILL = "mean"
VARIANT = EXPLAIN_VARIANT  # "true": the true identity's evidence alone


@dataclass
class Explanation:
    """One query's evidence map (``values``: H x W, >0 the true identity's evidence, <0 evidence against it) and its
    overlay."""

    run_id: str
    query_id: str
    path: str
    identity: str
    group: str
    method: str
    map: EvidenceMap
    overlay: Path | None

    @property
    def values(self) -> np.ndarray:
        return self.map.values

    def summary_line(self) -> str:
        m = self.map
        h, w = m.values.shape
        imp = f"best impostor {m.impostor} (margin {m.margin:+.3f})" if m.impostor else "no impostor in scope"
        where = []
        if m.values.min() < 0:
            where.append(f"evidence against the identity peaks {_place(lowest_point(m.values), h, w)}")
        if m.values.max() > 0:
            y, x = divmod(int(np.argmax(m.values.ravel())), w)
            where.append(f"its evidence peaks {_place((y, x), h, w)}")
        return (f"{self.query_id}: {imp}; {'; '.join(where) or 'no patch moves the margin'}"
                + (f"; overlay {self.overlay}" if self.overlay else ""))

    def as_json(self) -> dict:
        m = self.map
        low = lowest_point(m.values)
        return {"run_id": self.run_id, "query_id": self.query_id, "path": self.path, "identity": self.identity,
                "group": self.group, "method": self.method, "variant": m.variant, "impostor": m.impostor,
                "margin": m.margin, "true_evidence": m.true_evidence, "impostor_evidence": m.impostor_evidence,
                "lowest_point": {"row": low[0], "col": low[1], "value": float(m.values[low])},
                "n_patches": len(m.boxes), "overlay": str(self.overlay) if self.overlay else None}


def _place(point: tuple[int, int], h: int, w: int) -> str:
    """(row, col) in words: 'at (x, y) (upper left)'."""
    y, x = point
    rows = ("upper", "middle", "lower")[min(2, 3 * y // max(h, 1))]
    cols = ("left", "centre", "right")[min(2, 3 * x // max(w, 1))]
    return f"at x={x}, y={y} ({rows} {cols})"


def _select(per_query: pd.DataFrame, run_id: str, queries: Sequence[str], methods: Sequence[str],
            all_queries: bool, where: str) -> pd.DataFrame:
    """The run's rows to explain, refused (one line) when a query or method is not in the run or not scored."""
    known = per_query.set_index("query_id", drop=False)
    if not (queries or methods or all_queries):
        raise InputError("no query to explain", hint="pass --query QUERY_ID, --method METHOD or --all")
    missing = [q for q in queries if q not in known.index]
    if missing:
        raise InputError(f"query '{missing[0]}' is not in run '{run_id}'", where=where,
                         hint=f"'fpr export --run {run_id} --out rows.csv' lists its query ids")
    bad = [m for m in methods if m not in set(per_query["method"])]
    if bad:
        raise InputError(f"method '{bad[0]}' is not in run '{run_id}'", where=where,
                         hint=f"its methods: {', '.join(sorted(set(per_query['method'])))}")
    pick = per_query["query_id"].isin(queries) | per_query["method"].isin(methods) | all_queries
    rows = per_query[pick]
    skipped = rows[rows["status"] != "ok"]
    if len(skipped) and (queries and not methods and not all_queries):
        q = skipped.iloc[0]
        raise InputError(f"query '{q['query_id']}' was not scored in run '{run_id}' ({q['status']})", where=where,
                         hint="only scored queries have identity evidence")
    return rows[rows["status"] == "ok"]


def explain_queries(run: str, queries: Sequence[str] | str = (), *, methods: Sequence[str] | str = (),
                    all_queries: bool = False, out: str | Path | None = None, workspace: str | Path | None = None,
                    device: str = "auto", variant: str = VARIANT, patch: float = PATCH, stride: float = STRIDE,
                    fill: str = FILL, legend: bool = True, write: bool = True) -> list[Explanation]:
    """Evidence maps of a run's queries (``queries`` ids, every query of ``methods``, or ``all_queries``).

    Overlays go to ``out`` (a PNG file for one query; a folder for several; default the workspace's
    ``explain/<run>/``), one ``<query id>.png`` each; ``write=False`` writes none. Everything a user can get
    wrong (run, query, method, options, unreadable image) is refused before the encoder loads.
    """
    queries = [queries] if isinstance(queries, str) else list(queries)
    methods = [methods] if isinstance(methods, str) else list(methods)
    if variant not in EVIDENCE_VARIANTS:
        raise InputError(f"unknown evidence variant '{variant}'", hint=f"valid: {', '.join(EVIDENCE_VARIANTS)}")
    if fill not in FILLS:
        raise InputError(f"unknown fill '{fill}'", hint=f"valid: {', '.join(FILLS)}")
    if not (0 < patch <= 1 and 0 < stride <= 1):
        raise InputError(f"patch and stride are shares of the image side in (0, 1], got {patch:g} and {stride:g}")
    ws = Workspace.open(workspace)
    where = str(ws.root)
    ids = run_ids(run, workspace=ws.root)
    if ids != [run]:  # a multi-encoder run's name: each encoder's evidence is its own map
        raise InputError(f"'{run}' names {len(ids)} runs, one per encoder", where=where,
                         hint=f"explain one of them: --run {' or --run '.join(ids)}")
    row = db.get_run(ws, run)
    res = load_run(run, workspace=ws.root, summary=False)
    rows = _select(res.per_query, run, queries, methods, all_queries, where)
    if rows.empty:
        raise InputError(f"no scored query to explain in run '{run}'", where=where)
    require_current_index(ws, row)
    for p in rows["path"]:  # an unreadable image is one line now, not after the encoder has loaded
        check_image(p)
    paths = _overlay_paths(ws, run, list(rows["query_id"]), out) if write else {}
    opened = relevance.open_index(ws, row.index_name)
    weights = (row.provenance or {}).get("weights_path")
    enc = index_encoder(opened, weights if weights and Path(weights).is_file() else None, device,
                         hint=f"the run's weights file ({weights}) must be where it was when the run was made"
                         if weights else "rebuild the index and rerun the query")
    scope = row.scope or "group"
    labels = opened.labels
    gallery = opened.index.vectors()
    out_list = []
    for r in progress.bar(rows.to_dict("records"), desc="explaining", unit="query"):
        image = load_rgb(r["path"])
        in_scope = np.ones(len(labels.groups), bool) if scope == "all" else labels.groups == r["group"]
        keys = _display_keys(labels.groups[in_scope], labels.identities[in_scope], scope)
        true_key = _display_keys(np.array([r["group"]]), np.array([r["identity"]]), scope)[0]
        em = identity_map(enc, image, gallery[in_scope], keys, true_key, variant=variant,
                          patch=patch, stride=stride, fill=fill)
        path = paths.get(r["query_id"])
        if path is not None:
            from fpr.render.overlay import overlay

            buf = io.BytesIO()
            overlay(image, em.values, legend=legend).save(buf, "PNG")
            atomic_write_bytes(path, buf.getvalue())
        out_list.append(Explanation(run, r["query_id"], r["path"], r["identity"], r["group"], r["method"], em, path))
    return out_list


def explain(run: str, query: str, *, out: str | Path | None = None, workspace: str | Path | None = None,
            device: str = "auto", variant: str = VARIANT, patch: float = PATCH, stride: float = STRIDE,
            fill: str = FILL, legend: bool = True, write: bool = True) -> Explanation:
    """One query's evidence map and overlay (``out``: the PNG; default ``<workspace>/explain/<run>/<query>.png``)."""
    return explain_queries(run, [query], out=out, workspace=workspace, device=device, variant=variant, patch=patch,
                           stride=stride, fill=fill, legend=legend, write=write)[0]


def _display_keys(groups: np.ndarray, identities: np.ndarray, scope: str) -> np.ndarray:
    """Identity names as shown; ``group:identity`` when the scope spans groups (names may repeat across them)."""
    if scope == "all":
        return np.array([f"{g}:{i}" for g, i in zip(groups, identities)], dtype=object)
    return np.asarray(identities, dtype=object)


def _overlay_paths(ws: Workspace, run: str, ids: list[str], out: str | Path | None) -> dict[str, Path]:
    if out is not None and len(ids) == 1 and Path(out).suffix.lower() == ".png":
        return {ids[0]: Path(out).expanduser()}
    if out is not None and Path(out).suffix.lower() == ".png":
        raise InputError(f"{len(ids)} queries to explain but --out names one PNG file", where=str(out),
                         hint="pass a folder to --out for several queries")
    folder = Path(out).expanduser() if out is not None else ws.root / "explain" / safe_stem(run)
    return {q: folder / f"{safe_stem(q)}.png" for q in ids}


def identity_map(encoder, image, gallery: np.ndarray, keys: np.ndarray, true_key: str, *, variant: str = VARIANT,
                 patch: float = PATCH, stride: float = STRIDE, fill: str = FILL,
                 batch_size: int = EMBED_BATCH_SIZE) -> EvidenceMap:
    """The occlusion map of one image (PIL RGB) under ``encoder`` against ``gallery`` rows labelled ``keys``."""
    from PIL import Image

    from fpr.encoders.embed import embed_pil

    arr = np.asarray(image.convert("RGB"))
    h, w = arr.shape[:2]
    side = min(h, w)
    boxes = occlusion_boxes(h, w, max(1, round(patch * side)), max(1, round(stride * side)))
    copies = [image.convert("RGB")] + [Image.fromarray(a) for a in occlude(arr, boxes, fill)]
    vecs = embed_pil(encoder, copies, batch_size=batch_size)
    return evidence_map(vecs[0], vecs[1:], boxes, gallery, keys, true_key, (h, w), variant=variant)
