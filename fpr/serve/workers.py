"""Worker processes that run queued jobs, one run on the device at a time.

The server keeps a bounded in-memory queue of run ids (the durable state is the job
files, see :mod:`fpr.serve.jobs`). ``workers`` dispatcher threads each own one
long-lived worker process (``multiprocessing`` *spawn*: a fresh interpreter, no
inherited locks or CUDA state) and talk to it over a pipe:

    server -> worker   the job record
    worker -> server   ("stage", text) | ("progress", {...}) | ("done", {...}) | ("failed", one line)

The worker calls :func:`fpr.api.run_query` -- exactly what ``fpr query`` calls --
while holding ``<workspace>/serve/device.lock`` (an OS file lock, released by the
kernel if the process dies), so one run at a time embeds on the GPU. If the worker
process dies mid-run (killed, out of memory), the dispatcher marks that run failed
with the reason, starts a new worker and takes the next run.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import wait
from pathlib import Path

from fpr.serve.jobs import DONE, FAILED, QUEUED, RUNNING, JobStore, now

_CTX = mp.get_context("spawn")


# --------------------------------------------------------------------------- in the worker process

class _ReportingBar:
    """Stands in for :func:`fpr.progress.bar` in a worker: reports counts over the pipe (at most 4 per second)."""

    def __init__(self, send, iterable=None, total=None, desc="", **_):
        self._send, self._it, self.n, self.desc, self._last = send, iterable, 0, desc, 0.0
        self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
        self._report(force=True)

    def _report(self, force: bool = False) -> None:
        t = time.monotonic()
        if force or t - self._last >= 0.25:
            self._last = t
            self._send(("progress", {"stage": self.desc, "done": self.n, "total": self.total}))

    def update(self, n: int = 1) -> None:
        self.n += n
        self._report(force=self.total is not None and self.n >= self.total)

    def __iter__(self):
        for x in self._it:
            yield x
            self.update(1)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        pass

    def __getattr__(self, name):  # set_postfix, set_description, refresh, ...: nothing to show
        return lambda *a, **k: None


WARM_IMPORTS = ("timm", "open_clip", "faiss")


def _warm_imports() -> None:
    """Import the libraries a first run would import lazily (seconds each), before the worker says it is ready:
    a worker's first run is then as fast as its next."""
    from importlib.util import find_spec

    from fpr.registry import import_module

    for name in WARM_IMPORTS:
        if find_spec(name) is not None:
            import_module(name)


