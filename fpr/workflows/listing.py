"""``fpr runs``: the stored runs, read without loading the evaluation pipeline.

A module of its own because ``fpr.workflows.runs`` imports the pipeline, pandas and the Ray
engine; listing needs only the store (DuckDB), so ``fpr runs`` starts in a fraction of that
(tests/cli/test_startup.py checks which modules it imports; benchmarks/bench_startup.py times it).
"""
from __future__ import annotations

from pathlib import Path

from fpr.store import records as db
from fpr.store.workspace import Workspace


def list_runs(*, workspace: str | Path | None = None) -> list[dict]:
    """One row per stored run (a multi-encoder run: one per encoder), oldest first."""
    return db.list_runs(Workspace.open(workspace))


__all__ = ["list_runs"]
