"""The Python API. Every ``fpr`` command is a thin wrapper over one function here.

    import fpr
    fpr.import_gallery("leopards", fpr.read_folder("data/leopards"))
    fpr.build_index("leopards", "miewid-msv2")
    result = fpr.run_query("leopards-miewid-msv2", "generated.csv")
    result.summary   # rows per (method, group), plus group "*" per method

Functions take ``workspace=None`` (meaning ``$FPR_WORKSPACE`` or ``./fpr-workspace``).
This module orchestrates: the evaluation itself is :mod:`fpr.eval.pipeline`, every
SQL statement is in :mod:`fpr.store.records`, index files are :mod:`fpr.index`.
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pandas as pd

from fpr import progress
from fpr.errors import ConflictError, FprError, InputError, NotFoundError
from fpr.eval import pipeline, ray_engine
from fpr.eval.oracle import append_oracle
from fpr.eval.pipeline import SCOPES, SKIP_NO_RELEVANT, SKIP_UNREADABLE, EvalSettings, GalleryLabels
from fpr.eval.scorers import parse_scorer_list, run_scorers, uses_gallery
from fpr.eval.summary import aux_columns, paired_comparison, summarize, with_aux
from fpr.files import atomic_write
from fpr.galleries.curate import CurationReport, GallerySpec, curate, gallery_fingerprint
from fpr.galleries.manifest import read_folder, read_manifest
from fpr.galleries.records import GalleryItem, ImageRecord
from fpr.images import check_image
from fpr.index import faiss_index, versions
from fpr.store import records as db
from fpr.store.records import check_name
from fpr.store import schema
from fpr.store.schema import TABLES
from fpr.store.workspace import Workspace
from fpr.tables import read_table, resolve_path, write_table

if TYPE_CHECKING:
    from typing import Callable, Mapping

    import torch

    from fpr.encoders.cache import EmbeddingCache
    from fpr.encoders.embed import EmbedResult
    from fpr.encoders.registry import Encoder
    from fpr.eval.ablate import AblationResult, BackgroundSweep
    from fpr.eval.ablate_official import OfficialAblationResult
    from fpr.eval.filter import FilterResult


# Model code (torch, timm, open_clip) is imported on first use, never when the API or the CLI
# is imported: `fpr --help`, `runs`, `report`, `sql` and `export` start without it.

def load_encoder(encoder_id: str, *, weights: str | None = None, device: str = "auto") -> Encoder:
    """See :func:`fpr.encoders.registry.load_encoder`."""
    from fpr.encoders.registry import load_encoder as load

    return load(encoder_id, weights=weights, device=device)


def embed_paths(encoder: Encoder, paths: Sequence[str | Path], *, batch_size: int = 32, workers: int | None = None,
                cache: EmbeddingCache | None | bool = True, on_error: str = "raise", desc: str = "embedding",
                normalize: bool = True, amp_dtype: torch.dtype | None = None) -> EmbedResult:
    """See :func:`fpr.encoders.embed.embed_paths`."""
    from fpr.encoders.embed import embed_paths as embed_fn

    return embed_fn(encoder, paths, batch_size=batch_size, workers=workers, cache=cache, on_error=on_error,
                    desc=desc, normalize=normalize, amp_dtype=amp_dtype)


def with_background(encoder: Encoder, background: str) -> Encoder:
    """See :func:`fpr.encoders.background.with_background`."""
    from fpr.encoders.background import with_background as wrap

    return wrap(encoder, background)


def background_of_key(preprocessing_key: str) -> str:
    """See :func:`fpr.encoders.background.background_of_key`."""
    from fpr.encoders.background import background_of_key as of_key

    return of_key(preprocessing_key)


def ablate(gallery: str, encoder: str, queries: str | Path | pd.DataFrame | None = None, *,
           per_identity: Sequence | str = (1, 5, 10, 20), identities: Sequence | str = (2, 5, 10),
           sampling: Sequence | str = ("random", "kmeans"), repeats: int = 5, seed: int = 0,
           design: str = "one-at-a-time", name: str | None = None, workspace: str | Path | None = None,
           weights: str | None = None, device: str = "auto", batch_size: int = 64, workers: int | None = None,
           skip_missing_identities: bool = False, plot: str | Path | None = None, overwrite: bool = False,
           store: bool = True, background: str = "keep") -> AblationResult:
    """See :func:`fpr.eval.ablate.ablate`."""
    from fpr.eval.ablate import ablate as run

    return run(gallery, encoder, queries, per_identity=per_identity, identities=identities, sampling=sampling,
               repeats=repeats, seed=seed, design=design, name=name, workspace=workspace, weights=weights,
               device=device, batch_size=batch_size, workers=workers,
               skip_missing_identities=skip_missing_identities, plot=plot, overwrite=overwrite, store=store,
               background=background)


def ablate_backgrounds(gallery: str, encoder: str, queries: str | Path | pd.DataFrame | None = None, *,
                       backgrounds: str | Sequence[str] = "keep", name: str | None = None,
                       plot: str | Path | None = None, **options) -> BackgroundSweep:
    """See :func:`fpr.eval.ablate.ablate_backgrounds` (``options``: those of :func:`ablate`)."""
    from fpr.eval.ablate import ablate_backgrounds as run

    return run(gallery, encoder, queries, backgrounds=backgrounds, name=name, plot=plot, **options)


def ablate_official(gallery: str, encoder: str, queries: str | Path | pd.DataFrame | None = None, *,
                    settings: str | Sequence | None = None, selection: Sequence[str] = ("kmeans", "random"),
                    cluster_encoder: str = "miewid-msv2", cluster_weights: str | None = None, seed: int = 101,
                    name: str | None = None, workspace: str | Path | None = None, weights: str | None = None,
                    device: str = "auto", batch_size: int = 64, workers: int | None = None,
                    skip_missing_identities: bool = False, overwrite: bool = False,
                    store: bool = True) -> OfficialAblationResult:
    """See :func:`fpr.eval.ablate_official.ablate_official`."""
    from fpr.eval.ablate_official import ablate_official as run

    return run(gallery, encoder, queries, settings=settings, selection=selection, cluster_encoder=cluster_encoder,
               cluster_weights=cluster_weights, seed=seed, name=name, workspace=workspace, weights=weights,
               device=device, batch_size=batch_size, workers=workers,
               skip_missing_identities=skip_missing_identities, overwrite=overwrite, store=store)


def filter_queries(index: str, queries: str | Path, keep: str, out: str | Path, *,
                   rejected: str | Path | None = None, copy_to: str | Path | None = None,
                   scorers: Sequence[str] | str | None = (), chunk_size: int = 1000,
                   workspace: str | Path | None = None, scope: str = "group", skip_missing_identities: bool = False,
                   device: str = "auto", batch_size: int = 64, workers: int | None = None,
                   scorer_options: Mapping[str, str] | None = None, restart: bool = False,
                   after_chunk: Callable[[int], None] | None = None, engine: str = "local",
                   ray=None) -> FilterResult:
    """See :func:`fpr.eval.filter.filter_queries`."""
    from fpr.eval.filter import filter_queries as run

    return run(index, queries, keep, out, rejected=rejected, copy_to=copy_to, scorers=scorers,
               chunk_size=chunk_size, workspace=workspace, scope=scope,
               skip_missing_identities=skip_missing_identities, device=device, batch_size=batch_size,
               workers=workers, scorer_options=scorer_options, restart=restart, after_chunk=after_chunk,
               engine=engine, ray=ray)

__all__ = [
    "GalleryInfo", "IndexInfo", "RunResult", "import_gallery", "curate_gallery", "read_manifest", "read_folder",
    "list_galleries", "show_gallery", "gallery_items", "delete_gallery", "build_index", "list_indices", "load_index",
    "delete_index", "run_query", "run_query_encoders", "read_queries", "report", "report_data",
    "paper_report", "html_report", "score_from_table", "run_ids", "load_run", "list_runs", "export_run", "delete_run",
    "embed", "sql", "compare", "score_run", "ablate", "ablate_backgrounds", "ablate_official", "filter_queries", "galleries_from_source",
    "build_preset_gallery",
    "training_source", "train_encoder", "list_encoders", "fetch_weights", "import_weights",
    "SCOPES", "SKIP_NO_RELEVANT", "SKIP_UNREADABLE",
]


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
    check_name(name, "gallery")
    spec = spec or GallerySpec()
    ws = Workspace.open(workspace)
    if not overwrite and db.gallery_exists(ws, name):
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
    row = {**info.as_row(), "spec": json.dumps(info.spec), "report": json.dumps(info.report)}
    item_rows = pd.DataFrame([{"gallery": name, "item_id": it.item_id, "path": it.path,
                               "content_hash": it.content_hash, "identity": it.identity, "group_name": it.group,
                               "role": it.role} for it in items])
    db.store_gallery(ws, row, item_rows, overwrite=overwrite)
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


def list_galleries(*, workspace: str | Path | None = None) -> list[dict]:
    return db.list_galleries(Workspace.open(workspace))


def gallery_items(name: str, *, workspace: str | Path | None = None) -> list[GalleryItem]:
    return pipeline.gallery_items(Workspace.open(workspace), name)


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


def delete_gallery(name: str, *, workspace: str | Path | None = None, force: bool = False) -> dict:
    """Delete a gallery; refused while indices or runs use it unless ``force`` (they are kept)."""
    ws = Workspace.open(workspace)
    db.get_gallery(ws, name)
    deps = db.gallery_dependents(ws, name)
    if (deps["indices"] or deps["runs"]) and not force:
        raise ConflictError(f"gallery '{name}' is used by {len(deps['indices'])} index(es) and {len(deps['runs'])} "
                            f"run(s): {', '.join(deps['indices'] + deps['runs'])[:200]}",
                            hint="delete those first, or pass --force (they stay, but can no longer be rebuilt)")
    db.delete_gallery(ws, name)
    return {"deleted": name, **deps}


def build_preset_gallery(preset: str, root: str | Path, *, name: str | None = None, seed: int = 0,
                         sampling: str = "random", encoder: str | None = None, workspace: str | Path | None = None,
                         overwrite: bool = False) -> GalleryInfo:
    """A dataset preset (e.g. ``cub-paper``) read from its official folder layout, curated and stored."""
    from fpr.galleries.datasets.presets import build_preset

    result = build_preset(preset, root, seed=seed, sampling=sampling)
    for note in result.notes:
        progress.log(f"{preset}: {note}")
    return import_gallery(name or result.default_gallery, result.records, result.spec, workspace=workspace,
                          encoder=encoder, source=f"preset:{preset}:{root}", overwrite=overwrite)


def galleries_from_source(manifest: str | Path | None = None, folder: str | Path | None = None
                          ) -> list[ImageRecord]:
    if (manifest is None) == (folder is None):
        raise InputError("give exactly one of --manifest or --folder")
    return read_manifest(manifest) if manifest is not None else read_folder(folder)


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
    version: str = ""
    index_type: str = "flat"
    recall_at_k: float | None = None

    def as_row(self) -> dict:
        return dict(self.__dict__)


def _changed_files(items: list[GalleryItem], hashes: list[str | None]) -> list[str]:
    return [it.path for it, h in zip(items, hashes) if h is not None and h != it.content_hash]


def build_index(gallery: str, encoder: str, *, name: str | None = None, workspace: str | Path | None = None,
                weights: str | None = None, device: str = "auto", batch_size: int = 64,
                workers: int | None = None, overwrite: bool = False, background: str = "keep",
                index_type: str = "flat") -> IndexInfo:
    """Embed a gallery's images (cached) and write a new index version, then point the name at it.

    ``index_type`` flat (exact) | ivf | hnsw: an approximate search index for top-k lookups on
    large galleries, next to the flat vectors (AP stays exact); its recall@k is on the card.

    Readers see the old version or the new one, never a mix: the files go to a fresh
    version folder and one transaction moves the pointer. A build that finds the name
    taken by a concurrent build is refused instead of silently lost. ``background``
    (``keep`` | ``remove`` | ``remove:<segmenter>``) is part of the protocol: it is recorded
    in the card, and queries against the index get the same step.
    """
    start = time.perf_counter()
    name = check_name(name or f"{gallery}-{encoder}", "index")
    ws = Workspace.open(workspace)
    grow = db.get_gallery(ws, gallery)
    before = db.find_index(ws, name)
    if before is not None and not overwrite:
        raise ConflictError(f"index '{name}' already exists", where=str(ws.root),
                            hint="choose another --name or pass --overwrite")
    items = gallery_items(gallery, workspace=ws.root)
    enc = load_encoder(encoder, weights=weights, device=device)
    if background != "keep":
        enc = with_background(enc, background)
    gal = [it for it in items if it.role == "gallery"]
    refs = [it for it in items if it.role == "reference"]
    res = embed_paths(enc, [it.path for it in gal + refs], batch_size=batch_size, workers=workers,
                      desc=f"embedding {gallery}")
    changed = _changed_files(gal + refs, res.hashes)
    if changed:
        raise ConflictError(f"{len(changed)} gallery image(s) changed on disk since gallery '{gallery}' was "
                            f"imported: {', '.join(changed[:5])}" + (" ..." if len(changed) > 5 else ""),
                            hint=f"restore them, or re-import the gallery (fpr gallery import --name {gallery} "
                                 "... --overwrite)")
    vecs = res.vectors
    card = faiss_index.IndexCard(
        name=name, gallery=gallery, gallery_fingerprint=grow.fingerprint, encoder=enc.id,
        weights_checksum=enc.weights.checksum, preprocessing=enc.preprocessing.key(), dim=enc.spec.dim,
        n_items=len(gal), n_references=len(refs), **_card_numerics(enc))
    gi = faiss_index.build(vecs[:len(gal)], np.array([it.item_id for it in gal]), vecs[len(gal):],
                           np.array([it.item_id for it in refs]), card, index_type=index_type)
    root = ws.index_dir(name)
    versions.collect_garbage(root, keep=db.index_versions_in_use(ws, name))
    version = versions.new_version()
    folder = root / version
    faiss_index.save(gi, folder)
    row = db.IndexRow(name, gallery, enc.id, enc.weights.checksum, grow.fingerprint, enc.spec.dim, len(gal),
                      ws.relative(folder), json.loads(gi.card.to_json()), version)
    try:
        db.commit_index(ws, row, expected_version=None if before is None else before.version, overwrite=overwrite)
    except BaseException:
        versions.remove_version(root, version)
        raise
    versions.collect_garbage(root, keep={version})
    return IndexInfo(name, gallery, enc.id, enc.spec.dim, len(gal), len(refs), row.path, enc.weights.checksum,
                     time.perf_counter() - start, res.n_from_cache, res.n_computed, version, gi.card.index_type,
                     gi.card.recall_at_k)


def _card_numerics(enc: Encoder) -> dict:
    """Device class, precision and cache key of the embeddings (fields of newer index cards)."""
    fields = {f for f in faiss_index.IndexCard.__dataclass_fields__}
    values = {"device": getattr(enc, "device_class", enc.device.type),
              "precision": getattr(enc, "precision", "fp32"), "embedding_key": enc.cache_key}
    return {k: v for k, v in values.items() if k in fields}


def list_indices(*, workspace: str | Path | None = None) -> list[dict]:
    return db.list_indices(Workspace.open(workspace))


def load_index(name: str, *, workspace: str | Path | None = None, encoder: str | None = None
               ) -> tuple[faiss_index.GalleryIndex, list[GalleryItem]]:
    """Load an index's current version and its gallery items (checked against the stored gallery)."""
    opened = pipeline.open_index(Workspace.open(workspace), name, encoder=encoder)
    return opened.index, opened.items


