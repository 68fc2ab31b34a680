"""The store: the workspace folder and its lock (``workspace``), its DuckDB schema (``schema``: declared
once, migrated in order) and every SQL statement fpr runs (``records``). It sits on ``metrics`` (the
``query_results`` metric columns come from ``fpr.metrics.specs``) and the bottom modules (``errors``,
``progress``, ``settings``), and imports nothing above."""
from fpr.store.schema import SCHEMA_VERSION, TABLES, per_query_metrics
from fpr.store.workspace import Workspace, insert_df, resolve_workspace

__all__ = ["SCHEMA_VERSION", "TABLES", "Workspace", "insert_df", "per_query_metrics", "resolve_workspace"]
