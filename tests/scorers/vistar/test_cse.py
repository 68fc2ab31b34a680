"""vistar-cse on hand-built 2x2 panels with a random-initialised CLIP and the pixels-16 encoder, against a
direct computation; missing panels / sub-prompts give NaN with a reason."""
from __future__ import annotations

import math

import numpy as np
import open_clip
import pytest
import torch
from PIL import Image
from torchvision import transforms

from fpr.encoders.preprocess import OPENAI_MEAN, OPENAI_STD
from fpr.errors import InputError
from fpr.scorers import QueryBatch, run_scorers
from fpr.scorers.vistar.cse import parse_panels
from tests.scorers.judges.conftest import tiny_owlv2  # noqa: F401 - the fixture
from tests.scorers.test_scorers import tiny_clip  # noqa: F401 - the fixture

OPTS = {"vistar-cse.clip_encoder": "tiny-clip-test", "vistar-cse.dino_encoder": "pixels-16"}


def _panel(seed: int, size: int = 40) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(rng.integers(0, 256, 3) + rng.normal(0, 50, (size, size, 3)), 0, 255).astype(np.uint8)


def _grid(path, panels: list[np.ndarray], rows: int, cols: int) -> str:
    h, w = panels[0].shape[:2]
    canvas = np.zeros((rows * h, cols * w, 3), np.uint8)
    for k, p in enumerate(panels):
        r, c = divmod(k, cols)
        canvas[r * h:(r + 1) * h, c * w:(c + 1) * w] = p
    Image.fromarray(canvas).save(path)
    return str(path)


def test_cse_matches_a_direct_computation(tmp_path, tiny_clip):  # noqa: F811
    same = _panel(1)
    panels = [same, _panel(2), same, _panel(3)]
    path = _grid(tmp_path / "a.png", panels, 2, 2)
    subs = ["a dog on a beach", "a dog in the snow", "a dog at night"]
    batch = QueryBatch(["q0"], [path], ["x"], ["g"], ["a dog"], [[]], device="cpu", options=dict(OPTS),
                       extras=[{"panels": "2x2", "sub_prompts": "; ".join(subs)}])
    out = run_scorers(["vistar-cse"], batch).set_index("metric")

    tf = transforms.Compose([transforms.Resize((32, 32), interpolation=transforms.InterpolationMode.BILINEAR),
                             transforms.ToTensor(), transforms.Normalize(OPENAI_MEAN, OPENAI_STD)])
    with torch.no_grad():
        img = torch.nn.functional.normalize(tiny_clip.encode_image(
            torch.stack([tf(Image.fromarray(p)) for p in panels])), dim=-1).double()
        txt = torch.nn.functional.normalize(tiny_clip.encode_text(open_clip.tokenize(subs, context_length=16)),
                                            dim=-1).double()
    cov = float((txt @ img.T).max(dim=1).values.mean())
    # pixels-16: a 16x16 thumbnail of the panel squashed to 64x64 in [-1, 1], mean removed
    thumbs = []
    for p in panels:
        x = torch.from_numpy(np.asarray(Image.fromarray(p).resize((64, 64), Image.BILINEAR), np.float32) / 255)
        x = ((x - 0.5) / 0.5).permute(2, 0, 1)[None]
        t = torch.nn.functional.adaptive_avg_pool2d(x, 16).flatten(1)
        thumbs.append(torch.nn.functional.normalize(t - t.mean(), dim=-1)[0].double())
    pair_cos = [float(thumbs[i] @ thumbs[j]) for i in range(4) for j in range(i + 1, 4)]
    con = float(np.mean(pair_cos))
    assert out.loc["cov", "value"] == pytest.approx(cov, abs=1e-5)
    assert out.loc["con_whole", "value"] == pytest.approx(con, abs=1e-4)
    assert pair_cos[1] == pytest.approx(1.0, abs=1e-5)  # panels 0 and 2 are the same subject
    assert out.loc["score_whole", "value"] == pytest.approx(math.sqrt(max(cov, 0) * max(con, 0)), abs=1e-4)
    assert "whole panels, all 4" in out.loc["con_whole", "note"]
    # no grounding weights here: VISTAR's subject consistency is not computed, and says why
    for m in ("score", "con", "k"):
        assert math.isnan(out.loc[m, "value"]) and "grounding weights not found" in out.loc[m, "note"]


def test_missing_panels_or_sub_prompts_are_nan_with_reasons(tmp_path, tiny_clip):  # noqa: F811
    path = _grid(tmp_path / "a.png", [_panel(1), _panel(2)], 1, 2)
    batch = QueryBatch(["q0", "q1", "q2"], [path] * 3, ["x"] * 3, ["g"] * 3, [None] * 3, [[]] * 3, device="cpu",
                       options=dict(OPTS), extras=[{}, {"panels": "1x2"}, {"panels": "1x1", "sub_prompts": "a;b"}])
    out = run_scorers(["vistar-cse"], batch).set_index(["query_id", "metric"])
    assert out.loc[("q0", "score"), "value"] != out.loc[("q0", "score"), "value"]  # NaN
    assert "no panels" in out.loc[("q0", "con"), "note"]
    assert math.isnan(out.loc[("q1", "cov"), "value"]) and "sub_prompts" in out.loc[("q1", "cov"), "note"]
    assert math.isfinite(out.loc[("q1", "con_whole"), "value"]) and math.isnan(out.loc[("q1", "score_whole"), "value"])
    for m in ("con", "con_whole", "k", "score", "score_whole"):
        assert math.isnan(out.loc[("q2", m), "value"]) and "one panel" in out.loc[("q2", m), "note"]
    assert math.isfinite(out.loc[("q2", "cov"), "value"])
    assert parse_panels(" 2X3 ") == (2, 3)
    with pytest.raises(InputError, match="ROWSxCOLS"):
        parse_panels("four")


