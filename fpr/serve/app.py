"""The FastAPI application: route modules over :mod:`fpr.api`, errors as one-line JSON, one log line per request.

Every route but ``/v1/health`` and ``/docs`` needs ``Authorization: Bearer <token>`` when a token
file is configured. Errors answer ``{"error": "<one line>"}`` with the status of their kind: 400 bad
names or form, 401/403 auth, scope, Host or Origin, 404 not found, 409 conflict, 413 too large,
415 not multipart, 422 unusable input, 429 too many queued runs, 503 busy or queue full.
"""
from __future__ import annotations

import contextlib
import copy
import os
import shutil

from fastapi import FastAPI

import fpr
from fpr import api
from fpr.scorers import all_scorers
from fpr.serve import handlers
from fpr.serve.auth import TokenStore
from fpr.serve.config import ServeConfig
from fpr.serve.context import ServeContext
from fpr.serve.jobs import JobStore
from fpr.serve.lock import ServerLock
from fpr.serve.log import RequestLog, log_line
from fpr.serve.routes import benchmarks, docs, listings, runs, submit
from fpr.serve.security import PageGuard
from fpr.serve.workers import Dispatcher, recover

DESCRIPTION = ("Finer-Personalization Rank as a service: submit generated images, get the benchmark's numbers. "
               "Every route but /v1/health needs 'Authorization: Bearer <token>' when the server has a token file.")


def _start(ctx: ServeContext) -> None:
    """Start-up, only under the workspace's server lock: clean, recover, start the workers."""
    config = ctx.config
    ctx.lock.acquire(host=config.host, port=config.port)  # a second server stops here, having touched nothing
    config.jobs_dir.mkdir(parents=True, exist_ok=True)
    config.uploads_dir.mkdir(parents=True, exist_ok=True)
    for stale in config.uploads_dir.glob(".partial-*"):  # cut off by a crash: no other server can own them now
        shutil.rmtree(stale, ignore_errors=True)
    requeued, failed = recover(ctx.jobs, ctx.run_exists)
    ctx.dispatcher.start()
    for run in requeued:
        ctx.dispatcher.queue.put_nowait(run)
    log_line(event="started", pid=os.getpid(), host=config.host, port=config.port, workers=config.workers,
             auth=ctx.tokens.enabled, requeued=requeued, failed_on_restart=failed)


def build_context(config: ServeConfig, lock: ServerLock | None = None) -> ServeContext:
    jobs = JobStore(config.jobs_dir, create=False)
    jobs.on_damaged = lambda run, reason: log_line(event="job_record_damaged", run=run, reason=reason)
    dispatcher = Dispatcher(jobs, config.workspace, n_workers=config.workers, queue_size=config.queue_size,
                            device=config.device, lock_path=config.device_lock, log=log_line)
    tokens = TokenStore(config.tokens_file,  # a malformed file: InputError here, at start, naming the line
                        on_malformed=lambda message: log_line(event="token_file_malformed", error=message))
    return ServeContext(config, jobs, tokens, dispatcher, lock or ServerLock(config.server_lock))


def create_app(config: ServeConfig, lock: ServerLock | None = None) -> FastAPI:
    """The application; nothing on disk is touched until it starts (and holds the workspace's server lock)."""
    ctx = build_context(config, lock)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        _start(ctx)
        try:
            yield
        finally:
            ctx.dispatcher.stop()
            ctx.lock.release()

    app = FastAPI(title="fpr", version=fpr.__version__, lifespan=lifespan, description=DESCRIPTION,
                  docs_url=None, redoc_url=None)  # /docs comes from the package (routes/docs.py), not a CDN
    app.add_middleware(PageGuard, loopback_only=not ctx.tokens.enabled, origins=config.origins)
    app.add_middleware(RequestLog)  # outermost: requests the guard refuses are logged too
    app.state.ctx = ctx
    app.state.device = config.device
    handlers.install(app)
    for module in (listings, submit, runs, benchmarks, docs):
        app.include_router(module.router)
    static_openapi = app.openapi

    def openapi() -> dict:
        """The document with the index and scorer names accepted now (built afresh per request, never cached:
        an index built since is a valid value at once)."""
        doc = copy.deepcopy(static_openapi())
        indices = [r["name"] for r in api.list_indices(workspace=ctx.ws)]
        return submit.fill_openapi(doc, indices, sorted(all_scorers()))

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def serve(config: ServeConfig) -> None:
    """Run the service in this process (blocking) until interrupted; refuses at once if the workspace is served."""
    import uvicorn

    from fpr.encoders.registry import pick_device

    lock = ServerLock(config.server_lock)
    lock.acquire(host=config.host, port=config.port)
    app = create_app(config, lock)
    app.state.device = str(pick_device(config.device))
    try:
        uvicorn.run(app, host=config.host, port=config.port, log_level="warning", access_log=False,
                    server_header=False)
    finally:
        lock.release()
