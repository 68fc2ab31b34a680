"""Ray itself: the engine choice and its options, the runtime a run opens (local or a cluster, the address
probed before Ray's own retries), and Ray's logs kept quiet.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import sys
from dataclasses import dataclass
from pathlib import Path


from fpr import progress, settings
from fpr.errors import InputError


ENGINES = ("local", "ray")


INSTALL_HINT = "install the optional extra: pip install 'fpr[ray]'"


_ADDRESS = re.compile(r"^(auto|local|ray://[^\s/:]+:\d+|[^\s/:]+:\d+)$")


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise InputError(f"unknown engine '{engine}'", hint=f"valid: {', '.join(ENGINES)}")
    return engine


@dataclass
class RayOptions:
    """How to run on Ray. ``address``: ``ray://HOST:PORT``, ``auto`` or ``HOST:PORT`` of a running
    cluster; None starts a local runtime (``num_cpus``, ``object_store_mb``). ``actors``: actor pool
    size (default one per GPU when the cluster has GPUs and the device allows them, else 1).
    ``shard_size``: images per shard, the unit of resume (``fpr filter`` uses its chunk size); default
    :func:`default_shard_size`.
    ``decode_cpus`` / ``actor_cpus``: CPUs per decode task / per actor; when equal, on a CPU-only
    cluster Ray fuses decoding into the actors (no pixel copies through the object store)."""

    address: str | None = None
    actors: int | None = None
    shard_size: int | None = None
    num_cpus: int | None = None
    object_store_mb: float | None = None
    decode_cpus: float = 1.0
    actor_cpus: float = 1.0

    def check(self) -> "RayOptions":
        if self.address is not None and not _ADDRESS.match(str(self.address)):
            raise InputError(f"bad Ray address '{self.address}'",
                             hint="give ray://HOST:PORT (Ray client), HOST:PORT (the head node), or auto")
        if self.actors is not None and self.actors < 1:
            raise InputError(f"--ray-actors must be at least 1, got {self.actors}")
        if self.shard_size is not None and self.shard_size < 1:
            raise InputError(f"the shard size must be at least 1, got {self.shard_size}")
        return self


def ray_options(engine: str, options: "RayOptions | dict | None") -> "RayOptions | None":
    """Checked options for ``engine``; options given with the local engine are an error."""
    check_engine(engine)
    if isinstance(options, dict):
        options = RayOptions(**options)
    if engine == "local":
        if options is not None and (options.address or options.actors):
            raise InputError("--ray-address and --ray-actors go with --engine ray")
        return None
    _ray()  # a missing Ray is said before any model is loaded
    return (options or RayOptions()).check()


def _ray():
    try:
        import ray
    except ImportError:
        raise InputError("the Ray engine needs Ray, which is not installed", hint=INSTALL_HINT) from None
    return ray


class Runtime:
    """``with Runtime(options) as ray:`` a connected Ray; started (and shut down) here unless one is running."""

    def __init__(self, options: RayOptions):
        self.options = options
        self.started = False

    def __enter__(self):
        ray = _ray()
        _quiet_ray(ray)
        if ray.is_initialized():
            progress.log("ray: using the Ray runtime this process is already connected to"
                         + (f" (not {self.options.address})" if self.options.address else ""))
            return ray
        kwargs = dict(include_dashboard=False, log_to_driver=progress.enabled(),
                      logging_level=logging.INFO if progress.enabled() else logging.ERROR)
        address = self.options.address
        probe_address(address)  # before ray.init: its own loop retries an unreachable address for minutes
        if not progress.enabled():  # Ray's C++ core logs to stderr on its own; --quiet means quiet
            settings.set_default("RAY_BACKEND_LOG_LEVEL", "fatal")
        try:
            if address and address != "local":
                ray.init(address=address, **kwargs)
            else:
                mb = self.options.object_store_mb
                ray.init(num_cpus=self.options.num_cpus, object_store_memory=int(mb * 2 ** 20) if mb else None,
                         runtime_env=local_runtime_env(), **kwargs)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError, OSError) as exc:
            where = f"the Ray cluster at '{address}'" if address and address != "local" else "a local Ray runtime"
            raise InputError(f"cannot start or reach {where}: {_first_line(exc)}",
                             hint="check --ray-address (ray://HOST:10001, HOST:6379 or auto) and that the "
                                  "cluster runs the same Ray and Python versions") from None
        self.started = True
        # Ray prints what its workers and raylets write to stdout (e.g. "(raylet) Task ... submit failed"
        # when a node is lost) on this process's stdout; fpr's stdout carries only the result.
        self._stdout = contextlib.redirect_stdout(sys.stderr)
        self._stdout.__enter__()
        return ray

    def __exit__(self, *exc):
        if self.started:
            try:
                _ray().shutdown()
            finally:
                self._stdout.__exit__(*exc)
        return False


def local_runtime_env() -> dict:
    """The runtime environment of a local runtime: its workers import the same fpr as this process
    (a checkout on ``PYTHONPATH`` or an installed package). A cluster's nodes need fpr installed."""
    import fpr

    root = str(Path(fpr.__file__).resolve().parent.parent)
    paths = [root] + [p for p in (settings.raw("PYTHONPATH") or "").split(os.pathsep) if p]
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}}


PROBE_TIMEOUT_S = 5.0


def probe_address(address: str | None, timeout: float = PROBE_TIMEOUT_S) -> None:
    """A cluster address (``ray://HOST:PORT`` or ``HOST:PORT``) must accept a TCP connection within
    ``timeout`` seconds; otherwise one InputError now instead of Ray's minutes of connection retries."""
    if not address or address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise InputError(f"cannot reach the Ray cluster at '{address}' ({reason}; checked for {timeout:g} s)",
                         hint="start the cluster, or check --ray-address (ray://HOST:10001, HOST:6379 or auto)"
                         ) from None


def _quiet_ray(ray) -> None:
    """Ray Data's own progress (bars or log lines) goes to stderr; ``--quiet`` silences it."""
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = progress.enabled()
    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.INFO if progress.enabled() else logging.ERROR)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
