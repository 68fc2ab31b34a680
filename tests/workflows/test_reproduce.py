"""``fpr reproduce`` on tiny CUB-200-2011 and WildlifeReID-10k folders in their real layouts (no Stanford Cars):
it prints every table those allow, names each skipped one with what is missing, and its numbers equal the same
steps run by hand (the official ablation for the oracle tables, single-encoder runs for the per-group tables)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from fpr.cli.main import cli
from fpr.errors import InputError
from fpr.workflows.ablate_official import ablate_official
from fpr.workflows.galleries import build_preset_gallery
from fpr.workflows.indices import build_index
from fpr.workflows.reproduce import git_commit, parse_encoders, parse_tables, reproduce
from fpr.workflows.runs import run_query
from tests.conftest import write_image
from tests.galleries.test_datasets import CUB_NAMES, make_cub
from tests.galleries.test_official_presets import make_wildlife_official

# stand-ins for CLIP, DINO, MiewID and BioCLIP (shipped or weight-free; the real ones need downloads)
STAND_INS = {"clip": "pixels-16", "dino": "fpr-world-v1", "miewid": "fpr-world-v3", "bioclip": "fpr-world-v2"}
ZEBRAS = [f"z{i:02d}" for i in range(1, 11)]  # the ten the official selection keeps (test_official_presets)
CUB_GROUPS = {"sparrow": range(113, 118), "tern": range(143, 148), "wren": range(193, 198)}


def _generated(root: Path) -> Path:
    """Two methods' generated images: one per zebra and per CUB species."""
    gen = root / "generated"
    wild = [(ident, "zebra") for ident in ZEBRAS]
    cub = [(CUB_NAMES[c], g) for g, cids in CUB_GROUPS.items() for c in cids]
    for name, rows in (("wildlife", wild), ("cub", cub)):
        out = []
        for m in ("m0", "m1"):
            for k, (ident, group) in enumerate(rows):
                p = write_image(gen / name / m / f"{k:02d}.png", seed=len(out) + (0 if m == "m0" else 500), size=16)
                out.append({"path": str(p), "identity": ident, "group": group, "method": m, "prompt": "a photo"})
        pd.DataFrame(out).to_csv(gen / f"{name}.csv", index=False)
    return gen


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    make_cub(root, per_class=20)  # root/CUB_200_2011
    wild = make_wildlife_official(root / "wildlifereid-10k")
    meta = pd.read_csv(wild / "metadata.csv")  # zebras only: a species needs two individuals to be a group
    meta[meta["species"] == "zebra"].to_csv(wild / "metadata.csv", index=False)
    _generated(root)
    return root


def _args(ws: Path, root: Path, out: Path, *extra: str) -> list[str]:
    enc = [a for role, e in STAND_INS.items() for a in ("--encoder", f"{role}={e}")]
    return ["--workspace", str(ws), "reproduce", "--data-root", str(root), "--out", str(out), *enc, *extra]


@pytest.mark.slow
def test_reproduce_runs_what_it_can_and_names_what_it_skips(data_root, tmp_path, monkeypatch):
    ws, out = tmp_path / "ws", tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["fpr", "reproduce"])  # the command line provenance records (not pytest's)
    # Table 14 (GrabCut on every image, per encoder) is too slow for all of them here: its own test below
    r = CliRunner().invoke(cli, _args(ws, data_root, out, "--tables", "1,2,5-13"))
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "tables.json").read_text())
    status = {t["table"]: t["status"] for t in doc["tables"]}
    assert status == {1: "done", 2: "done", 5: "skipped", 6: "skipped", 7: "done", 8: "skipped", 9: "skipped",
                      10: "done", 11: "done", 12: "done", 13: "skipped"}
    missing = {t["table"]: t["missing"] for t in doc["tables"]}
    assert "Stanford-Cars not found" in missing[13] and "Donghyun99/Stanford-Cars" in missing[13]
    assert "no queries of group 'leopard'" in missing[5]
    # one line per skipped table, after the tables that ran
    skipped_lines = [ln for ln in r.output.splitlines() if " skipped: " in ln]
    assert [ln.split(" skipped")[0] for ln in skipped_lines] == ["Table 5", "Table 6", "Table 8", "Table 9",
                                                                    "Table 13"]
    for n in (1, 2, 7, 10, 11, 12):
        assert f"Table {n}: " in r.output
    tex = (out / "tables.tex").read_text()
    assert tex.count("\\begin{table}") == 6 and "% Table 13 skipped" in tex
    # provenance: version, the command, the galleries' fingerprints, the encoders' checksums
    prov = doc["provenance"]
    assert prov["fpr_version"] and "reproduce" in prov["command"]
    assert set(prov["dataset_fingerprints"]) == {"cub-official", "wildlife-official", "wildlife-official-ablation"}
    assert set(prov["encoder_checksums"]) == set(STAND_INS.values())
    assert prov["git_commit"] == git_commit()

    # Table 1 = the official ablation's baseline over the whole gallery, run by hand, per dataset and encoder
    t1 = {(x["dataset"], x["encoder_id"]): x for x in next(t for t in doc["tables"] if t["table"] == 1)["records"]}
    assert set(t1) == {(d, STAND_INS[r]) for d, roles in (("wildlife", ("clip", "dino", "miewid")),
                                                         ("cub", ("clip", "dino", "bioclip"))) for r in roles}
    for (dataset, enc), row in [(("cub", "fpr-world-v2"), t1[("cub", "fpr-world-v2")]),
                                (("wildlife", "pixels-16"), t1[("wildlife", "pixels-16")])]:
        by_hand = ablate_official(f"{dataset}-official", enc, settings="10x100", selection=[], workspace=ws,
                                  store=False).rows
        star = by_hand[(by_hand["group"] == "*") & (by_hand["method"] == "*")].iloc[0]
        assert row["map"] == pytest.approx(star["baseline_map"]) and row["sim"] == pytest.approx(star["baseline_sim"])
        assert 0 < row["map"] <= 1
    # the CUB oracle has 15 species x 10 references as queries
    assert t1[("cub", "pixels-16")]["queries"] == 150

    # Table 7 (zebra) = single-encoder runs of the wildlife queries, their zebra rows
    t7 = next(t for t in doc["tables"] if t["table"] == 7)["records"]
    assert {x["group"] for x in t7} == {"zebra"}
    for enc in ("pixels-16", "fpr-world-v3"):
        idx = build_index("wildlife-official", enc, name=f"hand-{enc}", workspace=ws)
        res = run_query(idx.name, data_root / "generated" / "wildlife.csv", run=f"hand-{enc}", workspace=ws)
        for m in ("m0", "m1"):
            want = res.summary[(res.summary["group"] == "zebra") & (res.summary["method"] == m)].iloc[0]
            got = {x["metric"]: x["value"] for x in t7 if x["encoder"] == enc and x["method"] == m}
            assert got["map"] == pytest.approx(want["map"]) and got["sim"] == pytest.approx(want["sim"])


