"""Names and keys fpr derives: canonical fingerprints, content digests, keyed random streams, run ids,
random suffixes and timestamps.

One owner each, so the same inputs give the same key everywhere: a judge-cache entry, a score-cache key,
a resumable parts folder, a bootstrap stream and a rendered world all use these. ``hashlib``, ``uuid`` and
``datetime.now`` appear in this module only (``tests/test_ownership.py``); every recipe below keeps the
exact bytes of the key it replaced, so caches and stored fingerprints stay valid.
"""
from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 kept as is; values JSON cannot hold are written with ``str``."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def fingerprint(obj: Any, *, length: int | None = None) -> str:
    """SHA-256 hex digest of :func:`canonical_json` (the first ``length`` characters if given)."""
    digest = hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()
    return digest if length is None else digest[:length]


def sha256_hex(data: bytes | str) -> str:
    """SHA-256 hex digest of ``data`` (text as UTF-8): image contents, tokens, stamps."""
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def json_digest(obj: Any, *, default: Any = str) -> str:
    """SHA-256 hex digest of ``json.dumps(obj, sort_keys, compact, ASCII-escaped)``: the score and world
    caches' key recipe (unlike :func:`fingerprint`, non-ASCII text is escaped; ``default`` for other values)."""
    return sha256_hex(json.dumps(obj, sort_keys=True, separators=(",", ":"), default=default))


def row_checksum(key: str, code: str, value: Any) -> str | None:
    """A cache row's checksum: the first 32 hex characters of the SHA-256 of its key, the key of the code
    that made it and its value's bytes (text as UTF-8); None for a value that is neither bytes nor text (a
    row damaged into a number: it can match no checksum)."""
    if isinstance(value, str):
        value = value.encode("utf-8")
    elif not isinstance(value, (bytes, memoryview)):
        return None
    h = hashlib.sha256(f"{key}\0{code}\0".encode("utf-8"))
    h.update(value)
    return h.hexdigest()[:32]


def hasher() -> Any:
    """An incremental SHA-256 (``update(bytes)``, ``hexdigest()``) for digests built piece by piece."""
    return hashlib.sha256()


def file_sha256(path: Any, *, chunk: int = 1 << 20) -> str:
    """SHA-256 hex digest of a file's bytes, read in ``chunk``-byte pieces (weights of any size)."""
    h = hashlib.sha256()
    with open(path, "rb") as fp:
        for part in iter(lambda: fp.read(chunk), b""):
            h.update(part)
    return h.hexdigest()


def random_hex(n: int = 8) -> str:
    """``n`` random hex characters: the unique part of a temporary or set-aside name."""
    return uuid.uuid4().hex[:n]


def utc_stamp(fmt: str) -> str:
    """The current UTC time in ``fmt`` (``strftime``): index version names."""
    return datetime.now(timezone.utc).strftime(fmt)


def keyed_rng(*keys: Any) -> np.random.Generator:
    """A random stream determined by ``keys`` alone (``str`` of each, joined by ``|``).

    Streams keyed this way do not depend on how many numbers were drawn elsewhere, so a
    resampling, a sampled gallery or a rendered image is the same whatever else runs.
    """
    import numpy as np  # here, not at the top: files and settings import this module without NumPy

    digest = hashlib.sha256("|".join(str(k) for k in keys).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def query_set_key(query_ids: Any) -> str:
    """A key of a *set* of query ids (order and repeats ignored): the bootstrap stream of a summary is keyed
    by it, so the same queries get the same interval in whichever row, run or report they appear."""
    return fingerprint(sorted({str(q) for q in query_ids}), length=16)


def utc_now() -> str:
    """The current UTC time to the second, ISO 8601 with ``Z`` (what runs, cards and replies record)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def utc_now_precise() -> str:
    """The current UTC time to the microsecond, ISO 8601 with ``Z`` (ordering of events in logs and jobs)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_id(prefix: str, *, random_hex: int = 4) -> str:
    """``<prefix>-YYYYmmdd-HHMMSS-<hex>``: the default name of a run, an ablation or an upload."""
    return f"{prefix}-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:random_hex]}"


def utc_now_log() -> str:
    """The current UTC time to the millisecond, ISO 8601 with ``Z`` (the service's log lines)."""
    return utc_now_precise()[:-4] + "Z"


__all__ = ["canonical_json", "file_sha256", "fingerprint", "hasher", "json_digest", "keyed_rng", "new_id", "query_set_key",
           "random_hex", "row_checksum", "sha256_hex", "utc_now", "utc_now_log", "utc_now_precise", "utc_stamp"]
