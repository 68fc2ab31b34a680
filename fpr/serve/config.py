"""Service settings: ``fpr serve`` options plus ``FPR_*`` environment variables."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from fpr import settings
from fpr.errors import InputError
from fpr.store import resolve_workspace


def _env_int(name: str) -> int:
    """A declared integer setting (its default and minimum in :mod:`fpr.settings`)."""
    return settings.get(name)


def _env_origins() -> frozenset[str]:
    """``FPR_SERVE_ORIGINS``: comma-separated ``scheme://host[:port]`` whose pages may call the API."""
    origins = frozenset(o.rstrip("/") for o in settings.get("FPR_SERVE_ORIGINS"))
    bad = sorted(o for o in origins if not o.startswith(("http://", "https://")))
    if bad:
        raise InputError(f"FPR_SERVE_ORIGINS must list http:// or https:// origins, got '{bad[0][:80]}'")
    return origins


def is_loopback(host: str) -> bool:
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class ServeConfig:
    workspace: Path
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    device: str = "auto"
    tokens_file: Path | None = None
    max_upload_bytes: int = 1024 * 1024 * 1024
    max_queued_per_token: int = 8
    queue_size: int = 64
    origins: frozenset[str] = frozenset()  # web origins allowed besides the service's own (FPR_SERVE_ORIGINS)
    daily_submissions: int = 5  # per token and UTC day, to sealed benchmarks (FPR_BENCHMARK_DAILY_SUBMISSIONS)

    @classmethod
    def from_env(cls, workspace: str | Path | None, *, host: str = "127.0.0.1", port: int = 8080, workers: int = 1,
                 device: str = "auto") -> "ServeConfig":
        """Read ``FPR_API_TOKENS_FILE``, ``FPR_MAX_UPLOAD_MB`` (1024), ``FPR_MAX_QUEUED_PER_TOKEN`` (8),
        ``FPR_SERVE_QUEUE`` (64), ``FPR_SERVE_ORIGINS`` and ``FPR_BENCHMARK_DAILY_SUBMISSIONS`` (5); refuse a
        non-loopback host without a token file."""
        if workers < 1:
            raise InputError(f"--workers must be at least 1, got {workers}")
        tokens = settings.raw("FPR_API_TOKENS_FILE") or ""
        tokens = tokens.strip()
        tokens_file = Path(tokens).expanduser() if tokens else None
        if tokens_file is not None and not tokens_file.is_file():
            raise InputError("token file not found", where=str(tokens_file),
                             hint="FPR_API_TOKENS_FILE must name a file with one 'token [name]' per line")
        if tokens_file is None and not is_loopback(host):
            raise InputError(f"refusing to listen on {host} without tokens",
                             hint="set FPR_API_TOKENS_FILE to a file of 'token [name]' lines, or use --host 127.0.0.1")
        return cls(workspace=resolve_workspace(workspace).resolve(), host=host, port=port, workers=workers,
                   device=device, tokens_file=tokens_file,
                   max_upload_bytes=_env_int("FPR_MAX_UPLOAD_MB") * 1024 * 1024,
                   max_queued_per_token=_env_int("FPR_MAX_QUEUED_PER_TOKEN"),
                   queue_size=_env_int("FPR_SERVE_QUEUE"), origins=_env_origins(),
                   daily_submissions=_env_int("FPR_BENCHMARK_DAILY_SUBMISSIONS"))

    @property
    def serve_dir(self) -> Path:
        return self.workspace / "serve"

    @property
    def jobs_dir(self) -> Path:
        return self.serve_dir / "jobs"

    @property
    def uploads_dir(self) -> Path:
        return self.serve_dir / "uploads"

    @property
    def device_lock(self) -> Path:
        return self.serve_dir / "device.lock"

    @property
    def reports_dir(self) -> Path:
        """``<run>/<content version>.html``: a replaced run gets a new file, never the old bytes."""
        return self.serve_dir / "reports"

    @property
    def server_lock(self) -> Path:
        return self.serve_dir / "server.lock"
