"""The one evaluation pipeline: queries -> relevance and scope -> scores -> metrics -> Sim -> scorers.

``fpr query``, ``fpr score``, ``fpr filter``, ``fpr ablate``, the demo and the
trainer's validation all go through the functions here, so a per-query value
means the same thing wherever it appears:

- :mod:`fpr.eval.inputs` reads and normalises a queries table (file or DataFrame);
- :mod:`fpr.eval.relevance` holds the gallery labels, scope and relevance masks, the
  opened index and the "no relevant gallery image" check;
- :mod:`fpr.eval.scoring` scores queries in blocks (metrics and exact top-k);
- :mod:`fpr.eval.similarity` computes Sim; :mod:`fpr.eval.frames` shapes the rows;
- :func:`evaluate` (here) embeds the queries, computes AP, ranks, CMC, mINP (the metric
  engine in :mod:`fpr.metrics.ranking`), Sim, the top-k rankings and auxiliary scores,
  with the skip policy, and returns rows shaped as the store declares them;
- :func:`leave_one_out_map` is the oracle mAP the trainer validates with.

The per-query columns come from the ``query_results`` declaration in
:mod:`fpr.store.schema`; nothing here lists them again.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from fpr.defaults import EMBED_BATCH_SIZE
from fpr.eval.frames import empty_aux, empty_rankings, extra_rows, query_frame
from fpr.eval.inputs import extra_columns
from fpr.eval.relevance import GalleryLabels, check_scope, identity_keys, missing_identities
from fpr.eval.scoring import score_blocks, whole_gallery_scores
from fpr.eval.similarity import EmbedFn, pairwise_sim
from fpr.index import exact
from fpr.metrics.ranking import retrieval_metrics
from fpr.scorers import QueryBatch, run_scorers

SKIP_UNREADABLE = "skipped:unreadable"


@dataclass
class EvalSettings:
    scope: str = "group"
    skip_missing_identities: bool = False
    skip_unreadable: bool = False
    scorers: list[str] = field(default_factory=list)
    scorer_options: dict = field(default_factory=dict)
    top_k: int = 10
    device: str = "auto"
    batch_size: int = EMBED_BATCH_SIZE
    workers: int | None = None
    block_size: int | None = None  # queries scored at once; None: from FPR_EVAL_BLOCK_MB and the gallery size


@dataclass
class Evaluation:
    """What one evaluation computed, shaped as the store declares it."""

    status: np.ndarray  # (Q,) "ok" or a skip status
    per_query: pd.DataFrame  # query_results columns (+ extras), one row per query in input order
    aux: pd.DataFrame  # query_id, scorer, metric, value, note
    rankings: pd.DataFrame  # query_id, rank, item_id, score, relevant
    qvecs: np.ndarray  # (Q, dim); NaN rows for queries not embedded
    reasons: dict[str, str]  # query_id -> why it was skipped as unreadable

    @property
    def ok(self) -> np.ndarray:
        return np.flatnonzero(self.status == "ok")



def evaluate(qdf: pd.DataFrame, gallery: GalleryLabels, gallery_scores, embed: EmbedFn, settings: EvalSettings, *,
             where: str = "queries", encoder_id: str | None = None, workspace: Path | None = None,
             dim: int | None = None) -> Evaluation:
    """Evaluate normalised queries against one gallery.

    ``gallery_scores`` is the gallery's index (a :class:`fpr.index.faiss_index.GalleryIndex`:
    exact scores from its flat vectors, top-k from its FAISS search), a (G, dim) array of
    gallery vectors (exact scores, top-k from them) or a callable ``f(qvecs) -> (q, G)``
    similarities in gallery-row order (top-k from those scores; see
    :func:`fpr.eval.scoring.score_blocks` for what a callable can and cannot guarantee).
    ``embed(paths, on_error=..., desc=...)`` returns an ``EmbedResult``. Missing identities
    are checked before anything is embedded. Scoring is streamed (:func:`score_blocks`).
    """
    check_scope(settings.scope)
    codes = gallery.codes(qdf)
    status = missing_identities(qdf, gallery.has_relevant(qdf), skip=settings.skip_missing_identities, where=where)
    todo = np.flatnonzero(status == "ok")
    qres = embed(qdf["path"].iloc[todo].tolist(), on_error="skip" if settings.skip_unreadable else "raise",
                 desc="embedding queries")
    dim = dim or qres.vectors.shape[1]
    qvecs = np.full((len(qdf), dim), np.nan, dtype=np.float32)
    qvecs[todo] = qres.vectors
    hashes: list[str | None] = [None] * len(qdf)
    for j, i in enumerate(todo):
        hashes[i] = qres.hashes[j]
    reasons: dict[str, str] = {}
    for j, msg in qres.failed.items():
        status[todo[j]] = SKIP_UNREADABLE
        reasons[qdf["query_id"].iloc[todo[j]]] = msg
    ok = np.flatnonzero(status == "ok")

    per_query = query_frame(qdf, status, hashes)
    rankings = empty_rankings()
    if len(ok):
        scored = score_blocks(qvecs, ok, codes, settings.scope, gallery_scores, settings.top_k,
                              block=settings.block_size)
        for col, v in scored.values.items():
            per_query.loc[ok, col] = v
        sims, nrefs, sources = pairwise_sim(qdf.iloc[ok], qvecs[ok], gallery, embed)
        per_query.loc[ok, "sim"] = sims
        per_query.loc[ok, "n_references"] = nrefs
        per_query.loc[ok, "sim_source"] = sources
        rankings = scored.rankings(qdf["query_id"].to_numpy(), gallery.item_ids)
    aux = empty_aux()
    if settings.scorers and len(ok):
        batch = query_batch(qdf.iloc[ok], qvecs[ok], gallery, encoder_id, settings.device, settings.scorer_options,
                            workspace, gallery_scores=whole_gallery_scores(gallery_scores, len(gallery.item_ids)))
        aux = run_scorers(settings.scorers, batch)
    return Evaluation(status, per_query, aux, rankings, qvecs, reasons)


def query_batch(qdf: pd.DataFrame, qvecs: np.ndarray | None, gallery: GalleryLabels | None, encoder_id: str | None,
                device: str, options: dict | None, workspace: Path | None = None,
                gallery_scores: Callable[[np.ndarray], np.ndarray] | None = None) -> QueryBatch:
    """The queries as scorers see them: explicit references, else the identity's reference set."""
    refs_by_key = gallery.references_by_key() if gallery is not None else {}
    keys = identity_keys(qdf["group"], qdf["identity"])
    refs = [list(r) if r else refs_by_key.get(k, []) for r, k in zip(qdf["reference_list"], keys)]
    extras = extra_columns(qdf)
    return QueryBatch(qdf["query_id"].tolist(), qdf["path"].tolist(), qdf["identity"].tolist(),
                      qdf["group"].tolist(), [p or None for p in qdf["prompt"]], refs, qvecs, encoder_id, device,
                      dict(options or {}), workspace=workspace,
                      extras=extra_rows(qdf, extras),
                      gallery_paths=list(gallery.paths) if gallery is not None else None,
                      gallery_identities=[str(x) for x in gallery.identities] if gallery is not None else None,
                      gallery_groups=[str(x) for x in gallery.groups] if gallery is not None else None,
                      gallery_scores=gallery_scores if qvecs is not None else None,
                      explicit_references=[bool(r) for r in qdf["reference_list"]])


