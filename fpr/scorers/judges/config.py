"""The judge endpoint's configuration: declared client options (one declaration, scorer defaults over
them), how images are encoded, and the resolved JudgeConfig a client runs with.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlparse

from fpr import settings
from fpr.errors import FprError, InputError
from fpr.scorers.judges.prompts import Template
from fpr.scorers.options import Option, resolve

DEFAULT_BASE_URL = "https://api.openai.com/v1"


DEFAULTS = {"seed": 0, "image_size": 512, "concurrency": 4, "timeout": 60.0, "max_retries": 3, "max_tokens": None,
            "temperature": 0.0, "top_p": None, "n": 1, "image_resize": "fit", "image_format": "png",
            "image_quality": 75, "image_detail": None}


# DreamBench++'s released evaluation code (github.com/yuangpeng/dreambench_plus, commit df0b960:
# eval_concept_preservation.py, eval_prompt_following.py, utils/gpt_utils.py) calls the model with temperature=1,
# passes neither top_p nor n (the API's defaults: 1 and 1 sample), resizes every image to 512 x 512
# (image.resize((512, 512))) and sends it as JPEG at PIL's default quality (75) with detail "high".
DREAMBENCH_PLUS_DEFAULTS = {"temperature": 1.0, "top_p": None, "n": 1, "image_size": 512, "image_resize": "square",
                            "image_format": "jpeg", "image_quality": 75, "image_detail": "high"}


def client_options(defaults: dict | None = None) -> tuple[Option, ...]:
    """The judge client's options with ``defaults`` (a scorer's own) over :data:`DEFAULTS`."""
    d = {**DEFAULTS, **(defaults or {})}
    return (
        Option("model", str, None, "judge model name (else FPR_JUDGE_MODEL)"),
        Option("seed", int, d["seed"], "sampling seed sent with every request"),
        Option("image_size", int, d["image_size"], "size in px of the images sent (see image_resize)", minimum=16),
        Option("concurrency", int, d["concurrency"], "parallel requests", minimum=1),
        Option("timeout", float, d["timeout"], "seconds per request", minimum=0.001),
        Option("max_retries", int, d["max_retries"], "retries on 429/5xx/timeouts, exponential backoff", minimum=0),
        Option("max_tokens", int, d["max_tokens"], "reply length limit (none: the endpoint's)", minimum=1),
        Option("temperature", float, d["temperature"], "sampling temperature", minimum=0.0),
        Option("top_p", float, d["top_p"], "nucleus sampling mass (none: not sent, the endpoint's default)",
               minimum=0.0),
        Option("n", int, d["n"], "samples per request; a score is their mean", minimum=1),
        Option("image_resize", str, d["image_resize"], "fit: longer side to image_size, aspect kept, never "
               "enlarged; square: exactly image_size x image_size", choices=("fit", "square")),
        Option("image_format", str, d["image_format"], "encoding of the images sent", choices=("png", "jpeg")),
        Option("image_quality", int, d["image_quality"], "JPEG quality (1-95)", minimum=1),
        Option("image_detail", str, d["image_detail"], "OpenAI image detail field (none: not sent)",
               choices=("low", "high", "auto")),
    )


CLIENT_OPTION_NAMES = tuple(o.name for o in client_options())


def _plain(x: float | int | None) -> float | int | None:
    """1.0 -> 1, 0.0 -> 0 (so a key or a request body reads the same whether a number came as int or float)."""
    return int(x) if isinstance(x, float) and x.is_integer() else x


@dataclass(frozen=True)
class ImageEncoding:
    """How an image is sent: resized (fit / square) to ``size``, encoded as PNG or JPEG, optional ``detail``."""

    size: int = 512
    resize: str = "fit"
    format: str = "png"
    quality: int = 75
    detail: str | None = None

    def tag(self) -> str:
        """What, beyond the size, enters an image's digest ('' for fit/png/no detail: the digests of fpr 0.x)."""
        parts = []
        if self.resize != "fit":
            parts.append(self.resize)
        if self.format != "png":
            parts.append(f"{self.format}{self.quality if self.format == 'jpeg' else ''}")
        if self.detail:
            parts.append(f"detail={self.detail}")
        return "".join(f"|{p}" for p in parts)

    def as_json(self) -> dict:
        return {"size": self.size, "resize": self.resize, "format": self.format,
                "quality": self.quality if self.format == "jpeg" else None, "detail": self.detail}


