"""The Python API. Every ``fpr`` command is a thin wrapper over one function here.

    import fpr.api as fpr
    fpr.import_gallery("leopards", fpr.read_folder("data/leopards"))
    fpr.build_index("leopards", "miewid-msv2")
    result = fpr.run_query("leopards-miewid-msv2", "generated.csv")
    result.summary   # rows per (method, group), plus group "*" per method

Functions take ``workspace=None`` (meaning ``$FPR_WORKSPACE`` or ``./fpr-workspace``).
"""
from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from fpr import progress
from fpr.encoders.embed import EmbedResult, embed_paths
from fpr.encoders.registry import Encoder, load_encoder
from fpr.errors import ConflictError, FprError, InputError, NotFoundError
from fpr.eval.metrics import retrieval_metrics, top_k
from fpr.eval.scorers import QueryBatch, parse_scorer_list, run_scorers
from fpr.eval.summary import paired_comparison, summarize
from fpr.galleries.curate import CurationReport, GallerySpec, curate, gallery_fingerprint
from fpr.galleries.manifest import read_folder, read_manifest
from fpr.galleries.records import GalleryItem, ImageRecord
from fpr.images import check_image
from fpr.index import faiss_index
from fpr.store import Workspace, insert_df
from fpr.tables import read_table, resolve_path, write_table

__all__ = [
    "GalleryInfo", "IndexInfo", "RunResult", "import_gallery", "curate_gallery", "read_manifest", "read_folder",
    "list_galleries", "show_gallery", "gallery_items", "build_index", "list_indices", "load_index", "run_query",
    "report", "list_runs", "export_run", "embed", "sql", "compare", "score_run", "ablate", "filter_queries",
]

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
QUERY_COLUMNS = ("path", "identity", "group", "method")
SCOPES = ("group", "all")
SKIP_NO_RELEVANT = "skipped:no-relevant"
SKIP_UNREADABLE = "skipped:unreadable"


def _check_name(name: str, what: str) -> str:
    if not NAME_RE.match(name or ""):
        raise InputError(f"invalid {what} name '{name}'",
                         hint="use letters, digits, '.', '_' or '-' (starting with a letter or digit)")
    return name


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- galleries

@dataclass
class GalleryInfo:
    name: str
    source: str
    fingerprint: str
    n_items: int
    n_reference: int
    n_gallery: int
    n_identities: int
    n_groups: int
    report: list[str] = field(default_factory=list)
    spec: dict = field(default_factory=dict)

    def as_row(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("report", "spec")}


def _hash_records(records: list[ImageRecord]) -> list[ImageRecord]:
    """Fully decode and hash every image: a bad file fails the import before anything is stored."""
    for r in progress.bar(records, desc="checking images", unit="img"):
        if not r.content_hash:
            r.content_hash = check_image(r.path)
    return records


def import_gallery(name: str, records: list[ImageRecord], spec: GallerySpec | None = None, *,
                   workspace: str | Path | None = None, encoder: str | None = None, source: str = "records",
                   overwrite: bool = False, device: str = "auto") -> GalleryInfo:
    """Validate, de-duplicate, curate and store a gallery (one transaction)."""
    _check_name(name, "gallery")
    spec = spec or GallerySpec()
    ws = Workspace.open(workspace)
    if not overwrite and _gallery_exists(ws, name):
        raise ConflictError(f"gallery '{name}' already exists", where=str(ws.root),
                            hint="choose another --name or pass --overwrite")
    if not records:
        raise InputError("no images to import")
    records = _hash_records(list(records))
    embed_fn = None
    if spec.sampling == "kmeans" and spec.gallery_per_identity:
        if not encoder:
            raise InputError("k-means sampling needs an encoder", hint="pass --encoder (e.g. fpr-world-v1)")
        enc = load_encoder(encoder, device=device)
        embed_fn = lambda paths: embed_paths(enc, paths, desc="embedding for k-means").vectors  # noqa: E731
    items, report = curate(records, spec, embed=embed_fn, where=source)
    info = _gallery_info(name, source, items, report, spec)
    _store_gallery(ws, info, items, overwrite)
    for line in report.lines():
        progress.log(line)
    return info


def curate_gallery(source_gallery: str, name: str, spec: GallerySpec, *, workspace: str | Path | None = None,
                   encoder: str | None = None, overwrite: bool = False) -> GalleryInfo:
    """Derive a new gallery from a stored one (its items keep their roles)."""
    items = gallery_items(source_gallery, workspace=workspace)
    records = [ImageRecord(it.path, it.identity, it.group, it.role, it.content_hash) for it in items]
    return import_gallery(name, records, spec, workspace=workspace, encoder=encoder,
                          source=f"gallery:{source_gallery}", overwrite=overwrite)


def _gallery_info(name: str, source: str, items: list[GalleryItem], report: CurationReport,
                  spec: GallerySpec) -> GalleryInfo:
    return GalleryInfo(
        name=name, source=source, fingerprint=gallery_fingerprint(items), n_items=len(items),
        n_reference=sum(i.role == "reference" for i in items), n_gallery=sum(i.role == "gallery" for i in items),
        n_identities=len({(i.group, i.identity) for i in items}), n_groups=len({i.group for i in items}),
        report=report.lines(), spec=json.loads(spec.to_json()))


