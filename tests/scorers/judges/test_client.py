"""The judge client end to end through the real ``openai`` package against a loopback server:
cache hits (request counts cold vs warm), scripted faults -> missing values with reasons,
whole-run faults -> one FprError line, an interrupted run resumed from the cache, offline rule."""
from __future__ import annotations

import json
import math
import socket

import pytest

from fpr.errors import FprError, InputError
from fpr.keys import fingerprint
from fpr.scorers import run_scorers
from fpr.scorers.judges.cache import JudgeCache
from fpr.scorers.judges.client import ImageRef, JudgeClient, Reply, image_part, refusal_reason, text_part
from fpr.scorers.judges.config import JudgeConfig, judge_config
from fpr.scorers.judges.prompts import load_template
from tests.scorers.judges.conftest import flat_image, make_batch, metric
from tests.scorers.judges.server import Fault

FAST = {"dreambench-prompt.timeout": "1.5", "dreambench-prompt.max_retries": "1"}  # slack for a loaded machine


def test_cold_then_warm_run_makes_no_request(tmp_path, judge_env):
    batch = make_batch(tmp_path, ["a dog", "a cat", "a bird"], [10, 20, 30], [None] * 3)
    cold = run_scorers(["dreambench-prompt"], batch)
    assert judge_env.count() == 3
    assert [metric(cold, f"q{i}", "score")[0] for i in range(3)] == [0.75] * 3  # the server says "**Score: 3**"
    assert [metric(cold, f"q{i}", "calls")[0] for i in range(3)] == [1, 1, 1]
    assert [metric(cold, f"q{i}", "cached")[0] for i in range(3)] == [0, 0, 0]
    files = sorted((tmp_path / "ws" / "judge-cache").rglob("*.json"))
    assert len(files) == 3
    entry = json.loads(files[0].read_text())
    assert entry["model"] == "judge-test" and entry["template"] == "dreambench-prompt" and entry["version"] == "1"
    assert entry["params"]["temperature"] == 1 and entry["params"]["seed"] == 0  # DreamBench++'s temperature
    assert any(p.get("type") == "image" and p["digest"].startswith("sha256:")
               for m in entry["request"] if isinstance(m["content"], list) for p in m["content"])

    judge_env.reset()
    warm = run_scorers(["dreambench-prompt"], batch)
    assert judge_env.count() == 0
    assert [metric(warm, f"q{i}", "cached")[0] for i in range(3)] == [1, 1, 1]
    assert [metric(warm, f"q{i}", "calls")[0] for i in range(3)] == [0, 0, 0]
    pd_cols = ["query_id", "metric", "value"]
    cold_scores, warm_scores = cold[cold.metric.isin(["score", "prompt_tokens"])], warm[warm.metric.isin(
        ["score", "prompt_tokens"])]
    assert cold_scores[pd_cols].reset_index(drop=True).equals(warm_scores[pd_cols].reset_index(drop=True))

    # the request the server saw: DreamBench++'s temperature 1, the seed, the image as a base64 JPEG data URL
    judge_env.reset()
    run_scorers(["dreambench-prompt"], make_batch(tmp_path / "b", ["a fox"], [40], [None],
                                                  options={"dreambench-prompt.seed": "7"}))
    body = judge_env.requests[0]
    assert body["temperature"] == 1 and body["seed"] == 7 and body["model"] == "judge-test"
    assert "top_p" not in body and "n" not in body
    part = [p for p in body["messages"][1]["content"] if p["type"] == "image_url"][0]["image_url"]
    assert part["url"].startswith("data:image/jpeg;base64,") and part["detail"] == "high"


def test_a_rejected_seed_is_dropped_once(tmp_path, judge_env):
    judge_env.reject_params.add("seed")
    batch = make_batch(tmp_path, ["a dog", "a cat", "a cow"], [1, 2, 3], [None] * 3,
                       options={"dreambench-prompt.concurrency": "1"})
    df = run_scorers(["dreambench-prompt"], batch)
    assert [metric(df, f"q{i}", "score")[0] for i in range(3)] == [0.75] * 3
    assert ["seed" in b for b in judge_env.requests] == [True, False, False, False]


def test_a_changed_setting_is_a_new_request(tmp_path, judge_env):
    batch = make_batch(tmp_path, ["a dog"], [10], [None])
    run_scorers(["dreambench-prompt"], batch)
    batch.options = {"dreambench-prompt.image_size": "16"}
    run_scorers(["dreambench-prompt"], batch)
    batch.options = {"dreambench-prompt.model": "judge-test", "dreambench-prompt.image_size": "16"}
    run_scorers(["dreambench-prompt"], batch)  # same model as FPR_JUDGE_MODEL: a cache hit
    assert judge_env.count() == 2


