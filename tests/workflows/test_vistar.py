"""fpr vistar run end to end on images made here: rendered signs (TR) and lit box scenes (LI), a Core and a Hard
split, two models whose order flips between roles; fpr report --by role prints it again."""
import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

from fpr import api
from fpr.cli.main import cli
from tests.scorers.known_answers import known_answers
from tests.scorers.vistar.test_li import _direction
from tests.scorers.vistar.test_tr import _sign

PROMPTS = [  # prompt_id, split, prompt
    ("c-sign-1", "core", '[GD|TR] a cafe sign that reads "HARBOR LIGHTS" {text="HARBOR LIGHTS", font="Futura"}'),
    ("c-sign-2", "core", '[GD|TR] a shop sign {text="OPEN DAILY"}'),
    ("c-lit-1", "core", '[PD|LI] three boxes on a table {light="left"}'),
    ("c-lit-2", "core", '[PD|LI] three boxes in a yard {light="upper-right"}'),
    ("h-sign-1", "hard", '[GD|TR] a sign that does not say "CLOSED" {text="FRESH BREAD"}'),
    ("h-lit-1", "hard", '[PD|LI] boxes, not lit from the right {light="left"}'),
]
OPPOSITE = {"left": "right", "upper-right": "upper-left"}


def _make_generations(root, tmp_path):
    """'crisp' writes every sign right and lights every scene from the opposite side; 'moody' writes wrong
    text and lights the Core scenes right but the Hard one wrong (its robustness drop)."""
    ka = known_answers()
    for model in ("crisp", "moody"):
        (root / model).mkdir(parents=True)
        for k, (pid, split, prompt) in enumerate(PROMPTS):
            params = dict(p.split("=") for p in prompt[prompt.index("{") + 1:-1].replace('"', "").split(", "))
            out = root / model / f"{pid}.png"
            if "text" in params:
                _sign(out, params["text"] if model == "crisp" else "GOOD FOOD")
            else:
                asked = params["light"]
                right = model == "moody" and split == "core"
                light = asked if right else OPPOSITE[asked]
                Image.fromarray(ka.render_scene(_direction(light), 40 + k).rgb).save(out)
    p = tmp_path / "prompts.csv"
    pd.DataFrame(PROMPTS, columns=["prompt_id", "split", "prompt"]).to_csv(p, index=False)
    return p


@pytest.fixture(scope="module")
def vistar_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vistar")
    prompts = _make_generations(tmp / "gen", tmp)
    ws = tmp / "ws"
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "vistar", "run", "--generations", str(tmp / "gen"),
                                 "--prompts", str(prompts), "--run", "v1", "--format", "json"])
    assert r.exit_code == 0, r.output
    return tmp, ws, json.loads(r.output[r.output.index("{"):])


def test_aspects_splits_and_drop(vistar_run):
    _, ws, out = vistar_run
    asp = {(a["model"], a["aspect"]): a["score"] for a in out["aspects"]}
    assert asp[("crisp", "TR")] >= 0.95 and asp[("moody", "TR")] < 0.3
    assert asp[("moody", "LI")] > 0.8 and asp[("crisp", "LI")] < 0.3
    sp = {s["model"]: s for s in out["splits"]}
    # by the definition, from the stored per-aspect means: Core and Hard over TR and LI, drop = (C - H) / C
    tensor = api.sql("SELECT model, split, aspect, avg(score) AS s FROM vistar_tensor GROUP BY ALL", workspace=ws)
    m = {(r.model, r.split, r.aspect): r.s for r in tensor.itertuples()}
    for g in ("crisp", "moody"):
        core = (m[(g, "core", "TR")] + m[(g, "core", "LI")]) / 2
        hard = (m[(g, "hard", "TR")] + m[(g, "hard", "LI")]) / 2
        assert sp[g]["core"] == pytest.approx(core) and sp[g]["hard"] == pytest.approx(hard)
        assert sp[g]["drop"] == pytest.approx((core - hard) / core) and sp[g]["n_aspects"] == 2
    # moody loses its lighting on Hard (drop ~0.95); crisp's Hard sign reads as well as its Core ones and its
    # light is wrong on both splits, so it loses only the partial LI credit of one Core scene
    assert sp["moody"]["drop"] > 0.5 and 0 <= sp["crisp"]["drop"] < 0.25


