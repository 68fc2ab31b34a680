"""Exact inner-product FAISS indices over L2-normalised gallery embeddings.

An index folder holds ``index.faiss`` (always a CPU index), ``item_ids.npy``
(gallery item id of each FAISS row), ``references.npy`` + ``reference_ids.npy``
(the reference-set embeddings, for pairwise Sim) and ``card.json``. The card
records what the vectors mean (encoder, weights checksum, preprocessing, gallery
fingerprint, dim, library versions); loading checks it so an index is never
searched with vectors from another encoder or against another gallery.
Search runs on a GPU when FAISS sees one, on the CPU otherwise.
"""
from __future__ import annotations

import json
import re
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from fpr.errors import ConflictError, FprError, InputError, NotFoundError
from fpr.files import atomic_write_dir
from fpr.index import exact

CARD_VERSION = 1
# Card fields added after fpr 0.1.0; cards written before them load with this value.
UNKNOWN = "unknown"


def _faiss():
    try:
        import faiss
    except ImportError:
        raise FprError("FAISS is not installed", hint="pip install 'fpr[cpu]' (or 'fpr[gpu]' on CUDA machines)") \
            from None
    return faiss


@dataclass
class IndexCard:
    name: str
    gallery: str
    gallery_fingerprint: str
    encoder: str
    weights_checksum: str
    preprocessing: str
    dim: int
    n_items: int
    n_references: int
    metric: str = "inner_product"
    faiss_type: str = "IndexFlatIP"
    versions: dict = field(default_factory=dict)
    built_on: str = "cpu"
    card_version: int = CARD_VERSION
    # Provenance of the vectors (fpr > 0.1.0): the device class that embedded them (cpu/cuda/mps), the
    # numeric precision of the forward pass (fp32/bf16/fp16) and the embedding-cache key of encoder +
    # weights + protocol + device + precision. Cards from fpr 0.1.0 lack them: "unknown".
    device: str = UNKNOWN
    precision: str = UNKNOWN
    embedding_key: str = UNKNOWN
    # The search index for top-k lookups: "flat" (exact, the default and what 0.1 cards mean), or an
    # approximate "ivf"/"hnsw" index stored next to the flat one (AP always uses the flat vectors).
    index_type: str = "flat"
    nlist: int = 0  # IVF: number of lists
    nprobe: int = 0  # IVF: lists visited per query
    hnsw_m: int = 0  # HNSW: neighbours per node
    ef_search: int = 0  # HNSW: search breadth
    recall_k: int = 0  # the k recall was measured at
    recall_at_k: float | None = None  # mean |approx top-k ∩ flat top-k| / k over recall_queries gallery vectors
    recall_queries: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)


