"""A real multi-node Ray cluster on this machine, started with Ray's own commands (``ray start``), for tests.

A head and worker nodes, each its own raylet with ``--num-cpus`` and a custom resource named after the
node (``node_head``, ``node_w1``, ...), so a test can tell which node a piece of work ran on (a raylet's
command line carries its node id and its resources). All nodes share the head's temporary folder, a short
one under /tmp (Ray's sockets live there and a Unix socket path is limited to 107 bytes), and every port
is chosen free, so the cluster never meets another Ray on the machine (other engineers' tests, their
local runtimes).

Teardown never uses ``ray stop``, which stops every Ray of the user on the machine: each process ``ray
start`` spawned carries the marker ``FPR_TEST_CLUSTER=<temp folder>`` in its environment (inherited by
every raylet, agent and worker), and exactly those processes are killed, by pid. Linux only (/proc).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.patience import load_factor

MARK = "FPR_TEST_CLUSTER"
RAY = str(Path(sys.executable).parent / "ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # the process ended, or is not ours
        return b""


def _pids_marked(value: str) -> list[int]:
    needle = f"{MARK}={value}".encode()
    return [int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and needle in _read(p / "environ").split(b"\0")]


def _cmdline(pid: int) -> list[str]:
    return [a.decode(errors="replace") for a in _read(Path(f"/proc/{pid}/cmdline")).split(b"\0") if a]


def _children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        stat = _read(p / "stat").decode(errors="replace") if p.name.isdigit() else ""
        if stat and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(p.name))
    return out


@dataclass
class LocalCluster:
    """``start()`` the head, ``add_node(name)`` a worker node; ``kill_node(name)``; ``stop()`` (idempotent)."""

    object_store_mb: int = 80
    pythonpath: str = ""
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="fprrc-", dir="/tmp")))
    port: int = field(default_factory=free_port)
    nodes: list[str] = field(default_factory=list)

    @property
    def address(self) -> str:
        """The head's GCS address as Ray wrote it (``HOST:PORT``), what ``--ray-address`` takes."""
        return (self.root / "ray_current_cluster").read_text().strip()

    def env(self) -> dict:
        return {**os.environ, MARK: str(self.root), "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": self.pythonpath,
                "RAY_ADDRESS": ""}

    def _ray_start(self, name: str, cpus: int, extra: list[str]) -> None:
        ports = ["--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
                 "--metrics-export-port", "--node-manager-port", "--object-manager-port"]
        cmd = [RAY, "start", f"--num-cpus={cpus}", f"--object-store-memory={self.object_store_mb * 2 ** 20}",
               f'--resources={{"node_{name}": 1}}', "--disable-usage-stats", f"--temp-dir={self.root}",
               *[f"{p}={free_port()}" for p in ports], *extra]
        out = subprocess.run(cmd, env=self.env(), capture_output=True, text=True, timeout=120 * load_factor())
        if out.returncode != 0:
            raise RuntimeError(f"ray start ({name}) failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
        self.nodes.append(name)

    def start(self, cpus: int = 1) -> "LocalCluster":
        self._ray_start("head", cpus, ["--head", f"--port={self.port}", "--include-dashboard=false",
                                       f"--ray-client-server-port={free_port()}", f"--dashboard-port={free_port()}"])
        return self

    def add_node(self, name: str, cpus: int = 1) -> None:
        self._ray_start(name, cpus, [f"--address={self.address}"])

    def raylet(self, name: str) -> tuple[int, str]:
        """(pid, node id) of the raylet of node ``name`` (found by its custom resource)."""
        for pid in _pids_marked(str(self.root)):
            args = _cmdline(pid)
            if args and args[0].endswith("/raylet") and any(
                    a.startswith("--static_resource_list=") and f"node_{name},1," in a + "," for a in args):
                node_id = next(a.split("=", 1)[1] for a in args if a.startswith("--node_id="))
                return pid, node_id
        raise LookupError(f"no raylet for node {name}")

    def node_ids(self) -> dict[str, str]:
        """Node id -> node name, for every node still running."""
        out = {}
        for name in self.nodes:
            try:
                out[self.raylet(name)[1]] = name
            except LookupError:
                continue  # a killed node
        return out

    def actors_on(self, name: str) -> list[int]:
        """Pids of the Ray Data map actors the raylet of ``name`` runs (its worker processes' titles)."""
        pid, _ = self.raylet(name)
        return [c for c in _children(pid) if any("MapWorker" in a or "ShardWorker" in a for a in _cmdline(c))]

    def kill_node(self, name: str) -> None:
        """The node dies at once: SIGKILL to its raylet (which holds its object store) and every process it
        started (its workers and agents), as when a machine is lost."""
        pid, _ = self.raylet(name)
        for p in [pid, *_children(pid)]:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                continue  # already gone
        self.nodes.remove(name)

    def stop(self) -> None:
        """Kill every process of this cluster (and only those), then remove its folder."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = _pids_marked(str(self.root))
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    continue  # ended meanwhile
            deadline = time.monotonic() + 10
            while pids and time.monotonic() < deadline:
                pids = [p for p in pids if Path(f"/proc/{p}").exists() and b"Z" not in _read(
                    Path(f"/proc/{p}/stat")).rsplit(b")", 1)[-1][:3]]
                time.sleep(0.2)
        shutil.rmtree(self.root, ignore_errors=True)
