"""Per-query rows shaped as the store declares them, their extra columns, and the rankings table.
"""
from __future__ import annotations

import json
from typing import Sequence

import numpy as np
import pandas as pd

from fpr.eval.inputs import extra_columns
from fpr.metrics.ranking import top_k
from fpr.store.schema import TABLES, per_query_metrics


def query_frame(qdf: pd.DataFrame, status: np.ndarray, hashes: Sequence[str | None]) -> pd.DataFrame:
    """Rows of ``query_results`` (metrics empty) plus the queries' extra columns, in input order."""
    extras = extra_columns(qdf)
    df = pd.DataFrame({"query_id": qdf["query_id"].to_numpy(), "row_number": qdf["row_number"].to_numpy(),
                       "path": qdf["path"].to_numpy(), "content_hash": list(hashes),
                       "method": qdf["method"].to_numpy(), "identity": qdf["identity"].to_numpy(),
                       "group": qdf["group"].to_numpy(), "prompt": qdf["prompt"].to_numpy(),
                       "reference_paths": qdf["reference_paths"].to_numpy(), "status": np.asarray(status, object)})
    for col in per_query_metrics():
        df[col.name] = np.nan
    df["n_references"] = np.nan
    df["sim_source"] = None
    df["extra"] = [json.dumps({c: _jsonable(v) for c, v in row.items()}, default=str) for row in extra_rows(qdf, extras)]
    for c in extras:
        df[c] = qdf[c].to_numpy()
    return df


def extra_rows(qdf: pd.DataFrame, extras: Sequence[str]) -> list[dict]:
    """Per query: its values of the ``extras`` columns, each the very object ``qdf[c].iloc[i]`` gives (numpy
    scalars for numpy columns, the dtype's NA for missing ones), read from each column's array once: one
    ``qdf[c]`` and one ``iloc`` per cell cost 0.7 s per 1,000 queries with four extra columns."""
    arrays = [(c, qdf[c].array) for c in extras]
    return [{c: a[i] for c, a in arrays} for i in range(len(qdf))]


def _jsonable(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


def stored_columns(per_query: pd.DataFrame, run_id: str) -> pd.DataFrame:
    """The ``query_results`` rows of an evaluation (declared columns only)."""
    names = TABLES["query_results"].names
    out = per_query.rename(columns={"group": "group_name"}).assign(run_id=run_id)
    return out[names]


def expand_extras(per_query: pd.DataFrame) -> pd.DataFrame:
    """Stored rows back to the evaluation's shape: ``group`` and the extra columns as columns."""
    df = per_query.rename(columns={"group_name": "group"})
    extras = [json.loads(e) if isinstance(e, str) and e else {} for e in df.get("extra", [])]
    for key in sorted({k for e in extras for k in e}):
        if key not in df.columns:
            df[key] = [e.get(key) for e in extras]
    return df


def empty_aux() -> pd.DataFrame:
    return pd.DataFrame({"query_id": pd.Series(dtype=object), "scorer": pd.Series(dtype=object),
                         "metric": pd.Series(dtype=object), "value": pd.Series(dtype=float),
                         "note": pd.Series(dtype=object)})


def empty_rankings() -> pd.DataFrame:
    return pd.DataFrame({"query_id": pd.Series(dtype=object), "rank": pd.Series(dtype=np.int64),
                         "item_id": pd.Series(dtype=np.int64), "score": pd.Series(dtype=float),
                         "relevant": pd.Series(dtype=bool)})


def rankings_frame(query_ids: np.ndarray, scores: np.ndarray, relevant: np.ndarray, item_ids: np.ndarray,
                   k: int) -> pd.DataFrame:
    if k <= 0 or not len(query_ids):
        return empty_rankings()
    idx, val = top_k(scores, k)
    rows_q, rows_r = np.nonzero(idx >= 0)
    cols = idx[rows_q, rows_r]
    return pd.DataFrame({"query_id": query_ids[rows_q], "rank": rows_r + 1, "item_id": item_ids[cols],
                         "score": val[rows_q, rows_r].astype(np.float64), "relevant": relevant[rows_q, cols]})
