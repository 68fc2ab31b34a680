"""Bearer tokens from ``FPR_API_TOKENS_FILE``: one ``token [name]`` per line, ``#`` comments.

The file is re-read whenever it changes (mtime, size or inode), so removing a line
revokes a token without a restart. Tokens are compared with :func:`hmac.compare_digest`
against every known token (no early exit that would leak which prefix matched).
The name (or a short hash when a line has none) identifies the caller in logs and
per-token limits; the token itself is never logged or stored.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import threading
from dataclasses import dataclass
from pathlib import Path

ANONYMOUS = "anonymous"


class AuthError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class _Entry:
    token: bytes
    name: str


def _name_for(token: str) -> str:
    return "token-" + hashlib.sha256(token.encode()).hexdigest()[:8]


def parse_tokens(text: str) -> list[_Entry]:
    entries = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        token = parts[0]
        name = parts[1].strip() if len(parts) > 1 and parts[1].strip() else _name_for(token)
        entries.append(_Entry(token.encode(), name))
    return entries


class TokenStore:
    """``check(header)`` -> the caller's name, or :class:`AuthError` (401 missing, 403 wrong or revoked)."""

    def __init__(self, path: Path | None):
        self.path = path
        self._stamp: tuple | None = None
        self._entries: list[_Entry] = []
        self._lock = threading.Lock()
        if path is not None:
            self._reload()

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def _reload(self) -> None:
        assert self.path is not None
        try:
            st = os.stat(self.path)
        except OSError:  # the file was removed: every token is revoked
            self._entries, self._stamp = [], None
            return
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp != self._stamp:
            self._entries = parse_tokens(self.path.read_text(encoding="utf-8", errors="replace"))
            self._stamp = stamp

    def check(self, header: str | None) -> str:
        if self.path is None:
            return ANONYMOUS
        if not header:
            raise AuthError(401, "missing Authorization header; send 'Authorization: Bearer <token>'")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError(401, "Authorization must be 'Bearer <token>'")
        given = token.strip().encode()
        with self._lock:
            self._reload()
            entries = list(self._entries)
        name = None
        for e in entries:
            if hmac.compare_digest(given, e.token) and name is None:
                name = e.name
        if name is None:
            raise AuthError(403, "token not accepted (unknown or revoked)")
        return name
