"""vistar-gc: each cue on images built to have and to lack its defect; depth cues on hand-built depth maps and
missing (with the reason) when the depth model is not cached; each score is the minimum over its fixed cue set,
NaN when one of them is missing."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from PIL import Image, ImageDraw

from fpr.scorers import QueryBatch, run_scorers
from fpr.scorers.vistar import gc


def _canvas(colour=(90, 110, 140)) -> Image.Image:
    return Image.new("RGB", (256, 256), colour)


def _rgb(img: Image.Image) -> np.ndarray:
    return gc._work_array(img)


def test_contour_integrity_whole_vs_broken_outline():
    whole = _canvas()
    ImageDraw.Draw(whole).ellipse((48, 48, 208, 208), outline=(240, 240, 240), width=4)
    broken = _canvas()
    d = ImageDraw.Draw(broken)
    for a in range(0, 360, 12):  # the same circle as 3-degree dashes with 9-degree gaps
        d.arc((48, 48, 208, 208), a, a + 3, fill=(240, 240, 240), width=3)
    w, _ = gc.contour_integrity(_rgb(whole))
    b, _ = gc.contour_integrity(_rgb(broken))
    assert w == pytest.approx(1.0) and b < 0.2
    v, why = gc.contour_integrity(_rgb(_canvas()))
    assert v == 1.0 and why.startswith("no edges")  # nothing drawn: nothing broken, and the cue has a value


def test_lbp_regularity_uniform_vs_patched_texture():
    x = np.arange(256)
    stripes = ((np.sin(2 * np.pi * x[None, :] / 8) + np.sin(2 * np.pi * x[:, None] / 16)) * 60 + 128).astype(np.uint8)
    regular = np.repeat(stripes[..., None], 3, axis=2)
    patched = regular.copy()
    patched[64:128, 64:128] = np.random.default_rng(0).integers(0, 256, (64, 64, 1))
    r, _ = gc.lbp_regularity(regular / 255.0)
    p, _ = gc.lbp_regularity(patched / 255.0)
    assert r > 0.95 and p < r - 0.05


def test_highlight_continuity_blob_vs_speckles():
    blob = _canvas()
    ImageDraw.Draw(blob).ellipse((100, 100, 140, 130), fill=(255, 255, 255))
    speckled = np.asarray(_canvas(), dtype=np.uint8).copy()
    speckled[8::16, 8::16] = 255  # isolated single-pixel glints
    assert gc.highlight_continuity(_rgb(blob))[0] == 1.0
    assert gc.highlight_continuity(speckled / 255.0)[0] == 0.0
    v, why = gc.highlight_continuity(_rgb(_canvas()))
    assert v == 1.0 and why.startswith("no highlights")


def test_depth_cues_on_smooth_and_broken_depth_maps():
    yy, xx = np.mgrid[0:128, 0:128].astype(np.float64)
    ramp = xx / 127.0
    creased = np.abs(xx - 64) / 64.0 + 0.3 * (np.random.default_rng(0).random((128, 128)) > 0.97)
    assert gc.depth_normal_smoothness(ramp) == pytest.approx(1.0, abs=1e-5)  # float32 depth maps
    assert gc.depth_curvature_regularity(ramp) == pytest.approx(1.0, abs=1e-5)
    assert gc.depth_normal_smoothness(creased) < 0.9
    assert gc.depth_curvature_regularity(creased) < 0.5


def test_padim_cue_normal_vs_anomalous_patch(tmp_path):
    def smooth(seed):
        rng = np.random.default_rng(seed)
        base = np.asarray(Image.fromarray(rng.integers(60, 200, (8, 8, 3), dtype=np.uint8)).resize((128, 128),
                                                                                                     Image.BILINEAR))
        return np.clip(base.astype(int) + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8)

    rng_base = smooth(0)
    refs = []
    for k in range(8):
        arr = np.clip(rng_base.astype(int) + np.random.default_rng(10 + k).normal(0, 8, rng_base.shape), 0, 255)
        refs.append(str(tmp_path / f"r{k}.png"))
        Image.fromarray(arr.astype(np.uint8)).save(refs[-1])
    normal = np.clip(rng_base.astype(int) + np.random.default_rng(99).normal(0, 8, rng_base.shape), 0, 255)
    odd = normal.copy()
    odd[0:32, 0:32] = [255, 0, 255]
    Image.fromarray(normal.astype(np.uint8)).save(tmp_path / "normal.png")
    Image.fromarray(odd.astype(np.uint8)).save(tmp_path / "odd.png")
    batch = QueryBatch(["normal", "odd", "norefs"], [str(tmp_path / "normal.png"), str(tmp_path / "odd.png"),
                                                     str(tmp_path / "normal.png")], ["x"] * 3, ["g"] * 3, [None] * 3,
                       [refs, refs, []], device="cpu",
                       options={"vistar-gc.padim_encoder": "pixels-16", "vistar-gc.depth_model": "no-such/depth-model"})
    out = run_scorers(["vistar-gc"], batch).set_index(["query_id", "metric"])
    assert out.loc[("normal", "padim"), "value"] > 0.9
    assert out.loc[("odd", "padim"), "value"] < 0.5
    assert math.isnan(out.loc[("norefs", "padim"), "value"])
    assert "no reference images" in out.loc[("norefs", "padim"), "note"]
    # depth model not cached: both depth cues missing, with the reason, not an error
    assert math.isnan(out.loc[("odd", "depth_normals"), "value"])
    assert "not in the local Hugging Face cache" in out.loc[("odd", "depth_curvature"), "note"]
    # GC (all six cues) is NaN without the depth model, never the minimum of what could be computed
    for q in ("normal", "odd", "norefs"):
        assert math.isnan(out.loc[(q, "score"), "value"])
        assert set(json.loads(out.loc[(q, "score"), "note"])["missing"]) >= {"depth_normals", "depth_curvature"}
    # score_no_depth: min of contour, lbp, highlight, padim -- where padim exists
    for q in ("normal", "odd"):
        want = min(out.loc[(q, c), "value"] for c in ("contour", "lbp", "highlight", "padim"))
        assert out.loc[(q, "score_no_depth"), "value"] == pytest.approx(want)
    assert math.isnan(out.loc[("norefs", "score_no_depth"), "value"])
    assert json.loads(out.loc[("norefs", "score_no_depth"), "note"])["missing"] == {
        "padim": "no reference images to fit PaDiM on"}
    # score_weight_free has a value for every image: contour, lbp, highlight always do
    for q in ("normal", "odd", "norefs"):
        want = min(out.loc[(q, c), "value"] for c in ("contour", "lbp", "highlight"))
        assert out.loc[(q, "score_weight_free"), "value"] == pytest.approx(want)
    assert out.loc[("odd", "score_no_depth"), "value"] < out.loc[("normal", "score_no_depth"), "value"]


def test_a_missing_padim_encoder_leaves_padim_missing_with_its_reason_and_the_rest_scored(tmp_path, monkeypatch):
    """#33: offline, the default PaDiM encoder (DINOv2) has no weights; GC used to fail the whole batch (in a
    VISTAR run: every GC image NaN). Now the PaDiM cue is missing with the reason, as a missing depth model's
    cues are, and the weight-free cues and their score are computed."""
    monkeypatch.setenv("FPR_WEIGHTS_DIR", str(tmp_path / "no-weights"))
    rng = np.random.default_rng(4)
    paths = []
    for name in ("q", "r"):
        paths.append(str(tmp_path / f"{name}.png"))
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(paths[-1])
    batch = QueryBatch(["q"], [paths[0]], ["x"], ["g"], [None], [[paths[1]]], device="cpu",
                       options={"vistar-gc.depth_model": "none"})
    out = run_scorers(["vistar-gc"], batch).set_index("metric")
    assert math.isnan(out.loc["padim", "value"])
    assert out.loc["padim", "note"].startswith("padim encoder missing: weights for encoder 'dinov2-vitb14' are missing")
    weight_free = min(out.loc[c, "value"] for c in ("contour", "lbp", "highlight"))
    assert out.loc["score_weight_free", "value"] == weight_free and np.isfinite(weight_free)
    assert math.isnan(out.loc["score_no_depth", "value"])
    assert json.loads(out.loc["score_no_depth", "note"])["missing"]["padim"] == out.loc["padim", "note"]


def test_cue_set_score_by_hand():
    values = {"contour": 0.9, "lbp": 0.7, "highlight": 1.0, "depth_normals": float("nan"),
              "depth_curvature": float("nan"), "padim": 0.8}
    missing = {"depth_normals": "no model", "depth_curvature": "no model", "highlight": "no highlights"}
    v, note = gc.cue_set_score(values, missing, gc.CUE_SETS["score"])
    assert math.isnan(v) and json.loads(note)["missing"] == {"depth_normals": "no model",
                                                             "depth_curvature": "no model"}
    v, note = gc.cue_set_score(values, missing, gc.CUE_SETS["score_no_depth"])
    assert v == 0.7 and json.loads(note)["remarks"] == {"highlight": "no highlights"}
    assert gc.CUE_SETS["score"] == gc.CUES and set(gc.CUE_SETS["score_weight_free"]) == {"contour", "lbp",
                                                                                           "highlight"}


def test_bad_padim_option_is_one_line(tmp_path):
    from fpr.errors import InputError

    Image.new("RGB", (32, 32)).save(tmp_path / "a.png")
    batch = QueryBatch(["a"], [str(tmp_path / "a.png")], ["x"], ["g"], [None], [[]], device="cpu",
                       options={"vistar-gc.padim": "maybe", "vistar-gc.depth_model": "none"})
    with pytest.raises(InputError, match="vistar-gc.padim must be one of on, off"):
        run_scorers(["vistar-gc"], batch)


def test_known_answer_renders_each_defect_is_seen_by_its_cue_on_a_held_out_seed():
    from tests.scorers.known_answers import known_answers

    ka = known_answers()
    rows = ka.run_gc(3, 4)  # seed 3: not in the table (seeds 0-2)
    clean = [c for kind, c in rows if kind == "clean"]

    def separation(kind: str, cue: str) -> float:
        return ka.auroc([c[cue] for c in clean], [c[cue] for k, c in rows if k == kind])

    assert separation("tear", "contour") >= 0.75
    assert separation("texture", "contour") == 1.0 and separation("texture", "lbp") >= 0.7
    assert separation("speckle", "highlight") == 1.0
    assert separation("crease", "depth_normals") == 1.0
    # a defect of the depth map alone leaves the image cues exactly as they were: ties, AUROC 1/2
    assert separation("crease", "contour") == 0.5
