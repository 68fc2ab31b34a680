from __future__ import annotations

import numpy as np
import pytest

from fpr.errors import InputError
from fpr.galleries.curate import GallerySpec, curate, gallery_fingerprint, kmeans_pick
from fpr.galleries.manifest import read_folder, read_manifest
from fpr.galleries.records import ImageRecord
from tests.conftest import write_image


def test_manifest_relative_paths_resolve_against_its_folder(tmp_path):
    write_image(tmp_path / "data" / "a.png", 1)
    (tmp_path / "data" / "m.csv").write_text("path,identity,group,role\na.png,id1,g,reference\n")
    recs = read_manifest(tmp_path / "data" / "m.csv")
    assert recs[0].path == str((tmp_path / "data" / "a.png").resolve()) and recs[0].role == "reference"


def test_parquet_manifest(tmp_path):
    import pandas as pd

    pd.DataFrame({"path": ["/x.png"], "identity": ["i"], "group": ["g"]}).to_parquet(tmp_path / "m.parquet")
    assert read_manifest(tmp_path / "m.parquet")[0].identity == "i"


@pytest.mark.parametrize("text,msg", [
    ("path,identity\na.png,i\n", "lacks required column(s) group"),
    ("path,identity,group,role\na.png,i,g,query\n", "unknown role 'query' in row 2"),
    ("path,identity,group\n", "no rows"),
    ("path,identity,group\na.png,,g\n", "empty 'identity' in row 2"),
])
def test_bad_manifests_are_one_line_errors(tmp_path, text, msg):
    (tmp_path / "m.csv").write_text(text)
    with pytest.raises(InputError) as exc:
        read_manifest(tmp_path / "m.csv")
    assert msg in exc.value.one_line() and "\n" not in exc.value.one_line()


def test_folder_tree(tiny_tree):
    recs = read_folder(tiny_tree)
    assert len(recs) == 24 and {r.group for r in recs} == {"cats", "dogs"}


def test_empty_folder_is_an_error(tmp_path):
    with pytest.raises(InputError, match="no images"):
        read_folder(tmp_path)


def records(n_groups=2, n_ids=4, n_imgs=6):
    out = []
    for g in range(n_groups):
        for i in range(n_ids):
            for k in range(n_imgs):
                out.append(ImageRecord(f"/d/{g}/{i}/{k}.png", f"id{g}{i}", f"g{g}", content_hash=f"h{g}{i}{k}"))
    return out


def test_references_never_in_gallery_and_counts():
    items, _ = curate(records(), GallerySpec(references_per_identity=2, gallery_per_identity=3,
                                             identities_per_group=3, seed=1))
    refs = {i.path for i in items if i.role == "reference"}
    gal = {i.path for i in items if i.role == "gallery"}
    assert not refs & gal
    for g in ("g0", "g1"):
        ids = {i.identity for i in items if i.group == g}
        assert len(ids) == 3
        for ident in ids:
            assert sum(i.identity == ident and i.role == "gallery" for i in items) == 3
            assert sum(i.identity == ident and i.role == "reference" for i in items) == 2


def test_sampling_is_seeded_and_stable_when_identities_are_added():
    spec = GallerySpec(references_per_identity=1, gallery_per_identity=2, seed=4)
    a, _ = curate(records(n_ids=3), spec)
    b, _ = curate(records(n_ids=4), spec)
    pick = lambda items: {(i.identity, i.path, i.role) for i in items if i.identity in ("id00", "id01")}  # noqa
    assert pick(a) == pick(b)
    c, _ = curate(records(n_ids=3), spec)
    assert gallery_fingerprint(a) == gallery_fingerprint(c)


def test_exact_duplicates_are_removed_and_reported():
    recs = records(n_groups=1, n_ids=2, n_imgs=3)
    recs.append(ImageRecord("/d/copy.png", "id01", "g0", content_hash="h000"))
    items, report = curate(recs, GallerySpec())
    assert len(items) == 6 and report.duplicates == [("/d/copy.png", "/d/0/0/0.png")]
    assert report.conflicting_duplicates == 1 and "duplicate" in report.lines()[0]


def test_group_with_one_identity_is_an_error():
    with pytest.raises(InputError, match="group 'g0' has 1 identity"):
        curate(records(n_groups=1, n_ids=1), GallerySpec())


def test_kmeans_picks_the_image_nearest_each_centroid():
    centers = np.array([[0, 0], [10, 0], [0, 10]], float)
    ring = np.array([[1, 0], [-1, 0], [0, 1], [0, -1]], float)  # symmetric: each centroid is its centre
    pts = np.concatenate([np.concatenate([c + ring for c in centers]), centers])  # centres are rows 12-14
    assert kmeans_pick(pts, 3, seed=0) == [12, 13, 14]


def test_kmeans_sampling_uses_the_given_embeddings():
    calls = []

    def embed(paths):
        calls.append(len(paths))
        return np.random.default_rng(len(calls)).normal(size=(len(paths), 4))

    items, _ = curate(records(), GallerySpec(gallery_per_identity=2, sampling="kmeans"), embed=embed)
    assert calls and all(c == 6 for c in calls)
    assert sum(i.role == "gallery" for i in items) == 2 * 8


def test_bad_spec_values():
    with pytest.raises(InputError, match="unknown sampling"):
        GallerySpec(sampling="best")
    with pytest.raises(InputError, match="must be positive"):
        GallerySpec(gallery_per_identity=0)
