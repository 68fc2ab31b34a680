"""The occlusion evidence map (fpr.metrics.evidence): boxes, the map, and its localisation scores, by hand."""
from __future__ import annotations

import numpy as np
import pytest

from fpr.metrics.evidence import (Box, evidence_map, identity_evidence, lowest_point, occlude, occlusion_boxes,
                                  patch_map, pointing_hit, pointing_tolerance, region_iou, top_region)


def test_boxes_cover_every_pixel_and_the_last_is_flush_with_the_edge():
    boxes = occlusion_boxes(10, 7, 4, 3)
    assert [(b.y0, b.x0) for b in boxes] == [(y, x) for y in (0, 3, 6) for x in (0, 3)]
    assert boxes[-1] == Box(6, 3, 10, 7)
    cover = patch_map(np.ones(len(boxes)), boxes, (10, 7))
    assert (cover == 1).all()
    with pytest.raises(ValueError):
        occlusion_boxes(10, 10, 0, 1)


def test_patch_map_is_the_mean_of_the_covering_patches():
    boxes = [Box(0, 0, 2, 2), Box(0, 1, 2, 3)]
    m = patch_map(np.array([1.0, -3.0]), boxes, (2, 3))
    assert m.tolist() == [[1.0, -1.0, -3.0], [1.0, -1.0, -3.0]]


def test_occlude_fills_each_box_with_the_mean_colour_or_grey():
    img = np.zeros((4, 4, 3), np.uint8)
    img[:, 2:] = 200
    out = occlude(img, [Box(0, 0, 2, 2)], "mean")
    assert out.shape == (1, 4, 4, 3)
    assert (out[0, :2, :2] == 100).all() and (out[0, 2:] == img[2:]).all() and (out[0, :2, 2:] == 200).all()
    assert (occlude(img, [Box(0, 0, 1, 1)], "grey")[0, 0, 0] == 128).all()


def test_identity_evidence_is_the_mean_score_per_identity():
    g = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    ev, ids = identity_evidence(np.array([[1.0, 0.0]]), g, np.array(["b", "a", "b"], dtype=object))
    assert ids.tolist() == ["a", "b"]
    assert ev.tolist() == [[0.0, 0.8]]


def _linear_case():
    """A 'synthetic encoder' whose vector is (left half's value, right half's value), 0 where hidden.
    Identity A's gallery vectors are (1, 1)/sqrt 2, B's (-1, 1)/sqrt 2; the query is (1, -0.2): its left half
    is A's, its right half leans away from both."""
    g = np.array([[1.0, 1.0], [1.0, 1.0], [-1.0, 1.0]]) / np.sqrt(2)
    keys = np.array(["A", "A", "B"], dtype=object)
    boxes = occlusion_boxes(2, 4, 2, 2)  # left box, right box
    query = np.array([1.0, -0.2])
    occluded = np.array([[0.0, -0.2], [1.0, 0.0]])  # left hidden (-> 0), right hidden (-> 0)
    return query, occluded, boxes, g, keys


def test_evidence_map_on_a_constructed_case_points_at_the_impostor_half():
    query, occluded, boxes, g, keys = _linear_case()
    em = evidence_map(query, occluded, boxes, g, keys, "A", (2, 4), variant="margin")
    s = np.sqrt(2)
    # margin = ev(A) - ev(B) = (l + r)/s - (r - l)/s = 2l/s: hiding the right half changes nothing of it
    assert em.impostor == "B" and em.margin == pytest.approx(2 / s)
    assert em.patch_values == pytest.approx([2 / s, 0.0])
    # the variant without the impostor: ev(A) = (l + r)/s; hiding the left costs 1/s, the right *gains* 0.2/s
    et = evidence_map(query, occluded, boxes, g, keys, "A", (2, 4))  # the default variant, "true"
    assert et.variant == "true" and et.margin == em.margin and et.true_evidence == pytest.approx(0.8 / s)
    assert et.patch_values == pytest.approx([1 / s, -0.2 / s])
    assert lowest_point(et.values) == (0, 2)  # the right half: impostor-like
    assert (et.values[:, :2] > 0).all() and (et.values[:, 2:] < 0).all()


def test_evidence_map_refuses_an_identity_without_gallery_vectors():
    query, occluded, boxes, g, keys = _linear_case()
    with pytest.raises(ValueError, match="'C' has no gallery vector"):
        evidence_map(query, occluded, boxes, g, keys, "C", (2, 4))


def test_pointing_game_and_iou_by_hand():
    assert pointing_tolerance(224) == 15 and pointing_tolerance(96) == 6
    region = np.zeros((5, 5), bool)
    region[0, 0] = region[0, 1] = True
    values = np.zeros((5, 5))
    values[4, 4] = -1.0
    assert not pointing_hit(values, region, 0) and not pointing_hit(values, region, 4)
    assert pointing_hit(values, region, 5)  # from (4, 4) to (0, 1): dy 4, dx 3, distance 5
    values[0, 2] = -2.0
    assert not pointing_hit(values, region, 0) and pointing_hit(values, region, 1)
    # top region: the 2 lowest pixels (0, 2) and (4, 4); none redrawn
    assert top_region(values, 2).sum() == 2 and region_iou(values, region) == 0.0
    values[0, 0] = -3.0  # now (0, 0) and (0, 2): IoU 1 / 3
    assert region_iou(values, region) == pytest.approx(1 / 3)
    assert np.isnan(region_iou(values, np.zeros((5, 5), bool)))
    # ties: the first in row-major order
    assert lowest_point(np.zeros((3, 3))) == (0, 0)
