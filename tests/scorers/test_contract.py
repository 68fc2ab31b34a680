"""Contract over the scorer registry: every registered scorer, given a tiny batch on this offline machine,
either returns rows of its declared metrics for the batch's queries, or stops with a one-line fpr error
(a missing model, endpoint or key) -- never another exception, never a metric it did not declare."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from fpr.errors import FprError
from fpr.scorers import QueryBatch, all_scorers, run_scorers

# Options that let a scorer run without downloads where it can (its own tests cover the rest).
OFFLINE_OPTIONS = {"copy-paste": {"copy-paste.encoder": "pixels-16"},
                   "vistar-gc": {"vistar-gc.depth_model": "none", "vistar-gc.padim": "off"}}


def _batch(tmp, scorer: str) -> QueryBatch:
    rng = np.random.default_rng(3)
    paths = []
    for k in range(2):
        arr = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
        Image.fromarray(arr, "RGB").save(tmp / f"q{k}.png")
        paths.append(str(tmp / f"q{k}.png"))
    ref = tmp / "ref.png"
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), "RGB").save(ref)
    return QueryBatch(["q0", "q1"], paths, ["a", "b"], ["g", "g"], ["a red sign that says OPEN", "a dog"],
                      [[str(ref)], [str(ref)]], device="cpu", options=OFFLINE_OPTIONS.get(scorer, {}),
                      workspace=tmp, extras=[{"expected_text": "OPEN"}, {}])


@pytest.mark.parametrize("name", sorted(all_scorers()))
def test_a_scorer_returns_its_declared_metrics_or_a_clean_error(name, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("FPR_JUDGE_MODEL", raising=False)
    scorer = all_scorers()[name]
    try:
        out = run_scorers([name], _batch(tmp_path, name))
    except FprError as exc:
        line = exc.one_line() if hasattr(exc, "one_line") else str(exc)
        assert "\n" not in line and line.strip(), name
        return
    assert isinstance(out, pd.DataFrame)
    assert set(out["scorer"]) <= {name}
    assert set(out["metric"]) <= set(scorer.metrics), (name, set(out["metric"]) - set(scorer.metrics))
    assert set(out["query_id"]) <= {"q0", "q1"}
    assert out["value"].dtype == float


def test_declared_metrics_are_checked_at_run_time_and_primary_metric_is_one_of_them(monkeypatch, tmp_path):
    """Issue #36: the base class carries ``primary_metric``; a scorer returning a metric it does not declare
    fails naming it; a primary metric outside ``metrics`` is refused at registration."""
    import pandas as pd

    import fpr.scorers as S

    class Loose(S.Scorer):
        name = "loose-probe"
        needs = frozenset({"image"})
        metrics = ("a",)
        primary_metric = "a"

        def score(self, batch):
            return pd.DataFrame({"query_id": batch.query_ids, "metric": "b", "value": 1.0})

    assert S.Scorer.primary_metric is None
    monkeypatch.setitem(S._SCORERS, "loose-probe", Loose())
    batch = S.QueryBatch(["q"], [str(tmp_path / "x.png")], ["i"], ["g"], [None], [[]])
    with pytest.raises(RuntimeError, match="^scorer loose-probe returned metrics it does not declare: b "
                                           r"\(declared: a\)$"):
        S.run_scorers(["loose-probe"], batch)
    bad = Loose()
    bad.primary_metric = "z"
    with pytest.raises(ValueError, match="primary_metric 'z' is not one of its metrics"):
        S.register_scorer(bad, replace=True)
    for scorer in S.all_scorers().values():
        assert scorer.primary_metric in scorer.metrics, scorer.name
