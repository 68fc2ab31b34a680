"""The one result document (fpr.run-result/1, fpr.run-results/1): every emitter validates against the package's
JSON Schema, and a hand-built run's summary values are the ones worked out by hand.

The run: two groups, two identities each, one reference and one gallery image per identity (so a group's
gallery holds two images). Method ``copy`` queries with an exact copy of the identity's own gallery image:
it ranks first, AP = 1, CMC@1 = 1, mINP = 1. Method ``swap`` queries with an exact copy of the *other*
identity's gallery image: that one ranks first (cosine 1) and the relevant image second, so AP = 1/2,
CMC@1 = 0, CMC@5 = 1, mINP = 1/2. Sim is checked against cosines computed here from ``fpr.embed``.
"""
from __future__ import annotations

import json
import shutil

import duckdb
import numpy as np
import pandas as pd
import pytest

import fpr
from fpr import api
from fpr.render.result import RUN_RESULT, RUN_RESULTS, SCHEMA_FILE
from tests.conftest import run_cli, write_image
from tests.result_schema import SCHEMA, single_run, validate

GROUPS = ("cats", "dogs")
ENCODER = "pixels-16"


@pytest.fixture
def hand_run(tmp_path):
    """(workspace, queries table, gallery rows) of the run described above, not yet queried."""
    gallery, queries = [], []
    for g, group in enumerate(GROUPS):
        idents = [f"{group}-{i}" for i in range(2)]
        for i, ident in enumerate(idents):
            for role, k in (("reference", 0), ("gallery", 1)):
                p = write_image(tmp_path / "gal" / group / ident / f"{k}.png", seed=1000 * g + 10 * i + k)
                gallery.append({"path": str(p), "identity": ident, "group": group, "role": role})
        for i, ident in enumerate(idents):
            own = tmp_path / "gal" / group / ident / "1.png"
            other = tmp_path / "gal" / group / idents[1 - i] / "1.png"
            for method, src in (("copy", own), ("swap", other)):
                dst = tmp_path / "q" / f"{method}-{ident}.png"
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
                queries.append({"path": str(dst), "identity": ident, "group": group, "method": method,
                                "query_id": f"{method}-{ident}"})
    pd.DataFrame(gallery).to_csv(tmp_path / "gallery.csv", index=False)
    pd.DataFrame(queries).to_csv(tmp_path / "queries.csv", index=False)
    ws = tmp_path / "ws"
    run_cli(ws, "gallery", "import", "--name", "hand", "--manifest", str(tmp_path / "gallery.csv"))
    run_cli(ws, "index", "build", "--gallery", "hand", "--encoder", ENCODER)
    return ws, tmp_path / "queries.csv", pd.DataFrame(gallery)


def _expected_sim(queries: pd.DataFrame, gallery: pd.DataFrame) -> dict[tuple[str, str], float]:
    """Mean cosine of each (method, group)'s queries to their identity's reference, from fpr.embed."""
    refs = gallery[gallery["role"] == "reference"].set_index("identity")["path"]
    q = api.embed(ENCODER, queries["path"].tolist()).vectors.astype(np.float64)
    r = api.embed(ENCODER, refs.loc[queries["identity"]].tolist()).vectors.astype(np.float64)
    cos = (q * r).sum(axis=1) / np.linalg.norm(q, axis=1) / np.linalg.norm(r, axis=1)
    df = queries.assign(cos=cos)
    out = {(m, g): float(v) for (m, g), v in df.groupby(["method", "group"])["cos"].mean().items()}
    out.update({(m, "*"): float(v) for m, v in df.groupby("method")["cos"].mean().items()})
    return out


HAND = {"copy": {"map": 1.0, "cmc@1": 1.0, "cmc@5": 1.0, "cmc@10": 1.0, "minp": 1.0},
        "swap": {"map": 0.5, "cmc@1": 0.0, "cmc@5": 1.0, "cmc@10": 1.0, "minp": 0.5}}


