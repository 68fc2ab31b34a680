"""CIGEval's tools: Highlight and Difference on hand-made images (values checked), Grounding on a tiny
random-initialised OWLv2 built from a config in the on-disk layout Hugging Face writes."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from fpr.errors import InputError, NotFoundError
from fpr.scorers.judges.tools import DETECTOR_ID, Detector, difference, highlight


def test_highlight_darkens_outside_the_box_to_a_quarter():
    img = np.full((10, 10, 3), 201, dtype=np.uint8)
    img[0, 0] = (3, 4, 255)
    out = highlight(img, [0.3, 0.3, 0.6, 0.6])  # pixels 3..5 in both directions
    expected = np.full((10, 10, 3), 50, dtype=np.uint8)  # 201 // 4
    expected[0, 0] = (0, 1, 63)
    expected[3:6, 3:6] = 201
    assert np.array_equal(out, expected)
    assert img[0, 0, 2] == 255  # the input is not modified
    # a box beyond the image is clipped; fractions round outwards to whole pixels
    out = highlight(img, [0.85, -0.5, 2.0, 0.05])
    assert np.array_equal(out[0:1, 8:10], img[0:1, 8:10]) and (out[1:, :] == 50).all()
    with pytest.raises(InputError, match="empty"):
        highlight(img, [0.5, 0.5, 0.2, 0.9])
    with pytest.raises(InputError, match="four numbers"):
        highlight(img, "everything")


def test_difference_boxes_the_changed_regions():
    a = np.zeros((20, 20, 3), dtype=np.uint8)
    b = a.copy()
    b[2:5, 3:8, 0] = 100  # 3 x 5 px, one channel changed a lot
    b[12:18, 10:20] = 50  # 6 x 10 px
    b[8, 0] = 255  # a single pixel: below min_area
    b[0:2, 14:20] = 20  # below the threshold
    regions = difference(a, b, threshold=32, min_area=0.01)
    assert regions == [{"box": [0.5, 0.6, 1.0, 0.9], "area": 0.15},
                       {"box": [0.15, 0.1, 0.4, 0.25], "area": 0.0375}]
    assert difference(a, a.copy()) == []
    # a second image of another size is resized to the first
    big = np.asarray(Image.fromarray(b).resize((40, 40), Image.NEAREST))
    regions = difference(a, big, threshold=32, min_area=0.01)
    assert np.allclose(regions[0]["box"], [0.5, 0.6, 1.0, 0.9], atol=0.051)


def test_grounding_on_a_tiny_random_detector(tiny_owlv2, tmp_path, monkeypatch):
    import shutil

    import torch
    from transformers import Owlv2ForObjectDetection, Owlv2Processor

    # resolved offline from the weights folder like an encoder's weights
    monkeypatch.setenv("FPR_WEIGHTS_DIR", str(tmp_path / "weights"))
    shutil.copytree(tiny_owlv2, tmp_path / "weights" / DETECTOR_ID)
    det = Detector()
    assert det.resolved.where == "weights-dir" and det.checksum.startswith("sha256:")
    im = Image.fromarray(np.random.default_rng(0).integers(0, 256, (24, 48, 3), dtype=np.uint8))
    got = det.detect(im, "a zebra", threshold=0.0, top=3)
    assert got == det.detect(im, "a zebra", threshold=0.0, top=3)  # deterministic

    # independently: the model's own outputs, boxes mapped from the padded square to the image
    proc = Owlv2Processor.from_pretrained(tiny_owlv2)
    model = Owlv2ForObjectDetection.from_pretrained(tiny_owlv2).eval()
    with torch.no_grad():
        out = model(**proc(text=[["a zebra"]], images=im, return_tensors="pt", padding="max_length",
                           max_length=16, truncation=True))
    scores = torch.sigmoid(out.logits[0, :, 0]).numpy()
    side = 48  # padded to a 48 x 48 square
    expected = []
    for j in np.argsort(-scores, kind="stable"):
        cx, cy, w, h = out.pred_boxes[0, j].numpy().astype(np.float64)
        box = np.clip([(cx - w / 2) * side / 48, (cy - h / 2) * side / 24, (cx + w / 2) * side / 48,
                       (cy + h / 2) * side / 24], 0, 1)
        if box[2] - box[0] >= 1e-3 and box[3] - box[1] >= 1e-3:  # boxes clipped to nothing are dropped
            expected.append((float(scores[j]), box))
    assert got[0]["score"] == pytest.approx(expected[0][0], abs=1e-4)
    assert np.allclose(got[0]["box"], expected[0][1], atol=1e-4)
    assert 1 <= len(got) <= 3 and [g["score"] for g in got] == sorted((g["score"] for g in got), reverse=True)
    assert det.detect(im, "a zebra", threshold=1.01) == []


def test_grounding_without_weights_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setenv("FPR_WEIGHTS_DIR", str(tmp_path / "none"))
    with pytest.raises(NotFoundError) as err:
        Detector()
    line = err.value.one_line()
    assert line.startswith(f"weights for the grounding detector '{DETECTOR_ID}' are missing (looked in ")
    assert "cigeval.detector=FOLDER" in line and "cigeval.tools=highlight,difference,scene_graph" in line
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "model.safetensors").write_bytes(b"x")
    with pytest.raises(NotFoundError, match="needs config.json beside its weights"):
        Detector(tmp_path / "bad")
