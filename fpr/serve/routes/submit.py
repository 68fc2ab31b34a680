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
from fpr.scorers import get_scorer
from fpr.serve import multipart
from fpr.serve.auth import Caller
from fpr.serve.context import ServeContext, get_ctx, submitter
from fpr.serve.jobs import QUEUED, now
from fpr.serve.log import log_line
from fpr.images import IMAGE_SUFFIXES
from fpr.serve.uploads import FIELD_BLANKS, MAX_FIELD_BYTES, Upload, UploadError
from fpr.store.records import NAME_RE, check_name

router = APIRouter()

BLANK = "[ \\t\\r\\n]*"  # what the service strips around a text field (uploads.FIELD_BLANKS)
NAME_BODY = NAME_RE.pattern.strip("^$")
OP_SUBMIT = "submit_run"
RUN_OPS = {"GetRun": ("get_run", "the run's status, then its report"),
           "GetRunQueries": ("get_run_queries", "its per-query table"),
           "GetRunReport": ("get_run_report", "its HTML report, once done"),
           "CancelRun": ("cancel_run", "cancel it while queued or running"),
           "DeleteRun": ("delete_run", "delete it (not while running)")}
RUN_LINKS = {link: {"operationId": op, "parameters": {"run": "$response.body#/run"}, "description": what}
             for link, (op, what) in RUN_OPS.items()}


def _choice_pattern(choices, *, optional: bool = True, listed: bool = False) -> str:
    """A pattern (the subset JSON Schema tools share with Python's re) for one of ``choices`` (or nothing, when
    ``optional``), with the blanks the service strips; ``listed``: a comma-separated list, empty items allowed.
    No choices and not optional: nothing matches (``(?!)``), as nothing is accepted."""
    alt = "|".join(c.replace(".", "\\.") for c in sorted(choices))  # names: letters, digits, . _ -
    one = f"(?:{alt})" if alt else "(?!)"
    if listed:
        return f"^{BLANK}(?:{one}{BLANK})?(?:,{BLANK}(?:{one}{BLANK})?)*$"
    return f"^{BLANK}{one}{'?' if optional else ''}{BLANK}$"


def submit_schema(indices: list[str] | None = None, scorers: list[str] | None = None) -> dict:
    """The multipart body ``POST /v1/runs`` accepts, field by field exactly as :func:`check_fields` and the upload
    checks decide it (``tests/serve/test_openapi.py`` compares them); ``indices`` and ``scorers``: the names this
    workspace and install accept now (the document served at /openapi.json fills them in, see :func:`fill_openapi`).
    What no schema can say is in the descriptions: the queries table must name only uploaded images, and every
    image must decode."""
    text = {"type": "string", "maxLength": MAX_FIELD_BYTES}
    any_name = f"^{BLANK}{NAME_BODY}{BLANK}$"  # before fill_openapi knows the names
    index = dict(text, description="Index to query (as in 'fpr query --index'); one of GET /v1/indices.",
                 pattern=any_name if indices is None else _choice_pattern(indices, optional=False))
    return {
        "type": "object",
        "required": ["index"],
        "anyOf": [{"required": ["queries"]}, {"required": ["archive"]}],
        "additionalProperties": False,
        "properties": {
            "index": index,
            "run": dict(text, pattern=f"^{BLANK}(?:{NAME_BODY})?{BLANK}$",
                        description="Run id (default, or empty: generated); a new name."),
            "scope": dict(text, pattern=_choice_pattern(api.SCOPES), description="Ranking scope (default group)."),
            "scorers": dict(text, description="Comma-separated auxiliary scorers (GET /v1/encoders lists encoders; "
                                              "'fpr scorers' the scorers).",
                            pattern="^[ -~\\t\\r\\n]*$" if scorers is None else _choice_pattern(scorers, listed=True)),
            "queries": {"type": "string", "format": "binary",
                        "description": "CSV/TSV/Parquet with path,identity,group,method[,prompt,reference_paths,"
                                       "query_id]; path values name uploaded images."},
            "images": {"type": "array", "items": {"type": "string", "format": "binary"},
                       "description": f"The query images (repeat the field), named *{', *'.join(IMAGE_SUFFIXES)}."},
            "archive": {"type": "string", "format": "binary",
                        "description": "A zip with queries.csv at its root and the images (instead of the two "
                                       "above)."},
        },
    }


def fill_openapi(doc: dict, indices: list[str], scorers: list[str]) -> dict:
    """Put the names accepted now into the served document's submission schema (a fuzzer then sends real ones)."""
    body = doc["paths"]["/v1/runs"]["post"]["requestBody"]["content"]["multipart/form-data"]
    body["schema"] = submit_schema(indices, scorers)
    return doc


SUBMITTED = {"description": "Queued; poll the Location, or follow a link with the run's name.",
             "content": {"application/json": {"schema": {
                 "type": "object", "required": ["run", "status"],
                 "properties": {"run": {"type": "string", "pattern": NAME_RE.pattern},
                                "status": {"type": "string", "enum": [QUEUED]}}}}},
             "links": RUN_LINKS}