def delete_index(name: str, *, workspace: str | Path | None = None, force: bool = False) -> dict:
    """Delete an index (its pointer row now, its files at once); refused while runs use it unless ``force``."""
    ws = Workspace.open(workspace)
    db.get_index(ws, name)
    runs = db.index_dependents(ws, name)
    if runs and not force:
        raise ConflictError(f"index '{name}' is used by {len(runs)} run(s): {', '.join(runs)[:200]}",
                            hint="delete those runs first, or pass --force (the runs stay, but 'fpr score' "
                                 "can no longer add to them)")
    db.delete_index(ws, name)
    versions.collect_garbage(ws.index_dir(name), keep=set(), grace_s=0.0)
    return {"deleted": name, "runs": runs}


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

    @property
    def sim_definition(self) -> dict[str, int]:
        """Which references Sim used (see ``fpr.eval.pipeline.SIM_SOURCES``) -> number of queries."""
        return sim_definition(self.per_query)

    def as_json(self) -> dict:
        return {"run": self.run_id, "index": self.index, "encoder": self.encoder, "summary": self.summary,
                "n_queries": int(len(self.per_query)), "n_skipped": self.n_skipped,
                "skipped": skip_reasons(self.per_query, self.skipped_reasons),
                "sim_definition": self.sim_definition, "provenance": self.provenance}


