"""``fpr serve``: the benchmark as an HTTP service a team shares (FastAPI + uvicorn).

The service has no evaluation logic of its own: every route calls the same
:mod:`fpr.api` function the CLI calls. What it adds is what a shared service
needs around them:

* :mod:`fpr.serve.config`  -- settings from ``fpr serve`` options and ``FPR_*`` variables;
* :mod:`fpr.serve.auth`    -- bearer tokens from ``FPR_API_TOKENS_FILE`` (constant-time compare,
  re-read when the file changes);
* :mod:`fpr.serve.uploads` -- multipart uploads streamed to disk under a size limit, names
  sanitised, images checked before anything is queued;
* :mod:`fpr.serve.jobs`    -- durable job records (JSON files, written atomically);
* :mod:`fpr.serve.workers` -- a bounded queue served by worker processes, one run on the
  device at a time;
* :mod:`fpr.serve.app`     -- the FastAPI application (routes, errors, request log).

Only :mod:`fpr.cli.serve` imports this package, and only when ``fpr serve`` runs, so the
CLI works without the ``serve`` extra installed.
"""
