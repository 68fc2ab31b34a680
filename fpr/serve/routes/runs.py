"""One run: status and report, per-query table, HTML report, delete (``fpr report``/``export``/``runs delete``).

Reports and downloads are keyed by the run's *content version* (a hash of its stored rows'
creation times and of its auxiliary scores): a run replaced with ``--overwrite`` or rescored
gets a new version, so an HTML report written for the old one is never served again.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pandas as pd
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response

from fpr import api
from fpr.render.cells import to_jsonable
from fpr.errors import ConflictError, NotFoundError
from fpr.serve import sealing
from fpr.serve.auth import Caller
from fpr.serve.context import ServeContext, caller, check_run_name, get_ctx, reader
from fpr.serve.jobs import DONE, FAILED, PUBLIC_JOB_KEYS, QUEUED, RUNNING, now
from fpr.serve.log import log_line
from fpr.serve.routes.submit import RUN_LINKS
from fpr.files import atomic_write_text
from fpr.tables import write_table

router = APIRouter()
# The HTML report is one file with inline script, styles and data: images, and it loads nothing else.
REPORT_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; "
              "frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
PATH_COLUMNS = ("path", "reference_paths")
# A cancelled run still exists (failed, record and uploads kept): its answer links to reading and deleting it, so a
# stateful fuzzer that cancels a real run goes on to read it rather than guessing names (issue #35, item 5).
CANCELLED = {"description": "Cancelled; the run is now failed and can be read or deleted.",
             "links": {k: RUN_LINKS[k] for k in ("GetRun", "DeleteRun")}}


def content_version(ctx: ServeContext, run: str) -> str | None:
    """A short hash of what the run's reports are made of; None when no such run is stored."""
    return api.run_content_version(run, workspace=ctx.ws)  # the workflow's, not SQL of the service's own


@router.get("/v1/runs/{run}", tags=["runs"], operation_id="get_run")
def run_status(run: str, request: Request, who: Caller = Depends(reader)) -> dict:
    """Status (queued, running with progress, done, failed or damaged with the error); when done, the report."""
    ctx = get_ctx(request)
    check_run_name(run)
    job = ctx.jobs.get(run)
    sealing.require_visible_run(ctx, who, run, job)
    if job is None:
        res = api.report(run, workspace=ctx.ws)  # a run made with the CLI: 404 if there is none
        return ctx.scrub_obj(to_jsonable({"run": run, "status": DONE, "report": res.to_dict()}))
    out = {k: job.get(k) for k in PUBLIC_JOB_KEYS}
    if job["status"] == DONE:
        out["report"] = api.report(run, workspace=ctx.ws).to_dict()
    return ctx.scrub_obj(to_jsonable(out))


def client_table(ctx: ServeContext, run: str, df: pd.DataFrame) -> pd.DataFrame:
    """The per-query table as a client may see it: uploaded images by the names they were sent with, every
    other server folder as a placeholder."""
    prefix = str(ctx.config.uploads_dir / run) + "/"
    df = df.copy()
    for col in df.columns:
        if pd.api.types.is_object_dtype(df[col]) or pd.api.types.is_string_dtype(df[col]):
            df[col] = [ctx.scrub(v.replace(prefix, "")) if isinstance(v, str) else v for v in df[col]]
    return df


@router.get("/v1/runs/{run}/queries", tags=["runs"], operation_id="get_run_queries")
def run_queries(run: str, request: Request, format: str = Query("json", pattern="^(json|csv|parquet)$"),
                who: Caller = Depends(reader)):
    """The per-query table (as 'fpr export'), as JSON records, CSV or Parquet."""
    ctx = get_ctx(request)
    check_run_name(run)
    sealing.require_visible_run(ctx, who, run, ctx.jobs.get(run))
    with tempfile.TemporaryDirectory(prefix="fpr-serve-") as tmp:
        path = api.export_run(run, Path(tmp) / f"{run}.parquet", workspace=ctx.ws)
        df = client_table(ctx, run, pd.read_parquet(path))
        headers = {"ETag": f'"{content_version(ctx, run)}"', "Cache-Control": "no-cache"}
        if format == "json":
            return JSONResponse(to_jsonable(df.to_dict("records")), headers=headers)
        out = write_table(df, Path(tmp) / f"{run}-out.{format}")
        if format == "csv":
            return Response(out.read_bytes(), media_type="text/csv", headers=headers)
        return Response(out.read_bytes(), media_type="application/vnd.apache.parquet",
                        headers={**headers, "Content-Disposition": f'attachment; filename="{run}.parquet"'})


@router.get("/v1/runs/{run}/report.html", tags=["runs"], response_class=FileResponse,
            operation_id="get_run_report")
