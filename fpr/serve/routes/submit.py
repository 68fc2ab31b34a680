"""``POST /v1/runs``: stream the upload to disk, check everything, then queue the run (or leave nothing)."""
from __future__ import annotations

import queue
import shutil

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from fpr import api, keys
from fpr.errors import BusyError, ConflictError, InputError, NotFoundError
from fpr.files import replace_file
from fpr.scorers import parse_scorer_list
from fpr.serve import multipart
from fpr.serve.auth import Caller
from fpr.serve.context import ServeContext, get_ctx, submitter
from fpr.serve.jobs import QUEUED, now
from fpr.serve.log import log_line
from fpr.serve.uploads import Upload, UploadError
from fpr.store.records import check_name

router = APIRouter()

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


@router.post("/v1/runs", tags=["runs"], status_code=202,
             openapi_extra={"requestBody": {"required": True,
                                            "content": {"multipart/form-data": {"schema": SUBMIT_SCHEMA}}}},
             responses={202: {"description": "Queued; poll the Location."}, 413: {"description": "Too large"},
                        422: {"description": "Unusable input"}, 429: {"description": "Too many queued runs"}})
async def submit(request: Request, who: Caller = Depends(submitter)):
    """Queue a run: multipart fields index, run, scope, scorers; files queries + images, or archive."""
    ctx = get_ctx(request)
    boundary = multipart.boundary_of(request.headers.get("content-type"))
    if not boundary:
        raise UploadError(415, "send multipart/form-data (fields index, queries, images or archive)")
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > ctx.config.max_upload_bytes:
        raise UploadError(413, f"upload exceeds the limit of {ctx.config.max_upload_bytes // (1024 * 1024)} MB "
                               "(FPR_MAX_UPLOAD_MB)")
    check_quota(ctx, who)
    up = Upload.begin(ctx.config.uploads_dir, ctx.config.max_upload_bytes)
    try:
        await multipart.receive(request, up, boundary)
        job = await run_in_threadpool(accept, ctx, up, who)
    except ClientDisconnect:
        up.discard()
        log_line(event="upload_aborted", user=who.name, bytes=up.n_bytes)
        return Response(status_code=400)  # nobody reads it: the client is gone
    except BaseException:
        up.discard()  # only this request's own folder: uploads in flight belong to their requests
        raise
    return JSONResponse({"run": job["run"], "status": QUEUED}, status_code=202,
                        headers={"Location": f"/v1/runs/{job['run']}"})


def check_quota(ctx: ServeContext, who: Caller) -> None:
    limit = ctx.config.max_queued_per_token
    if ctx.jobs.active_for(who.name) >= limit:
        raise UploadError(429, f"this token already has {limit} queued or running runs (FPR_MAX_QUEUED_PER_TOKEN); "
                               "wait for one to finish")


def _settings(ctx: ServeContext, up: Upload) -> tuple[str, str, list[str], str]:
    """(index, scope, scorers, run) from the form, each checked as ``fpr query`` would."""
    index = up.fields["index"]
    if index not in {r["name"] for r in api.list_indices(workspace=ctx.ws)}:
        raise NotFoundError(f"no index named '{index[:80]}'", hint="GET /v1/indices lists them")
    scope = up.fields.get("scope") or "group"
    if scope not in api.SCOPES:
        raise InputError(f"unknown scope '{scope[:40]}'", hint=f"valid: {', '.join(api.SCOPES)}")
    scorers = parse_scorer_list(up.fields.get("scorers") or "")
    run = up.fields.get("run") or keys.new_id("run", random_hex=6)
    check_name(run[:200], "run")
    return index, scope, scorers, run


def accept(ctx: ServeContext, up: Upload, who: Caller) -> dict:
    """Check the upload, name the run, move the folder into place, write the job and queue it."""
    up.extract_archive()
    up.check()
    index, scope, scorers, run = _settings(ctx, up)
    with ctx.jobs.lock:
        check_quota(ctx, who)
        if ctx.jobs.get(run) is not None or ctx.run_exists(run):
            raise ConflictError(f"run '{run}' already exists", hint="choose another run name or DELETE it")
        folder = ctx.config.uploads_dir / run
        shutil.rmtree(folder, ignore_errors=True)  # left by a run deleted from the CLI; never a .partial folder
        replace_file(up.folder, folder)
        up.folder = folder
        job = ctx.jobs.put({"run": run, "status": QUEUED, "user": who.name, "token": who.token_id, "index": index,
                            "scope": scope, "scorers": ",".join(scorers),
                            "queries_file": str(folder / up.queries.name), "upload_dir": str(folder),
                            "n_images": len(up.images), "created_at": now(), "started_at": None,
                            "finished_at": None, "progress": None, "error": None})
        try:
            ctx.dispatcher.submit(run)
        except queue.Full:
            ctx.jobs.delete(run)
            raise BusyError(f"the run queue is full ({ctx.config.queue_size} runs; FPR_SERVE_QUEUE)",
                            hint="retry later") from None
    log_line(event="run_queued", run=run, user=who.name, images=len(up.images), bytes=up.n_bytes)
    return job
