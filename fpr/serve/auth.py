"""Bearer tokens from ``FPR_API_TOKENS_FILE``: one ``token [name] [scope=read|submit|admin]`` per line.

The file is re-read whenever it changes (mtime, size or inode), so removing a line
revokes a token without a restart. Tokens are compared with :func:`hmac.compare_digest`
against every known token (no early exit that would leak which prefix matched).
The name (or a short hash when a line has none) identifies the caller in logs,
per-token limits and run ownership; the token itself is never logged or stored.

Scopes grow: ``read`` (listings, status, results), ``submit`` (also queue runs and
delete or cancel the caller's own runs), ``admin`` (also delete or cancel anyone's run,
CLI runs included). A line without ``scope=`` is ``submit``: today's token files keep
working for everything but deleting other callers' runs. Without a token file
(loopback only) the one local user is ``admin``.
"""
from __future__ import annotations

import hmac
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from fpr import keys

ANONYMOUS = "anonymous"
SCOPES = ("read", "submit", "admin")  # each includes the ones before it
DEFAULT_SCOPE = "submit"


class AuthError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the token line's name, its scope and a fingerprint of the token (never the token)."""

    name: str
    scope: str
    token_id: str | None = None

    def can(self, scope: str) -> bool:
        return SCOPES.index(self.scope) >= SCOPES.index(scope)

    def require(self, scope: str, action: str) -> None:
        if not self.can(scope):
            raise AuthError(403, f"token '{self.name}' has scope '{self.scope}'; {action} needs scope '{scope}' "
                                 "(set 'scope=' on its line in FPR_API_TOKENS_FILE)")


LOCAL_USER = Caller(ANONYMOUS, "admin")


@dataclass(frozen=True)
class _Entry:
    token: bytes
    name: str
    scope: str | None  # None: the line names an unknown scope; the token is refused, never guessed
    raw_scope: str = ""


def token_id(token: str | bytes) -> str:
    data = token if isinstance(token, bytes) else token.encode()
    return keys.sha256_hex(data)[:8]


def parse_tokens(text: str) -> list[_Entry]:
    entries = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        token, rest = parts[0], parts[1:]
        raw_scope = ""
        if rest and rest[-1].startswith("scope="):
            raw_scope = rest.pop()[len("scope="):]
        scope = raw_scope if raw_scope in SCOPES else (DEFAULT_SCOPE if not raw_scope else None)
        name = " ".join(rest) or "token-" + token_id(token)
        entries.append(_Entry(token.encode(), name, scope, raw_scope))
    return entries


class TokenStore:
    """``check(header)`` -> the :class:`Caller`, or :class:`AuthError` (401 missing, 403 wrong or revoked)."""

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

    def check(self, header: str | None) -> Caller:
        if self.path is None:
            return LOCAL_USER
        if not header:
            raise AuthError(401, "missing Authorization header; send 'Authorization: Bearer <token>'")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError(401, "Authorization must be 'Bearer <token>'")
        given = token.strip().encode()
        with self._lock:
            self._reload()
            entries = list(self._entries)
        found = None
        for e in entries:
            if hmac.compare_digest(given, e.token) and found is None:
                found = e
        if found is None:
            raise AuthError(403, "token not accepted (unknown or revoked)")
        if found.scope is None:
            raise AuthError(403, f"token '{found.name}' names an unknown scope '{found.raw_scope[:20]}' in the token "
                                 f"file; use one of {', '.join(SCOPES)}")
        return Caller(found.name, found.scope, token_id(given))
