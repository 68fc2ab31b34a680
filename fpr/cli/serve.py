"""``fpr serve``: the benchmark as an HTTP service (needs the ``serve`` extra: FastAPI, uvicorn)."""
from __future__ import annotations

import importlib.util

import click

from fpr.cli.main import cli, device_option
from fpr.errors import InputError


@cli.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback needs FPR_API_TOKENS_FILE.")
@click.option("--port", type=int, default=8080, show_default=True, help="TCP port to listen on.")
@click.option("--workers", type=int, default=1, show_default=True,
              help="Worker processes running queued runs (one run at a time on the device).")
@device_option()
@click.pass_context
def serve_cmd(ctx, host, port, workers, device) -> None:
    """Serve the workspace over HTTP: submit runs, poll them, fetch reports (OpenAPI at /docs).

    Environment: FPR_API_TOKENS_FILE (one 'token [name]' per line), FPR_MAX_UPLOAD_MB (1024),
    FPR_MAX_QUEUED_PER_TOKEN (8), FPR_SERVE_QUEUE (64).
    """
    missing = [m for m in ("fastapi", "uvicorn", "python_multipart") if importlib.util.find_spec(m) is None]
    if missing:
        raise InputError(f"'fpr serve' needs {', '.join(missing)}", hint="pip install 'fpr[serve]'")
    from fpr.serve.app import serve
    from fpr.serve.config import ServeConfig

    serve(ServeConfig.from_env(ctx.obj["workspace"], host=host, port=port, workers=workers, device=device))
