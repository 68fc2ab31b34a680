"""The queries table, read one way: label columns as text, paths resolved against the file's folder,
query ids filled and checked, reference lists parsed; other columns kept as extras.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from fpr.errors import InputError
from fpr.tables import read_table, resolve_path, split_paths

QUERY_COLUMNS = ("path", "identity", "group", "method")


TEXT_COLUMNS = (*QUERY_COLUMNS, "query_id", "prompt", "reference_paths", "sim_reference")


# Columns a queries table may carry that are not "extra" (kept and exported as they came).
_BASE = {"query_id", "row_number", "path", "method", "identity", "group", "prompt", "reference_paths",
         "reference_list", "sim_reference"}


def normalize_queries(queries: str | Path | pd.DataFrame, *, base: Path | None = None, id_offset: int = 0,
                      required: Sequence[str] = QUERY_COLUMNS, where: str | None = None) -> pd.DataFrame:
    """Read and normalise a queries table (the one place that does it).

    Label and path columns become stripped text; other columns keep their type and
    are carried as extras. Paths resolve against ``base`` (default: the file's folder,
    or the current directory for a DataFrame). Missing query ids are ``q<row>`` with
    rows counted from ``id_offset`` (chunked readers pass their offset).
    """
    if isinstance(queries, pd.DataFrame):
        df = queries.copy()
        where = where or "queries"
        base = base or Path.cwd()
        missing = [c for c in required if c not in df.columns]
        if missing:
            raise InputError(f"queries lack required column(s) {', '.join(missing)}", where=where,
                             hint=f"required: {', '.join(required)}; found: {', '.join(map(str, df.columns))}")
    else:
        p = Path(queries)
        df = read_table(p, required=tuple(required), what="queries file")
        where = where or str(p)
        base = base or p.resolve().parent
    df.columns = [str(c).strip() for c in df.columns]
    for c in [c for c in TEXT_COLUMNS if c in df.columns]:
        if c == "reference_paths" and df[c].map(lambda v: isinstance(v, (list, tuple))).any():
            continue
        df[c] = df[c].map(_text)
    for c in ("method", "prompt", "reference_paths", "sim_reference"):
        if c not in df.columns:
            df[c] = ""
    df["path"] = [resolve_path(v, base) for v in df["path"]]
    if "query_id" not in df.columns or (df["query_id"] == "").all():
        df["query_id"] = [f"q{id_offset + i:06d}" for i in range(len(df))]
    blank = np.flatnonzero((df["query_id"] == "").to_numpy())
    if len(blank):
        raise InputError(f"query_id is empty in row {int(blank[0]) + 2}", where=where,
                         hint="give every row a query_id, or leave the whole column empty to number them")
    dup = df["query_id"][df["query_id"].duplicated()]
    if len(dup):
        raise InputError(f"query_id '{dup.iloc[0]}' appears more than once", where=where)
    df["reference_list"] = [split_paths(v, base) for v in df["reference_paths"]]
    df["reference_paths"] = [";".join(r) for r in df["reference_list"]]
    df["sim_reference"] = [resolve_path(v, base) if v else "" for v in df["sim_reference"]]
    df["row_number"] = np.arange(id_offset, id_offset + len(df))
    return df.reset_index(drop=True)


def _text(v) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return ""
    return str(v).strip()


def extra_columns(qdf: pd.DataFrame) -> list[str]:
    return [c for c in qdf.columns if c not in _BASE]


def check_query_files(qdf: pd.DataFrame, queries: str | Path | pd.DataFrame,
                      in_memory: Mapping[str, bytes] | None = None) -> None:
    """Every query image exists, checked before a model loads: the first missing one is one line naming its
    row, the path as resolved, and the folder relative paths resolve against (the queries file's own).
    A path that stands for an image held in memory (``in_memory``) is there by definition."""
    held = in_memory or {}
    missing = [i for i, p in enumerate(qdf["path"]) if p not in held and not Path(p).is_file()]
    if not missing:
        return
    first = missing[0]
    if isinstance(queries, pd.DataFrame):
        where, base = "queries", "the current directory"
    else:
        where, base = str(queries), f"the queries file's folder, {Path(queries).resolve().parent}"
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    raise InputError(f"query image not found: {qdf['path'].iloc[first]} (row {int(qdf['row_number'].iloc[first]) + 2}"
                     f"{', query ' + str(qdf['query_id'].iloc[first]) if 'query_id' in qdf else ''}){more}",
                     where=where, hint=f"relative paths resolve against {base}; fix the path, or pass "
                                       "--skip-unreadable to skip such queries with their reason")
