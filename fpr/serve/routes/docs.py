"""``/docs`` (and ``/``, which leads there): the API described from ``/openapi.json`` by a page shipped in the package (no CDN, works offline)."""
from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from fpr.errors import NotFoundError

router = APIRouter(include_in_schema=False)
# The page's own script and style only; it may call the API on its own origin.
DOCS_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
            "frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
ASSETS = {"docs.html": "text/html; charset=utf-8", "docs.js": "text/javascript; charset=utf-8",
          "docs.css": "text/css; charset=utf-8"}


def _asset(name: str) -> Response:
    if name not in ASSETS:
        raise NotFoundError(f"no file '{name[:40]}' in /docs")
    data = resources.files("fpr.serve").joinpath("static", name).read_bytes()
    return Response(data, media_type=ASSETS[name], headers={"Content-Security-Policy": DOCS_CSP,
                                                             "Cache-Control": "no-cache"})


@router.get("/")
def index_page() -> RedirectResponse:
    """The service's root leads to its documentation page (it answered 404)."""
    return RedirectResponse("/docs", status_code=307)


@router.get("/docs")
def docs_page() -> Response:
    return _asset("docs.html")


@router.get("/docs/{name}")
def docs_asset(name: str) -> Response:
    return _asset(name)
