"""``fpr serve``: the benchmark as an HTTP service a team shares (FastAPI + uvicorn).

The service has no evaluation logic of its own: every route calls the same
:mod:`fpr.api` function the CLI calls. What it adds is what a shared service
needs around them:

* :mod:`fpr.serve.config`    -- settings from ``fpr serve`` options and ``FPR_*`` variables;
* :mod:`fpr.serve.lock`      -- one server per workspace (an OS lock held for the server's lifetime);
* :mod:`fpr.serve.auth`      -- bearer tokens from ``FPR_API_TOKENS_FILE`` with scopes (read, submit, admin);
* :mod:`fpr.serve.security`  -- Host/Origin checks against web pages, security headers on every answer;
* :mod:`fpr.serve.uploads`   -- uploads on disk under a size limit, names sanitised, images checked before
  anything is queued; :mod:`fpr.serve.multipart` streams the body into them;
* :mod:`fpr.serve.jobs`      -- durable job records (JSON files, written atomically; damaged ones set aside);
* :mod:`fpr.serve.workers`   -- a bounded queue served by worker processes, one run on the device at a time;
* :mod:`fpr.serve.context`   -- what routes share, who is asking, no server paths in answers;
* :mod:`fpr.serve.handlers`  -- errors as one-line JSON; :mod:`fpr.serve.log` -- the JSON log;
* :mod:`fpr.serve.routes`    -- listings, submit, runs, docs (the ``/docs`` page ships in ``static/``);
* :mod:`fpr.serve.app`       -- the application: start-up under the lock, middleware, routers.

Only :mod:`fpr.cli.serve` imports this package, and only when ``fpr serve`` runs, so the
CLI works without the ``serve`` extra installed.
"""
