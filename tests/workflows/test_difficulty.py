"""A gallery's difficulty (issue #32 item 2): the oracle's mAP and AP = 1 share equal an oracle run's, printed
by ``fpr index build`` and by nearest-impostor curation."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from fpr import api
from fpr.cli.main import cli
from fpr.galleries.world import World, WorldConfig
from fpr.workflows.difficulty import SATURATED_AP_ONE, Difficulty

ENC = "fpr-world-v3"


@pytest.fixture(scope="module")
def lookalike_gallery(tmp_path_factory):
    """A small world of look-alike pairs (hard enough that the oracle is not all ones), imported and indexed."""
    root = tmp_path_factory.mktemp("difficulty")
    ws = root / "ws"
    build = World(WorldConfig(seed=5, identities=6, gallery=4, references=2, queries=1, methods=("new-scene@0",),
                              lookalikes=0.9)).write(root / "world")
    api.import_gallery("la", build.records, workspace=ws, source="world")
    api.build_index("la", ENC, workspace=ws, device="cpu")
    return ws, build


def test_difficulty_equals_an_oracle_runs_rows(lookalike_gallery):
    ws, build = lookalike_gallery
    d = api.gallery_difficulty(f"la-{ENC}", workspace=ws, device="cpu")
    run = api.run_query(f"la-{ENC}", pd.DataFrame(build.queries), workspace=ws, device="cpu", oracle=True)
    oracle = run.per_query[run.per_query["method"] == "oracle"]
    assert d.n_queries == len(oracle) == 3 * 6 * 2
    assert d.oracle_map == pytest.approx(float(oracle["ap"].mean()), abs=1e-12)
    assert d.ap_one_share == pytest.approx(float((oracle["ap"] == 1.0).mean()), abs=1e-12)
    assert d.oracle_map < 1.0 and d.ap_one_share < 1.0  # look-alike pairs: the oracle confuses some


def test_difficulty_line_says_whether_the_gallery_can_rank_near_the_top():
    easy = Difficulty("i", "g", ENC, 90, 0.996, 0.9)
    hard = Difficulty("i", "g", ENC, 90, 0.80, 0.1)
    assert easy.saturated and not hard.saturated and SATURATED_AP_ONE == 0.5
    assert easy.line() == ("gallery difficulty (fpr-world-v3): oracle mAP 0.996, AP = 1 for 90% of 90 oracle queries "
                           "(the paper's MiewID: mAP 0.803) -- too easy to rank methods near the top (they tie at "
                           "AP = 1): use more identities per group or nearest impostors (fpr gallery curate "
                           "--impostors K --impostor-encoder E)")
    assert hard.line().endswith("AP = 1 for 10% of 90 oracle queries (the paper's MiewID: mAP 0.803) -- hard enough "
                                "to rank methods near the top")


def test_index_build_prints_the_difficulty(lookalike_gallery):
    ws, _ = lookalike_gallery
    d = api.gallery_difficulty(f"la-{ENC}", workspace=ws, device="cpu")
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "index", "build", "--gallery", "la", "--encoder", ENC,
                                 "--name", "la2", "--device", "cpu", "--format", "json"], obj={})
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)["difficulty"]
    assert (got["oracle_map"], got["ap_one_share"], got["n_queries"]) == (d.oracle_map, d.ap_one_share, d.n_queries)
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "index", "build", "--gallery", "la", "--encoder", ENC,
                                 "--name", "la2", "--device", "cpu", "--overwrite"], obj={})
    printed = r.output[r.output.index("gallery difficulty"):]  # wrapped at the table width: one line unwrapped
    assert r.exit_code == 0 and " ".join(printed.split()) == d.line(), r.output


def test_curate_by_nearest_impostors_keeps_each_identitys_look_alike(lookalike_gallery):
    """Of interest: one identity per species; its nearest impostor under the specialist is its look-alike."""
    ws, build = lookalike_gallery
    world = World(WorldConfig(**{k: v for k, v in build.config.items() if k in WorldConfig.__dataclass_fields__}))
    interest = {sp: world.ids[sp][0] for sp in world.ids}
    table = ws.parent / "interest.csv"
    pd.DataFrame([{"identity": f"{sp}-{i:07d}", "group": sp} for sp, i in interest.items()]).to_csv(table, index=False)
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "gallery", "curate", "--from", "la", "--name", "la-imp",
                                 "--impostors", "1", "--impostor-encoder", ENC, "--of-interest", str(table),
                                 "--format", "json"], obj={})
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["n_identities"] == 6 and out["spec"]["impostors"] == 1
    kept = {(it.group, it.identity) for it in api.gallery_items("la-imp", workspace=ws)}
    expected = {(sp, f"{sp}-{m:07d}") for sp, i in interest.items() for m in world.family_members(sp, i)}
    assert kept == expected
    assert out["difficulty"]["index"] == f"la-imp-{ENC}" and 0 < out["difficulty"]["oracle_map"] <= 1


def test_impostor_options_need_each_other(tmp_path):
    r = CliRunner().invoke(cli, ["--workspace", str(tmp_path), "gallery", "curate", "--from", "x", "--name", "y",
                                 "--impostors", "2"], obj={})
    assert r.exit_code == 2 and "--impostors needs --impostor-encoder" in r.output
