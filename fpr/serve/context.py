"""What every route shares: settings, job records, tokens, the dispatcher; who is asking; no server paths out."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import Depends, Request
from fastapi.security import HTTPBearer

from fpr import api, settings
from fpr.errors import NotFoundError
from fpr.serve.auth import Caller, TokenStore
from fpr.serve.config import ServeConfig
from fpr.serve.jobs import JobStore
from fpr.serve.lock import ServerLock
from fpr.serve.workers import Dispatcher
from fpr.store.records import NAME_RE

BEARER = HTTPBearer(auto_error=False, description="A token from FPR_API_TOKENS_FILE.")


def _path_roots(workspace: Path) -> list[tuple[str, str]]:
    """Server folders that may appear in texts, most specific first, with what a client sees instead."""
    roots = [(workspace, "<workspace>")]
    for var, shown in (("FPR_WEIGHTS_DIR", "<weights>"), ("FPR_CACHE_DIR", "<cache>")):
        if settings.raw(var):
            roots.append((settings.get(var), shown))
    home = Path.home()
    roots += [(home / ".cache" / "fpr" / "weights", "<weights>"), (home / ".cache" / "fpr", "<cache>"),
              (home / ".cache" / "huggingface", "<hf-cache>"), (home, "~")]
    out = []
    for path, shown in roots:
        for variant in {str(path), str(path.resolve())}:
            if len(variant) > 1:
                out.append((variant, shown))
    return sorted(out, key=lambda r: -len(r[0]))


@dataclass
class ServeContext:
    config: ServeConfig
    jobs: JobStore
    tokens: TokenStore
    dispatcher: Dispatcher
    lock: ServerLock
    report_lock: threading.Lock = field(default_factory=threading.Lock)
    roots: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.roots = _path_roots(self.config.workspace)

    @property
    def ws(self) -> str:
        return str(self.config.workspace)

    def run_exists(self, run: str) -> bool:
        return any(r["run_id"] == run for r in api.list_runs(workspace=self.ws))

    def scrub(self, text: str) -> str:
        """``text`` with server folders replaced by placeholders (``<workspace>``, ``<cache>``, ``~``)."""
        for path, shown in self.roots:
            if path in text:
                text = text.replace(path, shown)
        return text

    def scrub_obj(self, obj):
        """:meth:`scrub` over every string of a JSON-like value."""
        if isinstance(obj, str):
            return self.scrub(obj)
        if isinstance(obj, dict):
            return {k: self.scrub_obj(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.scrub_obj(v) for v in obj]
        return obj


def get_ctx(request: Request) -> ServeContext:
    return request.app.state.ctx


def caller(request: Request, _cred=Depends(BEARER)) -> Caller:
    """The token's caller (401/403 otherwise); its name goes into the request log."""
    who = get_ctx(request).tokens.check(request.headers.get("authorization"))
    request.state.user = who.name
    return who


def reader(who: Caller = Depends(caller)) -> Caller:
    who.require("read", "reading")
    return who


def submitter(who: Caller = Depends(caller)) -> Caller:
    who.require("submit", "submitting a run")
    return who


def check_run_name(run: str) -> str:
    if not NAME_RE.match(run):
        raise NotFoundError(f"no run named '{run[:80]}'")
    return run