@router.post("/v1/runs", tags=["runs"], status_code=202, operation_id=OP_SUBMIT,
             openapi_extra={"requestBody": {"required": True,
                                            "content": {"multipart/form-data": {"schema": submit_schema()}}}},
             responses={202: SUBMITTED, 413: {"description": "Too large"},
                        422: {"description": "Unusable input"}, 429: {"description": "Too many queued runs"}})
async def submit(request: Request, who: Caller = Depends(submitter)):
    """Queue a run: multipart fields index, run, scope, scorers; files queries + images, or archive."""
    job = await receive(request, who, accept, what="fields index, queries, images or archive")
    if job is None:
        return Response(status_code=400)  # nobody reads it: the client is gone
    return JSONResponse({"run": job["run"], "status": QUEUED}, status_code=202,
                        headers={"Location": f"/v1/runs/{job['run']}"})


async def receive(request: Request, who: Caller, accept_upload, *, what: str, **form) -> dict | None:
    """Stream a multipart upload to a private folder (``form``: :class:`Upload`'s fields and columns) and hand it
    to ``accept_upload(ctx, up, who)`` in a thread; None when the client disconnected. Any failure removes the
    folder."""
    ctx = get_ctx(request)
    boundary = multipart.boundary_of(request.headers.get("content-type"))
    if not boundary:
        raise UploadError(415, f"send multipart/form-data ({what})")
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > ctx.config.max_upload_bytes:
        raise UploadError(413, f"upload exceeds the limit of {ctx.config.max_upload_bytes // (1024 * 1024)} MB "
                               "(FPR_MAX_UPLOAD_MB)")
    check_quota(ctx, who)
    up = Upload.begin(ctx.config.uploads_dir, ctx.config.max_upload_bytes, **form)
    try:
        await multipart.receive(request, up, boundary)
        return await run_in_threadpool(accept_upload, ctx, up, who)
    except ClientDisconnect:
        up.discard()
        log_line(event="upload_aborted", user=who.name, bytes=up.n_bytes)
        return None
    except BaseException:
        up.discard()  # only this request's own folder: uploads in flight belong to their requests
        raise


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
    scope, scorers, run = check_fields(up.fields)
    return index, scope, scorers, run


def check_fields(fields: dict[str, str]) -> tuple[str, list[str], str]:
    """(scope, scorers, run) from the form's text fields (already stripped of FIELD_BLANKS), or the error."""
    scope = fields.get("scope") or "group"
    if scope not in api.SCOPES:
        raise InputError(f"unknown scope '{scope[:40]}'", hint=f"valid: {', '.join(api.SCOPES)}")
    # as parse_scorer_list, but each name stripped of FIELD_BLANKS only: what the schema's pattern says
    scorers = [n for n in (item.strip(FIELD_BLANKS) for item in (fields.get("scorers") or "").split(",")) if n]
    for name in scorers:
        get_scorer(name)
    run = fields.get("run") or keys.new_id("run", random_hex=6)
    check_name(run[:200], "run")
    return scope, scorers, run


def accept(ctx: ServeContext, up: Upload, who: Caller) -> dict:
    """Check the upload, name the run, move the folder into place, write the job and queue it."""
    up.extract_archive()
    up.check()
    index, scope, scorers, run = _settings(ctx, up)
    job = enqueue(ctx, up, who, run, {"index": index, "scope": scope, "scorers": ",".join(scorers)})
    log_line(event="run_queued", run=run, user=who.name, images=len(up.images), bytes=up.n_bytes)
    return job


def enqueue(ctx: ServeContext, up: Upload, who: Caller, run: str, settings: dict, before=None) -> dict:
    """Move a checked upload into ``uploads/<run>/``, write its job record (``settings``: what the worker needs)
    and queue it; ``before()`` runs under the job lock just before anything is written (a last check)."""
    with ctx.jobs.lock:
        check_quota(ctx, who)
        if ctx.jobs.get(run) is not None or ctx.run_exists(run):
            raise ConflictError(f"run '{run}' already exists", hint="choose another run name or DELETE it")
        if before is not None:
            before()
        folder = ctx.config.uploads_dir / run
        shutil.rmtree(folder, ignore_errors=True)  # left by a run deleted from the CLI; never a .partial folder
        replace_file(up.folder, folder)
        up.folder = folder
        job = ctx.jobs.put({"run": run, "status": QUEUED, "user": who.name, "token": who.token_id, **settings,
                            "queries_file": str(folder / up.queries.name), "upload_dir": str(folder),
                            "n_images": len(up.images), "created_at": now(), "started_at": None,
                            "finished_at": None, "progress": None, "error": None})
        try:
            ctx.dispatcher.submit(run)
        except queue.Full:
            ctx.jobs.delete(run)
            raise BusyError(f"the run queue is full ({ctx.config.queue_size} runs; FPR_SERVE_QUEUE)",
                            hint="retry later") from None
    return job