def test_roles_reorder_the_models(vistar_run):
    _, _, out = vistar_run
    roles = {(r["role"], r["model"]): r for r in out["roles"]}
    # GD's relevant aspects include TR (not LI): crisp first; PD's include LI (not TR): moody first
    assert roles[("GD", "crisp")]["rank_measured"] == 1 and roles[("GD", "moody")]["rank_measured"] == 2
    assert roles[("PD", "moody")]["rank_measured"] == 1 and roles[("PD", "crisp")]["rank_measured"] == 2
    assert roles[("GD", "crisp")]["n_measured"] == 1 and roles[("GD", "crisp")]["n_relevant"] == 4
    # the paper's role score needs every relevant aspect: not computable here, NaN (null), never a guess
    assert roles[("GD", "crisp")]["role_score"] is None and roles[("GD", "crisp")]["rank"] is None
    assert len(out["roles"]) == 7 * 2


def test_tensor_view_and_report_by_role(vistar_run):
    _, ws, out = vistar_run
    t = api.sql("SELECT role, aspect, model, prompt_id, split, score FROM vistar_tensor ORDER BY ALL", workspace=ws)
    assert len(t) == 2 * len(PROMPTS) and t["score"].notna().all()
    assert set(zip(t["role"], t["aspect"])) == {("GD", "TR"), ("PD", "LI")}
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "report", "--run", "v1", "--by", "role"])
    assert r.exit_code == 0, r.output
    assert "role scores" in r.output and "Core / Hard" in r.output and "Graphic Designer" in r.output
    again = CliRunner().invoke(cli, ["--workspace", str(ws), "report", "--run", "v1", "--by", "role",
                                     "--format", "json"])
    assert json.loads(again.output)["roles"] == out["roles"]


def test_a_users_mask_changes_the_role_ranking(vistar_run, tmp_path):
    _, ws, _ = vistar_run
    aspects = ["TR", "LI", "CSE", "CPA", "PSC", "GC", "SF", "CUL", "MA"]
    rows = [("GD", a, int(a in ("TR", "LI"))) for a in aspects] + [("PD", a, int(a == "LI")) for a in aspects]
    pd.DataFrame(rows, columns=["role", "aspect", "relevant"]).to_csv(tmp_path / "mask.csv", index=False)
    rep = api.role_report("v1", workspace=ws, relevance=tmp_path / "mask.csv")
    gd = rep.roles[rep.roles["role"] == "GD"].set_index("model")
    assert (gd["n_measured"] == 2).all() and gd["role_score"].notna().all()  # every relevant aspect measured
    assert list(rep.roles["role"].unique()) == ["GD", "PD"]


@pytest.mark.parametrize("prompt,message", [
    ('[GD|TR] a sign {text "A"}', "prompts.csv row 3, column 22: expected '=' after key 'text'"),
    ('[GD|LI] a lamp {light="left"}', "prompts.csv row 3: the relevance mask marks [GD|LI] irrelevant"),
    ('[ZZ|TR] a sign {text="A"}', "prompts.csv row 3: unknown role 'ZZ'"),
    ('[GD|XX] a sign {text="A"}', "prompts.csv row 3: unknown aspect 'XX'"),
    ('[SA|CPA] two people {posture="flying"}', "prompts.csv row 3: unknown posture 'flying'"),
    ('[SA|CPA] two people {expression="smiley"}', "prompts.csv row 3: unknown expression 'smiley'"),
    ('[PD|LI] boxes {light="sideways"}', "prompts.csv row 3: light_direction 'sideways' is not a known direction"),
    ('[SA|CPA] people {count="two"}', "prompts.csv row 3: count must be a whole number >= 0, not 'two'"),
])
def test_bad_prompts_are_one_line(tmp_path, prompt, message):
    (tmp_path / "gen" / "m").mkdir(parents=True)
    rows = [("a", "core", '[GD|TR] a sign {text="A"}'), ("b", "core", prompt)]
    pd.DataFrame(rows, columns=["prompt_id", "split", "prompt"]).to_csv(tmp_path / "prompts.csv", index=False)
    r = CliRunner().invoke(cli, ["--workspace", str(tmp_path / "ws"), "vistar", "run", "--generations",
                                 str(tmp_path / "gen"), "--prompts", str(tmp_path / "prompts.csv"), "--run", "x"])
    assert r.exit_code != 0 and "Traceback" not in r.output
    err = [ln for ln in r.output.splitlines() if ln.startswith("fpr: error")]
    assert len(err) == 1 and message in err[0], r.output