def _gallery_exists(ws: Workspace, name: str) -> bool:
    if not ws.exists:
        return False
    with ws.read() as con:
        return con.execute("SELECT 1 FROM galleries WHERE name = ?", [name]).fetchone() is not None


def _store_gallery(ws: Workspace, info: GalleryInfo, items: list[GalleryItem], overwrite: bool) -> None:
    df = pd.DataFrame([{"gallery": info.name, "item_id": it.item_id, "path": it.path,
                        "content_hash": it.content_hash, "identity": it.identity, "group_name": it.group,
                        "role": it.role} for it in items])
    with ws.write() as con:
        exists = con.execute("SELECT 1 FROM galleries WHERE name = ?", [info.name]).fetchone()
        if exists and not overwrite:
            raise ConflictError(f"gallery '{info.name}' already exists", hint="pass --overwrite")
        con.execute("DELETE FROM galleries WHERE name = ?", [info.name])
        con.execute("DELETE FROM gallery_items WHERE gallery = ?", [info.name])
        con.execute("INSERT INTO galleries (name, source, spec, fingerprint, n_items, n_reference, n_gallery, "
                    "n_identities, n_groups, report) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [info.name, info.source, json.dumps(info.spec), info.fingerprint, info.n_items,
                     info.n_reference, info.n_gallery, info.n_identities, info.n_groups, json.dumps(info.report)])
        insert_df(con, "gallery_items", df)


def list_galleries(*, workspace: str | Path | None = None) -> list[dict]:
    ws = Workspace.open(workspace)
    if not ws.exists:
        return []
    with ws.read() as con:
        df = con.execute("SELECT name, source, n_groups, n_identities, n_reference, n_gallery, fingerprint, "
                         "CAST(created_at AS VARCHAR) AS created_at FROM galleries ORDER BY name").df()
    return df.to_dict("records")


def _require_gallery(con, name: str, ws: Workspace) -> tuple:
    row = con.execute("SELECT name, fingerprint, spec FROM galleries WHERE name = ?", [name]).fetchone()
    if row is None:
        names = [r[0] for r in con.execute("SELECT name FROM galleries ORDER BY name").fetchall()]
        raise NotFoundError(f"no gallery named '{name}'", where=str(ws.root),
                            hint=f"galleries here: {', '.join(names) or '(none)'}")
    return row


def gallery_items(name: str, *, workspace: str | Path | None = None) -> list[GalleryItem]:
    ws = Workspace.open(workspace)
    with ws.read() as con:
        _require_gallery(con, name, ws)
        rows = con.execute("SELECT item_id, path, content_hash, identity, group_name, role FROM gallery_items "
                           "WHERE gallery = ? ORDER BY item_id", [name]).fetchall()
    return [GalleryItem(*r) for r in rows]


def show_gallery(name: str, *, workspace: str | Path | None = None) -> list[dict]:
    """Identities x images per group: one row per (group, identity) with reference and gallery counts."""
    items = gallery_items(name, workspace=workspace)
    df = pd.DataFrame([it.__dict__ for it in items])
    table = df.pivot_table(index=["group", "identity"], columns="role", values="item_id", aggfunc="count",
                           fill_value=0).reset_index()
    for role in ("reference", "gallery"):
        if role not in table:
            table[role] = 0
    table = table.rename(columns={"reference": "n_reference", "gallery": "n_gallery"})
    return table[["group", "identity", "n_reference", "n_gallery"]].to_dict("records")


# --------------------------------------------------------------------------- indices

@dataclass
class IndexInfo:
    name: str
    gallery: str
    encoder: str
    dim: int
    n_items: int
    n_references: int
    path: str
    weights_checksum: str
    seconds: float = 0.0
    n_from_cache: int = 0
    n_computed: int = 0

    def as_row(self) -> dict:
        return dict(self.__dict__)


