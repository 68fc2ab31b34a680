"""The world renders faster with the same bits: the blocked rosette search against the dense one it replaced,
and a world written by several processes against one process and against the files of the code before
either change (golden digests)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from fpr.workflows.demo import DEMO_METHODS
from fpr.galleries import world as W
from fpr.galleries.world import patterns as P
from fpr.keys import keyed_rng


def _spots_dense(rng: np.random.Generator) -> np.ndarray:
    """The leopard pattern as rendered before the blocked search: every pixel against every rosette."""
    r = P.Rosettes.draw(rng)
    dx = P._XX.ravel()[:, None] - r.cx[None, :]
    dy = P._YY.ravel()[:, None] - r.cy[None, :]
    c, s = np.cos(r.th), np.sin(r.th)
    u = (dx * c + dy * s) / r.a
    v = (-dx * s + dy * c) / r.b
    d = np.sqrt(u * u + v * v)
    j = d.argmin(1)
    rows = np.arange(len(j))
    return r.labels(j, d[rows, j], np.arctan2(v[rows, j], u[rows, j]))


# evaluation, generic, validation, training and drift pattern seeds: every range the world draws from
SEEDS = [*range(0, 40), *range(50_000, 50_020), *range(100_000, 100_020), *range(1_000_000, 1_000_040),
         *range(20_000_000, 20_000_040)]


@pytest.mark.slow
def test_blocked_rosette_search_equals_the_dense_one_bit_for_bit():
    for seed in SEEDS:
        want = _spots_dense(keyed_rng("pattern", "leopard", seed))
        got = P._spots(keyed_rng("pattern", "leopard", seed))
        assert got.dtype == want.dtype and np.array_equal(got, want), seed


def test_leopard_label_maps_equal_the_old_codes():
    """sha256 (first 16 hex) of 80 leopard label maps, computed with the code before this change (0c30eec)."""
    h = hashlib.sha256()
    for seed in [*range(0, 40), *range(20_000_000, 20_000_040)]:
        h.update(P.base_labels("leopard", seed).tobytes())
    assert h.hexdigest()[:16] == "ce9aa77d7dd7da30"


def test_nearest_rosette_keeps_the_dense_tie_rule_and_float32_values():
    """Two identical rosettes: every pixel's nearest is the first of them (argmin's rule), with the
    dense code's float32 distance."""
    cx = np.array([0.5, 0.5, 0.2], np.float32)
    cy = np.array([0.5, 0.5, 0.8], np.float32)
    a = np.array([0.03, 0.03, 0.025], np.float32)
    b = np.array([0.02, 0.02, 0.025], np.float32)
    th = np.array([0.3, 0.3, 1.0], np.float32)
    c, s = np.cos(th), np.sin(th)
    j, dn, u, v = P._nearest_rosette(cx, cy, c, s, a, b)
    dx = P._XX.ravel()[:, None] - cx[None, :]
    dy = P._YY.ravel()[:, None] - cy[None, :]
    uu = (dx * c + dy * s) / a
    vv = (-dx * s + dy * c) / b
    d = np.sqrt(uu * uu + vv * vv)
    want = d.argmin(1)
    rows = np.arange(len(want))
    assert np.array_equal(j, want) and 1 not in set(j.tolist())
    assert np.array_equal(dn, d[rows, want]) and np.array_equal(u, uu[rows, want]) and np.array_equal(v, vv[rows, want])


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(root).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


# sha256 (first 16 hex) over the paths and bytes of every file (PNGs, gallery.csv, queries.csv) of a small world
# with the demo's 11 methods, written by the code before the blocked rosette search and the process pool
# (commit 0c30eec): the demo's images and tables must not change by a byte.
WRITE_GOLDEN = {0: "028ba31ae1d49824", 1: "df2b5a9187d1eebf", 2: "1ad211315a29ee4c"}


@pytest.mark.parametrize("seed", sorted(WRITE_GOLDEN))
def test_world_written_by_two_processes_equals_one_process_and_the_old_files(tmp_path, seed):
    cfg = W.WorldConfig(seed=seed, identities=2, gallery=3, references=2, queries=1, methods=DEMO_METHODS)
    one = W.World(cfg).write(tmp_path / "one", workers=1)
    two = W.World(cfg).write(tmp_path / "two", workers=2)
    # the pool really ran (96 images, fork available), unless an earlier test left Ray running
    assert W.render_processes(2, one.n_images) == (1 if W._ray_running() else 2)
    assert _tree_digest(tmp_path / "one") == _tree_digest(tmp_path / "two") == WRITE_GOLDEN[seed]
    strip = [{k: v for k, v in q.items() if k not in ("path", "reference_paths", "source_reference")}
             for q in one.queries]
    assert strip == [{k: v for k, v in q.items() if k not in ("path", "reference_paths", "source_reference")}
                     for q in two.queries]
    assert [(r.identity, r.role) for r in one.records] == [(r.identity, r.role) for r in two.records]


def test_render_processes_falls_back_to_one_for_tiny_worlds_and_threads():
    import threading

    assert W.render_processes(1, 10_000) == 1 and W.render_processes(2, 10) == 1
    assert W.render_processes(0, 10_000) >= 1 and W.render_processes(64, 10_000) == 8
    got = []
    t = threading.Thread(target=lambda: got.append(W.render_processes(2, 10_000)))
    t.start()
    t.join()
    assert got == [1]
