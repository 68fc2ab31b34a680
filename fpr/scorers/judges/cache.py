"""Content-addressed store of judge requests and replies (JSON files, one per request).

A request's key is the SHA-256 of a canonical JSON of everything that decides the
reply: the model name, the prompt template id and version, the messages (images
replaced by their content digests), the tools offered and the sampling parameters.
Files live in ``<workspace>/judge-cache/<key[:2]>/<key>.json`` and are written
atomically (temp file + ``os.replace``), so an interrupted run leaves either a
complete entry or none, and a rerun resumes from what was stored. When no
workspace is known, the cache is ``$FPR_CACHE_DIR/judge-cache``.

Each entry carries the key of the code that made it (the prompt template's id and version) and a checksum
of its content (:func:`fpr.cache.seal`, the file form of :class:`fpr.cache.SqliteStore`'s checked rows,
issue #35). An entry that fails a check (not JSON, not an object, another request's key, another code's,
a checksum that differs, a reply that is not an object) is one warning, moved aside as ``*.damaged`` (kept
for inspection: it was a record) and the request is made again. An entry of the previous format (no
checksum) is read as before when its key and shape hold: it is the record of a sampled reply that cannot
be made again, so dropping it would change results; only its bytes' integrity is unchecked.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from fpr.cache import seal, set_aside, unsealed_damage
from fpr.errors import InputError
from fpr.files import atomic_write_text, cache_root


def default_root(workspace: Path | None) -> Path:
    if workspace is not None:
        return Path(workspace) / "judge-cache"
    return cache_root() / "judge-cache"


def write_json_atomic(path: Path, obj) -> None:
    """One cache entry, written through :mod:`fpr.files` (umask modes, one-line errors) and flushed to disk."""
    atomic_write_text(path, json.dumps(obj, ensure_ascii=False, indent=1, sort_keys=True), durable=True,
                      hint="set FPR_CACHE_DIR (or use a workspace) on a writable disk")


def read_json(path: Path):
    """The JSON in ``path``, or None when absent; a damaged file is an InputError naming it."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"damaged judge cache entry: {exc}", where=str(path),
                         hint="delete the file; the request is made again on the next run") from None


def read_sealed(path: Path, key: str, code: str, check: Callable[[dict], str | None] | None = None) -> dict | None:
    """The sealed entry (:func:`fpr.cache.seal`) in ``path`` for ``key`` made by ``code`` and passing
    ``check`` (a reason when it does not); None when absent or damaged: then one warning and the file moved
    aside as ``*.damaged``, the caller asking again."""
    try:
        entry = read_json(path)
    except InputError as exc:
        why = exc.what.removeprefix("damaged judge cache entry: ")
    else:
        if entry is None:
            return None
        why = unsealed_damage(key, code, entry)
        if why is None and check is not None:
            why = check(entry)
        if why is None:
            return entry
    set_aside(path, "judge-cache entry", why, "the request is made again")
    return None


class JudgeCache:
    """``get``/``put`` of JSON entries by key under one root folder."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str, code: str = "") -> dict | None:
        """The entry of ``key`` made by ``code``; None when absent or damaged (then one warning, the file
        moved aside, and the request is made again)."""
        return read_sealed(self.path(key), key, code,
                           lambda e: None if isinstance(e.get("reply"), dict) else "its reply is not an object")

    def put(self, key: str, entry: dict, code: str = "") -> None:
        write_json_atomic(self.path(key), seal(key, code, entry))
