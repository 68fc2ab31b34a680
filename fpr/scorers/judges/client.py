"""One client for model judges over any OpenAI-compatible chat-completions endpoint.

Configuration follows the ``openai`` package's own conventions: the endpoint is
``OPENAI_BASE_URL`` (default ``https://api.openai.com/v1``), the key
``OPENAI_API_KEY`` (any non-empty value for a local server); the model is the
scorer option ``<scorer>.model`` or ``FPR_JUDGE_MODEL``. Other options, all
``<scorer>.<name>`` and declared once in :func:`client_options`: ``seed`` (0),
``image_size`` (px of images sent, 512), ``concurrency`` (parallel requests, 4),
``timeout`` (s per request, 60), ``max_retries`` (3; the openai client retries
408/409/429/5xx and dropped connections with exponential backoff, honouring
``Retry-After``), ``max_tokens``; sampling ``temperature`` (0), ``top_p`` (not sent)
and ``n`` (1 sample); image encoding ``image_resize`` (``fit``: longer side to
``image_size``; ``square``: exactly ``image_size`` x ``image_size``), ``image_format``
(png, jpeg), ``image_quality`` (JPEG quality) and ``image_detail`` (the OpenAI
``detail`` field; not sent by default). A scorer may declare other defaults (the
DreamBench++ scorers follow the released DreamBench++ code). Every reply's
``system_fingerprint`` is kept and reported in the run's provenance.

Every reply is cached (:mod:`fpr.scorers.judges.cache`) before it is parsed, so a
rerun makes no request. Faults are split in two:

* the whole run cannot proceed (endpoint unreachable, key refused 401/403,
  model unknown 404, ``FPR_OFFLINE=1`` with a non-loopback endpoint): one
  :class:`~fpr.errors.FprError` line; what was already answered stays cached;
* one request failed (timeout, 429 or 5xx after the retries, 400/413/422
  rejection, a body that is not a chat completion): :class:`JudgeFailure`,
  which scorers turn into a missing value (NaN) with the reason in ``note``.
  Failures are not cached, so a rerun asks again.
"""
from __future__ import annotations

import base64
import io
import json
import re
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

from fpr import progress
from fpr.errors import FprError
from fpr.images import content_hash, load_rgb, read_bytes
from fpr.keys import fingerprint
from fpr.scorers.judges.cache import JudgeCache, default_root
from fpr.scorers.judges.config import ImageEncoding, JudgeConfig, _plain
from fpr.scorers.judges.prompts import Template


class _Unsupported(Exception):
    def __init__(self, params: list[str]):
        self.params = params
        super().__init__(", ".join(params))


