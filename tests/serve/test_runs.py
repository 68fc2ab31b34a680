"""Runs over HTTP: 16 concurrent clients equal API runs query for query; a killed worker fails its run and the
next proceeds; per-token limits; delete; restart recovery; schemathesis finds no server error."""
from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pandas as pd
import pytest
from filelock import FileLock

from fpr.render.result import RUN_RESULT
from fpr.serve.jobs import DONE, FAILED, QUEUED, RUNNING, JobStore
from fpr.serve.workers import Dispatcher, recover
from tests.result_schema import validate
from tests.serve.conftest import INDEX, TOKENS, submission, wait_for

COMPARED = ["status", "ap", "first_hit_rank", "last_hit_rank", "n_relevant", "n_scope", "cmc1", "cmc5", "cmc10",
            "inp", "sim", "n_references"]


def _job_file(server, run: str) -> dict:
    import json

    return json.loads((server.workspace / "serve" / "jobs" / f"{run}.json").read_text())


@pytest.mark.slow
def test_sixteen_concurrent_clients_equal_api_runs(server, world):
    from fpr import api

    ws, queries = world
    sets = [queries[i * 4:(i + 1) * 4] for i in range(3)]  # three distinct 4-image submissions
    expected = {}
    for k, rows in enumerate(sets):
        res = api.run_query(INDEX, pd.DataFrame(rows), run=f"api-set-{k}", workspace=ws, device="cpu")
        expected[k] = res.per_query.set_index("query_id")
    results: dict[int, object] = {}

    def client(i: int) -> None:
        try:
            with server.client(f"c{i:02d}") as c:
                r = c.post("/v1/runs", data={"index": INDEX, "run": f"http-{i:02d}"}, files=submission(sets[i % 3]))
                assert r.status_code == 202, r.text
                assert r.headers["location"] == f"/v1/runs/http-{i:02d}"
                assert r.json() == {"run": f"http-{i:02d}", "status": "queued"}
                body = wait_for(c, f"http-{i:02d}", timeout=90, interval=0.5)
                qr = c.get(f"/v1/runs/http-{i:02d}/queries", params={"format": "parquet"})
                results[i] = (body, pd.read_parquet(__import__("io").BytesIO(qr.content)))
        except BaseException as exc:  # surfaced below with the client's number
            results[i] = exc

    threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(results) == list(range(16))
    for i, out in results.items():
        assert not isinstance(out, BaseException), (i, out)
        body, per_query = out
        assert body["status"] == "done", body
        exp = expected[i % 3]
        report = api.report(f"api-set-{i % 3}", workspace=ws).to_dict()
        assert [r["method"] for r in body["report"]["summary"]] == [r["method"] for r in report["summary"]]
        for a, b in zip(body["report"]["summary"], report["summary"]):
            assert a["map"] == b["map"] and a["n_queries"] == b["n_queries"]
            assert a["sim"] == pytest.approx(b["sim"], abs=1e-6)
        got = per_query.set_index("query_id").loc[exp.index]
        for col in COMPARED:
            if exp[col].dtype.kind == "f" or col == "sim":
                np.testing.assert_allclose(got[col].to_numpy(float), exp[col].to_numpy(float), rtol=0, atol=1e-6,
                                           err_msg=f"client {i} column {col}")
            else:
                assert got[col].tolist() == exp[col].tolist(), (i, col)
    listed = {r["run_id"] for r in server.client().get("/v1/runs").json()}
    assert {f"http-{i:02d}" for i in range(16)} <= listed


@pytest.mark.slow
def test_killed_worker_fails_its_run_and_the_next_proceeds(server, world):
    _, queries = world
    c = server.client("alice")
    lock = FileLock(str(server.workspace / "serve" / "device.lock"))
    lock.acquire(timeout=30)  # hold the device: submitted runs wait inside the workers
    try:
        runs = []
        for k in range(3):  # alice may have 3 queued or running runs (FPR_MAX_QUEUED_PER_TOKEN=3)
            r = c.post("/v1/runs", data={"index": INDEX, "run": f"kill-{k}"}, files=submission(queries[:4]))
            assert r.status_code == 202, r.text
            runs.append(r.json()["run"])
        r = c.post("/v1/runs", data={"index": INDEX}, files=submission(queries[:4]))
        assert r.status_code == 429 and "FPR_MAX_QUEUED_PER_TOKEN" in r.json()["error"]
        assert server.client("bob").get("/v1/runs/kill-2").json()["status"] in (QUEUED, RUNNING)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            job = _job_file(server, "kill-0")
            if job["status"] == RUNNING and (job.get("progress") or {}).get("stage") == "waiting for the device":
                break
            time.sleep(0.05)
        assert job["status"] == RUNNING, job
        body = c.get("/v1/runs/kill-0").json()
        assert body["progress"] == {"stage": "waiting for the device"}
        pid = job["worker_pid"]
        os.kill(pid, signal.SIGKILL)
        body = wait_for(c, "kill-0", timeout=30)
        assert body["status"] == FAILED
        assert body["error"] == f"the worker process (pid {pid}) was killed by SIGKILL while running this run; " \
                                "resubmit it"
        assert "report" not in body
    finally:
        lock.release()
    for run in runs[1:]:
        assert wait_for(c, run, timeout=90)["status"] == DONE
    r = c.post("/v1/runs", data={"index": INDEX, "run": "after-kill"}, files=submission(queries[4:8]))
    assert r.status_code == 202
    assert wait_for(c, "after-kill", timeout=90)["status"] == DONE
    # the failed run stored nothing; deleting it removes its record and uploads
    assert c.get("/v1/runs/kill-0/queries").status_code == 404
    assert c.delete("/v1/runs/kill-0").json() == {"run": "kill-0", "deleted": True}
    assert c.get("/v1/runs/kill-0").status_code == 404
    assert not (server.workspace / "serve" / "uploads" / "kill-0").exists()