def sim_definition(per_query: pd.DataFrame) -> dict[str, int]:
    """Which references Sim used (see ``fpr.eval.pipeline.SIM_SOURCES``) -> number of queries."""
    if "sim_source" not in per_query:
        return {}
    counts = per_query["sim_source"].dropna().value_counts()
    return {str(k): int(v) for k, v in counts.sort_index().items()}


def skip_reasons(per_query: pd.DataFrame, reasons: dict) -> dict[str, str]:
    """Every skipped query id -> its status and reason (unreadable: the decoder's message)."""
    out: dict[str, str] = {}
    for qid, status, g, ident in zip(per_query["query_id"], per_query["status"], per_query["group"],
                                     per_query["identity"]):
        if status == SKIP_NO_RELEVANT:
            out[qid] = f"{status}: no gallery image of identity '{ident}' in group '{g}' in scope"
        elif status != "ok":
            out[qid] = f"{status}: {reasons.get(qid, 'no reason stored')}"
    return out


def read_queries(queries: str | Path | pd.DataFrame) -> pd.DataFrame:
    """Load and normalise a queries table (see :func:`fpr.eval.pipeline.normalize_queries`)."""
    return pipeline.normalize_queries(queries)


def _new_run_id() -> str:
    return f"run-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


def _index_encoder(opened: "pipeline.OpenIndex", weights: str | None, device: str, *,
                   hint: str = "pass --weights with the original file, or rebuild the index") -> Encoder:
    """The encoder an index was built with (same weights), with the index's protocol, background step included."""
    card = opened.index.card
    enc = load_encoder(card.encoder, weights=weights, device=device)
    if enc.weights.checksum != card.weights_checksum:
        raise ConflictError(f"encoder '{enc.id}' weights differ from those index '{opened.row.name}' was built with",
                            hint=hint)
    return with_background(enc, background_of_key(card.preprocessing))


def _embedder(enc: Encoder, batch_size: int, workers: int | None):
    def embed(paths, *, on_error: str = "raise", desc: str = "embedding") -> EmbedResult:
        return embed_paths(enc, paths, batch_size=batch_size, workers=workers, on_error=on_error, desc=desc)
    return embed


def _provenance(enc: Encoder, opened: "pipeline.OpenIndex", seed: int, device: str) -> dict:
    card = opened.index.card
    return {"encoder": enc.id, "weights_checksum": enc.weights.checksum, "weights_path": str(enc.weights.path),
            "preprocessing": enc.preprocessing.key(), "device": str(enc.device), "device_requested": device,
            **{f"embedding_{k}": v for k, v in _card_numerics(enc).items()},
            "seed": seed, "index_card": card.name, "index_version": opened.row.version,
            "gallery_fingerprint": card.gallery_fingerprint, "versions": faiss_index.library_versions(),
            "created_at": _now()}


def _settings(scope, scorer_names, scorer_options, skip_missing_identities, skip_unreadable, top_k_store, device,
              batch_size, workers) -> EvalSettings:
    pipeline.check_scope(scope)
    if top_k_store < 0:
        raise InputError(f"--top-k must be 0 or more, got {top_k_store}")
    return EvalSettings(scope, skip_missing_identities, skip_unreadable, scorer_names, dict(scorer_options or {}),
                        top_k_store, device, batch_size, workers)


