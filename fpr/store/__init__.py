"""The store: the workspace folder, its DuckDB schema (declared once, migrated in order)
and every SQL statement fpr runs. The bottom layer: it imports nothing of fpr's but
``errors`` and ``progress``."""
from fpr.store.schema import SCHEMA_VERSION, TABLES, per_query_metrics
from fpr.store.workspace import Workspace, insert_df, resolve_workspace

__all__ = ["SCHEMA_VERSION", "TABLES", "Workspace", "insert_df", "per_query_metrics", "resolve_workspace"]
