"""fpr.eval.frames.extra_rows: the extra columns' cells, read per column, are the very objects ``qdf[c].iloc[i]``
gives (the code it replaced) for every kind of column, so the stored ``extra`` JSON and the scorers' extras
do not change."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from fpr.eval.frames import _jsonable, extra_rows


def frame() -> pd.DataFrame:
    df = pd.DataFrame({
        "flag": [True, False, True], "level": np.array([1, 2, 3], "int64"), "drift": [0.1, np.nan, 3.0],
        "note": ["x", None, "z"], "arrow": pd.array(["a", None, "c"], dtype="string[pyarrow]"),
        "string": pd.array(["a", None, "c"], dtype="string"),
        "when": pd.to_datetime(["2020-01-01", None, "2021-01-01"]), "count": pd.array([1, None, 3], dtype="Int64"),
        "kind": pd.Categorical(["u", "v", None])})
    return df.iloc[[2, 0, 1]]  # a subset in another order, as the pipeline passes (its index not reset)


def test_extra_rows_are_the_cells_iloc_gives_of_every_kind_of_column():
    df = frame()
    cols = list(df.columns)
    old = [{c: df[c].iloc[i] for c in cols} for i in range(len(df))]
    new = extra_rows(df, cols)
    assert [list(r) for r in new] == [cols] * 3
    for a, b in zip(old, new):
        for c in cols:
            x, y = a[c], b[c]
            assert type(x) is type(y), (c, type(x), type(y))
            assert x is y or x == y or (x != x and y != y), (c, x, y)


def test_the_stored_extra_json_is_unchanged():
    df = frame()
    cols = list(df.columns)
    old = [json.dumps({c: _jsonable(df[c].iloc[i]) for c in cols}, default=str) for i in range(len(df))]
    assert [json.dumps({c: _jsonable(v) for c, v in r.items()}, default=str) for r in extra_rows(df, cols)] == old
    assert json.loads(old[1])["flag"] == "True"  # a numpy bool stays the string it was (not JSON true)
