"""#33 item 3: a run's summary counts each scorer's NaNs by reason phrase, in ``fpr query``, ``fpr report`` (table
and JSON, valid against the schema) -- on the hand-built run of tests/workflows/test_result_document.py (8
queries) scored by a probe scorer whose NaNs are known: 2 'image too small' (two different details), 1
'textureless image', 1 without a note."""
from __future__ import annotations

import json

import pandas as pd
import pytest

import fpr.scorers as S
from fpr.render.result import RUN_RESULT
from tests.conftest import run_cli
from tests.result_schema import single_run, validate
from tests.workflows.test_result_document import ENCODER, hand_run  # noqa: F401 (fixture)

NOTES = {"copy-cats-0": "image too small: 1x1 px", "copy-cats-1": "image too small: 3x2 px",
         "swap-cats-0": "textureless image (uniform grey)", "swap-cats-1": None}
LINE = "nan-probe: 4 of 8 NaN (2 image too small, 1 no reason given, 1 textureless image)"


class _Probe(S.Scorer):
    name = "nan-probe"
    needs = frozenset({"image"})
    metrics = ("score", "other")
    primary_metric = "score"

    def score(self, batch):
        rows = []
        for q in batch.query_ids:
            nan = q in NOTES
            rows.append((q, "score", float("nan") if nan else 0.5, NOTES.get(q)))
            rows.append((q, "other", float("nan"), "not counted: not the primary metric"))
        return pd.DataFrame(rows, columns=["query_id", "metric", "value", "note"])


@pytest.fixture
def probe(monkeypatch):
    monkeypatch.setitem(S._SCORERS, "nan-probe", _Probe())


def test_query_report_and_documents_count_nans_by_reason(hand_run, probe):  # noqa: F811
    ws, queries, _ = hand_run
    res = run_cli(ws, "query", "--index", f"hand-{ENCODER}", "--queries", str(queries), "--run", "p",
                  "--scorers", "nan-probe")
    assert LINE in res.stdout.splitlines()
    doc = validate(json.loads(run_cli(ws, "query", "--index", f"hand-{ENCODER}", "--queries", str(queries),
                                      "--run", "p2", "--scorers", "nan-probe", "--format", "json").stdout), RUN_RESULT)
    expected = [{"scorer": "nan-probe", "metric": "score", "n": 8, "n_nan": 4,
                 "reasons": {"image too small": 2, "no reason given": 1, "textureless image": 1}}]
    assert doc["nan_reasons"] == expected
    assert LINE in run_cli(ws, "report", "--run", "p").stdout.splitlines()
    assert single_run(json.loads(run_cli(ws, "report", "--run", "p", "--format", "json").stdout))[
        "nan_reasons"] == expected


def test_a_run_without_nans_prints_no_line(hand_run, probe, monkeypatch):  # noqa: F811
    ws, queries, _ = hand_run
    monkeypatch.setattr("tests.cli.test_nan_reasons_cli.NOTES", {})
    res = run_cli(ws, "query", "--index", f"hand-{ENCODER}", "--queries", str(queries), "--run", "p",
                  "--scorers", "nan-probe")
    assert " NaN (" not in res.stdout and "of 8 NaN" not in res.stdout