def _exit_with_parent(interval: float = 0.2) -> None:
    """Exit as soon as the server process is gone (killed with SIGKILL: no chance to stop its workers).

    An orphaned worker must not finish its run: the next server has already marked that run failed at
    start, and would see it stored and 'done' later. Exiting mid-run stores nothing (one transaction).
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        sys.stderr.write(f"fpr serve worker {os.getpid()}: the server process {parent} is gone; exiting\n")
        os._exit(70)

    threading.Thread(target=watch, name="fpr-serve-parent-watch", daemon=True).start()


def worker_main(conn, workspace: str, device: str, lock_path: str) -> None:
    """Loop: receive a job, run it under the device lock, send the outcome; exit on EOF or None."""
    from filelock import FileLock

    from fpr import api, progress
    from fpr.errors import FprError

    _exit_with_parent()
    send_lock = threading.Lock()

    def send(msg) -> None:
        with send_lock:
            conn.send(msg)

    progress.bar = lambda iterable=None, **kw: _ReportingBar(send, iterable, **kw)  # type: ignore[assignment]
    _warm_imports()
    send(("ready", os.getpid()))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        try:
            send(("stage", "waiting for the device"))
            with FileLock(lock_path):
                send(("stage", "running"))
                send(("done", _execute(api, job, workspace, device)))
        except FprError as exc:
            send(("failed", exc.one_line()))
        except Exception as exc:  # a bug: the run fails with its one line, the traceback goes to the log
            traceback.print_exc(file=sys.stderr)
            first = str(exc).splitlines()[0] if str(exc) else ""
            send(("failed", f"internal error: {type(exc).__name__}: {first}"))


def _execute(api, job: dict, workspace: str, device: str) -> dict:
    """Run one job: a benchmark submission (scored by ``run_query`` inside ``submit_to_benchmark``) or a run."""
    if job.get("benchmark"):
        row = api.submit_to_benchmark(job["benchmark"], job["queries_file"], card=job["card"],
                                      images_root=job["upload_dir"], submitter=job.get("user") or "anonymous",
                                      token_id=job.get("token"), submission=job["submission"], run=job["run"],
                                      workspace=workspace, device=device)
        return {"n_queries": row["n_queries"], "submission": row["submission_id"]}
    res = api.run_query(job["index"], job["queries_file"], run=job["run"], workspace=workspace,
                        scope=job.get("scope") or "group", scorers=job.get("scorers") or "", device=device)
    return {"n_queries": int(len(res.per_query)), "n_skipped": res.n_skipped}


# --------------------------------------------------------------------------- in the server process

def _death_reason(pid: int, exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            sig = signal.Signals(-exitcode).name
        except ValueError:
            sig = f"signal {-exitcode}"
        how = f"was killed by {sig}"
    else:
        how = f"exited with status {exitcode}"
    return f"the worker process (pid {pid}) {how} while running this run; resubmit it"


class Dispatcher:
    """A bounded queue of run ids served by ``n_workers`` worker processes."""

    def __init__(self, jobs: JobStore, workspace: Path, *, n_workers: int, queue_size: int, device: str,
                 lock_path: Path, log=None):
        self.jobs = jobs
        self.workspace = workspace
        self.n_workers = n_workers
        self.queue_size = queue_size
        self.queue: queue.Queue = queue.Queue()  # bounded in submit(); runs recovered at start always fit
        self.device = device
        self.lock_path = lock_path
        self.log = log or (lambda **kw: None)
        self.threads: list[threading.Thread] = []
        self.procs: dict[int, mp.Process] = {}
        self.ready = 0
        self._stopping = threading.Event()
        self._cancelled: dict[str, str] = {}  # run -> why its worker was killed on purpose

    def waiting(self, besides: str | None = None) -> int:
        """Runs in the queue whose record is still ``queued`` (``besides`` not counted): a run deleted or cancelled
        while it waited leaves its id in the queue (the dispatcher skips it when it comes up) but no slot."""
        with self.queue.mutex:  # a snapshot; the job records are read outside the queue's lock
            runs = {r for r in self.queue.queue if r is not None and r != besides}
        return sum(1 for r in runs if (job := self.jobs.get(r)) is not None and job.get("status") == QUEUED)

    def submit(self, run: str) -> None:
        """Queue a run id; ``queue.Full`` when ``queue_size`` runs already wait (see :meth:`waiting`)."""
        if self.waiting(besides=run) >= self.queue_size:  # its record is written first: it may be in the queue
            raise queue.Full
        self.queue.put_nowait(run)

    def cancel_running(self, run: str, pid: int, reason: str) -> bool:
        """Kill the worker running ``run`` (its dispatcher fails the run with ``reason`` and starts a new worker);
        False if no worker of this server has that pid."""
        proc = next((p for p in self.procs.values() if p.pid == pid and p.is_alive()), None)
        if proc is None:
            return False
        self._cancelled[run] = reason
        proc.kill()  # mid-run: run_query stores in one transaction, so nothing of the run is stored
        return True

    def start(self) -> None:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        for i in range(self.n_workers):
            t = threading.Thread(target=self._slot, args=(i,), name=f"fpr-serve-worker-{i}", daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self, timeout: float = 5.0) -> None:
        """Idle workers exit; workers in a run are terminated and their runs marked failed (server stopped)."""
        self._stopping.set()
        for _ in self.threads:
            self.queue.put_nowait(None)
        for t in self.threads:
            t.join(0.5)
        for proc in list(self.procs.values()):
            if proc.is_alive():
                proc.terminate()
        deadline = time.monotonic() + timeout
        for proc in list(self.procs.values()):
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))

    def _spawn(self, slot: int):
        parent, child = _CTX.Pipe()
        # Not a daemon: a run's DataLoader may start its own worker processes.
        proc = _CTX.Process(target=worker_main, args=(child, str(self.workspace), self.device, str(self.lock_path)),
                            name=f"fpr-serve-worker-{slot}", daemon=False)
        proc.start()
        child.close()
        self.procs[slot] = proc
        self.log(event="worker_started", slot=slot, pid=proc.pid)
        return proc, parent

    def _wait_ready(self, proc, conn) -> bool:
        """Wait for the worker's ("ready", pid) after its imports; False if it died first."""
        ready = wait([conn, proc.sentinel])
        if conn in ready:
            try:
                return conn.recv()[0] == "ready"
            except (EOFError, OSError):
                return False
        return False

    def _slot(self, slot: int) -> None:
        proc, conn = self._spawn(slot)
        if self._wait_ready(proc, conn):
            self.ready += 1
        while not self._stopping.is_set():
            run = self.queue.get()
            if run is None:
                break
            job = self.jobs.get(run)
            if job is None or job.get("status") != QUEUED:
                continue  # deleted (or already handled) while it waited
            if not proc.is_alive():
                proc, conn = self._spawn(slot)
            if self.jobs.update(run, status=RUNNING, started_at=now(), worker_pid=proc.pid,
                                progress={"stage": "starting"}) is None:
                continue  # deleted just now
            ok = self._follow(run, job, proc, conn)
            if not ok:
                proc.join(5.0)
                conn.close()
                self.ready -= 1
                proc, conn = self._spawn(slot)
                if self._wait_ready(proc, conn):
                    self.ready += 1
        try:
            conn.send(None)
        except (OSError, ValueError):  # the worker is already gone: nothing left to tell it
            self.log(event="worker_gone_at_stop", slot=slot)

    def _follow(self, run: str, job: dict, proc, conn) -> bool:
        """Send the job and relay the worker's messages until it ends; False if the worker died."""
        try:
            conn.send(job)
        except (OSError, ValueError):  # it died before taking the job: the loop below sees it and fails the run
            self.log(event="worker_unreachable", run=run, pid=proc.pid)
        while True:
            ready = wait([conn, proc.sentinel])
            msg = None
            if conn in ready:
                try:
                    msg = conn.recv()
                except (EOFError, OSError):  # the worker's end closed: it died
                    msg = None
            elif conn.poll():
                continue  # it exited, but left messages: read them first
            if msg is None:
                proc.join(5.0)
                reason = self._cancelled.pop(run, None) or (
                    "the server stopped while this run was running; resubmit it" if self._stopping.is_set()
                    else _death_reason(proc.pid, proc.exitcode))
                self.jobs.update(run, status=FAILED, finished_at=now(), error=reason, progress=None)
                self.log(event="worker_died", run=run, pid=proc.pid, exitcode=proc.exitcode)
                return False
            kind, payload = msg
            if kind == "stage":
                self.jobs.update(run, progress={"stage": payload}, sync=False)
            elif kind == "progress":
                self.jobs.update(run, progress=payload, sync=False)
            elif kind == "done":
                self._cancelled.pop(run, None)  # it finished before a cancel could stop it
                self.jobs.update(run, status=DONE, finished_at=now(), result=payload, progress=None)
                self.log(event="run_done", run=run)
                return True
            elif kind == "failed":
                self._cancelled.pop(run, None)
                self.jobs.update(run, status=FAILED, finished_at=now(), error=payload, progress=None)
                self.log(event="run_failed", run=run, error=payload)
                return True


def recover(jobs: JobStore, run_exists) -> tuple[list[str], list[str]]:
    """On start: re-queue ``queued`` jobs (their uploads are on disk); fail ``running`` ones explicitly.

    A run that was running when the server stopped may have half-used the device; it is
    not retried silently but marked failed with the reason, and its client resubmits.
    A running job whose run is already stored (it finished just before the stop) is done.
    Returns (requeued, failed) run ids.
    """
    requeued, failed = [], []
    for job in jobs.all():
        if job.get("status") == QUEUED:
            requeued.append(job["run"])
        elif job.get("status") == RUNNING:
            if run_exists(job["run"]):
                jobs.update(job["run"], status=DONE, finished_at=now(), progress=None)
            else:
                jobs.update(job["run"], status=FAILED, finished_at=now(), progress=None,
                            error="the server stopped while this run was running; resubmit it")
                failed.append(job["run"])
    return requeued, failed
