"""Content-addressed store of judge requests and replies (JSON files, one per request).

A request's key is the SHA-256 of a canonical JSON of everything that decides the
reply: the model name, the prompt template id and version, the messages (images
replaced by their content digests), the tools offered and the sampling parameters.
Files live in ``<workspace>/judge-cache/<key[:2]>/<key>.json`` and are written
atomically (temp file + ``os.replace``), so an interrupted run leaves either a
complete entry or none, and a rerun resumes from what was stored. When no
workspace is known, the cache is ``$FPR_CACHE_DIR/judge-cache``.
"""
from __future__ import annotations

import json
from pathlib import Path

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


class JudgeCache:
    """``get``/``put`` of JSON entries by key under one root folder."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        return read_json(self.path(key))

    def put(self, key: str, entry: dict) -> None:
        write_json_atomic(self.path(key), entry)
