"""``fpr runs``: the stored runs, read without loading the evaluation pipeline.

A module of its own because ``fpr.workflows.runs`` imports the pipeline, pandas and the Ray
engine; listing needs only the store (DuckDB), so ``fpr runs`` starts in a fraction of that
(tests/cli/test_startup.py checks which modules it imports; benchmarks/bench_startup.py times it).
"""
from __future__ import annotations

import json
from pathlib import Path

from fpr import keys
from fpr.errors import NotFoundError
from fpr.store import records as db
from fpr.store.workspace import Workspace


def list_runs(*, workspace: str | Path | None = None) -> list[dict]:
    """One row per stored run (a multi-encoder run: one per encoder), oldest first."""
    return db.list_runs(Workspace.open(workspace))


def require_workspace(workspace: str | Path | None = None) -> Path:
    """The workspace's folder if it holds an fpr workspace; else one line naming the path and what to do
    (a listing of a misspelt workspace would print an empty table and succeed)."""
    ws = Workspace.open(workspace)
    if not ws.exists:
        raise NotFoundError("no fpr workspace here", where=str(ws.root.resolve()),
                            hint="check --workspace (or FPR_WORKSPACE) for a typo; 'fpr gallery import' or 'fpr demo' "
                                 "creates one")
    return ws.root


def run_content_version(run: str, *, workspace: str | Path | None = None) -> str | None:
    """A short hash of what a run's reports are made of (its stored rows, those of its encoders' runs
    ``run@encoder``, and its auxiliary scores); None when no such run is stored. A run replaced with
    ``--overwrite`` or rescored gets a new one (the service keys its report files by it)."""
    from fpr.render.cells import to_jsonable

    ws = Workspace.open(workspace)
    rows = [r for r in db.list_runs(ws) if r["run_id"] == run or r["run_id"].startswith(run + "@")]
    if not rows:
        return None
    aux = db.aux_score_digests(ws, [r["run_id"] for r in rows])
    stamp = json.dumps([to_jsonable(rows), to_jsonable(aux.astype(str).to_dict("records"))], sort_keys=True)
    return keys.sha256_hex(stamp)[:16]


__all__ = ["list_runs", "require_workspace", "run_content_version"]
