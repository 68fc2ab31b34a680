"""A sealed benchmark over HTTP (issue #34, item 1): an admin registers it, two tokens submit two methods, the
leaderboard's rows equal CLI runs of the same images, no answer a submitter gets shows a gallery path, file stem
or image, the daily limit answers 429 from the count in the store, a row is withdrawn into the history, and a
submission's hash is recomputed from the images."""
from __future__ import annotations

import json
import subprocess
import time
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.patience import Deadline
from tests.sealed_world import INDEX, leaks, sealed_world, submission_folder
from tests.serve.conftest import REPO, TOKENS, launch_server, wait_ready

pytestmark = pytest.mark.slow
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

ADMIN = ("tok-ops-0123456789abcdef", "ops")
DAILY = 2


@pytest.fixture(scope="module")
def sealed(tmp_path_factory):
    root = tmp_path_factory.mktemp("sealed-serve")
    ws = root / "ws"
    tokens = root / "server" / "tokens.txt"
    tokens.parent.mkdir()
    tokens.write_text("".join(f"{t} {n}\n" for n, t in TOKENS.items()) + f"{ADMIN[0]} {ADMIN[1]} scope=admin\n")
    by_method, files = sealed_world(root, ws)
    server = wait_ready(launch_server(ws, root / "server", workers=1,
                                      extra_env={"FPR_BENCHMARK_DAILY_SUBMISSIONS": str(DAILY)}), workers=1)
    yield {"server": server, "ws": ws, "root": root, "by_method": by_method, "gallery": files}
    server.stop()


class Recorder:
    """Every response body a client got, to scan for the sealed gallery."""

    def __init__(self):
        self.bodies: list[tuple[str, bytes]] = []

    def __call__(self, response) -> None:
        response.read()
        self.bodies.append((f"{response.request.method} {response.request.url.path} {response.status_code}",
                            response.content + "".join(f"{k}: {v}\n" for k, v in response.headers.items()).encode()))


def _client(server, token: str, recorder: Recorder | None = None):
    hooks = {"response": [recorder]} if recorder else {}
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60,
                        event_hooks=hooks)


def _files(folder: Path) -> list:
    files = [("queries", ("queries.csv", (folder / "queries.csv").read_bytes(), "text/csv"))]
    files += [("images", (p.relative_to(folder).as_posix(), p.read_bytes(), "image/png"))
              for p in sorted(folder.rglob("*.png"))]
    return files


def _wait_scored(client, sid: str) -> dict:
    deadline = Deadline(240)
    while not deadline.passed():
        row = client.get(f"/v1/submissions/{sid}").json()
        if row.get("status") in ("scored", "failed"):
            return row
        time.sleep(0.2)
    raise AssertionError(f"submission {sid} not scored in {deadline.describe()}: {row}")


