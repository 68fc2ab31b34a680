"""The one evaluation pipeline: queries -> relevance and scope -> scores -> metrics -> Sim -> scorers.

``fpr query``, ``fpr score``, ``fpr filter``, ``fpr ablate``, the demo and the
trainer's validation all go through the functions here, so a per-query value
means the same thing wherever it appears:

- :func:`normalize_queries` is the one reader and normaliser of a queries table
  (file or DataFrame): label columns as text, paths resolved against the file's
  folder, query ids filled and checked, reference lists parsed;
- :class:`GalleryLabels` holds the labels of an index's gallery rows and reference
  vectors; :meth:`GalleryLabels.relevance` gives the scope and relevance masks and
  :func:`missing_identities` the "no relevant gallery image" check;
- :func:`evaluate` embeds the queries, computes AP, ranks, CMC, mINP (the metric
  engine in :mod:`fpr.eval.metrics`), Sim, the top-k rankings and auxiliary scores,
  with the skip policy, and returns rows shaped as the store declares them;
- :func:`leave_one_out_map` is the oracle mAP the trainer validates with.

The per-query columns come from the ``query_results`` declaration in
:mod:`fpr.store.schema`; nothing here lists them again.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from fpr.errors import InputError
from fpr.eval.metrics import retrieval_metrics, top_k
from fpr.eval.scorers import QueryBatch, run_scorers
from fpr.galleries.records import GalleryItem
from fpr.index import exact, faiss_index
from fpr.store import records as db
from fpr.store.schema import TABLES, per_query_metrics
from fpr.store.workspace import Workspace
from fpr.tables import read_table, resolve_path

QUERY_COLUMNS = ("path", "identity", "group", "method")
TEXT_COLUMNS = (*QUERY_COLUMNS, "query_id", "prompt", "reference_paths", "sim_reference")
SCOPES = ("group", "all")
SKIP_NO_RELEVANT = "skipped:no-relevant"
SKIP_UNREADABLE = "skipped:unreadable"
# Sim references, in order of precedence (stored per query in ``sim_source``).
SIM_SOURCES = {
    "sim_reference": "the query's own sim_reference image (the released code's non-DreamBooth Sim)",
    "reference_paths": "mean cosine to the query's reference_paths (the images it was conditioned on)",
    "identity": "mean cosine to every reference image of the query's identity in the gallery",
}
# Columns a queries table may carry that are not "extra" (kept and exported as they came).
_BASE = {"query_id", "row_number", "path", "method", "identity", "group", "prompt", "reference_paths",
         "reference_list", "sim_reference"}
_KEY_SEP = "\x1f"


# --------------------------------------------------------------------------- queries

def normalize_queries(queries: str | Path | pd.DataFrame, *, base: Path | None = None, id_offset: int = 0,
                      required: Sequence[str] = QUERY_COLUMNS, where: str | None = None) -> pd.DataFrame:
    """Read and normalise a queries table (the one place that does it).

    Label and path columns become stripped text; other columns keep their type and
    are carried as extras. Paths resolve against ``base`` (default: the file's folder,
    or the current directory for a DataFrame). Missing query ids are ``q<row>`` with
    rows counted from ``id_offset`` (chunked readers pass their offset).
    """
    if isinstance(queries, pd.DataFrame):
        df = queries.copy()
        where = where or "queries"
        base = base or Path.cwd()
        missing = [c for c in required if c not in df.columns]
        if missing:
            raise InputError(f"queries lack required column(s) {', '.join(missing)}", where=where,
                             hint=f"required: {', '.join(required)}; found: {', '.join(map(str, df.columns))}")
    else:
        p = Path(queries)
        df = read_table(p, required=tuple(required), what="queries file")
        where = where or str(p)
        base = base or p.resolve().parent
    df.columns = [str(c).strip() for c in df.columns]
    for c in [c for c in TEXT_COLUMNS if c in df.columns]:
        if c == "reference_paths" and df[c].map(lambda v: isinstance(v, (list, tuple))).any():
            continue
        df[c] = df[c].map(_text)
    for c in ("method", "prompt", "reference_paths", "sim_reference"):
        if c not in df.columns:
            df[c] = ""
    df["path"] = [resolve_path(v, base) for v in df["path"]]
    if "query_id" not in df.columns or (df["query_id"] == "").all():
        df["query_id"] = [f"q{id_offset + i:06d}" for i in range(len(df))]
    blank = np.flatnonzero((df["query_id"] == "").to_numpy())
    if len(blank):
        raise InputError(f"query_id is empty in row {int(blank[0]) + 2}", where=where,
                         hint="give every row a query_id, or leave the whole column empty to number them")
    dup = df["query_id"][df["query_id"].duplicated()]
    if len(dup):
        raise InputError(f"query_id '{dup.iloc[0]}' appears more than once", where=where)
    df["reference_list"] = [_split_refs(v, base) for v in df["reference_paths"]]
    df["reference_paths"] = [";".join(r) for r in df["reference_list"]]
    df["sim_reference"] = [resolve_path(v, base) if v else "" for v in df["sim_reference"]]
    df["row_number"] = np.arange(id_offset, id_offset + len(df))
    return df.reset_index(drop=True)


def _text(v) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return ""
    return str(v).strip()


def _split_refs(value, base: Path) -> list[str]:
    parts = [str(v) for v in value] if isinstance(value, (list, tuple)) else str(value or "").split(";")
    return [resolve_path(v.strip(), base) for v in parts if v.strip()]


def extra_columns(qdf: pd.DataFrame) -> list[str]:
    return [c for c in qdf.columns if c not in _BASE]


# --------------------------------------------------------------------------- the gallery side

@dataclass
class GalleryItemLabel:
    item_id: int
    path: str
    identity: str
    group: str


@dataclass
class GalleryLabels:
    """Labels of an index's gallery rows (FAISS order) and of its reference vectors."""

    item_ids: np.ndarray  # (G,) gallery item id per FAISS row
    groups: np.ndarray  # (G,) object
    identities: np.ndarray  # (G,) object
    ref_vectors: np.ndarray  # (R, dim)
    ref_groups: np.ndarray
    ref_identities: np.ndarray
    ref_paths: list[str]
    paths: list[str]

    @classmethod
    def from_items(cls, item_ids: np.ndarray, ref_ids: np.ndarray, ref_vectors: np.ndarray,
                   items: Sequence) -> "GalleryLabels":
        """``items``: objects with item_id, path, identity, group (e.g. stored gallery items)."""
        by_id = {int(it.item_id): it for it in items}
        rows = [by_id[int(i)] for i in item_ids]
        refs = [by_id[int(i)] for i in ref_ids]
        return cls(np.asarray(item_ids, dtype=np.int64), np.array([r.group for r in rows], dtype=object),
                   np.array([r.identity for r in rows], dtype=object), np.asarray(ref_vectors, np.float32),
                   np.array([r.group for r in refs], dtype=object), np.array([r.identity for r in refs], dtype=object),
                   [r.path for r in refs], [r.path for r in rows])

    def keys(self) -> np.ndarray:
        return _keys(self.groups, self.identities)

    def codes(self, qdf: pd.DataFrame) -> "LabelCodes":
        """Integer codes of the gallery's and the queries' groups and (group, identity) keys.

        Labels are compared as codes: string comparison over a (Q, G) grid costs more than
        the retrieval itself, and the streamed evaluation builds its masks per block from them.
        """
        n = len(self.groups)
        group_codes = pd.factorize(pd.Series(list(self.groups) + qdf["group"].tolist(), dtype=object))[0]
        key_codes = pd.factorize(pd.Series(list(self.keys()) + list(_keys(qdf["group"], qdf["identity"])),
                                           dtype=object))[0]
        return LabelCodes(group_codes[:n], key_codes[:n], group_codes[n:], key_codes[n:])

    def has_relevant(self, qdf: pd.DataFrame) -> np.ndarray:
        """(Q,) whether each query has a relevant gallery item (same group and identity, so in
        either scope); O(Q + G), no (Q, G) mask."""
        c = self.codes(qdf)
        counts = np.bincount(c.g_key, minlength=int(max(c.g_key.max(initial=-1), c.q_key.max(initial=-1))) + 1)
        return counts[c.q_key] > 0

    def relevance(self, qdf: pd.DataFrame, scope: str) -> tuple[np.ndarray, np.ndarray]:
        """(Q, G) boolean masks: items in each query's scope, and relevant items in scope.

        Relevant = same (group, identity). The in-memory definition (tests and small inputs);
        :func:`evaluate` builds the same masks block by block from :meth:`codes`.
        """
        check_scope(scope)
        c = self.codes(qdf)
        scope_mask = np.ones((len(c.q_group), len(c.g_group)), dtype=bool) if scope == "all" \
            else c.q_group[:, None] == c.g_group[None, :]
        return scope_mask, (c.q_key[:, None] == c.g_key[None, :]) & scope_mask

    def references_by_key(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for k, p in zip(_keys(self.ref_groups, self.ref_identities), self.ref_paths):
            out.setdefault(k, []).append(p)
        return out


@dataclass
class LabelCodes:
    """Label codes of one gallery (G rows) and one set of queries (Q rows)."""

    g_group: np.ndarray
    g_key: np.ndarray
    q_group: np.ndarray
    q_key: np.ndarray


@dataclass
class OpenIndex:
    """An index's current version, its pointer row, and its gallery's items and labels."""

    index: faiss_index.GalleryIndex
    row: db.IndexRow
    items: list[GalleryItem]
    labels: GalleryLabels


def gallery_items(ws: Workspace, name: str) -> list[GalleryItem]:
    return [GalleryItem(*r) for r in db.gallery_item_rows(ws, name)]


def open_index(ws: Workspace, name: str, *, encoder: str | None = None) -> OpenIndex:
    """Load the version an index's pointer names, checked against its stored gallery."""
    row = db.get_index(ws, name)
    gallery = db.get_gallery(ws, row.gallery)
    gi = faiss_index.load(ws.absolute(row.path), encoder=encoder, gallery_fingerprint=gallery.fingerprint)
    items = gallery_items(ws, row.gallery)
    labels = GalleryLabels.from_items(gi.item_ids, gi.ref_ids, gi.ref_vectors, items)
    return OpenIndex(gi, row, items, labels)


def index_change(run: db.RunRow, current: db.IndexRow | None) -> str | None:
    """Why a run's index is no longer what it ran against (None when it still is)."""
    if current is None:
        return "no longer exists"
    if run.index_version is not None and run.index_version != current.version:
        return f"has been rebuilt since (version {run.index_version or 'of fpr 0.1'} -> {current.version})"
    if run.gallery_fingerprint and run.gallery_fingerprint != current.gallery_fingerprint:
        return "now indexes a different gallery content"
    if run.weights_checksum and run.weights_checksum != current.weights_checksum:
        return "now uses different encoder weights"
    return None


def _keys(groups, identities) -> np.ndarray:
    return np.array([f"{g}{_KEY_SEP}{i}" for g, i in zip(groups, identities)], dtype=object)


def check_scope(scope: str) -> str:
    if scope not in SCOPES:
        raise InputError(f"unknown scope '{scope}'", hint=f"valid: {', '.join(SCOPES)}")
    return scope


def missing_identities(qdf: pd.DataFrame, has_relevant: np.ndarray, *, skip: bool, where: str) -> np.ndarray:
    """Status per query: "ok", or ``skipped:no-relevant`` when skipping; raises listing them otherwise.

    ``has_relevant[q]``: the query has at least one gallery image of its identity in scope.
    """
    status = np.array(["ok"] * len(qdf), dtype=object)
    no_rel = ~np.asarray(has_relevant, dtype=bool)
    if no_rel.any():
        if not skip:
            missing = sorted({f"{g}/{i}" for g, i in zip(qdf["group"][no_rel], qdf["identity"][no_rel])})
            n = int(no_rel.sum())
            raise InputError(f"{n} quer{'y has' if n == 1 else 'ies have'} no gallery image of their identity in "
                             f"scope: {', '.join(missing[:8])}" + (" ..." if len(missing) > 8 else ""), where=where,
                             hint="fix the identity/group labels, add those identities to the gallery, or pass "
                                  "--skip-missing-identities")
        status[no_rel] = SKIP_NO_RELEVANT
    return status


# --------------------------------------------------------------------------- evaluation

@dataclass
class EvalSettings:
    scope: str = "group"
    skip_missing_identities: bool = False
    skip_unreadable: bool = False
    scorers: list[str] = field(default_factory=list)
    scorer_options: dict = field(default_factory=dict)
    top_k: int = 10
    device: str = "auto"
    batch_size: int = 64
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


EmbedFn = Callable[..., object]  # fpr.encoders.embed.embed_paths-compatible


def evaluate(qdf: pd.DataFrame, gallery: GalleryLabels, gallery_scores, embed: EmbedFn, settings: EvalSettings, *,
             where: str = "queries", encoder_id: str | None = None, workspace: Path | None = None,
             dim: int | None = None) -> Evaluation:
    """Evaluate normalised queries against one gallery.

    ``gallery_scores`` is the gallery's index (a :class:`fpr.index.faiss_index.GalleryIndex`:
    exact scores from its flat vectors, top-k from its FAISS search), a (G, dim) array of
    gallery vectors (exact scores, top-k from them) or a callable ``f(qvecs) -> (q, G)``
    similarities in gallery-row order (top-k from those scores; see :func:`score_blocks`
    for what a callable can and cannot guarantee).
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


# --------------------------------------------------------------------------- streamed scoring

BLOCK_BYTES = int(float(os.environ.get("FPR_EVAL_BLOCK_MB", "256")) * 2 ** 20)
BYTES_PER_PAIR = 24  # float32 score + bool masks + the metric engine's per-pair temporaries
# The float64 product behind the exact scores is taken a chunk of gallery columns at a time in this
# much memory, whatever the block; auto_block leaves it out of FPR_EVAL_BLOCK_MB.
SCORE_WORK_BYTES = min(exact.WORK_BYTES, BLOCK_BYTES // 4)
MAX_BLOCK = 4096
TOPK_MARGIN = 16  # extra FAISS results fetched per query to check the tie rule at the k-th place


@dataclass
class Scored:
    """Per-query metric values (for the ``ok`` rows, in their order) and the top-k rankings."""

    values: dict[str, np.ndarray]
    top_rows: np.ndarray  # (n_ok, k) gallery rows, -1 padded
    top_scores: np.ndarray  # (n_ok, k) float32
    top_relevant: np.ndarray  # (n_ok, k) bool
    ok: np.ndarray

    def rankings(self, query_ids: np.ndarray, item_ids: np.ndarray) -> pd.DataFrame:
        if not self.top_rows.shape[1] or not len(self.ok):
            return empty_rankings()
        rows_q, rows_r = np.nonzero(self.top_rows >= 0)
        cols = self.top_rows[rows_q, rows_r]
        return pd.DataFrame({"query_id": query_ids[self.ok][rows_q], "rank": rows_r + 1,
                             "item_id": np.asarray(item_ids)[cols],
                             "score": self.top_scores[rows_q, rows_r].astype(np.float64),
                             "relevant": self.top_relevant[rows_q, rows_r]})


def auto_block(n_columns: int) -> int:
    """Queries per block so one block's (block, G) arrays and the scores' float64 working set
    (:data:`SCORE_WORK_BYTES`) stay within ``FPR_EVAL_BLOCK_MB``."""
    budget = BLOCK_BYTES - SCORE_WORK_BYTES
    return int(max(1, min(MAX_BLOCK, budget // max(1, BYTES_PER_PAIR * n_columns))))


def score_blocks(qvecs: np.ndarray, ok: np.ndarray, codes: LabelCodes, scope: str, gallery_scores, k: int, *,
                 block: int | None = None) -> Scored:
    """AP, ranks, CMC, mINP and top-k for the queries ``ok``, streamed in blocks of queries.

    Peak memory grows with block x G (scope all) or block x G_group (scope group: the
    queries are taken group by group and scored against that group's gallery rows only),
    plus Q x k for the rankings; never Q x G. Scope and relevance masks are built per
    block from label codes. AP and ranks come from the metric engine over each query's
    full scoped ranking (exact, no top-k cut).

    Scores from an index or an array of gallery vectors are the exact scores of
    :func:`fpr.index.exact.exact_scores`, float32 of the exact inner product: a query's
    scores, AP, ranks and top-k do not depend on its block, its block-mates, the BLAS
    kernel or its threads. A callable ``gallery_scores`` is used as it is: its numbers are
    whatever it computes, so that guarantee holds only if the callable gives it (one built on
    ``exact_scores`` does; a plain ``q @ v.T`` does not).

    Top-k rankings follow one tie rule: score descending, then gallery (FAISS) row
    ascending. With an index they come from its FAISS ``search`` (GPU when FAISS sees
    one): scope all searches the index, scope group a flat sub-index of the group's rows.
    The search returns k + margin candidates; they are re-scored with the block's exact
    scores (the numbers AP used) and ordered by the tie rule, and a query whose candidates
    miss an item scoring at or above its k-th score (a tie wider than the margin, or a
    rounding difference between FAISS and the block product) is ranked from the block's
    scores instead, so a flat index's stored top-k is exact. An approximate index (IVF,
    HNSW) is used as is for scope all: its top-k are re-scored and ordered the same way
    but may miss items (its measured recall is on its card).
    """
    check_scope(scope)
    ok = np.asarray(ok, dtype=np.int64)
    n = len(ok)
    kk = max(0, int(k))
    names = ("ap", "first_hit_rank", "last_hit_rank", "n_relevant", "n_scope", "cmc1", "cmc5", "cmc10", "inp")
    values = {c: np.zeros(n) for c in names}
    top_rows = np.full((n, kk), -1, dtype=np.int64)
    top_scores = np.full((n, kk), -np.inf, dtype=np.float32)
    top_rel = np.zeros((n, kk), dtype=bool)
    source = _ScoreSource(gallery_scores, len(codes.g_group))
    for cols, pos in _scope_parts(codes, scope, ok):
        part = source.part(cols)
        g_key = codes.g_key if cols is None else codes.g_key[cols]
        step = block or auto_block(part.n)
        for s in range(0, len(pos), step):
            p = pos[s:s + step]
            rows = ok[p]
            qb = np.ascontiguousarray(qvecs[rows], dtype=np.float32)
            scores = part.scores(qb)
            rel = codes.q_key[rows][:, None] == g_key[None, :]
            m = retrieval_metrics(scores, rel)
            for col, v in (("ap", m.ap), ("first_hit_rank", m.first_hit_rank), ("last_hit_rank", m.last_hit_rank),
                           ("n_relevant", m.n_relevant), ("cmc1", m.cmc(1)), ("cmc5", m.cmc(5)),
                           ("cmc10", m.cmc(10)), ("inp", m.inp)):
                values[col][p] = v
            values["n_scope"][p] = part.n
            if kk:
                idx, val = part.top_k(qb, scores, kk)
                width = idx.shape[1]
                found = idx >= 0
                local = np.where(found, idx, 0)
                top_rows[p, :width] = np.where(found, local if cols is None else cols[local], -1)
                top_scores[p, :width] = val
                top_rel[p, :width] = np.take_along_axis(rel, local, axis=1) & found
            del scores, rel
    return Scored(values, top_rows, top_scores, top_rel, ok)


def _scope_parts(codes: LabelCodes, scope: str, ok: np.ndarray):
    """(gallery columns or None for all, positions in ``ok``) per scope part."""
    if scope == "all":
        yield None, np.arange(len(ok))
        return
    qg = codes.q_group[ok]
    order = np.argsort(qg, kind="stable")
    g_order = np.argsort(codes.g_group, kind="stable")  # ascending rows within each group
    g_sorted = codes.g_group[g_order]
    bounds = np.flatnonzero(np.diff(qg[order])) + 1
    for pos in np.split(order, bounds):
        g = qg[pos[0]]
        lo, hi = np.searchsorted(g_sorted, g, "left"), np.searchsorted(g_sorted, g, "right")
        cols = g_order[lo:hi]
        yield (None if len(cols) == len(codes.g_group) else cols), pos


def whole_gallery_scores(gallery_scores, n_items: int) -> Callable[[np.ndarray], np.ndarray]:
    """(Q, dim) query vectors -> (Q, G) float32 similarities against every gallery row, as scorers see them."""
    return _ScoreSource(gallery_scores, n_items).part(None).scores


class _ScoreSource:
    """Where block scores and top-k candidates come from: an index, gallery vectors or a scores callable."""

    def __init__(self, gallery_scores, n_items: int):
        self.is_index = hasattr(gallery_scores, "vectors") and hasattr(gallery_scores, "search_rows")
        self.is_array = isinstance(gallery_scores, np.ndarray)
        if self.is_array and (gallery_scores.ndim != 2 or len(gallery_scores) != n_items):
            raise ValueError(f"gallery vectors of shape {gallery_scores.shape} for {n_items} gallery rows")
        self.src = gallery_scores
        self.n_items = n_items

    def part(self, cols: np.ndarray | None) -> "_Part":
        if not (self.is_index or self.is_array):
            fn = self.src
            return _Part(len(cols) if cols is not None else self.n_items,
                         (lambda q: fn(q)) if cols is None else (lambda q: fn(q)[:, cols]), None, True)
        if self.is_array:
            v = np.ascontiguousarray(self.src if cols is None else self.src[cols], dtype=np.float32)
            return _Part(len(v), _exact_part_scores(v, exact.norms(v)), None, True)
        if cols is None:
            v = self.src.vectors()
            return _Part(len(v), _exact_part_scores(v, self.src.norms()), self.src.search_rows,
                         self.src.exact_search)
        v = np.ascontiguousarray(self.src.vectors()[cols])
        return _Part(len(v), _exact_part_scores(v, self.src.norms()[cols]), faiss_index.flat_searcher(v).search,
                     True)


def _exact_part_scores(v: np.ndarray, norms: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    return lambda q: exact.exact_scores(q, v, vector_norms=norms, work_bytes=SCORE_WORK_BYTES)


@dataclass
class _Part:
    n: int
    scores_fn: Callable[[np.ndarray], np.ndarray]
    search: Callable | None  # (q, k) -> (scores, local rows)
    exact: bool

    def scores(self, q: np.ndarray) -> np.ndarray:
        return np.asarray(self.scores_fn(q), dtype=np.float32)

    def top_k(self, q: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(local rows, scores) of the k best per query by the tie rule (see :func:`score_blocks`)."""
        k = min(k, self.n)
        if self.search is None or k == 0:
            return top_k(scores, k)
        _, cand = self.search(q, min(self.n, k + TOPK_MARGIN))
        cand = np.asarray(cand, dtype=np.int64)
        found = cand >= 0
        cs = np.where(found, np.take_along_axis(scores, np.where(found, cand, 0), axis=1), -np.inf)
        order = np.lexsort((np.where(found, cand, np.iinfo(np.int64).max), -cs.astype(np.float64)), axis=-1)
        cand = np.take_along_axis(np.where(found, cand, -1), order, axis=1)[:, :k]
        cs = np.take_along_axis(cs, order, axis=1)[:, :k]
        if self.exact:
            kth = cs[:, -1]
            short = (cand[:, -1] < 0) | (np.count_nonzero(scores >= kth[:, None], axis=1)
                                          != np.count_nonzero(cs >= kth[:, None], axis=1))
            if short.any():
                cand[short], cs[short] = top_k(scores[short], k)
        return cand, cs.astype(np.float32)


def query_frame(qdf: pd.DataFrame, status: np.ndarray, hashes: Sequence[str | None]) -> pd.DataFrame:
    """Rows of ``query_results`` (metrics empty) plus the queries' extra columns, in input order."""
    extras = extra_columns(qdf)
    df = pd.DataFrame({"query_id": qdf["query_id"].to_numpy(), "row_number": qdf["row_number"].to_numpy(),
                       "path": qdf["path"].to_numpy(), "content_hash": list(hashes),
                       "method": qdf["method"].to_numpy(), "identity": qdf["identity"].to_numpy(),
                       "group": qdf["group"].to_numpy(), "prompt": qdf["prompt"].to_numpy(),
                       "reference_paths": qdf["reference_paths"].to_numpy(), "status": np.asarray(status, object)})
    for col in per_query_metrics():
        df[col.name] = np.nan
    df["n_references"] = np.nan
    df["sim_source"] = None
    df["extra"] = [json.dumps({c: _jsonable(qdf[c].iloc[i]) for c in extras}, default=str) for i in range(len(qdf))]
    for c in extras:
        df[c] = qdf[c].to_numpy()
    return df


def _jsonable(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


def stored_columns(per_query: pd.DataFrame, run_id: str) -> pd.DataFrame:
    """The ``query_results`` rows of an evaluation (declared columns only)."""
    names = TABLES["query_results"].names
    out = per_query.rename(columns={"group": "group_name"}).assign(run_id=run_id)
    return out[names]


def expand_extras(per_query: pd.DataFrame) -> pd.DataFrame:
    """Stored rows back to the evaluation's shape: ``group`` and the extra columns as columns."""
    df = per_query.rename(columns={"group_name": "group"})
    extras = [json.loads(e) if isinstance(e, str) and e else {} for e in df.get("extra", [])]
    for key in sorted({k for e in extras for k in e}):
        if key not in df.columns:
            df[key] = [e.get(key) for e in extras]
    return df


def empty_aux() -> pd.DataFrame:
    return pd.DataFrame({"query_id": pd.Series(dtype=object), "scorer": pd.Series(dtype=object),
                         "metric": pd.Series(dtype=object), "value": pd.Series(dtype=float),
                         "note": pd.Series(dtype=object)})


def empty_rankings() -> pd.DataFrame:
    return pd.DataFrame({"query_id": pd.Series(dtype=object), "rank": pd.Series(dtype=np.int64),
                         "item_id": pd.Series(dtype=np.int64), "score": pd.Series(dtype=float),
                         "relevant": pd.Series(dtype=bool)})


def rankings_frame(query_ids: np.ndarray, scores: np.ndarray, relevant: np.ndarray, item_ids: np.ndarray,
                   k: int) -> pd.DataFrame:
    if k <= 0 or not len(query_ids):
        return empty_rankings()
    idx, val = top_k(scores, k)
    rows_q, rows_r = np.nonzero(idx >= 0)
    cols = idx[rows_q, rows_r]
    return pd.DataFrame({"query_id": query_ids[rows_q], "rank": rows_r + 1, "item_id": item_ids[cols],
                         "score": val[rows_q, rows_r].astype(np.float64), "relevant": relevant[rows_q, cols]})


# --------------------------------------------------------------------------- Sim

def pairwise_sim(qdf: pd.DataFrame, qvecs: np.ndarray, gallery: GalleryLabels, embed: EmbedFn
                 ) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
    """Sim per query: mean cosine to its Sim references (see :data:`SIM_SOURCES` for which).

    Vectorised: each distinct reference set is reduced once to its mean vector (float64;
    identity sets all at once with one scatter-add over the gallery's reference vectors),
    and Sim = q . mean(refs), one row-wise product for every query. Memory is Q x dim,
    never Q x references.
    """
    n = len(qdf)
    dim = qvecs.shape[1] if qvecs.ndim == 2 else 0
    explicit = sorted({p for refs in qdf["reference_list"] for p in refs} | {p for p in qdf["sim_reference"] if p})
    ex_pos: dict[str, int] = {p: i for i, p in enumerate(explicit)}
    ex_vecs = np.zeros((0, dim))
    if explicit:
        ex_vecs = np.asarray(embed(explicit, on_error="raise", desc="embedding references").vectors, np.float64)
    sim_ref = qdf["sim_reference"].to_numpy(dtype=object)
    ref_lists = qdf["reference_list"].tolist()
    use_ref = np.array([bool(p) for p in sim_ref], dtype=bool)
    use_list = ~use_ref & np.array([len(r) > 0 for r in ref_lists], dtype=bool)
    use_key = ~use_ref & ~use_list
    means = np.zeros((n, dim))
    nrefs = np.zeros(n, dtype=np.int64)
    # the query's own sim_reference: one vector
    rows = np.flatnonzero(use_ref)
    if len(rows):
        means[rows] = ex_vecs[[ex_pos[p] for p in sim_ref[rows]]]
        nrefs[rows] = 1
    # reference_paths: the mean of each distinct list, computed once per list
    rows = np.flatnonzero(use_list)
    if len(rows):
        codes, lists = pd.factorize(pd.Series([";".join(ref_lists[i]) for i in rows], dtype=object))
        first = np.unique(codes, return_index=True)[1]  # a query of each distinct list
        set_means = np.stack([ex_vecs[[ex_pos[p] for p in ref_lists[rows[j]]]].mean(axis=0) for j in first])
        means[rows] = set_means[codes]
        nrefs[rows] = [len(ref_lists[i]) for i in rows]
    # identity: every reference image of the query's (group, identity) in the gallery
    rows = np.flatnonzero(use_key)
    if len(rows) and len(gallery.ref_groups):
        all_keys = pd.Series(list(_keys(gallery.ref_groups, gallery.ref_identities))
                             + list(_keys(qdf["group"].to_numpy()[rows], qdf["identity"].to_numpy()[rows])),
                             dtype=object)
        codes = pd.factorize(all_keys)[0]
        r_codes, q_codes = codes[:len(gallery.ref_groups)], codes[len(gallery.ref_groups):]
        n_codes = int(codes.max()) + 1
        counts = np.bincount(r_codes, minlength=n_codes)
        sums = np.zeros((n_codes, dim))
        np.add.at(sums, r_codes, np.asarray(gallery.ref_vectors, np.float64))
        key_means = sums / np.maximum(counts, 1)[:, None]
        means[rows] = key_means[q_codes]
        nrefs[rows] = counts[q_codes]
    sims = np.einsum("ij,ij->i", np.asarray(qvecs, np.float64), means)
    sims[nrefs == 0] = np.nan
    names = np.where(use_ref, "sim_reference", np.where(use_list, "reference_paths", "identity"))
    sources = [str(src) if k else None for src, k in zip(names, nrefs)]
    return sims, nrefs, sources


# --------------------------------------------------------------------------- scorers

def query_batch(qdf: pd.DataFrame, qvecs: np.ndarray | None, gallery: GalleryLabels | None, encoder_id: str | None,
                device: str, options: dict | None, workspace: Path | None = None,
                gallery_scores: Callable[[np.ndarray], np.ndarray] | None = None) -> QueryBatch:
    """The queries as scorers see them: explicit references, else the identity's reference set."""
    refs_by_key = gallery.references_by_key() if gallery is not None else {}
    keys = _keys(qdf["group"], qdf["identity"])
    refs = [list(r) if r else refs_by_key.get(k, []) for r, k in zip(qdf["reference_list"], keys)]
    extras = extra_columns(qdf)
    return QueryBatch(qdf["query_id"].tolist(), qdf["path"].tolist(), qdf["identity"].tolist(),
                      qdf["group"].tolist(), [p or None for p in qdf["prompt"]], refs, qvecs, encoder_id, device,
                      dict(options or {}), workspace=workspace,
                      extras=[{c: qdf[c].iloc[i] for c in extras} for i in range(len(qdf))],
                      gallery_paths=list(gallery.paths) if gallery is not None else None,
                      gallery_identities=[str(x) for x in gallery.identities] if gallery is not None else None,
                      gallery_groups=[str(x) for x in gallery.groups] if gallery is not None else None,
                      gallery_scores=gallery_scores if qvecs is not None else None)


# --------------------------------------------------------------------------- oracle mAP for training

def leave_one_out_map(vectors: np.ndarray, identities: Sequence[str], groups: Sequence[str]) -> dict[str, float]:
    """Every image queries the other images of its group; mAP overall (``*``) and per group.

    The same engine, scores (:func:`fpr.index.exact.exact_scores`) and tie rule as every run:
    the image itself is out of scope.
    """
    vectors = np.asarray(vectors, dtype=np.float32)
    keys = _keys(groups, identities)
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


__all__ = ["QUERY_COLUMNS", "SCOPES", "SIM_SOURCES", "SKIP_NO_RELEVANT", "SKIP_UNREADABLE", "EvalSettings",
           "Evaluation", "GalleryLabels", "OpenIndex", "evaluate", "index_change", "open_index", "expand_extras", "leave_one_out_map", "missing_identities",
           "normalize_queries", "pairwise_sim", "query_batch", "query_frame", "rankings_frame", "stored_columns",
           "whole_gallery_scores"]
