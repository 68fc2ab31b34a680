"""CIGEval's five sub-questions selected per ImagenHub task, and their min combination, against a loopback judge
whose answers are hand-set per question id (read back from the request text)."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from fpr.errors import InputError
from fpr.scorers import QueryBatch, run_scorers
from fpr.scorers.cigeval import TASKS
from tests.scorers.judges.conftest import flat_image, metric
from tests.scorers.judges.server import JudgeServer, _images, _text

# The test judge's final answers per question id; subject consistency is the reference's grey level // 25.
SCORES = {"prompt_following": 6, "edit_following": 9, "minimal_edit": 2, "control_following": 3}
QID = re.compile(r"Question \[(\w+)\]")


def question_of(body: dict) -> str:
    return QID.search(_text(body)).group(1)


def reply(body: dict) -> dict:
    if _text(body).startswith("List the objects"):
        return {"content": '{"objects": [], "relations": []}'}
    q = question_of(body)
    names = [t["function"]["name"] for t in body.get("tools", [])]
    handles = re.findall(r"Image '(\w+)':", _text(body))
    if not any(m["role"] == "tool" for m in body["messages"]) and "difference" in names and len(handles) > 1:
        args = {"image_a": "generated", "image_b": handles[1]}
        return {"content": f"Thought: compare the generated image with the {handles[1]} image.",
                "tool_calls": [{"id": "call_0", "type": "function",
                                "function": {"name": "difference", "arguments": json.dumps(args)}}]}
    score = int(_images(body)[1].mean() // 25) if q == "subject_consistency" else SCORES[q]
    return {"content": f"Thought: checked the {q.replace('_', ' ')}.\nScore: {score}"}


@pytest.fixture(scope="module")
def server():  # overrides conftest's: this module's judge answers per question id
    with JudgeServer(reply=reply) as s:
        yield s


def batch_of(tmp_path, task: str | None, prompt: str | None, refs: list[int], *, options=None, extras=None):
    gen = flat_image(tmp_path / "q" / "0.png", 120)
    ref_paths = [flat_image(tmp_path / "r" / f"{k}.png", v) for k, v in enumerate(refs)]
    opts = {"cigeval.tools": "difference", **({"cigeval.task": task} if task else {}), **(options or {})}
    return QueryBatch(["q0"], [gen], ["i"], ["g"], [prompt], [ref_paths], options=opts,
                      workspace=tmp_path / "ws", extras=extras)


def asked(server) -> list[tuple[str, list[str]]]:
    """(question id, image handles shown) of each question's first request, in order."""
    out = []
    for b in server.requests:
        if len(b["messages"]) == 2:  # system + the question: a question's first turn
            out.append((question_of(b), re.findall(r"Image '(\w+)':", _text(b))))
    return out


EXPECTED = {
    "text-guided-ig": [("prompt_following", ["generated"])],
    "text-guided-ie": [("edit_following", ["generated", "source"]), ("minimal_edit", ["generated", "source"])],
    "mask-guided-ie": [("edit_following", ["generated", "source"]), ("minimal_edit", ["generated", "source"])],
    "subject-driven-ig": [("subject_consistency", ["generated", "reference"]), ("prompt_following", ["generated"])],
    "subject-driven-ie": [("subject_consistency", ["generated", "reference"]),
                          ("minimal_edit", ["generated", "source"])],
    "multi-concept-ic": [("subject_consistency", ["generated", "reference"]),
                         ("subject_consistency", ["generated", "reference"]), ("prompt_following", ["generated"])],
    "control-guided-ig": [("control_following", ["generated", "control"]), ("prompt_following", ["generated"])],
}


@pytest.mark.parametrize("task", sorted(EXPECTED))
def test_each_task_asks_its_sub_questions_in_order(tmp_path, judge_env, task):
    assert set(EXPECTED) == set(TASKS)
    df = run_scorers(["cigeval"], batch_of(tmp_path, task, "a dog on a bench", [100, 200]))
    assert asked(judge_env) == EXPECTED[task]
    got = set(df[df["metric"].isin(["prompt_following", "edit_following", "minimal_edit", "subject_consistency",
                                    "control_following"])]["metric"])
    assert got == {q for q, _ in EXPECTED[task]}
    traj = json.loads(metric(df, "q0", "trajectory")[1])
    assert traj[0]["task"] == task
    first = [e for e in traj if e.get("step") == 0]
    assert [e["images"] for e in first] == [h for _, h in EXPECTED[task]]
    assert all(e["prompt"].startswith(f"Question [{e['question'].rstrip('_12')}]") for e in first)