def build_index(gallery: str, encoder: str, *, name: str | None = None, workspace: str | Path | None = None,
                weights: str | None = None, device: str = "auto", batch_size: int = 64,
                workers: int | None = None, overwrite: bool = False) -> IndexInfo:
    """Embed a gallery's images (cached) and write an exact inner-product FAISS index + card."""
    start = time.perf_counter()
    name = _check_name(name or f"{gallery}-{encoder}", "index")
    ws = Workspace.open(workspace)
    with ws.read() as con:
        _, fingerprint, _ = _require_gallery(con, gallery, ws)
        if not overwrite and con.execute("SELECT 1 FROM indices WHERE name = ?", [name]).fetchone():
            raise ConflictError(f"index '{name}' already exists", hint="choose another --name or pass --overwrite")
    items = gallery_items(gallery, workspace=ws.root)
    enc = load_encoder(encoder, weights=weights, device=device)
    gal = [it for it in items if it.role == "gallery"]
    refs = [it for it in items if it.role == "reference"]
    res = embed_paths(enc, [it.path for it in gal + refs], batch_size=batch_size, workers=workers,
                      desc=f"embedding {gallery}")
    vecs = res.vectors
    card = faiss_index.IndexCard(
        name=name, gallery=gallery, gallery_fingerprint=fingerprint, encoder=enc.id,
        weights_checksum=enc.weights.checksum, preprocessing=enc.preprocessing.key(), dim=enc.spec.dim,
        n_items=len(gal), n_references=len(refs))
    gi = faiss_index.build(vecs[:len(gal)], np.array([it.item_id for it in gal]), vecs[len(gal):],
                           np.array([it.item_id for it in refs]), card)
    folder = ws.index_dir(name)
    faiss_index.save(gi, folder)
    with ws.write() as con:
        con.execute("DELETE FROM indices WHERE name = ?", [name])
        con.execute("INSERT INTO indices (name, gallery, encoder, weights_checksum, gallery_fingerprint, dim, "
                    "n_items, path, card) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [name, gallery, enc.id, enc.weights.checksum, fingerprint, enc.spec.dim, len(gal),
                     str(folder), card.to_json()])
    return IndexInfo(name, gallery, enc.id, enc.spec.dim, len(gal), len(refs), str(folder), enc.weights.checksum,
                     time.perf_counter() - start, res.n_from_cache, res.n_computed)


def list_indices(*, workspace: str | Path | None = None) -> list[dict]:
    ws = Workspace.open(workspace)
    if not ws.exists:
        return []
    with ws.read() as con:
        df = con.execute("SELECT name, gallery, encoder, dim, n_items, weights_checksum, "
                         "CAST(created_at AS VARCHAR) AS created_at FROM indices ORDER BY name").df()
    return df.to_dict("records")


def load_index(name: str, *, workspace: str | Path | None = None, encoder: str | None = None
               ) -> tuple[faiss_index.GalleryIndex, list[GalleryItem]]:
    """Load an index and its gallery items, checking it still matches the stored gallery."""
    ws = Workspace.open(workspace)
    with ws.read() as con:
        row = con.execute("SELECT gallery, path FROM indices WHERE name = ?", [name]).fetchone()
        if row is None:
            names = [r[0] for r in con.execute("SELECT name FROM indices ORDER BY name").fetchall()]
            raise NotFoundError(f"no index named '{name}'", where=str(ws.root),
                                hint=f"indices here: {', '.join(names) or '(none)'}; build one with 'fpr index build'")
        gallery, folder = row
        _, fingerprint, _ = _require_gallery(con, gallery, ws)
    gi = faiss_index.load(Path(folder), encoder=encoder, gallery_fingerprint=fingerprint)
    return gi, gallery_items(gallery, workspace=ws.root)


# --------------------------------------------------------------------------- queries and runs

@dataclass
class RunResult:
    run_id: str
    index: str
    encoder: str
    summary: list[dict]
    per_query: pd.DataFrame
    aux: pd.DataFrame
    provenance: dict
    n_skipped: int = 0
    skipped_reasons: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        return {"run": self.run_id, "index": self.index, "encoder": self.encoder, "summary": self.summary,
                "n_queries": int(len(self.per_query)), "n_skipped": self.n_skipped,
                "skipped": self.skipped_reasons, "provenance": self.provenance}