def run_report_html(run: str, request: Request, who: Caller = Depends(reader)):
    """The run's self-contained HTML report ('fpr report --run R --html'), written on the first request for each
    content version of the run; 404 while the run is not done."""
    ctx = get_ctx(request)
    check_run_name(run)
    job = ctx.jobs.get(run)
    sealing.require_visible_run(ctx, who, run, job)
    sealing.require_visible_run(ctx, who, run, job, cards=True)
    if job is not None and job["status"] != DONE:
        raise NotFoundError(f"run '{run}' has no HTML report: it is {job['status']}")
    version = content_version(ctx, run)
    if version is None:
        raise NotFoundError(f"no run named '{run}'", hint="GET /v1/runs lists them")
    folder = ctx.config.reports_dir / run
    path = folder / f"{version}.html"
    with ctx.report_lock:  # one report at a time: it embeds every query's images
        if not path.is_file():
            tmp = folder / f".{version}.tmp.html"
            api.html_report(run, tmp, workspace=ctx.ws, device=ctx.config.device)
            atomic_write_text(path, ctx.scrub(tmp.read_text(encoding="utf-8")))  # through fpr.files, the one writer
            tmp.unlink(missing_ok=True)
            for old in folder.glob("*.html"):  # earlier versions are never served again
                if old != path:
                    old.unlink(missing_ok=True)
    return FileResponse(path, media_type="text/html",
                        headers={"ETag": f'"{version}"', "Cache-Control": "no-cache",
                                 "Content-Security-Policy": REPORT_CSP})


def _may_change(who: Caller, job: dict | None, run: str, action: str = "deleting") -> None:
    """Own runs need 'submit'; another caller's run, a run made with the CLI or a damaged record needs 'admin'."""
    if job is not None and job.get("user") == who.name and job.get("user") is not None:
        who.require("submit", f"{action} run '{run}'")
        return
    owner = f"submitted by '{job['user']}'" if job is not None and job.get("user") else "not submitted by this token"
    who.require("admin", f"{action} run '{run}' ({owner})")


@router.post("/v1/runs/{run}/cancel", tags=["runs"], operation_id="cancel_run", responses={200: CANCELLED})
def cancel_run(run: str, request: Request, who: Caller = Depends(caller)) -> dict:
    """Cancel a queued or running run: it ends 'failed' with 'cancelled by <name>' and stores nothing; its record
    and uploads stay until DELETE. Own runs need scope 'submit'; anyone else's needs 'admin'."""
    ctx = get_ctx(request)
    check_run_name(run)
    with ctx.jobs.lock:
        job = ctx.jobs.get(run)
        if job is None:
            raise NotFoundError(f"no queued or running run named '{run}'", hint="GET /v1/jobs lists them")
        _may_change(who, job, run, "cancelling")
        reason = f"cancelled by '{who.name}'"
        if job["status"] == QUEUED:  # the dispatcher skips a run that is no longer queued
            ctx.jobs.update(run, status=FAILED, finished_at=now(), error=reason, progress=None)
        elif job["status"] != RUNNING or not ctx.dispatcher.cancel_running(run, job.get("worker_pid"), reason):
            raise ConflictError(f"run '{run}' is {job['status']}, not queued or running", hint="DELETE removes it")
    log_line(event="run_cancelled", run=run, user=who.name, was=job["status"])
    return {"run": run, "cancelled": True, "was": job["status"]}


@router.delete("/v1/runs/{run}", tags=["runs"], operation_id="delete_run")
def delete_run(run: str, request: Request, who: Caller = Depends(caller)) -> dict:
    """Delete (or, while queued, cancel) a run: its results, job record, uploaded images and reports. A running
    run cannot be deleted. Own runs need scope 'submit'; anyone else's, or a CLI run, needs 'admin'."""
    ctx = get_ctx(request)
    check_run_name(run)
    with ctx.jobs.lock:
        job = ctx.jobs.get(run)
        if job is None and not ctx.run_exists(run):
            raise NotFoundError(f"no run named '{run}'", hint="GET /v1/runs lists them")
        _may_change(who, job, run)
        if job is not None and job.get("benchmark") and job["status"] == DONE and not who.can("admin"):
            raise ConflictError(f"run '{run}' holds the per-query rows of submission '{job.get('submission')}' to "
                                f"benchmark '{job['benchmark']}'", hint="an admin withdraws the submission (the run "
                                                                        "stays as its evidence)")
        if job is not None and job["status"] == RUNNING:
            raise ConflictError(f"run '{run}' is running", hint=f"cancel it first (POST /v1/runs/{run}/cancel)")
        if job is not None:
            ctx.jobs.delete(run)
    try:
        api.delete_run(run, workspace=ctx.ws)
    except NotFoundError:
        if job is None:
            raise
    shutil.rmtree(ctx.config.uploads_dir / run, ignore_errors=True)
    shutil.rmtree(ctx.config.reports_dir / run, ignore_errors=True)
    log_line(event="run_deleted", run=run, user=who.name)
    return {"run": run, "deleted": True}
