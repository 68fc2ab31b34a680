"""``fpr ablate --protocol official``: the released k-means, random, distractor and settings rules."""
from __future__ import annotations

import json
import random

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import fpr.api as api
from fpr.cli.main import cli
from fpr.encoders.embed import embed_paths
from fpr.encoders.registry import load_encoder
from fpr.errors import InputError
from fpr.galleries.records import ImageRecord
from fpr.workflows.ablate_official import (
    OFFICIAL_SETTINGS,
    ablate_official,
    draw_distractors,
    official_kmeans_pick,
    official_random_pick,
    parse_settings,
    subsample,
)
from tests.conftest import write_image

SELECTED = [f"s{i}" for i in range(10)]
DISTRACTORS = [f"d{i}" for i in range(8)]


@pytest.fixture
def setup(tmp_path, workspace):
    """One species: 10 identities with 2 references + 12 gallery images, 8 distractors with 3 gallery images."""
    recs = []
    for i, ident in enumerate(SELECTED + DISTRACTORS):
        n_gallery = 12 if ident.startswith("s") else 3
        for k in range(n_gallery + (2 if ident.startswith("s") else 0)):
            p = write_image(tmp_path / "img" / ident / f"{k:02d}.png", seed=100 * i + k, size=24)
            role = "reference" if ident.startswith("s") and k >= n_gallery else "gallery"
            recs.append(ImageRecord(str(p), ident, "zebra", role))
    api.import_gallery("zebras", recs, workspace=workspace)
    rows = []
    for j in range(20):
        p = write_image(tmp_path / "gen" / f"{j}.png", seed=9000 + j, size=24)
        rows.append({"path": str(p), "identity": SELECTED[j % 10], "group": "zebra", "method": f"m{j % 2}"})
    qfile = tmp_path / "gen.csv"
    pd.DataFrame(rows).to_csv(qfile, index=False)
    return tmp_path, workspace, qfile


def test_released_grid_and_its_meaning():
    assert OFFICIAL_SETTINGS == ((15, 10), (25, 10), (10, 10), (100, 10), (10, 1), (10, 5), (10, 20))
    assert parse_settings(None) == list(OFFICIAL_SETTINGS)
    assert parse_settings("15x10, 10X1,15x10") == [(15, 10), (10, 1)]
    with pytest.raises(InputError, match="look like 15x10"):
        parse_settings("15-10")


def test_distractors_are_n_minus_10_identities():
    gallery_ids = SELECTED + DISTRACTORS
    assert draw_distractors(SELECTED, gallery_ids, 10) == [] and draw_distractors(SELECTED, gallery_ids, 5) == []
    five = draw_distractors(SELECTED, gallery_ids, 15, seed=101)
    assert five == ["d3", "d4", "d2", "d7", "d0"]  # hand-listed: random.Random(101).sample(d0..d7, 5)
    assert five == random.Random(101).sample(DISTRACTORS, 5)
    assert sorted(draw_distractors(SELECTED, gallery_ids, 100)) == DISTRACTORS  # all there are
    assert subsample(12, 5) == [int(i) for i in np.random.RandomState(101).choice(12, 5, replace=False)]
    assert sorted(subsample(3, 10)) == [0, 1, 2]


def test_kmeans_matches_a_direct_scikit_learn_call():
    from sklearn.cluster import KMeans
    from sklearn.metrics.pairwise import euclidean_distances

    # the released script's call, on float16 features (what MiewID under fp16 autocast returns)
    x16 = (np.random.default_rng(3).normal(size=(23, 6)) * 5).astype(np.float16)
    km = KMeans(n_clusters=10, random_state=42, n_init="auto", max_iter=300)
    labels = km.fit_predict(x16)
    expected = []
    for c in range(10):
        members = np.flatnonzero(labels == c)
        expected.append(int(members[np.argmin(euclidean_distances(x16[members],
                                                                  km.cluster_centers_[c].reshape(1, -1)))]))
    assert official_kmeans_pick(x16.astype(np.float32), 10) == expected  # fpr's raw features are float32
    assert sorted(official_kmeans_pick(x16[:4], 4)) == [0, 1, 2, 3]
    rows = [list(range(12)), list(range(3))]
    rnd = random.Random(101)
    assert official_random_pick(rows) == [rnd.sample(rows[0], 10), rnd.sample(rows[1], 3)]


