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
    assert rep.format_cell(0.51234, 0.4, 0.61) == "0.512 [0.400,0.610]"
    assert rep.format_cell(0.5) == "0.500"
    assert rep.format_cell(float("nan"), 0.1, 0.2) == "-"
    assert rep.format_cell(0.5, 0.4, 0.6, latex=True) == "0.500 {\\scriptsize[0.400, 0.600]}"


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


# --------------------------------------------------------------------------- readable by default (#27 item 6)

def test_scorer_columns_only_when_named_or_all():
    rows = summary_rows()
    p = rep.pivot(rows, metrics=("sim", "map"), all_scorers=False)
    assert [c.label for c in p.columns] == ["Sim clip", "mAP clip", "Sim dino_v2", "mAP dino_v2"]
    assert rep.hidden_note(rows, p) == ("(not shown: CMC@1, CMC@5, CMC@10, mINP, top margin, MAP@10, R-precision, "
                                        "clip-t (1 column); "
                                        "--all shows every column, --metrics sim,map,clip-t chooses)")
    named = rep.pivot(rows, metrics=("sim", "clip-t"), all_scorers=False)
    assert [c.label for c in named.columns] == ["Sim clip", "Sim dino_v2", "clip-t.score"]
    assert named.value("*", "faithful", "clip-t.score")[0] == pytest.approx(0.32)
    one = rep.pivot(rows, metrics=("clip-t.score",), all_scorers=False)
    assert [c.key for c in one.columns] == ["clip-t.score"]
    with pytest.raises(Exception, match="unknown report metric.*clip-x") as e:
        rep.pivot(rows, metrics=("map", "clip-x"))
    assert "clip-t.score" in e.value.hint  # the hint names the scorer columns too


def test_a_wide_pivot_folds_into_blocks_that_repeat_the_method():
    text = rep.render(rep.pivot(summary_rows(), metrics=("sim", "map"), all_scorers=False), "table", width=60)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 60
    # per group: [method, n, Sim clip, mAP clip] = 8+2+2+2+19+2+19 = 54; + Sim dino_v2 (21) > 60: a new block
    first = lines[:lines.index("")]
    assert first == ["leopard",
                     "method     n             Sim clip             mAP clip",
                     "--------  --  -------------------  -------------------",
                     "faithful  10  0.450 [0.430,0.470]  0.900 [0.800,0.950]",
                     "generic   10  0.250 [0.230,0.270]  0.500 [0.400,0.550]"]
    assert lines[6:9] == ["method            Sim dino_v2          mAP dino_v2",
                          "--------  -------------------  -------------------",
                          "faithful  0.425 [0.405,0.445]  0.850 [0.750,0.900]"]
    assert rep.render(rep.pivot(summary_rows()), "table") == rep.render(rep.pivot(summary_rows()), "table",
                                                                           width=1000)


def test_bars_by_hand():
    axis = rep.Axis(0.0, 1.0, 10)
    # mean 0.5 fills the 5 characters below it; [ at 0.3 (char 3), ] at 0.7 (char 7), oracle | at 0.9
    assert rep.bar(0.5, 0.3, 0.7, 0.9, axis) == "###[#  ] |"
    assert rep.bar(1.0, 1.0, 1.0, float("nan"), axis) == "########[]"  # a one-character interval: both ends
    assert rep.bar(0.0, float("nan"), float("nan"), 1.0, axis) == "         |"
    neg = rep.chart_axis([-0.02, 0.5], 11)  # a negative cosine: the scale starts at -0.1
    assert (neg.lo, neg.hi) == (pytest.approx(-0.1), 1.0)
    assert rep.bar(-0.1, float("nan"), float("nan"), float("nan"), neg) == "#"  # 0 is at 1.0 character
    assert rep.bar(0.4, float("nan"), float("nan"), float("nan"), neg) == " ####"  # 0.4 is at 5.0


def test_sim_vs_map_chart_has_every_encoder_and_the_oracle_as_reference():
    rows = summary_rows() + [{"encoder": e, "method": "oracle", "group": "*", "n_queries": 20, "map": 1.0,
                              "map_lo": 1.0, "map_hi": 1.0, "sim": 0.75, "sim_lo": float("nan"),
                              "sim_hi": float("nan")} for e in ("clip", "dino_v2")]
    text = rep.sim_map_chart(rows, width=80)
    blocks = text.split("\n\n")
    assert len(blocks) == 2 and "encoder clip" in blocks[0] and "encoder dino_v2" in blocks[1]
    assert max(map(len, text.splitlines())) <= 80
    lines = blocks[0].splitlines()
    assert lines[0] == "Sim vs mAP, all groups, encoder clip: # mean, [ ] 95% interval, | oracle (Sim"
    assert lines[1] == "  0.750, mAP 1.000)"  # the title wraps at the width
    name_w, text_w = len("faithful"), len("mAP 0.880 [0.780,0.930]")
    width = 80 - name_w - text_w - 4  # 45 characters from 0 to 1
    axis = rep.Axis(0.0, 1.0, width)
    start = name_w + text_w + 4
    assert lines[2].rstrip() == ("ticks", lines[2])[1].rstrip() and lines[2][start] == "0"
    assert lines[2].rstrip().endswith("1") and len(lines[2].rstrip()) == start + width
    faithful_sim = next(line for line in lines if line.startswith("faithful"))
    assert faithful_sim == f"faithful  Sim 0.440 [0.420,0.460]  {rep.bar(0.44, 0.42, 0.46, 0.75, axis)}"
    assert faithful_sim[start + int(0.75 * width)] == "|"  # the oracle's Sim
    # 0.44 * 45 = 19.8: characters 0-19 are '#', then '[' at int(0.42 * 45) = 18 and ']' at int(0.46 * 45) = 20
    assert faithful_sim[start:start + 23] == "#" * 18 + "[#]" + "  "
    no_oracle = rep.sim_map_chart(summary_rows(), width=200)
    assert "no 'oracle' row to mark" in no_oracle and "|" not in no_oracle.replace("| oracle", "")


def test_a_narrow_chart_puts_each_bar_under_its_numbers():
    text = rep.sim_map_chart(summary_rows(), width=40)
    lines = text.split("\n\n")[0].splitlines()
    assert max(len(line) for line in text.splitlines()) <= 40
    k = next(i for i, line in enumerate(lines) if line.startswith("faithful"))
    assert lines[k] == "faithful Sim 0.440 [0.420,0.460]"
    assert lines[k + 1] == "    " + rep.bar(0.44, 0.42, 0.46, float("nan"), rep.Axis(0.0, 1.0, 36))
    assert lines[k + 2] == "  mAP 0.880 [0.780,0.930]"
