"""fpr: Finer-Personalization Rank — retrieval-based identity preservation for personalized generation.

The Python API is the CLI's: ``fpr.import_gallery``, ``fpr.build_index``, ``fpr.run_query``,
``fpr.report``, ``fpr.export_run``, ``fpr.embed``, ``fpr.sql``, ... (see :mod:`fpr.api`).
They are imported lazily so ``import fpr`` stays cheap.
"""
from __future__ import annotations

__version__ = "0.1.0"

_API_NAMES = frozenset({
    "GalleryInfo", "IndexInfo", "RunResult", "import_gallery", "curate_gallery", "read_manifest", "read_folder",
    "list_galleries", "show_gallery", "gallery_items", "build_index", "list_indices", "load_index", "run_query",
    "report", "list_runs", "export_run", "embed", "sql", "compare", "score_run", "ablate", "filter_queries",
    "GallerySpec", "ImageRecord",
})


def __getattr__(name: str):
    import importlib

    if name not in _API_NAMES:  # submodules and everything else: the normal import machinery
        raise AttributeError(f"module 'fpr' has no attribute {name!r}")
    api = importlib.import_module("fpr.api")
    if name in _API_NAMES:
        if name == "GallerySpec":
            from fpr.galleries.curate import GallerySpec

            return GallerySpec
        if name == "ImageRecord":
            from fpr.galleries.records import ImageRecord

            return ImageRecord
        return getattr(api, name)
    raise AttributeError(f"module 'fpr' has no attribute {name!r}")
