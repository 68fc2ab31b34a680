"""Schema evolution: the 0.1.0 workspace opens, keeps and reproduces its runs; migrations add columns."""
from __future__ import annotations

import json
import os
import shutil

import duckdb
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from fpr import api
from fpr.cli.main import cli
from fpr.errors import ConflictError
from fpr.store import schema
from fpr.store.workspace import Workspace
from tests.result_schema import single_run


def _columns(db_path) -> list[tuple]:
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        return con.execute("SELECT table_name, column_name, data_type, ordinal_position FROM "
                           "information_schema.columns WHERE table_schema = 'main' ORDER BY 1, 4").fetchall()
    finally:
        con.close()


def _version(db_path) -> str:
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        return con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    finally:
        con.close()


def test_fixture_is_version_1(old_workspace):
    assert _version(old_workspace / "ws" / "fpr.duckdb") == "1"


def test_migrated_schema_equals_a_new_workspace(old_workspace, tmp_path):
    api.list_runs(workspace=old_workspace / "ws")  # opening migrates
    new = Workspace.open(tmp_path / "new")
    with new.write():
        pass
    assert _columns(old_workspace / "ws" / "fpr.duckdb") == _columns(new.db_path)
    assert _version(old_workspace / "ws" / "fpr.duckdb") == str(schema.SCHEMA_VERSION) == _version(new.db_path)