def run_query(index: str, queries: str | Path | pd.DataFrame, *, run: str | None = None,
              workspace: str | Path | None = None, encoder: str | None = None, weights: str | None = None,
              scope: str = "group", scorers: Sequence[str] | str | None = (),
              skip_missing_identities: bool = False, skip_unreadable: bool = False, top_k_store: int = 10,
              seed: int = 0, device: str = "auto", batch_size: int = 64, workers: int | None = None,
              overwrite: bool = False, scorer_options: dict | None = None, oracle: bool = False,
              engine: str = "local", ray: "ray_engine.RayOptions | dict | None" = None) -> RunResult:
    """Evaluate generated images (queries) against an index; store and return the run.

    ``oracle``: also query with the gallery's reference images (method ``oracle``, see
    :mod:`fpr.eval.oracle`), the paper's real-images row. ``engine="ray"``: embed and score
    on Ray (:mod:`fpr.eval.ray_engine`, options ``ray``); the shards are ingested into the
    store in one transaction like a local run's rows."""
    ray_opts = ray_engine.ray_options(engine, ray)
    scorer_names = parse_scorer_list(scorers)
    settings = _settings(scope, scorer_names, scorer_options, skip_missing_identities, skip_unreadable, top_k_store,
                         device, batch_size, workers)
    run_id = db.check_run_id(run) if run else _new_run_id()
    ws = Workspace.open(workspace)
    if not overwrite and db.run_exists(ws, run_id):
        raise ConflictError(f"run '{run_id}' already exists", hint="choose another --run or pass --overwrite")
    opened = pipeline.open_index(ws, index, encoder=encoder)
    where = str(queries) if not isinstance(queries, pd.DataFrame) else "queries"
    qdf = pipeline.normalize_queries(queries)
    if oracle:
        qdf = append_oracle(qdf, opened.items)
    # Missing identities are an error before any model is loaded.
    pipeline.missing_identities(qdf, opened.labels.has_relevant(qdf),
                                skip=skip_missing_identities, where=where)
    # on Ray the model is shipped to the actors from here, which place it on their own device
    enc = _index_encoder(opened, weights, "cpu" if ray_opts else device)
    engine_info = None
    if ray_opts is None:
        ev = pipeline.evaluate(qdf, opened.labels, opened.index, _embedder(enc, batch_size, workers),
                               settings, where=where, encoder_id=enc.id, workspace=ws.root, dim=enc.spec.dim)
    else:
        key = {"index": index, "version": opened.row.version, "weights": enc.weights.checksum,
               "protocol": enc.preprocessing.key(), "settings": repr(settings)}
        ev, engine_info = ray_engine.evaluate_ray(qdf, opened, enc, settings, options=ray_opts,
                                                  shard_dir=ws.root / "shards" / ray_engine.fingerprint_of(key),
                                                  fingerprint=key, where=where, workspace=ws.root)
    provenance = _provenance(enc, opened, seed, device)
    if engine_info is not None:
        provenance["engine"] = engine_info
        for key, actor_key in (("device", "actor_device"), ("embedding_device", "actor_device"),
                               ("embedding_precision", "actor_precision"),
                               ("embedding_embedding_key", "actor_embedding_key")):
            if key in provenance and actor_key in engine_info:  # the vectors were computed by the actors
                provenance[key] = engine_info[actor_key]
    if ev.aux.attrs.get("provenance"):  # model judges: model, endpoint, seed, prompt template versions
        provenance["scorers"] = ev.aux.attrs["provenance"]
    params = {"scope": scope, "scorers": scorer_names, "top_k": top_k_store, "seed": seed,
              "skip_missing_identities": skip_missing_identities, "skip_unreadable": skip_unreadable,
              "scorer_options": dict(scorer_options or {}), "skipped": ev.reasons}
    n_ok = len(ev.ok)
    run_row = {"run_id": run_id, "index_name": index, "gallery": opened.index.card.gallery, "encoder": enc.id,
               "scope": scope, "n_queries": len(qdf), "n_evaluated": n_ok, "n_skipped": len(qdf) - n_ok,
               "queries_file": where, "params": json.dumps(params), "provenance": json.dumps(provenance),
               "index_version": opened.row.version, "gallery_fingerprint": opened.index.card.gallery_fingerprint,
               "weights_checksum": enc.weights.checksum}
    db.store_run(ws, run_row, pipeline.stored_columns(ev.per_query, run_id), ev.aux.assign(run_id=run_id),
                 ev.rankings.assign(run_id=run_id), overwrite=overwrite)
    if engine_info is not None:  # ingested in the one transaction above: the shards are no longer needed
        ray_engine.discard_shards(engine_info["shard_dir"])
    per_query = ev.per_query.copy()
    per_query.insert(0, "run_id", run_id)
    summary = [{"encoder": enc.id, **r} for r in summarize(with_aux(per_query, ev.aux), seed=seed,
                                                              aux_cols=aux_columns(ev.aux))]
    n_skipped = len(qdf) - n_ok
    if n_skipped:
        progress.log(f"skipped {n_skipped} of {len(qdf)} queries "
                     f"({int((ev.status == SKIP_NO_RELEVANT).sum())} without relevant gallery images, "
                     f"{int((ev.status == SKIP_UNREADABLE).sum())} unreadable); '--format json' lists them with "
                     f"reasons, 'fpr export --run {run_id} --out FILE.csv' has their status")
    return RunResult(run_id, index, enc.id, summary, per_query, ev.aux, provenance, n_skipped, ev.reasons)


def load_run(run_id: str, *, workspace: str | Path | None = None) -> RunResult:
    """A stored run, with per-query rows and auxiliary scores, summarised exactly as when it ran."""
    ws = Workspace.open(workspace)
    row = db.get_run(ws, run_id)
    stored, aux = db.run_tables(ws, run_id)
    per_query = pipeline.expand_extras(stored)
    summary = [{"encoder": row.encoder, **r} for r in summarize(
        with_aux(per_query, aux), seed=int(row.params.get("seed", 0)), aux_cols=aux_columns(aux))]
    n_skipped = int((per_query["status"] != "ok").sum())
    return RunResult(run_id, row.index_name, row.encoder, summary, per_query, aux, row.provenance, n_skipped,
                     row.params.get("skipped", {}))


def report(run_id: str, *, workspace: str | Path | None = None, allow_stale: bool = False) -> RunResult:
    """A stored run's results; refused (one line) when its index has changed since, unless ``allow_stale``."""
    ws = Workspace.open(workspace)
    if not allow_stale:
        _require_current_index(ws, db.get_run(ws, run_id))
    return load_run(run_id, workspace=ws.root)


def _require_current_index(ws: Workspace, run: db.RunRow) -> db.IndexRow:
    why = pipeline.index_change(run, db.find_index(ws, run.index_name))
    if why:
        raise ConflictError(f"run '{run.run_id}' was made with index '{run.index_name}', which {why}",
                            where=str(ws.root),
                            hint="rerun the queries against the current index (fpr query ... --overwrite), or "
                                 "pass --allow-stale to read the stored results as they are")
    return db.get_index(ws, run.index_name)


