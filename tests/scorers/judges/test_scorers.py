"""The judge scorers against the loopback server: values from the server's deterministic judge,
multiple choice over the gallery, VIEScore's formula, the CIGEval trajectory with real tools,
HWPQ on a hand-computed questionnaire (and its validation and regeneration)."""
from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from fpr.errors import InputError
from fpr.scorers import QueryBatch, all_scorers, run_scorers
from fpr.scorers.dreambench.concept import GalleryIdentities, shuffled
from fpr.scorers.vistar.hwpq import hwpq_score, validate_questionnaire
from fpr.scorers.judges.tools import OWLV2_ID, Owlv2Detector, difference
from tests.scorers.judges.conftest import flat_image, make_batch, metric
from tests.scorers.judges.server import API_KEY, QUESTIONNAIRE, Fault, JudgeServer

# --------------------------------------------------------------------------- DreamBench++


def test_dreambench_concept_pair_scores_are_n_over_4(tmp_path, judge_env):
    # the test judge: 4 - floor(mean |query - reference| / 16), clipped to 0..4
    batch = make_batch(tmp_path, [None] * 4, [100, 100, 100, 100], [100, 180, 130, None])
    df = run_scorers(["dreambench-concept"], batch)
    assert [metric(df, f"q{i}", "score")[0] for i in range(3)] == [1.0, 0.0, 0.75]
    value, note = metric(df, "q3", "score")
    assert math.isnan(value) and note == "no reference image for this query"
    assert [metric(df, f"q{i}", "missing")[0] for i in range(4)] == [0, 0, 0, 1]
    assert judge_env.count() == 3
    body = judge_env.requests[0]
    assert [p["type"] for p in body["messages"][1]["content"]] == ["text", "image_url", "image_url"]


def _choice_batch(tmp_path, options) -> QueryBatch:
    g = [("a", 50, [1, 0, 0]), ("a", 60, [0.9, 0.1, 0]), ("b", 120, [0, 1, 0]), ("b", 130, [0, 0.9, 0.1]),
         ("c", 200, [0, 0, 1]), ("c", 210, [0.1, 0, 0.9]), ("x", 52, [1, 0, 0])]
    paths = [flat_image(tmp_path / "g" / f"{k}.png", v) for k, (_, v, _) in enumerate(g)]
    queries = [("a", 52, [1, 0, 0]), ("c", 205, [0.8, 0.6, 0]), ("b", 125, [0.6, 0.8, 0])]
    qpaths = [flat_image(tmp_path / "q" / f"{k}.png", v) for k, (_, v, _) in enumerate(queries)]
    return QueryBatch(["q0", "q1", "q2"], qpaths, [q[0] for q in queries], ["g"] * 3, [None] * 3, [[], [], []],
                      query_vectors=np.array([q[2] for q in queries], dtype=np.float32), options=options,
                      workspace=tmp_path / "ws", gallery_paths=paths, gallery_identities=[x[0] for x in g],
                      gallery_groups=["g"] * 6 + ["other"],
                      gallery_scores=lambda q: q @ np.array([x[2] for x in g], dtype=np.float32).T)


def test_dreambench_concept_multiple_choice_over_the_nearest_gallery_identities(tmp_path, judge_env):
    batch = _choice_batch(tmp_path, {"dreambench-concept.mode": "choice", "dreambench-concept.k": "2"})
    df = run_scorers(["dreambench-concept"], batch)
    got = {q: [metric(df, q, m)[0] for m in ("choice_correct", "choice_in_options", "retrieval_correct")]
           for q in ("q0", "q1", "q2")}
    # q0: options a, b (ties broken by name); the judge picks a. q1 (identity c) is nearest to a then b: c is
    # not offered, the judge picks b (130 is nearest to 205). q2: options b, a; the judge picks b.
    assert got == {"q0": [1, 1, 1], "q1": [0, 0, 0], "q2": [1, 1, 1]}
    assert metric(df, "q1", "choice_correct")[1] == "picked b"
    assert "score" not in set(df["metric"])
    # each request: the query then, per option, "Candidate X:" and the identity's gallery image nearest the query
    body = next(b for b in judge_env.requests if "Candidate" in json.dumps(b))
    parts = body["messages"][1]["content"]
    assert [p.get("text", p["type"]) for p in parts[1:]] == ["image_url", "Candidate A:", "image_url",
                                                             "Candidate B:", "image_url"]
    assert "in the order A, B" in parts[0]["text"]
    # the letters follow a seeded shuffle, not the similarity order
    assert shuffled([1, 2, 3, 4, 5], 0, "q0") == shuffled([1, 2, 3, 4, 5], 0, "q0")
    assert sorted(shuffled(list(range(8)), 0, "q0")) == list(range(8))

    both = run_scorers(["dreambench-concept"], _choice_batch(
        tmp_path / "b", {"dreambench-concept.mode": "both", "dreambench-concept.k": "2"}))
    assert {"score", "choice_correct"} <= set(both["metric"])
    with pytest.raises(InputError, match="needs the run's query vectors and its gallery"):
        run_scorers(["dreambench-concept"], make_batch(tmp_path / "c", [None], [1], [1],
                                                       options={"dreambench-concept.mode": "choice"}))


