"""A real HTTP server on 127.0.0.1 speaking the OpenAI chat-completions protocol (with tool calls).

Replies are deterministic functions of the request (see :func:`default_reply`):
the concept judge compares the two images it is sent pixel by pixel, the choice
judge picks the candidate nearest in pixels, the CIGEval judge calls tools on its
first turn and scores on its second, and so on. Faults are scripted by a marker
text found anywhere in a request (e.g. in a query's prompt): :attr:`JudgeServer.faults`
maps marker -> :class:`Fault`. Every request is recorded in :attr:`JudgeServer.requests`.
"""
from __future__ import annotations

import base64
import io
import json
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
from PIL import Image

API_KEY = "test-key"
MODELS = ("judge-test", "judge-writer", "judge-probe")  # the first is the default judge
QUESTIONNAIRE = {"levels": [
    {"level": "L1", "weight": 0.4, "questions": [
        {"weight": 0.75, "positive": "Is there an animal?", "negative": "Is the animal absent?"},
        {"weight": 0.25, "positive": "Is there exactly one animal?", "negative": "Are there several animals?"}]},
    {"level": "L2", "weight": 0.3, "questions": [
        {"weight": 1.0, "positive": "Is the animal striped?", "negative": "Is the animal plain?"}]},
    {"level": "L3", "weight": 0.2, "questions": [
        {"weight": 1.0, "positive": "Is the animal jumping?", "negative": "Is the animal lying down?"}]},
    {"level": "L4", "weight": 0.1, "questions": [
        {"weight": 0.5, "positive": "Is it daytime?", "negative": "Is it night?"},
        {"weight": 0.5, "positive": "Is the mood calm?", "negative": "Is the mood tense?"}]}]}
# How the test judge answers each HWPQ question (questions not listed: False).
ANSWERS = {"Is there an animal?": True, "Is the animal absent?": False, "Is there exactly one animal?": True,
           "Are there several animals?": True, "Is the animal striped?": True, "Is the animal plain?": False,
           "Is the animal jumping?": False, "Is it daytime?": True, "Is it night?": False,
           "Is the mood calm?": True, "Is the mood tense?": False}


@dataclass
class Fault:
    """What to do with a request containing the marker: an HTTP status, a raw body, a delay, a refusal."""

    status: int = 200
    body: str | bytes | None = None  # raw body instead of a completion
    content_type: str = "application/json"
    delay: float = 0.0
    refusal: str | None = None
    content: str | None = None  # reply text instead of the default
    times: int | None = None  # apply only to the first N matching requests


def _images(body: dict) -> list[np.ndarray]:
    out = []
    for m in body.get("messages", []):
        if isinstance(m.get("content"), list):
            for p in m["content"]:
                if p.get("type") == "image_url":
                    data = base64.b64decode(p["image_url"]["url"].split(",", 1)[1])
                    out.append(np.asarray(Image.open(io.BytesIO(data)).convert("RGB").resize((32, 32)),
                                          dtype=np.float64))
    return out


def _text(body: dict) -> str:
    parts = []
    for m in body.get("messages", []):
        c = m.get("content")
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, list):
            parts += [p.get("text", "") for p in c if p.get("type") == "text"]
    return "\n".join(parts)


def pixel_score(a: np.ndarray, b: np.ndarray) -> int:
    """The test judge's concept score: 4 for identical thumbnails, minus one per 16 grey levels of mean difference."""
    return int(np.clip(4 - np.floor(np.abs(a - b).mean() / 16.0), 0, 4))