def read_queries(queries: str | Path | pd.DataFrame) -> pd.DataFrame:
    """Load a queries table; resolve paths against its folder; fill query ids; validate."""
    if isinstance(queries, pd.DataFrame):
        df, base, where = queries.copy(), Path.cwd(), "queries"
        missing = [c for c in QUERY_COLUMNS if c not in df.columns]
        if missing:
            raise InputError(f"queries lack required column(s) {', '.join(missing)}")
        # Label and path columns become text; extra columns (e.g. a numeric ground truth) keep their type.
        for c in [c for c in (*QUERY_COLUMNS, "query_id", "prompt", "reference_paths") if c in df.columns]:
            if c == "reference_paths" and df[c].map(lambda v: isinstance(v, (list, tuple))).any():
                continue
            df[c] = df[c].map(lambda v: "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v))
    else:
        p = Path(queries)
        df = read_table(p, required=QUERY_COLUMNS, what="queries file")
        base, where = p.resolve().parent, str(p)
    df["path"] = [resolve_path(v, base) for v in df["path"]]
    if "query_id" not in df.columns or (df["query_id"] == "").all():
        df["query_id"] = [f"q{i:06d}" for i in range(len(df))]
    dup = df["query_id"][df["query_id"].duplicated()]
    if len(dup):
        raise InputError(f"query_id '{dup.iloc[0]}' appears more than once", where=where)
    for col in ("prompt", "reference_paths"):
        if col not in df.columns:
            df[col] = ""
    df["reference_list"] = [_split_refs(v, base) for v in df["reference_paths"]]
    df["reference_paths"] = [";".join(r) for r in df["reference_list"]]
    df["row_number"] = np.arange(len(df))
    return df.reset_index(drop=True)


def _split_refs(value, base: Path) -> list[str]:
    if isinstance(value, (list, tuple)):
        parts = [str(v) for v in value]
    else:
        parts = [v for v in str(value or "").split(";")]
    return [resolve_path(v.strip(), base) for v in parts if v.strip()]


def _scope_masks(q_groups: np.ndarray, item_groups: np.ndarray, scope: str) -> np.ndarray:
    if scope == "all":
        return np.ones((len(q_groups), len(item_groups)), dtype=bool)
    return q_groups[:, None] == item_groups[None, :]


def _new_run_id() -> str:
    return f"run-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


def relevance_masks(gi: faiss_index.GalleryIndex, by_id: dict[int, GalleryItem], qdf: pd.DataFrame,
                    scope: str) -> tuple[np.ndarray, np.ndarray]:
    """(Q, G) boolean masks in FAISS row order: items in each query's scope, and relevant items in scope.

    Relevant = same (group, identity). Labels are compared as integer codes: string comparison over a
    (Q, G) grid costs more than the retrieval itself.
    """
    row_items = [by_id[int(i)] for i in gi.item_ids]
    item_groups = [it.group for it in row_items]
    item_keys = [f"{it.group}\x1f{it.identity}" for it in row_items]
    q_groups = qdf["group"].tolist()
    q_keys = (qdf["group"] + "\x1f" + qdf["identity"]).tolist()
    group_codes = pd.factorize(pd.Series(item_groups + q_groups, dtype=object))[0]
    key_codes = pd.factorize(pd.Series(item_keys + q_keys, dtype=object))[0]
    n = len(row_items)
    ig, qg = group_codes[:n], group_codes[n:]
    ik, qk = key_codes[:n], key_codes[n:]
    scope_mask = _scope_masks(qg, ig, scope)
    relevant = (qk[:, None] == ik[None, :]) & scope_mask
    return scope_mask, relevant


@dataclass
class QueryScores:
    """Per-query retrieval results of queries against one index (what :func:`run_query` stores)."""

    status: np.ndarray  # (Q,) "ok" or a skip status
    per_query: pd.DataFrame  # one row per query (status, AP, ranks, CMC, mINP, Sim, ...)
    qvecs: np.ndarray  # (Q, dim); NaN rows for queries not embedded
    ok: np.ndarray  # row positions evaluated
    scores: np.ndarray | None  # (len(ok), G) float64 similarities, -inf outside scope
    reasons: dict[str, str]  # query_id -> why it was skipped as unreadable


def score_queries(gi: faiss_index.GalleryIndex, by_id: dict[int, GalleryItem], enc: Encoder, qdf: pd.DataFrame,
                  scope_mask: np.ndarray, relevant: np.ndarray, status: np.ndarray, *,
                  skip_unreadable: bool = False, batch_size: int = 64, workers: int | None = None) -> QueryScores:
    """Embed the queries whose status is "ok" and compute their retrieval metrics and pairwise Sim.

    The one per-query computation shared by ``run_query`` and ``fpr filter``; ``qdf`` is a
    :func:`read_queries` frame and the masks come from :func:`relevance_masks`.
    """
    status = np.array(status, dtype=object)
    todo = np.flatnonzero(status == "ok")
    qres = embed_paths(enc, qdf["path"].iloc[todo].tolist(), batch_size=batch_size, workers=workers,
                       on_error="skip" if skip_unreadable else "raise", desc="embedding queries")
    qvecs = np.full((len(qdf), enc.spec.dim), np.nan, dtype=np.float32)
    qvecs[todo] = qres.vectors
    hashes: list[str | None] = [None] * len(qdf)
    for j, i in enumerate(todo):
        hashes[i] = qres.hashes[j]
    reasons: dict[str, str] = {}
    for j, msg in qres.failed.items():
        status[todo[j]] = SKIP_UNREADABLE
        reasons[qdf["query_id"].iloc[todo[j]]] = msg
    ok = np.flatnonzero(status == "ok")

    per_query = _per_query_frame(qdf, status, hashes)
    scores = None
    if len(ok):
        scores = gi.all_scores(qvecs[ok])
        scores = np.where(scope_mask[ok], scores, -np.inf)
        m = retrieval_metrics(scores, relevant[ok])
        per_query.loc[ok, "ap"] = m.ap
        per_query.loc[ok, "first_hit_rank"] = m.first_hit_rank
        per_query.loc[ok, "last_hit_rank"] = m.last_hit_rank
        per_query.loc[ok, "n_relevant"] = m.n_relevant
        per_query.loc[ok, "n_scope"] = scope_mask[ok].sum(axis=1)
        for k in (1, 5, 10):
            per_query.loc[ok, f"cmc{k}"] = m.cmc(k)
        per_query.loc[ok, "inp"] = m.inp
        sims, nrefs = _pairwise_sim(enc, qdf.iloc[ok], qvecs[ok], gi, by_id, batch_size, workers)
        per_query.loc[ok, "sim"] = sims
        per_query.loc[ok, "n_references"] = nrefs
    return QueryScores(status, per_query, qvecs, ok, scores, reasons)


def run_query(index: str, queries: str | Path | pd.DataFrame, *, run: str | None = None,
              workspace: str | Path | None = None, encoder: str | None = None, weights: str | None = None,
              scope: str = "group", scorers: Sequence[str] | str | None = (),
              skip_missing_identities: bool = False, skip_unreadable: bool = False, top_k_store: int = 10,
              seed: int = 0, device: str = "auto", batch_size: int = 64, workers: int | None = None,
              overwrite: bool = False, scorer_options: dict | None = None, oracle: bool = False) -> RunResult:
    """Evaluate generated images (queries) against an index; store and return the run.

    ``oracle``: also query with the gallery's reference images (method ``oracle``, see
    :mod:`fpr.eval.oracle`), the paper's real-images row."""
    if scope not in SCOPES:
        raise InputError(f"unknown scope '{scope}'", hint=f"valid: {', '.join(SCOPES)}")
    scorer_names = parse_scorer_list(scorers)
    run_id = _check_name(run, "run") if run else _new_run_id()
    ws = Workspace.open(workspace)
    with ws.read() as con:
        if not overwrite and con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
            raise ConflictError(f"run '{run_id}' already exists", hint="choose another --run or pass --overwrite")
    gi, items = load_index(index, workspace=ws.root, encoder=encoder)
    qdf = read_queries(queries)
    if oracle:
        from fpr.eval.oracle import append_oracle
        qdf = append_oracle(qdf, items)
    where = str(queries) if not isinstance(queries, pd.DataFrame) else "queries"

    by_id = {it.item_id: it for it in items}
    scope_mask, relevant = relevance_masks(gi, by_id, qdf, scope)

    status = np.array(["ok"] * len(qdf), dtype=object)
    no_rel = ~relevant.any(axis=1)
    if no_rel.any():
        missing = sorted({f"{g}/{i}" for g, i in zip(qdf["group"][no_rel], qdf["identity"][no_rel])})
        if not skip_missing_identities:
            raise InputError(f"{int(no_rel.sum())} quer{'y has' if no_rel.sum() == 1 else 'ies have'} no gallery "
                             f"image of their identity in scope: {', '.join(missing[:8])}"
                             + (" ..." if len(missing) > 8 else ""), where=where,
                             hint="fix the identity/group labels, add those identities to the gallery, or pass "
                                  "--skip-missing-identities")
        status[no_rel] = SKIP_NO_RELEVANT

    enc = load_encoder(gi.card.encoder, weights=weights, device=device)
    if enc.weights.checksum != gi.card.weights_checksum:
        raise ConflictError(f"encoder '{enc.id}' weights differ from those index '{index}' was built with",
                            hint="pass --weights with the original file, or rebuild the index")
    ev = score_queries(gi, by_id, enc, qdf, scope_mask, relevant, status, skip_unreadable=skip_unreadable,
                       batch_size=batch_size, workers=workers)
    status, per_query, qvecs, ok, reasons = ev.status, ev.per_query, ev.qvecs, ev.ok, ev.reasons
    rankings = pd.DataFrame(columns=["run_id", "query_id", "rank", "item_id", "score", "relevant"])
    if len(ok):
        rankings = _rankings_frame(run_id, qdf["query_id"].to_numpy()[ok], ev.scores, relevant[ok], gi.item_ids,
                                   top_k_store)

    aux = pd.DataFrame(columns=["query_id", "scorer", "metric", "value"])
    if scorer_names and len(ok):
        batch = _query_batch(qdf.iloc[ok], qvecs[ok], gi, by_id, enc.id, device, scorer_options)
        aux = run_scorers(scorer_names, batch)

    provenance = _provenance(enc, gi, seed, device)
    params = {"scope": scope, "scorers": scorer_names, "top_k": top_k_store, "seed": seed,
              "skip_missing_identities": skip_missing_identities, "skip_unreadable": skip_unreadable,
              "skipped": reasons}
    per_query.insert(0, "run_id", run_id)
    _store_run(ws, run_id, index, gi, qdf, per_query, aux, rankings, params, provenance, where, overwrite)
    summary = summarize(_with_aux(per_query, aux), seed=seed, aux_cols=_aux_cols(aux))
    n_skipped = int((status != "ok").sum())
    if n_skipped:
        progress.log(f"skipped {n_skipped} of {len(qdf)} queries "
                     f"({int((status == SKIP_NO_RELEVANT).sum())} without relevant gallery images, "
                     f"{int((status == SKIP_UNREADABLE).sum())} unreadable); see status in 'fpr export'")
    return RunResult(run_id, index, enc.id, summary, per_query, aux, provenance, n_skipped, reasons)


def _per_query_frame(qdf: pd.DataFrame, status: np.ndarray, hashes: list) -> pd.DataFrame:
    base_cols = {"query_id", "row_number", "path", "method", "identity", "group", "prompt", "reference_paths",
                 "reference_list"}
    extra_cols = [c for c in qdf.columns if c not in base_cols]
    df = pd.DataFrame({
        "query_id": qdf["query_id"].to_numpy(), "row_number": qdf["row_number"].to_numpy(),
        "path": qdf["path"].to_numpy(), "content_hash": hashes, "method": qdf["method"].to_numpy(),
        "identity": qdf["identity"].to_numpy(), "group": qdf["group"].to_numpy(),
        "prompt": qdf["prompt"].to_numpy(), "reference_paths": qdf["reference_paths"].to_numpy(),
        "status": status})
    for col in ("ap", "first_hit_rank", "last_hit_rank", "n_relevant", "n_scope", "cmc1", "cmc5", "cmc10", "inp",
                "sim", "n_references"):
        df[col] = np.nan
    df["extra"] = [json.dumps({c: qdf[c].iloc[i] for c in extra_cols}, default=str) for i in range(len(qdf))]
    for c in extra_cols:
        df[c] = qdf[c].to_numpy()
    return df


def _pairwise_sim(enc: Encoder, qdf: pd.DataFrame, qvecs: np.ndarray, gi: faiss_index.GalleryIndex,
                  by_id: dict[int, GalleryItem], batch_size: int, workers: int | None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Mean cosine to the query's references: explicit ``reference_paths`` if given, else the identity's set."""
    ref_keys = np.array([f"{by_id[int(i)].group}\x1f{by_id[int(i)].identity}" for i in gi.ref_ids], dtype=object)
    explicit = [r for refs in qdf["reference_list"] for r in refs]
    explicit_vecs: dict[str, np.ndarray] = {}
    if explicit:
        uniq = sorted(set(explicit))
        res = embed_paths(enc, uniq, batch_size=batch_size, workers=workers, desc="embedding references")
        explicit_vecs = dict(zip(uniq, res.vectors))
    sims = np.full(len(qdf), np.nan)
    nrefs = np.zeros(len(qdf), dtype=np.int64)
    keys = (qdf["group"] + "\x1f" + qdf["identity"]).to_numpy()
    for j in range(len(qdf)):
        refs = qdf["reference_list"].iloc[j]
        if refs:
            r = np.stack([explicit_vecs[p] for p in refs])
        else:
            r = gi.ref_vectors[ref_keys == keys[j]] if len(ref_keys) else np.zeros((0, gi.card.dim))
        if len(r):
            sims[j] = float((r.astype(np.float64) @ qvecs[j].astype(np.float64)).mean())
            nrefs[j] = len(r)
    return sims, nrefs


def _rankings_frame(run_id: str, query_ids: np.ndarray, scores: np.ndarray, relevant: np.ndarray,
                    item_ids: np.ndarray, k: int) -> pd.DataFrame:
    if k <= 0:
        return pd.DataFrame(columns=["run_id", "query_id", "rank", "item_id", "score", "relevant"])
    idx, val = top_k(scores, k)
    rows_q, rows_r = np.nonzero(idx >= 0)
    cols = idx[rows_q, rows_r]
    return pd.DataFrame({"run_id": run_id, "query_id": query_ids[rows_q], "rank": rows_r + 1,
                         "item_id": item_ids[cols], "score": val[rows_q, rows_r],
                         "relevant": relevant[rows_q, cols]})


def _query_batch(qdf: pd.DataFrame, qvecs: np.ndarray, gi: faiss_index.GalleryIndex,
                 by_id: dict[int, GalleryItem], encoder_id: str, device: str,
                 options: dict | None) -> QueryBatch:
    refs_by_key: dict[str, list[str]] = {}
    for i in gi.ref_ids:
        it = by_id[int(i)]
        refs_by_key.setdefault(f"{it.group}\x1f{it.identity}", []).append(it.path)
    refs = [list(r) if r else refs_by_key.get(f"{g}\x1f{i}", [])
            for r, g, i in zip(qdf["reference_list"], qdf["group"], qdf["identity"])]
    return QueryBatch(qdf["query_id"].tolist(), qdf["path"].tolist(), qdf["identity"].tolist(),
                      qdf["group"].tolist(), [p or None for p in qdf["prompt"]], refs, qvecs, encoder_id, device,
                      dict(options or {}))


def _provenance(enc: Encoder, gi: faiss_index.GalleryIndex, seed: int, device: str) -> dict:
    return {"encoder": enc.id, "weights_checksum": enc.weights.checksum, "weights_path": str(enc.weights.path),
            "preprocessing": enc.preprocessing.key(), "device": str(enc.device), "device_requested": device,
            "seed": seed, "index_card": gi.card.name, "gallery_fingerprint": gi.card.gallery_fingerprint,
            "versions": faiss_index.library_versions(), "created_at": _now()}


def _aux_cols(aux: pd.DataFrame) -> list[str]:
    if aux is None or aux.empty:
        return []
    return sorted({f"{s}.{m}" for s, m in zip(aux["scorer"], aux["metric"])})


def _with_aux(per_query: pd.DataFrame, aux: pd.DataFrame) -> pd.DataFrame:
    if aux is None or aux.empty:
        return per_query
    wide = aux.assign(col=aux["scorer"] + "." + aux["metric"]).pivot_table(
        index="query_id", columns="col", values="value", aggfunc="first")
    return per_query.merge(wide, left_on="query_id", right_index=True, how="left")


def _store_run(ws: Workspace, run_id: str, index: str, gi: faiss_index.GalleryIndex, qdf: pd.DataFrame,
               per_query: pd.DataFrame, aux: pd.DataFrame, rankings: pd.DataFrame, params: dict,
               provenance: dict, where: str, overwrite: bool) -> None:
    cols = ["run_id", "query_id", "row_number", "path", "content_hash", "method", "identity", "group",
            "prompt", "reference_paths", "status", "ap", "first_hit_rank", "last_hit_rank", "n_relevant",
            "n_scope", "cmc1", "cmc5", "cmc10", "inp", "sim", "n_references", "extra"]
    qr = per_query[cols].rename(columns={"group": "group_name"})
    n_ok = int((per_query["status"] == "ok").sum())
    with ws.write() as con:
        if con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
            if not overwrite:
                raise ConflictError(f"run '{run_id}' already exists", hint="pass --overwrite")
            for table in ("runs", "query_results", "aux_scores", "rankings"):
                con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
        con.execute("INSERT INTO runs (run_id, index_name, gallery, encoder, scope, n_queries, n_evaluated, "
                    "n_skipped, queries_file, params, provenance) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [run_id, index, gi.card.gallery, gi.card.encoder, params["scope"], len(qdf), n_ok,
                     len(qdf) - n_ok, where, json.dumps(params), json.dumps(provenance)])
        insert_df(con, "query_results", qr)
        if aux is not None and not aux.empty:
            insert_df(con, "aux_scores", aux.assign(run_id=run_id)[["run_id", "query_id", "scorer", "metric",
                                                                   "value"]])
        insert_df(con, "rankings", rankings)


def _require_run(con, run_id: str, ws: Workspace) -> tuple:
    row = con.execute("SELECT run_id, index_name, encoder, params, provenance FROM runs WHERE run_id = ?",
                      [run_id]).fetchone()
    if row is None:
        recent = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY created_at DESC LIMIT 5").fetchall()]
        raise NotFoundError(f"no run named '{run_id}'", where=str(ws.root),
                            hint=f"recent runs: {', '.join(recent) or '(none)'}; 'fpr runs' lists all")
    return row


def load_run(run_id: str, *, workspace: str | Path | None = None) -> RunResult:
    """A stored run, with per-query rows and auxiliary scores, summarised exactly as when it ran."""
    ws = Workspace.open(workspace)
    with ws.read() as con:
        _, index, encoder, params, prov = _require_run(con, run_id, ws)
        per_query = con.execute("SELECT * FROM query_results WHERE run_id = ? ORDER BY row_number",
                                [run_id]).df().rename(columns={"group_name": "group"})
        aux = con.execute("SELECT query_id, scorer, metric, value FROM aux_scores WHERE run_id = ? "
                          "ORDER BY scorer, metric, query_id", [run_id]).df()
    params, prov = json.loads(params), json.loads(prov)
    extras = [json.loads(e) if e else {} for e in per_query["extra"]]
    for key in sorted({k for e in extras for k in e}):
        if key not in per_query.columns:
            per_query[key] = [e.get(key) for e in extras]
    summary = summarize(_with_aux(per_query, aux), seed=int(params.get("seed", 0)), aux_cols=_aux_cols(aux))
    n_skipped = int((per_query["status"] != "ok").sum())
    return RunResult(run_id, index, encoder, summary, per_query, aux, prov, n_skipped, params.get("skipped", {}))


def report(run_id: str, *, workspace: str | Path | None = None) -> RunResult:
    return load_run(run_id, workspace=workspace)


def list_runs(*, workspace: str | Path | None = None) -> list[dict]:
    ws = Workspace.open(workspace)
    if not ws.exists:
        return []
    with ws.read() as con:
        df = con.execute("SELECT run_id, index_name AS index, encoder, scope, n_queries, n_evaluated, n_skipped, "
                         "CAST(created_at AS VARCHAR) AS created_at FROM runs ORDER BY created_at").df()
    return df.to_dict("records")


EXPORT_COLUMNS = ["query_id", "path", "method", "identity", "group", "ap", "first_hit_rank", "n_relevant", "sim"]


def export_run(run_id: str, out: str | Path, *, workspace: str | Path | None = None) -> Path:
    """Write the per-query table (CSV or Parquet by suffix), with status, CMC, mINP and auxiliary scores."""
    res = load_run(run_id, workspace=workspace)
    df = _with_aux(res.per_query, res.aux)
    extra_cols = ["status", "last_hit_rank", "n_scope", "cmc1", "cmc5", "cmc10", "inp", "n_references", "prompt",
                  "reference_paths"] + _aux_cols(res.aux)
    cols = EXPORT_COLUMNS + [c for c in extra_cols if c in df.columns]
    return write_table(df[cols], out)


def score_run(run_id: str, scorers: Sequence[str] | str, *, workspace: str | Path | None = None,
              device: str = "auto", scorer_options: dict | None = None, overwrite: bool = False) -> pd.DataFrame:
    """Add auxiliary scores to an existing run (one transaction)."""
    names = parse_scorer_list(scorers)
    if not names:
        raise InputError("no scorers given", hint="e.g. --scorers clip-t,copy-paste")
    ws = Workspace.open(workspace)
    res = load_run(run_id, workspace=ws.root)
    gi, items = load_index(res.index, workspace=ws.root)
    by_id = {it.item_id: it for it in items}
    ok = res.per_query[res.per_query["status"] == "ok"].copy()
    ok["reference_list"] = [[p for p in str(r or "").split(";") if p] for r in ok["reference_paths"]]
    ok["prompt"] = ok["prompt"].fillna("")
    batch = _query_batch(ok, None, gi, by_id, res.encoder, device, scorer_options)
    aux = run_scorers(names, batch)
    with ws.write() as con:
        existing = con.execute("SELECT DISTINCT scorer FROM aux_scores WHERE run_id = ?", [run_id]).fetchall()
        clash = sorted({r[0] for r in existing} & set(names))
        if clash and not overwrite:
            raise ConflictError(f"run '{run_id}' already has scores from {', '.join(clash)}",
                                hint="pass --overwrite to replace them")
        for name in clash:
            con.execute("DELETE FROM aux_scores WHERE run_id = ? AND scorer = ?", [run_id, name])
        insert_df(con, "aux_scores", aux.assign(run_id=run_id)[["run_id", "query_id", "scorer", "metric", "value"]])
    return aux


def compare(run_id: str, method_a: str, method_b: str, *, metric: str = "ap",
            workspace: str | Path | None = None, seed: int = 0) -> dict:
    res = load_run(run_id, workspace=workspace)
    methods = sorted(res.per_query["method"].unique())
    for m in (method_a, method_b):
        if m not in methods:
            raise NotFoundError(f"run '{run_id}' has no method '{m}'", hint=f"methods: {', '.join(methods)}")
    df = _with_aux(res.per_query, res.aux)
    if metric not in df.columns:
        raise InputError(f"unknown metric '{metric}'", hint="e.g. ap, sim, cmc1, inp or an auxiliary 'scorer.metric'")
    return paired_comparison(df, method_a, method_b, metric=metric, seed=seed)


# --------------------------------------------------------------------------- embeddings and SQL

def embed(encoder: str, images: str | Path | Sequence[str], *, out: str | Path | None = None,
          weights: str | None = None, device: str = "auto", batch_size: int = 64,
          workers: int | None = None) -> EmbedResult:
    """Embed images (a CSV/Parquet with a ``path`` column, or a list of paths) in row order."""
    if isinstance(images, (str, Path)):
        p = Path(images)
        df = read_table(p, required=("path",), what="images file")
        paths = [resolve_path(v, p.resolve().parent) for v in df["path"]]
    else:
        paths = [str(x) for x in images]
    enc = load_encoder(encoder, weights=weights, device=device)
    res = embed_paths(enc, paths, batch_size=batch_size, workers=workers)
    if out is not None:
        _atomic_save_npy(Path(out), res.vectors)
    return res


def _atomic_save_npy(path: Path, arr: np.ndarray) -> None:
    import os
    import tempfile

    if path.suffix != ".npy":
        raise InputError("embeddings output must end in .npy", where=str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".npy")
    with os.fdopen(fd, "wb") as fp:
        np.save(fp, arr)
    os.replace(tmp, path)


def sql(query: str, *, workspace: str | Path | None = None) -> pd.DataFrame:
    """Run a read-only SQL query against the workspace database."""
    import duckdb

    ws = Workspace.open(workspace)
    with ws.read() as con:
        try:
            return con.execute(query).df()
        except duckdb.Error as exc:
            raise InputError(f"SQL error: {str(exc).splitlines()[0]}",
                             hint="tables: galleries, gallery_items, indices, runs, query_results, aux_scores, "
                                  "rankings, ablations (the workspace is opened read-only)") from None


def ablate(*args, **kwargs):
    """Gallery ablation sweep; see :func:`fpr.eval.ablate.ablate` (imported lazily: it imports this module)."""
    from fpr.eval.ablate import ablate as _ablate

    return _ablate(*args, **kwargs)


def filter_queries(*args, **kwargs):
    """Synthetic-data filtering; see :func:`fpr.eval.filter.filter_queries`."""
    from fpr.eval.filter import filter_queries as _filter

    return _filter(*args, **kwargs)


def galleries_from_source(manifest: str | Path | None = None, folder: str | Path | None = None
                          ) -> list[ImageRecord]:
    if (manifest is None) == (folder is None):
        raise InputError("give exactly one of --manifest or --folder")
    return read_manifest(manifest) if manifest is not None else read_folder(folder)


def ensure_ok(result: RunResult) -> RunResult:  # pragma: no cover - convenience for notebooks
    if result.n_skipped:
        raise FprError(f"{result.n_skipped} queries were skipped")
    return result