@pytest.mark.parametrize("scope", ["group", "all"])
def test_nearest_gallery_identities_match_a_brute_force_search(scope):
    rng = np.random.default_rng(3)
    n = 60
    ids = [f"id{int(v)}" for v in rng.integers(0, 9, n)]
    groups = [("g1", "g2")[int(v)] for v in rng.integers(0, 2, n)]
    vecs = rng.normal(size=(n, 5))
    batch = QueryBatch([], [], [], [], [], [], gallery_paths=[f"p{j}" for j in range(n)], gallery_identities=ids,
                       gallery_groups=groups)
    gallery = GalleryIdentities(batch, scope)
    for t in range(5):
        q = rng.normal(size=5)
        best: dict = {}
        for j in range(n):
            if scope == "group" and groups[j] != "g1":
                continue
            key = ids[j] if scope == "group" else f"{groups[j]}/{ids[j]}"
            sim = float(vecs[j] @ q)
            if key not in best or sim > best[key][0]:
                best[key] = (sim, f"p{j}")
        expected = [(key, p, pytest.approx(sim)) for key, (sim, p) in
                    sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0]))[:4]]
        assert gallery.nearest(vecs @ q, "g1", 4) == expected


def test_dreambench_prompt_skips_queries_without_prompt(tmp_path, judge_env):
    df = run_scorers(["dreambench-prompt"], make_batch(tmp_path, ["a dog", None], [1, 2], [None, None]))
    assert set(df["query_id"]) == {"q0"} and metric(df, "q0", "score")[0] == 0.75


# --------------------------------------------------------------------------- VIEScore


def test_viescore_overall_is_sqrt_sc_times_pq(tmp_path, judge_env):
    batch = make_batch(tmp_path, ["a dog", None, "a dog FAULT-X"], [10, 20, 30], [10, 20, 30])
    judge_env.faults["FAULT-X"] = Fault(content="Great.\nScore: 7")
    df = run_scorers(["viescore"], batch)
    # the test judge: SC sub-scores [7, 8], PQ sub-scores [9, 6]
    assert [metric(df, "q0", m)[0] for m in ("sc_prompt", "sc_subject", "sc", "pq_naturalness", "pq_artifacts",
                                             "pq")] == [7, 8, 7, 9, 6, 6]
    assert metric(df, "q0", "overall")[0] == pytest.approx(math.sqrt(42))
    value, note = metric(df, "q1", "sc")
    assert math.isnan(value) and note == "no prompt" and metric(df, "q1", "pq")[0] == 6
    assert math.isnan(metric(df, "q1", "overall")[0]) and metric(df, "q1", "overall")[1].startswith("needs both")
    value, note = metric(df, "q2", "sc")
    assert math.isnan(value) and note.startswith("unparsable reply: no JSON object")
    assert metric(df, "q2", "pq")[0] == 6
    assert judge_env.count() == 5


# --------------------------------------------------------------------------- CIGEval


