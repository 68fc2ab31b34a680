"""The service's log: one JSON object per line on stderr (never a token, never a request body)."""
from __future__ import annotations

import json
import sys
import time

from fpr import keys


def log_line(**fields) -> None:
    fields = {"ts": keys.utc_now_log(), **fields}
    sys.stderr.write(json.dumps(fields, default=str) + "\n")
    sys.stderr.flush()


class RequestLog:
    """ASGI middleware: one JSON log line per request (method, path, status, ms, client, caller name)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        scope.setdefault("state", {})
        t0 = time.perf_counter()
        status = {"code": None}

        async def send_status(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            client = scope.get("client")
            log_line(event="request", method=scope["method"], path=scope["path"], status=status["code"],
                     ms=round((time.perf_counter() - t0) * 1000, 1), client=client[0] if client else None,
                     user=scope["state"].get("user"))
