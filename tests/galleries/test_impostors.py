"""Curation by nearest impostors (issue #32 item 2): a known answer on a toy embed function."""
from __future__ import annotations

import numpy as np
import pytest

from fpr.errors import InputError
from fpr.galleries.curate import GallerySpec, curate, identity_centroids, nearest_impostors
from fpr.galleries.records import ImageRecord

# two groups; identity -> the vector every image of it embeds to (centroid = that vector, normalised)
VEC = {("g", "a"): (1, 0, 0), ("g", "b"): (0.9, 0.1, 0), ("g", "c"): (0, 1, 0), ("g", "d"): (0.1, 0.9, 0),
       ("g", "e"): (0, 0, 1), ("h", "p"): (1, 0, 0), ("h", "q"): (0.8, 0.6, 0), ("h", "r"): (0.6, 0.8, 0)}


def _records():
    return [ImageRecord(f"/x/{g}/{i}/{k}.png", i, g, "reference" if k == 0 else "gallery", f"{g}{i}{k}")
            for (g, i) in VEC for k in range(3)]


def _embed(calls):
    def embed(paths):
        calls.append(len(paths))
        return np.array([VEC[(p.split("/")[2], p.split("/")[3])] for p in paths], float)
    return embed


def test_nearest_impostors_known_answer():
    cents = identity_centroids({"a": ["1"], "b": ["2"], "c": ["3"]},
                               lambda paths: np.array([[2, 0], [1, 1], [0, 3]], float)[[int(p) - 1 for p in paths]])
    np.testing.assert_allclose(cents["b"], [2 ** -0.5, 2 ** -0.5])
    got = nearest_impostors(cents, ["a", "c"], 2)
    assert [n for n, _ in got["a"]] == ["b", "c"] and [n for n, _ in got["c"]] == ["b", "a"]
    assert got["a"][0][1] == pytest.approx(2 ** -0.5) and got["a"][1][1] == pytest.approx(0.0)


def test_curation_keeps_the_identities_of_interest_and_their_nearest_impostors():
    calls = []
    items, rep = curate(_records(), GallerySpec(impostors=1, of_interest=("a", "g/c", "h/p")),
                        impostor_embed=_embed(calls))
    kept = sorted({(it.group, it.identity) for it in items})
    # a's nearest is b, c's is d (cos 0.994); p's is q (cos 0.8 > r's 0.6); e and r are dropped
    assert kept == [("g", "a"), ("g", "b"), ("g", "c"), ("g", "d"), ("h", "p"), ("h", "q")]
    assert {k: [n for n, _ in v] for k, v in rep.impostors.items()} == {"g/a": ["b"], "g/c": ["d"], "h/p": ["q"]}
    assert rep.impostors["h/p"][0][1] == pytest.approx(0.8)
    assert calls == [15, 9]  # one embed call per group, every image of its identities
    assert "kept 3 identities of interest and their nearest impostors (6 identities in all)" in rep.lines()[0]
    # all identities of interest by default: every identity with its 2 nearest
    items, rep = curate(_records(), GallerySpec(impostors=2), impostor_embed=_embed([]))
    assert [n for n, _ in rep.impostors["g/e"]] == ["a", "b"]  # cos 0 with all four: ties broken by name
    assert len({(it.group, it.identity) for it in items}) == 8


def test_impostor_curation_errors_are_one_line():
    with pytest.raises(InputError, match="needs an encoder"):
        curate(_records(), GallerySpec(impostors=1))
    with pytest.raises(InputError, match="identity of interest 'zz' is not in the pool"):
        curate(_records(), GallerySpec(impostors=1, of_interest=("zz",)), impostor_embed=_embed([]))
    with pytest.raises(InputError, match="not both"):
        GallerySpec(impostors=1, identities_per_group=3)
    with pytest.raises(InputError, match="pass --impostors K too"):
        GallerySpec(of_interest=("a",))
