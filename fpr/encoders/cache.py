"""An incremental, content-addressed embedding cache.

Layout: ``<root>/<key>/shard-*.npz`` where ``key`` is
:func:`fpr.encoders.registry.embedding_key` (encoder id + weights checksum +
preprocessing protocol). Each shard holds image content hashes and their float32
embeddings exactly as computed, so a cached vector equals the fresh one bit for
bit. Writers only ever add a new shard (temp file + rename, :mod:`fpr.files`), so
concurrent writers never clash and an interrupted run loses at most its unwritten
batch. Many small shards are merged by :meth:`EmbeddingCache.compact`.

A shard that cannot be read (truncated, not a zip, wrong arrays or dimension) is
reported once on stderr, renamed to ``*.damaged`` (so it is never read again and
stays available for inspection) and its images are simply embedded again.
An unwritable cache folder is one error naming it and ``FPR_CACHE_DIR``.
"""
from __future__ import annotations

import io
import json
import os
import uuid
import zipfile
from pathlib import Path

import numpy as np

from fpr import progress
from fpr.files import atomic_write_bytes, ensure_dir

COMPACT_AFTER_SHARDS = 64
CACHE_HINT = "set FPR_CACHE_DIR to a writable folder (or check the permissions and free space of this one)"


def default_cache_root() -> Path:
    return Path(os.environ.get("FPR_CACHE_DIR", Path.home() / ".cache" / "fpr")).expanduser() / "embeddings"


class EmbeddingCache:
    def __init__(self, key: str, dim: int, root: str | Path | None = None, meta: dict | None = None):
        self.key = key
        self.dim = dim
        self.dir = Path(root).expanduser() / key if root else default_cache_root() / key
        self._meta = meta or {}
        self._vectors: dict[str, np.ndarray] = {}
        self._seen_shards: set[str] = set()

    def _shards(self) -> list[Path]:
        if not self.dir.exists():
            return []
        return sorted(self.dir.glob("shard-*.npz"))

    def _refresh(self) -> None:
        for shard in self._shards():
            if shard.name in self._seen_shards:
                continue
            try:
                with np.load(shard, allow_pickle=False) as z:
                    hashes, vectors = z["hashes"], z["vectors"]
            except FileNotFoundError:  # merged away by a concurrent compaction
                continue
            except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
                self._set_aside(shard, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                continue
            if vectors.ndim != 2 or vectors.shape[1] != self.dim or hashes.shape != (len(vectors),):
                self._set_aside(shard, f"arrays of shape {hashes.shape} and {vectors.shape}, expected (n,) and "
                                       f"(n, {self.dim})")
                continue
            for h, v in zip(hashes.astype(str), vectors):
                self._vectors[h] = v
            self._seen_shards.add(shard.name)

    def _set_aside(self, shard: Path, reason: str) -> None:
        """Report a damaged shard once and rename it to ``*.damaged`` so that nobody reads it again."""
        target = shard.with_name(shard.name + ".damaged")
        try:
            os.replace(shard, target)
            moved = f"moved aside to {target.name}"
        except FileNotFoundError:  # another process set it aside first (and reported it)
            return
        except OSError as exc:
            moved = f"could not move it aside ({exc.strerror})"
        self._seen_shards.add(shard.name)
        progress.log(f"damaged embedding-cache shard {shard} ({reason}); {moved}; its images are recomputed")

    def __len__(self) -> int:
        self._refresh()
        return len(self._vectors)

    def get_many(self, hashes: list[str]) -> dict[str, np.ndarray]:
        self._refresh()
        return {h: self._vectors[h] for h in hashes if h in self._vectors}

    def add(self, hashes: list[str], vectors: np.ndarray) -> None:
        if not hashes:
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        assert vectors.shape == (len(hashes), self.dim), (vectors.shape, len(hashes), self.dim)
        ensure_dir(self.dir, hint=CACHE_HINT)
        meta_path = self.dir / "meta.json"
        if self._meta and not meta_path.exists():
            atomic_write_bytes(meta_path, json.dumps(self._meta, indent=2, sort_keys=True).encode(), hint=CACHE_HINT)
        name = f"shard-{uuid.uuid4().hex}.npz"
        self._write_shard(self.dir / name, hashes, vectors)
        for h, v in zip(hashes, vectors):
            self._vectors[h] = v
        self._seen_shards.add(name)
        if len(self._shards()) > COMPACT_AFTER_SHARDS:
            self.compact()

    def _write_shard(self, path: Path, hashes: list[str], vectors: np.ndarray) -> None:
        buf = io.BytesIO()
        np.savez(buf, hashes=np.asarray(hashes, dtype="S64"), vectors=vectors)
        atomic_write_bytes(path, buf.getvalue(), hint=CACHE_HINT)

    def compact(self) -> None:
        """Merge all shards into one; readers that race with it just re-read."""
        self._refresh()
        old = self._shards()
        if len(old) <= 1:
            return
        hashes = list(self._vectors)
        vectors = np.stack([self._vectors[h] for h in hashes]) if hashes else np.zeros((0, self.dim), np.float32)
        name = f"shard-{uuid.uuid4().hex}.npz"
        self._write_shard(self.dir / name, hashes, vectors)
        for shard in old:
            shard.unlink(missing_ok=True)
        self._seen_shards = {name}

