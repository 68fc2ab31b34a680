"""Headroom as users see it: ``fpr query`` and ``fpr report`` warn on stderr, the report prints the table, the
JSON documents carry the ``headroom`` object, the HTML report shows it. The hand-built run of
tests/workflows/test_result_document.py: method ``copy`` has AP exactly 1 on all 4 queries (one per identity:
no within-identity pair), ``swap`` AP 1/2 on all 4; the oracle (each identity's reference image, a random image
unrelated to its gallery image) has AP 1 where its own gallery image happens to rank first: its share is counted
here from the stored per-query rows."""
from __future__ import annotations

import json

from fpr import api
from fpr.render.result import RUN_RESULT
from tests.conftest import run_cli
from tests.result_schema import single_run, validate
from tests.workflows.test_result_document import ENCODER, hand_run  # noqa: F401 (fixture)

WARNING = (f"fpr: warning: headroom under {ENCODER}: AP is exactly 1 for at least 50% of the queries of copy (100%) "
           "(oracle {oracle:.0%}): this gallery cannot tell apart methods at or above it; use a harder gallery")


def _methods(doc: dict) -> dict:
    return {r["method"]: r for r in doc["headroom"]["methods"]}


def test_query_and_report_warn_on_stderr_and_carry_the_headroom(hand_run, tmp_path):  # noqa: F811
    ws, queries, _ = hand_run
    res = run_cli(ws, "query", "--index", f"hand-{ENCODER}", "--queries", str(queries), "--run", "hand",
                  "--oracle", "--format", "json")
    pq = api.load_run("hand", workspace=ws).per_query
    oracle = float((pq.loc[pq["method"] == "oracle", "ap"] == 1.0).mean())
    warning = WARNING.format(oracle=oracle)
    assert warning in res.stderr and "fpr: warning" not in res.stdout
    doc = validate(json.loads(res.stdout), RUN_RESULT)
    rows = _methods(doc)
    assert rows["copy"] == {"encoder": ENCODER, "method": "copy", "n_queries": 4, "ap_one_share": 1.0, "n_pairs": 0,
                            "ap_tie_share": None, "oracle_ap_one_share": oracle}
    assert rows["swap"]["ap_one_share"] == 0.0 and rows["oracle"]["ap_one_share"] == oracle
    assert rows["oracle"]["n_pairs"] == 0 and rows["swap"]["n_queries"] == 4
    assert doc["headroom"]["saturated_at"] == 0.5 and len(doc["headroom"]["warnings"]) == 1
    (line,) = [x for x in res.stderr.splitlines() if x.startswith("fpr: warning: headroom")]
    assert doc["headroom"]["warnings"] == [line.removeprefix("fpr: warning: ")]
    assert line.endswith("more images per identity, look-alike identities or each identity's nearest impostors (fpr "
                         "gallery import --per-identity K --impostors N --impostor-encoder E; fpr demo --world paper; "
                         "docs/reports.md, 'Headroom')")

    rep = run_cli(ws, "report", "--run", "hand")
    assert warning in rep.stderr and "fpr: warning" not in rep.stdout
    table = rep.stdout[rep.stdout.index("headroom: can this gallery tell the best methods apart?"):]
    lines = {line.split()[1]: line.split()[2:] for line in table.splitlines()[3:6]}
    assert lines["copy"][:3] == ["4", "1.000", "0"] and lines["swap"][:3] == ["4", "0.000", "0"]
    assert lines["oracle"][:3] == ["4", f"{oracle:.3f}", "0"]
    assert "ap_one_share: queries whose AP is exactly 1" in table
    assert warning in run_cli(ws, "report", "--run", "hand", "--all").stderr
    md = run_cli(ws, "report", "--run", "hand", "--format", "markdown").stdout
    assert f"| {ENCODER} | copy | 4 | 1.0 | 0 | - |" in md and f"| {ENCODER} | swap | 4 | 0.0 | 0 | - |" in md
    report = single_run(json.loads(run_cli(ws, "report", "--run", "hand", "--format", "json").stdout))
    assert _methods(report) == rows

    html = tmp_path / "r.html"
    run_cli(ws, "report", "--run", "hand", "--html", str(html))
    text = html.read_text()
    assert "Headroom" in text and "copy (100%)" in text and "harder gallery" in text
