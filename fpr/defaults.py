"""Defaults and choice lists that several layers share, declared once (the CLI, the Python API and the
service read them here).

This module imports nothing: ``fpr --help`` and ``fpr --version`` build every command's options from it
without loading NumPy, pandas or DuckDB (tests/cli/test_startup.py checks that). The owning modules
re-export these names (``fpr.eval.relevance.SCOPES``, ``fpr.galleries.curate.SAMPLINGS``, ...).
A default that only one function uses stays in that function's signature.
"""
from __future__ import annotations

EMBED_BATCH_SIZE = 64  # images per embedding batch (decode + forward); CPU embeddings do not depend on it

SCOPES = ("group", "all")  # which gallery rows a query is ranked against (fpr.eval.relevance)
SAMPLINGS = ("random", "kmeans")  # how curation picks gallery images (fpr.galleries.curate)
# The named presets of fpr.galleries.datasets.presets.PRESETS (a test checks the two agree).
PRESET_NAMES = ("cars-official", "cars-paper", "cub-official", "cub-paper", "wildlife-official",
                "wildlife-official-ablation", "wildlife-paper")
# The named method profiles of the built-in world (fpr.galleries.world.methods.PROFILES, in its order; a test
# checks the two agree): `fpr demo --profile` offers them without importing the world (NumPy, PIL).
WORLD_PROFILES = ("dreambooth-like", "ip-adapter-plus-like", "emu2-like", "ominicontrol-like")
# What `fpr report` and the paper's tables show unless asked otherwise (Sim before mAP, as the paper).
DEFAULT_REPORT_METRICS = ("sim", "map", "cmc@1", "cmc@10")
# What the readable outputs (`fpr report` as a table, Markdown or LaTeX; the HTML summary) show unless asked:
# the paper's own columns, Sim and mAP per encoder; the machine formats (json, csv) keep the above and scorers.
READABLE_REPORT_METRICS = ("sim", "map")
# A summary row of fewer queries has no 95% interval: its bootstrap would cover the mean too rarely
# (measured in benchmarks/results/interval_coverage.md).
MIN_QUERIES_FOR_INTERVAL = 10
# The cut-off k of the per-query AP@k (summary MAP@k; fpr.metrics.ranking), a compile-time constant of the kernels.
AP_AT_K = 10

__all__ = ["AP_AT_K", "DEFAULT_REPORT_METRICS", "READABLE_REPORT_METRICS", "EMBED_BATCH_SIZE", "MIN_QUERIES_FOR_INTERVAL", "PRESET_NAMES", "SAMPLINGS", "SCOPES",
           "WORLD_PROFILES"]

# fpr explain's evidence variants (fpr.metrics.evidence) and the default, chosen on world seeds 100 and 101
# (benchmarks/results/explain_localization_calibration.md).
EXPLAIN_VARIANTS = ("true", "margin")
EXPLAIN_VARIANT = "true"
__all__ += ["EXPLAIN_VARIANT", "EXPLAIN_VARIANTS"]
