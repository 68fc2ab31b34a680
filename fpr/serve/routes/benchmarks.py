"""Sealed benchmarks (``fpr benchmark``): register (admin), submit generations with a method card (submit, a daily
limit per token), the leaderboard as JSON and HTML, a submission's row and hash, withdraw (admin), history.

Every answer is built from :mod:`fpr.workflows.benchmarks`' public rows: fingerprints, checksums, cards and
scores, never a gallery path or image. A submission is queued like a run (the same upload checks, the same
workers); its worker calls ``submit_to_benchmark``, which scores it with ``run_query``.
"""
from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, Field

from fpr import api, keys
from fpr.errors import NotFoundError
from fpr.render.cells import to_jsonable
from fpr.render.leaderboard import leaderboard_html
from fpr.serve.auth import Caller
from fpr.serve.context import ServeContext, caller, get_ctx, reader, submitter
from fpr.serve.jobs import PUBLIC_JOB_KEYS, QUEUED
from fpr.serve.log import log_line
from fpr.serve.routes.submit import BLANK, NAME_BODY, enqueue, receive
from fpr.serve.uploads import MAX_FIELD_BYTES, Upload
from fpr.store.records import NAME_RE
from fpr.workflows.benchmarks import CARD_FIELDS, QUERY_COLUMNS

router = APIRouter()
PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
TAGS = ["benchmarks"]
SUBMISSION_OPS = {"GetSubmission": ("get_submission", "the submission's status, then its row and hash"),
                  "GetSubmissionCards": ("get_submission_cards", "its redacted retrieval cards (own or admin)"),
                  "WithdrawSubmission": ("withdraw_submission", "withdraw it (admin)")}
SUBMISSION_LINKS = {link: {"operationId": op, "parameters": {"submission": "$response.body#/submission"},
                           "description": what} for link, (op, what) in SUBMISSION_OPS.items()}


class BenchmarkIn(BaseModel):
    name: str = Field(pattern=NAME_RE.pattern, description="The benchmark's name.")
    index: str = Field(pattern=NAME_RE.pattern, description="The index (gallery + encoder) it scores against.")
    scope: str = Field("group", pattern="^(group|all)$", description="Ranking scope.")
    scorers: list[str] = Field(default_factory=list, max_length=16,
                               description="Auxiliary scorers run on every submission, e.g. copy-paste.")


class WithdrawIn(BaseModel):
    reason: str = Field(min_length=1, max_length=2000, description="Why, in one line (kept in the history).")


def card_schema() -> dict:
    """The multipart body of a submission: the method card's text fields and the queries with their images."""
    text = {"type": "string", "maxLength": MAX_FIELD_BYTES}
    return {
        "type": "object", "required": ["method", "description"], "additionalProperties": False,
        "anyOf": [{"required": ["queries"]}, {"required": ["archive"]}],
        "properties": {
            "method": dict(text, pattern=f"^{BLANK}{NAME_BODY}{BLANK}$", description="The method's name (a row)."),
            "description": dict(text, description="One line saying what the method is (required)."),
            "link": dict(text, description="An http(s) URL: paper, code or model card."),
            "params": dict(text, description="A JSON object of the method's settings, e.g. {\"steps\": 50}."),
            "queries": {"type": "string", "format": "binary",
                        "description": "CSV/TSV/Parquet with path,identity,group[,prompt,reference_paths,query_id]; "
                                       "path values name uploaded images; the method is the card's."},
            "images": {"type": "array", "items": {"type": "string", "format": "binary"},
                       "description": "The generated images (repeat the field); all of them are hashed."},
            "archive": {"type": "string", "format": "binary",
                        "description": "A zip with queries.csv at its root and the images (instead of the two "
                                       "above)."},
        },
    }


