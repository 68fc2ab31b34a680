"""Every environment variable fpr reads, declared once: its type, default and meaning.

fpr's own variables (``FPR_*``) are :data:`SETTINGS`; the variables of other tools that fpr honours
(Hugging Face, the OpenAI client, proxies, the terminal) are :data:`OTHER`. Code reads them here and
nowhere else (``tests/test_ownership.py`` fails on ``os.environ`` outside this module):

- :func:`get` ``(name)``: the value as its declared type, the default where the variable is unset or blank;
  a value of the wrong type is one line naming the variable (an :class:`~fpr.errors.InputError`);
- :func:`flag` ``(name)``: a true/false setting, by the one rule for booleans: unset or blank is the
  default; ``0``, ``false``, ``no`` and ``off`` (any case, spaces ignored) are false; any other value is true;
- :func:`raw` ``(name)``: the text as set (None when unset), for :data:`OTHER` variables;
- :func:`named_by_user` ``(name)``: a variable whose name an option gives (a judge's API key);
- :func:`set_default` ``(name, value)``: set a variable for libraries fpr starts (Ray's logging).

The table in ``docs/settings.md`` is :func:`table_markdown` (a test checks that the two agree). This module
imports nothing but :mod:`fpr.errors`: ``fpr --help`` reads it without loading NumPy.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fpr.errors import InputError

FALSE = ("0", "false", "no", "off")  # the one rule for booleans: these (any case) are false, other values true


@dataclass(frozen=True)
class Setting:
    name: str
    type: str  # flag | int | float | text | path | list (comma-separated)
    default: Any
    doc: str
    minimum: float | None = None


_DECLARED = [
    # where things live
    Setting("FPR_WORKSPACE", "path", "fpr-workspace", "the workspace folder (`--workspace` overrides it)"),
    Setting("FPR_CACHE_DIR", "path", "~/.cache/fpr",
            "caches that may be deleted freely: embeddings, world renders, per-query scores, judge replies "
            "without a workspace"),
    Setting("FPR_WEIGHTS_DIR", "path", "~/.cache/fpr/weights", "encoder and tool weights, `<dir>/<id>/`"),
    # switches
    Setting("FPR_OFFLINE", "flag", False, "never touch the network (weights from disk only; judges on loopback only)"),
    Setting("FPR_QUIET", "flag", False, "no progress lines on stderr (as `-q`); warnings still show"),
    Setting("FPR_DEBUG", "flag", False, "show tracebacks (as `--debug`)"),
    Setting("FPR_SCORE_CACHE", "flag", True, "keep deterministic scorers' per-query values in `$FPR_CACHE_DIR/scores`"),
    Setting("FPR_WORLD_CACHE", "flag", True, "keep rendered worlds in `$FPR_CACHE_DIR/worlds`"),
    # engines and memory
    Setting("FPR_EVAL_BLOCK_MB", "float", 256.0, "MiB of query x gallery scores held per block of `fpr query`",
            minimum=0.0),
    Setting("FPR_EMBED_KEEP_MB", "float", 512.0, "MiB of decoded images kept between embedding passes", minimum=0.0),
    Setting("FPR_METRICS_ENGINE", "text", "auto", "ranking metrics engine: auto, numba or numpy"),
    Setting("FPR_SCORES_ENGINE", "text", "auto", "exact-score engine: auto, numba or numpy"),
    Setting("FPR_EXACT_PATH", "text", "auto", "exact-score path of `fpr query`: auto, recheck (candidates re-checked) or full (every score exact)"),
    # the workspace
    Setting("FPR_LOCK_TIMEOUT", "float", 120.0, "seconds a writer waits for the workspace lock", minimum=0.0),
    Setting("FPR_INDEX_GRACE_S", "float", 300.0, "seconds a replaced index's files are kept for readers",
            minimum=0.0),
    # judges
    Setting("FPR_JUDGE_MODEL", "text", "", "the judge model of the model-judge scorers (else `<scorer>.model`)"),
    # the service
    Setting("FPR_API_TOKENS_FILE", "path", "", "`fpr serve`: file of `token [name] [scope=...]` lines"),
    Setting("FPR_MAX_UPLOAD_MB", "int", 1024, "`fpr serve`: largest upload in MiB", minimum=1),
    Setting("FPR_MAX_QUEUED_PER_TOKEN", "int", 8, "`fpr serve`: runs one token may have queued or running",
            minimum=1),
    Setting("FPR_SERVE_QUEUE", "int", 64, "`fpr serve`: runs the queue holds", minimum=1),
    Setting("FPR_BENCHMARK_DAILY_SUBMISSIONS", "int", 5,
            "`fpr serve`: submissions to sealed benchmarks one token may make per UTC day", minimum=1),
    Setting("FPR_SERVE_ORIGINS", "list", (), "`fpr serve`: web origins (`scheme://host[:port]`) allowed to call the API"),
    # tests
    Setting("FPR_RAY_CRASH_ONCE", "text", "", "tests: a file holding the shard number at which one Ray worker crashes once"),
]
SETTINGS: dict[str, Setting] = {s.name: s for s in _DECLARED}

# Variables of other tools that fpr reads (or sets for a library it starts), with what fpr does with them.
OTHER: dict[str, str] = {
    "HF_HUB_OFFLINE": "as `FPR_OFFLINE` for weights",
    "HF_HUB_CACHE": "the Hugging Face hub cache searched for weights",
    "HUGGINGFACE_HUB_CACHE": "the same (older name)",
    "HF_HOME": "the Hugging Face home (`<HF_HOME>/hub`)",
    "XDG_CACHE_HOME": "where the Hugging Face cache is when none of the above is set",
    "HF_ENDPOINT": "the Hugging Face server probed before a download",
    "HTTPS_PROXY": "a proxy: the download probe is skipped",
    "https_proxy": "the same",
    "ALL_PROXY": "the same",
    "all_proxy": "the same",
    "OPENAI_BASE_URL": "the judges' endpoint",
    "OPENAI_API_KEY": "the judges' key",
    "COLUMNS": "the width of printed tables",
    "PYTHONPATH": "passed on to a local Ray runtime's workers",
    "RAY_BACKEND_LOG_LEVEL": "set to `fatal` under `--quiet` before Ray starts",
    "NUMBA_CACHE_DIR": "where numba keeps compiled kernels (read by numba; with it, the package's `__pycache__` "
                       "and the user cache all unwritable, fpr compiles them in memory and says so once)",
}


def _declared(name: str) -> None:
    if name not in SETTINGS and name not in OTHER:
        raise KeyError(f"{name} is not declared in fpr.settings")  # a programming error, not a user's


def raw(name: str) -> str | None:
    """The variable's text as set, None when unset (declared names only)."""
    _declared(name)
    return os.environ.get(name)