@dataclass(frozen=True)
class JudgeConfig:
    model: str
    base_url: str
    api_key: str
    seed: int = 0
    image_size: int = 512
    concurrency: int = 4
    timeout: float = 60.0
    max_retries: int = 3
    max_tokens: int | None = None
    temperature: float = 0.0
    top_p: float | None = None
    n: int = 1
    image_resize: str = "fit"
    image_format: str = "png"
    image_quality: int = 75
    image_detail: str | None = None

    @property
    def encoding(self) -> ImageEncoding:
        return ImageEncoding(self.image_size, self.image_resize, self.image_format, self.image_quality,
                             self.image_detail)

    def sampling(self) -> dict:
        """The sampling parameters as sent (top_p and n only when they differ from the endpoint's default)."""
        out = {"temperature": _plain(self.temperature), "seed": self.seed, "max_tokens": self.max_tokens}
        if self.top_p is not None:
            out["top_p"] = _plain(self.top_p)
        if self.n != 1:
            out["n"] = self.n
        return out

    def provenance(self, *templates: Template, fingerprints: list[str] | None = None) -> dict:
        out = {"model": self.model, "base_url": self.base_url, "seed": self.seed,
               "temperature": _plain(self.temperature), "top_p": self.top_p, "n": self.n,
               "image_size": self.image_size, "image": self.encoding.as_json(), "max_tokens": self.max_tokens,
               "templates": {t.tag: t.digest for t in templates}}
        if fingerprints is not None:
            out["system_fingerprints"] = list(fingerprints)
        return out


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _offline() -> bool:
    return settings.flag("FPR_OFFLINE")


def checked_base_url(raw: str, source: str) -> str:
    """``raw`` without a trailing slash, if it is an http(s) URL that ``FPR_OFFLINE`` allows; ``source`` names
    where it came from (an environment variable or a scorer option) in the one-line error."""
    base_url = str(raw).strip().rstrip("/")
    parsed = urlparse(base_url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise InputError(f"{source} is not an http(s) URL: '{base_url}'",
                         hint=f"e.g. {source}=http://127.0.0.1:8000/v1")
    if _offline() and not _is_loopback(parsed.hostname):
        raise FprError(f"judge endpoint {base_url} is not on this machine and FPR_OFFLINE=1 forbids network use",
                       hint=f"point {source} at a loopback server (127.0.0.1) or unset FPR_OFFLINE")
    return base_url


def key_from_env(name: str) -> str:
    api_key = (settings.named_by_user(name) or "").strip()
    if not api_key:
        raise InputError(f"{name} is not set",
                         hint="set it to the endpoint's key (any non-empty value for a local server)")
    return api_key


def judge_config(scorer: str, options: dict, defaults: dict | None = None) -> JudgeConfig:
    """The endpoint, key, model and request settings for ``scorer`` (options ``<scorer>.<name>``; ``defaults``:
    the scorer's own defaults over :data:`DEFAULTS`)."""
    v = resolve(scorer, client_options(defaults), options)
    model = str(v["model"] or settings.get("FPR_JUDGE_MODEL")).strip()
    if not model:
        raise InputError(f"scorer '{scorer}' needs a judge model",
                         hint=f"pass --scorer-option {scorer}.model=NAME or set FPR_JUDGE_MODEL")
    base_url = checked_base_url(settings.raw("OPENAI_BASE_URL") or DEFAULT_BASE_URL, "OPENAI_BASE_URL")
    api_key = key_from_env("OPENAI_API_KEY")
    if v["image_quality"] > 95:
        raise InputError(f"scorer option {scorer}.image_quality must be 1-95, got {v['image_quality']}")
    return JudgeConfig(model=model, base_url=base_url, api_key=api_key,
                       **{k: v[k] for k in CLIENT_OPTION_NAMES if k != "model"})