SUBMITTED = {"description": "Queued; poll GET /v1/submissions/{submission}.",
             "content": {"application/json": {"schema": {
                 "type": "object", "required": ["submission", "run", "status"],
                 "properties": {"submission": {"type": "string", "pattern": NAME_RE.pattern},
                                "run": {"type": "string", "pattern": NAME_RE.pattern},
                                "status": {"type": "string", "enum": [QUEUED]}}}}},
             "links": SUBMISSION_LINKS}


def _bench(ctx: ServeContext, name: str) -> dict:
    found = [b for b in api.list_benchmarks(workspace=ctx.ws) if b["name"] == name]
    if not found:
        raise NotFoundError(f"no benchmark named '{name[:80]}'", hint="GET /v1/benchmarks lists them")
    return found[0]


@router.get("/v1/benchmarks", tags=TAGS, operation_id="list_benchmarks")
def benchmarks(request: Request, who: Caller = Depends(reader)) -> list[dict]:
    """Sealed benchmarks: name, encoder, scope, scorers, gallery fingerprint, encoder checksum, submissions."""
    return to_jsonable(api.list_benchmarks(workspace=get_ctx(request).ws))


@router.post("/v1/benchmarks", tags=TAGS, status_code=201, operation_id="register_benchmark")
def register(body: BenchmarkIn, request: Request, who: Caller = Depends(caller)) -> dict:
    """Register an index (its gallery and encoder) as a sealed benchmark (scope admin; as 'fpr benchmark
    register')."""
    who.require("admin", "registering a benchmark")
    ctx = get_ctx(request)
    row = api.register_benchmark(body.name, body.index, scope=body.scope, scorers=body.scorers, by=who.name,
                                 workspace=ctx.ws)
    log_line(event="benchmark_registered", benchmark=body.name, user=who.name)
    return to_jsonable(row)


@router.post("/v1/benchmarks/{benchmark}/submissions", tags=TAGS, status_code=202, operation_id="submit_to_benchmark",
             openapi_extra={"requestBody": {"required": True,
                                            "content": {"multipart/form-data": {"schema": card_schema()}}}},
             responses={202: SUBMITTED, 413: {"description": "Too large"}, 422: {"description": "Unusable input"},
                        429: {"description": "Daily submissions used up, or too many queued runs"}})
async def submit(benchmark: str, request: Request, who: Caller = Depends(submitter)):
    """Submit generations with a method card (fields method, description, link, params; files queries + images, or
    archive); at most FPR_BENCHMARK_DAILY_SUBMISSIONS per token and UTC day."""
    ctx = get_ctx(request)
    bench = _bench(ctx, benchmark)
    holder = who.token_id or who.name
    api.check_submission_slot(holder, ctx.config.daily_submissions, workspace=ctx.ws)  # before reading the body

    def accept(ctx: ServeContext, up: Upload, who: Caller) -> dict:
        up.extract_archive()
        up.check()
        card = api.check_card(up.fields)
        sid = keys.new_id("sub", random_hex=6)
        job = enqueue(ctx, up, who, f"bench-{sid}",
                      {"index": None, "scope": bench["scope"], "scorers": ",".join(bench["scorers"] or []),
                       "benchmark": benchmark, "submission": sid, "card": asdict(card)},
                      before=lambda: api.take_submission_slot(holder, ctx.config.daily_submissions, workspace=ctx.ws))
        log_line(event="submission_queued", benchmark=benchmark, submission=sid, user=who.name,
                 images=len(up.images))
        return job

    job = await receive(request, who, accept, what="fields method, description, link, params; queries and images, "
                                                   "or archive", text_fields=CARD_FIELDS, required=("method",),
                        columns=QUERY_COLUMNS)
    if job is None:
        return Response(status_code=400)  # nobody reads it: the client is gone
    sid = job["submission"]
    return JSONResponse({"submission": sid, "run": job["run"], "status": QUEUED}, status_code=202,
                        headers={"Location": f"/v1/submissions/{sid}"})