def test_query_document_has_the_hand_computed_values(hand_run):
    ws, queries, gallery = hand_run
    doc = validate(json.loads(run_cli(ws, "query", "--index", f"hand-{ENCODER}", "--queries", str(queries),
                                      "--run", "hand", "--format", "json").stdout), RUN_RESULT)
    sims = _expected_sim(pd.read_csv(queries), gallery)
    rows = {(r["method"], r["group"]): r for r in doc["summary"]}
    assert sorted(rows) == sorted((m, g) for m in HAND for g in (*GROUPS, "*"))
    for (method, group), row in rows.items():
        assert row["encoder"] == ENCODER
        assert row["n_queries"] == (4 if group == "*" else 2)
        for key, want in HAND[method].items():
            assert row[key] == want, (method, group, key)
        assert row["sim"] == pytest.approx(sims[(method, group)], abs=1e-6)
        # 2 or 4 queries: fewer than 10, so no interval, and the row says why
        assert row["map_lo"] is None and row["map_hi"] is None and "fewer than 10" in row["no_interval"]
        assert ("map_group_mean" in row) == (group == "*")
    assert rows[("swap", "*")]["map_group_mean"] == 0.5
    assert doc["run"] == {"id": "hand", "created": doc["provenance"]["created_at"], "gallery": "hand",
                          "index": f"hand-{ENCODER}", "index_version": doc["run"]["index_version"],
                          "encoders": [ENCODER], "scope": "group", "queries": str(queries), "n_queries": 8,
                          "n_evaluated": 8, "n_skipped": 0, "settings": {
                              "scope": "group", "scorers": [], "top_k": 10, "seed": 0,
                              "skip_missing_identities": False, "skip_unreadable": False, "scorer_options": {}}}
    assert doc["run"]["index_version"]
    assert doc["skipped"] == {} and doc["sim_definition"] == {"identity": 8}
    prov = doc["provenance"]
    assert isinstance(prov["preprocessing"], dict) and prov["preprocessing"]["name"]
    assert prov["weights_status"] == "not-checked" and prov["encoder"] == ENCODER  # pixels-16 has no weights
    assert prov["versions"]["fpr"] == fpr.__version__
    # stored as an object too: the provenance column holds no nested JSON text
    con = duckdb.connect(str(ws / "fpr.duckdb"), read_only=True)
    try:
        stored = json.loads(con.execute("SELECT provenance FROM runs WHERE run_id = 'hand'").fetchone()[0])
    finally:
        con.close()
    assert isinstance(stored["preprocessing"], dict)

    # the same document from the Python API and from the report (a collection of one, with the pivot)
    res = api.load_run("hand", workspace=ws)
    assert isinstance(res.summary, pd.DataFrame) and isinstance(res.per_query, pd.DataFrame)
    assert list(res.summary.columns[:3]) == ["encoder", "method", "group"]
    api_doc = validate(json.loads(json.dumps(res.to_dict())), RUN_RESULT)
    assert api_doc["summary"] == doc["summary"] and api_doc["run"] == doc["run"]
    assert res.summary_records() == doc["summary"]
    report = json.loads(run_cli(ws, "report", "--run", "hand", "--format", "json").stdout)
    assert single_run(report)["summary"] == doc["summary"]
    cells = {(c["method"], c["group"], c["metric"]): c["value"] for c in report["pivot"]}
    assert cells[("swap", "*", "map")] == 0.5 and cells[("copy", "cats", "map")] == 1.0


def test_export_json_lists_the_rows_and_api_can_add_them(hand_run, tmp_path):
    ws, queries, _ = hand_run
    run_cli(ws, "query", "--index", f"hand-{ENCODER}", "--queries", str(queries), "--run", "hand")
    out = tmp_path / "hand.json"
    assert run_cli(ws, "export", "--run", "hand", "--out", str(out)).stdout.strip() == str(out)
    doc = single_run(json.loads(out.read_text()))
    csv = pd.read_csv(api.export_run("hand", tmp_path / "hand.csv", workspace=ws))
    assert [r["query_id"] for r in doc["per_query"]] == csv["query_id"].tolist()
    assert list(doc["per_query"][0]) == list(csv.columns)  # the same columns as the CSV export
    aps = {r["query_id"]: r["ap"] for r in doc["per_query"]}
    assert aps == {q: (1.0 if q.startswith("copy") else 0.5) for q in aps}
    with_rows = validate(api.load_run("hand", workspace=ws).to_dict(per_query=True), RUN_RESULT)
    assert len(with_rows["per_query"]) == 8 and "per_query" not in api.load_run("hand", workspace=ws).to_dict()
    printed = json.loads(run_cli(ws, "export", "--run", "hand", "--format", "json").stdout)
    assert printed == json.loads(out.read_text())  # stdout and the file: the same document
    bad = run_cli(ws, "export", "--run", "hand", "--out", str(tmp_path / "hand.xml"), ok=False)
    assert bad.exit_code == 2 and "output must end in .csv, .tsv, .parquet or .json" in bad.stderr
    bad = run_cli(ws, "export", "--run", "hand", ok=False)
    assert bad.exit_code == 2 and "give exactly one of --out FILE or --format json" in bad.stderr


