"""The known answer of fpr explain: which pixels of a world query its drift redrew."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from fpr.errors import InputError
from fpr.galleries.world import World, WorldConfig, identity_name
from fpr.galleries.world.render import render_view
from fpr.galleries.world.truth import parse_query_id, redrawn_pixels, subject_pixels

METHODS = ("new-scene@0", "new-scene@0.25", "new-scene@0.5", "new-scene@1", "ref-pose@0.25", "paste")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    world = World(WorldConfig(seed=3, species=("zebra", "leopard"), identities=2, gallery=1, references=1,
                              queries=2, methods=METHODS))
    return world, world.write(tmp_path_factory.mktemp("world"))


def _dilate(mask, r):
    out = mask.copy()
    for dy in range(-r, r + 1):
        for dx in range(-r, r + 1):
            out |= np.roll(np.roll(mask, dy, 0), dx, 1)
    return out


def test_redrawn_pixels_are_exactly_where_the_written_query_differs_from_its_own_markings(tiny):
    world, build = tiny
    shares = {}
    for q in build.queries:
        method, sp, ident, k = parse_query_id(q["query_id"])
        assert (q["identity"], q["group"]) == (identity_name(sp, ident), sp)
        truth = redrawn_pixels(world, method, sp, ident, k)
        written = np.asarray(Image.open(q["path"]).convert("RGB"))
        if method == "paste":
            assert not truth.any()
            continue
        spec = world.query_spec(method, sp, ident, k)
        kept = np.asarray(render_view(world.markings(sp, ident), world.query_view(spec, sp, ident, k)))
        assert np.array_equal((written != kept).any(-1), truth)  # the marking diff of the file on disk
        subject = subject_pixels(world, method, sp, ident, k)
        # on the animal: the view's blur spreads an edge by up to 3 px; an occluder's soft rim by a few more
        assert (truth & ~_dilate(subject, 4)).sum() <= 0.005 * truth.sum()
        shares.setdefault(method, []).append(truth.sum() / subject.sum())
    assert max(shares["new-scene@0"]) == 0.0
    s25, s50, s100 = (np.mean(shares[f"new-scene@{d}"]) for d in ("0.25", "0.5", "1"))
    assert 0.05 < s25 < s50 < s100  # more drift redraws more; another individual differs almost everywhere
    assert s100 > 0.5


def test_query_ids_parse_and_copies_have_no_subject_mask(tiny):
    world, _ = tiny
    assert parse_query_id("new-scene@0.25/zebra-0000042/1") == ("new-scene@0.25", "zebra", 42, 1)
    with pytest.raises(InputError, match="not a world query id"):
        parse_query_id("q1")
    sp, ident = "zebra", world.ids["zebra"][0]
    with pytest.raises(InputError, match="copy control"):
        subject_pixels(world, "paste", sp, ident, 0)
