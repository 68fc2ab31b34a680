"""Issue #27, the defects a new user meets in the first hour: each test failed before its fix."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.cli.test_report_cli import world  # noqa: F401  (the fixture)
from tests.conftest import run_cli

run = run_cli


@pytest.fixture
def scored(world, tmp_path):  # noqa: F811
    """Run 'r' on pixels-16 with external scores (one empty value, so one note column too)."""
    ws, queries = world
    run(ws, "query", "--gallery", "g", "--encoders", "pixels-16", "--queries", str(queries), "--run", "r")
    ext = pd.read_csv(queries)[["query_id"]]
    ext["gpt"], ext["aesthetic"] = np.linspace(0.0, 1.2, len(ext)), [5.0, 5.0, None] + [5.0] * (len(ext) - 3)
    ext.to_csv(tmp_path / "ext.csv", index=False)
    run(ws, "score", "--run", "r", "--from-csv", str(tmp_path / "ext.csv"), "--scorer", "ext")
    return ws, queries, ext


def test_export_lists_each_score_column_once_in_csv_and_parquet(scored, tmp_path):
    ws, _, ext = scored
    run(ws, "export", "--run", "r", "--out", str(tmp_path / "x.parquet"))  # was: "Duplicate column names"
    run(ws, "export", "--run", "r", "--out", str(tmp_path / "x.csv"))
    pq = pd.read_parquet(tmp_path / "x.parquet")
    header = (tmp_path / "x.csv").read_text().splitlines()[0].split(",")
    assert len(header) == len(set(header)), header  # was: ext.gpt twice (pandas reads the second as ext.gpt.1)
    assert list(pq.columns) == header
    assert [c for c in header if c.startswith("ext.")] == ["ext.aesthetic", "ext.gpt", "ext.aesthetic.note"]
    got = pq.set_index("query_id").loc[ext["query_id"]]
    np.testing.assert_array_equal(got["ext.gpt"].to_numpy(), ext["gpt"].to_numpy())
    assert got["ext.aesthetic.note"].iloc[2] == "empty in ext.csv" and got["ext.aesthetic.note"].isna().sum() == 12
    csv = pd.read_csv(tmp_path / "x.csv").set_index("query_id").loc[ext["query_id"]]
    np.testing.assert_array_equal(csv["ext.gpt"].to_numpy(), ext["gpt"].to_numpy())


def test_multi_encoder_query_writes_the_oracle_rows_of_each_encoder(world):  # noqa: F811
    ws, queries = world
    out = json.loads(run(ws, "query", "--gallery", "g", "--encoders", "pixels-16,fpr-world-v1", "--queries",
                         str(queries), "--run", "R", "--oracle", "--format", "json").stdout)
    single = json.loads(run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), "--run", "one",
                            "--oracle", "--format", "json").stdout)
    for r in out["runs"]:
        oracle = {row["group"]: row for row in r["summary"] if row["method"] == "oracle"}
        # one reference image per identity: 3 oracle queries per group, 6 overall (was: no oracle row at all)
        assert {g: row["n_queries"] for g, row in oracle.items()} == {"cats": 3, "dogs": 3, "*": 6}, r["run"]
    want = {row["group"]: row for row in single["summary"] if row["method"] == "oracle"}
    got = {row["group"]: row for row in out["runs"][0]["summary"] if row["method"] == "oracle"}
    assert {g: (r["map"], r["map_lo"], r["map_hi"]) for g, r in got.items()} == \
        {g: (r["map"], r["map_lo"], r["map_hi"]) for g, r in want.items()}
    stored = run(ws, "sql", "SELECT run_id, count(*) AS n FROM query_results WHERE method = 'oracle' "
                 "GROUP BY run_id ORDER BY run_id", "--format", "json").stdout
    assert json.loads(stored) == [{"run_id": "R@fpr-world-v1", "n": 6}, {"run_id": "R@pixels-16", "n": 6},
                                  {"run_id": "one", "n": 6}]