class JudgeFailure(Exception):
    """One request could not be answered; ``reason`` goes into the ``note`` of a missing value."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


# --------------------------------------------------------------------------- images

class ImageRef:
    """An image to send: its content digest (for cache keys) and, only when a request is made, a PNG data URL."""

    def __init__(self, digest: str, render: Callable[[], Image.Image], label: str = "",
                 encoding: ImageEncoding | None = None):
        self.digest = digest
        self._render = render
        self.label = label
        self.encoding = encoding or ImageEncoding()
        self._url: str | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_path(cls, path: str | Path, size: int | ImageEncoding) -> "ImageRef":
        """The image at ``path`` sent at ``size`` (longer side, PNG) or with an :class:`ImageEncoding`."""
        enc = size if isinstance(size, ImageEncoding) else ImageEncoding(int(size))
        digest = f"sha256:{content_hash(read_bytes(path))}@{enc.size}{enc.tag()}"
        return cls(digest, lambda: _resized(load_rgb(path), enc), label=str(path), encoding=enc)

    @classmethod
    def from_array(cls, arr: np.ndarray, label: str = "") -> "ImageRef":
        arr = np.ascontiguousarray(arr, dtype=np.uint8)
        digest = "sha256:" + content_hash(f"{arr.shape}".encode() + arr.tobytes())
        return cls(digest, lambda: Image.fromarray(arr, "RGB"), label=label)

    def image(self) -> Image.Image:
        return self._render()

    def data_url(self) -> str:
        with self._lock:
            if self._url is None:
                buf = io.BytesIO()
                enc = self.encoding
                if enc.format == "jpeg":
                    self._render().save(buf, format="JPEG", quality=enc.quality)
                else:
                    self._render().save(buf, format="PNG")
                self._url = f"data:image/{enc.format};base64," + base64.b64encode(buf.getvalue()).decode("ascii")
            return self._url


def _resized(im: Image.Image, enc: ImageEncoding) -> Image.Image:
    if enc.resize == "square":  # DreamBench++'s image.resize((512, 512)): aspect not kept, PIL's default filter
        return im if im.size == (enc.size, enc.size) else im.resize((enc.size, enc.size), Image.BICUBIC)
    return _fit(im, enc.size)


def _fit(im: Image.Image, size: int) -> Image.Image:
    if max(im.size) <= size:
        return im
    scale = size / max(im.size)
    return im.resize((max(1, round(im.width * scale)), max(1, round(im.height * scale))), Image.BICUBIC)


def image_part(ref: ImageRef) -> dict:
    return {"type": "image", "image": ref}


def text_part(text: str) -> dict:
    return {"type": "text", "text": text}


def _convert(messages: list[dict], image: Callable[[ImageRef], dict]) -> list[dict]:
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = [image(p["image"]) if p.get("type") == "image" else p for p in content]
        out.append({**m, "content": content})
    return out


def wire_messages(messages: list[dict]) -> list[dict]:
    def part(r: ImageRef) -> dict:
        url = {"url": r.data_url()}
        if r.encoding.detail:
            url["detail"] = r.encoding.detail
        return {"type": "image_url", "image_url": url}

    return _convert(messages, part)


def key_messages(messages: list[dict]) -> list[dict]:
    return _convert(messages, lambda r: {"type": "image", "digest": r.digest})  # the digest holds the encoding


# --------------------------------------------------------------------------- replies and tallies

@dataclass
class Reply:
    content: str | None
    refusal: str | None = None
    finish_reason: str | None = None
    tool_calls: list[dict] = field(default_factory=list)  # {"id", "name", "arguments" (JSON text)}
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    samples: list[str | None] | None = None  # every choice's content when n > 1 (the first is ``content``)
    system_fingerprint: str | None = None  # the endpoint's backend configuration, when it says

    def as_json(self) -> dict:
        out = {"content": self.content, "refusal": self.refusal, "finish_reason": self.finish_reason,
               "tool_calls": self.tool_calls, "prompt_tokens": self.prompt_tokens,
               "completion_tokens": self.completion_tokens, "system_fingerprint": self.system_fingerprint}
        if self.samples is not None:
            out["samples"] = list(self.samples)
        return out


@dataclass
class Tally:
    """What one query's answers cost: answers from the cache, requests made, tokens of the answers used."""

    cached: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, reply: Reply) -> None:
        if reply.cached:
            self.cached += 1
        else:
            self.calls += 1
        self.prompt_tokens += reply.prompt_tokens
        self.completion_tokens += reply.completion_tokens

    def rows(self) -> list[tuple[str, float]]:
        return [("cached", self.cached), ("calls", self.calls), ("prompt_tokens", self.prompt_tokens),
                ("completion_tokens", self.completion_tokens)]


_REFUSAL = re.compile(r"^\W*(i\s*(?:am|'m)\s*(?:sorry|unable|not able)|i\s*(?:can(?:no|')t|won't|will not)|"
                      r"sorry,? (?:but )?i)", re.IGNORECASE)


def refusal_reason(reply: Reply) -> str | None:
    """Why a reply is a refusal (the endpoint's refusal field, a content filter, or a refusing sentence), or None."""
    if reply.refusal:
        return f"refusal: {_short(reply.refusal)}"
    if reply.finish_reason == "content_filter":
        return "refusal: the endpoint's content filter stopped the reply"
    if reply.content and _REFUSAL.match(reply.content.strip()):
        return f"refusal: {_short(reply.content)}"
    return None


def _short(text: str, n: int = 120) -> str:
    text = re.sub(r"<[^>]+>", " ", str(text))  # HTML error pages
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


# --------------------------------------------------------------------------- the client

