"""DreamBench++ reproducible: replaceable templates, DreamBench++'s sampling and image encoding as declared
defaults, n samples, its reply rule, and provenance (template hash, model, parameters, system fingerprint)."""
from __future__ import annotations

import base64
import hashlib
import io
import json
import math

import pytest
from PIL import Image

from fpr.errors import InputError
from fpr.scorers import get_scorer, run_scorers
from fpr.scorers.judges.config import DREAMBENCH_PLUS_DEFAULTS, judge_config
from fpr.scorers.options import resolve
from tests.scorers.judges.conftest import make_batch, metric
from tests.scorers.judges.server import Fault

DIALOGUE = """id: my-dreambench-text
version: 7

[user]
You will rate prompt following. MARK-DIALOGUE

[assistant]
Understood. Send the prompt and the image.

[request]
### Text Prompt
$prompt
"""


def completion(contents: list[str], fingerprint: str | None = "fp_test1") -> str:
    """A raw chat completion with one choice per content (what an endpoint answers for n samples)."""
    body = {"id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": "judge-test",
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            "choices": [{"index": k, "message": {"role": "assistant", "content": c}, "finish_reason": "stop",
                         "logprobs": None} for k, c in enumerate(contents)]}
    if fingerprint:
        body["system_fingerprint"] = fingerprint
    return json.dumps(body)


def _sent_images(body: dict) -> list[tuple[str, bytes]]:
    out = []
    for m in body["messages"]:
        for p in m["content"] if isinstance(m["content"], list) else []:
            if p["type"] == "image_url":
                head, data = p["image_url"]["url"].split(",", 1)
                out.append((head, base64.b64decode(data)))
    return out


def test_defaults_are_dreambench_plus_settings_and_the_bytes_are_its_encoding(tmp_path, judge_env):
    batch = make_batch(tmp_path, [None], [90], [100])
    run_scorers(["dreambench-concept"], batch)
    body = judge_env.requests[0]
    assert body["temperature"] == 1 and "top_p" not in body and "n" not in body
    sent = _sent_images(body)
    assert [h for h, _ in sent] == ["data:image/jpeg;base64"] * 2
    assert all(p["image_url"]["detail"] == "high" for p in body["messages"][1]["content"] if p["type"] == "image_url")
    # independently: DreamBench++ resizes to 512 x 512 and saves JPEG at PIL's default quality
    for (_, data), path in zip(sent, [batch.reference_paths[0][0], batch.paths[0]]):
        buf = io.BytesIO()
        Image.open(path).convert("RGB").resize((512, 512)).save(buf, format="JPEG")
        assert data == buf.getvalue()
    values = resolve("dreambench-concept", get_scorer("dreambench-concept").options, {})
    assert {k: values[k] for k in DREAMBENCH_PLUS_DEFAULTS} == DREAMBENCH_PLUS_DEFAULTS


def test_sampling_and_encoding_options_reach_the_request(tmp_path, judge_env):
    opts = {"dreambench-prompt.temperature": "0.2", "dreambench-prompt.top_p": "0.9",
            "dreambench-prompt.image_format": "png", "dreambench-prompt.image_resize": "fit",
            "dreambench-prompt.image_size": "64", "dreambench-prompt.image_detail": "low"}
    run_scorers(["dreambench-prompt"], make_batch(tmp_path, ["a dog"], [10], [None], options=opts))
    body = judge_env.requests[0]
    assert body["temperature"] == 0.2 and body["top_p"] == 0.9 and "n" not in body
    (head, data), = _sent_images(body)
    assert head == "data:image/png;base64" and Image.open(io.BytesIO(data)).size == (32, 32)  # fit never enlarges
    opts["dreambench-prompt.image_format"] = "gif"
    with pytest.raises(InputError, match="image_format must be one of png, jpeg, got 'gif'"):
        run_scorers(["dreambench-prompt"], make_batch(tmp_path / "b", ["a dog"], [10], [None], options=opts))


def test_n_samples_score_is_the_mean_of_those_that_parse(tmp_path, judge_env):
    judge_env.faults["a dog"] = Fault(body=completion(["fine\nScore: 4", "meh\nScore: 2", "no idea"]))
    judge_env.faults["a cat"] = Fault(body=completion(["no idea", "none"]))
    df = run_scorers(["dreambench-prompt"], make_batch(tmp_path, ["a dog", "a cat"], [10, 20], [None, None],
                                                       options={"dreambench-prompt.n": "3"}))
    assert judge_env.requests[0]["n"] == 3
    value, note = metric(df, "q0", "score")
    assert value == pytest.approx((4 + 2) / 2 / 4)
    assert note.startswith("mean of 2 of 3 samples: 4, 2; 1 unparsable (unparsable reply: no final 'Score: ...'")
    value, note = metric(df, "q1", "score")
    assert math.isnan(value) and note.startswith("unparsable reply")


