"""The oracle row: the gallery's reference images as queries equal a manual run with those queries."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from fpr import api
from fpr.errors import InputError
from fpr.eval.oracle import oracle_queries
from fpr.galleries.records import GalleryItem
from fpr.galleries.world import build_world


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("oracle")
    ws = tmp / "ws"
    build = build_world(tmp / "w", identities=3, gallery=3, references=3, queries=1, species=["zebra", "giraffe"],
                        methods=["faithful"], size=64)
    api.import_gallery("g", build.records, workspace=ws, source="world")
    api.build_index("g", "pixels-16", name="i", workspace=ws)
    return tmp, ws, build


def test_oracle_queries_are_the_references_with_the_other_references():
    items = [GalleryItem(i, f"/r/{who}{k}.png", "h", who, "grp", role)
             for i, (who, k, role) in enumerate([("a", 0, "reference"), ("a", 1, "reference"), ("a", 2, "gallery"),
                                                ("b", 0, "reference")])]
    q = oracle_queries(items)
    assert q["path"].tolist() == ["/r/a0.png", "/r/a1.png", "/r/b0.png"]  # gallery images are never queries
    assert q["reference_paths"].tolist() == ["/r/a1.png", "/r/a0.png", ""]
    assert q["query_id"].tolist() == ["oracle/grp/a/0", "oracle/grp/a/1", "oracle/grp/b/0"]
    assert set(q["method"]) == {"oracle"} and q["identity"].tolist() == ["a", "a", "b"]


def test_oracle_rows_equal_a_manual_run_with_the_references_as_queries(indexed):
    tmp, ws, build = indexed
    res = api.run_query("i", build.queries_csv, workspace=ws, run="with-oracle", oracle=True)
    pq = res.per_query
    orc = pq[pq["method"] == "oracle"].set_index("path")
    refs = [r for r in build.records if r.role == "reference"]
    assert len(orc) == len(refs) == 2 * 3 * 3
    assert len(pq[pq["method"] == "faithful"]) == 2 * 3  # the queries are still there, first
    manual = pd.DataFrame([{"path": r.path, "identity": r.identity, "group": r.group, "method": "manual",
                            "reference_paths": ";".join(o.path for o in refs
                                                        if o.identity == r.identity and o.path != r.path)}
                           for r in refs])
    man = api.run_query("i", manual, workspace=ws, run="manual").per_query.set_index("path")
    np.testing.assert_allclose(orc.loc[man.index, "ap"].astype(float), man["ap"].astype(float), atol=1e-12)
    np.testing.assert_allclose(orc.loc[man.index, "sim"].astype(float), man["sim"].astype(float), atol=1e-12)
    assert (orc["n_references"] == 2).all()
    summary = {(r["method"], r["group"]): r for r in res.summary_records()}
    assert summary[("oracle", "*")]["n_queries"] == 18
    assert summary[("oracle", "*")]["map"] == pytest.approx(float(man["ap"].mean()))


def test_cli_query_oracle_flag(indexed):
    tmp, ws, build = indexed
    r = CliRunner().invoke(__import__("fpr.cli.main", fromlist=["cli"]).cli,
                           ["--workspace", str(ws), "query", "--index", "i", "--queries", str(build.queries_csv),
                            "--oracle", "--run", "cli-oracle", "--format", "json"], obj={})
    assert r.exit_code == 0, r.output
    methods = {row["method"] for row in json.loads(r.output)["summary"]}
    assert methods == {"faithful", "oracle"}


def test_oracle_query_id_clash_is_one_line(indexed):
    tmp, ws, build = indexed
    q = pd.read_csv(build.queries_csv)
    q.loc[0, "query_id"] = "oracle/zebra/" + q.loc[0, "identity"] + "/0"
    with pytest.raises(InputError, match="reserved for the oracle"):
        api.run_query("i", q, workspace=ws, run="clash", oracle=True)
