"""A tiny world workspace (gallery + fpr-world-v1 index) and the real server on a free loopback port."""
from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.patience import Deadline

# Without the serve extra (or httpx) only the CLI tests run. fastapi is not imported in this process:
# test_cli checks that importing the CLI does not import it.
if any(importlib.util.find_spec(m) is None for m in ("fastapi", "uvicorn", "python_multipart", "httpx")):
    collect_ignore = ["test_auth.py", "test_uploads.py", "test_runs.py"]
else:
    import httpx

INDEX = "world-serve-fpr-world-v1"
TOKENS = {"alice": "tok-alice-0123456789", "bob": "tok-bob-0123456789",
          **{f"c{i:02d}": f"tok-client-{i:02d}-abcdef" for i in range(16)}}
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prepare_workspace(root: Path) -> tuple[Path, list[dict]]:
    """Render a 3-species x 2-identity world (64 px), import it, build the index; return (ws, query rows)."""
    from fpr import api
    from fpr.galleries.curate import GallerySpec
    from fpr.galleries.world import World, WorldConfig

    ws = root / "ws"
    build = World(WorldConfig(seed=0, identities=2, gallery=2, references=1, queries=1,
                              methods=("faithful", "generic"), size=64)).write(root / "world")
    api.import_gallery("world-serve", build.records, GallerySpec(seed=0), workspace=ws, source="world")
    api.build_index("world-serve", "fpr-world-v1", name=INDEX, workspace=ws, device="cpu")
    return ws, build.queries


@dataclass
class Server:
    url: str
    workspace: Path
    proc: subprocess.Popen
    log: Path
    tokens_file: Path
    env: dict = field(default_factory=dict)

    def client(self, user: str | None = "alice", **kw) -> "httpx.Client":
        headers = {"Authorization": f"Bearer {TOKENS[user]}"} if user else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, **kw)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def launch_server(workspace: Path, tmp: Path, *, workers: int = 2, extra_env: dict | None = None,
                  tokens: bool = True) -> Server:
    """Start ``fpr serve`` in a subprocess (returns at once; see :func:`wait_ready`); ``tokens=False`` serves
    loopback without a token file."""
    tokens_file = tmp / "tokens.txt"
    if not tokens_file.exists():
        tokens_file.write_text("# test tokens\n" + "".join(f"{t} {n}\n" for n, t in TOKENS.items()))
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO), FPR_API_TOKENS_FILE=str(tokens_file), FPR_MAX_UPLOAD_MB="2",
               FPR_MAX_QUEUED_PER_TOKEN="3", FPR_QUIET="1", FPR_SERVE_ORIGINS="https://fpr.lab.example")
    env.update(extra_env or {})  # may override a default above
    if not tokens:
        del env["FPR_API_TOKENS_FILE"]
    log = tmp / f"server-{port}.log"
    proc = subprocess.Popen([sys.executable, "-m", "fpr", "--workspace", str(workspace), "serve", "--host",
                             "127.0.0.1", "--port", str(port), "--workers", str(workers), "--device", "cpu"],
                            env=env, stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    return Server(f"http://127.0.0.1:{port}", workspace, proc, log, tokens_file, env)


def wait_ready(server: Server, workers: int = 2, timeout: float = 90) -> Server:
    """Polls /v1/health until every worker process is ready (imports done); ``timeout``: seconds on an idle
    machine, stretched by the load (:class:`tests.patience.Deadline`)."""
    deadline = Deadline(timeout)
    while not deadline.passed():
        if server.proc.poll() is not None:
            raise RuntimeError(f"server exited with {server.proc.returncode}:\n{server.log.read_text()[-3000:]}")
        try:
            if httpx.get(server.url + "/v1/health", timeout=2).json()["workers_ready"] >= workers:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"server not ready in {deadline.describe()}:\n{server.log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def _world_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("serve-world")


@pytest.fixture(scope="session")
def _launched(_world_root, tmp_path_factory):
    s = launch_server(_world_root / "ws", tmp_path_factory.mktemp("serve-server"))
    yield s
    s.stop()


@pytest.fixture(scope="session")
def world(_world_root, _launched):
    """The workspace is prepared while the server boots (it reads the database only once runs arrive)."""
    return prepare_workspace(_world_root)


@pytest.fixture(scope="session")
def server(world, _launched):
    return wait_ready(_launched)


def upload_name(path: str) -> str:
    """The name a client gives a world query image: method/species/file (subfolders keep names unique)."""
    return "/".join(Path(path).parts[-3:])


def queries_csv(rows: list[dict], names=upload_name) -> bytes:
    import pandas as pd

    df = pd.DataFrame(rows)[["query_id", "path", "identity", "group", "method"]]
    df["path"] = [names(p) for p in df["path"]]
    return df.to_csv(index=False).encode()


def submission(rows: list[dict]) -> list:
    """Multipart ``files`` for httpx: the queries table plus every image, named as the table names them."""
    files = [("queries", ("queries.csv", queries_csv(rows), "text/csv"))]
    files += [("images", (upload_name(r["path"]), Path(r["path"]).read_bytes(), "image/png")) for r in rows]
    return files


def wait_for(client, run: str, timeout: float = 60, until=("done", "failed"), interval: float = 0.1) -> dict:
    """Polls the run until its status is in ``until`` or the deadline (``timeout`` idle seconds, stretched by
    the load) passed; returns its last body either way."""
    deadline = Deadline(timeout)
    while True:
        body = client.get(f"/v1/runs/{run}").json()
        if body.get("status") in until or deadline.passed():
            return body
        time.sleep(interval)