def test_missing_image_and_no_routing_are_one_line(tmp_path, vistar_run):
    (tmp_path / "gen" / "m").mkdir(parents=True)
    pd.DataFrame([("a", "core", '[GD|TR] a sign {text="A"}')],
                 columns=["prompt_id", "split", "prompt"]).to_csv(tmp_path / "p.csv", index=False)
    r = CliRunner().invoke(cli, ["--workspace", str(tmp_path / "ws"), "vistar", "run", "--generations",
                                 str(tmp_path / "gen"), "--prompts", str(tmp_path / "p.csv"), "--run", "x"])
    assert r.exit_code != 0 and "model 'm' has no image for prompt(s) a" in r.output and "Traceback" not in r.output
    _, ws, _ = vistar_run
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "report", "--run", "nope", "--by", "role"])
    assert r.exit_code != 0 and "have no VISTAR routing" in r.output


def test_plain_report_of_a_vistar_run_points_at_by_role(vistar_run):
    _, ws, _ = vistar_run
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "report", "--run", "v1"])
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert "is a VISTAR run" in r.output and "fpr report --run v1 --by role" in r.output
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "report", "--run", "v1", "--relevance", "m.csv"])
    assert r.exit_code != 0 and "--relevance applies to --by role only" in r.output


def test_an_existing_run_is_refused_before_scoring(vistar_run):
    tmp, ws, _ = vistar_run
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "vistar", "run", "--generations", str(tmp / "gen"),
                                 "--prompts", str(tmp / "prompts.csv"), "--run", "v1"])
    assert r.exit_code != 0 and "run 'v1' already exists" in r.output and "vistar-tr on" not in r.output


def test_cpa_and_psc_prompts_reach_their_scorers_with_the_prompts_parameters(tmp_path):
    """[SA|CPA] and [SA|PSC] prompts are scored by vistar-cpa and vistar-psc (tiny random models in the real
    layouts), each given its own options, the CPA prompt's count/posture/expression as expected values."""
    from tests.scorers.tiny_models import write_cpa_models, write_psc_models

    cpa, psc = write_cpa_models(tmp_path / "cpa"), write_psc_models(tmp_path / "psc")
    rows = [("p1", "core", '[SA|CPA] two friends {count="2", posture="seated", expression="smiling"}'),
            ("p2", "core", "[SA|PSC] a cat asleep on a sofa")]
    pd.DataFrame(rows, columns=["prompt_id", "split", "prompt"]).to_csv(tmp_path / "prompts.csv", index=False)
    (tmp_path / "gen" / "m").mkdir(parents=True)
    for k, (pid, _, _) in enumerate(rows):
        arr = np.random.default_rng(k).integers(0, 256, (60, 90, 3), dtype=np.uint8)
        Image.fromarray(arr).save(tmp_path / "gen" / "m" / f"{pid}.png")
    opts = {"vistar-cpa.detector": cpa / "det", "vistar-cpa.pose_model": cpa / "pose",
            "vistar-cpa.expression_model": cpa / "expr", "vistar-cpa.min_confidence": 0,
            "vistar-psc.segmenter": psc / "seg", "vistar-psc.depth_model": psc / "depth"}
    args = [a for k, v in opts.items() for a in ("--scorer-option", f"{k}={v}")]
    ws = tmp_path / "ws"
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "vistar", "run", "--generations", str(tmp_path / "gen"),
                                 "--prompts", str(tmp_path / "prompts.csv"), "--run", "v", *args])
    assert r.exit_code == 0, r.output
    aux = api.sql("SELECT query_id, scorer, metric, value, note FROM aux_scores WHERE run_id = 'v'", workspace=ws)
    assert set(aux.loc[aux["query_id"] == "m/p1", "scorer"]) == {"vistar-cpa"}
    assert set(aux.loc[aux["query_id"] == "m/p2", "scorer"]) == {"vistar-psc"}
    note = aux[(aux["query_id"] == "m/p1") & (aux["metric"] == "score")]["note"].iloc[0]
    assert json.loads(note)["expected"] == {"count": 2, "posture": "sitting", "expression": "happy"}
    t = api.sql("SELECT aspect, score FROM vistar_tensor ORDER BY aspect", workspace=ws)
    assert t["aspect"].tolist() == ["CPA", "PSC"] and t["score"].between(0, 1).all()