def named_by_user(name: str) -> str | None:
    """A variable the user named in an option (a judge's key, ``<scorer>.api_key_env``): not declared here,
    since its name is the user's choice; None when unset."""
    return os.environ.get(name)


def _text(name: str) -> str | None:
    value = raw(name)
    return value.strip() if value is not None and value.strip() else None


def is_false(text: str) -> bool:
    """The one rule for booleans: ``0``, ``false``, ``no``, ``off`` (any case, spaces ignored) are false."""
    return text.strip().lower() in FALSE


def flag(name: str) -> bool:
    """A true/false variable: unset or blank is its default, else :func:`is_false` decides."""
    text = _text(name)
    if text is None:
        return bool(SETTINGS[name].default) if name in SETTINGS else False
    return not is_false(text)


def get(name: str) -> Any:
    """The value of a declared ``FPR_*`` variable as its type (the default where unset or blank)."""
    s = SETTINGS[name]
    if s.type == "flag":
        return flag(name)
    text = _text(name)
    if s.type == "path":
        return Path(text or s.default).expanduser() if (text or s.default) else None
    if text is None:
        return s.default
    if s.type == "text":
        return text
    if s.type == "list":
        return tuple(p.strip() for p in text.split(",") if p.strip())
    try:
        value = int(text) if s.type == "int" else float(text)
    except ValueError:
        raise InputError(f"{name} must be {'an integer' if s.type == 'int' else 'a number'}, got '{text}'",
                         hint=f"unset it for the default ({s.default})") from None
    if s.minimum is not None and value < s.minimum:
        raise InputError(f"{name} must be at least {s.minimum:g}, got {value:g}",
                         hint=f"unset it for the default ({s.default})")
    return value


def set_default(name: str, value: str) -> None:
    """Set ``name`` for a library fpr starts, unless the user set it."""
    _declared(name)
    os.environ.setdefault(name, value)


def _shown(s: Setting) -> str:
    if s.type == "flag":
        return "on" if s.default else "off"
    if s.default in ("", ()):
        return "unset"
    return f"`{s.default:g}`" if isinstance(s.default, float) else f"`{s.default}`"


def table_markdown() -> str:
    """The Markdown table of :data:`SETTINGS` (docs/settings.md holds it)."""
    lines = ["| variable | type | default | what it does |", "|---|---|---|---|"]
    lines += [f"| `{s.name}` | {s.type} | {_shown(s)} | {s.doc} |" for s in _DECLARED]
    return "\n".join(lines)


__all__ = ["FALSE", "OTHER", "SETTINGS", "Setting", "flag", "get", "is_false", "named_by_user", "raw", "set_default",
           "table_markdown"]