def _cli_summary(ws: Path, folder: Path, method: str, run: str) -> dict:
    """``fpr query`` on the same images, the method column set to the card's name: its summary row over groups."""
    df = pd.read_csv(folder / "queries.csv").assign(method=method)
    df.to_csv(folder / "cli.csv", index=False)
    out = subprocess.run([sys.executable, "-m", "fpr", "--workspace", str(ws), "query", "--index", INDEX,
                          "--queries", str(folder / "cli.csv"), "--run", run, "--device", "cpu", "--format", "json"],
                         capture_output=True, text=True, timeout=600, env={**__import__("os").environ,
                                                                           "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    rows = [r for r in doc["summary"] if r["method"] == method and r["group"] == "*"]
    assert len(rows) == 1
    return {**rows[0], "ap_one": next(m["ap_one_share"] for m in doc["headroom"]["methods"] if m["method"] == method)}


def test_sealed_benchmark_end_to_end(sealed):
    server, ws, root = sealed["server"], sealed["ws"], sealed["root"]
    rec = Recorder()
    admin = _client(server, ADMIN[0])
    alice, bob = _client(server, TOKENS["alice"], rec), _client(server, TOKENS["bob"], rec)

    r = alice.post("/v1/benchmarks", json={"name": "world-sealed", "index": INDEX})
    assert r.status_code == 403 and "needs scope 'admin'" in r.json()["error"]
    r = admin.post("/v1/benchmarks", json={"name": "world-sealed", "index": INDEX, "scorers": []})
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "world-sealed" and r.json()["weights_checksum"]

    folders = {m: submission_folder(sealed["by_method"][m], root / f"sub-{m}").parent for m in ("faithful", "generic")}
    bad = alice.post("/v1/benchmarks/world-sealed/submissions", files=_files(folders["faithful"]),
                     data={"method": "m-faithful", "description": "x", "link": "ftp://nope"})
    assert bad.status_code == 422 and "must be an http" in bad.json()["error"]

    sids = {}
    for client, method in ((alice, "faithful"), (bob, "generic")):
        r = client.post("/v1/benchmarks/world-sealed/submissions", files=_files(folders[method]),
                        data={"method": f"m-{method}", "description": f"the {method} method",
                              "link": "https://example.org/p", "params": '{"steps": 50}'})
        assert r.status_code == 202, r.text
        sids[method] = r.json()["submission"]
        assert r.headers["location"] == f"/v1/submissions/{sids[method]}"
    rows = {m: _wait_scored(alice, sid) for m, sid in sids.items()}
    assert all(row["status"] == "scored" for row in rows.values()), rows

    board = alice.get("/v1/benchmarks/world-sealed/leaderboard").json()
    assert [r["method"] for r in board["rows"]] == ["m-faithful", "m-generic"]
    for method, folder in folders.items():
        cli = _cli_summary(ws, folder, f"m-{method}", f"cli-{method}")
        row = next(r for r in board["rows"] if r["method"] == f"m-{method}")
        for key in ("map", "map_lo", "map_hi", "sim", "n_queries"):
            assert row[key] == cli[key], (method, key)
        assert row["ap_one_share"] == cli["ap_one"]
    page = alice.get("/v1/benchmarks/world-sealed/leaderboard.html")
    assert page.status_code == 200 and "m-faithful" in page.text and page.text.index("m-faithful") < \
        page.text.index("m-generic")

    # what else a submitter may ask: its own run (query side only), listings, the report's cards (refused)
    run = rows["faithful"]["submission_id"]
    own = f"bench-{run}"
    assert alice.get(f"/v1/runs/{own}").status_code == 200
    assert alice.get(f"/v1/runs/{own}/queries").status_code == 200
    assert alice.get(f"/v1/runs/{own}/report.html").status_code == 403
    cards = alice.get(f"/v1/submissions/{sids['faithful']}/cards")
    assert cards.status_code == 200 and cards.json()[0]["top"][0]["identity"]  # identities and ranks show
    assert bob.get(f"/v1/submissions/{sids['faithful']}/cards").status_code == 404
    assert bob.get(f"/v1/runs/{own}").status_code == 404  # another caller's sealed run
    r = alice.delete(f"/v1/runs/{own}")
    assert r.status_code == 409 and "an admin withdraws the submission" in r.json()["error"]
    assert bob.get("/v1/runs/cli-faithful/queries").status_code == 404
    for path in ("/v1/benchmarks", "/v1/galleries", "/v1/indices", "/v1/runs", "/v1/jobs", "/openapi.json",
                 "/v1/benchmarks/world-sealed/history", f"/v1/submissions/{sids['generic']}"):
        assert alice.get(path).status_code == 200
    assert INDEX not in json.dumps(alice.get("/v1/indices").json())
    assert admin.get("/v1/indices").json() and INDEX in admin.get("/v1/indices").text  # the admin sees it

    # the daily limit: two a day here, counted in the store (alice has used one; the store says she used another)
    from fpr import api
    from fpr.serve.auth import token_id

    api.take_submission_slot(token_id(TOKENS["alice"]), DAILY, workspace=ws)
    r = alice.post("/v1/benchmarks/world-sealed/submissions", files=_files(folders["faithful"]),
                   data={"method": "again", "description": "x"})
    assert r.status_code == 429 and "limit resets at" in r.json()["error"], r.text

    # withdraw: admin only; the row leaves the leaderboard and stays in the history
    assert alice.post(f"/v1/submissions/{sids['generic']}/withdraw", json={"reason": "x"}).status_code == 403
    r = admin.post(f"/v1/submissions/{sids['generic']}/withdraw", json={"reason": "tuned on the gallery"})
    assert r.status_code == 200 and r.json()["withdrawn_by"] == "ops"
    assert [r["method"] for r in alice.get("/v1/benchmarks/world-sealed/leaderboard").json()["rows"]] == \
        ["m-faithful"]
    history = {h["submission_id"]: h for h in alice.get("/v1/benchmarks/world-sealed/history").json()}
    assert history[sids["generic"]]["withdrawn_reason"] == "tuned on the gallery"

    # the hash: recomputed from the images with the published row alone
    published = alice.get(f"/v1/submissions/{sids['faithful']}").json()
    (root / "row.json").write_text(json.dumps(published))
    out = subprocess.run([sys.executable, "-m", "fpr", "--workspace", str(root / "elsewhere"), "benchmark",
                          "verify", sids["faithful"], str(folders["faithful"]), "--row", str(root / "row.json"),
                          "--format", "json"], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["match"] and json.loads(out.stdout)["computed"] == published["submission_hash"]

    assert len(rec.bodies) > 20
    found = {what: leaks(body, sealed["gallery"]) for what, body in rec.bodies}
    assert not any(found.values()), {k: v for k, v in found.items() if v}
