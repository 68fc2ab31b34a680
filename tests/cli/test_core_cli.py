"""End to end through the CLI: the core flow, output formats, and every bad input of the core issue."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from fpr.cli.main import cli
from fpr.render.result import RUN_RESULT
from tests.conftest import run_cli, write_image
from tests.result_schema import single_run, validate

run = run_cli


@pytest.fixture
def flow(tmp_path, tiny_tree):
    ws = tmp_path / "ws"
    run(ws, "gallery", "import", "--name", "g", "--folder", str(tiny_tree), "--references", "1")
    run(ws, "index", "build", "--gallery", "g", "--encoder", "pixels-16")
    rows = []
    for g, group in enumerate(("cats", "dogs")):
        for i in range(3):
            p = write_image(tmp_path / "q" / f"{group}{i}.png", seed=1000 * g + 10 * i + 3)
            rows.append({"path": str(p), "identity": f"{group}-{i}", "group": group, "method": "m",
                         "prompt": "a photo"})
    pd.DataFrame(rows).to_csv(tmp_path / "queries.csv", index=False)
    return ws, tmp_path / "queries.csv"


def test_flow_json_report_export_sql(flow, tmp_path):
    ws, queries = flow
    res = run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), "--run", "r1", "--format", "json")
    out = validate(json.loads(res.stdout), RUN_RESULT)
    assert out["run"]["id"] == "r1" and out["run"]["index"] == "g-pixels-16"
    assert out["run"]["encoders"] == ["pixels-16"]
    overall = [r for r in out["summary"] if r["group"] == "*"][0]
    for key in ("method", "group", "n_queries", "map", "cmc@1", "cmc@5", "minp", "sim"):
        assert key in overall
    assert overall["n_queries"] == 6 and 0 <= overall["map"] <= 1
    again = single_run(json.loads(run(ws, "report", "--run", "r1", "--format", "json").stdout))
    assert again["summary"] == out["summary"]
    run(ws, "export", "--run", "r1", "--out", str(tmp_path / "e.parquet"))
    df = pd.read_parquet(tmp_path / "e.parquet")
    assert list(df.columns[:9]) == ["query_id", "path", "method", "identity", "group", "ap", "first_hit_rank",
                                    "n_relevant", "sim"]
    assert len(df) == 6 and (df["n_relevant"] == 3).all()
    csv = run(ws, "report", "--run", "r1", "--format", "csv").stdout.splitlines()
    assert csv[0] == "group,method,n_queries,encoder,metric,value,lo,hi"  # the paper layout, long
    n = run(ws, "sql", "SELECT count(*) AS n FROM rankings WHERE run_id = 'r1'", "--format", "json").stdout
    assert json.loads(n)[0]["n"] == 6 * 9
    bad = run(ws, "sql", "DELETE FROM runs", ok=False)
    assert bad.exit_code != 0 and "read-only" in bad.stderr


def test_embed_writes_rows_in_file_order(flow, tmp_path, tiny_tree):
    ws, _ = flow
    paths = sorted(str(p) for p in tiny_tree.rglob("*.png"))[:5]
    pd.DataFrame({"path": paths[::-1]}).to_csv(tmp_path / "imgs.csv", index=False)
    run(ws, "embed", "--encoder", "pixels-16", "--images", str(tmp_path / "imgs.csv"), "--out", str(tmp_path / "e.npy"))
    e = np.load(tmp_path / "e.npy")
    from fpr import api

    single = api.embed("pixels-16", [paths[-1]]).vectors
    np.testing.assert_array_equal(e[0], single[0])


def test_python_api_equals_cli(flow):
    from fpr import api

    ws, queries = flow
    res = api.run_query("g-pixels-16", queries, run="py", workspace=ws)
    cli_out = json.loads(run(ws, "report", "--run", "py", "--format", "json").stdout)
    assert res.summary["map"].tolist() == [r["map"] for r in single_run(cli_out)["summary"]]


def assert_one_line_error(res, *needles):
    assert res.exit_code != 0
    assert "Traceback" not in res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("fpr: error:")]
    assert len(lines) == 1, res.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def n_runs(ws):
    from fpr import api

    return len(api.list_runs(workspace=ws))


def test_query_identity_without_gallery_image_fails_before_embedding(flow, tmp_path):
    ws, queries = flow
    df = pd.read_csv(queries)
    df.loc[0, "identity"] = "ghost"
    df.to_csv(tmp_path / "bad.csv", index=False)
    before = n_runs(ws)
    assert_one_line_error(run(ws, "query", "--index", "g-pixels-16", "--queries", str(tmp_path / "bad.csv"), ok=False),
                          "cats/ghost", "--skip-missing-identities")
    assert n_runs(ws) == before
    res = run(ws, "query", "--index", "g-pixels-16", "--queries", str(tmp_path / "bad.csv"),
              "--skip-missing-identities", "--run", "sk", "--format", "json")
    out = validate(json.loads(res.stdout), RUN_RESULT)
    assert out["run"]["n_skipped"] == 1 and [r for r in out["summary"] if r["group"] == "*"][0]["n_queries"] == 5


def test_unreadable_query_fails_by_default_and_is_skipped_on_request(flow, tmp_path):
    ws, queries = flow
    df = pd.read_csv(queries)
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnope")
    df.loc[2, "path"] = str(tmp_path / "broken.png")
    df.to_csv(tmp_path / "bad.csv", index=False)
    assert_one_line_error(run(ws, "query", "--index", "g-pixels-16", "--queries", str(tmp_path / "bad.csv"), ok=False),
                          "broken.png")
    out = json.loads(run(ws, "query", "--index", "g-pixels-16", "--queries", str(tmp_path / "bad.csv"),
                         "--skip-unreadable", "--run", "s2", "--format", "json").stdout)
    assert out["run"]["n_skipped"] == 1 and "q000002" in out["skipped"]
    ex = tmp_path / "ex.csv"
    run(ws, "export", "--run", "s2", "--out", str(ex))
    assert pd.read_csv(ex)["status"].tolist().count("skipped:unreadable") == 1


@pytest.mark.parametrize("kind", ["missing", "zero", "truncated", "not_image"])
def test_bad_gallery_images_fail_import_and_store_nothing(tmp_path, tiny_tree, kind):
    ws = tmp_path / "ws"
    run(ws, "gallery", "import", "--name", "keep", "--folder", str(tiny_tree))
    target = tiny_tree / "cats" / "cats-0" / "0.png"
    if kind == "missing":
        rows = [{"path": str(target) + ".nope", "identity": "a", "group": "g"}]
    else:
        if kind == "zero":
            target.write_bytes(b"")
        elif kind == "truncated":
            target.write_bytes(target.read_bytes()[:60])
        else:
            target.write_text("not an image")
        rows = [{"path": str(target), "identity": "a", "group": "g"}]
    rows.append({"path": str(tiny_tree / "dogs" / "dogs-0" / "1.png"), "identity": "b", "group": "g"})
    pd.DataFrame(rows).to_csv(tmp_path / "m.csv", index=False)
    res = run(ws, "gallery", "import", "--name", "new", "--manifest", str(tmp_path / "m.csv"), ok=False)
    assert_one_line_error(res, "0.png")
    names = [g["name"] for g in json.loads(run(ws, "gallery", "list", "--format", "json").stdout)]
    assert names == ["keep"]


@pytest.mark.parametrize("text,needle", [("path,identity\nx.png,a\n", "lacks required column(s) group"),
                                         ("path,identity,group,role\nx.png,a,g,weird\n", "unknown role 'weird'")])
def test_bad_manifest_columns(tmp_path, text, needle):
    (tmp_path / "m.csv").write_text(text)
    assert_one_line_error(run(tmp_path / "ws", "gallery", "import", "--name", "g", "--manifest",
                              str(tmp_path / "m.csv"), ok=False), needle)


def test_group_with_fewer_than_two_identities(tmp_path, tiny_tree):
    rows = [{"path": str(p), "identity": "only", "group": "g"} for p in (tiny_tree / "cats" / "cats-0").iterdir()]
    pd.DataFrame(rows).to_csv(tmp_path / "m.csv", index=False)
    assert_one_line_error(run(tmp_path / "ws", "gallery", "import", "--name", "g", "--manifest",
                              str(tmp_path / "m.csv"), ok=False), "at least 2")


def test_unknown_encoder_lists_valid_ones(tmp_path, tiny_tree):
    ws = tmp_path / "ws"
    run(ws, "gallery", "import", "--name", "g", "--folder", str(tiny_tree))
    assert_one_line_error(run(ws, "index", "build", "--gallery", "g", "--encoder", "nope", ok=False),
                          "unknown encoder 'nope'", "pixels-16")


def test_index_queried_with_another_encoder(flow):
    ws, queries = flow
    assert_one_line_error(run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), "--encoder",
                              "clip-vit-b-32", ok=False), "built with encoder 'pixels-16'")


def test_existing_run_is_not_overwritten_silently(flow):
    ws, queries = flow
    run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), "--run", "r")
    assert_one_line_error(run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), "--run", "r",
                              ok=False), "already exists", "--overwrite")
    run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), "--run", "r", "--overwrite")
    assert n_runs(ws) == 1


def test_changed_gallery_invalidates_index(flow, tiny_tree):
    ws, queries = flow
    run(ws, "gallery", "import", "--name", "g", "--folder", str(tiny_tree), "--references", "2", "--overwrite")
    assert_one_line_error(run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), ok=False),
                          "no longer matches gallery 'g'", "fpr index build")


def test_missing_things_name_what_exists(flow):
    ws, queries = flow
    assert_one_line_error(run(ws, "report", "--run", "nope", ok=False), "no run named 'nope'")
    assert_one_line_error(run(ws, "query", "--index", "nope", "--queries", str(queries), ok=False),
                          "no index named 'nope'", "g-pixels-16")
    assert_one_line_error(run(ws.parent / "empty", "report", "--run", "x", ok=False), "no fpr workspace")


def test_a_relative_query_path_error_names_the_queries_file_and_the_folder_it_resolves_against(flow, tmp_path):
    """Issue #33: the error called the queries file a "manifest" and never said where relative paths resolve."""
    ws, _ = flow
    sub = tmp_path / "sub"
    sub.mkdir()
    pd.DataFrame([{"path": "q/cats0.png", "identity": "cats-0", "group": "cats", "method": "m"}]).to_csv(
        sub / "rel.csv", index=False)  # the image is in tmp_path/q, not in sub/q
    res = run(ws, "query", "--index", "g-pixels-16", "--queries", str(sub / "rel.csv"), ok=False)
    assert_one_line_error(res, f"query image not found: {sub.resolve() / 'q' / 'cats0.png'} (row 2",
                          str(sub / "rel.csv"), f"relative paths resolve against the queries file's folder, "
                                                f"{sub.resolve()}", "--skip-unreadable")
    assert "manifest" not in res.stderr


