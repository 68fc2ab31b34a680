"""``fpr query --scorers dreambench-concept`` / ``fpr score`` / ``fpr report`` on a small world, against the
loopback judge: the judge's column next to mAP, requests cold vs warm, a whole-run fault as one line."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

import fpr.api as api
from fpr.cli.main import cli
from fpr.galleries.curate import GallerySpec
from fpr.galleries.world import World, WorldConfig


@pytest.fixture(scope="module")
def small_world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    ws = root / "ws"
    build = World(WorldConfig(seed=0, species=("zebra", "leopard"), identities=3, gallery=2, references=1,
                              queries=1, methods=("paste", "drift-0.5", "generic"), size=64)).write(root / "img")
    api.import_gallery("w", build.records, GallerySpec(seed=0), workspace=ws, source="world")
    api.build_index("w", "fpr-world-v1", name="w-idx", workspace=ws, device="cpu")
    return ws, build.queries_csv


def _cli(ws, *args):
    return CliRunner().invoke(cli, ["--workspace", str(ws), *args], obj={})


@pytest.mark.slow
def test_query_report_and_score_with_the_judge(small_world, judge_env):
    ws, queries = small_world
    r = _cli(ws, "query", "--index", "w-idx", "--queries", str(queries), "--run", "judged", "--scorers",
             "dreambench-concept", "--scorer-option", "dreambench-concept.mode=both",
             "--scorer-option", "dreambench-concept.k=3", "--format", "json")
    assert r.exit_code == 0, r.output
    n_queries = 2 * 3 * 3
    assert judge_env.count() == 2 * n_queries  # a pair request and a choice request per query
    rows = {(row["method"], row["group"]): row for row in json.loads(r.stdout)["summary"]}
    overall = {m: rows[(m, "*")] for m in ("paste", "drift-0.5", "generic")}
    for m in overall:
        assert 0 <= overall[m]["dreambench-concept.score"] <= 1
        assert overall[m]["dreambench-concept.calls"] == 2 and overall[m]["dreambench-concept.missing"] == 0
    # the server's pixel judge compares pixels: since world v2 only a copy (paste) still matches them
    assert overall["paste"]["dreambench-concept.score"] > overall["generic"]["dreambench-concept.score"]
    assert overall["paste"]["map"] > overall["generic"]["map"]
    assert overall["paste"]["dreambench-concept.choice_in_options"] == 1.0

    r = _cli(ws, "report", "--run", "judged", "--metrics", "sim,map,dreambench-concept")  # scorers: when named
    assert r.exit_code == 0 and "dreambench-concept.score" in r.output and "mAP" in r.output
    prov = api.load_run("judged", workspace=ws).provenance["scorers"]["dreambench-concept"]
    assert prov["model"] == "judge-test" and prov["base_url"] == judge_env.base_url and prov["seed"] == 0
    assert set(prov["templates"]) == {"dreambench-concept@v1", "dreambench-choice@v1"}

    r = _cli(ws, "export", "--run", "judged", "--out", str(ws.parent / "judged.csv"))
    assert r.exit_code == 0, r.output
    exported = pd.read_csv(ws.parent / "judged.csv")
    picked = exported["dreambench-concept.choice_correct.note"]
    assert picked.str.startswith("picked ").all() and len(picked) == n_queries
    assert ((exported["dreambench-concept.choice_correct"] == 1) ==
            (picked.str.slice(7) == exported["identity"])).all()

    judge_env.reset()  # warm: the same answers from the workspace cache, no request
    r = _cli(ws, "score", "--run", "judged", "--scorers", "dreambench-concept", "--overwrite", "--format", "json")
    assert r.exit_code == 0, r.output
    assert judge_env.count() == 0
    out = {(row["method"], row["group"]): row for row in json.loads(r.stdout)["summary"]}
    assert out[("paste", "*")]["dreambench-concept.score"] == overall["paste"]["dreambench-concept.score"]
    assert out[("paste", "*")]["dreambench-concept.cached"] == 1
    assert list((ws / "judge-cache").rglob("*.json"))

    # choice mode through 'fpr score': the run's queries are embedded again under its encoder, so the
    # options, letters and requests are those of the query run: every answer comes from the cache
    r = _cli(ws, "score", "--run", "judged", "--scorers", "dreambench-concept", "--overwrite", "--scorer-option",
             "dreambench-concept.mode=both", "--scorer-option", "dreambench-concept.k=3", "--format", "json")
    assert r.exit_code == 0, r.output
    assert judge_env.count() == 0
    assert _cli(ws, "export", "--run", "judged", "--out", str(ws.parent / "rescored.csv")).exit_code == 0
    rescored = pd.read_csv(ws.parent / "rescored.csv")
    for metric in ("choice_correct", "choice_in_options", "retrieval_correct", "choice_correct.note"):
        key = f"dreambench-concept.{metric}"
        assert rescored[key].tolist() == exported[key].tolist(), metric


def test_whole_run_fault_through_the_cli_is_one_line(small_world, judge_env, monkeypatch):
    ws, queries = small_world
    monkeypatch.setenv("OPENAI_API_KEY", "wrong")
    r = _cli(ws, "query", "--index", "w-idx", "--queries", str(queries), "--run", "denied", "--scorers",
             "dreambench-concept", "--scorer-option", "dreambench-concept.seed=5")  # new requests, not cached
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.startswith("fpr: error")]
    assert lines == [f"fpr: error: the judge endpoint refused the API key (401: Incorrect API key provided) "
                     f"({judge_env.base_url}); set OPENAI_API_KEY to a valid key"]
    r = _cli(ws, "report", "--run", "denied")
    assert r.exit_code == 2 and "no run named 'denied'" in r.output  # nothing half-stored