def test_a_scorer_whose_model_is_missing_gives_nan_with_its_reason_and_the_rest_is_stored(tmp_path):
    """#33: CSE needs CLIP, which cannot be downloaded offline (the tests' weights folder is empty): the run used to
    abort after the other scorers ran and store nothing. Now CSE's images are NaN with the reason, TR and LI are
    scored, the run is stored and one warning names the scorer."""
    rows = [*PROMPTS[:3], ("c-cse-1", "core", '[SA|CSE] four panels of a fox {panels="2x2", sub_prompts="a fox; a den"}')]
    gen = tmp_path / "gen"
    for model in ("crisp",):
        (gen / model).mkdir(parents=True)
        _sign(gen / model / "c-sign-1.png", "HARBOR LIGHTS")
        _sign(gen / model / "c-sign-2.png", "OPEN DAILY")
        Image.fromarray(known_answers().render_scene(_direction("right"), 40).rgb).save(gen / model / "c-lit-1.png")
        Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(
            gen / model / "c-cse-1.png")
    pd.DataFrame(rows, columns=["prompt_id", "split", "prompt"]).to_csv(tmp_path / "prompts.csv", index=False)
    ws = tmp_path / "ws"
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "vistar", "run", "--generations", str(gen),
                                 "--prompts", str(tmp_path / "prompts.csv"), "--run", "v", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert r.output.count("fpr: warning: vistar: vistar-cse could not run (weights for encoder 'clip-vit-b-32' are "
                          "missing") == 1
    aux = api.sql("SELECT query_id, scorer, metric, value, note FROM aux_scores WHERE run_id = 'v'", workspace=ws)
    cse = aux[aux["scorer"] == "vistar-cse"]
    assert len(cse) == 6 and cse["value"].isna().all() and set(cse["query_id"]) == {"crisp/c-cse-1"}
    assert cse["note"].str.startswith("model missing: weights for encoder 'clip-vit-b-32' are missing").all()
    assert "fpr encoders fetch clip-vit-b-32" in cse["note"].iloc[0]
    tr = aux[(aux["scorer"] == "vistar-tr") & (aux["metric"] == "score_robust")].set_index("query_id")["value"]
    assert tr.to_dict() == {"crisp/c-sign-1": 1.0, "crisp/c-sign-2": 1.0}
    li = aux[(aux["scorer"] == "vistar-li") & (aux["metric"] == "score")]
    assert len(li) == 1 and li["value"].notna().all()
    prov = json.loads(api.sql("SELECT provenance FROM runs WHERE run_id = 'v'", workspace=ws)["provenance"].iloc[0])
    assert prov["scorers"]["vistar-cse"]["not_scored"] == cse["note"].iloc[0]
    t = api.sql("SELECT aspect, score FROM vistar_tensor WHERE run_id = 'v' ORDER BY aspect", workspace=ws)
    assert t["aspect"].tolist() == ["CSE", "LI", "TR", "TR"] and np.isnan(t["score"].iloc[0])