def test_old_runs_list_report_and_export_unchanged(old_workspace, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the folder the workspace was made from
    ws = old_workspace / "ws"
    old_runs = json.loads((old_workspace / "runs.json").read_text())
    runs = api.list_runs(workspace=ws)
    assert [{k: r[k] for k in ("run_id", "index", "encoder", "scope", "n_queries", "n_evaluated", "n_skipped")}
            for r in runs] == [{k: r[k] for k in ("run_id", "index", "encoder", "scope", "n_queries", "n_evaluated",
                                                  "n_skipped")} for r in old_runs]
    old_report = json.loads((old_workspace / "report_r1.json").read_text())
    res = CliRunner().invoke(cli, ["--workspace", str(ws), "report", "--run", "r1", "--format", "json"])
    assert res.exit_code == 0, res.output
    new_report = single_run(json.loads(res.stdout))  # now one fpr.run-result/1 in a fpr.run-results/1
    # summary rows now also name their encoder; every 0.1.0 mean and count is unchanged. Intervals are not:
    # since #27 a row's bootstrap stream is keyed by its set of queries (the same queries, the same interval
    # wherever they appear) and a row of fewer than MIN_QUERIES_FOR_INTERVAL queries has none, with the reason.
    from fpr.defaults import MIN_QUERIES_FOR_INTERVAL

    assert len(new_report["summary"]) == len(old_report["summary"])
    for new_row, old_row in zip(new_report["summary"], old_report["summary"]):
        for k, v in old_row.items():
            if k.endswith(("_lo", "_hi")):
                continue
            assert new_row[k] == v, (k, new_row, old_row)
        for metric in ("map", "sim"):
            lo, hi = new_row[f"{metric}_lo"], new_row[f"{metric}_hi"]
            if new_row["n_queries"] < MIN_QUERIES_FOR_INTERVAL:
                assert lo is None and hi is None and "no 95% interval" in new_row["no_interval"]
            else:
                assert lo <= new_row[metric] <= hi
    # 0.1.0 stored the preprocessing protocol as its JSON text: read back as an object, the rest unchanged
    old_prov = old_report["provenance"]
    assert isinstance(old_prov["preprocessing"], str)
    assert new_report["provenance"] == {**old_prov, "preprocessing": json.loads(old_prov["preprocessing"])}
    assert new_report["provenance"]["preprocessing"]["name"] == "squash64-unit"
    assert new_report["run"] == {
        "id": "r1", "created": old_prov["created_at"], "gallery": "pets", "index": "pets-pixels-16",
        "index_version": new_report["run"]["index_version"], "encoders": ["pixels-16"], "scope": "group",
        "queries": new_report["run"]["queries"], "n_queries": 12, "n_evaluated": 12, "n_skipped": 0,
        "settings": new_report["run"]["settings"]}
    assert new_report["run"]["settings"]["scorers"] == ["copy-paste"]
    for run in ("r1", "r2"):
        out = api.export_run(run, tmp_path / f"{run}.csv", workspace=ws)
        new = pd.read_csv(out)
        old = pd.read_csv(old_workspace / f"exp_{run}.csv")
        assert list(new.columns[:len(schema.EXPORT_FIRST)]) == list(old.columns[:len(schema.EXPORT_FIRST)])
        assert set(old.columns) <= set(new.columns)
        pd.testing.assert_frame_equal(new[old.columns], old)
        # 0.1.0 dropped the queries file's extra columns from exports; they are exported now
        assert new["drift"].tolist() == [0.0 if m == "faithful" else 1.0 for m in new["method"]]


def test_old_index_reproduces_old_results_from_another_directory(old_workspace, tmp_path, monkeypatch):
    """The 0.1.0 index (stored path relative to the caller's directory) is found from anywhere, and a new
    run of the same queries against it equals the run 0.1.0 stored, query for query."""
    moved = tmp_path / "elsewhere" / "copy-of-ws"
    shutil.copytree(old_workspace / "ws", moved)
    monkeypatch.chdir(tmp_path)
    res = api.run_query("pets-pixels-16", old_workspace / "queries.csv", run="again", workspace=moved)
    old = pd.read_csv(old_workspace / "exp_r1.csv").set_index("query_id")
    new = res.per_query.set_index("query_id")
    for col in ("ap", "first_hit_rank", "n_relevant", "cmc1", "inp"):
        np.testing.assert_array_equal(new[col].astype(float), old.loc[new.index, col].astype(float))
    # Sim is now one matrix product per reference set instead of a dot product per query: same to rounding
    np.testing.assert_allclose(new["sim"], old.loc[new.index, "sim"], rtol=0, atol=1e-14)
    assert api.list_indices(workspace=moved)[0]["name"] == "pets-pixels-16"


def test_old_workspace_accepts_new_gallery_index_and_run(old_workspace, tiny_tree, tmp_path):
    ws = old_workspace / "ws"
    api.import_gallery("fresh", api.read_folder(tiny_tree), api.GallerySpec(references_per_identity=1),
                       workspace=ws)
    info = api.build_index("fresh", "pixels-16", workspace=ws)
    assert info.version and (ws / info.path / "card.json").exists()
    rows = [{"path": str(p), "identity": p.parent.name, "group": p.parent.parent.name, "method": "m"}
            for p in sorted(tiny_tree.glob("*/*/3.png"))]
    res = api.run_query(info.name, pd.DataFrame(rows), run="fresh-run", workspace=ws)
    assert len(res.per_query) == 6
    assert {r["run_id"] for r in api.list_runs(workspace=ws)} == {"r1", "r2", "fresh-run"}


def test_a_new_metric_is_one_declaration_plus_one_migration(old_workspace, monkeypatch, tiny_tree):
    """A per-query metric declared once (a MetricSpec with its compute function) plus one AddColumn: old
    rows are kept and backfilled, a new run computes it per scoring block, and summaries, keep-rule
    names and exports pick it up without any other edit."""
    import fpr.store.workspace as wsmod
    from fpr.metrics import specs

    hits2 = specs.MetricSpec("hits2", "1 if an image of the identity is within the top 2", "hits@2",
                             lambda m, n_scope: m.cmc(2), summary="hits@2", rule="top2", integer=True)
    declared = specs.PER_QUERY_METRICS + (hits2,)
    migration = schema.Migration(schema.SCHEMA_VERSION + 1, "test: hits@2",
                                 (schema.AddColumn("query_results", "hits2",
                                                   "CASE WHEN first_hit_rank BETWEEN 1 AND 2 THEN 1.0 ELSE 0.0 END"),))
    tables = schema.build_tables(declared)
    monkeypatch.setattr(specs, "PER_QUERY_METRICS", declared)
    for mod in (schema, wsmod):
        monkeypatch.setattr(mod, "TABLES", tables)
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS + (migration,))
    monkeypatch.setattr(wsmod, "MIGRATIONS", schema.MIGRATIONS)
    monkeypatch.setattr(wsmod, "SCHEMA_VERSION", migration.to_version)
    ws = Workspace.open(old_workspace / "ws")
    before = api.load_run("r1", workspace=ws.root).per_query
    with ws.read() as con:
        got = con.execute("SELECT query_id, hits2, first_hit_rank FROM query_results WHERE run_id = 'r1' "
                          "ORDER BY row_number").df()
    assert _version(ws.db_path) == str(migration.to_version)
    assert len(got) == len(before) == 12
    assert got["hits2"].tolist() == [1.0 if 1 <= r <= 2 else 0.0 for r in got["first_hit_rank"]]
    res = api.load_run("r1", workspace=ws.root)
    overall = [r for r in res.summary_records() if r["group"] == "*" and r["method"] == "faithful"][0]
    assert overall["hits@2"] == pytest.approx(got["hits2"][res.per_query["method"].to_numpy() == "faithful"].mean())
    # a new run computes the metric from its declaration (no pipeline edit)
    api.import_gallery("fresh", api.read_folder(tiny_tree), api.GallerySpec(references_per_identity=1),
                       workspace=ws.root)
    info = api.build_index("fresh", "pixels-16", workspace=ws.root)
    rows = [{"path": str(p), "identity": p.parent.name, "group": p.parent.parent.name, "method": "m"}
            for p in sorted(tiny_tree.glob("*/*/3.png"))]
    new = api.run_query(info.name, pd.DataFrame(rows), run="fresh-run", workspace=ws.root).per_query
    ranks = new["first_hit_rank"].to_numpy()
    assert new["hits2"].tolist() == [1.0 if 1 <= r <= 2 else 0.0 for r in ranks]


