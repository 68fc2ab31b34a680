"""Reports through the CLI: several encoders in one run, the paper's pivot against SQL, merged runs,
drift diagnosis (export columns and --confusion), external scores, compare, and listed skips."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from fpr import api
from fpr.render.result import RUN_RESULT, RUN_RESULTS
from tests.conftest import run_cli, write_image
from tests.result_schema import single_run, validate

ENCODERS = ("pixels-16", "fpr-world-v1")


run = run_cli


@pytest.fixture
def world(tmp_path, tiny_tree):
    """Gallery g (2 groups x 3 identities x 3 gallery + 1 reference), queries of methods a and b, and
    one query of cats-0 (method a) that is a copy of a gallery image of cats-1: it drifted to cats-1."""
    ws = tmp_path / "ws"
    run(ws, "gallery", "import", "--name", "g", "--folder", str(tiny_tree), "--references", "1")
    items = api.gallery_items("g", workspace=ws)
    copied = next(it for it in items if it.identity == "cats-1" and it.role == "gallery")
    rows = []
    for g, group in enumerate(("cats", "dogs")):
        for i in range(3):
            for m, method in enumerate(("a", "b")):
                p = write_image(tmp_path / "q" / f"{group}{i}{method}.png", seed=1000 * g + 10 * i + 5 + m)
                rows.append({"query_id": f"{group}{i}{method}", "path": str(p), "identity": f"{group}-{i}",
                             "group": group, "method": method, "prompt": "a photo", "seed": 100 + len(rows),
                             "cfg": 7.5})
    copy = tmp_path / "q" / "copycat.png"
    shutil.copy(copied.path, copy)
    rows.append({"query_id": "copycat", "path": str(copy), "identity": "cats-0", "group": "cats", "method": "a",
                 "prompt": "a photo", "seed": 999, "cfg": 3.0})
    pd.DataFrame(rows).to_csv(tmp_path / "queries.csv", index=False)
    return ws, tmp_path / "queries.csv"


def export(ws, run_id, tmp_path) -> pd.DataFrame:
    out = tmp_path / f"{run_id.replace('@', '_')}.csv"
    run(ws, "export", "--run", run_id, "--out", str(out))
    return pd.read_csv(out)


@pytest.mark.slow
def test_multi_encoder_run_equals_separate_runs_and_pivot_equals_sql(world, tmp_path):
    ws, queries = world
    res = run(ws, "query", "--gallery", "g", "--encoders", ",".join(ENCODERS), "--queries", str(queries),
              "--run", "R", "--format", "json")
    doc = validate(json.loads(res.stdout), RUN_RESULTS)
    runs = doc["runs"]
    assert doc["encoders"] == list(ENCODERS) and "pivot" not in doc
    assert [r["run"]["id"] for r in runs] == ["R@pixels-16", "R@fpr-world-v1"]
    assert all(r["run"]["encoders"] == [e] for r, e in zip(runs, ENCODERS))
    assert all(r["summary"] and row["encoder"] == e for r, e in zip(runs, ENCODERS) for row in r["summary"])
    # the report of the group: the same documents (and summary rows), then the pivot
    report = validate(json.loads(run(ws, "report", "--run", "R", "--format", "json").stdout), RUN_RESULTS)
    assert [r["summary"] for r in report["runs"]] == [r["summary"] for r in runs]
    assert {c["encoder"] for c in report["pivot"]} == set(ENCODERS)
    indices = {r["name"] for r in api.list_indices(workspace=ws)}
    assert {"g-pixels-16", "g-fpr-world-v1"} <= indices  # built because missing
    merged = export(ws, "R", tmp_path)
    assert len(merged) == 2 * 13 and set(merged["encoder"]) == set(ENCODERS)
    for enc in ENCODERS:
        run(ws, "query", "--index", f"g-{enc}", "--queries", str(queries), "--run", f"single-{enc}")
        single = export(ws, f"single-{enc}", tmp_path).set_index("query_id")
        part = merged[merged["encoder"] == enc].set_index("query_id").loc[single.index]
        for col in ("ap", "sim", "first_hit_rank", "last_hit_rank", "cmc1", "cmc10", "inp", "n_relevant"):
            np.testing.assert_array_equal(part[col].to_numpy(), single[col].to_numpy(), err_msg=f"{enc} {col}")
        assert (single["encoder"] == enc).all()
    # the queries' extra columns are exported as they came
    q = pd.read_csv(queries).set_index("query_id")
    part = merged[merged["encoder"] == "pixels-16"].set_index("query_id").loc[q.index]
    np.testing.assert_array_equal(part["seed"].to_numpy(), q["seed"].to_numpy())
    np.testing.assert_array_equal(part["cfg"].to_numpy(), q["cfg"].to_numpy())
    # the group is one name everywhere
    bad = run(ws, "query", "--gallery", "g", "--encoders", "pixels-16", "--queries", str(queries), "--run",
              "single-pixels-16", ok=False)
    assert bad.exit_code == 2 and "already exists" in bad.stderr
    bad = run(ws, "query", "--gallery", "g", "--index", "g-pixels-16", "--queries", str(queries), ok=False)
    assert bad.exit_code == 2 and "--encoders" in bad.stderr
    check_pivot_cells_equal_sql_over_stored_rows(ws)
    # external scores given to the group name go to every encoder's run
    ids = pd.read_csv(queries)["query_id"]
    pd.DataFrame({"query_id": ids, "gpt": np.arange(len(ids), dtype=float)}).to_csv(tmp_path / "e.csv", index=False)
    out = validate(json.loads(run(ws, "score", "--run", "R", "--from-csv", str(tmp_path / "e.csv"), "--scorer",
                                  "ext", "--format", "json").stdout), RUN_RESULTS)
    assert any(r["metric"] == "ext.gpt" and r["encoder"] == "" and r["group"] == "*" for r in out["pivot"])
    assert all(row["ext.gpt"] is not None for r in out["runs"] for row in r["summary"])
    n = api.sql("SELECT run_id, count(*) AS n, sum(value) AS s FROM aux_scores WHERE scorer = 'ext' GROUP BY 1 "
                "ORDER BY 1", workspace=ws)
    assert n["run_id"].tolist() == ["R@fpr-world-v1", "R@pixels-16"] and (n["n"] == len(ids)).all()
    assert (n["s"] == sum(range(len(ids)))).all()
    run(ws, "runs", "delete", "R")
    assert {r["run_id"] for r in api.list_runs(workspace=ws)} == {f"single-{e}" for e in ENCODERS}


def check_pivot_cells_equal_sql_over_stored_rows(ws):
    """The paper pivot of the multi-encoder run R, cell by cell, against SQL over the stored rows."""
    out = json.loads(run(ws, "report", "--run", "R", "--format", "json").stdout)
    cells = {(r["group"], r["method"], r["encoder"], r["metric"]): r for r in out["pivot"]}
    assert {k[3] for k in cells} == {"sim", "map", "cmc@1", "cmc@10"}
    sql = api.sql("SELECT run_id, group_name, method, avg(ap) AS map, avg(sim) AS sim, avg(cmc1) AS c1, "
                  "avg(cmc10) AS c10, count(*) AS n FROM query_results WHERE run_id LIKE 'R@%' AND status = 'ok' "
                  "GROUP BY GROUPING SETS ((run_id, group_name, method), (run_id, method))", workspace=ws)
    assert len(sql) == 2 * (4 + 2)
    for r in sql.itertuples():
        enc = r.run_id.split("@", 1)[1]
        g = r.group_name if isinstance(r.group_name, str) else "*"
        for metric, value in (("map", r.map), ("sim", r.sim), ("cmc@1", r.c1), ("cmc@10", r.c10)):
            cell = cells[(g, r.method, enc, metric)]
            assert cell["value"] == pytest.approx(value, abs=1e-12), (g, r.method, enc, metric)
            assert cell["n_queries"] == r.n
        lo, hi = cells[(g, r.method, enc, "map")]["lo"], cells[(g, r.method, enc, "map")]["hi"]
        assert lo is None and hi is None  # at most 7 queries: fewer than MIN_QUERIES_FOR_INTERVAL
    table = run(ws, "report", "--run", "R").stdout
    # readable by default (#27 item 6): Sim and mAP per encoder, the rest named and one option away
    assert "mAP fpr-world-v1" in table and "Sim pixels-16" in table and "all groups" in table
    assert "CMC@10 pixels-16" not in table
    assert "(not shown: CMC@1, CMC@5, CMC@10, mINP, top margin, MAP@10, R-precision;" in " ".join(table.split())
    assert max(len(line) for line in table.splitlines()) <= 100  # click's runner is no terminal: 100
    # Sim vs mAP for every encoder of the run (#23 item 5); no oracle row here, and the chart says so
    assert [e for e in ENCODERS if f"Sim vs mAP, all groups, encoder {e}:" in table] == list(ENCODERS)
    assert "no 'oracle' row to mark" in table
    assert "CMC@10 pixels-16" in run(ws, "report", "--run", "R", "--all").stdout
    csv = run(ws, "report", "--run", "R", "--format", "csv").stdout.splitlines()
    assert csv[0] == "group,method,n_queries,encoder,metric,value,lo,hi" and len(csv) == 1 + len(out["pivot"])


@pytest.mark.slow
def test_report_merges_runs_over_the_same_queries(world, tmp_path):
    ws, queries = world
    q = pd.read_csv(queries)
    for m in ("a", "b"):
        q[q["method"] == m].to_csv(tmp_path / f"{m}.csv", index=False)
    run(ws, "index", "build", "--gallery", "g", "--encoder", "pixels-16")
    run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), "--run", "both")
    for m in ("a", "b"):
        run(ws, "query", "--index", "g-pixels-16", "--queries", str(tmp_path / f"{m}.csv"), "--run", f"only-{m}")
    merged = validate(json.loads(run(ws, "report", "--run", "only-a", "--run", "only-b", "--format", "json").stdout),
                      RUN_RESULTS)
    whole = validate(json.loads(run(ws, "report", "--run", "both", "--format", "json").stdout), RUN_RESULTS)
    assert [r["run"]["id"] for r in merged["runs"]] == ["only-a", "only-b"]
    # each run's document has its own method's summary rows, equal to the run's own report
    for doc, m in zip(merged["runs"], ("a", "b")):
        assert {row["method"] for row in doc["summary"]} == {m}
        own = single_run(json.loads(run(ws, "report", "--run", f"only-{m}", "--format", "json").stdout))
        assert doc["summary"] == own["summary"]
    # same seed, same (metric, method, group) bootstrap streams; Sim may differ in the last bit (BLAS batch)
    assert len(merged["pivot"]) == len(whole["pivot"]) == 3 * 2 * 4
    for m, w in zip(merged["pivot"], whole["pivot"]):
        assert {k: m[k] for k in ("group", "method", "n_queries", "encoder", "metric")} == \
            {k: w[k] for k in ("group", "method", "n_queries", "encoder", "metric")}
        for k in ("value", "lo", "hi"):
            assert m[k] == pytest.approx(w[k], abs=1e-12), (m, w)
    bad = run(ws, "report", "--run", "both", "--run", "only-a", ok=False)
    assert bad.exit_code == 2 and "both have method 'a'" in bad.stderr


def test_drift_diagnosis_names_the_identity_a_copy_resembles_also_beyond_top_k(world, tmp_path):
    ws, queries = world
    run(ws, "index", "build", "--gallery", "g", "--encoder", "pixels-16")
    run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), "--run", "r")
    df = export(ws, "r", tmp_path).set_index("query_id")
    row = df.loc["copycat"]
    assert row["top1_identity"] == "cats-1" and row["drift_identity"] == "cats-1"
    assert row["drift_score"] == pytest.approx(1.0, abs=1e-5) and row["drift_source"] == "top-k"
    conf = json.loads(run(ws, "report", "--run", "r", "--confusion", "--format", "json").stdout)
    cell = [c for c in conf if c["identity"] == "cats-0" and c["top1_identity"] == "cats-1"]
    assert cell and cell[0]["n"] >= 1
    assert sum(c["n"] for c in conf) == 13
    assert "intended \\ top-1" in run(ws, "report", "--run", "r", "--confusion").stdout
    # hand check: the drift identity is the identity of the best-ranked non-relevant item of the top-k
    ranks = api.sql("SELECT r.query_id, r.rank, i.identity, r.relevant FROM rankings r JOIN gallery_items i "
                    "ON i.item_id = r.item_id AND i.gallery = 'g' WHERE r.run_id = 'r' ORDER BY 1, 2", workspace=ws)
    for qid, g in ranks.groupby("query_id"):
        assert df.loc[qid, "top1_identity"] == g["identity"].iloc[0]
        assert df.loc[qid, "drift_identity"] == g[~g["relevant"]]["identity"].iloc[0]
    # beyond the stored top-k (here only the top-1 is stored), the drift is recomputed from the index
    run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), "--run", "top1", "--top-k", "1")
    top1 = export(ws, "top1", tmp_path).set_index("query_id").loc[df.index]
    assert (df["drift_source"] == "top-k").all()
    assert (top1["drift_source"] == "index").any() and set(top1["drift_source"]) <= {"index", "top-k"}
    assert (top1["drift_identity"] == df["drift_identity"]).all()
    np.testing.assert_allclose(top1["drift_score"], df["drift_score"], atol=1e-6)


def test_scores_from_csv_round_trip_and_errors(world, tmp_path):
    ws, queries = world
    run(ws, "index", "build", "--gallery", "g", "--encoder", "pixels-16")
    run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), "--run", "r")
    ids = pd.read_csv(queries)["query_id"].tolist()
    ext = pd.DataFrame({"query_id": ids, "gpt": np.arange(len(ids)) / 10.0, "aesthetic": 5.0})
    ext.loc[2, "aesthetic"] = np.nan
    ext.to_csv(tmp_path / "ext.csv", index=False)
    out = json.loads(run(ws, "score", "--run", "r", "--from-csv", str(tmp_path / "ext.csv"), "--scorer", "ext",
                         "--format", "json").stdout)
    a = [r for r in out["summary"] if r["method"] == "a" and r["group"] == "*"][0]
    mask = pd.read_csv(queries)["method"] == "a"
    assert a["ext.gpt"] == pytest.approx(ext["gpt"][mask].mean())
    df = export(ws, "r", tmp_path).set_index("query_id").loc[ids]
    np.testing.assert_allclose(df["ext.gpt"], ext["gpt"])
    assert np.isnan(df["ext.aesthetic"].iloc[2]) and (df["ext.aesthetic"].drop(ids[2]) == 5.0).all()
    note = api.sql("SELECT note FROM aux_scores WHERE run_id = 'r' AND metric = 'aesthetic' AND value IS NULL",
                   workspace=ws)
    assert note["note"].tolist() == ["empty in ext.csv"]
    # again without --overwrite: refused; with it: replaced
    bad = run(ws, "score", "--run", "r", "--from-csv", str(tmp_path / "ext.csv"), "--scorer", "ext", ok=False)
    assert bad.exit_code == 2 and "already has scores from ext" in bad.stderr
    run(ws, "score", "--run", "r", "--from-csv", str(tmp_path / "ext.csv"), "--scorer", "ext", "--overwrite")
    pd.DataFrame({"query_id": ["nope1", ids[0], "nope2"], "gpt": [1, 2, 3]}).to_csv(tmp_path / "bad.csv",
                                                                                    index=False)
    bad = run(ws, "score", "--run", "r", "--from-csv", str(tmp_path / "bad.csv"), "--scorer", "x", ok=False)
    assert bad.exit_code == 2 and "nope1, nope2" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    pd.DataFrame({"query_id": ids[:1], "gpt": ["high"]}).to_csv(tmp_path / "text.csv", index=False)
    bad = run(ws, "score", "--run", "r", "--from-csv", str(tmp_path / "text.csv"), "--scorer", "x", ok=False)
    assert bad.exit_code == 2 and "'gpt' is not numeric" in bad.stderr
    bad = run(ws, "score", "--run", "r", "--from-csv", str(tmp_path / "ext.csv"), ok=False)
    assert bad.exit_code == 2 and "--scorer" in bad.stderr
    bad = run(ws, "score", "--run", "r", "--from-csv", str(tmp_path / "ext.csv"), "--scorer", "x", "--engine", "ray",
              ok=False)  # an external table runs nothing: no engine
    assert bad.exit_code == 2 and bad.stderr.strip() == (
        "fpr: error: --engine and the --ray-* options go with --scorers (--from-csv runs nothing)")
    pd.DataFrame({"id": ids[:1], "gpt": [1]}).to_csv(tmp_path / "noid.csv", index=False)
    bad = run(ws, "score", "--run", "r", "--from-csv", str(tmp_path / "noid.csv"), "--scorer", "x", ok=False)
    assert bad.exit_code == 2 and "query_id" in bad.stderr


def test_compare_names_its_tests_means_and_groups(world):
    ws, queries = world
    run(ws, "index", "build", "--gallery", "g", "--encoder", "pixels-16")
    run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), "--run", "r")
    out = json.loads(run(ws, "compare", "--run", "r", "--a", "a", "--b", "b", "--format", "json").stdout)
    assert "Wilcoxon signed-rank" in out["tests"] and "paired bootstrap" in out["tests"]
    assert "averaged" in out["pairing"]
    rows = {r["group"]: r for r in out["rows"]}
    assert set(rows) == {"*", "cats", "dogs"}
    df = api.export_run("r", ws.parent / "c.csv", workspace=ws)
    df = pd.read_csv(df)
    cats = df[df["group"] == "cats"]
    # cats-0 has two queries of method a (one is the copy): averaged before pairing
    a = cats[cats["method"] == "a"].groupby("identity")["ap"].mean()
    b = cats[cats["method"] == "b"].groupby("identity")["ap"].mean()
    assert rows["cats"]["mean_a"] == pytest.approx(a.mean()) and rows["cats"]["mean_b"] == pytest.approx(b.mean())
    assert rows["cats"]["mean_diff"] == pytest.approx((a - b).mean())
    assert rows["cats"]["n_pairs"] == 3 and rows["cats"]["n_repeats"] == 1 and rows["dogs"]["n_repeats"] == 0
    text = run(ws, "compare", "--run", "r", "--a", "a", "--b", "b").stdout
    assert "tests: Wilcoxon signed-rank" in text and "pairing:" in text and "mean_a" in text


def test_json_lists_every_skip_with_its_reason(world, tmp_path):
    ws, queries = world
    q = pd.read_csv(queries)
    q.loc[0, "identity"] = "cats-9"
    q.loc[1, "path"] = str(tmp_path / "missing.png")
    q.to_csv(tmp_path / "skips.csv", index=False)
    run(ws, "index", "build", "--gallery", "g", "--encoder", "pixels-16")
    out = json.loads(run(ws, "query", "--index", "g-pixels-16", "--queries", str(tmp_path / "skips.csv"),
                         "--skip-missing-identities", "--skip-unreadable", "--run", "s", "--format", "json").stdout)
    validate(out, RUN_RESULT)
    assert out["run"]["n_skipped"] == 2 and set(out["skipped"]) == {q["query_id"][0], q["query_id"][1]}
    assert "no gallery image of identity 'cats-9'" in out["skipped"][q["query_id"][0]]
    assert out["skipped"][q["query_id"][1]].startswith("skipped:unreadable: ")
    again = single_run(json.loads(run(ws, "report", "--run", "s", "--format", "json").stdout))
    assert again["skipped"] == out["skipped"] and again["run"]["n_skipped"] == 2
    table = run(ws, "query", "--index", "g-pixels-16", "--queries", str(tmp_path / "skips.csv"),
                "--skip-missing-identities", "--skip-unreadable", "--run", "s2").stdout
    assert "fpr export --run s2 --out FILE.csv" in table
