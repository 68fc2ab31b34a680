"""A content-addressed embedding cache that stays fast at millions of vectors.

Layout: ``<root>/<key>/vectors.sqlite`` where ``key`` is
:func:`fpr.encoders.registry.embedding_key` (encoder id + weights checksum +
preprocessing protocol + device class + precision), plus ``meta.json``. One table,
``vectors(hash TEXT PRIMARY KEY, vec BLOB) WITHOUT ROWID``: the image content hash and
its float32 embedding bytes exactly as computed, so a cached vector equals the fresh
one bit for bit.

Why SQLite: it ships with Python (no new dependency, on every platform), a lookup
or insert of a batch is a B-tree probe per hash (O(batch log N): flat in practice,
nothing is loaded whole), several processes may write at once (WAL journal, a busy
timeout, ``INSERT OR IGNORE`` so racing writers of the same image agree), and a
transaction either commits whole or not at all, so ``kill -9`` mid-write loses at
most the uncommitted batch. LMDB needs a map size fixed in advance and a compiled
dependency; DuckDB lets only one process open a database for writing; sharded
arrays with our own index would re-implement what SQLite's B-tree and journal do.

The store is :class:`fpr.cache.SqliteStore` with :mod:`fpr.cache`'s one failure policy: damage is
reported, never fatal (a database SQLite cannot read is reported once on stderr, renamed to ``*.damaged``
and replaced by a fresh one; a row that fails its checks (its checksum, the embedding key that made it,
its vector's size) is reported, deleted and recomputed; a row of the format before issue #35, without a
checksum, is a quiet miss),
and a cache folder that cannot be written is one warning naming it and ``FPR_CACHE_DIR``, the images
being embedded without the cache (before issue #36 this one failed the run while the score and world
caches warned). Caches written by earlier fpr versions (``shard-*.npz``) are imported on first use and
their shards removed; a shard that cannot be read is reported and set aside the same way.
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np

from fpr.cache import SqliteStore, set_aside
from fpr.errors import InputError
from fpr.files import atomic_write_bytes, cache_root

DB_NAME = "vectors.sqlite"
CACHE_HINT = "set FPR_CACHE_DIR to a writable folder (or check the permissions and free space of this one)"
RECOMPUTE = "its images are recomputed"


def default_cache_root() -> Path:
    return cache_root() / "embeddings"


class EmbeddingCache:
    def __init__(self, key: str, dim: int, root: str | Path | None = None, meta: dict | None = None):
        self.key = key
        self.dim = dim
        self.dir = Path(root).expanduser() / key if root else default_cache_root() / key
        self.path = self.dir / DB_NAME
        self._meta = meta or {}
        self.store = SqliteStore(self.path, what="embedding cache", hint=CACHE_HINT, table="vectors", key="hash",
                                 value="vec", value_type="BLOB", going_on="embedding without it",
                                 recompute=RECOMPUTE)
        self._lock = self.store.lock
        self._imported = False

    def close(self) -> None:
        self.store.close()

    # ------------------------------------------------------------------ legacy shards (fpr <= 0.1)

    def _legacy_shards(self) -> list[Path]:
        return sorted(self.dir.glob("shard-*.npz")) if self.dir.is_dir() else []

    def _import_legacy_shards(self) -> None:
        if self._imported:
            return
        self._imported = True
        for shard in self._legacy_shards():
            try:
                with np.load(shard, allow_pickle=False) as z:
                    hashes, vectors = z["hashes"], z["vectors"]
            except FileNotFoundError:  # imported by a concurrent process
                continue
            except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
                set_aside(shard, "embedding-cache shard",
                          f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", RECOMPUTE)
                continue
            if vectors.ndim != 2 or vectors.shape[1] != self.dim or hashes.shape != (len(vectors),):
                set_aside(shard, "embedding-cache shard", f"arrays of shape {hashes.shape} and {vectors.shape}, "
                                                          f"expected (n,) and (n, {self.dim})", RECOMPUTE)
                continue
            self.store.put_many(zip([h.decode() if isinstance(h, bytes) else str(h) for h in hashes.astype("S64")],
                                    (v.tobytes() for v in np.ascontiguousarray(vectors, dtype=np.float32))),
                                self.key)
            if self.store.usable:
                shard.unlink(missing_ok=True)

    def _ready(self, *, create: bool) -> bool:
        """Whether the store can be read (or, with ``create``, written); legacy shards imported first."""
        if not create and not self.path.exists() and not self._legacy_shards():
            return False
        if self.store.connect(create=True if (create or self._legacy_shards()) else False) is None:
            return False
        self._import_legacy_shards()
        return True

    # ------------------------------------------------------------------ reads and writes

    def __len__(self) -> int:
        with self._lock:
            return self.store.count() if self._ready(create=False) else 0

    def get_many(self, hashes: list[str]) -> dict[str, np.ndarray]:
        """Cached vectors of ``hashes`` (those present): O(len(hashes)) probes, whatever the cache size."""
        if not hashes:
            return {}
        with self._lock:
            if not self._ready(create=False):
                return {}
            return self.store.get_many(hashes, self.key, self._decode)

    def _decode(self, blob) -> np.ndarray:
        if not isinstance(blob, bytes) or len(blob) != 4 * self.dim:
            raise ValueError(f"vector(s) not of {self.dim} float32 values")
        return np.frombuffer(blob, dtype=np.float32)

    def add(self, hashes: list[str], vectors: np.ndarray) -> None:
        """Insert a batch in one transaction (first writer of a hash wins; racing writers agree). A cache that
        cannot be written is one warning, then bypassed: the vectors were computed and the run goes on."""
        if not hashes:
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        assert vectors.shape == (len(hashes), self.dim), (vectors.shape, len(hashes), self.dim)
        with self._lock:
            if not self.store.usable:
                return
            meta_path = self.dir / "meta.json"
            if self._meta and not meta_path.exists():
                try:
                    atomic_write_bytes(meta_path, json.dumps(self._meta, indent=2, sort_keys=True).encode(),
                                       hint=CACHE_HINT)
                except InputError as exc:
                    self.store.fail(exc.what + (f" ({exc.where})" if exc.where else ""))
                    return
            if self._ready(create=True):
                self.store.put_many(zip(hashes, (v.tobytes() for v in vectors)), self.key)

    def compact(self) -> None:
        """Fold the write-ahead log into the database (SQLite keeps itself compact otherwise)."""
        with self._lock:
            if self._ready(create=False):
                self.store.checkpoint()