def test_busy_workspace_waits_then_says_so(flow, monkeypatch):
    ws, queries = flow
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from filelock import FileLock; l = FileLock(sys.argv[1]); l.acquire(); "
        "print('locked', flush=True); time.sleep(20)"), str(ws / ".fpr.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        monkeypatch.setenv("FPR_LOCK_TIMEOUT", "0.5")
        t = time.time()
        res = run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), ok=False)
        assert res.exit_code == 3 and time.time() - t < 15
        assert_one_line_error(res, "workspace is busy", "FPR_LOCK_TIMEOUT")
    finally:
        holder.kill()
        holder.wait()
    assert n_runs(ws) == 0
    run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries))


def test_debug_shows_traceback(flow):
    ws, _ = flow
    res = CliRunner().invoke(cli, ["--workspace", str(ws), "--debug", "report", "--run", "nope"], obj={})
    assert res.exit_code != 0 and res.exception is not None


def test_scorer_option_must_be_key_value(flow):
    ws, queries = flow
    assert_one_line_error(run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), "--scorers",
                              "copy-paste", "--scorer-option", "nonsense", ok=False), "KEY=VALUE")


def test_unknown_scorer_lists_valid_ones(flow):
    ws, queries = flow
    assert_one_line_error(run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), "--scorers",
                              "nope", ok=False), "unknown scorer 'nope'", "copy-paste")


def test_python_dash_m_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "fpr", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "query" in out.stdout


def test_dataframe_queries_keep_extra_column_types(flow):
    from fpr import api

    ws, queries = flow
    df = pd.read_csv(queries)
    df["drift"] = np.linspace(0, 1, len(df))
    res = api.run_query("g-pixels-16", df, run="df", workspace=ws)
    assert res.per_query["drift"].dtype.kind == "f"
    np.testing.assert_allclose(res.per_query["drift"].to_numpy(), df["drift"].to_numpy())