def test_two_encoder_query_and_report_carry_the_encoder_on_every_row(hand_run):
    ws, queries, _ = hand_run
    encoders = (ENCODER, "fpr-world-v1")
    doc = validate(json.loads(run_cli(ws, "query", "--gallery", "hand", "--encoders", ",".join(encoders),
                                      "--queries", str(queries), "--run", "two", "--format", "json").stdout),
                   RUN_RESULTS)
    assert doc["encoders"] == list(encoders)
    for run_doc, enc in zip(doc["runs"], encoders):
        assert run_doc["run"]["id"] == f"two@{enc}" and run_doc["run"]["encoders"] == [enc]
        assert len(run_doc["summary"]) == 6 and {r["encoder"] for r in run_doc["summary"]} == {enc}
    # pixels-16's rows are the hand-computed ones whichever command made them
    assert {(r["method"], r["group"]): r["map"] for r in doc["runs"][0]["summary"]} == \
        {(m, g): HAND[m]["map"] for m in HAND for g in (*GROUPS, "*")}
    report = validate(json.loads(run_cli(ws, "report", "--run", "two", "--format", "json").stdout), RUN_RESULTS)
    assert [r["summary"] for r in report["runs"]] == [r["summary"] for r in doc["runs"]]
    loaded = [api.load_run(r, workspace=ws) for r in api.run_ids("two", workspace=ws)]
    again = validate(json.loads(json.dumps(api.runs_document(loaded))), RUN_RESULTS)
    assert [r["summary"] for r in again["runs"]] == [r["summary"] for r in doc["runs"]]


def test_schema_declares_every_summary_metric_and_rejects_a_string_provenance():
    """A metric declared in fpr.metrics.specs is a property of the summary row (so adding one means naming
    it in the schema); and the schema is what the docs say: provenance an object, encoder on every row."""
    from fpr.metrics.specs import summary_row_columns

    row_props = SCHEMA["$defs"]["summaryRow"]["properties"]
    assert set(summary_row_columns()) <= set(row_props)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema" and SCHEMA_FILE.name == \
        "run-result-v1.json"
    import jsonschema

    good = {"schema": RUN_RESULT, "run": {"id": "r", "created": None, "gallery": None, "index": None,
                                          "index_version": None, "encoders": ["e"], "scope": "group",
                                          "queries": None, "n_queries": 0, "n_evaluated": 0, "n_skipped": 0,
                                          "settings": {}},
            "summary": [{"encoder": "e", "method": "m", "group": "*", "n_queries": 0, "map": None, "sim": None}],
            "skipped": {}, "sim_definition": {},
            "provenance": {"encoder": "e", "weights_checksum": "none", "versions": {"fpr": "0"},
                           "created_at": "t", "preprocessing": {"name": "p", "size": 16}}}
    validate(good, RUN_RESULT)
    for broken in ({**good, "provenance": {**good["provenance"], "preprocessing": '{"name": "p"}'}},
                   {**good, "summary": [{k: v for k, v in good["summary"][0].items() if k != "encoder"}]},
                   {**good, "schema": "fpr.run-result/2"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, SCHEMA, cls=jsonschema.Draft202012Validator)


def test_stored_provenance_text_is_read_back_as_an_object_and_damaged_text_is_one_line(hand_run):
    """A run stored the 0.1.0 way (preprocessing as JSON text) loads with an object; unreadable text is a
    one-line error naming the field, not a traceback."""
    ws, queries, _ = hand_run
    run_cli(ws, "query", "--index", f"hand-{ENCODER}", "--queries", str(queries), "--run", "old")
    con = duckdb.connect(str(ws / "fpr.duckdb"))
    try:
        prov = json.loads(con.execute("SELECT provenance FROM runs WHERE run_id = 'old'").fetchone()[0])
        text = json.dumps(prov["preprocessing"], sort_keys=True, separators=(",", ":"))
        con.execute("UPDATE runs SET provenance = ? WHERE run_id = 'old'",
                    [json.dumps({**prov, "preprocessing": text})])
    finally:
        con.close()
    doc = validate(api.load_run("old", workspace=ws).to_dict(), RUN_RESULT)
    assert doc["provenance"]["preprocessing"] == prov["preprocessing"]
    con = duckdb.connect(str(ws / "fpr.duckdb"))
    try:
        con.execute("UPDATE runs SET provenance = ? WHERE run_id = 'old'",
                    [json.dumps({**prov, "preprocessing": "{not json"})])
    finally:
        con.close()
    bad = run_cli(ws, "report", "--run", "old", "--format", "json", ok=False)
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    lines = [ln for ln in bad.stderr.splitlines() if ln.startswith("fpr: error:")]
    assert len(lines) == 1 and "unreadable preprocessing protocol" in lines[0], bad.stderr
