"""The paper's pivot and its renderings (golden files), and drift diagnosis on hand-made rankings."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fpr.render import paper as rep

GOLDEN = Path(__file__).parent / "golden"


def summary_rows() -> list[dict]:
    """Two encoders, two methods, two groups plus overall; a scorer column; one missing cell."""
    rows = []
    for e, enc in enumerate(("clip", "dino_v2")):
        for m, method in enumerate(("faithful", "generic")):
            for g, group in enumerate(("leopard", "zebra", "*")):
                base = 0.9 - 0.4 * m - 0.05 * e - 0.01 * g
                row = {"encoder": enc, "method": method, "group": group, "n_queries": 10 if group != "*" else 20,
                       "map": base, "map_lo": base - 0.1, "map_hi": base + 0.05,
                       "sim": base / 2, "sim_lo": base / 2 - 0.02, "sim_hi": base / 2 + 0.02,
                       "cmc@1": 1.0 - 0.5 * m, "cmc@10": 1.0, "clip-t.score": 0.3 + 0.01 * g}
                if enc == "dino_v2" and method == "generic" and group == "zebra":
                    row["sim"] = float("nan")
                rows.append(row)
    return rows


def pivot() -> rep.Pivot:
    return rep.pivot(summary_rows(), metrics=("sim", "map", "cmc@10"))


def test_pivot_cells_are_the_summary_values():
    p = pivot()
    assert p.groups == ["leopard", "zebra", "*"] and p.methods == ["faithful", "generic"]
    assert [c.label for c in p.columns] == ["Sim clip", "mAP clip", "CMC@10 clip", "Sim dino_v2", "mAP dino_v2",
                                            "CMC@10 dino_v2", "clip-t.score"]
    v, lo, hi = p.value("zebra", "generic", "dino_v2 map")
    assert (v, lo, hi) == pytest.approx((0.9 - 0.4 - 0.05 - 0.01, 0.34, 0.49))
    assert math.isnan(p.value("zebra", "generic", "dino_v2 sim")[0])
    assert p.value("*", "faithful", "clip-t.score")[0] == pytest.approx(0.32)
    assert math.isnan(p.value("*", "faithful", "clip-t.score")[1])
    assert p.n_queries[("*", "generic")] == 20


def test_format_cell():
    assert rep.format_cell(0.51234, 0.4, 0.61) == "0.512 [0.40,0.61]"
    assert rep.format_cell(0.5) == "0.500"
    assert rep.format_cell(float("nan"), 0.1, 0.2) == "-"
    assert rep.format_cell(0.5, 0.4, 0.6, latex=True) == "0.500 {\\scriptsize[0.40, 0.60]}"


@pytest.mark.parametrize("fmt,name", [("markdown", "pivot.md"), ("latex", "pivot.tex"), ("table", "pivot.txt")])
def test_renderings_match_golden_files(fmt, name):
    text = rep.render(pivot(), fmt) + "\n"
    path = GOLDEN / name
    if os.environ.get("FPR_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_csv_and_json_are_long_records():
    p = pivot()
    recs = json.loads(rep.render(p, "json"))
    assert len(recs) == 3 * 2 * 7
    r = [x for x in recs if x["group"] == "zebra" and x["method"] == "generic" and x["encoder"] == "dino_v2"
         and x["metric"] == "sim"][0]
    assert r["value"] is None
    lines = rep.render(p, "csv").splitlines()
    assert lines[0] == "group,method,n_queries,encoder,metric,value,lo,hi" and len(lines) == 1 + len(recs)


def test_unknown_metric_is_one_line_error():
    from fpr.errors import InputError

    with pytest.raises(InputError, match="unknown report metric"):
        rep.pivot(summary_rows(), metrics=("map", "fid"))


def test_method_order_puts_preferred_first_then_first_appearance():
    df = pd.DataFrame({"method": ["z", "b", "z", "a", "generic", "faithful"]})
    assert rep.method_order(df, ("faithful", "drift-0.1", "generic")) == ["faithful", "generic", "z", "b", "a"]


def test_drift_from_rankings_by_hand():
    pq = pd.DataFrame({"run_id": "r", "query_id": ["q1", "q2", "q3"], "identity": ["A", "A", "B"],
                       "group": "g", "status": "ok", "encoder": "e"})
    rk = pd.DataFrame({"run_id": "r", "query_id": ["q1", "q1", "q1", "q2", "q2", "q3"],
                       "rank": [1, 2, 3, 1, 2, 1], "item_id": [5, 1, 7, 1, 2, 1],
                       "score": [0.9, 0.8, 0.7, 0.95, 0.6, 0.5], "relevant": [False, True, False, True, True, False]})
    ident = {("r", 1): "A", ("r", 2): "A", ("r", 5): "C", ("r", 7): "B"}
    d = rep.drift_from_rankings(pq, rk, ident).set_index("query_id")
    assert d.loc["q1", "top1_identity"] == "C" and d.loc["q1", "drift_identity"] == "C"
    assert d.loc["q1", "drift_score"] == 0.9 and d.loc["q1", "drift_source"] == "top-k"
    # q2's top-k holds only its own identity: left for the full scores
    assert d.loc["q2", "top1_identity"] == "A" and pd.isna(d.loc["q2", "drift_identity"])
    assert pd.isna(d.loc["q2", "drift_source"])
    assert d.loc["q3", "drift_identity"] == "A"
    pq = pq.merge(d.reset_index(), on=["run_id", "query_id"])
    conf = rep.confusion(pq)
    assert conf == [{"encoder": "e", "group": "g", "identity": "A", "top1_identity": "A", "n": 1},
                    {"encoder": "e", "group": "g", "identity": "A", "top1_identity": "C", "n": 1},
                    {"encoder": "e", "group": "g", "identity": "B", "top1_identity": "A", "n": 1}]
    (_, _, m), = rep.confusion_matrices(pq)
    assert m.loc["A"].tolist() == [1, 0, 1] and list(m.columns) == ["A", "B", "C"]


def test_drift_from_scores_best_non_relevant_in_scope():
    scores = np.array([[0.9, 0.8, 0.7, 0.95], [0.1, 0.2, 0.3, 0.4]])
    relevant = np.array([[True, False, False, False], [True, True, True, False]])
    in_scope = np.array([[True, True, True, False], [True, True, True, False]])
    ids, vals = rep.drift_from_scores(scores, relevant, in_scope, np.array(["A", "B", "C", "D"], dtype=object))
    assert ids == ["B", None]
    assert vals[0] == 0.8 and np.isnan(vals[1])