def leave_one_out_map(vectors: np.ndarray, identities: Sequence[str], groups: Sequence[str]) -> dict[str, float]:
    """Every image queries the other images of its group; mAP overall (``*``) and per group.

    The same engine, scores (:func:`fpr.index.exact.exact_scores`) and tie rule as every run:
    the image itself is out of scope.
    """
    vectors = np.asarray(vectors, dtype=np.float32)
    keys = identity_keys(groups, identities)
    groups = np.asarray(groups, dtype=object)
    scores = exact.exact_scores(vectors, vectors)
    scores = np.where(groups[:, None] == groups[None, :], scores, np.float32(-np.inf))
    np.fill_diagonal(scores, -np.inf)
    m = retrieval_metrics(scores, (keys[:, None] == keys[None, :]) & ~np.eye(len(keys), dtype=bool))
    aps: dict[str, list[float]] = {}
    for g, ap in zip(groups, m.ap):
        if np.isfinite(ap):
            aps.setdefault(str(g), []).append(float(ap))
    out = {g: float(np.mean(v)) for g, v in sorted(aps.items())}
    out["*"] = float(np.mean([a for v in aps.values() for a in v])) if aps else float("nan")
    return out


__all__ = ["EmbedFn", "EvalSettings", "Evaluation", "SKIP_UNREADABLE", "evaluate", "leave_one_out_map", "query_batch"]
