"""CIGEval's tools: Highlight and Difference on hand-made images (values checked), Grounding on a tiny
random-initialised OWLv2 built from a config in the on-disk layout Hugging Face writes."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from fpr.errors import InputError, NotFoundError
from fpr.scorers.judges.tools import (
    GDINO_ID,
    OWLV2_ID,
    GroundingDinoDetector,
    Owlv2Detector,
    caption,
    difference,
    drop_enclosing,
    highlight,
    load_detector,
    merge_released,
    merge_union,
)


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


def _square(side: int, at: int = 30, size: int = 100, value: int = 255) -> np.ndarray:
    img = np.zeros((size, size, 3), dtype=np.uint8)
    img[at:at + side, at:at + side] = value
    return img


def test_difference_is_cigeval_blur_grey_threshold_dilate_box_by_hand():
    # OpenCV's 5x5 Gaussian with sigma 0 is the binomial [1, 4, 6, 4, 1] / 16. A white 20 px square on black:
    # one pixel outside an edge gets 255 * 5/16 = 80 > 45 (next to the square's rows/columns), a diagonal corner
    # 255 * (5/16)^2 = 25 and two pixels out 255/16 = 16 stay below; the 3x3 dilation adds one pixel: 28..51.
    black = np.zeros((100, 100, 3), dtype=np.uint8)
    assert difference(black, _square(20)) == [{"box": [0.28, 0.28, 0.52, 0.52], "area": 0.0576}]
    assert difference(_square(20), black) == difference(black, _square(20))  # symmetric
    assert difference(black, black.copy()) == []
    # boxes must exceed 0.5% of the image: a 3 px square flags 5x5 less its corners, dilated 7x7 = 49 px
    # (0.49%): dropped; a 4 px square gives 8x8 = 64 px (0.64%): kept
    assert difference(black, _square(3)) == []
    assert difference(black, _square(4)) == [{"box": [0.28, 0.28, 0.36, 0.36], "area": 0.0064}]
    # grey difference: a pure blue square of 255 is grey 0.114 * 255 = 29 < 45, not a difference
    blue = np.zeros((100, 100, 3), dtype=np.uint8)
    blue[30:50, 30:50, 2] = 255
    assert difference(black, blue) == []
    # a threshold of 20 sees its inside (29 > 20) but not its edge pixels (29 * 11/16 = 20, not above 20):
    # 31..48 flagged, dilated to 30..49
    assert difference(black, blue, threshold=20) == [{"box": [0.3, 0.3, 0.5, 0.5], "area": 0.04}]


def test_difference_resizes_the_second_image_to_the_first():
    black = np.zeros((100, 100, 3), dtype=np.uint8)
    big = np.asarray(Image.fromarray(_square(20)).resize((200, 200), Image.NEAREST))
    assert difference(black, big) == difference(black, _square(20))


def test_merge_released_reproduces_the_released_loop_and_union_is_the_variant():
    # one overlap: the union of the two
    assert merge_released([(0, 0, 10, 10), (5, 5, 10, 10)]) == [(0, 0, 15, 15)] == merge_union(
        [(0, 0, 10, 10), (5, 5, 10, 10)])
    # the released loop moves the left/top edge before computing the width/height
    assert merge_released([(10, 10, 10, 10), (5, 5, 10, 10)]) == [(5, 5, 10, 10)]
    assert merge_union([(10, 10, 10, 10), (5, 5, 10, 10)]) == [(5, 5, 15, 15)]
    # and stops at the first box that absorbed nothing, dropping the rest
    boxes = [(0, 0, 2, 2), (10, 10, 5, 5), (12, 12, 5, 5)]
    assert merge_released(boxes) == [(0, 0, 2, 2)]
    assert merge_union(boxes) == [(0, 0, 2, 2), (10, 10, 7, 7)]
    assert merge_released([(10, 10, 5, 5), (12, 12, 5, 5), (0, 0, 2, 2)]) == [(10, 10, 7, 7), (0, 0, 2, 2)]
    assert merge_union([(0, 0, 4, 4), (3, 3, 4, 4), (6, 6, 4, 4)]) == [(0, 0, 10, 10)]  # chains merge through


def test_difference_union_keeps_every_region_largest_first():
    img = _square(20)
    img[70:80, 70:80] = 255
    black = np.zeros((100, 100, 3), dtype=np.uint8)
    assert difference(black, img, merge="union", max_boxes=None) == [
        {"box": [0.28, 0.28, 0.52, 0.52], "area": 0.0576}, {"box": [0.68, 0.68, 0.82, 0.82], "area": 0.0196}]
    assert len(difference(black, img)) == 1  # the released tool answers with one box
    with pytest.raises(InputError, match="unknown difference merge 'all'"):
        difference(black, img, merge="all")


def test_difference_on_a_generated_image_with_a_tone_shift_boxes_only_the_changed_markings():
    """A world reference and a 'generation' of it: the same scene with 10% of the markings redrawn, 28 grey
    levels brighter and with sensor noise (sigma 10). fpr's former tool (largest channel difference > 32,
    8-connected pixels) returned one box over the whole image (68% of its pixels changed); CIGEval's blurs the
    noise away and sees only the markings."""
    from fpr.galleries.world import GALLERY_FAMILIES, World, WorldConfig
    from fpr.galleries.world.render import render_view

    world = World(WorldConfig(seed=0, identities=2, size=128))
    ident = world.ids["giraffe"][0]
    view = world._view("giraffe", ident, "reference", 0, GALLERY_FAMILIES)
    base = world.markings("giraffe", ident)
    ref = np.asarray(render_view(base, view))
    clean = np.asarray(render_view(base.with_layer(20_000_123, 0.1, "test-region"), view)).astype(float)
    noise = np.random.default_rng(0).normal(0, 10, clean.shape)
    gen = np.clip(clean + 28 + noise, 0, 255).astype(np.uint8)
    assert (np.abs(gen.astype(int) - ref).max(axis=2) > 32).mean() > 0.6  # what made the old tool box everything
    ys, xs = np.nonzero(np.abs(clean - ref).max(axis=2) > 40)  # where the markings really changed
    truth = [xs.min() / 128, ys.min() / 128, (xs.max() + 1) / 128, (ys.max() + 1) / 128]
    (region,) = difference(gen, ref)
    x0, y0, x1, y1 = region["box"]
    pad = 3 / 128  # the blur and the dilation reach up to 3 pixels beyond a change
    assert truth[0] - pad <= x0 and truth[1] - pad <= y0 and x1 <= truth[2] + pad and y1 <= truth[3] + pad
    assert region["area"] < 0.06 and region == {"box": [0.3828, 0.3906, 0.5703, 0.6484], "area": 0.0483}


def test_grounding_on_a_tiny_random_detector(tiny_owlv2, tmp_path, monkeypatch):
    import shutil

    import torch
    from transformers import Owlv2ForObjectDetection, Owlv2Processor

    # resolved offline from the weights folder like an encoder's weights
    monkeypatch.setenv("FPR_WEIGHTS_DIR", str(tmp_path / "weights"))
    shutil.copytree(tiny_owlv2, tmp_path / "weights" / OWLV2_ID)
    det = Owlv2Detector()
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


@pytest.mark.parametrize("model,model_id,repo", [("grounding-dino", GDINO_ID, "IDEA-Research/grounding-dino-tiny"),
                                                   ("owlv2", OWLV2_ID, "google/owlv2-base-patch16-ensemble")])
def test_grounding_without_weights_is_one_clear_line_with_the_fetch_command(tmp_path, monkeypatch, model, model_id,
                                                                             repo):
    monkeypatch.setenv("FPR_WEIGHTS_DIR", str(tmp_path / "none"))
    with pytest.raises(NotFoundError) as err:
        load_detector(model)
    line = err.value.one_line()
    assert line.startswith(f"weights for the grounding detector '{model_id}' are missing (looked in ")
    assert "\n" not in line and f"huggingface-cli download {repo} --local-dir $FPR_WEIGHTS_DIR/{model_id}" in line
    assert "cigeval.detector=FOLDER" in line and "cigeval.tools=highlight,difference,scene_graph" in line
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "model.safetensors").write_bytes(b"x")
    with pytest.raises(NotFoundError, match="needs config.json beside its weights"):
        load_detector(model, tmp_path / "bad")
    with pytest.raises(InputError, match="unknown grounding detector 'yolo'"):
        load_detector("yolo")


def test_groundingdino_caption_and_the_released_clean_up():
    assert caption("  A Striped Zebra ") == "a striped zebra." and caption("a dog.") == "a dog."
    # by area: [1] (small) kept; [0] strictly encloses it: dropped; [2] touches [1]'s edge (not strictly): kept;
    # [3] is disjoint: kept
    boxes = [[0.0, 0.0, 1.0, 1.0], [0.4, 0.4, 0.6, 0.6], [0.4, 0.3, 0.7, 0.7], [0.0, 0.0, 0.1, 0.1]]
    assert sorted(drop_enclosing(boxes)) == [1, 2, 3]


def test_grounding_dino_on_a_tiny_random_model_matches_transformers_post_processing(tiny_grounding_dino, tmp_path,
                                                                                    monkeypatch):
    import shutil

    import torch
    from transformers import GroundingDinoForObjectDetection, GroundingDinoProcessor

    monkeypatch.setenv("FPR_WEIGHTS_DIR", str(tmp_path / "weights"))
    shutil.copytree(tiny_grounding_dino, tmp_path / "weights" / GDINO_ID)
    det = load_detector("grounding-dino")
    assert isinstance(det, GroundingDinoDetector) and det.default_threshold == 0.2
    assert det.resolved.where == "weights-dir" and det.checksum.startswith("sha256:")
    im = Image.fromarray(np.random.default_rng(0).integers(0, 256, (24, 48, 3), dtype=np.uint8))
    got = det.detect(im, "A Zebra", threshold=0.0, top=10)
    assert got == det.detect(im, "a zebra.", threshold=0.0, top=10)  # the caption convention; deterministic

    # independently: transformers' own post-processing (pixel boxes, thresholded on the best token's probability)
    proc = GroundingDinoProcessor.from_pretrained(tiny_grounding_dino)
    model = GroundingDinoForObjectDetection.from_pretrained(tiny_grounding_dino).eval()
    inputs = proc(images=im, text="a zebra.", return_tensors="pt")
    with torch.no_grad():
        out = model(**inputs)
    (ref,) = proc.post_process_grounded_object_detection(out, inputs["input_ids"], threshold=0.0, text_threshold=0.0,
                                                         target_sizes=[(24, 48)])
    boxes = (ref["boxes"].numpy() / np.array([48, 24, 48, 24])).clip(0, 1).tolist()
    scores = ref["scores"].numpy()
    keep = sorted(drop_enclosing(boxes), key=lambda j: -scores[j])
    assert len(got) == len(keep) >= 1
    for g, j in zip(got, keep):
        assert g["score"] == pytest.approx(float(scores[j]), abs=1e-4)
        assert np.allclose(g["box"], boxes[j], atol=1e-4)
    top = float(scores.max())
    assert det.detect(im, "a zebra", threshold=top) == []  # strictly above the threshold, as released