def test_cigeval_agent_with_highlight_difference_and_scene_graph(tmp_path, judge_env):
    opts = {"cigeval.tools": "highlight,difference,scene_graph"}
    ref = np.full((32, 32, 3), 100, dtype=np.uint8)
    gen = ref.copy()
    gen[8:16, 4:12] = 250
    from PIL import Image

    (tmp_path / "q").mkdir()
    (tmp_path / "r").mkdir()
    Image.fromarray(gen).save(tmp_path / "q" / "g.png")
    Image.fromarray(ref).save(tmp_path / "r" / "r.png")
    batch = QueryBatch(["q0", "q1"], [str(tmp_path / "q" / "g.png"), str(tmp_path / "r" / "r.png")], ["i", "i"],
                       ["g", "g"], ["a striped animal"] * 2, [[str(tmp_path / "r" / "r.png")], []], options=opts,
                       workspace=tmp_path / "ws")
    df = run_scorers(["cigeval"], batch)
    # the test judge scores prompt following 7 and subject consistency 5 after one round of tool calls
    assert [metric(df, "q0", m)[0] for m in ("prompt_following", "subject_consistency", "score")] == [7, 5, 5]
    assert metric(df, "q1", "prompt_following")[0] == 7 and metric(df, "q1", "score")[0] == 7
    assert "subject_consistency" not in set(df[df.query_id == "q1"]["metric"])  # no reference: not asked
    n_tools, note = metric(df, "q0", "trajectory")
    traj = json.loads(note)
    calls = [c for e in traj for c in e.get("tool_calls", [])]
    assert n_tools == len(calls) == 4
    assert [c["tool"] for c in calls] == ["highlight", "scene_graph", "highlight", "difference"]
    assert calls[0]["result"] == {"image": "highlight-1"}
    # CIGEval's Difference on the 8x8 patch (rows 8-15, cols 4-11, +150): the 5x5 binomial blur carries
    # 150 * 5/16 = 46.9 > 45 one pixel beyond the patch's middle rows/columns only, the 3x3 dilation adds one:
    # rows 6-17, cols 2-13
    assert calls[3]["result"] == {"regions": difference(gen, ref)} == {
        "regions": [{"box": [2 / 32, 6 / 32, 14 / 32, 18 / 32], "area": round(144 / 1024, 4)}]}
    assert json.loads(calls[1]["result"]["scene_graph"])["objects"][0]["name"] == "animal"
    assert [e.get("score") for e in traj if "score" in e] == [7, 5]
    # the highlighted image was shown to the judge after the tool results (+ 1 scene-graph request per query)
    second = [b for b in judge_env.requests if any(m["role"] == "tool" for m in b["messages"])]
    assert second and all(b["messages"][-1]["role"] == "user" for b in second)
    assert judge_env.count() == 2 * 2 + 2 + 2  # q0: 2 questions x 2 turns + scene graph; q1: 2 turns + scene graph
    assert metric(df, "q0", "calls")[0] == 5

    judge_env.reset()
    again = run_scorers(["cigeval"], batch)
    assert judge_env.count() == 0 and metric(again, "q0", "cached")[0] == 5
    assert metric(again, "q0", "trajectory")[1].replace('"cached": true', '"cached": false') == note

    judge_env.reset()
    short = run_scorers(["cigeval"], QueryBatch(["q0"], batch.paths[:1], ["i"], ["g"], ["a dog"], [[]],
                                                options={**opts, "cigeval.max_steps": "1"},
                                                workspace=tmp_path / "ws"))
    value, note = metric(short, "q0", "score")
    assert math.isnan(value) and note == "prompt_following: no final score after 1 judge turns"


def test_cigeval_grounding_calls_the_detector(tmp_path, judge_env, tiny_owlv2, monkeypatch):
    monkeypatch.setenv("FPR_WEIGHTS_DIR", str(tmp_path / "weights"))
    shutil.copytree(tiny_owlv2, tmp_path / "weights" / OWLV2_ID)
    batch = make_batch(tmp_path, ["a dog"], [90], [None], options={"cigeval.tools": "grounding",
                                                                  "cigeval.detector_model": "owlv2",
                                                                  "cigeval.detector_threshold": "0"})
    df = run_scorers(["cigeval"], batch)
    calls = [c for e in json.loads(metric(df, "q0", "trajectory")[1]) for c in e.get("tool_calls", [])]
    assert [c["tool"] for c in calls] == ["grounding"]
    from PIL import Image

    expected = Owlv2Detector().detect(Image.open(batch.paths[0]).convert("RGB"), "an animal", threshold=0.0)
    assert calls[0]["result"] == {"boxes": expected} and expected
    monkeypatch.setenv("FPR_WEIGHTS_DIR", str(tmp_path / "empty"))
    with pytest.raises(Exception, match="weights for the grounding detector"):
        run_scorers(["cigeval"], batch)


