"""Health and listings: as ``fpr encoders list``, ``fpr gallery list``, ``fpr index list``, ``fpr runs``."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Request

import fpr
from fpr import api
from fpr.render.cells import to_jsonable
from fpr.serve.auth import Caller
from fpr.serve import sealing
from fpr.serve.context import ServeContext, get_ctx, reader
from fpr.serve.jobs import PUBLIC_JOB_KEYS

router = APIRouter()


@router.get("/v1/health", tags=["service"])
def health(request: Request) -> dict:
    """Status, version and device (no token needed)."""
    ctx: ServeContext = get_ctx(request)
    return {"status": "ok", "version": fpr.__version__, "device": request.app.state.device,
            "workers": ctx.config.workers, "workers_ready": ctx.dispatcher.ready,
            "queued": ctx.dispatcher.waiting()}


@router.get("/v1/encoders", tags=["listings"])
def encoders(request: Request, who: Caller = Depends(reader)) -> list[dict]:
    """Registered encoders and their weights status (as 'fpr encoders list --format json')."""
    return get_ctx(request).scrub_obj(to_jsonable(api.list_encoders()))


def _workspace_listing(request: Request, lister) -> list[dict]:
    ctx = get_ctx(request)
    return ctx.scrub_obj(to_jsonable(lister(workspace=ctx.ws)))


@router.get("/v1/galleries", tags=["listings"])
def galleries(request: Request, who: Caller = Depends(reader)) -> list[dict]:
    """Stored galleries (as 'fpr gallery list --format json'); sealed benchmarks' galleries only for an admin."""
    sealed = sealing.hidden(get_ctx(request), who)["galleries"]
    return [g for g in _workspace_listing(request, api.list_galleries) if g.get("name") not in sealed]


@router.get("/v1/indices", tags=["listings"])
def indices(request: Request, who: Caller = Depends(reader)) -> list[dict]:
    """Built indices (as 'fpr index list --format json'); sealed benchmarks' indices only for an admin."""
    sealed = sealing.hidden(get_ctx(request), who)["indices"]
    return [i for i in _workspace_listing(request, api.list_indices) if i.get("name") not in sealed]


@router.get("/v1/runs", tags=["runs"])
def runs(request: Request, who: Caller = Depends(reader)) -> list[dict]:
    """Stored runs (as 'fpr runs --format json'); queued, running, failed and damaged ones are at /v1/jobs. Runs
    on a sealed benchmark's index: the caller's own, or all for an admin."""
    return sealing.visible_runs(get_ctx(request), who, _workspace_listing(request, api.list_runs))


@router.get("/v1/jobs", tags=["runs"])
def jobs(request: Request, who: Caller = Depends(reader)) -> list[dict]:
    """The service's job records, oldest first: status, submitter, times; damaged records with the reason."""
    ctx = get_ctx(request)
    jobs = sealing.visible_jobs(ctx, who, ctx.jobs.all())
    return ctx.scrub_obj([{k: job.get(k) for k in PUBLIC_JOB_KEYS} for job in jobs])