@pytest.mark.slow
def test_run_routes(server, world):
    _, queries = world
    c = server.client("bob")
    r = c.post("/v1/runs", data={"index": INDEX, "run": "routes"}, files=submission(queries[8:12]))
    assert r.status_code == 202
    body = wait_for(c, "routes")
    assert body["status"] == DONE and body["n_images"] == 4 and body["error"] is None
    report = validate(body["report"], RUN_RESULT)  # the service's report is the fpr.run-result/1 document
    assert report["run"]["id"] == "routes" and report["run"]["n_queries"] == 4
    assert isinstance(report["provenance"]["preprocessing"], dict)
    assert {row["encoder"] for row in report["summary"]} == {report["run"]["encoders"][0]}
    assert c.post("/v1/runs", data={"index": INDEX, "run": "routes"}, files=submission(queries[8:12])).status_code \
        == 409
    rows = c.get("/v1/runs/routes/queries").json()
    assert [r["query_id"] for r in rows] == [q["query_id"] for q in queries[8:12]]
    csv = c.get("/v1/runs/routes/queries", params={"format": "csv"}).text
    assert csv.splitlines()[0].startswith("query_id,path,method,identity,group,ap")
    assert c.get("/v1/runs/routes/queries", params={"format": "xml"}).status_code == 422
    r = c.get("/v1/runs/routes/report.html")  # written on first request, as 'fpr report --html' writes it
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html"), r.text[:300]
    assert r.text.lstrip().lower().startswith("<!doctype html") and queries[8]["query_id"] in r.text
    assert [p.read_text() for p in (server.workspace / "serve" / "reports" / "routes").glob("*.html")] == [r.text]
    assert c.get("/v1/runs/no-such-run/report.html").status_code == 404
    assert c.delete("/v1/runs/routes").json() == {"run": "routes", "deleted": True}
    assert c.get("/v1/runs/routes").status_code == 404
    assert c.delete("/v1/runs/routes").status_code == 404
    assert not (server.workspace / "serve" / "uploads" / "routes").exists()
    assert not (server.workspace / "serve" / "reports" / "routes").exists()
    assert c.get("/v1/runs/..%2F..%2Fetc").status_code == 404


def test_recover_requeues_queued_and_fails_running(tmp_path):
    store = JobStore(tmp_path / "jobs")
    for run, status in (("a", QUEUED), ("b", RUNNING), ("c", RUNNING), ("d", DONE), ("e", FAILED)):
        store.put({"run": run, "status": status, "created_at": run})
    requeued, failed = recover(store, run_exists=lambda run: run == "c")
    assert requeued == ["a"] and failed == ["b"]
    assert store.get("a")["status"] == QUEUED
    assert store.get("b")["status"] == FAILED
    assert store.get("b")["error"] == "the server stopped while this run was running; resubmit it"
    assert store.get("c")["status"] == DONE and store.get("d")["status"] == DONE
    assert sorted(p.name for p in (tmp_path / "jobs").iterdir()) == ["a.json", "b.json", "c.json", "d.json", "e.json"]


def test_deleted_or_cancelled_queued_runs_free_their_queue_slot(tmp_path):
    """Issue #35 item 5: a queued run deleted (the DELETE route's ``jobs.delete``) or cancelled (its record set
    failed) kept its slot, so after a few deletions every submission got 503 'queue full' until a restart."""
    store = JobStore(tmp_path / "jobs")
    d = Dispatcher(store, tmp_path, n_workers=1, queue_size=3, device="cpu", lock_path=tmp_path / "device.lock")

    def queue_run(run: str) -> None:  # what POST /v1/runs does: the record first, then the queue
        store.put({"run": run, "status": QUEUED, "created_at": run})
        d.submit(run)

    for run in ("r1", "r2", "r3"):
        queue_run(run)
    with pytest.raises(queue.Full):
        queue_run("r4")
    store.delete("r4")  # accept() removes the record of a refused run
    assert d.waiting() == 3
    store.delete("r1")
    store.delete("r2")
    store.update("r3", status=FAILED, error="cancelled by 'alice'")
    assert d.waiting() == 0
    for run in ("r5", "r6", "r1"):  # a deleted run's name may come back
        queue_run(run)
    assert d.waiting() == 3
    with pytest.raises(queue.Full):
        queue_run("r7")


