"""fpr: Finer-Personalization Rank — retrieval-based identity preservation for personalized generation.

The Python API is the CLI's: ``fpr.import_gallery``, ``fpr.build_index``, ``fpr.run_query``,
``fpr.report``, ``fpr.export_run``, ``fpr.embed``, ``fpr.sql``, ... (see :mod:`fpr.api`).
They are imported lazily so ``import fpr`` stays cheap.
"""
from __future__ import annotations

__version__ = "0.1.0"


def __getattr__(name: str):
    import importlib

    if name.startswith("__"):
        raise AttributeError(name)
    api = importlib.import_module("fpr.api")
    if name in api.__all__ or name in ("GallerySpec", "ImageRecord"):
        if name == "GallerySpec":
            from fpr.galleries.curate import GallerySpec

            return GallerySpec
        if name == "ImageRecord":
            from fpr.galleries.records import ImageRecord

            return ImageRecord
        return getattr(api, name)
    raise AttributeError(f"module 'fpr' has no attribute {name!r}")
