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

Damage is reported, never fatal: a database SQLite cannot read is reported once on
stderr, renamed to ``*.damaged`` (kept for inspection) and replaced by a fresh one;
a row whose vector has the wrong size is reported, deleted and recomputed. Caches
written by earlier fpr versions (``shard-*.npz``) are imported on first use and their
shards removed; a shard that cannot be read is reported and set aside the same way.
An unwritable cache folder is one error naming it and ``FPR_CACHE_DIR``.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import zipfile
from pathlib import Path

import numpy as np

from fpr import progress
from fpr.files import atomic_write_bytes, cache_root, ensure_dir, open_shared_db, write_error

DB_NAME = "vectors.sqlite"
BUSY_TIMEOUT_S = 60.0
LOOKUP_CHUNK = 500  # hashes per SELECT (well under SQLite's bound-parameter limit)
CACHE_HINT = "set FPR_CACHE_DIR to a writable folder (or check the permissions and free space of this one)"
_SCHEMA = "CREATE TABLE IF NOT EXISTS vectors (hash TEXT PRIMARY KEY, vec BLOB NOT NULL) WITHOUT ROWID"


def default_cache_root() -> Path:
    return cache_root() / "embeddings"


class EmbeddingCache:
    def __init__(self, key: str, dim: int, root: str | Path | None = None, meta: dict | None = None):
        self.key = key
        self.dim = dim
        self.dir = Path(root).expanduser() / key if root else default_cache_root() / key
        self.path = self.dir / DB_NAME
        self._meta = meta or {}
        self._con: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ connection

    def _connect(self, *, create: bool) -> sqlite3.Connection | None:
        """The connection; None when reading a cache that does not exist yet."""
        if self._con is not None:
            return self._con
        if not create and not self.path.exists() and not self._legacy_shards():
            return None
        if create:
            ensure_dir(self.dir, hint=CACHE_HINT)
        try:
            self._con = self._open()
        except sqlite3.DatabaseError as exc:
            self._set_aside(self.path, _reason(exc))
            self._con = self._open()
        self._import_legacy_shards()
        return self._con

    def _open(self) -> sqlite3.Connection:
        try:
            return open_shared_db(self.path, _SCHEMA, "vectors", BUSY_TIMEOUT_S)
        except sqlite3.OperationalError as exc:
            if "unable to open" not in str(exc):
                raise
            raise write_error(self.path, OSError(str(exc)), CACHE_HINT, "cannot open the embedding cache") from None

    def close(self) -> None:
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    def _set_aside(self, path: Path, reason: str) -> None:
        """Report a damaged cache file once and rename it to ``*.damaged`` so that nobody reads it again."""
        target = path.with_name(path.name + ".damaged")
        try:
            os.replace(path, target)
            moved = f"moved aside to {target.name}"
        except FileNotFoundError:  # another process set it aside first (and reported it)
            return
        except OSError as exc:
            moved = f"could not move it aside ({exc.strerror})"
        if path.name == DB_NAME:
            for suffix in ("-wal", "-shm"):
                Path(str(path) + suffix).unlink(missing_ok=True)
        what = "shard" if path.suffix == ".npz" else "database"
        progress.log(f"damaged embedding-cache {what} {path} ({reason}); {moved}; its images are recomputed")

    # ------------------------------------------------------------------ legacy shards (fpr <= 0.1)

    def _legacy_shards(self) -> list[Path]:
        return sorted(self.dir.glob("shard-*.npz")) if self.dir.is_dir() else []

    def _import_legacy_shards(self) -> None:
        for shard in self._legacy_shards():
            try:
                with np.load(shard, allow_pickle=False) as z:
                    hashes, vectors = z["hashes"], z["vectors"]
            except FileNotFoundError:  # imported by a concurrent process
                continue
            except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
                self._set_aside(shard, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                continue
            if vectors.ndim != 2 or vectors.shape[1] != self.dim or hashes.shape != (len(vectors),):
                self._set_aside(shard, f"arrays of shape {hashes.shape} and {vectors.shape}, expected (n,) and "
                                       f"(n, {self.dim})")
                continue
            self._insert([h.decode() if isinstance(h, bytes) else str(h) for h in hashes.astype("S64")],
                         np.ascontiguousarray(vectors, dtype=np.float32))
            shard.unlink(missing_ok=True)

    # ------------------------------------------------------------------ reads and writes

    def __len__(self) -> int:
        with self._lock:
            con = self._connect(create=False)
            return 0 if con is None else int(con.execute("SELECT count(*) FROM vectors").fetchone()[0])

    def get_many(self, hashes: list[str]) -> dict[str, np.ndarray]:
        """Cached vectors of ``hashes`` (those present): O(len(hashes)) probes, whatever the cache size."""
        if not hashes:
            return {}
        with self._lock:
            con = self._connect(create=False)
            if con is None:
                return {}
            out: dict[str, np.ndarray] = {}
            bad: list[str] = []
            uniq = list(dict.fromkeys(hashes))
            nbytes = 4 * self.dim
            rows = []
            try:
                for s in range(0, len(uniq), LOOKUP_CHUNK):
                    part = uniq[s:s + LOOKUP_CHUNK]
                    rows += con.execute(f"SELECT hash, vec FROM vectors WHERE hash IN ({','.join('?' * len(part))})",
                                        part).fetchall()
            except sqlite3.DatabaseError as exc:
                if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                    raise
                self._con.close()
                self._con = None
                self._set_aside(self.path, _reason(exc))
                return {}
            for h, blob in rows:
                if isinstance(blob, bytes) and len(blob) == nbytes:
                    out[h] = np.frombuffer(blob, dtype=np.float32)
                else:
                    bad.append(h)
            if bad:
                con.executemany("DELETE FROM vectors WHERE hash = ?", [(h,) for h in bad])
                progress.log(f"damaged embedding-cache entr{'y' if len(bad) == 1 else 'ies'} in {self.path} "
                             f"({len(bad)} vector(s) not of {self.dim} float32 values, e.g. {bad[0]}); removed; "
                             "their images are recomputed")
            return out

    def add(self, hashes: list[str], vectors: np.ndarray) -> None:
        """Insert a batch in one transaction (first writer of a hash wins; racing writers agree)."""
        if not hashes:
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        assert vectors.shape == (len(hashes), self.dim), (vectors.shape, len(hashes), self.dim)
        with self._lock:
            ensure_dir(self.dir, hint=CACHE_HINT)
            meta_path = self.dir / "meta.json"
            if self._meta and not meta_path.exists():
                atomic_write_bytes(meta_path, json.dumps(self._meta, indent=2, sort_keys=True).encode(),
                                   hint=CACHE_HINT)
            self._connect(create=True)
            self._insert(list(hashes), vectors)

    def _insert(self, hashes: list[str], vectors: np.ndarray) -> None:
        con = self._con
        assert con is not None
        try:
            con.execute("BEGIN IMMEDIATE")
            con.executemany("INSERT OR IGNORE INTO vectors (hash, vec) VALUES (?, ?)",
                            zip(hashes, (v.tobytes() for v in vectors)))
            con.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise write_error(self.path, OSError(str(exc)), CACHE_HINT, "cannot write the embedding cache") from None

    def compact(self) -> None:
        """Fold the write-ahead log into the database (SQLite keeps itself compact otherwise)."""
        with self._lock:
            con = self._connect(create=False)
            if con is not None:
                con.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
