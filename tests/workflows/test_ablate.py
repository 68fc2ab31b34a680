"""Gallery ablations: one embedding pass for the whole sweep, correct metrics per variant, stored and plotted."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

import fpr.api as api
from fpr.cli.main import cli
from fpr.encoders.embed import EMBED_STATS
from fpr.errors import ConflictError, InputError
from fpr.galleries.curate import GallerySpec
from fpr.workflows.ablate import Variant, ablate, plan_variants
from tests.conftest import make_tree, write_image


@pytest.fixture
def setup(tmp_path, workspace):
    """2 groups x 4 identities x (2 references + 8 pool images); 24 generated images."""
    tree = make_tree(tmp_path / "tree", identities=4, images=10)
    api.import_gallery("pets", api.read_folder(tree), GallerySpec(references_per_identity=2), workspace=workspace)
    rows = []
    for j in range(24):
        g, i = j % 2, (j // 2) % 4
        group = ("cats", "dogs")[g]
        p = write_image(tmp_path / "gen" / f"{j}.png", seed=7000 + j)
        rows.append({"path": str(p), "identity": f"{group}-{i}", "group": group, "method": f"m{j % 3}"})
    qfile = tmp_path / "gen.csv"
    pd.DataFrame(rows).to_csv(qfile, index=False)
    return tmp_path, workspace, qfile


def test_every_image_is_embedded_once_for_the_whole_sweep(setup):
    tmp, ws, qfile = setup
    n_distinct = 2 * 4 * 10 + 24
    before = EMBED_STATS["images_embedded"]
    res = ablate("pets", "pixels-16", qfile, per_identity="1,4,all", identities="2,3,all",
                 sampling="random,kmeans", repeats=2, seed=7, design="grid", workspace=ws, workers=0)
    assert EMBED_STATS["images_embedded"] - before == n_distinct == res.n_images == res.n_computed
    assert res.rows["variant"].nunique() == 3 * 3 * 2
    assert len(res.rows[res.rows["method"] == "*"]) == 3 * 3 * 2 * 2
    # a second sweep over the same images embeds nothing
    before = EMBED_STATS["images_embedded"]
    ablate("pets", "pixels-16", qfile, per_identity="3", identities="2", sampling="kmeans", repeats=2,
           workspace=ws, store=False, workers=0)
    assert EMBED_STATS["images_embedded"] == before


@pytest.mark.determinism
def test_full_variant_equals_run_query(setup):
    """With every pool image and every identity, generated AP is exactly what ``fpr query`` computes
    (both rank by the exact scores of fpr.index.exact, so this holds whatever the BLAS kernel)."""
    tmp, ws, qfile = setup
    api.build_index("pets", "pixels-16", workspace=ws, workers=0)
    run = api.run_query("pets-pixels-16", qfile, workspace=ws, run="r")
    res = ablate("pets", "pixels-16", qfile, per_identity="all", identities="all", sampling="random", repeats=1,
                 workspace=ws, store=False, workers=0)
    row = res.rows[res.rows["method"] == "*"].iloc[0]
    assert row["generated_map"] == pytest.approx(run.per_query["ap"].mean(), abs=1e-12)
    assert row["generated_n"] == 24 and row["gallery_images"] == 64
    assert row["oracle_n"] == 16  # only the references are held out when the gallery takes every pool image
    for m in ("m0", "m1", "m2"):
        r = res.rows[res.rows["method"] == m].iloc[0]
        assert r["generated_map"] == pytest.approx(run.per_query.loc[run.per_query["method"] == m, "ap"].mean())


def test_factors_behave_as_in_the_paper(setup):
    tmp, ws, qfile = setup
    res = ablate("pets", "pixels-16", qfile, per_identity="1,4,8", identities="2,4", sampling="random",
                 repeats=3, seed=1, workspace=ws, store=False, workers=0)
    s = res.summary[res.summary["method"] == "*"].set_index("variant")
    assert res.baseline == Variant(8, 4, "random")
    # fewer images per identity: held-out oracle queries grow, galleries shrink
    assert s.loc["m1-n4-random", "gallery_images"] == 8 and s.loc["m8-n4-random", "gallery_images"] == 64
    # fewer competing identities: easier (higher mAP), and Sim does not change (section 4.5)
    assert s.loc["m8-n2-random", "oracle_map"] > s.loc["m8-n4-random", "oracle_map"]
    assert s.loc["m8-n2-random", "oracle_sim"] == pytest.approx(s.loc["m8-n4-random", "oracle_sim"])
    assert s.loc["m8-n2-random", "generated_sim"] == pytest.approx(s.loc["m8-n4-random", "generated_sim"])
    # repeats with seed + r differ when sampling matters, and are reproducible
    again = ablate("pets", "pixels-16", qfile, per_identity="1,4,8", identities="2,4", sampling="random",
                   repeats=3, seed=1, workspace=ws, store=False, workers=0)
    pd.testing.assert_frame_equal(res.rows.drop(columns="ablation"), again.rows.drop(columns="ablation"))
    m1 = res.rows[(res.rows["variant"] == "m1-n4-random") & (res.rows["method"] == "*")]
    assert m1["oracle_map"].nunique() > 1


def test_plan_one_at_a_time_and_grid():
    variants, base = plan_variants([1, 5, 10, 20], [2, 5, 10], ["random", "kmeans"])
    assert base == Variant(10, 10, "random")
    assert [v.id for v in variants] == ["m1-n10-random", "m5-n10-random", "m10-n10-random", "m20-n10-random",
                                        "m10-n2-random", "m10-n5-random", "m10-n10-kmeans"]
    grid, _ = plan_variants([1, 5], [2, None], ["random"], "grid")
    assert len(grid) == 4 and Variant(5, None, "random") in grid


def test_stored_table_plot_and_cli(setup):
    tmp, ws, qfile = setup
    runner = CliRunner()
    args = ["--workspace", str(ws), "ablate", "--gallery", "pets", "--encoder", "pixels-16", "--queries", str(qfile),
            "--per-identity", "1,4", "--identities", "2,4", "--sampling", "random,kmeans", "--repeats", "2",
            "--seed", "3", "--workers", "0", "--run-prefix", "abl1", "--plot", str(tmp / "abl.png")]
    r = runner.invoke(cli, args + ["--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output[r.output.index("{"):])
    assert out["ablation"] == "abl1" and out["images_embedded"] == 104
    assert (tmp / "abl.png").stat().st_size > 1000
    stored = api.sql("SELECT * FROM ablations WHERE ablation = 'abl1' AND method = '*' ORDER BY variant, \"repeat\"",
                     workspace=ws)
    assert len(stored) == 4 * 2  # one-at-a-time around (4, 4, random): m1, m4, n2, kmeans
    assert {"oracle_map", "generated_map", "oracle_sim", "generated_sim", "per_identity", "identities",
            "sampling", "repeat"} <= set(stored.columns)
    assert stored["oracle_map"].between(0, 1).all()
    r = runner.invoke(cli, args)
    assert r.exit_code == 2 and "already exists" in r.output
    r = runner.invoke(cli, args + ["--overwrite", "--format", "csv", "--raw"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0].startswith("ablation,variant,gallery,encoder,per_identity")


def test_bad_inputs_are_one_line(setup):
    tmp, ws, qfile = setup
    with pytest.raises(InputError, match="--per-identity values must be positive"):
        ablate("pets", "pixels-16", qfile, per_identity="0,5", workspace=ws, workers=0)
    with pytest.raises(InputError, match="unknown sampling 'fps'"):
        ablate("pets", "pixels-16", qfile, sampling="random,fps", workspace=ws, workers=0)
    bad = pd.read_csv(qfile)
    bad.loc[0, "identity"] = "cats-99"
    bad.to_csv(tmp / "bad.csv", index=False)
    with pytest.raises(InputError, match="cats/cats-99"):
        ablate("pets", "pixels-16", tmp / "bad.csv", workspace=ws, workers=0)
    res = ablate("pets", "pixels-16", tmp / "bad.csv", per_identity="2", identities="2", sampling="random",
                 repeats=1, workspace=ws, skip_missing_identities=True, name="ok", workers=0)
    assert res.rows["generated_n"].iloc[0] == 23
    with pytest.raises(ConflictError):
        ablate("pets", "pixels-16", qfile, per_identity="2", identities="2", sampling="random", repeats=1,
               workspace=ws, name="ok", workers=0)
