"""``fpr evaluate GENERATIONS GALLERY``: your own images in one call, as clean-fid takes two folders.

The generations folder is laid out ``<method>/<group>/<identity>/<image>`` (or ``<method>/<identity>/<image>``
when the gallery has one group); the gallery folder is what ``fpr gallery import --folder`` reads
(``<group>/<identity>/<image>``). The gallery and its index are stored under names derived from their
content (every file's bytes, the curation spec, the encoder and its protocol: :mod:`fpr.keys`), so a
second call on the same folders reuses them, and a changed file makes new ones. The run is named from
the generations' content and the index the same way: the same call twice reads the stored run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pandas as pd

from fpr import progress
from fpr.defaults import EMBED_BATCH_SIZE
from fpr.encoders.catalog import (check_batch_size, check_device, check_encoder_id, check_workers,
                                  require_builtin_weights)
from fpr.errors import ConflictError, InputError
from fpr.galleries.curate import GallerySpec
from fpr.galleries.manifest import read_folder
from fpr.images import IMAGE_SUFFIXES
from fpr.keys import file_sha256, fingerprint
from fpr.store import records as db
from fpr.store.workspace import Workspace
from fpr.workflows.common import require_current_index
from fpr.workflows.galleries import import_gallery
from fpr.workflows.indices import build_index
from fpr.workflows.runs import RunResult, load_run, run_query

LAYOUT = "<method>/<group>/<identity>/<image> (or <method>/<identity>/<image> for a gallery of one group)"
DIGEST_CHARS = 16  # of a SHA-256 in the stored names: 64 bits, no collision among a workspace's galleries


@dataclass
class Evaluated:
    """What ``fpr evaluate`` did: the run, and which of gallery, index and run were reused."""

    result: RunResult
    gallery: str
    index: str
    reused: dict[str, bool] = field(default_factory=dict)

    def notes(self) -> list[str]:
        """One line per stored object: reused (same content) or built."""
        return [f"{what} {name}: {'reused (same content)' if self.reused.get(what) else 'built'}"
                for what, name in (("gallery", self.gallery), ("index", self.index),
                                   ("run", self.result.run_id))]


def _images_under(root: Path) -> list[Path]:
    """Image files below ``root`` (hidden folders and files skipped), sorted."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
                  and not any(part.startswith(".") for part in p.relative_to(root).parts))


def generations_table(folder: str | Path, gallery_groups: Sequence[str]) -> pd.DataFrame:
    """The queries table of a generations folder (path, identity, group, method, query_id = the path under
    the folder); a file outside the layout is refused, naming it."""
    root = Path(folder).expanduser().resolve()
    if not root.is_dir():
        raise InputError("generations folder not found", where=str(root), hint=f"lay it out as {LAYOUT}")
    files = _images_under(root)
    if not files:
        raise InputError("no images found in the generations folder", where=str(root),
                         hint=f"lay it out as {LAYOUT}")
    depths = {len(p.relative_to(root).parts) for p in files}
    bad = next((p for p in files if len(p.relative_to(root).parts) not in (3, 4)), None)
    if bad is None and len(depths) > 1:
        bad = next(p for p in files if len(p.relative_to(root).parts) == min(depths))
    if bad is not None:
        raise InputError(f"image outside the generations layout {LAYOUT}", where=str(bad),
                         hint="move it into <method>/<group>/<identity>/, and give every image the same depth")
    rows = []
    one_group = list(gallery_groups)[0] if len(set(gallery_groups)) == 1 else None
    for p in files:
        parts = p.relative_to(root).parts
        if len(parts) == 3 and one_group is None:
            raise InputError(f"generations without a group folder, but the gallery has {len(set(gallery_groups))} "
                             f"groups ({', '.join(sorted(set(gallery_groups))[:5])})", where=str(p),
                             hint="lay the generations out as <method>/<group>/<identity>/<image>")
        method, group, identity = (parts[0], one_group, parts[1]) if len(parts) == 3 else parts[:3]
        rows.append({"path": str(p), "identity": identity, "group": group, "method": method,
                     "query_id": Path(*parts).as_posix()})
    return pd.DataFrame(rows)


def folder_digest(paths: Sequence[str | Path], root: str | Path, extra: object = None) -> str:
    """The content digest of files under ``root``: their paths below it and their bytes, plus ``extra``."""
    base = Path(root).expanduser().resolve()
    files = [(Path(p).resolve().relative_to(base).as_posix(), file_sha256(p)) for p in paths]
    return fingerprint({"files": sorted(files), "extra": extra}, length=DIGEST_CHARS)


def ensure_gallery(folder: str | Path, spec: GallerySpec, *, workspace: str | Path | None = None
                   ) -> tuple[str, bool]:
    """The stored gallery of ``folder`` under ``spec``, imported unless its content is stored already;
    (name, reused)."""
    records = read_folder(folder)
    name = "own-" + folder_digest([r.path for r in records], folder, {"spec": spec.to_json(),
                                                                     "labels": [(r.group, r.identity)
                                                                                for r in records]})
    ws = Workspace.open(workspace)
    if db.gallery_exists(ws, name):
        return name, True
    import_gallery(name, records, spec, workspace=ws.root, source=f"folder:{Path(folder).resolve()}")
    return name, False


