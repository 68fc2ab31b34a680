"""A NaN's reason phrase and the per-scorer counts by phrase (issue #33 item 3), on hand-counted tables."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from fpr.metrics.reasons import NO_REASON, NanCount, nan_counts, reason_phrase

NAN = float("nan")


@pytest.mark.parametrize("note, phrase", [
    ("image too small: 1x1 px, the scorer needs 8", "image too small"),
    ("no object found (expected from light_direction 'left')", "no object found"),
    ("textureless image; outside the calibrated domain", "textureless image"),
    ("model missing: weights for encoder 'clip-vit-b-32' are missing", "model missing"),
    (None, NO_REASON), ("", NO_REASON), ("   ", NO_REASON), (NAN, NO_REASON),
    (json.dumps({"cues": {"padim": None}, "missing": {"padim": "no references", "depth_normals": "off"}}),
     "missing depth_normals, padim"),
    (json.dumps({"reason": "judge refused: policy", "turns": 2}), "judge refused"),
    ("{not json: the text's own phrase", "{not json"),
])
def test_reason_phrase(note, phrase):
    assert reason_phrase(note) == phrase


def test_a_long_free_text_is_cut_at_a_word():
    phrase = reason_phrase("word " * 30)
    assert phrase.endswith("...") and len(phrase) <= 63 and " wor..." not in phrase


def test_counts_per_scorer_on_its_primary_metric_by_phrase():
    rows = []
    # copy-paste (primary 'flag'): 40 queries, 2 textureless (two different details), 1 too small; its other
    # metric 'pixel' is NaN for 10 more queries and must not count
    for k in range(40):
        flag, note = 0.0, ""
        if k < 2:
            flag, note = NAN, f"textureless image: grey level {k}"
        elif k == 2:
            flag, note = NAN, "image too small (1x1 px)"
        rows.append(("copy-paste", f"q{k}", "flag", flag, note))
        rows.append(("copy-paste", f"q{k}", "pixel", NAN if k < 13 else 0.5, "x" if k < 13 else None))
    # vistar-li (not in primary: counted on 'score'): 3 rows, 1 NaN without a note
    rows += [("vistar-li", "a", "score", 0.9, None), ("vistar-li", "b", "score", NAN, None),
             ("vistar-li", "c", "score", 0.1, None), ("vistar-li", "c", "angle_deg", NAN, None)]
    # clip-t: no NaN
    rows += [("clip-t", "a", "score", 0.3, None)]
    aux = pd.DataFrame(rows, columns=["scorer", "query_id", "metric", "value", "note"])
    got = nan_counts(aux, {"copy-paste": "flag"})
    assert got == [NanCount("clip-t", "score", 1, 0, ()),
                   NanCount("copy-paste", "flag", 40, 3, (("textureless image", 2), ("image too small", 1))),
                   NanCount("vistar-li", "score", 3, 1, ((NO_REASON, 1),))]
    assert got[1].line() == "copy-paste: 3 of 40 NaN (2 textureless image, 1 image too small)"
    assert got[0].line() == "clip-t: 0 of 1 NaN"
    assert got[1].record() == {"scorer": "copy-paste", "metric": "flag", "n": 40, "n_nan": 3,
                               "reasons": {"textureless image": 2, "image too small": 1}}
    assert nan_counts(aux.iloc[:0], {}) == []


def test_equal_counts_are_ordered_by_phrase():
    aux = pd.DataFrame([("s", "a", "score", NAN, "b reason"), ("s", "b", "score", NAN, "a reason")],
                       columns=["scorer", "query_id", "metric", "value", "note"])
    assert nan_counts(aux, {})[0].line() == "s: 2 of 2 NaN (1 a reason, 1 b reason)"
