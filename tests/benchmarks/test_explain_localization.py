"""fpr explain's localisation of the world's redrawn markings, on a small held-out world (the figure is pinned;
the full table: benchmarks/results/explain_localization.md)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

PINNED = 32 / 36  # world seed 203 (never used to choose the parameters): 32 of 36 drift-0.5 queries

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    path = ROOT / "benchmarks" / "explain_localization.py"
    spec = importlib.util.spec_from_file_location("explain_localization", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_the_map_points_at_redrawn_markings_better_than_a_map_that_finds_the_animal(tmp_path, monkeypatch):
    bench = _bench()
    monkeypatch.setattr(bench, "WORLD", dict(identities=3, gallery=6, references=2, queries=2,
                                             methods=("new-scene@0.5", "ref-pose@0.5")))
    df = pd.DataFrame(bench.report_seed(203, tmp_path / "ws"))
    hit = df.groupby("map")["hit"].mean()
    ours = hit[[m for m in hit.index if m.startswith("fpr explain")][0]]
    assert len(df) == 36 * 4
    assert ours == pytest.approx(PINNED, abs=1e-12)
    assert ours > hit["silhouette map"] and ours > hit["centre map"] and ours > hit["random map"]
