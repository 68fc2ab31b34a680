"""Names and keys fpr derives: canonical fingerprints, keyed random streams, run ids, UTC timestamps.

One owner each, so the same inputs give the same key everywhere: a judge-cache entry,
a resumable parts folder, a bootstrap stream and a rendered world all use these.
"""
from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timezone
from typing import Any

import numpy as np


def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 kept as is; values JSON cannot hold are written with ``str``."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def fingerprint(obj: Any, *, length: int | None = None) -> str:
    """SHA-256 hex digest of :func:`canonical_json` (the first ``length`` characters if given)."""
    digest = hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()
    return digest if length is None else digest[:length]


def keyed_rng(*keys: Any) -> np.random.Generator:
    """A random stream determined by ``keys`` alone (``str`` of each, joined by ``|``).

    Streams keyed this way do not depend on how many numbers were drawn elsewhere, so a
    resampling, a sampled gallery or a rendered image is the same whatever else runs.
    """
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


__all__ = ["canonical_json", "fingerprint", "keyed_rng", "new_id", "query_set_key", "utc_now", "utc_now_precise"]