def list_runs(*, workspace: str | Path | None = None) -> list[dict]:
    return db.list_runs(Workspace.open(workspace))


def delete_run(run_id: str, *, workspace: str | Path | None = None) -> dict:
    """Delete a run with its per-query rows, scores and rankings (one transaction per stored run); the
    name of a multi-encoder run deletes all its per-encoder runs."""
    ws = Workspace.open(workspace)
    ids = run_ids(run_id, workspace=ws.root)
    for rid in ids:
        db.delete_run(ws, rid)
    return {"deleted": run_id, "runs": ids}


def run_query_encoders(gallery: str, encoders: Sequence[str] | str, queries: str | Path | pd.DataFrame, *,
                       run: str | None = None, workspace: str | Path | None = None, overwrite: bool = False,
                       device: str = "auto", batch_size: int = 64, workers: int | None = None,
                       **kwargs) -> list[RunResult]:
    """Evaluate the same queries under several encoders: one stored run ``<run>@<encoder>`` per encoder.

    The index ``<gallery>-<encoder>`` is built first where it is missing. ``fpr report --run <run>``,
    ``fpr export --run <run>`` and the HTML report read the group as one run with an ``encoder`` column.
    """
    names = [e.strip() for e in (encoders.split(",") if isinstance(encoders, str) else encoders) if e.strip()]
    if not names:
        raise InputError("no encoders given", hint="e.g. --encoders pixels-16,fpr-world-v1")
    if len(set(names)) != len(names):
        raise InputError(f"an encoder is listed twice: {', '.join(names)}")
    run_id = check_name(run, "run") if run else _new_run_id()
    ws = Workspace.open(workspace)
    db.get_gallery(ws, gallery)
    if db.run_exists(ws, run_id):
        raise ConflictError(f"run '{run_id}' already exists as a single run",
                            hint="choose another --run, or delete it first (fpr runs delete)")
    qdf = pipeline.normalize_queries(queries)  # one read and check, before any index is built
    results = []
    for enc in names:
        index = f"{gallery}-{enc}"
        if db.find_index(ws, index) is None:
            progress.log(f"building missing index {index}")
            build_index(gallery, enc, name=index, workspace=ws.root, device=device, batch_size=batch_size,
                        workers=workers)
        results.append(run_query(index, qdf, run=f"{run_id}{db.ENCODER_SEP}{enc}", workspace=ws.root, encoder=enc,
                                 overwrite=overwrite, device=device, batch_size=batch_size, workers=workers,
                                 **kwargs))
    return results


def run_ids(runs: Sequence[str] | str, *, workspace: str | Path | None = None) -> list[str]:
    """The stored runs the given names stand for (a multi-encoder name stands for its per-encoder runs)."""
    ws = Workspace.open(workspace)
    out: list[str] = []
    for name in [runs] if isinstance(runs, str) else list(runs):
        ids = db.run_group(ws, name)
        if not ids:
            db.get_run(ws, name)  # raises, naming recent runs
        out += [i for i in ids if i not in out]
    return out


@dataclass
class ReportData:
    """Per-query rows of one or more runs (``run_id``, ``encoder`` and drift columns), their scores and
    top-k rankings, and summary rows per encoder."""

    runs: list[str]
    per_query: pd.DataFrame
    aux: pd.DataFrame
    rankings: pd.DataFrame
    summary: list[dict]
    items: dict  # run_id -> {item_id: GalleryItem}
    skipped: dict
    provenance: dict  # run_id -> provenance

    @property
    def encoders(self) -> list[str]:
        return list(dict.fromkeys(self.per_query["encoder"].tolist()))

    @property
    def sim_definition(self) -> dict[str, int]:
        """As :attr:`RunResult.sim_definition`, counted over the first encoder's queries."""
        return sim_definition(self.per_query[self.per_query["encoder"] == self.encoders[0]])


def report_data(runs: Sequence[str] | str, *, workspace: str | Path | None = None, allow_stale: bool = False,
                drift: bool = True, device: str = "auto") -> ReportData:
    """Everything a report shows, for one run, a multi-encoder run, or several runs over the same queries."""
    from fpr.eval import report as rep

    ws = Workspace.open(workspace)
    ids = run_ids(runs, workspace=ws.root)
    parts, auxes, ranks, items, skipped, provenance = [], [], [], {}, {}, {}
    seed = None
    owner: dict[tuple[str, str], str] = {}
    for rid in ids:
        row = db.get_run(ws, rid)
        if not allow_stale:
            _require_current_index(ws, row)
        res = load_run(rid, workspace=ws.root)
        seed = int(row.params.get("seed", 0)) if seed is None else seed
        pq = res.per_query.copy()
        pq["run_id"], pq["encoder"] = rid, row.encoder
        for m in pq["method"].unique():
            prev = owner.setdefault((row.encoder, m), rid)
            if prev != rid:
                raise ConflictError(f"runs '{prev}' and '{rid}' both have method '{m}' with encoder '{row.encoder}'",
                                    hint="merge runs that evaluate different methods or encoders")
        parts.append(pq)
        provenance[rid] = res.provenance
        auxes.append(res.aux.assign(run_id=rid))
        ranks.append(db.run_rankings(ws, rid).assign(run_id=rid))
        items[rid] = {it.item_id: it for it in pipeline.gallery_items(ws, row.gallery)} \
            if db.gallery_exists(ws, row.gallery) else {}
        skipped.update({f"{rid}:{k}" if len(ids) > 1 else k: v
                        for k, v in skip_reasons(pq, res.skipped_reasons).items()})
    per_query = pd.concat(parts, ignore_index=True)
    aux = pd.concat(auxes, ignore_index=True)
    rankings = pd.concat(ranks, ignore_index=True)
    if drift:
        per_query = _with_drift(ws, per_query, rankings, items, device)
    summary = rep.encoder_summaries(per_query, aux, seed=seed or 0)
    return ReportData(ids, per_query, aux, rankings, summary, items, skipped, provenance)


