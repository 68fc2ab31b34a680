"""The FastAPI application: routes over :mod:`fpr.api`, errors as one-line JSON, one log line per request.

Every route but ``/v1/health`` needs ``Authorization: Bearer <token>`` when a token
file is configured. Errors answer ``{"error": "<one line>"}`` with the status of
their kind: 400 bad names or form, 401/403 auth, 404 not found, 409 conflict,
413 too large, 415 not multipart, 422 unusable input, 429 too many queued runs,
503 busy or queue full.
"""
from __future__ import annotations

import contextlib
import json
import queue
import shutil
import sys
import tempfile
import threading
import time
import traceback
import uuid
from datetime import datetime, timezone
from pathlib import Path

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.security import HTTPBearer
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

import fpr
from fpr import api
from fpr.errors import BusyError, ConflictError, FprError, InputError, NotFoundError
from fpr.render.cells import to_jsonable
from fpr.scorers import parse_scorer_list
from fpr.serve.auth import AuthError, TokenStore
from fpr.serve.config import ServeConfig
from fpr.serve.jobs import DONE, QUEUED, RUNNING, JobStore, now
from fpr.serve.uploads import MAX_FIELD_BYTES, Upload, UploadError
from fpr.serve.workers import Dispatcher, recover
from fpr.store.records import NAME_RE, check_name

ERROR_STATUS = ((InputError, 422), (NotFoundError, 404), (ConflictError, 409), (BusyError, 503))
PUBLIC_JOB_KEYS = ("run", "status", "index", "scope", "scorers", "n_images", "created_at", "started_at",
                   "finished_at", "progress", "error")
SUBMIT_SCHEMA = {
    "type": "object",
    "required": ["index"],
    "properties": {
        "index": {"type": "string", "description": "Index to query (as in 'fpr query --index')."},
        "run": {"type": "string", "description": "Run id (default: generated)."},
        "scope": {"type": "string", "enum": list(api.SCOPES), "default": "group"},
        "scorers": {"type": "string", "description": "Comma-separated auxiliary scorers."},
        "queries": {"type": "string", "format": "binary",
                    "description": "CSV/TSV/Parquet with path,identity,group,method[,prompt,reference_paths,"
                                   "query_id]; path values name uploaded images."},
        "images": {"type": "array", "items": {"type": "string", "format": "binary"},
                   "description": "The query images (repeat the field)."},
        "archive": {"type": "string", "format": "binary",
                    "description": "A zip with queries.csv at its root and the images (instead of the two above)."},
    },
}