class JudgeClient:
    def __init__(self, config: JudgeConfig, workspace: Path | None = None):
        self.config = config
        self.cache = JudgeCache(default_root(workspace))
        self._client = None
        self._lock = threading.Lock()
        self.unsupported: set[str] = set()  # request parameters the endpoint rejected (seed, temperature)
        self.fingerprints: set[str] = set()  # system_fingerprint of every reply used (cached or not)

    def _openai(self):
        with self._lock:
            if self._client is None:
                import openai

                self._client = openai.OpenAI(base_url=self.config.base_url, api_key=self.config.api_key,
                                             timeout=self.config.timeout, max_retries=self.config.max_retries)
            return self._client

    def key(self, messages: list[dict], template: Template, tools: list[dict] | None, params: dict) -> str:
        return fingerprint({"model": self.config.model, "template": template.id, "version": template.version,
                            "messages": key_messages(messages), "tools": tools or [],
                            "params": {**self.config.sampling(), **params}})

    def chat(self, messages: list[dict], *, template: Template, tools: list[dict] | None = None,
             params: dict | None = None, tally: Tally | None = None) -> Reply:
        """One chat completion, from the cache when this exact request was answered before."""
        params = dict(params or {})
        key = self.key(messages, template, tools, params)
        code = f"{template.id}@{template.version}"
        hit = self.cache.get(key, code)
        if hit is not None:
            reply = Reply(**{k: hit["reply"].get(k) for k in ("content", "refusal", "finish_reason",
                                                               "system_fingerprint")},
                          tool_calls=list(hit["reply"].get("tool_calls") or []),
                          prompt_tokens=int(hit["reply"].get("prompt_tokens") or 0),
                          completion_tokens=int(hit["reply"].get("completion_tokens") or 0), cached=True,
                          samples=hit["reply"].get("samples"))
        else:
            reply = self._request(messages, tools, params)
            self.cache.put(key, {"key": key, "model": self.config.model, "base_url": self.config.base_url,
                                 "template": template.id, "version": template.version,
                                 "params": {**self.config.sampling(), **params},
                                 "request": key_messages(messages), "tools": tools or [],
                                 "reply": reply.as_json(), "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                         time.gmtime())},
                           code)
        if reply.system_fingerprint:
            with self._lock:
                self.fingerprints.add(str(reply.system_fingerprint))
        if tally is not None:
            tally.add(reply)
        return reply

    def _request(self, messages: list[dict], tools: list[dict] | None, params: dict) -> Reply:
        """One request; ``seed``/``temperature`` are dropped (once, with a log line) if the endpoint rejects them."""
        wire = wire_messages(messages)
        while True:
            kwargs: dict = {"model": self.config.model, "messages": wire,
                            "temperature": _plain(self.config.temperature),
                            "seed": int(params.get("seed", self.config.seed))}
            if self.config.top_p is not None:
                kwargs["top_p"] = self.config.top_p
            if self.config.n != 1:
                kwargs["n"] = self.config.n
            if tools:
                kwargs["tools"] = tools
            if self.config.max_tokens:
                kwargs["max_tokens"] = self.config.max_tokens
            for name in self.unsupported:
                kwargs.pop(name, None)
            try:
                return self._send(kwargs)
            except _Unsupported as exc:
                with self._lock:
                    new = [p for p in exc.params if p not in self.unsupported]
                    self.unsupported.update(exc.params)
                if new:
                    progress.log(f"the judge endpoint rejects {' and '.join(new)}; sending requests without it")

    def _send(self, kwargs: dict) -> Reply:
        import openai

        cfg = self.config
        retries = f"after {cfg.max_retries} retr{'y' if cfg.max_retries == 1 else 'ies'}"
        try:
            resp = self._openai().chat.completions.create(**kwargs)
        except openai.APITimeoutError:
            raise JudgeFailure(f"timeout: no reply within {cfg.timeout:g} s {retries}") from None
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            raise FprError(f"cannot reach the judge endpoint ({type(cause).__name__}: {_short(str(cause), 100)})",
                           where=cfg.base_url, hint="start the server or set OPENAI_BASE_URL; answers already "
                                                    "received are cached and a rerun resumes") from None
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise FprError(f"the judge endpoint refused the API key ({exc.status_code}: {_short(_body(exc), 100)})",
                           where=cfg.base_url, hint="set OPENAI_API_KEY to a valid key") from None
        except openai.NotFoundError as exc:
            raise FprError(f"the judge endpoint does not serve model '{cfg.model}' (404: {_short(_body(exc), 100)})",
                           where=cfg.base_url, hint="check the model name (GET /v1/models lists them) and that "
                                                    "OPENAI_BASE_URL ends with /v1") from None
        except openai.RateLimitError as exc:
            raise JudgeFailure(f"rate limited (429) {retries}: {_short(_body(exc))}") from None
        except openai.APIStatusError as exc:
            code = exc.status_code
            if code == 413:
                raise JudgeFailure("request too large for the endpoint (413); lower the scorer option "
                                   "image_size") from None
            if code >= 500:
                raise JudgeFailure(f"endpoint error {code} {retries}: {_short(_body(exc))}") from None
            rejected = [p for p in ("seed", "temperature") if p in kwargs and p in _body(exc).lower()]
            if code in (400, 422) and rejected:
                raise _Unsupported(rejected) from None
            raise JudgeFailure(f"request rejected ({code}): {_short(_body(exc))}") from None
        except openai.APIResponseValidationError as exc:
            raise JudgeFailure(f"malformed reply: {_short(str(exc))}") from None
        except openai.APIError as exc:
            raise JudgeFailure(f"malformed reply: {_short(str(exc))}") from None
        except UnicodeDecodeError as exc:  # a 200 whose body is not UTF-8: this query's value is missing, not the run
            raise JudgeFailure(f"malformed reply: the body is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at "
                               f"position {exc.start})") from None
        except json.JSONDecodeError as exc:  # a 200 whose JSON body is cut off
            raise JudgeFailure(f"malformed reply: the body is not complete JSON ({exc.msg}, char {exc.pos})") from None
        return _reply(resp)


def _body(exc) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        return str(err.get("message", err)) if isinstance(err, dict) else str(err)
    text = getattr(getattr(exc, "response", None), "text", None)
    return str(text if text else getattr(exc, "message", exc))


def _reply(resp) -> Reply:
    """A chat completion -> :class:`Reply`; anything else (a string, an HTML page, truncated JSON) is malformed."""
    try:
        choice = resp.choices[0]
        msg = choice.message
        calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments or ""}
                 for c in (msg.tool_calls or [])]
        usage = getattr(resp, "usage", None)
        samples = [c.message.content for c in resp.choices] if len(resp.choices) > 1 else None
        return Reply(content=msg.content, refusal=getattr(msg, "refusal", None), finish_reason=choice.finish_reason,
                     tool_calls=calls, prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                     completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0), samples=samples,
                     system_fingerprint=getattr(resp, "system_fingerprint", None))
    except (AttributeError, IndexError, TypeError, KeyError) as exc:
        shown = resp if isinstance(resp, str) else repr(resp)
        raise JudgeFailure(f"malformed reply: not a chat completion ({_short(shown, 80)})") from exc


def for_each(items: list, fn: Callable, *, concurrency: int, desc: str) -> list:
    """``[fn(x) for x in items]`` on ``concurrency`` threads, in order; the first FprError stops the run.

    Tasks not yet started when a task raises do not start (so no request follows a whole-run fault).
    """
    results: list = [None] * len(items)
    if not items:
        return results
    stop = threading.Event()

    def guarded(x):
        if stop.is_set():
            return None
        try:
            return fn(x)
        except BaseException:
            stop.set()
            raise

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool, progress.bar(total=len(items), desc=desc,
                                                                                    unit="query") as bar:
        futures = {pool.submit(guarded, x): i for i, x in enumerate(items)}
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for f in done:
                    exc = f.exception()
                    if exc is not None:
                        raise exc
                    results[futures[f]] = f.result()
                    bar.update(1)
        except BaseException:  # a fault or Ctrl-C: start nothing more; answers so far are cached
            stop.set()
            for p in pending:
                p.cancel()
            raise
    return results
