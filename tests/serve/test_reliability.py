"""The service as a careful operator and an attacker try it (#26): a second server on the same workspace,
damaged job records, names the file system refuses, stale reports, requests from web pages, token scopes,
the server killed with SIGKILL mid-run. Every loop here is bounded in count and time; loopback only."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from filelock import FileLock

from tests.patience import Deadline
from tests.serve.conftest import (INDEX, REPO, TOKENS, free_port, launch_server, prepare_workspace, submission, upload_name, wait_for, wait_ready)

# every test here starts the service (or uses the session one): slow, run by .ci/run (-m slow)
pytestmark = pytest.mark.slow

SECURITY = {"x-content-type-options": "nosniff", "x-frame-options": "DENY", "referrer-policy": "no-referrer"}


def _job_file(ws: Path, run: str) -> dict:
    return json.loads((ws / "serve" / "jobs" / f"{run}.json").read_text())


def _wait_job(ws: Path, run: str, pred, timeout: float = 60) -> dict:
    deadline = Deadline(timeout)
    while not deadline.passed():
        try:
            job = _job_file(ws, run)
            if pred(job):
                return job
        except (FileNotFoundError, ValueError):  # not written yet, or replaced between stat and read
            pass
        time.sleep(0.05)
    raise AssertionError(f"job {run} never reached the state: {_job_file(ws, run)}")


def _run_to_done(client, run: str, rows: list[dict]) -> dict:
    r = client.post("/v1/runs", data={"index": INDEX, "run": run}, files=submission(rows))
    assert r.status_code == 202, r.text
    body = wait_for(client, run, timeout=90)
    assert body["status"] == "done", body
    return body


def _second_server(ws: Path, tmp: Path, port: int | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), FPR_API_TOKENS_FILE=str(tmp / "tokens.txt"), FPR_QUIET="1")
    return subprocess.run([sys.executable, "-m", "fpr", "--workspace", str(ws), "serve", "--port",
                           str(port or free_port()), "--device", "cpu"], env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.fixture(scope="module")
def own_world(tmp_path_factory):
    """A second workspace of its own, for servers that this module starts and kills."""
    return prepare_workspace(tmp_path_factory.mktemp("serve-own-world"))


# --------------------------------------------------------------------------- one server per workspace

def test_second_server_refuses_and_touches_nothing(server, world, tmp_path):
    ws, queries = world
    c = server.client("alice")
    in_flight = ws / "serve" / "uploads" / ".partial-in-flight-test"  # stands for a client's half-sent upload
    in_flight.mkdir()
    lock = FileLock(str(ws / "serve" / "device.lock"))
    lock.acquire(timeout=30)
    try:
        for run in ("live-0", "live-1", "live-2"):  # two workers: two wait for the device, one stays queued
            assert c.post("/v1/runs", data={"index": INDEX, "run": run}, files=submission(queries[:4])).status_code \
                == 202
        _wait_job(ws, "live-0", lambda j: (j.get("progress") or {}).get("stage") == "waiting for the device")
        _wait_job(ws, "live-1", lambda j: (j.get("progress") or {}).get("stage") == "waiting for the device")
        before = {r: _job_file(ws, r) for r in ("live-0", "live-1", "live-2")}
        assert before["live-2"]["status"] == "queued"
        (tmp_path / "tokens.txt").write_text(server.tokens_file.read_text())
        out = _second_server(ws, tmp_path, port=int(server.url.rsplit(":", 1)[1]))
        assert out.returncode == 3, out.stderr
        assert out.stderr.strip().startswith("fpr: error: this workspace is already served by another 'fpr serve' "
                                             f"(pid {server.proc.pid}, 127.0.0.1:"), out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
        assert in_flight.is_dir()
        assert {r: _job_file(ws, r) for r in before} == before
    finally:
        lock.release()
        in_flight.rmdir()
    for run in ("live-0", "live-1", "live-2"):
        body = wait_for(c, run, timeout=90)
        assert body["status"] == "done" and body["error"] is None, body
    starts = [json.loads(l) for l in server.log.read_text().splitlines() if '"event": "run_queued"' in l
              and '"live-2"' in l]
    assert len(starts) == 1


# --------------------------------------------------------------------------- damage is contained

def test_damaged_job_record_is_set_aside_and_the_service_keeps_serving(server, world):
    ws, queries = world
    jobs = ws / "serve" / "jobs"
    (jobs / "broken.json").write_bytes(b'{"run": "broken", "status": "que')  # truncated by a full disk
    try:
        _check_damaged_record(server, ws, queries)
    finally:  # never left for the next test
        for leftover in (jobs / "broken.json", jobs / "broken.json.damaged"):
            leftover.unlink(missing_ok=True)


def _check_damaged_record(server, ws: Path, queries: list[dict]) -> None:
    jobs = ws / "serve" / "jobs"
    c = server.client("alice")
    r = c.post("/v1/runs", data={"index": INDEX, "run": "after-damage"}, files=submission(queries[:2]))
    assert r.status_code == 202, r.text
    body = c.get("/v1/runs/broken").json()
    assert body["status"] == "damaged" and body["error"].startswith(
        "the service's record of this run is damaged (JSONDecodeError: Unterminated string"), body
    assert "<workspace>/serve/jobs/broken.json.damaged" in body["error"] and str(ws) not in body["error"]
    assert (jobs / "broken.json.damaged").is_file() and not (jobs / "broken.json").exists()
    listed = {j["run"]: j for j in c.get("/v1/jobs").json()}
    assert listed["broken"]["status"] == "damaged"
    assert c.post("/v1/runs", data={"index": INDEX, "run": "broken"}, files=submission(queries[:2])).status_code \
        == 409
    assert wait_for(c, "after-damage", timeout=90)["status"] == "done"
    assert '"event": "job_record_damaged"' in server.log.read_text()
    assert c.delete("/v1/runs/broken").status_code == 403  # nobody owns a damaged record: admin only


def test_server_restarts_over_damaged_records(own_world, tmp_path):
    ws, _ = own_world
    jobs = ws / "serve" / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    (jobs / "cut.json").write_bytes(b'{"run": "cut", "sta')
    (jobs / "list.json").write_text("[1, 2]")
    (jobs / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    try:
        s = wait_ready(launch_server(ws, tmp_path, workers=1), workers=1)
        try:
            listed = {j["run"]: j["status"] for j in s.client("alice").get("/v1/jobs").json()}
            assert listed == {"cut": "damaged", "list": "damaged", "binary": "damaged"}
        finally:
            s.stop()
    finally:  # never left for the next test
        for name in ("cut", "list", "binary"):
            for leftover in (jobs / f"{name}.json", jobs / f"{name}.json.damaged"):
                leftover.unlink(missing_ok=True)


@pytest.mark.parametrize("names, message", [
    (["é" * 200 + ".png"], "a part of the file name is longer than 255 bytes in UTF-8"),
    (["c.png", "c.png/d.png"], "clashes with another uploaded name"),
    (["g.png/h.png", "g.png"], "clashes with another uploaded name"),
])
def test_names_the_file_system_refuses_are_4xx_without_paths(server, world, names, message):
    ws, queries = world
    png = Path(queries[0]["path"]).read_bytes()
    files = [("images", (n, png, "image/png")) for n in names]
    r = server.client().post("/v1/runs", data={"index": INDEX}, files=files)
    assert 400 <= r.status_code < 500, r.text
    assert message in r.json()["error"], r.json()
    assert str(ws) not in r.text and "/tmp" not in r.text
    assert not list((ws / "serve" / "uploads").glob(".partial-*"))


def test_no_response_names_a_server_path(server, world):
    ws, queries = world
    c = server.client("bob")
    _run_to_done(c, "no-paths", queries[:2])
    home = str(Path.home())
    for route in ("/v1/runs/no-paths", "/v1/runs/no-paths/queries", "/v1/runs/no-paths/queries?format=csv",
                  "/v1/jobs", "/v1/indices", "/v1/galleries", "/v1/encoders", "/v1/runs",
                  "/v1/runs/no-paths/report.html"):
        r = c.get(route)
        assert r.status_code == 200, (route, r.text)
        assert str(ws) not in r.text and home not in r.text, route
    rows = c.get("/v1/runs/no-paths/queries").json()
    assert [row["path"] for row in rows] == [upload_name(q["path"]) for q in queries[:2]]


# --------------------------------------------------------------------------- fresh results

def test_report_of_a_replaced_run_is_the_new_one(server, world):
    from fpr import api

    ws, queries = world
    c = server.client("bob")
    _run_to_done(c, "replaced", queries[:2])
    first = c.get("/v1/runs/replaced/report.html")
    assert queries[0]["query_id"] in first.text
    import pandas as pd

    api.run_query(INDEX, pd.DataFrame(queries[6:8]), run="replaced", workspace=ws, device="cpu", overwrite=True)
    second = c.get("/v1/runs/replaced/report.html")
    assert second.status_code == 200
    assert queries[6]["query_id"] in second.text and queries[0]["query_id"] not in second.text
    assert second.headers["etag"] != first.headers["etag"]
    assert len(list((ws / "serve" / "reports" / "replaced").glob("*.html"))) == 1


# --------------------------------------------------------------------------- requests from web pages

@pytest.fixture
def open_server(own_world, tmp_path):
    """Loopback without a token file: the set-up a web page could reach (stopped after its test: one server per
    workspace)."""
    s = wait_ready(launch_server(own_world[0], tmp_path, workers=1, tokens=False), workers=1)
    yield s
    s.stop()


def test_loopback_without_tokens_refuses_foreign_hosts_and_origins(open_server, own_world):
    ws, queries = own_world
    c = open_server.client(None)
    port = open_server.url.rsplit(":", 1)[1]
    assert c.get("/v1/runs").status_code == 200
    assert c.get("/v1/runs", headers={"Host": f"localhost:{port}"}).status_code == 200
    r = c.get("/v1/runs", headers={"Host": f"evil.example:{port}"})  # DNS rebinding
    assert r.status_code == 403 and r.json()["error"].startswith("Host 'evil.example:")
    r = c.delete("/v1/runs/anything", headers={"Host": "attacker.test"})
    assert r.status_code == 403
    for origin in ("http://evil.example", "null", f"http://localhost:{int(port) + 1}"):
        r = c.post("/v1/runs", data={"index": INDEX, "run": "from-a-page"}, files=submission(queries[:2]),
                   headers={"Origin": origin})
        assert r.status_code == 403 and "Origin" in r.json()["error"], (origin, r.text)
    assert not (ws / "serve" / "jobs" / "from-a-page.json").exists()
    r = c.post("/v1/runs", data={"index": INDEX, "run": "same-origin"}, files=submission(queries[:2]),
               headers={"Origin": f"http://127.0.0.1:{port}"})
    assert r.status_code == 202, r.text
    assert wait_for(c, "same-origin", timeout=90)["status"] == "done"


def test_foreign_origin_refused_with_tokens_too(server):
    r = server.client("alice").get("/v1/runs", headers={"Origin": "https://evil.example"})
    assert r.status_code == 403
    assert server.client("alice").get("/v1/runs", headers={"Host": "fpr.lab.example"}).status_code == 200
    # listed in FPR_SERVE_ORIGINS (a proxy that rewrites Host), and the origin the request was sent to
    assert server.client("alice").get("/v1/runs", headers={"Origin": "https://fpr.lab.example"}).status_code == 200
    assert server.client("alice").get("/v1/runs", headers={"Origin": server.url}).status_code == 200
    refused = [json.loads(l) for l in server.log.read_text().splitlines() if '"event": "request"' in l
               and '"status": 403' in l]
    assert refused, "requests refused by the page guard are logged"


def test_security_headers_on_every_response(server):
    c = server.client("alice")
    for r in (c.get("/v1/health"), c.get("/v1/runs"), c.get("/v1/runs/nope"), server.client(None).get("/v1/runs"),
              c.get("/v1/runs", headers={"Origin": "http://evil.example"}), c.get("/docs"), c.get("/openapi.json")):
        for k, v in SECURITY.items():
            assert r.headers.get(k) == v, (r.request.url, k, r.headers)
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]


def test_docs_are_served_from_the_package(server):
    c = server.client(None)
    page = c.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "cdn" not in page.text.lower() and "https://" not in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    js = c.get("/docs/docs.js")
    assert js.status_code == 200 and "/openapi.json" in js.text and "https://" not in js.text
    assert c.get("/docs/docs.css").status_code == 200
    assert c.get("/docs/secret.txt").status_code == 404
    assert c.get("/redoc").status_code in (401, 404)


# --------------------------------------------------------------------------- scoped tokens

SCOPED = {"reader": ("tok-reader-0123456789", "scope=read"), "root": ("tok-admin-0123456789", "scope=admin")}


@pytest.fixture
def scoped_tokens(server):
    original = server.tokens_file.read_text()
    server.tokens_file.write_text(original + "".join(f"{t} {n} {s}\n" for n, (t, s) in SCOPED.items()))
    yield {n: httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {t}"}, timeout=30)
           for n, (t, _) in SCOPED.items()}
    server.tokens_file.write_text(original)


def test_token_scopes(server, world, scoped_tokens):
    from fpr import api
    import pandas as pd

    ws, queries = world
    reader, root = scoped_tokens["reader"], scoped_tokens["root"]
    alice, bob = server.client("alice"), server.client("bob")
    assert reader.get("/v1/runs").status_code == 200
    r = reader.post("/v1/runs", data={"index": INDEX, "run": "by-reader"}, files=submission(queries[:2]))
    assert r.status_code == 403 and "needs scope 'submit'" in r.json()["error"]
    _run_to_done(alice, "alices", queries[:2])
    job = _job_file(ws, "alices")
    assert job["user"] == "alice" and len(job["token"]) == 8 and TOKENS["alice"] not in json.dumps(job)
    for other in (bob, reader):
        r = other.delete("/v1/runs/alices")
        assert r.status_code == 403 and "needs scope 'admin'" in r.json()["error"], r.text
    assert alice.delete("/v1/runs/alices").status_code == 200
    api.run_query(INDEX, pd.DataFrame(queries[:2]), run="from-cli", workspace=ws, device="cpu")
    r = alice.delete("/v1/runs/from-cli")
    assert r.status_code == 403 and "not submitted by this token" in r.json()["error"]
    assert root.delete("/v1/runs/from-cli").json() == {"run": "from-cli", "deleted": True}
    # a line with an unknown scope, added while the server runs, grants nothing: the file is malformed (one strict
    # grammar, #35), so every token is refused with 503 naming it until the file is fixed
    good = server.tokens_file.read_text()
    n_line = len(good.splitlines()) + 1
    server.tokens_file.write_text(good + "tok-typo-0123456789 typo scope=write\n")
    try:
        r = httpx.get(server.url + "/v1/runs", headers={"Authorization": "Bearer tok-typo-0123456789"})
        assert r.status_code == 503 and f"token file is malformed (token file line {n_line}" in r.json()["error"], \
            r.text
        assert reader.get("/v1/runs").status_code == 503
    finally:
        server.tokens_file.write_text(good)
    assert reader.get("/v1/runs").status_code == 200


def test_cancel_queued_and_running_runs(server, world):
    from fpr import api

    ws, queries = world
    alice, bob = server.client("alice"), server.client("bob")
    lock = FileLock(str(ws / "serve" / "device.lock"))
    lock.acquire(timeout=30)
    try:
        for run in ("cx-0", "cx-1", "cx-2"):  # two workers wait for the device, the third run stays queued
            assert alice.post("/v1/runs", data={"index": INDEX, "run": run}, files=submission(queries[:2])) \
                .status_code == 202
        running = _wait_job(ws, "cx-0", lambda j: (j.get("progress") or {}).get("stage") == "waiting for the device")
        _wait_job(ws, "cx-1", lambda j: (j.get("progress") or {}).get("stage") == "waiting for the device")
        r = bob.post("/v1/runs/cx-0/cancel")
        assert r.status_code == 403 and "needs scope 'admin'" in r.json()["error"]
        assert alice.delete("/v1/runs/cx-0").json()["error"] == \
            "run 'cx-0' is running; cancel it first (POST /v1/runs/cx-0/cancel)"
        assert alice.post("/v1/runs/cx-2/cancel").json() == {"run": "cx-2", "cancelled": True, "was": "queued"}
        assert alice.post("/v1/runs/cx-0/cancel").json() == {"run": "cx-0", "cancelled": True, "was": "running"}
        body = wait_for(alice, "cx-0", timeout=30)
        assert body["status"] == "failed" and body["error"] == "cancelled by 'alice'", body
        assert alice.get("/v1/runs/cx-2").json()["error"] == "cancelled by 'alice'"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and os.path.exists(f"/proc/{running['worker_pid']}"):
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{running['worker_pid']}")
    finally:
        lock.release()
    assert wait_for(alice, "cx-1", timeout=90)["status"] == "done"
    assert alice.post("/v1/runs/cx-1/cancel").status_code == 409
    assert alice.post("/v1/runs/no-such-run/cancel").status_code == 404
    assert not {"cx-0", "cx-2"} & {r["run_id"] for r in api.list_runs(workspace=ws)}
    wait_ready(server, workers=2, timeout=90)  # the killed worker was replaced
    for run in ("cx-0", "cx-1", "cx-2"):
        assert alice.delete(f"/v1/runs/{run}").status_code == 200


# --------------------------------------------------------------------------- the server killed mid-run

def test_server_killed_mid_run_fails_the_run_once_and_stores_nothing(own_world, tmp_path):
    from fpr import api

    ws, queries = own_world
    s = wait_ready(launch_server(ws, tmp_path, workers=1), workers=1)
    lock = FileLock(str(ws / "serve" / "device.lock"))
    lock.acquire(timeout=30)
    try:
        c = s.client("alice")
        for run in ("k9-running", "k9-queued"):
            assert c.post("/v1/runs", data={"index": INDEX, "run": run}, files=submission(queries[:4])) \
                .status_code == 202
        job = _wait_job(ws, "k9-running", lambda j: (j.get("progress") or {}).get("stage") == "waiting for the device")
        worker = job["worker_pid"]
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and os.path.exists(f"/proc/{worker}"):
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{worker}"), "the orphaned worker kept running"
        s2 = wait_ready(launch_server(ws, tmp_path, workers=1), workers=1)
    finally:
        lock.release()
    try:
        c = s2.client("alice")
        body = wait_for(c, "k9-running", timeout=5)
        assert body["status"] == "failed"
        assert body["error"] == "the server stopped while this run was running; resubmit it"
        assert wait_for(c, "k9-queued", timeout=90)["status"] == "done"
        time.sleep(1.0)
        assert c.get("/v1/runs/k9-running").json()["status"] == "failed"
        assert "k9-running" not in {r["run_id"] for r in api.list_runs(workspace=ws)}
    finally:
        s2.stop()