def test_cigeval_grounding_defaults_to_grounding_dino(tmp_path, judge_env, tiny_grounding_dino, monkeypatch):
    from PIL import Image

    from fpr.scorers.judges.tools import GDINO_ID, GroundingDinoDetector

    monkeypatch.setenv("FPR_WEIGHTS_DIR", str(tmp_path / "weights"))
    shutil.copytree(tiny_grounding_dino, tmp_path / "weights" / GDINO_ID)
    batch = make_batch(tmp_path, ["a dog"], [90], [None], options={"cigeval.tools": "grounding",
                                                                  "cigeval.detector_threshold": "0"})
    df = run_scorers(["cigeval"], batch)
    calls = [c for e in json.loads(metric(df, "q0", "trajectory")[1]) for c in e.get("tool_calls", [])]
    expected = GroundingDinoDetector().detect(Image.open(batch.paths[0]).convert("RGB"), "an animal", threshold=0.0)
    assert [c["tool"] for c in calls] == ["grounding"] and calls[0]["result"] == {"boxes": expected} and expected
    with pytest.raises(InputError, match="unknown grounding detector 'yolo'"):
        run_scorers(["cigeval"], make_batch(tmp_path, ["a dog"], [90], [None], options={
            "cigeval.tools": "grounding", "cigeval.detector_model": "yolo"}))


# --------------------------------------------------------------------------- HWPQ


def test_hwpq_formula_on_a_hand_computed_questionnaire():
    q = {"levels": [
        {"level": "L1", "weight": 0.5, "questions": [{"weight": 0.6, "positive": "p1", "negative": "n1"},
                                                     {"weight": 0.4, "positive": "p2", "negative": "n2"}]},
        {"level": "L2", "weight": 0.25, "questions": [{"weight": 1.0, "positive": "p3", "negative": "n3"}]},
        {"level": "L3", "weight": 0.15, "questions": [{"weight": 0.5, "positive": "p4", "negative": "n4"},
                                                      {"weight": 0.5, "positive": "p5", "negative": "n5"}]},
        {"level": "L4", "weight": 0.1, "questions": [{"weight": 1.0, "positive": "p6", "negative": "n6"}]}]}
    pairs = {("L1", 0): 1.0, ("L1", 1): 0.0, ("L2", 0): 1.0, ("L3", 0): 0.0, ("L3", 1): 1.0, ("L4", 0): 1.0}
    score, levels = hwpq_score(q, pairs)
    assert levels == pytest.approx({"L1": 0.6, "L2": 1.0, "L3": 0.5, "L4": 1.0})
    assert score == pytest.approx(0.5 * 0.6 + 0.25 * 1.0 + 0.15 * 0.5 + 0.1 * 1.0)  # 0.725
    assert validate_questionnaire(q) is None
    pairs[("L3", 1)] = math.nan
    score, levels = hwpq_score(q, pairs)
    assert math.isnan(score) and math.isnan(levels["L3"]) and levels["L1"] == pytest.approx(0.6)


def test_hwpq_questionnaire_validation():
    bad = json.loads(json.dumps(QUESTIONNAIRE))
    bad["levels"][0]["weight"] = 0.3
    assert validate_questionnaire(bad) == "level weights sum to 0.9, not 1"
    bad = json.loads(json.dumps(QUESTIONNAIRE))
    bad["levels"][1]["level"] = "L1"
    assert validate_questionnaire(bad) == "levels must be L1, L2, L3, L4 once each, got L1, L1, L3, L4"
    bad = json.loads(json.dumps(QUESTIONNAIRE))
    bad["levels"][3]["questions"][0]["weight"] = 0.7
    assert validate_questionnaire(bad) == "question weights of L4 sum to 1.2, not 1"
    bad = json.loads(json.dumps(QUESTIONNAIRE))
    del bad["levels"][2]["questions"][0]["negative"]
    assert validate_questionnaire(bad).startswith("levels/2/questions/0: 'negative' is a required property")
    assert validate_questionnaire({"levels": []}) == "levels: [] is too short"


