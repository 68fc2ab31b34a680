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
from fpr.scorers.vistar_cse import parse_panels
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
    assert out.loc["con", "value"] == pytest.approx(con, abs=1e-4)
    assert pair_cos[1] == pytest.approx(1.0, abs=1e-5)  # panels 0 and 2 are the same subject
    assert out.loc["score", "value"] == pytest.approx(math.sqrt(max(cov, 0) * max(con, 0)), abs=1e-4)
    assert "whole panels" in out.loc["con", "note"]


def test_missing_panels_or_sub_prompts_are_nan_with_reasons(tmp_path, tiny_clip):  # noqa: F811
    path = _grid(tmp_path / "a.png", [_panel(1), _panel(2)], 1, 2)
    batch = QueryBatch(["q0", "q1", "q2"], [path] * 3, ["x"] * 3, ["g"] * 3, [None] * 3, [[]] * 3, device="cpu",
                       options=dict(OPTS), extras=[{}, {"panels": "1x2"}, {"panels": "1x1", "sub_prompts": "a;b"}])
    out = run_scorers(["vistar-cse"], batch).set_index(["query_id", "metric"])
    assert out.loc[("q0", "score"), "value"] != out.loc[("q0", "score"), "value"]  # NaN
    assert "no panels" in out.loc[("q0", "con"), "note"]
    assert math.isnan(out.loc[("q1", "cov"), "value"]) and "sub_prompts" in out.loc[("q1", "cov"), "note"]
    assert math.isfinite(out.loc[("q1", "con"), "value"]) and math.isnan(out.loc[("q1", "score"), "value"])
    assert math.isnan(out.loc[("q2", "con"), "value"]) and "one panel" in out.loc[("q2", "con"), "note"]
    assert math.isfinite(out.loc[("q2", "cov"), "value"])
    assert parse_panels(" 2X3 ") == (2, 3)
    with pytest.raises(InputError, match="ROWSxCOLS"):
        parse_panels("four")


def test_cse_grounds_the_subject_when_the_detector_is_there(tmp_path, tiny_clip, tiny_owlv2):  # noqa: F811
    """With the Grounding tool's weights, consistency embeds each panel's best box for the subject: equal to
    cropping with the same detector by hand; without them, whole panels, and the note says why."""
    from fpr.encoders.embed import embed_pil
    from fpr.encoders.registry import load_encoder
    from fpr.scorers.judges.tools import Detector, box_pixels
    from fpr.scorers.vistar_cse import consistency, split_panels
    from fpr.images import load_rgb

    panels = [_panel(1), _panel(2), _panel(1), _panel(3)]
    path = _grid(tmp_path / "g.png", panels, 2, 2)
    extras = [{"panels": "2x2", "sub_prompts": "a dog"}]
    opts = {**OPTS, "vistar-cse.grounding": str(tiny_owlv2), "vistar-cse.subject": "dog",
            "vistar-cse.box_threshold": "0"}  # a random detector's scores are low: take its best box
    batch = QueryBatch(["q0"], [path], ["x"], ["dogs"], ["a dog"], [[]], device="cpu", options=opts, extras=extras)
    out = run_scorers(["vistar-cse"], batch).set_index("metric")

    det = Detector(str(tiny_owlv2))
    crops, found = [], 0
    for p in split_panels(load_rgb(path), 2, 2):
        box = det.detect(p, "dog", threshold=0.0, top=1)
        crops.append(p.crop(box_pixels(box[0]["box"], p.width, p.height)) if box else p)
        found += bool(box)
    assert found >= 1  # the crops are exercised
    expect = consistency(embed_pil(load_encoder("pixels-16", device="cpu"), crops))
    assert out.loc["con", "value"] == pytest.approx(expect, abs=1e-12)
    assert f"grounded 'dog' in {found} of 4 panels" in out.loc["con", "note"]
    assert "OWLv2 sha256:" in out.loc["con", "note"]
    whole_value = consistency(embed_pil(load_encoder("pixels-16", device="cpu"), split_panels(load_rgb(path), 2, 2)))
    assert out.loc["con", "value"] != pytest.approx(whole_value, abs=1e-9)  # the crops changed the value

    off = QueryBatch(["q0"], [path], ["x"], ["dogs"], ["a dog"], [[]], device="cpu",
                     options={**OPTS, "vistar-cse.grounding": "off"}, extras=extras)
    whole = run_scorers(["vistar-cse"], off).set_index("metric")
    assert "whole panels (grounding off)" in whole.loc["con", "note"]
    auto = QueryBatch(["q0"], [path], ["x"], ["dogs"], ["a dog"], [[]], device="cpu", options=dict(OPTS),
                      extras=extras)
    missing = run_scorers(["vistar-cse"], auto).set_index("metric")
    assert "whole panels (grounding weights not found" in missing.loc["con", "note"]
    assert missing.loc["con", "value"] == pytest.approx(whole.loc["con", "value"], abs=0)
