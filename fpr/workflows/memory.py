"""``fpr.Evaluator``: a gallery and an encoder loaded once, images scored in memory.

    ev = fpr.Evaluator(gallery="data/animals", encoder="fpr-world-v3")   # a folder, or a stored gallery's name
    out = ev.score([pil_image, "gen/leo-017.png", array], identities=["leo-017"] * 3, method="mine")
    out.per_query, out.summary                                            # DataFrames

Nothing is written to a workspace unless ``save_to`` asks for it (the embedding cache, ``FPR_CACHE_DIR``,
is used as by every command). The numbers are the pipeline's (:func:`fpr.eval.pipeline.evaluate`) on the
same gallery vectors, so they equal ``fpr evaluate`` / ``fpr query`` on the same images.

An image is a path, a PIL image, a NumPy array (H, W[, C]) of uint8, or a torch tensor (C, H, W) of floats in
0..1 (to uint8 as ``round(clip(x, 0, 1) * 255)``) or uint8. An in-memory image is encoded as PNG (lossless)
and then read exactly as a file with those bytes: decoded, EXIF-rotated, converted to RGB, hashed.
"""
from __future__ import annotations

import io
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from fpr.defaults import EMBED_BATCH_SIZE
from fpr.errors import ConflictError, FprError, InputError
from fpr.eval import inputs, pipeline
from fpr.eval.oracle import append_oracle
from fpr.eval.relevance import GalleryLabels, check_scope
from fpr.galleries.curate import GallerySpec, curate
from fpr.galleries.manifest import read_folder
from fpr.galleries.records import GalleryItem
from fpr.images import check_image
from fpr.keys import file_sha256, fingerprint, sha256_hex
from fpr.metrics.summary import aux_columns, summarize, with_aux
from fpr.render.result import summary_frame
from fpr.store import records as db
from fpr.store.workspace import Workspace
from fpr.workflows.common import embedder
from fpr.workflows.common import require_current_index
from fpr.workflows.evaluate import DIGEST_CHARS, ensure_gallery, ensure_index
from fpr.workflows.runs import RunResult, load_run, run_query

# the CLI flags an error of the pipeline may name, as this object's keyword arguments (Python errors speak Python)
PYTHON_NAMES = {"--skip-missing-identities": "skip_missing_identities=True", "--overwrite": "overwrite=True"}
MEMORY_PREFIX = "<memory>"  # the path that stands for an in-memory image (never a file)
PNG_MODES = ("1", "L", "LA", "I", "I;16", "P", "RGB", "RGBA")  # modes PNG stores as they are


@dataclass
class Scores:
    """What :meth:`Evaluator.score` returns: per-query rows (AP, ranks, CMC, Sim, top margin, ...), the
    summary (a row per method and group, group ``*`` per method, with 95% intervals) and the auxiliary
    scores (long: query_id, scorer, metric, value); ``run`` is the stored run when ``save_to`` was given."""

    per_query: pd.DataFrame
    summary: pd.DataFrame
    aux: pd.DataFrame
    run: RunResult | None = None


def image_bytes(image: Any, where: str) -> bytes:
    """An in-memory image as PNG bytes (lossless); a clear error for anything else."""
    from PIL import Image

    if isinstance(image, Image.Image):
        im = image if image.mode in PNG_MODES else image.convert("RGB")
    elif isinstance(image, np.ndarray):
        im = Image.fromarray(_uint8_hwc(image, where))
    elif _is_tensor(image):
        im = Image.fromarray(_uint8_hwc(_tensor_hwc(image, where), where))
    else:
        raise InputError(f"not an image: {type(image).__name__}", where=where,
                         hint="give a path, a PIL image, a uint8 array (H, W, C) or a tensor (C, H, W) in 0..1")
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def _is_tensor(x: Any) -> bool:
    torch = sys.modules.get("torch")  # a tensor exists only if torch was imported: never imported for this
    return torch is not None and isinstance(x, torch.Tensor)


def _tensor_hwc(t: Any, where: str) -> np.ndarray:
    if t.ndim != 3 or t.shape[0] not in (1, 3, 4):
        raise InputError(f"a tensor image must be (C, H, W) with C 1, 3 or 4, not {tuple(t.shape)}", where=where)
    a = t.detach().cpu().numpy().transpose(1, 2, 0)
    if a.dtype == np.uint8:
        return a
    if not np.issubdtype(a.dtype, np.floating):
        raise InputError(f"a tensor image must be float (0..1) or uint8, not {a.dtype}", where=where)
    return np.rint(np.clip(a.astype(np.float64), 0.0, 1.0) * 255.0).astype(np.uint8)


def _uint8_hwc(a: np.ndarray, where: str) -> np.ndarray:
    if a.dtype != np.uint8:
        raise InputError(f"an array image must be uint8, not {a.dtype}", where=where,
                         hint="pass (H, W, C) uint8 pixels, e.g. (x * 255).round().astype('uint8')")
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if not (a.ndim == 2 or (a.ndim == 3 and a.shape[2] in (3, 4))):
        raise InputError(f"an array image must be (H, W) or (H, W, 3|4), not {a.shape}", where=where,
                         hint="a (C, H, W) array: pass a.transpose(1, 2, 0)")
    return np.ascontiguousarray(a)