def _with_drift(ws: Workspace, per_query: pd.DataFrame, rankings: pd.DataFrame, items: dict,
                device: str) -> pd.DataFrame:
    """Add top-1 and drifted-to identities; queries whose top-k holds no other identity are recomputed
    from the run's index when it is still current (``drift_source`` says which)."""
    from fpr.eval import report as rep

    ident = {(rid, int(i)): it.identity for rid, its in items.items() for i, it in its.items()}
    d = rep.drift_from_rankings(per_query, rankings, ident)
    per_query = per_query.drop(columns=[c for c in rep.DRIFT_COLUMNS if c in per_query.columns])
    per_query = per_query.merge(d, on=["run_id", "query_id"], how="left")
    todo = (per_query["status"] == "ok") & per_query["drift_identity"].isna()
    for rid in per_query.loc[todo, "run_id"].unique():
        rows = np.flatnonzero((todo & (per_query["run_id"] == rid)).to_numpy())
        run = db.get_run(ws, rid)
        if not items.get(rid):
            per_query.loc[rows, "drift_source"] = "unknown: gallery deleted"
            continue
        if pipeline.index_change(run, db.find_index(ws, run.index_name)):
            per_query.loc[rows, "drift_source"] = "unknown: index changed"
            continue
        opened = pipeline.open_index(ws, run.index_name)
        enc = load_encoder(run.encoder, device=device)
        qdf = per_query.iloc[rows]
        qvecs = embed_paths(enc, qdf["path"].tolist(), desc="embedding queries for drift").vectors
        in_scope, relevant = opened.labels.relevance(qdf, run.scope or "group")
        ids, vals = rep.drift_from_scores(opened.index.all_scores(qvecs), relevant, in_scope,
                                          opened.labels.identities)
        per_query.loc[rows, "drift_identity"] = ids
        per_query.loc[rows, "drift_score"] = vals
        per_query.loc[rows, "drift_source"] = ["index" if i else "none: no other identity in scope" for i in ids]
    return per_query


def paper_report(runs: Sequence[str] | str, *, workspace: str | Path | None = None, allow_stale: bool = False,
                 metrics: Sequence[str] | None = None, method_order: Sequence[str] = ()):
    """(ReportData, Pivot): the paper's layout of one or more runs (see :mod:`fpr.eval.report`)."""
    from fpr.eval import report as rep

    data = report_data(runs, workspace=workspace, allow_stale=allow_stale, drift=False)
    p = rep.pivot(data.summary, metrics=metrics or rep.DEFAULT_METRICS,
                  methods=rep.method_order(data.per_query, method_order), encoders=data.encoders)
    return data, p


def html_report(runs: Sequence[str] | str, out: str | Path, *, workspace: str | Path | None = None,
                allow_stale: bool = False, top_k: int = 10, thumb: int = 96, device: str = "auto") -> Path:
    """Write the self-contained HTML report (one file, images embedded, no network references)."""
    from fpr.eval import html_report as html
    from fpr.eval import report as rep

    data = report_data(runs, workspace=workspace, allow_stale=allow_stale, device=device)
    p = rep.pivot(data.summary, methods=rep.method_order(data.per_query), encoders=data.encoders)
    text = html.render(data.per_query, data.aux, data.rankings, data.items, data.summary, p, runs=data.runs,
                       top_k=top_k, thumb=thumb)
    out = Path(out)
    atomic_write(out, lambda fp: fp.write(text.encode("utf-8")))
    return out


def export_columns(per_query: pd.DataFrame, aux: pd.DataFrame) -> list[str]:
    """Declared exported columns of ``query_results``, the encoder and drift diagnosis, then the queries'
    extra columns, then scores."""
    from fpr.eval.report import DRIFT_COLUMNS

    declared = ["group" if c == "group_name" else c for c in schema.export_columns()]
    added = [c for c in ("run_id", "encoder", *DRIFT_COLUMNS) if c in per_query.columns]
    extras = [c for c in per_query.columns if c not in declared and c not in TABLES["query_results"].names
              and c not in ("group", *added)]
    return declared + added + extras + aux_columns(aux)


def export_run(run_id: str, out: str | Path, *, workspace: str | Path | None = None,
               device: str = "auto") -> Path:
    """Write the per-query table (CSV or Parquet by suffix): status, metrics, encoder, drift diagnosis,
    the queries' extra columns, scores, and scorer notes as ``<scorer>.<metric>.note`` columns. A
    multi-encoder run gives one row per query and encoder."""
    data = report_data(run_id, workspace=workspace, allow_stale=True, device=device)
    wide = _wide(data)
    cols = export_columns(wide, data.aux)
    aux = data.aux
    noted = aux[aux["note"].notna()] if "note" in aux.columns else aux.iloc[:0]
    if len(noted):  # notes (judge trajectories, reasons for missing values)
        notes = noted.assign(col=noted["scorer"] + "." + noted["metric"] + ".note").pivot_table(
            index=["run_id", "query_id"], columns="col", values="note", aggfunc="first")
        wide = wide.merge(notes, left_on=["run_id", "query_id"], right_index=True, how="left")
        cols += sorted(notes.columns)
    if len(data.runs) == 1:
        cols = [c for c in cols if c != "run_id"]
    return write_table(wide[cols], out)


def _wide(data: ReportData) -> pd.DataFrame:
    """Per-query rows with one column per ``scorer.metric`` (each run joined with its own scores)."""
    if data.aux.empty:
        return data.per_query
    return pd.concat([with_aux(data.per_query[data.per_query["run_id"] == r],
                               data.aux[data.aux["run_id"] == r].drop(columns="run_id")) for r in data.runs],
                     ignore_index=True)


def score_run(run_id: str, scorers: Sequence[str] | str, *, workspace: str | Path | None = None,
              device: str = "auto", scorer_options: dict | None = None, overwrite: bool = False) -> pd.DataFrame:
    """Add auxiliary scores to an existing run (one transaction); refused if its index has changed."""
    names = parse_scorer_list(scorers)
    if not names:
        raise InputError("no scorers given", hint="e.g. --scorers clip-t,copy-paste")
    ws = Workspace.open(workspace)
    ids = run_ids(run_id, workspace=ws.root)
    if ids != [run_id]:  # a multi-encoder run: score each encoder's run
        return pd.concat([score_run(rid, names, workspace=ws.root, device=device, scorer_options=scorer_options,
                                    overwrite=overwrite).assign(run_id=rid) for rid in ids], ignore_index=True)
    run = db.get_run(ws, run_id)
    _require_current_index(ws, run)
    res = load_run(run_id, workspace=ws.root)
    opened = pipeline.open_index(ws, run.index_name)
    ok = res.per_query[res.per_query["status"] == "ok"].copy()
    qdf = pipeline.normalize_queries(ok.drop(columns=[c for c in ("sim_source",) if c in ok.columns]),
                                     where=f"run {run_id}")
    qvecs = scores_fn = None
    if uses_gallery(names, scorer_options):  # e.g. dreambench-concept.mode=choice: the run's encoder again
        weights = (run.provenance or {}).get("weights_path")
        enc = _index_encoder(opened, weights if weights and Path(weights).is_file() else None, device,
                             hint=f"the run's weights file ({weights}) must be where it was when the run was made"
                                  if weights else "rebuild the index and rerun the query")
        qvecs = _embedder(enc, 64, None)(qdf["path"].tolist(), desc="embedding queries").vectors
        scores_fn = pipeline.whole_gallery_scores(opened.index, len(opened.labels.item_ids))
    batch = pipeline.query_batch(qdf, qvecs, opened.labels, res.encoder, device, scorer_options, ws.root,
                                 gallery_scores=scores_fn)
    aux = run_scorers(names, batch)
    db.replace_scores(ws, run_id, names, aux.assign(run_id=run_id), overwrite=overwrite)
    return aux