FAULTS = {  # marker in the prompt -> (fault, reason prefix in the note, cached on rerun?)
    "FAULT-429-ONCE": (Fault(status=429, times=1), None, True),
    "FAULT-500": (Fault(status=500), "endpoint error 500 after 1 retry", False),
    "FAULT-502-HTML": (Fault(status=502, body="<html><body><h1>502 Bad Gateway</h1></body></html>",
                             content_type="text/html"), "endpoint error 502 after 1 retry: 502 Bad Gateway", False),
    "FAULT-TIMEOUT": (Fault(delay=4.0), "timeout: no reply within 1.5 s after 1 retry", False),
    "FAULT-TRUNCATED": (Fault(body='{"id": "x", "choices": [{"index": 0, "message": {"content": "Sco'),
                        "malformed reply", False),
    "FAULT-HTML-200": (Fault(body="<html>maintenance</html>", content_type="text/html"), "malformed reply", False),
    "FAULT-NOT-UTF8": (Fault(body=b'{"id": "x", "choices": [{"index": 0, "message": {"content": "Score: 3 \xc3\x28"}}]}'),
                       "malformed reply: the body is not UTF-8 text", False),
    "FAULT-REFUSAL": (Fault(refusal="I can't help with that."), "refusal: I can't help with that.", True),
    "FAULT-SORRY": (Fault(content="I'm sorry, but I cannot evaluate this image."), "refusal: I'm sorry", True),
    "FAULT-NOSCORE": (Fault(content="It follows the prompt well."), "unparsable reply: no final 'Score: ...' line",
                      True),
    "FAULT-RANGE": (Fault(content="Great.\nScore: 7"), "unparsable reply: 'Score: 7' is outside 0-4", True),
    "FAULT-413": (Fault(status=413), "request too large for the endpoint (413)", False),
    "FAULT-400": (Fault(status=400), "request rejected (400): scripted 400", False),
}


@pytest.mark.slow
def test_per_query_faults_are_missing_values_with_reasons(tmp_path, judge_env):
    markers = list(FAULTS)
    judge_env.faults.update({m: f for m, (f, _, _) in FAULTS.items()})
    batch = make_batch(tmp_path, [f"a dog {m}" for m in markers] + ["a dog"], list(range(len(markers) + 1)),
                       [None] * (len(markers) + 1), options={**FAST, "dreambench-prompt.concurrency": "8"})
    df = run_scorers(["dreambench-prompt"], batch)
    table = []
    for i, m in enumerate(markers):
        value, note = metric(df, f"q{i}", "score")
        reason = FAULTS[m][1]
        table.append((m, value, note))
        if reason is None:
            assert value == 0.75 and note is None, (m, value, note)
        else:
            assert math.isnan(value), (m, value)
            assert note.startswith(reason), (m, note)
            assert metric(df, f"q{i}", "missing")[0] == 1
    assert metric(df, f"q{len(markers)}", "score")[0] == 0.75
    # 429 once: retried by the client, answered; 500 and 502: 1 + 1 retry each
    assert judge_env.count(lambda b: "FAULT-429-ONCE" in json.dumps(b)) == 2
    assert judge_env.count(lambda b: "FAULT-500" in json.dumps(b)) == 2

    # rerun: replies the model gave (refusals, unparsable) come from the cache; transport faults are asked again
    judge_env.reset()
    df2 = run_scorers(["dreambench-prompt"], batch)
    for i, m in enumerate(markers):
        cached = metric(df2, f"q{i}", "cached")[0]
        assert cached == (1.0 if FAULTS[m][2] else 0.0), (m, cached)
    assert judge_env.count(lambda b: "FAULT-REFUSAL" in json.dumps(b)) == 0


@pytest.mark.parametrize("env,expected", [
    ({"OPENAI_API_KEY": "wrong"}, "the judge endpoint refused the API key (401: Incorrect API key provided)"),
    ({"FPR_JUDGE_MODEL": "no-such-model"}, "the judge endpoint does not serve model 'no-such-model' (404"),
])
def test_whole_run_faults_are_one_line(tmp_path, judge_env, monkeypatch, env, expected):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(FprError) as err:
        run_scorers(["dreambench-prompt"], make_batch(tmp_path, ["a dog", "a cat"], [1, 2], [None, None]))
    line = err.value.one_line()
    assert line.startswith(expected) and "\n" not in line
    assert judge_env.base_url in line