class GalleryIndex:
    def __init__(self, card: IndexCard, index, item_ids: np.ndarray, ref_vectors: np.ndarray,
                 ref_ids: np.ndarray, approx=None):
        self.card = card
        self.index = index
        self.item_ids = np.asarray(item_ids, dtype=np.int64)
        self.ref_vectors = np.asarray(ref_vectors, dtype=np.float32)
        self.ref_ids = np.asarray(ref_ids, dtype=np.int64)
        self._search_index = None
        self.approx = approx  # an IVF or HNSW index over the same rows, for top-k lookups
        self._approx_search = None
        self._norms: np.ndarray | None = None

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def _searcher(self):
        if self._search_index is None:
            self._search_index = _to_gpu(self.index)
        return self._search_index

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, gallery item ids) per query; ids are -1 where fewer than k exist."""
        scores, rows = self.search_rows(queries, k)
        ids = np.where(rows >= 0, self.item_ids[np.clip(rows, 0, None)], -1)
        return scores, ids

    def search_rows(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, FAISS rows) per query from the search index: the approximate one
        (IVF/HNSW) when the index has one, the exact flat one otherwise; rows are -1 padded."""
        q = self._check(queries)
        k = min(k, self.ntotal)
        if self.approx is not None:
            return self._approx_searcher().search(q, k)
        return self._searcher().search(q, k)

    @property
    def exact_search(self) -> bool:
        """True when :meth:`search_rows` is exhaustive (a flat index)."""
        return self.approx is None

    def _approx_searcher(self):
        if self._approx_search is None:
            self._approx_search = _to_gpu(self.approx) if self.card.index_type == "ivf" else self.approx
        return self._approx_search

    def _check(self, queries: np.ndarray) -> np.ndarray:
        q = np.ascontiguousarray(queries, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != self.card.dim:
            raise ConflictError(f"query vectors have dim {q.shape[-1]}, index '{self.card.name}' has {self.card.dim}")
        return q

    def vectors(self) -> np.ndarray:
        """The stored gallery vectors (FAISS row order), read-only.

        A flat index is viewed in place (no second copy of a large gallery in memory)."""
        if getattr(self, "_vectors", None) is None:
            if not self.ntotal:
                self._vectors = np.zeros((0, self.card.dim), np.float32)
            elif hasattr(self.index, "get_xb"):
                faiss = _faiss()
                view = faiss.rev_swig_ptr(self.index.get_xb(), self.ntotal * self.card.dim)
                self._vectors = np.asarray(view).reshape(self.ntotal, self.card.dim)
                self._vectors.flags.writeable = False
            else:
                self._vectors = self.index.reconstruct_n(0, self.ntotal)
        return self._vectors

    def norms(self) -> np.ndarray:
        """(ntotal,) float64 norms of :meth:`vectors`, kept for :func:`fpr.index.exact.exact_scores`."""
        if self._norms is None:
            self._norms = exact.norms(self.vectors())
        return self._norms

    def all_scores(self, queries: np.ndarray) -> np.ndarray:
        """(Q, ntotal) scores in FAISS row order: the full ranking, not a top-k.

        The exact scores of :mod:`fpr.index.exact` (float32 of the exact inner product), so they
        do not depend on the BLAS kernel, its threads or the other queries of the call. FAISS's own
        float32 search scores may differ from them in the last bits.
        """
        return exact.exact_scores(self._check(queries), self.vectors(), vector_norms=self.norms())


def gpu_available() -> bool:
    faiss = _faiss()
    return hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0


class _GpuIndex:
    """A FAISS GPU index together with the resources it needs alive."""

    def __init__(self, index, resources):
        self.index, self.resources = index, resources

    def search(self, q, k):
        return self.index.search(q, k)


_GPU_RESOURCES = []  # one StandardGpuResources per process, shared by every GPU index (per-group sub-indices)


def _to_gpu(index):
    """The index on GPU 0 when FAISS sees a GPU, else the CPU index itself."""
    if not gpu_available():
        return index
    faiss = _faiss()
    if not _GPU_RESOURCES:
        _GPU_RESOURCES.append(faiss.StandardGpuResources())
    res = _GPU_RESOURCES[0]
    return _GpuIndex(faiss.index_cpu_to_gpu(res, 0, index), res)


def flat_searcher(vectors: np.ndarray):
    """An exact inner-product searcher over ``vectors`` (a subset of a gallery), GPU when available:
    ``searcher.search(q, k) -> (scores, local rows)``."""
    faiss = _faiss()
    v = np.ascontiguousarray(vectors, dtype=np.float32)
    index = faiss.IndexFlatIP(v.shape[1])
    index.add(v)
    return _to_gpu(index)


def _set_search_params(index, card: IndexCard) -> None:
    """The card's query-time parameters on a CPU approximate index (copied along to a GPU)."""
    if card.index_type == "hnsw":
        index.hnsw.efSearch = card.ef_search
    elif card.index_type == "ivf":
        index.nprobe = card.nprobe


INDEX_TYPES = ("flat", "ivf", "hnsw")
RECALL_K = 10
RECALL_QUERIES = 1000


def build(vectors: np.ndarray, item_ids: np.ndarray, ref_vectors: np.ndarray, ref_ids: np.ndarray,
          card: IndexCard, *, index_type: str = "flat", seed: int = 0) -> GalleryIndex:
    """Build the exact flat index and, for ``index_type`` ivf/hnsw, an approximate search index
    over the same rows whose recall@k against the flat one is measured and written in the card."""
    faiss = _faiss()
    if index_type not in INDEX_TYPES:
        raise InputError(f"unknown index type '{index_type}'", hint=f"valid: {', '.join(INDEX_TYPES)}")
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[1] != card.dim:
        raise ValueError(f"vectors {vectors.shape} do not match dim {card.dim}")
    index = faiss.IndexFlatIP(card.dim)
    index.add(vectors)
    card.n_items = int(index.ntotal)
    card.n_references = int(len(ref_ids))
    card.versions = {**library_versions(), **card.versions}
    card.built_on = "cuda" if gpu_available() else "cpu"
    card.index_type = index_type
    approx = None
    if index_type != "flat" and len(vectors):
        approx = _build_approx(vectors, card, index_type)
        _measure_recall(index, approx, vectors, card, seed)
    elif index_type != "flat":
        card.index_type = "flat"  # nothing to approximate
    return GalleryIndex(card, index, item_ids, ref_vectors.reshape(-1, card.dim), ref_ids, approx)


def _build_approx(vectors: np.ndarray, card: IndexCard, index_type: str):
    faiss = _faiss()
    n, d = vectors.shape
    if index_type == "ivf":
        card.nlist = card.nlist or int(max(1, min(round(4 * np.sqrt(n)), n // 39 or 1)))
        card.nprobe = min(card.nlist, card.nprobe or max(1, card.nlist // 8))
        quantizer = faiss.IndexFlatIP(d)
        approx = faiss.IndexIVFFlat(quantizer, d, card.nlist, faiss.METRIC_INNER_PRODUCT)
        approx.train(vectors)
        approx.add(vectors)
    else:
        card.hnsw_m = card.hnsw_m or 32
        card.ef_search = card.ef_search or 64
        approx = faiss.IndexHNSWFlat(d, card.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        approx.hnsw.efConstruction = 80
        approx.add(vectors)
    _set_search_params(approx, card)
    return approx


def _measure_recall(flat, approx, vectors: np.ndarray, card: IndexCard, seed: int) -> None:
    """recall@k = mean over sampled gallery vectors (as queries) of |approx top-k ∩ flat top-k| / k."""
    n = len(vectors)
    k = min(RECALL_K, n)
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(n, size=min(RECALL_QUERIES, n), replace=False))
    q = vectors[sample]
    _, exact = flat.search(q, k)
    _, got = approx.search(q, k)
    hits = sum(len(set(a[a >= 0].tolist()) & set(b.tolist())) for a, b in zip(got, exact))
    card.recall_k, card.recall_queries = int(k), int(len(sample))
    card.recall_at_k = float(hits / (k * len(sample)))


def save(gi: GalleryIndex, folder: Path) -> None:
    """Write atomically (:func:`fpr.files.atomic_write_dir`): a temp folder renamed over the old one."""
    faiss = _faiss()

    def fill(tmp: Path) -> None:
        faiss.write_index(gi.index, str(tmp / "index.faiss"))
        if gi.approx is not None:
            faiss.write_index(gi.approx, str(tmp / "approx.faiss"))
        np.save(tmp / "item_ids.npy", gi.item_ids)
        np.save(tmp / "references.npy", gi.ref_vectors)
        np.save(tmp / "reference_ids.npy", gi.ref_ids)
        (tmp / "card.json").write_text(gi.card.to_json())

    atomic_write_dir(Path(folder), fill)


class _Damaged(Exception):
    def __init__(self, file: str, reason: str):
        super().__init__(reason)
        self.file, self.reason = file, reason


def _damaged(folder: Path, name: str, card: dict | None, file: str, reason: str) -> ConflictError:
    card = card or {}
    parts = [f"--gallery {card['gallery']}" if isinstance(card.get("gallery"), str) else "--gallery GALLERY",
             f"--encoder {card['encoder']}" if isinstance(card.get("encoder"), str) else "--encoder ENCODER"]
    return ConflictError(f"index '{name}' is damaged ({folder / file}): {reason}",
                         hint=f"rebuild it with 'fpr index build {' '.join(parts)} --name {name} --overwrite'")


# A version folder (fpr/index/versions.py: indices/<name>/v<UTC time>-<hex>/) is named by its index's folder.
_VERSION_FOLDER = re.compile(r"^v\d{8}T\d{6}-[0-9a-f]{8}$")


def _index_name(folder: Path) -> str:
    return folder.parent.name if _VERSION_FOLDER.match(folder.name) else folder.name


def read_card(folder: Path, *, name: str | None = None) -> IndexCard:
    """The card of an index folder; a damaged one is one ConflictError naming the file.

    ``name``: the index's name for messages when the card cannot say it (default: the folder's
    name, or its parent's for a version folder).
    """
    folder = Path(folder)
    name = name or _index_name(folder)
    card_path = folder / "card.json"
    if not card_path.exists():
        raise NotFoundError("index folder has no card.json", where=str(folder),
                            hint="rebuild it with 'fpr index build'")
    raw = None
    try:
        raw = json.loads(card_path.read_text(encoding="utf-8"))
        return _card_from_dict(raw)
    except _Damaged as exc:
        raise _damaged(folder, name, raw if isinstance(raw, dict) else None, "card.json", exc.reason) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _damaged(folder, name, None, "card.json", f"not valid JSON ({exc})") from None


def _card_from_dict(raw) -> IndexCard:
    if not isinstance(raw, dict):
        raise _Damaged("card.json", f"expected a JSON object, found {type(raw).__name__}")
    known = {f.name: f for f in fields(IndexCard)}
    required = [n for n, f in known.items() if f.default is MISSING and f.default_factory is MISSING]
    missing = [k for k in required if k not in raw]
    unknown = sorted(k for k in raw if k not in known)
    if missing:
        raise _Damaged("card.json", f"missing key(s) {', '.join(missing)}")
    if unknown:
        raise _Damaged("card.json", f"unknown key(s) {', '.join(unknown)} (written by a newer fpr, or edited)")
    types = {"dim": int, "n_items": int, "n_references": int, "versions": dict}
    wrong = [k for k, t in types.items() if k in raw and (not isinstance(raw[k], t) or isinstance(raw[k], bool))]
    wrong += [k for k in ("name", "gallery", "encoder", "weights_checksum", "gallery_fingerprint")
              if not isinstance(raw[k], str)]
    if wrong:
        raise _Damaged("card.json", f"key(s) of the wrong type: {', '.join(wrong)}")
    return IndexCard(**raw)


def load(folder: Path, *, encoder: str | None = None, gallery_fingerprint: str | None = None,
         weights_checksum: str | None = None, name: str | None = None) -> GalleryIndex:
    """Load and check an index folder.

    A missing, corrupt or truncated file, a card that is not what fpr writes, or arrays whose
    lengths disagree with the FAISS index and the card is one ConflictError: "index 'NAME' is
    damaged (FILE): why; rebuild it with 'fpr index build ... --overwrite'".
    """
    faiss = _faiss()
    folder = Path(folder)
    card = read_card(folder, name=name)
    if encoder is not None and encoder != card.encoder:
        raise ConflictError(f"index '{card.name}' was built with encoder '{card.encoder}', not '{encoder}'",
                            hint=f"query without --encoder, or build an index with 'fpr index build --encoder {encoder}'")
    if gallery_fingerprint is not None and gallery_fingerprint != card.gallery_fingerprint:
        raise ConflictError(f"index '{card.name}' no longer matches gallery '{card.gallery}' (it changed since)",
                            hint=f"rebuild it: fpr index build --gallery {card.gallery} --encoder {card.encoder} "
                                 f"--name {card.name} --overwrite")
    if weights_checksum is not None and weights_checksum != card.weights_checksum:
        raise ConflictError(f"encoder '{card.encoder}' weights changed since index '{card.name}' was built",
                            hint="rebuild the index, or pass --weights with the original file")
    try:
        return _read_arrays(faiss, folder, card)
    except _Damaged as exc:
        raise _damaged(folder, card.name, asdict(card), exc.file, exc.reason) from None


def _read_arrays(faiss, folder: Path, card: IndexCard) -> GalleryIndex:
    path = folder / "index.faiss"
    if not path.is_file():
        raise _Damaged("index.faiss", "file is missing")
    try:
        index = faiss.read_index(str(path))
    except RuntimeError as exc:  # FAISS reports every read failure (truncated, not an index) as RuntimeError
        # "Error in <C++ signature> at <file>:<line>: <reason>": keep the reason
        first = (str(exc).splitlines() or [""])[0]
        reason = first.split(": ", 1)[1] if first.startswith("Error in") and ": " in first else first
        raise _Damaged("index.faiss", f"FAISS cannot read it ({reason.strip()[:160] or 'truncated or corrupt'})"
                       ) from None
    if index.d != card.dim:
        raise _Damaged("index.faiss", f"vectors of dim {index.d} but the card says {card.dim}")
    if index.ntotal != card.n_items:
        raise _Damaged("index.faiss", f"{index.ntotal} vectors but the card says {card.n_items}")
    item_ids = _read_npy(folder, "item_ids.npy", (card.n_items,), "i")
    refs = _read_npy(folder, "references.npy", (card.n_references, card.dim), "f")
    ref_ids = _read_npy(folder, "reference_ids.npy", (card.n_references,), "i")
    approx = None
    if card.index_type != "flat":
        approx = _read_approx(faiss, folder, card)
    return GalleryIndex(card, index, item_ids, refs, ref_ids, approx)


def _read_approx(faiss, folder: Path, card: IndexCard):
    path = folder / "approx.faiss"
    if not path.is_file():
        raise _Damaged("approx.faiss", f"file is missing (the card says a {card.index_type} search index)")
    try:
        approx = faiss.read_index(str(path))
    except RuntimeError as exc:
        raise _Damaged("approx.faiss", f"FAISS cannot read it ({str(exc).splitlines()[0][:160]})") from None
    if approx.d != card.dim or approx.ntotal != card.n_items:
        raise _Damaged("approx.faiss", f"{approx.ntotal} vectors of dim {approx.d}, the card says "
                                       f"{card.n_items} of dim {card.dim}")
    _set_search_params(approx, card)
    return approx


def _read_npy(folder: Path, name: str, shape: tuple[int, ...], kind: str) -> np.ndarray:
    path = folder / name
    if not path.is_file():
        raise _Damaged(name, "file is missing")
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise _Damaged(name, f"not a readable array ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
                       ) from None
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in (kind, "u" if kind == "i" else kind):
        raise _Damaged(name, f"holds {getattr(arr, 'dtype', type(arr).__name__)}, not "
                             f"{'integer ids' if kind == 'i' else 'float vectors'}")
    if arr.shape != shape:
        raise _Damaged(name, f"shape {arr.shape} does not match the index ({shape})")
    return arr


# version key -> the distributions that may provide it (first one installed wins)
_DISTRIBUTIONS = {"numpy": ("numpy",), "torch": ("torch",),
                  "faiss": ("faiss-cpu", "faiss-gpu", "faiss-gpu-cu12", "faiss-gpu-cu11", "faiss"),
                  "duckdb": ("duckdb",), "timm": ("timm",), "open_clip": ("open_clip_torch", "open-clip-torch"),
                  "PIL": ("pillow", "Pillow")}


def library_versions() -> dict:
    """Versions of the libraries results depend on, read from package metadata (importing torch,
    timm or open_clip just to read a version string costs seconds)."""
    import platform
    import sys
    from importlib import metadata

    import fpr

    versions = {"python": sys.version.split()[0], "platform": platform.platform(), "fpr": fpr.__version__}
    for key, dists in _DISTRIBUTIONS.items():
        for dist in dists:
            try:
                versions[key] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return versions