def log_line(**fields) -> None:
    """One JSON object per line on stderr (never a token)."""
    fields = {"ts": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z", **fields}
    sys.stderr.write(json.dumps(fields, default=str) + "\n")
    sys.stderr.flush()


class RequestLog:
    """ASGI middleware: one JSON log line per request (method, path, status, ms, client, caller name)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        scope.setdefault("state", {})
        t0 = time.perf_counter()
        status = {"code": None}

        async def send_status(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            client = scope.get("client")
            log_line(event="request", method=scope["method"], path=scope["path"], status=status["code"],
                     ms=round((time.perf_counter() - t0) * 1000, 1), client=client[0] if client else None,
                     user=scope["state"].get("user"))


def _error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def create_app(config: ServeConfig) -> FastAPI:
    config.jobs_dir.mkdir(parents=True, exist_ok=True)
    config.uploads_dir.mkdir(parents=True, exist_ok=True)
    jobs = JobStore(config.jobs_dir)
    tokens = TokenStore(config.tokens_file)
    dispatcher = Dispatcher(jobs, config.workspace, n_workers=config.workers, queue_size=config.queue_size,
                            device=config.device, lock_path=config.device_lock, log=log_line)
    ws = str(config.workspace)

    def run_exists(run: str) -> bool:
        return any(r["run_id"] == run for r in api.list_runs(workspace=ws))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        for stale in config.uploads_dir.glob(".partial-*"):  # uploads cut off by a crash
            shutil.rmtree(stale, ignore_errors=True)
        requeued, failed = recover(jobs, run_exists)
        dispatcher.start()
        for run in requeued:
            dispatcher.queue.put_nowait(run)
        log_line(event="started", workspace=ws, host=config.host, port=config.port, workers=config.workers,
                 auth=tokens.enabled, requeued=requeued, failed_on_restart=failed)
        yield
        dispatcher.stop()

    app = FastAPI(title="fpr", version=fpr.__version__, lifespan=lifespan,
                  description="Finer-Personalization Rank as a service: submit generated images, get the "
                              "benchmark's numbers. Every route but /v1/health needs 'Authorization: Bearer "
                              "<token>'.")
    app.add_middleware(RequestLog)
    app.state.config, app.state.jobs, app.state.dispatcher = config, jobs, dispatcher
    app.state.device = config.device
    bearer = HTTPBearer(auto_error=False, description="A token from FPR_API_TOKENS_FILE.")
    report_lock = threading.Lock()

    # ------------------------------------------------------------------ errors
    @app.exception_handler(FprError)
    async def fpr_error(request: Request, exc: FprError):
        status = next((s for cls, s in ERROR_STATUS if isinstance(exc, cls)), 422)
        return _error(status, exc.one_line().replace(ws, "<workspace>"))  # no server paths in answers

    @app.exception_handler(UploadError)
    async def upload_error(request: Request, exc: UploadError):
        return _error(exc.status, exc.message)

    @app.exception_handler(AuthError)
    async def auth_error(request: Request, exc: AuthError):
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return _error(exc.status, exc.message, headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return _error(exc.status_code, str(exc.detail), getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()))
        return _error(422, f"invalid request: {where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception):
        traceback.print_exc(file=sys.stderr)
        first = str(exc).splitlines()[0] if str(exc) else ""
        return _error(500, f"internal error: {type(exc).__name__}: {first}")

    # ------------------------------------------------------------------ auth
    def caller(request: Request, _cred=Depends(bearer)) -> str:
        user = tokens.check(request.headers.get("authorization"))
        request.state.user = user
        return user

    def check_run_name(run: str) -> str:
        if not NAME_RE.match(run):
            raise NotFoundError(f"no run named '{run[:80]}'")
        return run

    # ------------------------------------------------------------------ listings
    @app.get("/v1/health", tags=["service"])
    def health() -> dict:
        """Status, version and device (no token needed)."""
        return {"status": "ok", "version": fpr.__version__, "device": app.state.device,
                "workers": config.workers, "workers_ready": dispatcher.ready, "queued": dispatcher.queue.qsize()}

    @app.get("/v1/encoders", tags=["listings"])
    def encoders(user: str = Depends(caller)) -> list[dict]:
        """Registered encoders and their weights status (as 'fpr encoders list --format json')."""
        return to_jsonable(api.list_encoders())

    @app.get("/v1/galleries", tags=["listings"])
    def galleries(user: str = Depends(caller)) -> list[dict]:
        """Stored galleries (as 'fpr gallery list --format json')."""
        return to_jsonable(api.list_galleries(workspace=ws))

    @app.get("/v1/indices", tags=["listings"])
    def indices(user: str = Depends(caller)) -> list[dict]:
        """Built indices (as 'fpr index list --format json')."""
        return to_jsonable(api.list_indices(workspace=ws))

    @app.get("/v1/runs", tags=["runs"])
    def runs(user: str = Depends(caller)) -> list[dict]:
        """Stored runs (as 'fpr runs --format json'); queued and running ones are at /v1/runs/{run}."""
        return to_jsonable(api.list_runs(workspace=ws))

    # ------------------------------------------------------------------ submit
    @app.post("/v1/runs", tags=["runs"], status_code=202,
              openapi_extra={"requestBody": {"required": True,
                                             "content": {"multipart/form-data": {"schema": SUBMIT_SCHEMA}}}},
              responses={202: {"description": "Queued; poll the Location."}, 413: {"description": "Too large"},
                         422: {"description": "Unusable input"}, 429: {"description": "Too many queued runs"}})
    async def submit(request: Request, user: str = Depends(caller)):
        """Queue a run: multipart fields index, run, scope, scorers; files queries + images, or archive."""
        ctype, params = parse_options_header(request.headers.get("content-type"))
        boundary = params.get(b"boundary")
        if ctype != b"multipart/form-data" or not boundary:
            raise UploadError(415, "send multipart/form-data (fields index, queries, images or archive)")
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > config.max_upload_bytes:
            raise UploadError(413, f"upload exceeds the limit of {config.max_upload_bytes // (1024 * 1024)} MB "
                                   "(FPR_MAX_UPLOAD_MB)")
        _check_quota(user)
        up = Upload.begin(config.uploads_dir, config.max_upload_bytes)
        try:
            await _receive(request, up, boundary)
            job = await run_in_threadpool(_accept, up, user)
        except ClientDisconnect:
            up.discard()
            log_line(event="upload_aborted", user=user, bytes=up.n_bytes)
            return Response(status_code=400)  # nobody reads it: the client is gone
        except BaseException:
            up.discard()
            raise
        return JSONResponse({"run": job["run"], "status": QUEUED}, status_code=202,
                            headers={"Location": f"/v1/runs/{job['run']}"})

    def _check_quota(user: str) -> None:
        if jobs.active_for(user) >= config.max_queued_per_token:
            raise UploadError(429, f"this token already has {config.max_queued_per_token} queued or running runs "
                                   "(FPR_MAX_QUEUED_PER_TOKEN); wait for one to finish")

    async def _receive(request: Request, up: Upload, boundary: bytes) -> None:
        state: dict = {"headers": {}, "field": None, "out": None, "buf": None, "hname": b"", "hval": b""}

        def on_part_begin():
            state.update(headers={}, field=None, out=None, buf=None)

        def on_header_field(data, start, end):
            state["hname"] += data[start:end]

        def on_header_value(data, start, end):
            state["hval"] += data[start:end]

        def on_header_end():
            state["headers"][state["hname"].strip().lower()] = state["hval"].strip()
            state["hname"], state["hval"] = b"", b""

        def on_headers_finished():
            disp, opts = parse_options_header(state["headers"].get(b"content-disposition", b""))
            if disp != b"form-data" or b"name" not in opts:
                raise UploadError(400, "every multipart part needs 'Content-Disposition: form-data; name=...'")
            name = opts[b"name"].decode("utf-8", "replace")
            if b"filename" in opts:
                try:
                    filename = opts[b"filename"].decode("utf-8")
                except UnicodeDecodeError:
                    raise UploadError(400, "file name is not UTF-8") from None
                state["out"] = open(up.target(name, filename), "wb")
            else:
                state["field"], state["buf"] = name, bytearray()

        def on_part_data(data, start, end):
            chunk = data[start:end]
            if state["out"] is not None:
                state["out"].write(chunk)
            elif state["buf"] is not None:
                state["buf"] += chunk
                if len(state["buf"]) > MAX_FIELD_BYTES:
                    raise UploadError(413, f"form field '{state['field']}' is longer than {MAX_FIELD_BYTES} bytes")

        def on_part_end():
            if state["out"] is not None:
                state["out"].close()
                state["out"] = None
            elif state["field"] is not None:
                up.set_field(state["field"], bytes(state["buf"]))
                state["field"], state["buf"] = None, None

        parser = MultipartParser(boundary, {
            "on_part_begin": on_part_begin, "on_header_field": on_header_field, "on_header_value": on_header_value,
            "on_header_end": on_header_end, "on_headers_finished": on_headers_finished,
            "on_part_data": on_part_data, "on_part_end": on_part_end})
        try:
            async for chunk in request.stream():
                up.count(len(chunk))
                parser.write(chunk)
            parser.finalize()
        except MultipartParseError as exc:
            raise UploadError(400, f"malformed multipart body ({str(exc).splitlines()[0][:200]})") from None
        finally:
            if state["out"] is not None:
                state["out"].close()

    def _accept(up: Upload, user: str) -> dict:
        """Check the upload, name the run, move the folder into place, write the job and queue it."""
        up.extract_archive()
        up.check()
        index = up.fields["index"]
        if index not in {r["name"] for r in api.list_indices(workspace=ws)}:
            raise NotFoundError(f"no index named '{index[:80]}'", hint="GET /v1/indices lists them")
        scope = up.fields.get("scope") or "group"
        if scope not in api.SCOPES:
            raise InputError(f"unknown scope '{scope[:40]}'", hint=f"valid: {', '.join(api.SCOPES)}")
        scorers = parse_scorer_list(up.fields.get("scorers") or "")
        run = up.fields.get("run") or f"run-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        check_name(run[:200], "run")
        with jobs.lock:
            _check_quota(user)
            if jobs.get(run) is not None or run_exists(run):
                raise ConflictError(f"run '{run}' already exists", hint="choose another run name or DELETE it")
            folder = config.uploads_dir / run
            shutil.rmtree(folder, ignore_errors=True)  # left by a run deleted from the CLI
            up.folder.rename(folder)
            up.folder = folder
            queries = folder / up.queries.name
            job = jobs.put({"run": run, "status": QUEUED, "user": user, "index": index, "scope": scope,
                            "scorers": ",".join(scorers), "queries_file": str(queries), "upload_dir": str(folder),
                            "n_images": len(up.images), "created_at": now(), "started_at": None,
                            "finished_at": None, "progress": None, "error": None})
            try:
                dispatcher.submit(run)
            except queue.Full:
                jobs.delete(run)
                raise BusyError(f"the run queue is full ({config.queue_size} runs; FPR_SERVE_QUEUE)",
                                hint="retry later") from None
        log_line(event="run_queued", run=run, user=user, images=len(up.images), bytes=up.n_bytes)
        return job

    # ------------------------------------------------------------------ runs
    @app.get("/v1/runs/{run}", tags=["runs"])
    def run_status(run: str, user: str = Depends(caller)) -> dict:
        """Status (queued, running with progress, done, failed with the error); when done, the report JSON."""
        check_run_name(run)
        job = jobs.get(run)
        if job is None:
            res = api.report(run, workspace=ws)  # a run made with the CLI: 404 if there is none
            return to_jsonable({"run": run, "status": DONE, "report": res.as_json()})
        out = {k: job.get(k) for k in PUBLIC_JOB_KEYS}
        if job["status"] == DONE:
            out["report"] = api.report(run, workspace=ws).as_json()
        return to_jsonable(out)

    @app.get("/v1/runs/{run}/queries", tags=["runs"])
    def run_queries(run: str, format: str = Query("json", pattern="^(json|csv|parquet)$"),
                    user: str = Depends(caller)):
        """The per-query table (as 'fpr export'), as JSON records, CSV or Parquet."""
        check_run_name(run)
        with tempfile.TemporaryDirectory(prefix="fpr-serve-") as tmp:
            if format == "csv":
                path = api.export_run(run, Path(tmp) / f"{run}.csv", workspace=ws)
                return Response(path.read_bytes(), media_type="text/csv")
            path = api.export_run(run, Path(tmp) / f"{run}.parquet", workspace=ws)
            if format == "parquet":
                return Response(path.read_bytes(), media_type="application/vnd.apache.parquet",
                                headers={"Content-Disposition": f'attachment; filename="{run}.parquet"'})
            import pandas as pd

            return JSONResponse(to_jsonable(pd.read_parquet(path).to_dict("records")))

    @app.get("/v1/runs/{run}/report.html", tags=["runs"], response_class=FileResponse)
    def run_report_html(run: str, user: str = Depends(caller)):
        """The run's self-contained HTML report ('fpr report --run R --html'), written on first request to
        <workspace>/reports/<run>.html; 404 while the run is not done."""
        check_run_name(run)
        path = config.reports_dir / f"{run}.html"
        if not path.is_file():
            job = jobs.get(run)
            if job is not None and job["status"] != DONE:
                raise NotFoundError(f"run '{run}' has no HTML report: it is {job['status']}")
            with report_lock:  # one report at a time: it embeds every query's images
                if not path.is_file():
                    api.html_report(run, path, workspace=ws, device=config.device)
        return FileResponse(path, media_type="text/html")

    @app.delete("/v1/runs/{run}", tags=["runs"])
    def delete_run(run: str, user: str = Depends(caller)) -> dict:
        """Delete a run: its results, its job record and its uploaded images. A running run cannot be deleted."""
        check_run_name(run)
        with jobs.lock:
            job = jobs.get(run)
            if job is not None and job["status"] == RUNNING:
                raise ConflictError(f"run '{run}' is running", hint="delete it when it has finished")
            if job is not None:
                jobs.delete(run)
        try:
            api.delete_run(run, workspace=ws)
        except NotFoundError:
            if job is None:
                raise
        shutil.rmtree(config.uploads_dir / run, ignore_errors=True)
        (config.reports_dir / f"{run}.html").unlink(missing_ok=True)
        log_line(event="run_deleted", run=run, user=user)
        return {"run": run, "deleted": True}

    return app


def serve(config: ServeConfig) -> None:
    """Run the service in this process (blocking) until interrupted."""
    import uvicorn

    from fpr.encoders.registry import pick_device

    app = create_app(config)
    app.state.device = str(pick_device(config.device))
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning", access_log=False,
                server_header=False)

