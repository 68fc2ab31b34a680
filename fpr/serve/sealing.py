"""What a sealed benchmark hides from callers without scope ``admin``: its gallery and index in the listings,
other callers' runs against it (their per-query tables), and every run's retrieval cards (the HTML report shows
gallery images). A submitter sees its own submissions' runs (query-side rows only) and the leaderboards."""
from __future__ import annotations

from fpr import api
from fpr.errors import NotFoundError
from fpr.serve.auth import AuthError, Caller
from fpr.serve.context import ServeContext


def hidden(ctx: ServeContext, who: Caller) -> dict[str, set[str]]:
    """The sealed index and gallery names ``who`` may not see (none for an admin)."""
    if who.can("admin"):
        return {"indices": set(), "galleries": set()}
    return api.sealed_names(workspace=ctx.ws)


def _own(job: dict | None, who: Caller) -> bool:
    return job is not None and job.get("user") is not None and job.get("user") == who.name


def _sealed_job(job: dict, sealed: set[str]) -> bool:
    return bool(job.get("benchmark")) or job.get("index") in sealed


def _sealed_run(ctx: ServeContext, run: str, job: dict | None, sealed: set[str]) -> bool:
    if job is not None and _sealed_job(job, sealed):
        return True
    if not sealed:  # nothing sealed: no stored run can be hidden, and listing them all per poll cost ~0.8 s at load
        return False
    return any(r["run_id"] == run and r["index"] in sealed for r in api.list_runs(workspace=ctx.ws))


def require_visible_run(ctx: ServeContext, who: Caller, run: str, job: dict | None, *, cards: bool = False) -> None:
    """404 for another caller's run on a sealed index; 403 for the retrieval cards (``cards``) of any such run."""
    if who.can("admin") or not _sealed_run(ctx, run, job, hidden(ctx, who)["indices"]):
        return
    if cards:
        raise AuthError(403, f"run '{run}' is scored on a sealed benchmark: its retrieval cards (gallery images) are "
                             "not served; GET /v1/submissions/<id>/cards has a submission's cards without them")
    if not _own(job, who):
        raise NotFoundError(f"no run named '{run}'", hint="GET /v1/runs lists them")


def visible_runs(ctx: ServeContext, who: Caller, rows: list[dict]) -> list[dict]:
    sealed = hidden(ctx, who)["indices"]
    if not sealed:
        return rows
    return [r for r in rows if r.get("index") not in sealed or _own(ctx.jobs.get(r["run_id"]), who)]


def visible_jobs(ctx: ServeContext, who: Caller, jobs: list[dict]) -> list[dict]:
    sealed = hidden(ctx, who)["indices"]
    if who.can("admin"):
        return jobs
    return [j for j in jobs if not _sealed_job(j, sealed) or _own(j, who)]