def test_gc_is_fitted_on_the_prompts_reference_images_and_the_nans_are_counted_by_reason(tmp_path):
    """#33: GC's PaDiM cue needs real images of the subject; the prompts file's reference_paths (relative to
    it) reach vistar-gc, so the six-cue score is a value where references are given and NaN with the reason
    where not; the printed report and its JSON count the NaNs per scorer by reason."""
    from tests.scorers.tiny_models import write_psc_models

    depth = write_psc_models(tmp_path / "models") / "depth"
    refs = tmp_path / "refs"
    refs.mkdir()
    rng = np.random.default_rng(5)
    for k in range(4):
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(refs / f"r{k}.png")
    rows = [("g1", "core", "[AR|GC] a chair in a hall", "refs/r0.png; refs/r1.png;refs/r2.png;refs/r3.png"),
            ("g2", "core", "[AR|GC] a table in a hall", "")]
    pd.DataFrame(rows, columns=["prompt_id", "split", "prompt", "reference_paths"]).to_csv(
        tmp_path / "prompts.csv", index=False)
    (tmp_path / "gen" / "m").mkdir(parents=True)
    for pid in ("g1", "g2"):
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(tmp_path / "gen" / "m" / f"{pid}.png")
    ws = tmp_path / "ws"
    args = ["--workspace", str(ws), "vistar", "run", "--generations", str(tmp_path / "gen"),
            "--prompts", str(tmp_path / "prompts.csv"), "--scorer-option", f"vistar-gc.depth_model={depth}",
            "--scorer-option", "vistar-gc.padim_encoder=pixels-16"]
    r = CliRunner().invoke(cli, [*args, "--run", "v"])
    assert r.exit_code == 0, r.output
    aux = api.sql("SELECT query_id, metric, value, note FROM aux_scores WHERE run_id = 'v' AND scorer = 'vistar-gc'",
                  workspace=ws)
    got = {(q, m): (v, n) for q, m, v, n in aux.itertuples(index=False)}
    assert np.isfinite(got[("m/g1", "padim")][0]) and np.isfinite(got[("m/g1", "score")][0])
    assert np.isnan(got[("m/g2", "padim")][0]) and got[("m/g2", "padim")][1] == "no reference images to fit PaDiM on"
    assert np.isnan(got[("m/g2", "score")][0]) and json.loads(got[("m/g2", "score")][1])["missing"] == {
        "padim": "no reference images to fit PaDiM on"}
    stored = api.sql("SELECT query_id, reference_paths FROM query_results WHERE run_id = 'v' ORDER BY query_id",
                     workspace=ws)
    assert [len(p.split(";")) if p else 0 for p in stored["reference_paths"]] == [4, 0]
    assert "missing values (NaN, by reason; each in its note):\nvistar-gc: 1 of 2 NaN (1 missing padim)" in r.output
    j = CliRunner().invoke(cli, [*args, "--run", "w", "--format", "json"])
    assert json.loads(j.output[j.output.index("{"):])["nan_reasons"] == [
        {"scorer": "vistar-gc", "metric": "score", "n": 2, "n_nan": 1, "reasons": {"missing padim": 1}}]


def test_a_missing_reference_image_is_one_line_before_scoring(tmp_path):
    pd.DataFrame([("g1", "core", "[AR|GC] a chair", "nowhere.png")],
                 columns=["prompt_id", "split", "prompt", "reference_paths"]).to_csv(tmp_path / "p.csv", index=False)
    (tmp_path / "gen" / "m").mkdir(parents=True)
    Image.new("RGB", (32, 32)).save(tmp_path / "gen" / "m" / "g1.png")
    r = CliRunner().invoke(cli, ["--workspace", str(tmp_path / "ws"), "vistar", "run", "--generations",
                                 str(tmp_path / "gen"), "--prompts", str(tmp_path / "p.csv"), "--run", "v"])
    assert r.exit_code != 0 and "image file not found" in r.output and "nowhere.png" in r.output
    assert "vistar-gc on" not in r.output and len(r.output.strip().splitlines()) == 1