def pythonic(exc: FprError) -> FprError:
    """The same error with the CLI flags it names as keyword arguments (``--overwrite`` -> ``overwrite=True``)."""
    def fix(text: str | None) -> str | None:
        for flag in sorted(PYTHON_NAMES, key=len, reverse=True):
            text = text.replace(flag, PYTHON_NAMES[flag]) if text else text
        return text

    return type(exc)(fix(exc.what), where=exc.where, hint=fix(exc.hint))


def _per_image(value: Any, n: int, name: str) -> list:
    """A value for every image: one given for all, or a sequence of n."""
    if value is None or isinstance(value, str):
        return [value] * n
    values = list(value)
    if len(values) != n:
        raise InputError(f"{name} has {len(values)} values for {n} images", hint=f"give one {name} per image, "
                         "or one string for all")
    return values


class Evaluator:
    """A gallery (a folder ``<group>/<identity>/<image>`` or a stored gallery's name) and an encoder, loaded
    once; :meth:`score` evaluates images against them (see the module's docstring)."""

    def __init__(self, gallery: str | Path, encoder: str, *, workspace: str | Path | None = None,
                 references: int = 1, per_identity: int | None = None, scope: str = "group",
                 weights: str | None = None, device: str = "auto", batch_size: int = EMBED_BATCH_SIZE,
                 workers: int | None = None):
        from fpr.encoders.embed import embed_paths
        from fpr.encoders.registry import load_encoder

        self.scope = check_scope(scope)
        self.workspace = workspace
        self.spec = GallerySpec(references_per_identity=references, gallery_per_identity=per_identity)
        self.folder = Path(gallery).expanduser() if Path(gallery).expanduser().is_dir() else None
        self.gallery = str(gallery)
        self.items = self._items()
        self.encoder = load_encoder(encoder, weights=weights, device=device)
        self.batch_size, self.workers = batch_size, workers
        gal = [it for it in self.items if it.role == "gallery"]
        refs = [it for it in self.items if it.role == "reference"]
        vecs = embed_paths(self.encoder, [it.path for it in gal + refs], batch_size=batch_size, workers=workers,
                           desc=f"embedding {Path(self.gallery).name}").vectors
        self.vectors = np.ascontiguousarray(vecs[:len(gal)], dtype=np.float32)
        self.labels = GalleryLabels.from_items(np.array([it.item_id for it in gal], dtype=np.int64),
                                               np.array([it.item_id for it in refs], dtype=np.int64),
                                               vecs[len(gal):], self.items)

    def _items(self) -> list[GalleryItem]:
        """The curated gallery: a folder curated as ``fpr evaluate`` imports it, or a stored gallery's items."""
        if self.folder is None:
            ws = Workspace.open(self.workspace)
            if not db.gallery_exists(ws, self.gallery):
                raise InputError(f"gallery '{self.gallery}' is neither a folder nor a stored gallery",
                                 where=str(ws.root), hint="pass a folder <group>/<identity>/<image>, or a name "
                                                          "from fpr.list_galleries(workspace=...)")
            from fpr.eval.relevance import gallery_items

            return gallery_items(ws, self.gallery)
        records = read_folder(self.folder)
        for r in records:
            r.content_hash = check_image(r.path)
        return curate(records, self.spec, where=str(self.folder))[0]

    def score(self, images: Sequence[Any], identities: Sequence[str] | str, *, method: Sequence[str] | str = "generated",
              groups: Sequence[str] | str | None = None, query_ids: Sequence[str] | None = None,
              prompts: Sequence[str] | str | None = None, oracle: bool = False, scorers: Sequence[str] | str = (),
              seed: int = 0, skip_missing_identities: bool = False, save_to: str | Path | bool | None = None,
              run: str | None = None, overwrite: bool = False) -> Scores:
        """Score ``images`` (paths, PIL images, uint8 arrays, tensors) as generations of ``identities``.

        ``groups``: one per image or one for all; left out, the gallery's only group (an error when it has
        several). ``oracle``: add the reference images as queries (method ``oracle``). Nothing is stored
        unless ``save_to`` names a workspace (``True``: this evaluator's): the run ``run``, replaced only with
        ``overwrite=True``, or by default ``eval-<digest>`` named from the images, labels, index and settings, so
        the same call again returns the stored run."""
        try:
            return self._score(list(images), identities, method, groups, query_ids, prompts, oracle, scorers, seed,
                               skip_missing_identities, save_to, run, overwrite)
        except FprError as exc:
            raise pythonic(exc) from None

    def _score(self, images: list, identities, method, groups, query_ids, prompts, oracle: bool, scorers, seed: int,
               skip_missing_identities: bool, save_to, run: str | None, overwrite: bool) -> Scores:
        qdf, data = self._queries(images, identities, method, groups, query_ids, prompts)
        names = [s.strip() for s in (scorers.split(",") if isinstance(scorers, str) else scorers) if s.strip()]
        if names and data:
            raise InputError("scorers read image files, and some images are held in memory",
                             hint="pass paths (save the images first), or scorers=()")
        if save_to is not None and save_to is not False:
            return self._save(qdf, data, save_to, run, overwrite, oracle, names, seed, skip_missing_identities)
        if oracle:
            qdf = append_oracle(qdf, self.items)
        settings = pipeline.EvalSettings(self.scope, skip_missing_identities, False, names, {}, 10,
                                         str(self.encoder.device), self.batch_size, self.workers)
        ev = pipeline.evaluate(qdf, self.labels, self.vectors, embedder(self.encoder, self.batch_size, self.workers,
                                                                        data),
                               settings, where="images", encoder_id=self.encoder.id, dim=self.encoder.spec.dim)
        summary = summary_frame(summarize(with_aux(ev.per_query, ev.aux), seed=seed, aux_cols=aux_columns(ev.aux)),
                                encoder=self.encoder.id)
        return Scores(ev.per_query, summary, ev.aux)

    def _queries(self, images: list, identities, method, groups, query_ids, prompts
                 ) -> tuple[pd.DataFrame, dict[str, bytes]]:
        n = len(images)
        if not n:
            raise InputError("no images to score")
        gallery_groups = sorted({it.group for it in self.items})
        if groups is None:
            if len(gallery_groups) != 1:
                raise InputError(f"the gallery has {len(gallery_groups)} groups ({', '.join(gallery_groups[:5])})",
                                 hint="pass groups=... (one per image, or one for all)")
            groups = gallery_groups[0]
        blobs: dict[int, bytes] = {}
        paths = []
        for i, im in enumerate(images):
            if isinstance(im, (str, Path)):
                paths.append(str(im))
            else:
                blobs[i] = image_bytes(im, f"images[{i}]")
                paths.append(f"{MEMORY_PREFIX}/image-{i}")
        table = {"path": paths, "identity": _per_image(identities, n, "identities"),
                 "group": _per_image(groups, n, "groups"), "method": _per_image(method, n, "method"),
                 "prompt": _per_image(prompts or "", n, "prompts")}
        if query_ids is not None:
            table["query_id"] = _per_image(list(query_ids), n, "query_ids")
        qdf = inputs.normalize_queries(pd.DataFrame(table), where="images")
        return qdf, {qdf["path"].iloc[i]: b for i, b in blobs.items()}

    def _save(self, qdf: pd.DataFrame, data: dict[str, bytes], save_to, run: str | None, overwrite: bool,
              oracle: bool, scorers: list[str], seed: int, skip_missing: bool) -> Scores:
        """Store the run as ``fpr evaluate`` does (gallery and index by content), through ``run_query``."""
        ws = Workspace.open(self.workspace if save_to is True else save_to)
        if run and not overwrite and db.run_exists(ws, db.check_run_id(run)):
            raise ConflictError(f"run '{run}' already exists", where=str(ws.root),
                                hint="pass overwrite=True to replace it, or another run='...'")
        if self.folder is not None:
            gallery, _ = ensure_gallery(self.folder, self.spec, workspace=ws.root)
        elif db.gallery_exists(ws, self.gallery):
            gallery = self.gallery
        else:
            raise InputError(f"gallery '{self.gallery}' is not stored in the workspace to save to",
                             where=str(ws.root), hint="save_to=True saves to the gallery's own workspace")
        index, _ = ensure_index(gallery, self.encoder.id, workspace=ws.root, device=str(self.encoder.device),
                                batch_size=self.batch_size, workers=self.workers)
        if run is None:  # named by content, as fpr evaluate names its runs: the same cell again reads it back
            run = "eval-" + fingerprint({"images": [sha256_hex(data[p]) if p in data else file_sha256(p)
                                                    for p in qdf["path"]],
                                         "queries": qdf[["query_id", "method", "group", "identity", "prompt"]]
                                         .values.tolist(), "index": index, "version": db.get_index(ws, index).version,
                                         "settings": [self.scope, oracle, scorers, seed, skip_missing]},
                                        length=DIGEST_CHARS)
            if db.run_exists(ws, run) and not overwrite:
                require_current_index(ws, db.get_run(ws, run))
                res = load_run(run, workspace=ws.root)
                return Scores(res.per_query, res.summary, res.aux, res)
        res = run_query(index, qdf, run=run, workspace=ws.root, scope=self.scope, scorers=scorers, seed=seed,
                        skip_missing_identities=skip_missing, device=str(self.encoder.device),
                        batch_size=self.batch_size, workers=self.workers, overwrite=overwrite, oracle=oracle,
                        images=data)
        return Scores(res.per_query, res.summary, res.aux, res)


__all__ = ["Evaluator", "Scores", "image_bytes", "pythonic"]
