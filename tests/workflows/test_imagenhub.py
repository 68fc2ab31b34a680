"""ImagenHub-style human ratings: the loader on hand-made rater files, Spearman per task against scipy, and
``fpr meta --imagenhub`` on a stored run."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy.stats import spearmanr

from fpr import api
from fpr.cli.main import cli
from fpr.errors import InputError
from fpr.galleries.curate import GallerySpec
from fpr.workflows import imagenhub as ih
from tests.conftest import make_tree


def write_ratings(root: Path, folder: str, raters: list[dict[str, list[str]]], uids: list[str]) -> None:
    """``raters[k]``: model -> cells, one per uid, written as <Task>_rater<k+1>.tsv."""
    d = root / folder
    d.mkdir(parents=True, exist_ok=True)
    task = folder.removeprefix("ImagenHub_")
    for k, cols in enumerate(raters):
        pd.DataFrame({"uid": uids, **cols}).to_csv(d / f"{task}_rater{k + 1}.tsv", sep="\t", index=False)


def test_loader_reads_every_rater_cell_and_averages_sc(tmp_path):
    write_ratings(tmp_path, "ImagenHub_Subject-Driven_IG", [
        {"DreamBooth": ["[1, 0.5]", "[0, 1]"], "BLIP": ["[0.5, 0.5]", "[1, 1]"]},
        {"DreamBooth": ["[1, 1]", "[0.5, 1]"], "BLIP": ["[0, 0]", "[1, 0.5]"]},
        {"DreamBooth": ["[0.5, 1]", "[0, 0]"], "BLIP": ["[0.5, 1]", "[1, 1]"]}], ["a.jpg", "b.jpg"])
    write_ratings(tmp_path, "ImagenHub_Text-Guided_IE", [{"MagicBrush": ["[0,0]"]}], ["x.jpg"])
    (tmp_path / "notes").mkdir()  # other folders are not tasks
    r = ih.read_imagenhub(tmp_path)
    assert len(r) == 2 * 2 * 3 + 1 and set(r["task"]) == {"subject-driven-ig", "text-guided-ie"}
    row = r[(r.model == "BLIP") & (r.uid == "a.jpg") & (r.rater == 2)].iloc[0]
    assert (row.sc, row.pq) == (0.0, 0.0)
    h = ih.human_scores(r).set_index(["task", "model", "uid"])
    # DreamBooth a.jpg: SC 1, 1, 0.5 -> 2.5/3; BLIP b.jpg: 1, 1, 1 -> 1; MagicBrush x.jpg: one rater, 0
    assert h.loc[("subject-driven-ig", "DreamBooth", "a.jpg"), "human"] == pytest.approx(2.5 / 3, abs=1e-15)
    assert h.loc[("subject-driven-ig", "BLIP", "b.jpg"), "human"] == 1.0
    assert tuple(h.loc[("text-guided-ie", "MagicBrush", "x.jpg")]) == (0.0, 1)


@pytest.mark.parametrize("cell,message", [("[1, 2]", "off ImagenHub's scale"), ("good", "is not \\[SC, PQ\\]"),
                                          ("[1]", "is not \\[SC, PQ\\]")])
def test_bad_cells_are_one_line_errors_naming_file_row_and_column(tmp_path, cell, message):
    write_ratings(tmp_path, "ImagenHub_Text-Guided_IG", [{"SDXL": ["[1, 1]", cell]}], ["a", "b"])
    with pytest.raises(InputError, match=message) as e:
        ih.read_imagenhub(tmp_path)
    assert "Text-Guided_IG_rater1.tsv row 3 column SDXL" in e.value.where
    with pytest.raises(InputError, match="no ImagenHub rater files"):
        ih.read_imagenhub(tmp_path / "ImagenHub_Text-Guided_IG")


def test_spearman_per_task_and_model_matches_scipy_and_fisher_z_by_hand():
    rng = np.random.default_rng(5)
    n = 60
    joined = pd.DataFrame({"task": np.where(np.arange(n) < 36, "text-guided-ig", "control-guided-ig"),
                           "model": np.array(["m1", "m2"])[np.arange(n) % 2],
                           "human": rng.choice([0, 1 / 3, 0.5, 2 / 3, 1.0], n),
                           "score": rng.integers(0, 11, n).astype(float)})
    joined.loc[3, "score"] = np.nan  # a missing value drops that sample only
    rows = {(r.task, r.model): r for r in ih.per_task_spearman(joined, ["score"])}
    assert set(rows) == {(t, m) for t in ("text-guided-ig", "control-guided-ig")
                         for m in ("m1", "m2", ih.POOLED, ih.FISHER)}

    def scipy_rho(g):
        ok = g["score"].notna()
        return int(ok.sum()), spearmanr(g.loc[ok, "score"], g.loc[ok, "human"]).statistic

    for task, g in joined.groupby("task"):
        n_all, rho_all = scipy_rho(g)
        assert rows[(task, ih.POOLED)].n == n_all
        assert rows[(task, ih.POOLED)].spearman == pytest.approx(rho_all, abs=1e-12)
        per = {m: scipy_rho(gm) for m, gm in g.groupby("model")}
        for m, (k, rho) in per.items():
            assert rows[(task, m)].n == k and rows[(task, m)].spearman == pytest.approx(rho, abs=1e-12)
        # CIGEval's spear.py average_correlation: z = mean(atanh r); r = (e^2z - 1) / (e^2z + 1)
        z = (math.atanh(per["m1"][1]) + math.atanh(per["m2"][1])) / 2
        assert rows[(task, ih.FISHER)].spearman == pytest.approx((math.exp(2 * z) - 1) / (math.exp(2 * z) + 1),
                                                                 abs=1e-12)
    means = {r.model: r for r in ih.mean_over_tasks(list(rows.values()))}
    for how in (ih.POOLED, ih.FISHER):
        assert means[how].task == "(mean)" and means[how].spearman == pytest.approx(
            (rows[("text-guided-ig", how)].spearman + rows[("control-guided-ig", how)].spearman) / 2, abs=1e-15)
    assert means[ih.POOLED].n == 59


def test_fpr_meta_imagenhub_on_a_stored_run(tmp_path, workspace):
    tree = make_tree(tmp_path / "tree", identities=2, images=4, groups=("cats",))
    api.import_gallery("g", api.read_folder(tree), GallerySpec(references_per_identity=1), workspace=workspace)
    api.build_index("g", "pixels-16", workspace=workspace)
    items = [it for it in api.gallery_items("g", workspace=workspace) if it.role == "gallery"]
    rows, ratings = [], {}
    rng = np.random.default_rng(0)
    for k in range(16):
        it, task, model = items[k % len(items)], ("Text-Guided_IG", "Control-Guided_IG")[k % 2], f"m{k % 4 // 2}"
        rows.append({"query_id": f"q{k}", "uid": f"s{k // 4}.jpg", "path": items[(k * 5) % len(items)].path,
                     "identity": it.identity, "group": it.group, "method": model,
                     "task": task.replace("_", "-").lower()})
        for rater in range(3):
            ratings.setdefault((task, rater), {}).setdefault(model, {})[f"s{k // 4}.jpg"] = \
                f"[{rng.choice([0, 0.5, 1])}, 1]"
    api.run_query("g-pixels-16", pd.DataFrame(rows), run="r", workspace=workspace)
    root = tmp_path / "imagenhub"
    for (task, rater), cols in ratings.items():
        uids = sorted({u for c in cols.values() for u in c})
        d = root / f"ImagenHub_{task}"
        d.mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"uid": uids, **{m: [c[u] for u in uids] for m, c in cols.items()}}).to_csv(
            d / f"{task}_rater{rater + 1}.tsv", sep="\t", index=False)
    res = CliRunner().invoke(cli, ["--workspace", str(workspace), "meta", "--run", "r", "--imagenhub", str(root),
                                   "--metrics", "sim,ap", "--format", "json"])
    assert res.exit_code == 0, res.output
    got = {(r["task"], r["model"], r["metric"]): r for r in json.loads(res.output)}
    pq = api.load_run("r", workspace=workspace).per_query
    humans = ih.human_scores(ih.read_imagenhub(root))
    for task in ("text-guided-ig", "control-guided-ig"):
        g = pq[pq["task"] == task].merge(humans.rename(columns={"model": "method"}), on=["task", "method", "uid"])
        assert len(g) == 8 and got[(task, ih.POOLED, "sim")]["n"] == 8
        assert got[(task, ih.POOLED, "sim")]["spearman"] == pytest.approx(spearmanr(g["sim"], g["human"]).statistic,
                                                                          abs=1e-12)
        for model, gm in g.groupby("method"):
            assert got[(task, model, "sim")]["n"] == 4
            want = spearmanr(gm["sim"], gm["human"]).statistic
            have = got[(task, model, "sim")]["spearman"]
            assert (have is None and np.isnan(want)) or have == pytest.approx(want, abs=1e-12)
    assert got[("(mean)", ih.POOLED, "sim")]["spearman"] == pytest.approx(
        (got[("text-guided-ig", ih.POOLED, "sim")]["spearman"]
         + got[("control-guided-ig", ih.POOLED, "sim")]["spearman"]) / 2)
    res = CliRunner().invoke(cli, ["--workspace", str(workspace), "meta", "--run", "r", "--imagenhub",
                                   str(tmp_path / "nope")])
    assert res.exit_code != 0 and "ImagenHub ratings folder not found" in res.output
    assert "Traceback" not in res.output
