"""Bearer tokens from ``FPR_API_TOKENS_FILE``: one ``token [name] [scope=read|submit|admin]`` per line.

One strict grammar (:data:`GRAMMAR`): fields in that order, the name one word, comments only as whole
lines; any other line refuses the whole file at start, naming the line (:func:`parse_tokens`).
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
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from fpr import keys
from fpr.errors import InputError

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
    scope: str


def token_id(token: str | bytes) -> str:
    data = token if isinstance(token, bytes) else token.encode()
    return keys.sha256_hex(data)[:8]


TOKEN_RE = re.compile(r"[A-Za-z0-9\-._~+/]+=*")  # RFC 6750 b64token: what a Bearer header may carry
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
SCOPE_VALUE_RE = re.compile(r"[A-Za-z0-9_-]{1,20}")  # shown back in the error; anything else is not echoed
GRAMMAR = ("each line is 'token [name] [scope=read|submit|admin]' (fields in that order, separated by spaces or "
           "tabs; token: letters, digits and - . _ ~ + / then optional = padding; name: one word of letters, "
           "digits and . _ @ - up to 64 characters), a blank line, or a comment line starting with #")


def _line_problem(fields: list[str]) -> str | None:
    """Why the fields of one non-comment line break the grammar, or None. Never quotes the token (a secret)."""
    token, rest = fields[0], fields[1:]
    if not TOKEN_RE.fullmatch(token):
        return "its token (field 1) holds a character a Bearer token cannot carry"
    if any("#" in f for f in rest):
        return "a comment must be a whole line starting with #, not follow the fields"
    if any(f.startswith("scope=") for f in rest[:-1]):
        return "scope= must be the last field"
    if rest and rest[-1].startswith("scope="):
        value = rest.pop()[len("scope="):]
        if value not in SCOPES:
            shown = f" '{value}'" if SCOPE_VALUE_RE.fullmatch(value) else ""
            return f"unknown scope{shown}; use one of {', '.join(SCOPES)}"
    if len(rest) > 1:
        return f"{len(rest)} name fields; a name is one word (the fields are token, name, scope=)"
    if rest and not NAME_RE.fullmatch(rest[0]):
        return "its name (field 2) must be one word of letters, digits and . _ @ - (up to 64, starting with a " \
               "letter or digit)"
    return None


def parse_tokens(text: str, *, where: str = "FPR_API_TOKENS_FILE") -> list[_Entry]:
    """The entries of a token file, or InputError naming the first line that breaks the one grammar (:data:`GRAMMAR`).

    Lines end at \\n (a \\r before it is dropped); spaces and tabs around a line are ignored; any other control or
    non-ASCII character is refused, as is a token that appears on two lines. A malformed line is never half-used:
    the whole file is refused."""
    entries: list[_Entry] = []
    seen: dict[str, int] = {}
    for n, raw in enumerate(text.split("\n"), 1):
        body = (raw[:-1] if raw.endswith("\r") else raw).strip(" \t")
        if not body or body.startswith("#"):
            continue
        fields = re.split(r"[ \t]+", body)
        if any(not (" " <= c <= "~" or c == "\t") for c in body):
            problem = "a control or non-ASCII character"
        else:
            problem = _line_problem(list(fields))
        if problem is None and fields[0] in seen:
            problem = f"the same token as line {seen[fields[0]]}"
        if problem is not None:
            raise InputError(f"token file line {n}: {problem}", where=where, hint=GRAMMAR)
        token = fields[0]
        seen[token] = n
        scope = fields[-1][len("scope="):] if len(fields) > 1 and fields[-1].startswith("scope=") else DEFAULT_SCOPE
        name = fields[1] if len(fields) > 1 and not fields[1].startswith("scope=") else "token-" + token_id(token)
        entries.append(_Entry(token.encode(), name, scope))
    return entries


class TokenStore:
    """``check(header)`` -> the :class:`Caller`, or :class:`AuthError` (401 missing, 403 wrong or revoked, 503 while
    the token file breaks its grammar).

    At start a malformed file is refused (InputError naming the line). Edited into a malformed state while the
    server runs, it refuses every token until it is fixed (one log line says which line): never a scope from a
    line that breaks the grammar, and never the old file's tokens (an edit may have been a revocation)."""

    def __init__(self, path: Path | None, *, on_malformed=None):
        self.path = path
        self._stamp: tuple | None = None
        self._entries: list[_Entry] = []
        self._malformed: str | None = None
        self._on_malformed = on_malformed or (lambda message: None)
        self._lock = threading.Lock()
        if path is not None:
            self._reload(strict=True)

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def _reload(self, strict: bool = False) -> None:
        assert self.path is not None
        try:
            st = os.stat(self.path)
        except OSError:  # the file was removed: every token is revoked
            self._entries, self._stamp, self._malformed = [], None, None
            return
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self._entries = parse_tokens(self.path.read_text(encoding="utf-8", errors="replace"),
                                         where=str(self.path))
            self._malformed = None
        except InputError as exc:
            if strict:
                raise
            self._entries, self._malformed = [], exc.what
            self._on_malformed(exc.one_line())

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
            entries, malformed = list(self._entries), self._malformed
        if malformed is not None:
            raise AuthError(503, f"the server's token file is malformed ({malformed.split(':')[0]}); every token is "
                                 "refused until its administrator fixes it")
        found = None
        for e in entries:
            if hmac.compare_digest(given, e.token) and found is None:
                found = e
        if found is None:
            raise AuthError(403, "token not accepted (unknown or revoked)")
        return Caller(found.name, found.scope, token_id(given))
