"""fpr: Finer-Personalization Rank — retrieval-based identity preservation for personalized generation.

The Python API is the CLI's: ``fpr.import_gallery``, ``fpr.build_index``, ``fpr.run_query``,
``fpr.report``, ``fpr.export_run``, ``fpr.embed``, ``fpr.sql``, ... Every name of
:data:`fpr.api.PUBLIC` is an attribute of this package (resolved on first use, so
``import fpr`` stays cheap) and is listed by ``dir(fpr)``.
"""
from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def _api():
    # import_module, not "from fpr import api": the latter asks this module's __getattr__ first
    from fpr.registry import import_module

    return import_module("fpr.api")


def __getattr__(name: str) -> Any:
    api = _api()
    if name not in api.PUBLIC:  # submodules and everything else: the normal import machinery
        raise AttributeError(f"module 'fpr' has no attribute {name!r}")
    return getattr(api, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_api().PUBLIC))