def score_from_table(run_id: str, table: str | Path, scorer: str, *, workspace: str | Path | None = None,
                     overwrite: bool = False) -> pd.DataFrame:
    """Attach external per-query scores: a CSV/Parquet with ``query_id`` and numeric metric columns.

    Stored as scorer ``scorer`` (``scorer.metric`` in summaries and exports); empty cells are NaN with
    a note. Unknown query ids are an error listing them; a multi-encoder run gets them on every encoder.
    """
    check_name(scorer, "scorer")
    path = Path(table)
    df = read_table(path, required=("query_id",), what="scores file")
    df["query_id"] = df["query_id"].astype(str).str.strip()
    metrics = [c for c in df.columns if c != "query_id"]
    if not metrics:
        raise InputError("scores file has no metric column beside query_id", where=str(path),
                         hint="columns: query_id, then one numeric column per metric")
    values = {}
    for c in metrics:
        v = pd.to_numeric(df[c], errors="coerce")
        bad = df[c][v.isna() & df[c].notna() & (df[c].astype(str).str.strip() != "")]
        if len(bad):
            raise InputError(f"column '{c}' is not numeric (e.g. {bad.iloc[0]!r} for query "
                             f"{df['query_id'][bad.index[0]]})", where=str(path))
        values[c] = v
    dup = df["query_id"][df["query_id"].duplicated()]
    if len(dup):
        raise InputError(f"query_id '{dup.iloc[0]}' appears more than once", where=str(path))
    ws = Workspace.open(workspace)
    stored = []
    for rid in run_ids(run_id, workspace=ws.root):
        known = set(db.run_tables(ws, rid)[0]["query_id"])
        unknown = [q for q in df["query_id"] if q not in known]
        if unknown:
            raise InputError(f"{len(unknown)} query id(s) not in run '{rid}': {', '.join(unknown[:10])}"
                             + (" ..." if len(unknown) > 10 else ""), where=str(path),
                             hint="'fpr export --run RUN --out FILE.csv' lists the run's query ids")
        long = pd.concat([pd.DataFrame({"query_id": df["query_id"], "scorer": scorer, "metric": c,
                                        "value": values[c].astype(float),
                                        "note": np.where(values[c].isna(), f"empty in {path.name}", None)})
                          for c in metrics], ignore_index=True)
        stored.append(long.assign(run_id=rid))
    for part in stored:
        db.replace_scores(ws, part["run_id"].iloc[0], [scorer], part, overwrite=overwrite)
    return pd.concat(stored, ignore_index=True)


def compare(run_id: str, method_a: str, method_b: str, *, metric: str = "ap",
            workspace: str | Path | None = None, seed: int = 0) -> dict:
    """Paired comparison of two methods, overall and per group (and per encoder for a multi-encoder run)."""
    data = report_data(run_id, workspace=workspace, allow_stale=True, drift=False)
    methods = list(dict.fromkeys(data.per_query["method"]))
    for m in (method_a, method_b):
        if m not in methods:
            raise NotFoundError(f"run '{run_id}' has no method '{m}'", hint=f"methods: {', '.join(methods)}")
    df = _wide(data)
    if metric not in df.columns:
        raise InputError(f"unknown metric '{metric}'", hint="e.g. ap, sim, cmc1, inp or an auxiliary 'scorer.metric'")
    rows = []
    for enc in data.encoders:
        de = df[df["encoder"] == enc]
        for g in ["*"] + sorted(de["group"].unique()):
            part = de if g == "*" else de[de["group"] == g]
            rows.append({"encoder": enc, "group": g,
                         **paired_comparison(part, method_a, method_b, metric=metric, seed=seed)})
    return {"method_a": method_a, "method_b": method_b, "metric": metric, "rows": rows,
            "tests": "Wilcoxon signed-rank test (two-sided, zero differences dropped) on the paired differences; "
                     "95% interval of the mean difference by paired bootstrap (1000 resamples of pairs)",
            "pairing": "a pair is one (group, identity, prompt) evaluated by both methods; repeated queries of a "
                       "method with the same key are averaged first (n_repeats counts the keys that had repeats)"}


# --------------------------------------------------------------------------- embeddings and SQL

def embed(encoder: str, images: str | Path | Sequence[str], *, out: str | Path | None = None,
          weights: str | None = None, device: str = "auto", batch_size: int = 64,
          workers: int | None = None, engine: str = "local",
          ray: "ray_engine.RayOptions | dict | None" = None) -> EmbedResult:
    """Embed images (a CSV/Parquet with a ``path`` column, or a list of paths) in row order.

    ``engine="ray"``: on Ray (:mod:`fpr.eval.ray_engine`); shards are kept beside ``out``
    (``.<out name>.fpr-embed/``) until the output is written, so a killed run resumes."""
    ray_opts = ray_engine.ray_options(engine, ray)
    if out is not None and Path(out).suffix != ".npy":
        raise InputError("embeddings output must end in .npy", where=str(out))
    if isinstance(images, (str, Path)):
        p = Path(images)
        df = read_table(p, required=("path",), what="images file")
        paths = [resolve_path(v, p.resolve().parent) for v in df["path"]]
    else:
        paths = [str(x) for x in images]
    if ray_opts is None:
        enc = load_encoder(encoder, weights=weights, device=device)
        res = embed_paths(enc, paths, batch_size=batch_size, workers=workers)
    else:
        import tempfile

        enc = load_encoder(encoder, weights=weights, device="cpu")  # the actors place it on their device
        tmp = None if out is not None else tempfile.TemporaryDirectory(prefix="fpr-embed-")
        shard_dir = Path(tmp.name) if tmp else Path(out).parent / f".{Path(out).name}.fpr-embed"
        res = ray_engine.embed_paths_ray(enc, paths, options=ray_opts, shard_dir=shard_dir, batch_size=batch_size,
                                         device=device)
    if out is not None:
        atomic_write(Path(out), lambda fp: np.save(fp, res.vectors))
    if ray_opts is not None:
        ray_engine.discard_shards(shard_dir)
    return res


def sql(query: str, *, workspace: str | Path | None = None) -> pd.DataFrame:
    """Run a SQL query on a connection that can neither write nor reach files, extensions or the network."""
    return db.user_sql(Workspace.open(workspace), query)


# --------------------------------------------------------------------------- encoders and their weights