@pytest.mark.slow
def test_hwpq_end_to_end_with_votes_and_stored_questionnaires(tmp_path, judge_env):
    batch = make_batch(tmp_path, ["a striped animal", "a striped animal"], [10, 20], [None, None],
                       options={"hwpq.concurrency": "1"})
    df = run_scorers(["hwpq"], batch)
    # the test judge's answers (server.ANSWERS): L1 = 0.75*1 + 0.25*0 (N "several animals?" is True),
    # L2 = 1, L3 = 0 (P "jumping?" is False), L4 = 0.5*1 + 0.5*1; score = 0.4*0.75 + 0.3*1 + 0.2*0 + 0.1*1
    for q in ("q0", "q1"):
        assert [metric(df, q, m)[0] for m in ("L1", "L2", "L3", "L4")] == [0.75, 1.0, 0.0, 1.0]
        assert metric(df, q, "score")[0] == pytest.approx(0.7)
    # one questionnaire for the shared prompt; per image 3 votes x (P and N for 5 pairs + P only for L3's)
    assert judge_env.count(lambda b: "questionnaires" in b["messages"][0]["content"]) == 1
    assert judge_env.count() == 1 + 2 * 33
    assert metric(df, "q0", "calls")[0] == 34 and metric(df, "q1", "calls")[0] == 33
    votes = [b["seed"] for b in judge_env.requests if "Is it daytime?" in json.dumps(b)]
    assert sorted(votes) == [0, 0, 1, 1, 2, 2]
    stored = list((tmp_path / "ws" / "judge-cache" / "questionnaires").glob("*.json"))
    assert len(stored) == 1 and json.loads(stored[0].read_text())["questionnaire"] == QUESTIONNAIRE

    judge_env.reset()
    again = run_scorers(["hwpq"], batch)
    assert judge_env.count() == 0 and metric(again, "q0", "score")[0] == pytest.approx(0.7)


def test_hwpq_invalid_questionnaires_are_regenerated_then_reported(tmp_path, judge_env):
    bad = json.loads(json.dumps(QUESTIONNAIRE))
    bad["levels"][0]["weight"] = 0.3
    judge_env.faults["ONCE-BAD"] = Fault(content=json.dumps(bad), times=1)
    judge_env.faults["ALWAYS-BAD"] = Fault(content="```json\n{\"levels\": [\n```")
    judge_env.faults["Question: Is the animal jumping?"] = Fault(refusal="I won't answer that.")
    batch = make_batch(tmp_path, ["a cat ONCE-BAD", "a cat ALWAYS-BAD"], [10, 20], [None, None])
    df = run_scorers(["hwpq"], batch)
    stored = [json.loads(p.read_text()) for p in (tmp_path / "ws" / "judge-cache" / "questionnaires").glob("*")]
    assert [s["attempts"] for s in stored] == [2]
    # the refused question makes L3 and the score missing, with the reason; other levels stay
    value, note = metric(df, "q0", "L3")
    assert math.isnan(value) and note == "pair 1: refusal: I won't answer that."
    assert math.isnan(metric(df, "q0", "score")[0]) and metric(df, "q0", "score")[1] == "missing pairs in L3"
    assert metric(df, "q0", "L1")[0] == 0.75
    value, note = metric(df, "q1", "score")
    assert math.isnan(value)
    assert note == ("questionnaire invalid after 3 attempts: unparsable reply: the JSON object is cut off "
                    "(no closing '}')")
    assert judge_env.count(lambda b: "ALWAYS-BAD" in json.dumps(b)) == 3


def test_hwpq_generator_and_answerer_use_their_own_models_and_endpoints(tmp_path, judge_env, monkeypatch):
    monkeypatch.setenv("WRITER_KEY", API_KEY)
    with JudgeServer() as writer_endpoint:
        batch = make_batch(tmp_path, ["a striped animal"], [10], [None], options={
            "hwpq.concurrency": "1", "hwpq.generator_model": "judge-writer",
            "hwpq.generator_base_url": writer_endpoint.base_url, "hwpq.generator_api_key_env": "WRITER_KEY",
            "hwpq.answerer_model": "judge-probe"})
        df = run_scorers(["hwpq"], batch)
        written = list(writer_endpoint.requests)
    assert metric(df, "q0", "score")[0] == pytest.approx(0.7)
    # the questionnaire: one request, to the writer's endpoint and model, at the judge's temperature (0)
    assert len(written) == 1 and written[0]["model"] == "judge-writer" and written[0]["temperature"] == 0
    assert "questionnaires" in written[0]["messages"][0]["content"]
    # the answers: only to the default endpoint, the answerer's model, sampled at vote_temperature (1) with
    # one seed per vote
    answered = judge_env.requests
    assert len(answered) == 33 and {b["model"] for b in answered} == {"judge-probe"}
    assert {b["temperature"] for b in answered} == {1}
    assert sorted({b["seed"] for b in answered}) == [0, 1, 2]
    assert not any("questionnaires" in b["messages"][0]["content"] for b in answered)
    stored = json.loads(next((tmp_path / "ws" / "judge-cache" / "questionnaires").glob("*.json")).read_text())
    assert stored["model"] == "judge-writer"
    prov = all_scorers()["hwpq"].provenance(batch)
    assert prov["model"] == "judge-probe" and prov["temperature"] == 1
    assert prov["generator"]["model"] == "judge-writer" and prov["generator"]["base_url"] == writer_endpoint.base_url


