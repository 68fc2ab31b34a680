"""vistar-psc: the chaos ratio, conflict, attachment, confidence weighting and worst case on hand-computed
masks and depth maps; the model path with tiny random Mask2Former and DPT models saved in the real
transformers layouts (the scorer's values equal the core's on what the models gave); missing weights are
one line naming the model and the fetch command; known-answer renders on a held-out seed."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from fpr.errors import NotFoundError
from fpr.scorers import QueryBatch, run_scorers
from fpr.scorers.vistar import psc as vp
from tests.scorers.known_answers import known_answers
from tests.scorers.tiny_models import write_psc_models

def _columns(widths_depths: list[tuple[int, float]], rows: int = 4) -> np.ndarray:
    return np.repeat(np.concatenate([[d] * w for w, d in widths_depths])[None, :], rows, axis=0).astype(float)


def _side_by_side() -> tuple[np.ndarray, np.ndarray]:
    a = np.zeros((4, 8), bool)
    a[:, :4] = True
    return a, ~a


def test_chaos_of_two_masks_meeting_at_one_depth_is_zero_and_the_score_is_one_minus_the_confidences():
    # 4x8 image, A = columns 0-3, B = columns 4-7; the seam band is 2 px (the floor), so A's seam is columns
    # 2-3 and B's is 4-5. Seams both at depth 3, the rest at 1 and 5: C = 0 / (4 + eps) = 0, conflict 1.
    a, b = _side_by_side()
    depth = _columns([(2, 1.0), (4, 3.0), (2, 5.0)])
    r = vp.psc([vp.Instance(a, 0.9), vp.Instance(b, 0.8)], depth)
    (pair,) = r.pairs
    assert pair.d_inter == (3.0, 3.0) and pair.d_non == (1.0, 5.0)
    assert pair.chaos == 0.0 and pair.conflict == 1.0 and not pair.attached
    assert r.score == pytest.approx(1 - 0.9 * 0.8)


def test_chaos_ratio_and_the_linear_conflict_by_hand():
    # B's seam at depth 4: C = |3 - 4| / (|1 - 5| + 4e-6); conflict = 1 - C / 1.0; score = 1 - 0.72 * conflict
    a, b = _side_by_side()
    depth = _columns([(2, 1.0), (2, 3.0), (2, 4.0), (2, 5.0)])
    r = vp.psc([vp.Instance(a, 0.9), vp.Instance(b, 0.8)], depth)
    c = 1.0 / (4.0 + 4e-6)
    assert r.pairs[0].chaos == pytest.approx(c, rel=1e-12)
    assert r.score == pytest.approx(1 - 0.72 * (1 - c), rel=1e-9)
    # beyond the threshold there is no conflict at all
    assert vp.psc([vp.Instance(a, 0.9), vp.Instance(b, 0.8)], depth, vp.PscSettings(chaos_threshold=0.2)).score == 1.0
    assert vp.chaos_ratio(2.0, 2.5, 1.0, 3.0, 0.0) == 0.25
    assert vp.conflict(0.0, 0.35) == 1.0 and vp.conflict(0.7, 0.35) == 0.0


def test_an_attached_badge_is_relaxed_and_the_relaxation_is_the_option():
    a = np.ones((8, 8), bool)
    a[3:5, 3:5] = False
    badge = ~a
    depth = np.full((8, 8), 2.0)
    assert vp.enclosure(badge, a) == 1.0
    r = vp.psc([vp.Instance(a, 1.0), vp.Instance(badge, 1.0)], depth)
    # all of the badge is seam (its 'outside' is its seam), all depths equal: C = 0, conflict 1 x 0.25
    assert r.pairs[0].attached and r.pairs[0].chaos == 0.0
    assert r.score == pytest.approx(0.75)
    assert vp.psc([vp.Instance(a, 1.0), vp.Instance(badge, 1.0)], depth, vp.PscSettings(attach_relax=1.0)).score == 0.0
    # a box only half inside the other's is not an attachment
    half = np.zeros((8, 8), bool)
    half[0:4, 6:8] = True
    other = np.zeros((8, 8), bool)
    other[0:8, 0:7] = True
    assert vp.enclosure(half, other) == pytest.approx(0.5)


def test_the_score_is_the_worst_confidence_weighted_pair_and_no_pair_scores_one():
    a, b = np.zeros((6, 12), bool), np.zeros((6, 12), bool)
    a[:, :4], b[:, 4:8] = True, True
    c = np.zeros((6, 12), bool)
    c[:, 8:] = True
    depth = _columns([(2, 1.0), (4, 3.0), (2, 5.0), (2, 3.0), (2, 9.0)], rows=6)
    # (a, b): seams at 3 and 3, the rest at 1 and 5: C = 0, conflict 1, weighted 0.5 x 1.0
    # (b, c): b's seam toward c is columns 6-7 (5), c's 8-9 (3); the rest 3 and 9: C = 2 / 6, conflict 2/3
    # (a, c): 5 px apart, beyond the 2 px band: no pair
    r = vp.psc([vp.Instance(a, 0.5), vp.Instance(b, 1.0), vp.Instance(c, 1.0)], depth)
    weighted = {(p.a, p.b): p.weighted for p in r.pairs}
    assert weighted == pytest.approx({(0, 1): 0.5, (1, 2): 1 - 2 / (6 + 8e-6)}, rel=1e-9)  # eps = 1e-6 x range 8
    assert r.score == pytest.approx(2 / (6 + 8e-6))  # the worst pair: (b, c), although (a, b) has C = 0
    far = np.zeros((6, 12), bool)
    far[:, 10:] = True
    alone = vp.psc([vp.Instance(a, 1.0), vp.Instance(far, 1.0)], depth)
    assert alone.score == 1.0 and alone.pairs == () and alone.worst is None
    rows = pd.DataFrame(vp.result_rows("q", alone), columns=["query_id", "metric", "value", "note"]).set_index("metric")
    assert math.isnan(rows.loc["chaos", "value"]) and rows.loc["chaos", "note"] == "no overlapping pair"
    assert rows.loc["pairs", "value"] == 0.0 and rows.loc["instances", "value"] == 2.0


def test_a_mask_of_another_size_is_refused():
    with pytest.raises(ValueError, match="differs from the depth map"):
        vp.psc([vp.Instance(np.ones((3, 3), bool), 1.0)], np.zeros((4, 4)))


# --------------------------------------------------------------------------- model path

@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    return write_psc_models(tmp_path_factory.mktemp("psc-models"))


def _image(tmp_path: Path, k: int) -> str:
    arr = np.random.default_rng(k).integers(0, 256, (48, 80, 3), dtype=np.uint8)
    Image.fromarray(arr, "RGB").save(tmp_path / f"q{k}.png")
    return str(tmp_path / f"q{k}.png")


def test_the_model_path_gives_the_cores_values_on_what_the_models_found(tiny_models, tmp_path):
    paths = [_image(tmp_path, k) for k in range(2)]
    opts = {"vistar-psc.segmenter": str(tiny_models / "seg"), "vistar-psc.depth_model": str(tiny_models / "depth"),
            "vistar-psc.min_confidence": "0"}
    batch = QueryBatch(["q0", "q1"], paths, ["a", "b"], ["g", "g"], [None, None], [[], []], device="cpu",
                       options=opts)
    out = run_scorers(["vistar-psc"], batch).set_index(["query_id", "metric"])
    assert set(out.index.get_level_values("metric")) == set(vp.VistarPSC.metrics)
    sp, sm, dp, dm = vp.load_models(str(tiny_models / "seg"), str(tiny_models / "depth"))
    from fpr.images import load_rgb

    for q, p in zip(["q0", "q1"], paths):
        img = load_rgb(p)
        inst = vp.segment_instances(sp, sm, img, 0.0)
        depth = vp.predict_depth(dp, dm, img)
        assert depth.shape == (48, 80) and all(i.mask.shape == (48, 80) for i in inst)
        assert all(i.label in {"person", "chair", "table"} and 0 <= i.confidence <= 1 for i in inst)
        want = vp.psc(inst, depth)
        assert out.loc[(q, "score"), "value"] == pytest.approx(want.score)
        assert out.loc[(q, "instances"), "value"] == len([i for i in inst if i.mask.any()])
        assert json.loads(out.loc[(q, "score"), "note"])["pairs"] == len(want.pairs)
        assert 0.0 <= out.loc[(q, "score"), "value"] <= 1.0


def test_missing_weights_are_one_line_naming_the_model_and_the_fetch_command(tmp_path):
    with pytest.raises(NotFoundError) as e:
        vp.load_models("no-such-org/no-such-segmenter", "no-such-org/no-such-depth")
    line = e.value.one_line()
    assert "\n" not in line and "no-such-org/no-such-segmenter" in line
    assert "huggingface-cli download no-such-org/no-such-segmenter" in line
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotFoundError, match="no config.json"):
        vp.load_models(str(tmp_path / "empty"), "x/y")


# --------------------------------------------------------------------------- known answers

def test_known_answer_renders_separate_penetration_from_occlusion_on_a_held_out_seed():
    ka = known_answers()
    rows = ka.run_psc(3, 8)  # seed 3: neither the calibration seed (0) nor the table's check seeds (1, 2)
    assert ka.psc_separation(rows, "occlude") >= 0.8
    assert ka.psc_separation(rows, "attach") >= 0.7  # the attachment relaxation lifts badges above penetrations
    assert all(r.attached for r in rows if r.kind == "attach")
    assert not any(r.attached for r in rows if r.kind == "penetrate")
    assert ka.auroc([1.0, 2.0], [0.0, 2.0]) == pytest.approx(2.5 / 4)  # 1 + 0 + 1 + 1/2 of 4 pairs
