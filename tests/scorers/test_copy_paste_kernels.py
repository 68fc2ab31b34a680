"""copy-paste's compiled local NCC: known answers, the correctly rounded dot product, independence of the batch."""
from __future__ import annotations

import math

import numpy as np

from fpr.scorers.copy_paste import PATCH, _local_ncc


def _windows(rng, width, height):
    w = rng.standard_normal((width * height, PATCH * PATCH)).astype(np.float32)
    return w / np.linalg.norm(w, axis=1, keepdims=True)


def test_hand_computed_values_and_the_border():
    width, height = 6, 5
    windows = np.zeros((width * height, 64), np.float32)
    windows[:, 0] = np.arange(width * height, dtype=np.float32) / 100  # window at (x, y): (y * width + x) / 100
    windows[:, 1] = 0.5
    templates = np.zeros((1, 64), np.float32)
    templates[0, 0], templates[0, 1] = 2.0, 1.0
    # the transform puts the centre at (4 + 1, 4 + 0): nearest window x0 = 1, y0 = 0
    pred, x0, y0, inside, ncc = _local_ncc(templates, windows, width, height, np.array([5 + 4j]), 1 + 0j, 0j, 1)
    assert (x0[0], y0[0]) == (1, 0) and pred[0] == 5 + 4j
    assert not inside[0, 0].any() and inside[0, 1:].all()  # row y = -1 is outside
    for a in (1, 2):
        for b in range(3):
            x, y = 1 + b - 1, a - 1
            assert ncc[0, a, b] == np.float32(2 * float(windows[y * width + x, 0]) + 0.5), (a, b)
    assert (ncc[0, 0] == 0).all()


def test_values_agree_with_the_correctly_rounded_dot_products():
    """The fixed float64 tree is not correctly rounded in general, but within far less than a float32 ulp."""
    rng = np.random.default_rng(3)
    width, height = 30, 25
    windows = _windows(rng, width, height)
    templates = _windows(rng, 7, 1)
    centres = rng.uniform(0, 34, 7) + 1j * rng.uniform(0, 29, 7)
    _, x0, y0, inside, ncc = _local_ncc(templates, windows, width, height, centres, 0.98 + 0.05j, 1 - 2j, 2)
    checked = 0
    for k in range(7):
        for a in range(5):
            for b in range(5):
                x, y = x0[k] + b - 2, y0[k] + a - 2
                assert inside[k, a, b] == (0 <= x < width and 0 <= y < height)
                if inside[k, a, b]:
                    exact = math.fsum(float(t) * float(w) for t, w in zip(templates[k], windows[y * width + x]))
                    assert ncc[k, a, b] == np.float32(exact)
                    checked += 1
    assert checked > 100


def test_a_value_does_not_depend_on_the_other_templates():
    rng = np.random.default_rng(4)
    windows = _windows(rng, 20, 20)
    templates = _windows(rng, 9, 1)
    centres = rng.uniform(4, 20, 9) + 1j * rng.uniform(4, 20, 9)
    full = _local_ncc(templates, windows, 20, 20, centres, 1.02 - 0.01j, 0.3 + 0.7j, 2)[4]
    part = _local_ncc(templates[3:5], windows, 20, 20, centres[3:5], 1.02 - 0.01j, 0.3 + 0.7j, 2)[4]
    assert full[3:5].tobytes() == part.tobytes()