def default_reply(body: dict) -> dict:
    """A reply ``{"content", "tool_calls"}`` as a deterministic function of the request."""
    system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "") or ""
    text = _text(body)
    imgs = _images(body)
    if system.startswith("You judge personalized"):
        return {"content": f"Compared the subject's markings.\nScore: {pixel_score(imgs[0], imgs[1])}"}
    if system.startswith("You judge text-to-image"):
        return {"content": "Most of the prompt is shown.\n**Score: 3**"}
    if system.startswith("You identify individuals"):
        d = [np.abs(imgs[0] - c).mean() for c in imgs[1:]]
        return {"content": f"The markings match best.\nAnswer: {'ABCDEFGH'[int(np.argmin(d))]}"}
    if "perceptual quality" in system:
        return {"content": '{"score": [9, 6], "reasoning": "slight blur"}'}
    if system.startswith("You are a careful evaluator"):
        return {"content": '```json\n{"score": [7, 8], "reasoning": "close"}\n```'}
    if system.startswith("You write evaluation questionnaires"):
        return {"content": json.dumps(QUESTIONNAIRE)}
    if system.startswith("You answer a yes/no question"):
        q = re.search(r"Question: (.*)", text).group(1).strip()
        return {"content": f"Looking at the image.\nAnswer: {ANSWERS.get(q, False)}"}
    if text.startswith("List the objects"):
        return {"content": '{"objects": [{"name": "animal", "attributes": ["striped"]}], "relations": []}'}
    if system.startswith("You are an evaluation agent"):
        tool_msgs = [m for m in body["messages"] if m["role"] == "tool"]
        names = [t["function"]["name"] for t in body.get("tools", [])]
        subject = "Image 'reference'" in text
        if not tool_msgs:
            calls = []
            if "highlight" in names:
                calls.append(("highlight", {"image": "generated", "box": [0.25, 0.25, 0.75, 0.75]}))
            if subject and "difference" in names:
                calls.append(("difference", {"image_a": "generated", "image_b": "reference"}))
            if "grounding" in names:
                calls.append(("grounding", {"image": "generated", "text": "an animal"}))
            if "scene_graph" in names and not subject:
                calls.append(("scene_graph", {"image": "generated"}))
            if calls:
                return {"content": "I will look closer.", "tool_calls": [
                    {"id": f"call_{k}", "type": "function",
                     "function": {"name": n, "arguments": json.dumps(a)}} for k, (n, a) in enumerate(calls)]}
        return {"content": f"Checked with the tools.\nScore: {5 if subject else 7}"}
    return {"content": "I do not know this task."}


class JudgeServer:
    def __init__(self, reply=default_reply):
        self.reply = reply
        self.faults: dict[str, Fault] = {}
        self.reject_params: set[str] = set()  # e.g. {"seed"}: answered with 400 "Unsupported parameter"
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._fault_counts: dict[str, int] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, body: str | bytes, content_type="application/json", headers=None):
                data = body if isinstance(body, bytes) else body.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, json.dumps({"object": "list", "data": [{"id": m, "object": "model"}
                                                                           for m in MODELS]}))
                else:
                    self._send(404, '{"error": {"message": "not found"}}')

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(raw)
                with server._lock:
                    server.requests.append(body)
                if self.headers.get("Authorization") != f"Bearer {API_KEY}":
                    return self._send(401, '{"error": {"message": "Incorrect API key provided", '
                                           '"type": "invalid_request_error", "code": "invalid_api_key"}}')
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    return self._send(404, '{"error": {"message": "unknown path"}}')
                if body.get("model") not in MODELS:
                    msg = f"The model '{body.get('model')}' does not exist"
                    return self._send(404, json.dumps({"error": {"message": msg, "code": "model_not_found"}}))
                for p in sorted(server.reject_params & set(body)):
                    return self._send(400, json.dumps({"error": {"message": f"Unsupported parameter: '{p}'",
                                                                 "param": p}}))
                fault = server._fault_for(json.dumps(body))
                if fault and fault.delay:
                    time.sleep(fault.delay)
                if fault and fault.status != 200:
                    err = json.dumps({"error": {"message": f"scripted {fault.status}"}})
                    return self._send(fault.status, fault.body or err, fault.content_type, {"retry-after-ms": "5"})
                if fault and fault.body is not None:
                    return self._send(200, fault.body, fault.content_type)
                reply = server.reply(body)
                if fault and fault.content is not None:
                    reply = {"content": fault.content}
                msg = {"role": "assistant", "content": reply.get("content"), "refusal": None}
                if fault and fault.refusal:
                    msg = {"role": "assistant", "content": None, "refusal": fault.refusal}
                if reply.get("tool_calls"):
                    msg["tool_calls"] = reply["tool_calls"]
                n_img = sum(1 for m in body["messages"] if isinstance(m.get("content"), list)
                            for p in m["content"] if p.get("type") == "image_url")
                usage = {"prompt_tokens": len(_text(body).split()) + 85 * n_img,
                         "completion_tokens": len((msg.get("content") or msg.get("refusal") or "").split())}
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                out = {"id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion", "created": 0,
                       "model": body["model"], "usage": usage,
                       "choices": [{"index": 0, "message": msg, "logprobs": None,
                                    "finish_reason": "tool_calls" if reply.get("tool_calls") else "stop"}]}
                self._send(200, json.dumps(out))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _fault_for(self, text: str) -> Fault | None:
        with self._lock:
            for marker, fault in self.faults.items():
                if marker in text:
                    n = self._fault_counts.get(marker, 0)
                    if fault.times is not None and n >= fault.times:
                        continue
                    self._fault_counts[marker] = n + 1
                    return fault
        return None

    def count(self, predicate=lambda body: True) -> int:
        with self._lock:
            return sum(1 for b in self.requests if predicate(b))

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self._fault_counts.clear()
            self.reject_params.clear()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