class _StubDetector:
    """Finds the subject (the full panel's centre half) in the panels whose mean red exceeds ``red``."""

    def __init__(self, red: float):
        self.red = red

    def detect(self, image, text, *, threshold=0.1, top=1):
        found = np.asarray(image, np.float64)[..., 0].mean() > self.red
        return [{"box": [0.25, 0.25, 0.75, 0.75], "score": 0.9}] if found else []


def test_grounding_leaves_out_panels_without_the_subject():
    from fpr.scorers.vistar.cse import ground_subject

    red, blue = np.zeros((40, 40, 3), np.uint8), np.zeros((40, 40, 3), np.uint8)
    red[..., 0], blue[..., 2] = 200, 200
    panels = [Image.fromarray(x) for x in (red, blue, red, blue)]
    g = ground_subject(_StubDetector(100), panels, "dog", 0.1)
    assert g.found == [0, 2] and g.panels == 4 and len(g.crops) == 2
    assert g.crops[0].size == (20, 20)  # the box, not the whole panel
    assert ground_subject(_StubDetector(255), panels, "dog", 0.1).found == []


def test_cse_grounds_the_subject_when_the_detector_is_there(tmp_path, tiny_clip, tiny_owlv2):  # noqa: F811
    """With the Grounding tool's weights, consistency embeds each panel's best box for the subject over the
    K panels where it is found (equal to cropping with the same detector by hand), K reported; panels without
    a box are left out; without the weights, con is NaN and the note says why."""
    from fpr.encoders.embed import embed_pil
    from fpr.encoders.registry import load_encoder
    from fpr.images import load_rgb
    from fpr.scorers.judges.tools import Detector, box_pixels
    from fpr.scorers.vistar.cse import consistency, split_panels

    panels = [_panel(1), _panel(2), _panel(1), _panel(3), _panel(4), _panel(5)]
    path = _grid(tmp_path / "g.png", panels, 2, 3)
    extras = [{"panels": "2x3", "sub_prompts": "a dog"}]
    det = Detector(str(tiny_owlv2))
    cells = split_panels(load_rgb(path), 2, 3)
    threshold = 0.0  # a random detector's scores are ~0: take its best box where it has one
    opts = {**OPTS, "vistar-cse.grounding": str(tiny_owlv2), "vistar-cse.subject": "dog",
            "vistar-cse.box_threshold": str(threshold)}
    batch = QueryBatch(["q0"], [path], ["x"], ["dogs"], ["a dog"], [[]], device="cpu", options=opts, extras=extras)
    out = run_scorers(["vistar-cse"], batch).set_index("metric")

    crops, found = [], []
    for k, p in enumerate(cells):
        box = det.detect(p, "dog", threshold=threshold, top=1)
        if box:
            crops.append(p.crop(box_pixels(box[0]["box"], p.width, p.height)))
            found.append(k + 1)
    # the random detector has no box at all in some panels (boxes clipped to nothing): they are left out
    assert 2 <= len(found) < 6
    expect = consistency(embed_pil(load_encoder("pixels-16", device="cpu"), crops))
    assert out.loc["con", "value"] == pytest.approx(expect, abs=1e-12)
    assert out.loc["k", "value"] == len(found)
    assert out.loc["score", "value"] == pytest.approx(math.sqrt(max(out.loc["cov", "value"], 0) * max(expect, 0)))
    assert f"'dog' found in {len(found)} of 6 panels {found}" in out.loc["con", "note"]
    assert "OWLv2 sha256:" in out.loc["con", "note"]
    whole_value = consistency(embed_pil(load_encoder("pixels-16", device="cpu"), cells))
    assert out.loc["con_whole", "value"] == pytest.approx(whole_value, abs=1e-12)

    # a threshold above every box: K = 0, consistency not computable, K still reported
    none = QueryBatch(["q0"], [path], ["x"], ["dogs"], ["a dog"], [[]], device="cpu",
                      options={**opts, "vistar-cse.box_threshold": "1.5"}, extras=extras)
    out0 = run_scorers(["vistar-cse"], none).set_index("metric")
    assert out0.loc["k", "value"] == 0.0 and math.isnan(out0.loc["con", "value"])
    assert "at least two" in out0.loc["con", "note"]

    off = QueryBatch(["q0"], [path], ["x"], ["dogs"], ["a dog"], [[]], device="cpu",
                     options={**OPTS, "vistar-cse.grounding": "off"}, extras=extras)
    whole = run_scorers(["vistar-cse"], off).set_index("metric")
    assert math.isnan(whole.loc["con", "value"]) and "grounding off" in whole.loc["con", "note"]
    assert whole.loc["con_whole", "value"] == pytest.approx(whole_value, abs=1e-12)


def test_known_answer_storyboards_one_subject_scores_above_four_on_a_held_out_seed():
    from tests.scorers.known_answers import known_answers

    ka = known_answers()
    rows = ka.run_cse(3, 4)  # seed 3: not in the table (seeds 0-2)
    same = [con for consistent, con, _ in rows if consistent]
    other = [con for consistent, con, _ in rows if not consistent]
    assert ka.auroc(same, other) == 1.0
    assert min(same) > 0.5 > max(other)