def test_the_difference_tool_compares_the_generated_image_with_the_task_s_condition_image(tmp_path, judge_env):
    df = run_scorers(["cigeval"], batch_of(tmp_path, "subject-driven-ie", None, [120, 200]))
    calls = [c for e in json.loads(metric(df, "q0", "trajectory")[1]) for c in e.get("tool_calls", [])]
    # subject (reference 2 = grey 200) differs from the generated grey 120 everywhere; the source (grey 120) nowhere
    assert [(c["arguments"]["image_b"], c["result"]) for c in calls] == [
        ("reference", {"regions": [{"box": [0.0, 0.0, 1.0, 1.0], "area": 1.0}]}), ("source", {"regions": []})]


@pytest.mark.parametrize("task,refs,expected", [
    # hand-computed: subject score = grey // 25; prompt 6, edit 9, minimal edit 2, control 3; score = the minimum
    ("text-guided-ig", [], {"prompt_following": 6, "score": 6}),
    ("text-guided-ie", [120], {"edit_following": 9, "minimal_edit": 2, "score": 2}),
    ("subject-driven-ig", [200], {"subject_consistency": 8, "prompt_following": 6, "score": 6}),
    ("subject-driven-ig", [100], {"subject_consistency": 4, "prompt_following": 6, "score": 4}),
    ("subject-driven-ie", [120, 250], {"subject_consistency": 10, "minimal_edit": 2, "score": 2}),
    ("multi-concept-ic", [250, 125], {"subject_consistency": 5, "prompt_following": 6, "score": 5}),
    ("control-guided-ig", [0], {"control_following": 3, "prompt_following": 6, "score": 3}),
])
def test_score_is_the_minimum_of_the_sub_scores(tmp_path, judge_env, task, refs, expected):
    df = run_scorers(["cigeval"], batch_of(tmp_path, task, "two dogs", refs))
    assert {m: metric(df, "q0", m)[0] for m in expected} == expected
    if task == "multi-concept-ic":
        assert metric(df, "q0", "subject_consistency")[1] == "subject_consistency_1: 10, subject_consistency_2: 5"


def test_a_missing_input_makes_the_score_missing_with_the_reason(tmp_path, judge_env):
    df = run_scorers(["cigeval"], batch_of(tmp_path, "subject-driven-ie", "x", [120]))
    value, note = metric(df, "q0", "subject_consistency")
    assert math.isnan(value) and note == "needs reference 2 (the reference image)"
    assert metric(df, "q0", "minimal_edit")[0] == 2
    value, note = metric(df, "q0", "score")
    assert math.isnan(value) and note == "subject_consistency: needs reference 2 (the reference image)"
    df = run_scorers(["cigeval"], batch_of(tmp_path / "b", "text-guided-ie", None, [120]))
    assert metric(df, "q0", "edit_following")[1] == "needs the query's prompt"
    assert metric(df, "q0", "minimal_edit")[0] == 2 and math.isnan(metric(df, "q0", "score")[0])


def test_the_queries_task_column_overrides_the_option_and_bad_tasks_are_one_line(tmp_path, judge_env):
    b = batch_of(tmp_path, "text-guided-ig", "a dog", [120], extras=[{"task": "control-guided-ig"}])
    df = run_scorers(["cigeval"], b)
    assert metric(df, "q0", "score")[0] == 3 and [q for q, _ in asked(judge_env)] == ["control_following",
                                                                                      "prompt_following"]
    with pytest.raises(InputError, match="unknown cigeval task 'editing' for query q0"):
        run_scorers(["cigeval"], batch_of(tmp_path, "editing", "a dog", []))
    assert np.isfinite(metric(run_scorers(["cigeval"], batch_of(tmp_path, None, "a dog", [])), "q0", "score")[0])
