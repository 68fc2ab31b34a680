"""Errors as ``{"error": "<one line>"}`` with the status of their kind; never a traceback or a server path."""
from __future__ import annotations

import sys
import traceback

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from fpr.errors import BusyError, ConflictError, FprError, InputError, LimitError, NotFoundError
from fpr.serve.auth import AuthError
from fpr.serve.log import log_line
from fpr.serve.uploads import UploadError

ERROR_STATUS = ((InputError, 422), (NotFoundError, 404), (ConflictError, 409), (BusyError, 503), (LimitError, 429))


def error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    """Register the handlers; messages pass through the context's scrub (no server folders in answers)."""

    def scrub(request: Request, text: str) -> str:
        return request.app.state.ctx.scrub(text)

    @app.exception_handler(FprError)
    async def fpr_error(request: Request, exc: FprError):
        status = next((s for cls, s in ERROR_STATUS if isinstance(exc, cls)), 422)
        return error(status, scrub(request, exc.one_line()))

    @app.exception_handler(UploadError)
    async def upload_error(request: Request, exc: UploadError):
        return error(exc.status, scrub(request, exc.message))

    @app.exception_handler(AuthError)
    async def auth_error(request: Request, exc: AuthError):
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return error(exc.status, exc.message, headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return error(exc.status_code, scrub(request, str(exc.detail)), getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()))
        return error(422, f"invalid request: {where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception):
        # A bug: the traceback goes to the server's log; the client gets the kind only (its text may hold paths).
        traceback.print_exc(file=sys.stderr)
        log_line(event="internal_error", method=request.method, path=request.url.path, error=type(exc).__name__)
        return error(500, f"internal error ({type(exc).__name__}); the server's log has the details")