def ensure_index(gallery: str, encoder: str, *, workspace: str | Path | None = None, device: str = "auto",
                 batch_size: int = EMBED_BATCH_SIZE, workers: int | None = None) -> tuple[str, bool]:
    """The index of a content-named gallery under ``encoder`` and its protocol, built unless stored;
    (name, reused)."""
    from fpr.encoders.registry import get_spec

    protocol = get_spec(encoder).preprocessing.key()  # the spec only: no model is loaded to name the index
    name = f"{gallery}-{encoder}-{fingerprint(protocol, length=8)}"
    ws = Workspace.open(workspace)
    row = db.find_index(ws, name)
    if row is not None and row.gallery == gallery:
        return name, True
    build_index(gallery, encoder, name=name, workspace=ws.root, device=device, batch_size=batch_size,
                workers=workers, overwrite=row is not None)
    return name, False


def evaluate_folders(generations: str | Path, gallery: str | Path, encoder: str, *,
                     workspace: str | Path | None = None, references: int = 1, per_identity: int | None = None,
                     oracle: bool = False, scorers: Sequence[str] | str | None = (), scope: str = "group",
                     run: str | None = None, overwrite: bool = False, skip_missing_identities: bool = False,
                     skip_unreadable: bool = False, seed: int = 0, device: str = "auto",
                     batch_size: int = EMBED_BATCH_SIZE, workers: int | None = None,
                     scorer_options: dict | None = None) -> Evaluated:
    """Evaluate a folder of generations against a gallery folder: gallery, index and run built or reused by
    content, the run stored as ``fpr query`` stores it (``fpr report --run`` prints it again).

    ``references``: reference images per identity taken from the gallery folder (Sim and the oracle row
    use them); ``per_identity``: gallery images kept per identity (default all). ``oracle``: also query
    with the references (method ``oracle``). ``run``: the run's name (default ``eval-<content digest>``);
    an existing name is refused unless ``overwrite``.
    """
    from fpr.scorers import check_scorer_options, parse_scorer_list

    if not encoder:
        raise InputError("no encoder given", hint="pass --encoder (offline: fpr-world-v3, fpr-general-v2)")
    # names and options first: the registry below imports torch, and a typo is refused in well under a second
    check_encoder_id(encoder)
    check_device(device)
    check_batch_size(batch_size)
    check_workers(workers)
    require_builtin_weights(encoder)
    from fpr.encoders.registry import get_spec
    from fpr.encoders.weights import resolve_weights

    # an unknown name, or weights not on this machine, are refused before any image is read or stored
    resolve_weights(encoder, get_spec(encoder).weights, required=True)
    scorer_names = parse_scorer_list(scorers)
    check_scorer_options(scorer_names, scorer_options)
    if run:
        db.check_run_id(run)
    spec = GallerySpec(references_per_identity=references, gallery_per_identity=per_identity)
    ws = Workspace.open(workspace)
    gal_records = read_folder(gallery)  # checked (layout, images present) before the generations are read
    qdf = generations_table(generations, [r.group for r in gal_records])
    gname, g_reused = ensure_gallery(gallery, spec, workspace=ws.root)
    iname, i_reused = ensure_index(gname, encoder, workspace=ws.root, device=device, batch_size=batch_size,
                                   workers=workers)
    settings = {"scope": scope, "scorers": scorer_names, "oracle": oracle, "seed": seed,
                "scorer_options": dict(scorer_options or {}), "skip": [skip_missing_identities, skip_unreadable]}
    version = db.get_index(ws, iname).version
    run_id = run or "eval-" + folder_digest(qdf["path"], generations, {"index": iname, "version": version,
                                                                       "settings": settings,
                                                                       "queries": qdf[["query_id", "method",
                                                                                       "group", "identity"]]
                                                                       .values.tolist()})
    if db.run_exists(ws, run_id) and not overwrite:
        if run:
            raise ConflictError(f"run '{run_id}' already exists", where=str(ws.root),
                                hint="choose another --run or pass --overwrite")
        require_current_index(ws, db.get_run(ws, run_id))
        return Evaluated(load_run(run_id, workspace=ws.root), gname, iname,
                         {"gallery": g_reused, "index": i_reused, "run": True})
    res = run_query(iname, qdf, run=run_id, workspace=ws.root, scope=scope, scorers=scorer_names,
                    skip_missing_identities=skip_missing_identities, skip_unreadable=skip_unreadable, seed=seed,
                    device=device, batch_size=batch_size, workers=workers, overwrite=overwrite,
                    scorer_options=scorer_options, oracle=oracle)
    progress.log(f"stored run {res.run_id} (fpr report --run {res.run_id} prints it again)")
    return Evaluated(res, gname, iname, {"gallery": g_reused, "index": i_reused, "run": False})


__all__ = ["Evaluated", "LAYOUT", "ensure_gallery", "ensure_index", "evaluate_folders", "folder_digest",
           "generations_table"]