def test_a_replaced_template_in_dreambench_layout_with_its_reply_rule(tmp_path, judge_env):
    path = tmp_path / "text.txt"
    path.write_text(DIALOGUE)
    judge_env.faults["MARK-DIALOGUE"] = Fault(body=completion(["The score: 2 because the sky is missing."]))
    opts = {"dreambench-prompt.template": str(path), "dreambench-prompt.reply_format": "dreambench"}
    df = run_scorers(["dreambench-prompt"], make_batch(tmp_path, ["a dog on a beach"], [10], [None], options=opts))
    assert metric(df, "q0", "score")[0] == 0.5
    msgs = judge_env.requests[0]["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[0]["content"] == "You will rate prompt following. MARK-DIALOGUE"
    assert msgs[1]["content"] == "Understood. Send the prompt and the image."
    assert [p["type"] for p in msgs[2]["content"]] == ["text", "image_url"]
    assert msgs[2]["content"][0]["text"] == "### Text Prompt\na dog on a beach"
    # the same reply under fpr's rule (a last 'Score: N' line) is unparsable; a cached answer is re-read
    opts["dreambench-prompt.reply_format"] = "last-line"
    df = run_scorers(["dreambench-prompt"], make_batch(tmp_path, ["a dog on a beach"], [10], [None], options=opts))
    assert math.isnan(metric(df, "q0", "score")[0]) and judge_env.count() == 1


def test_dreambench_reply_rule_reads_exactly_one_score():
    from fpr.scorers.judges import parse
    from fpr.scorers.judges.client import Reply

    assert parse.dreambench_score(Reply(content="Analysis...\nscore: 3\nDone."), 0, 4) == 3
    assert parse.dreambench_score(Reply(content="Final Score: around 4"), 0, 4) == 4  # a word may precede N
    for text, why in (("Score: 3 ... Score: 4", "2 'Score: N' matches"), ("no number", "0 'Score: N' matches"),
                      ("Score: 7", "outside 0-4")):
        with pytest.raises(parse.JudgeFailure, match=why):
            parse.dreambench_score(Reply(content=text), 0, 4)


def test_concept_template_in_dreambench_layout_sends_only_the_two_images(tmp_path, judge_env):
    path = tmp_path / "subject.txt"
    path.write_text("id: my-subject\nversion: 1\n\n[user]\nRate concept preservation. MARK-SUBJECT\n\n"
                    "[assistant]\nPlease send the two images.\n")
    judge_env.faults["MARK-SUBJECT"] = Fault(body=completion(["Score: 3"]))
    df = run_scorers(["dreambench-concept"], make_batch(tmp_path, [None], [10], [200],
                                                        options={"dreambench-concept.template": str(path)}))
    assert metric(df, "q0", "score")[0] == 0.75
    last = judge_env.requests[0]["messages"][-1]["content"]
    assert [p["type"] for p in last] == ["image_url", "image_url"]


def test_provenance_has_template_hash_model_parameters_and_system_fingerprint(tmp_path, judge_env):
    path = tmp_path / "subject.txt"
    text = "id: my-subject\nversion: 3\n\n[system]\nMARK-PROV judge\n\n[user]\nCompare.\n"
    path.write_text(text)
    judge_env.faults["MARK-PROV"] = Fault(body=completion(["Score: 4"], fingerprint="fp_44aa"))
    batch = make_batch(tmp_path, [None], [10], [10], options={"dreambench-concept.template": str(path),
                                                               "dreambench-concept.seed": "5"})
    for _ in range(2):  # the second run is answered from the cache and still knows the fingerprint
        prov = run_scorers(["dreambench-concept"], batch).attrs["provenance"]["dreambench-concept"]
        assert prov["templates"]["my-subject@v3"] == hashlib.sha256(text.encode()).hexdigest()[:16]
        assert prov["template_path"] == str(path) and prov["model"] == "judge-test"
        assert (prov["temperature"], prov["top_p"], prov["n"], prov["seed"]) == (1, None, 1, 5)
        assert prov["image"] == {"size": 512, "resize": "square", "format": "jpeg", "quality": 75, "detail": "high"}
        assert prov["system_fingerprints"] == ["fp_44aa"]
    assert judge_env.count() == 1


@pytest.mark.parametrize("content, needle", [
    (None, "judge prompt template not found"),
    ("version: 1\n[user]\nx\n", "lacks id:/version: lines"),
    ("id: a\nversion: 1\n[system]\nx\n", r"has no \[user\] section"),
    ("id: a\nversion: 1\n[user]\nRate $subject\n", r"section \[user\] uses \$subject, which this scorer does not fill"),
    ("id: a\nversion: 1\n[user]\nCosts 5$\n", "has a '\\$' that is not a placeholder"),
])
def test_a_bad_template_is_one_line_before_any_request(tmp_path, judge_env, content, needle):
    path = tmp_path / "t.txt"
    if content is not None:
        path.write_text(content)
    batch = make_batch(tmp_path, [None], [10], [10], options={"dreambench-concept.template": str(path)})
    with pytest.raises(InputError, match=needle) as exc:
        run_scorers(["dreambench-concept"], batch)
    assert "\n" not in exc.value.one_line() and judge_env.count() == 0


def test_a_changed_template_or_sampling_setting_is_a_new_request(tmp_path, judge_env):
    path = tmp_path / "t.txt"
    path.write_text("id: a\nversion: 1\n[user]\nRate $prompt\n")
    batch = make_batch(tmp_path, ["a dog"], [10], [None], options={"dreambench-prompt.template": str(path)})
    run_scorers(["dreambench-prompt"], batch)
    run_scorers(["dreambench-prompt"], batch)
    path.write_text("id: a\nversion: 1\n[user]\nPlease rate $prompt\n")
    run_scorers(["dreambench-prompt"], batch)
    batch.options["dreambench-prompt.temperature"] = "0"
    run_scorers(["dreambench-prompt"], batch)
    assert judge_env.count() == 3


def test_other_judges_keep_temperature_0_and_png(tmp_path, judge_env):
    cfg = judge_config("viescore", {})
    assert (cfg.temperature, cfg.image_format, cfg.image_resize, cfg.image_detail) == (0.0, "png", "fit", None)
    assert cfg.sampling() == {"temperature": 0, "seed": 0, "max_tokens": None}
