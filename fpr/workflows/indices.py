"""Index workflows: embed a gallery and write a new index version (readers see old or new, never a mix), list,
load, delete.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fpr.defaults import EMBED_BATCH_SIZE
from fpr.encoders.background import parse_background, with_background
from fpr.encoders.catalog import (check_batch_size, check_device, check_encoder_id, check_workers,
                                  require_builtin_weights)
from fpr.errors import ConflictError, InputError, choices_hint
from fpr.eval import relevance
from fpr.galleries.records import GalleryItem
from fpr.index import faiss_index, versions
from fpr.store import records as db
from fpr.store.records import check_name
from fpr.store.workspace import Workspace
from fpr.workflows.galleries import gallery_items

if TYPE_CHECKING:
    from fpr.encoders.registry import Encoder


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


def _check_build_inputs(encoder: str, device: str, batch_size: int, workers: int | None, background: str,
                        index_type: str) -> None:
    """Every name and option of a build, checked before torch loads: a typo is refused in well under a second."""
    check_encoder_id(encoder)
    check_device(device)
    check_batch_size(batch_size)
    check_workers(workers)
    parse_background(background)
    if index_type not in faiss_index.INDEX_TYPES:
        raise InputError(f"unknown index type '{index_type}'", hint=choices_hint(faiss_index.INDEX_TYPES, "types"))


def build_index(gallery: str, encoder: str, *, name: str | None = None, workspace: str | Path | None = None,
                weights: str | None = None, device: str = "auto", batch_size: int = EMBED_BATCH_SIZE,
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
    _check_build_inputs(encoder, device, batch_size, workers, background, index_type)
    if weights is None:  # a --weights file is the user's; the catalog knows only the built-in places
        require_builtin_weights(encoder)
    ws = Workspace.open(workspace)
    grow = db.get_gallery(ws, gallery)
    before = db.find_index(ws, name)
    if before is not None and not overwrite:
        raise ConflictError(f"index '{name}' already exists", where=str(ws.root),
                            hint="choose another --name or pass --overwrite")
    items = gallery_items(gallery, workspace=ws.root)
    # torch and the encoder load only now, once every name and option has been checked
    from fpr.encoders.embed import embed_paths
    from fpr.encoders.registry import load_encoder

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
    opened = relevance.open_index(Workspace.open(workspace), name, encoder=encoder)
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