def test_table_2_equals_the_official_ablation_by_hand(data_root, tmp_path):
    ws = tmp_path / "ws"
    res = reproduce("2", data_root=data_root, encoders=STAND_INS, workspace=ws)
    rows = {r["sampling"]: r for r in res.tables[0].records}
    assert res.tables[0].status == "done" and list(rows) == ["random", "k-means", "official"]
    q = data_root / "generated" / "wildlife.csv"
    sel = ablate_official("wildlife-official-ablation", "fpr-world-v3", q, settings="10x100",
                          cluster_encoder="fpr-world-v3", workspace=ws, store=False).rows
    star = sel[(sel["variant"] == "kmeans-k10") & (sel["group"] == "*") & (sel["method"] == "*")].iloc[0]
    assert rows["k-means"]["generated_map"] == pytest.approx(star["generated_map"])
    assert rows["k-means"]["oracle_sim"] == pytest.approx(star["baseline_sim"])
    # generated mAP is the mean over the two methods' rows
    per_method = sel[(sel["variant"] == "random-k10") & (sel["group"] == "*") & sel["method"].isin(["m0", "m1"])]
    assert rows["random"]["generated_map"] == pytest.approx(np.mean(per_method["generated_map"]))


@pytest.mark.slow  # GrabCut on ~170 images, twice: about 340 s on 2 loaded cores
def test_table_14_removes_the_background(data_root, tmp_path):
    """Only the wildlife folder and only one encoder (the others' default weights are missing: a note each)."""
    root = tmp_path / "data"
    root.mkdir()
    (root / "wildlifereid-10k").symlink_to(data_root / "wildlifereid-10k")
    ws = tmp_path / "ws"
    res = reproduce("14", data_root=root, encoders={"clip": "pixels-16"}, workspace=ws)
    t = res.tables[0]
    assert t.status == "done" and [(r["dataset"], r["encoder_id"]) for r in t.records] == [("wildlife", "pixels-16")]
    assert any("fpr encoders fetch dinov2-vitb14" in n for n in t.notes) and any("cub:" in n for n in t.notes)
    removed = ablate_official("wildlife-official", "pixels-16", settings="10x100", selection=[], workspace=ws,
                              store=False, background="remove")
    kept = ablate_official("wildlife-official", "pixels-16", settings="10x100", selection=[], workspace=ws,
                           store=False)
    star = lambda df: df[(df["group"] == "*") & (df["method"] == "*")].iloc[0]  # noqa: E731
    assert t.records[0]["map"] == pytest.approx(star(removed.rows)["baseline_map"])
    assert removed.params["background"] == "remove:grabcut" and kept.params["background"] == "keep"
    assert star(removed.rows)["baseline_sim"] != pytest.approx(star(kept.rows)["baseline_sim"])


def test_missing_weights_and_bad_arguments_are_one_line(data_root, tmp_path):
    res = reproduce("2", data_root=data_root, workspace=tmp_path / "ws")  # default MiewID: no weights here
    assert res.tables[0].status == "skipped"
    assert res.tables[0].missing.startswith("weights of miewid-msv2 (MiewID) not found; get them: fpr encoders "
                                            "fetch miewid-msv2")
    cars = reproduce("13", data_root=data_root, queries_dir=data_root / "generated", workspace=tmp_path / "ws")
    assert "Stanford-Cars not found" in cars.tables[0].missing
    assert parse_tables("1,2,5-7") == [1, 2, 5, 6, 7] and parse_tables(None)[-1] == 14
    with pytest.raises(InputError, match="table 3 is not one fpr reproduces"):
        parse_tables("3")
    with pytest.raises(InputError, match="ROLE=ENCODER"):
        parse_encoders(["vit=foo"])
    assert parse_encoders(["cars=my-cars"])["cars"] == "my-cars"
    r = CliRunner().invoke(cli, ["--workspace", str(tmp_path / "ws"), "reproduce", "--tables", "4"])
    assert r.exit_code != 0 and "Traceback" not in r.output and "table 4 is not one" in r.output
