"""Requests from web pages are refused, and every response carries security headers.

Tokens travel in an ``Authorization`` header that a foreign page cannot set without a CORS
preflight, which this service never grants. On loopback *without* a token file nothing
else stands between a page the user visits and the service, so:

* ``Host`` must be a loopback name (``localhost``, ``127.0.0.1``, ``[::1]``, any port): a DNS
  rebinding page reaches the service under its own host name and is refused;
* ``Origin``, when a browser sends one, must be the service's own origin (``http://`` + the
  ``Host`` it was sent to) or one listed in ``FPR_SERVE_ORIGINS``: a form POST from another
  page is refused. This holds with tokens too (a page has no business calling the API).

Every response gets ``Content-Security-Policy`` (nothing loads unless a route says so),
``X-Content-Type-Options: nosniff``, ``X-Frame-Options: DENY`` and ``Referrer-Policy: no-referrer``.
"""
from __future__ import annotations

import json

from fpr.serve.config import is_loopback

API_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
SECURITY_HEADERS = ((b"content-security-policy", API_CSP.encode()), (b"x-content-type-options", b"nosniff"),
                    (b"x-frame-options", b"DENY"), (b"referrer-policy", b"no-referrer"),
                    (b"cross-origin-resource-policy", b"same-origin"))


def host_name(host: str) -> str:
    """``Host`` header value without its port (``[::1]:8080`` -> ``::1``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def refusal(host: str | None, origin: str | None, *, loopback_only: bool, origins: frozenset[str]) -> str | None:
    """Why a request with these headers is refused, or None."""
    if loopback_only and not (host and is_loopback(host_name(host))):
        return (f"Host '{(host or '')[:80]}' is not a loopback name; this server has no token file and answers "
                "only http://127.0.0.1 or http://localhost (set FPR_API_TOKENS_FILE to serve other names)")
    if origin is not None and origin not in origins and origin.lower() not in _own_origins(host):
        return (f"requests from web pages at Origin '{origin[:80]}' are refused; add it to FPR_SERVE_ORIGINS "
                "to allow it")
    return None


def _own_origins(host: str | None) -> set[str]:
    return {f"http://{host}".lower(), f"https://{host}".lower()} if host else set()


class PageGuard:
    """ASGI middleware: Host/Origin checks (403 with a one-line reason) and security headers on every answer."""

    def __init__(self, app, *, loopback_only: bool, origins: frozenset[str] = frozenset()):
        self.app = app
        self.loopback_only = loopback_only
        self.origins = origins

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        why = refusal(headers.get(b"host"), headers.get(b"origin"), loopback_only=self.loopback_only,
                      origins=self.origins)

        async def send_secured(message):
            if message["type"] == "http.response.start":
                have = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = list(message.get("headers", [])) + [
                    (k, v) for k, v in SECURITY_HEADERS if k not in have]
            await send(message)

        if why is None:
            return await self.app(scope, receive, send_secured)
        body = json.dumps({"error": why}).encode()
        await send_secured({"type": "http.response.start", "status": 403,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
        await send_secured({"type": "http.response.body", "body": body})