def test_workspace_from_a_newer_fpr_is_refused(old_workspace):
    db = old_workspace / "ws" / "fpr.duckdb"
    con = duckdb.connect(str(db))
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.close()
    res = CliRunner().invoke(cli, ["--workspace", str(old_workspace / "ws"), "runs"])
    assert res.exit_code == 2
    assert "newer than this fpr supports" in res.stderr and "Traceback" not in res.output


def test_old_workspace_on_a_read_only_folder_says_how_to_migrate(old_workspace, monkeypatch):
    monkeypatch.setattr(Workspace, "writable", property(lambda self: False))
    with pytest.raises(ConflictError, match="older than this fpr's .* read-only"):
        api.list_runs(workspace=old_workspace / "ws")


def test_current_workspace_reads_on_a_read_only_folder(old_workspace, monkeypatch):
    api.list_runs(workspace=old_workspace / "ws")  # migrate while writable
    before = (old_workspace / "ws" / "fpr.duckdb").read_bytes()
    monkeypatch.setattr(Workspace, "writable", property(lambda self: False))
    assert len(api.list_runs(workspace=old_workspace / "ws")) == 2
    assert len(api.report("r1", workspace=old_workspace / "ws").per_query) == 12
    with pytest.raises(Exception, match="not writable"):
        api.delete_run("r1", workspace=old_workspace / "ws")
    assert (old_workspace / "ws" / "fpr.duckdb").read_bytes() == before
    assert os.path.exists(old_workspace / "ws" / "fpr.duckdb")


def test_top_margin_is_null_for_old_runs_and_computed_for_new_ones(old_workspace, tiny_tree):
    """Migration 4 adds ``top_margin``: the 0.1.0 runs keep NULL (their scores are not stored, so it cannot be
    recomputed), their summaries say NaN/None for it and keep every other figure; a new run computes it."""
    from fpr.index import exact
    from fpr.metrics.top_margin import top_margin

    ws = old_workspace / "ws"
    runs = api.list_runs(workspace=ws)  # opening migrates
    with Workspace.open(ws).read() as con:
        got = con.execute("SELECT count(*), count(top_margin) FROM query_results").fetchone()
    assert got == (sum(r["n_queries"] for r in runs), 0)
    old = api.load_run("r1", workspace=ws)
    assert old.per_query["top_margin"].isna().all()
    assert all(r["top_margin"] is None for r in old.summary_records())
    api.import_gallery("fresh", api.read_folder(tiny_tree), api.GallerySpec(references_per_identity=1), workspace=ws)
    info = api.build_index("fresh", "pixels-16", workspace=ws)
    rows = [{"path": str(p), "identity": p.parent.name, "group": p.parent.parent.name, "method": "m"}
            for p in sorted(tiny_tree.glob("*/*/3.png"))]
    res = api.run_query(info.name, pd.DataFrame(rows), run="fresh-run", workspace=ws)
    pq = res.per_query
    assert pq["top_margin"].notna().all()
    # the definition from every exact score: the queries' and the gallery's embeddings, scoped to the group
    from fpr.workflows.embeddings import embed

    gal = [it for it in api.gallery_items("fresh", workspace=ws) if it.role == "gallery"]
    s = exact.exact_scores(embed("pixels-16", [r["path"] for r in rows]).vectors,
                           embed("pixels-16", [it.path for it in gal]).vectors)
    q_group, q_id = np.array([r["group"] for r in rows]), np.array([r["identity"] for r in rows])
    in_scope = q_group[:, None] == np.array([it.group for it in gal])[None, :]
    rel = in_scope & (q_id[:, None] == np.array([it.identity for it in gal])[None, :])
    want = top_margin(np.where(in_scope, s, -np.inf).astype(np.float32), rel)
    np.testing.assert_array_equal(pq["top_margin"].to_numpy(np.float64), want)
    assert np.isfinite(want).all()  # pixels-16 ranks an impostor above the mean relevant score for all six
    reloaded = api.load_run("fresh-run", workspace=ws).per_query
    np.testing.assert_array_equal(reloaded["top_margin"].to_numpy(np.float64), pq["top_margin"].to_numpy(np.float64))