def test_unreachable_endpoint_is_one_line(tmp_path, judge_env, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    with pytest.raises(FprError, match=r"cannot reach the judge endpoint .*start the server"):
        run_scorers(["dreambench-prompt"], make_batch(tmp_path, ["a dog"], [1], [None],
                                                      options={"dreambench-prompt.max_retries": "0"}))


def test_configuration_errors(tmp_path, judge_env, monkeypatch):
    batch = make_batch(tmp_path, ["a dog"], [1], [None])
    monkeypatch.setenv("OPENAI_BASE_URL", "https://judge.example.com/v1")
    with pytest.raises(FprError, match="not on this machine and FPR_OFFLINE=1 forbids network use"):
        run_scorers(["dreambench-prompt"], batch)
    monkeypatch.setenv("OPENAI_BASE_URL", judge_env.base_url)
    monkeypatch.delenv("FPR_JUDGE_MODEL")
    with pytest.raises(InputError, match=r"needs a judge model; pass --scorer-option dreambench-prompt.model=NAME"):
        run_scorers(["dreambench-prompt"], batch)
    monkeypatch.setenv("FPR_JUDGE_MODEL", "judge-test")
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(InputError, match="OPENAI_API_KEY is not set"):
        run_scorers(["dreambench-prompt"], batch)
    assert judge_env.count() == 0
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:1/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    assert judge_config("x", {"x.model": "m"}).base_url == "http://localhost:1/v1"  # loopback names are allowed


def test_an_interrupted_run_resumes_from_the_cache(tmp_path, judge_env):
    """The key is revoked mid-run: the run stops with one line; the rerun asks only what was not answered."""
    judge_env.faults["REVOKED"] = Fault(status=401, body='{"error": {"message": "key revoked"}}')
    prompts = ["a dog", "a cat", "a cow REVOKED", "a hen"]
    batch = make_batch(tmp_path, prompts, [1, 2, 3, 4], [None] * 4, options={"dreambench-prompt.concurrency": "1"})
    with pytest.raises(FprError, match="refused the API key"):
        run_scorers(["dreambench-prompt"], batch)
    assert judge_env.count() == 3
    judge_env.faults.clear()
    judge_env.reset()
    df = run_scorers(["dreambench-prompt"], batch)
    assert judge_env.count() == 2  # the two answered before the stop came from the cache
    assert [metric(df, f"q{i}", "cached")[0] for i in range(4)] == [1, 1, 0, 0]


def test_the_cache_key_covers_model_template_images_text_and_parameters(tmp_path):
    t = load_template("dreambench_prompt")
    img = tmp_path / "a.png"
    flat_image(img, 5)
    c = JudgeClient(JudgeConfig("m", "http://127.0.0.1:1/v1", "k"), tmp_path)
    msgs = [{"role": "user", "content": [text_part("hi"), image_part(ImageRef.from_path(img, 64))]}]
    k = c.key(msgs, t, None, {})
    assert k == c.key([{"role": "user", "content": [text_part("hi"), image_part(ImageRef.from_path(img, 64))]}],
                      t, None, {})
    assert k != c.key([{"role": "user", "content": [text_part("hi!"), image_part(ImageRef.from_path(img, 64))]}],
                      t, None, {})
    assert k != c.key([{"role": "user", "content": [text_part("hi"), image_part(ImageRef.from_path(img, 32))]}],
                      t, None, {})
    assert k != c.key(msgs, load_template("dreambench_concept"), None, {})
    assert k != c.key(msgs, t, None, {"vote": 1})
    assert k != JudgeClient(JudgeConfig("m2", "http://127.0.0.1:1/v1", "k"), tmp_path).key(msgs, t, None, {})
    assert len(k) == 64 and k == fingerprint(json.loads(json.dumps({"model": "m", "template": t.id,
                                                                     "version": t.version,
                                                                     "messages": [{"role": "user", "content": [
                                                                         {"type": "text", "text": "hi"},
                                                                         {"type": "image", "digest":
                                                                             ImageRef.from_path(img, 64).digest}]}],
                                                                     "tools": [],
                                                                     "params": {"temperature": 0, "seed": 0,
                                                                                "max_tokens": None}})))
    cache = JudgeCache(tmp_path / "c")
    cache.put(k, {"reply": {"content": "x"}})
    assert cache.get(k)["reply"] == {"content": "x"} and not list((tmp_path / "c").rglob(".tmp-*"))


def test_refusal_detection():
    assert refusal_reason(Reply(content=None, refusal="No.")) == "refusal: No."
    assert refusal_reason(Reply(content="x", finish_reason="content_filter")).startswith("refusal: the endpoint's")
    assert refusal_reason(Reply(content="I cannot rate people.")) == "refusal: I cannot rate people."
    assert refusal_reason(Reply(content="I can see a dog.\nScore: 3")) is None


def test_importing_the_judge_scorers_loads_neither_openai_nor_transformers():
    """What ``fpr.cli`` / ``all_scorers()`` add by loading the judge scorers (a fresh interpreter)."""
    import subprocess
    import sys

    from importlib.util import find_spec
    from pathlib import Path

    from fpr.scorers import BUILTIN

    # the judge scorers, found by their registration: the built-in scorer modules that use the judge client
    judged = sorted(m for m in BUILTIN.values() if "fpr.scorers.judges.client import" in
                    Path(find_spec(m).origin).read_text())
    assert len(judged) >= 5, judged
    code = ("import sys, importlib\n"
            f"for m in {judged!r}:\n"
            "    importlib.import_module(m)\n"
            "print([m for m in ('openai', 'transformers', 'jsonschema', 'torch') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