def test_hwpq_votes_can_be_sampled_at_another_temperature_and_a_missing_key_is_one_line(tmp_path, judge_env):
    batch = make_batch(tmp_path, ["a striped animal"], [10], [None],
                       options={"hwpq.concurrency": "1", "hwpq.vote_temperature": "0.7"})
    run_scorers(["hwpq"], batch)
    votes = [b for b in judge_env.requests if "questionnaires" not in b["messages"][0]["content"]]
    assert {b["temperature"] for b in votes} == {0.7}
    batch.options["hwpq.answerer_api_key_env"] = "NO_SUCH_KEY_VAR"
    with pytest.raises(InputError) as exc:
        run_scorers(["hwpq"], batch)
    assert exc.value.one_line().startswith("NO_SUCH_KEY_VAR is not set")


def test_hwpq_questionnaires_are_conditioned_on_the_aspect(tmp_path, judge_env):
    from fpr.scorers.vistar.roles import aspect

    batch = make_batch(tmp_path, ["a teapot", "a teapot", "a teapot"], [10, 10, 10], [None, None, None],
                       options={"hwpq.concurrency": "1", "hwpq.aspect": "CUL"})
    batch.extras = [{"aspect": "SF"}, {"aspect": "MA"}, {}]  # the third takes hwpq.aspect
    run_scorers(["hwpq"], batch)
    asked = [_user_text(b) for b in judge_env.requests if "questionnaires" in b["messages"][0]["content"]]
    assert len(asked) == 3  # one questionnaire per aspect of the one prompt
    for code in ("SF", "MA", "CUL"):
        a = aspect(code)
        assert sum(f"aspect of the prompt: {a.name}, that is {a.focus}." in t for t in asked) == 1, code
    assert all(t.startswith('Prompt: "a teapot"') for t in asked)
    stored = [json.loads(p.read_text()) for p in (tmp_path / "ws" / "judge-cache" / "questionnaires").glob("*")]
    assert sorted(s["aspect"] for s in stored) == ["CUL", "MA", "SF"]
    batch.extras = [{"aspect": "XX"}, {}, {}]
    with pytest.raises(InputError, match="unknown aspect 'XX'"):
        run_scorers(["hwpq"], batch)


def _user_text(body: dict) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


@pytest.mark.parametrize("damage", ["flipped bytes", "a JSON number", "a stale template"])
def test_hwpq_a_damaged_stored_questionnaire_is_one_warning_and_made_again(tmp_path, judge_env, capfd, damage):
    """Issue #35: a stored questionnaire damaged in place (a question's text changed, a JSON number, another
    template's) is one warning, moved aside and made again from the cached replies: the values equal the
    first run's and no request is made. Before #35 the changed question was served (new votes asked, other
    values), the number ended in AttributeError and the template was not checked."""
    batch = make_batch(tmp_path, ["a striped animal"], [10], [None], options={"hwpq.concurrency": "1"})
    first = run_scorers(["hwpq"], batch)
    (path,) = (tmp_path / "ws" / "judge-cache" / "questionnaires").glob("*.json")
    entry = json.loads(path.read_text())
    if damage == "flipped bytes":
        path.write_text(path.read_text().replace("Is it daytime?", "Is it nighttime?"))
    elif damage == "a JSON number":
        path.write_text("5")
    else:
        path.write_text(json.dumps({**entry, "code": "hwpq-questionnaire@0"}))
    judge_env.reset()
    capfd.readouterr()
    again = run_scorers(["hwpq"], batch)
    err = [line for line in capfd.readouterr().err.splitlines() if "warning" in line]
    assert len(err) == 1 and "damaged judge-cache entry" in err[0], err
    assert judge_env.count() == 0
    assert [metric(again, "q0", m)[0] for m in ("L1", "L2", "L3", "L4", "score")] == [
        metric(first, "q0", m)[0] for m in ("L1", "L2", "L3", "L4", "score")]
    assert json.loads(path.read_text())["questionnaire"] == QUESTIONNAIRE