@router.get("/v1/benchmarks/{benchmark}/leaderboard", tags=TAGS, operation_id="get_leaderboard")
def leaderboard(benchmark: str, request: Request, who: Caller = Depends(reader)) -> dict:
    """Methods ranked by mAP (95% interval), with AP = 1 share, copy-paste rate, Sim, date, id and hash; withdrawn
    rows are in /history."""
    ctx = get_ctx(request)
    _bench(ctx, benchmark)
    return to_jsonable(api.leaderboard(benchmark, workspace=ctx.ws))


@router.get("/v1/benchmarks/{benchmark}/leaderboard.html", tags=TAGS, operation_id="get_leaderboard_page",
            response_class=HTMLResponse)
def leaderboard_page(benchmark: str, request: Request, who: Caller = Depends(reader)):
    """The leaderboard as one HTML page (no script, no images)."""
    ctx = get_ctx(request)
    _bench(ctx, benchmark)
    page = leaderboard_html(to_jsonable(api.leaderboard(benchmark, workspace=ctx.ws)))
    return HTMLResponse(page, headers={"Content-Security-Policy": PAGE_CSP, "Cache-Control": "no-cache"})


@router.get("/v1/benchmarks/{benchmark}/history", tags=TAGS, operation_id="get_benchmark_history")
def history(benchmark: str, request: Request, who: Caller = Depends(reader)) -> list[dict]:
    """Every submission, oldest first; withdrawn ones with who withdrew them, when and why."""
    ctx = get_ctx(request)
    _bench(ctx, benchmark)
    return to_jsonable(api.submission_history(benchmark, workspace=ctx.ws))


def _check_id(submission: str) -> str:
    if not NAME_RE.fullmatch(submission):
        raise NotFoundError(f"no submission named '{submission[:80]}'")
    return submission


@router.get("/v1/submissions/{submission}", tags=TAGS, operation_id="get_submission")
def submission(submission: str, request: Request, who: Caller = Depends(reader)) -> dict:
    """While queued or running (or failed): the job's status; once scored: the row with its images' sha256 and the
    submission hash ('fpr benchmark verify' recomputes it from the images)."""
    ctx = get_ctx(request)
    sid = _check_id(submission)
    job = ctx.jobs.get(f"bench-{sid}")
    try:
        row = api.get_submission(sid, workspace=ctx.ws)
    except NotFoundError:
        if job is None or job.get("submission") != sid:
            raise
        return ctx.scrub_obj(to_jsonable({k: job.get(k) for k in PUBLIC_JOB_KEYS}))
    return to_jsonable({"status": "withdrawn" if row.get("withdrawn_at") else "scored", **row})


@router.get("/v1/submissions/{submission}/cards", tags=TAGS, operation_id="get_submission_cards")
def cards(submission: str, request: Request, who: Caller = Depends(reader)) -> list[dict]:
    """The submission's retrieval cards, redacted: per query its identity, AP and top-k as (rank, identity, score,
    relevant), never a gallery path or image. The submitter's own, or any for an admin."""
    ctx = get_ctx(request)
    sid = _check_id(submission)
    row = api.get_submission(sid, workspace=ctx.ws)
    if row["submitter"] != who.name and not who.can("admin"):
        raise NotFoundError(f"no submission named '{sid}' of '{who.name}'", hint="the cards of another caller's "
                                                                                 "submission are not shown")
    return to_jsonable(api.submission_cards(sid, workspace=ctx.ws))


@router.post("/v1/submissions/{submission}/withdraw", tags=TAGS, operation_id="withdraw_submission")
def withdraw(submission: str, body: WithdrawIn, request: Request, who: Caller = Depends(caller)) -> dict:
    """Hide a row from the leaderboard (scope admin); it stays in the history with who, when and why."""
    who.require("admin", "withdrawing a submission")
    ctx = get_ctx(request)
    row = api.withdraw_submission(_check_id(submission), reason=body.reason, by=who.name, workspace=ctx.ws)
    log_line(event="submission_withdrawn", submission=submission, user=who.name)
    return to_jsonable(row)