def test_official_ablation_end_to_end(setup):
    tmp, ws, qfile = setup
    res = ablate_official("zebras", "pixels-16", qfile, workspace=ws, cluster_encoder="pixels-16", name="off")
    star = res.rows[(res.rows["group"] == "*") & (res.rows["method"] == "*")].set_index("variant")
    # gallery images per setting: 10 identities x min(12, M) + distractors x min(3, M), hand computed
    assert star["gallery_images"].to_dict() == {"n15-m10": 10 * 10 + 5 * 3, "n25-m10": 100 + 8 * 3,
                                                "n10-m10": 100, "n100-m10": 100 + 8 * 3, "n10-m1": 10,
                                                "n10-m5": 50, "n10-m20": 120, "kmeans-k10": 100, "random-k10": 100}
    # one distractor draw per (species, N), shared by the baseline and both methods
    assert res.distractors[("zebra", 15)] == ["d3", "d4", "d2", "d7", "d0"]
    chosen = res.galleries["n15-m10"]["zebra"]
    assert {p.split("/")[-2] for p in chosen} == set(SELECTED) | {"d3", "d4", "d2", "d7", "d0"}
    # the per-identity subsample is RandomState(101) on the identity's gallery images in gallery order
    s3 = sorted(p for p in chosen if p.split("/")[-2] == "s3")
    assert [int(p[-6:-4]) for p in s3] == sorted(subsample(12, 10))
    # k-means gallery = a direct scikit-learn call on the raw features of each identity's images
    from sklearn.cluster import KMeans
    from sklearn.metrics.pairwise import euclidean_distances

    enc = load_encoder("pixels-16")
    km_paths = set(res.galleries["kmeans-k10"]["zebra"])
    for ident in ("s0", "s7"):
        paths = sorted(str(tmp / "img" / ident / f"{k:02d}.png") for k in range(12))
        raw = embed_paths(enc, paths, normalize=False).vectors
        assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)  # raw, not normalised
        km = KMeans(n_clusters=10, random_state=42, n_init="auto", max_iter=300)
        lab = km.fit_predict(raw.astype(np.float64))
        want = set()
        for c in range(10):
            m = np.flatnonzero(lab == c)
            want.add(paths[m[np.argmin(euclidean_distances(raw[m].astype(np.float64),
                                                           km.cluster_centers_[c].reshape(1, -1)))]])
        assert {p for p in km_paths if p.split("/")[-2] == ident} == want
    # distractors never enter the selection galleries
    assert not any(p.split("/")[-2].startswith("d") for p in res.galleries["random-k10"]["zebra"])
    # per-method rows, and the stored table (group '*' rows)
    assert set(res.rows["method"]) == {"*", "m0", "m1"}
    from fpr.workflows.ablate import load_ablation

    table = load_ablation("off", workspace=ws)
    assert len(table) == 9 * 3 and set(table["variant"]) == set(star.index)
    n10 = table[(table["variant"] == "n10-m10") & (table["method"] == "*")].iloc[0]
    assert n10["oracle_map"] == pytest.approx(star.loc["n10-m10", "baseline_map"])


def test_baseline_values_by_hand(setup):
    """Setting 10x1: each identity keeps one gallery image; mAP and Sim of the references by hand."""
    tmp, ws, _ = setup
    res = ablate_official("zebras", "pixels-16", None, settings="10x1", selection=[], workspace=ws, store=False)
    enc = load_encoder("pixels-16")
    gal = sorted(res.galleries["n10-m1"]["zebra"])
    assert len(gal) == 10 and [int(p[-6:-4]) for p in gal] == [subsample(12, 1)[0]] * 10
    refs = [str(tmp / "img" / s / f"{k:02d}.png") for s in SELECTED for k in (12, 13)]
    q = embed_paths(enc, refs).vectors.astype(np.float64)
    g = embed_paths(enc, gal).vectors.astype(np.float64)
    s = q @ g.T
    own = np.repeat(np.arange(10), 2)
    ranks = (s > s[np.arange(20), own][:, None]).sum(1) + 1  # one relevant image: AP = 1 / rank
    row = res.rows[(res.rows["group"] == "zebra") & (res.rows["method"] == "*")].iloc[0]
    assert row["baseline_map"] == pytest.approx(np.mean(1.0 / ranks))
    assert row["baseline_sim"] == pytest.approx(np.mean(s[np.arange(20), own]))
    assert np.isnan(row["generated_map"])


def test_official_cli(setup):
    tmp, ws, qfile = setup
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "ablate", "--protocol", "official", "--gallery", "zebras",
                                 "--encoder", "pixels-16", "--queries", str(qfile), "--settings", "15x10,10x5",
                                 "--selection", "random", "--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["distractors"] == {"zebra|15": ["d3", "d4", "d2", "d7", "d0"], "zebra|10": []}
    assert {row["variant"] for row in out["rows"]} == {"n15-m10", "n10-m5", "random-k10"}
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "ablate", "--protocol", "official", "--gallery", "zebras",
                                 "--encoder", "pixels-16", "--settings", "0x5"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "ablate", "--protocol", "official", "--gallery", "zebras",
                                 "--encoder", "pixels-16", "--per-identity", "1,5"])
    assert r.exit_code == 2 and "--per-identity not used by --protocol official" in r.output
