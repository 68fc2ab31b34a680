"""Gallery workflows: import (validate, hash, curate, store in one transaction), derive, list, show, delete, presets."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from fpr import progress
from fpr.errors import ConflictError, InputError
from fpr.eval import relevance
from fpr.galleries.curate import CurationReport, GallerySpec, curate, gallery_fingerprint
from fpr.galleries.manifest import read_folder, read_manifest
from fpr.galleries.records import GalleryItem, ImageRecord
from fpr.images import check_image
from fpr.store import records as db
from fpr.store.records import check_name
from fpr.store.workspace import Workspace


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
    items, report = curate(records, spec, embed=_kmeans_embedder(spec, encoder, device), where=source,
                           impostor_embed=_impostor_embedder(spec, device))
    info = _gallery_info(name, source, items, report, spec)
    row = {**info.as_row(), "spec": json.dumps(info.spec), "report": json.dumps(info.report)}
    item_rows = pd.DataFrame([{"gallery": name, "item_id": it.item_id, "path": it.path,
                               "content_hash": it.content_hash, "identity": it.identity, "group_name": it.group,
                               "role": it.role} for it in items])
    db.store_gallery(ws, row, item_rows, overwrite=overwrite)
    for line in report.lines():
        progress.log(line)
    for line in report.warnings():
        progress.warn(line)
    return info


def _kmeans_embedder(spec: GallerySpec, encoder: str | None, device: str):
    """``embed(paths) -> vectors`` for k-means sampling, or None when the spec samples otherwise."""
    if not (spec.sampling == "kmeans" and spec.gallery_per_identity):
        return None
    if not encoder:
        raise InputError("k-means sampling needs an encoder", hint="pass --encoder (e.g. fpr-world-v3)")
    from fpr.encoders.embed import embed_paths
    from fpr.encoders.registry import load_encoder

    enc = load_encoder(encoder, device=device)
    return lambda paths: embed_paths(enc, paths, desc="embedding for k-means").vectors


def _impostor_embedder(spec: GallerySpec, device: str):
    """``embed(paths) -> vectors`` under ``spec.impostor_encoder`` for nearest-impostor curation, or None."""
    if spec.impostors is None:
        return None
    if not spec.impostor_encoder:
        raise InputError("nearest-impostor curation needs an encoder",
                         hint="pass --impostor-encoder (e.g. fpr-world-v3)")
    from fpr.encoders.embed import embed_paths
    from fpr.encoders.registry import load_encoder

    enc = load_encoder(spec.impostor_encoder, device=device)
    return lambda paths: embed_paths(enc, paths, desc="embedding for nearest impostors").vectors


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
        report=report.lines() + report.warnings(), spec=json.loads(spec.to_json()))


def list_galleries(*, workspace: str | Path | None = None) -> list[dict]:
    return db.list_galleries(Workspace.open(workspace))


def gallery_items(name: str, *, workspace: str | Path | None = None) -> list[GalleryItem]:
    return relevance.gallery_items(Workspace.open(workspace), name)


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


def build_preset_gallery(preset: str, root: str | Path, *, name: str | None = None, seed: int | None = None,
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