def _encoder_row(spec) -> dict:
    """``describe`` plus ``where``: the weights path when found, else the places looked in."""
    from fpr.encoders import weights as W
    from fpr.encoders.registry import describe

    row = describe(spec)
    if spec.weights.kind == "none":
        where = "(no weights)"
    elif row["status"] == "available":
        where = f"{row['found_in']}: {row['weights']}"
    else:
        where = "looked in " + "; ".join(W.candidate_locations(spec.id, spec.weights))
    if row["status"] == "incomplete":
        where = row["reason"]
    row["where"] = where
    row["source"] = spec.weights.repo or spec.weights.kind
    return row


def list_encoders() -> list[dict]:
    """Every registered encoder (and every broken trained card) with its weights status; loads no model."""
    from fpr.encoders.registry import all_specs, broken_encoders, describe_broken

    rows = [_encoder_row(spec) for spec in all_specs().values()]
    for b in broken_encoders().values():
        rows.append({**describe_broken(b), "where": f"{b.where}: {b.reason}", "source": "local"})
    return sorted(rows, key=lambda r: r["id"])


def _weights_spec(encoder_id: str):
    from fpr.encoders.registry import get_spec

    spec = get_spec(encoder_id)
    if spec.weights.kind == "none":
        raise InputError(f"encoder '{spec.id}' has no weights (it is a fixed function)")
    if spec.weights.kind == "package":
        raise InputError(f"encoder '{spec.id}' ships its weights inside fpr; nothing to fetch or import")
    return spec


def _verify_loads(spec, resolved) -> None:
    progress.log(f"checking that {resolved.path} loads as '{spec.id}' (strict)")
    spec.build(resolved)


def fetch_weights(encoder_id: str, *, overwrite: bool = False) -> dict:
    """Download an encoder's weights into the weights folder (needs a network), then prove they load."""
    from fpr.encoders import weights as W

    spec = _weights_spec(encoder_id)
    progress.log(f"fetching {spec.weights.repo} into {W.weights_dir() / (spec.weights.folder_name or spec.id)}")
    W.fetch_weights(spec.id, spec.weights, overwrite=overwrite)
    _verify_loads(spec, W.resolve_weights(spec.id, spec.weights))
    return _encoder_row(spec)


def import_weights(encoder_id: str, path: str | Path, *, overwrite: bool = False) -> dict:
    """Copy downloaded weights (a file or a snapshot folder) into the weights folder; pickled checkpoints
    become safetensors, and nothing is stored unless the staged copy loads (strict key match)."""
    from fpr.encoders import weights as W

    spec = _weights_spec(encoder_id)
    resolved = W.resolve_weights(spec.id, spec.weights, explicit=str(path))
    dest = W.import_files(spec.id, spec.weights, resolved, overwrite=overwrite,
                          verify=lambda staged: _verify_loads(spec, staged))
    progress.log(f"imported into {dest}")
    return _encoder_row(spec)


# --------------------------------------------------------------------------- training

def training_source(source: str = "world", *, gallery: str | None = None, workspace: str | Path | None = None,
                    identities: int = 400, per_identity: int = 4, render_size: int = 96, seed: int = 0,
                    val_fraction: float = 0.2, twins: float = 0.0):
    """The data a trainer reads: a stored gallery, the built-in world, or a manifest file."""
    from fpr.galleries import training

    if gallery:
        records = [ImageRecord(it.path, it.identity, it.group, it.role, it.content_hash)
                   for it in gallery_items(gallery, workspace=workspace)]
        return training.RecordsSource(records, name=f"gallery:{gallery}", seed=seed, val_fraction=val_fraction)
    if source == "world":
        if identities < 2 or per_identity < 1:
            raise InputError("--identities must be >= 2 and --per-identity >= 1")
        return training.WorldSource(identities=identities, per_identity=per_identity, render_size=render_size,
                                    seed=seed, twins=twins)
    path = Path(source)
    if not path.exists():
        raise InputError("training source not found", where=str(path),
                         hint="pass --source world or a manifest file (path,identity,group)")
    return training.RecordsSource(read_manifest(path), name=f"manifest:{path.name}", seed=seed,
                                  val_fraction=val_fraction)


def train_encoder(source, config, *, encoder_id: str, out: str | Path | None = None, flat: bool = False,
                  overwrite: bool = False, command: str | None = None, description: str | None = None):
    """Train a specialized encoder on ``source`` (see :func:`training_source`), validating every epoch
    with the oracle mAP of the evaluation pipeline; returns a ``TrainResult``."""
    from fpr.encoders import train as tr

    return tr.train(source, config, encoder_id=encoder_id, out=out, flat=flat, overwrite=overwrite,
                    command=command, description=description, evaluate=pipeline.leave_one_out_map)


def ensure_ok(result: RunResult) -> RunResult:  # pragma: no cover - convenience for notebooks
    if result.n_skipped:
        raise FprError(f"{result.n_skipped} queries were skipped")
    return result


def meta(run_id: str, human: str | Path | Sequence[str | Path] | None = None, truth: str | None = None, *,
         workspace: str | Path | None = None, seed: int = 0, metrics: Sequence[str] | None = None,
         lower_better: Sequence[str] = (), compare: tuple[str, str] | None = None,
         truth_lower_better: bool = True, pair_within: Sequence[str] = ("group", "identity"),
         n_boot: int = 1000):
    """Agreement of a run's per-query values with human judgments (files) or a truth column; see fpr.eval.meta."""
    from fpr.eval import meta as _meta

    if (human is None or human == [] or human == ()) == (truth is None):
        raise InputError("give exactly one of --human FILE or --truth COLUMN",
                         hint="e.g. --human judgments.csv, or --truth drift on a demo world run")
    res = load_run(run_id, workspace=workspace)
    df = with_aux(res.per_query, res.aux)
    df = df[df["status"] == "ok"].reset_index(drop=True)
    available = _meta.metric_columns(df, aux_columns(res.aux))
    if metrics:
        unknown = [m for m in metrics if m not in available]
        if unknown:
            raise InputError(f"run '{run_id}' has no per-query value(s) {', '.join(unknown)}",
                             hint=f"values: {', '.join(available)}")
        available = list(metrics)
    if truth is not None:
        judg = _meta.truth_judgments(df, truth, lower_better=truth_lower_better, within=tuple(pair_within))
        where = f"run {run_id} column {truth}"
    else:
        paths = [human] if isinstance(human, (str, Path)) else list(human)
        judg = _meta.read_judgments(paths)
        where = ", ".join(map(str, paths))
        if judg.pairs.empty and not judg.ratings.empty:
            mean = judg.ratings.groupby("query_id")["rating"].mean()
            score = df["query_id"].astype(str).map(mean).astype(float)
            judg.pairs = _meta.pairs_from_scores(df, score, tuple(pair_within))
    out = _meta.agreement(df, available, judg, lower_better=lower_better, compare=compare, seed=seed,
                          n_boot=n_boot, where=where)
    out.info["run"] = run_id
    return out
