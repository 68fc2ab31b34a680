"""Issue #27, the defects a new user meets in the first hour: each test failed before its fix."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from fpr import api
from tests.cli.test_report_cli import world  # noqa: F401  (the fixture)
from tests.conftest import make_tree, run_cli, write_image

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


def test_a_moved_workspace_renders_its_report_and_a_missing_image_is_a_placeholder(tmp_path):
    """Images that live inside the workspace (as the demo's world does) move with it; one image deleted
    afterwards is a placeholder naming its path, and its drift is 'unknown', not a failed report."""
    ws = tmp_path / "ws"
    make_tree(ws / "world" / "tree", identities=3, images=4)
    run(ws, "gallery", "import", "--name", "g", "--folder", str(ws / "world" / "tree"), "--references", "1")
    # each query a copy of one of its identity's gallery images: its top-1 is relevant
    first = {}
    for it in api.gallery_items("g", workspace=ws):
        if it.role == "gallery":
            first.setdefault(it.identity, it.path)
    rows = [{"query_id": f"q{g}{i}", "path": shutil.copy(first[f"{g}-{i}"], ws / "world" / f"q{g}{i}.png"),
             "identity": f"{g}-{i}", "group": g, "method": "m"} for g in ("cats", "dogs") for i in range(3)]
    pd.DataFrame(rows).to_csv(ws / "world" / "queries.csv", index=False)
    run(ws, "index", "build", "--gallery", "g", "--encoder", "pixels-16")
    # --top-k 1: a query whose top-1 is relevant has its drift recomputed from the index (reading its image)
    run(ws, "query", "--index", "g-pixels-16", "--queries", str(ws / "world" / "queries.csv"), "--run", "r",
        "--top-k", "1")
    stored = json.loads(run(ws, "sql", "SELECT path FROM query_results UNION ALL SELECT path FROM gallery_items",
                            "--format", "json").stdout)
    assert all(r["path"].startswith("world/") for r in stored), stored[:2]  # relative to the workspace
    moved = tmp_path / "elsewhere" / "ws2"
    moved.parent.mkdir()
    ws.rename(moved)
    (moved / "world" / "qcats1.png").unlink()
    run(moved, "report", "--run", "r", "--html", str(tmp_path / "r.html"))  # was: every image missing
    text = (tmp_path / "r.html").read_text()
    lost = str(moved / "world" / "qcats1.png")
    assert text.count('class="missing"') == 1 and f"<code>{lost}</code>" in text
    # 6 queries + 6 references + the top-1 items: every other image is embedded
    assert text.count("data:image/jpeg;base64,") >= 6 + 6 - 1
    df = pd.read_csv(api.export_run("r", tmp_path / "r.csv", workspace=moved)).set_index("query_id")
    assert df.loc["qcats1", "path"] == lost
    assert df.loc["qcats1", "drift_source"].startswith("unknown: query image unreadable")
    assert set(df.drop("qcats1")["drift_source"]) == {"index"}
    assert df["drift_identity"].notna().sum() == 5


def test_a_run_whose_every_query_is_skipped_is_one_line_error_and_stores_nothing(world, tmp_path):  # noqa: F811
    ws, queries = world
    run(ws, "index", "build", "--gallery", "g", "--encoder", "pixels-16")
    q = pd.read_csv(queries)
    q["identity"] = q["identity"] + "-unknown"
    q.loc[:3, "path"] = str(tmp_path / "gone.png")  # 4 also unreadable: a missing identity is found first
    q.to_csv(tmp_path / "none.csv", index=False)
    bad = run(ws, "query", "--index", "g-pixels-16", "--queries", str(tmp_path / "none.csv"), "--run", "empty",
              "--skip-missing-identities", "--skip-unreadable", ok=False)
    assert bad.exit_code == 2, bad.output  # was: 0, and an empty run stored
    line = bad.stderr.strip()
    assert len(line.splitlines()) == 1 and "all 13 queries were skipped (13 without relevant gallery images, " \
        "0 unreadable)" in line, line
    u = pd.read_csv(queries).assign(path=str(tmp_path / "gone.png"))
    u.to_csv(tmp_path / "unreadable.csv", index=False)
    bad = run(ws, "query", "--index", "g-pixels-16", "--queries", str(tmp_path / "unreadable.csv"), "--run", "empty",
              "--skip-unreadable", ok=False)
    assert bad.exit_code == 2 and "all 13 queries were skipped (0 without relevant gallery images, 13 unreadable; " \
        "first: " in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert json.loads(run(ws, "runs", "--format", "json").stdout) == []


def test_fewer_gallery_images_than_asked_is_one_warning_line_with_counts(tmp_path, tiny_tree):
    for k in range(4, 12):  # cats-0 has 12 images, every other identity 4
        write_image(tiny_tree / "cats" / "cats-0" / f"{k}.png", seed=5000 + k)
    ws = tmp_path / "ws"
    res = run(ws, "-q", "gallery", "import", "--name", "g", "--folder", str(tiny_tree), "--references", "1",
              "--per-identity", "10")
    # -q silences progress, not this: 1 reference + 3 gallery images for 5 identities, 1 + 10 for cats-0
    assert res.stderr.strip() == ("fpr: warning: asked for 10 gallery images per identity; 5 of 6 identities "
                                  "have fewer (as few as 3: cats/cats-1); they keep all they have")
    n = json.loads(run(ws, "sql", "SELECT identity, count(*) AS n FROM gallery_items WHERE role = 'gallery' "
                       "GROUP BY identity ORDER BY identity", "--format", "json").stdout)
    assert {r["identity"]: r["n"] for r in n} == {"cats-0": 10, "cats-1": 3, "cats-2": 3, "dogs-0": 3,
                                                 "dogs-1": 3, "dogs-2": 3}
    res = run(ws, "gallery", "import", "--name", "h", "--folder", str(tiny_tree), "--references", "5")
    assert res.stderr.strip() == ("fpr: warning: asked for 5 reference images per identity; 5 of 6 identities "
                                  "have fewer (as few as 3: cats/cats-1); they keep all they have")
    assert run(ws, "gallery", "import", "--name", "k", "--folder", str(tiny_tree), "--references", "1",
               "--per-identity", "3").stderr == ""


def test_rows_below_the_interval_minimum_print_no_interval_and_say_why(world):  # noqa: F811
    ws, queries = world
    run(ws, "index", "build", "--gallery", "g", "--encoder", "pixels-16")
    table = run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), "--run", "r").stdout
    # methods a, b x groups cats, dogs, * : 3 to 7 queries each, none with an interval
    # fpr query prints the report's table, its notes wrapped at the width (100 here)
    assert "(6 rows without a 95% interval: fewer than 10 queries, too few for a bootstrap interval to cover " \
           "the mean 95% of the time)" in " ".join(line.strip() for line in table.splitlines())
    out = json.loads(run(ws, "report", "--run", "r", "--format", "json").stdout)
    assert all(c["lo"] is None and c["hi"] is None for c in out["pivot"] if c["metric"] in ("map", "sim"))
    assert {r["no_interval"] for r in out["runs"][0]["summary"]} == {f"{n} queries, fewer than 10: no 95% interval"
                                                          for n in (3, 4, 6, 7)}
    assert "6 rows without a 95% interval" in run(ws, "report", "--run", "r").stdout
    run(ws, "report", "--run", "r", "--html", str(ws.parent / "r.html"))
    assert '<p class="note">(6 rows without a 95% interval: fewer than 10 queries' in (ws.parent / "r.html").read_text()