@pytest.mark.slow
def test_schemathesis_finds_no_server_error(server, tmp_path):
    st = shutil.which("st", path=os.path.dirname(sys.executable)) or shutil.which("schemathesis")
    if st is None:
        pytest.skip("schemathesis is not installed")
    import json
    import re

    start = len(server.log.read_text().splitlines())
    # Bounded: 25 examples per operation and phase, fixed seed (about 430 requests, 20-40 s on 2 cores).
    out = subprocess.run([st, "run", f"{server.url}/openapi.json", "--checks", "not_a_server_error",
                          "--max-examples", "25", "--seed", "1", "-H", f"Authorization: Bearer {TOKENS['bob']}",
                          "--request-timeout", "20", "--generation-database", "none", "--no-color"],
                         capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    n_ops = sum(len(item) for item in server.client().get("/openapi.json").json()["paths"].values())
    assert re.search(rf"Tested: {n_ops}\b", out.stdout), out.stdout[-2000:]
    cases = re.search(r"(\d+) generated, (\d+) passed", out.stdout)
    assert cases and cases.group(1) == cases.group(2) and int(cases.group(1)) > 100, out.stdout[-2000:]
    statuses = [json.loads(l)["status"] for l in server.log.read_text().splitlines()[start:]
                if l.startswith("{") and '"event": "request"' in l]
    assert len(statuses) > 100 and max(s for s in statuses if s is not None) < 500


def _archive(rows: list[dict]) -> bytes:
    """A zip of a real submission: ``queries.csv`` at its root and every image under the name it lists."""
    import io
    import zipfile
    from pathlib import Path

    from tests.serve.conftest import queries_csv, upload_name

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("queries.csv", queries_csv(rows))
        for r in rows:
            zf.writestr(upload_name(r["path"]), Path(r["path"]).read_bytes())
    return buf.getvalue()


HOOKS = """
import schemathesis

ARCHIVE = open({archive!r}, "rb").read()


@schemathesis.hook
def before_call(context, case, kwargs):
    # realistic data in the producer only: every consumer's run name comes from its response (the links)
    if case.method.upper() == "POST" and case.path == "/v1/runs":
        scope = case.body.get("scope") if isinstance(case.body, dict) else None
        case.body = {{"index": {index!r}, "archive": ARCHIVE, **({{"scope": scope}} if scope else {{}})}}
"""


@pytest.mark.slow
def test_a_stateful_fuzzer_follows_submissions_to_real_runs(server, world, tmp_path):
    """Issue #35 (stateful phase): schemathesis' stateful phase, its submissions carrying a real archive (a hook),
    follows the OpenAPI links from ``POST /v1/runs`` to the run routes with the run's real name: GET
    /v1/runs/{run} answers 200 (before the links it only ever saw 404), and nothing is a server error."""
    st = shutil.which("st", path=os.path.dirname(sys.executable)) or shutil.which("schemathesis")
    if st is None:
        pytest.skip("schemathesis is not installed")
    import json
    import re

    _ws, queries = world
    (tmp_path / "archive.zip").write_bytes(_archive(queries[:2]))
    (tmp_path / "door_hooks.py").write_text(HOOKS.format(archive=str(tmp_path / "archive.zip"), index=INDEX))
    start = len(server.log.read_text().splitlines())
    out = subprocess.run([st, "run", f"{server.url}/openapi.json", "--phases", "stateful", "--checks",
                          "not_a_server_error", "--max-examples", "30", "--seed", "1", "-H",
                          f"Authorization: Bearer {TOKENS['bob']}", "--request-timeout", "20",
                          "--generation-database", "none", "--no-color"], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path,
                         env={**os.environ, "SCHEMATHESIS_HOOKS": "door_hooks", "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1500:]
    requests = [json.loads(ln) for ln in server.log.read_text().splitlines()[start:]
                if ln.startswith("{") and '"event": "request"' in ln]
    seen = sorted({(r["method"], re.sub(r"^/v1/runs/[^/]+", "/v1/runs/{run}", r["path"]), r["status"])
                   for r in requests})
    accepted = [r for r in requests if r["method"] == "POST" and r["path"] == "/v1/runs" and r["status"] == 202]
    run_reads = [r for r in requests if r["method"] == "GET" and re.fullmatch(r"/v1/runs/[^/]+", r["path"])
                 and r["status"] == 200]
    print(f"stateful phase: {len(requests)} requests, {len(accepted)} runs accepted, {len(run_reads)} run reads 200")
    assert accepted and run_reads, seen
    assert max(r["status"] for r in requests if r["status"] is not None) < 500, seen
