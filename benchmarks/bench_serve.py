"""``fpr serve`` on loopback vs the same work through the Python API, in the same run.

Measured (all bounded in count and time, everything on 127.0.0.1):

* a 100-image submission with the built-in encoder ``fpr-world-v1``: latency of the
  POST alone (upload + checks + queueing) and end to end (POST until ``done``) over
  ``--submissions`` rounds; anchor: ``fpr.api.run_query`` on the same 100 images in this
  process (the work a worker does, without HTTP and the queue);
* runs/minute: ``--small-runs`` 4-image runs submitted at once by as many clients,
  wall time until all are done, over ``--rpm-rounds`` rounds; anchor: the same runs one
  after another through ``fpr.api.run_query``;
* ``GET /v1/runs/{run}`` of a done run (status + report JSON) over ``--gets`` rounds;
  anchor: ``fpr.api.report(run).to_dict()``.

Every pair runs in interleaved rounds, the order rotated each round (benchmarks/_timing.py):
median [min - max], the HTTP/API ratio taken round by round, the load average before and after.
No physical limit applies beyond the anchor (the same work without the server).

    python benchmarks/bench_serve.py [--submissions 5] [--small-runs 12] [--rpm-rounds 3] [--gets 200] [--workers 1]

Needs the ``serve`` and ``test`` extras (FastAPI, uvicorn, httpx).
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing as T  # noqa: E402

INDEX = "bench-serve-fpr-world-v1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prepare(root: Path, size: int):
    from fpr import api
    from fpr.galleries.curate import GallerySpec
    from fpr.galleries.world import World, WorldConfig

    ws = root / "ws"
    build = World(WorldConfig(seed=0, identities=5, gallery=4, references=2, queries=2, size=size)).write(
        root / "world")
    api.import_gallery("bench-serve", build.records, GallerySpec(seed=0), workspace=ws, source="world")
    api.build_index("bench-serve", "fpr-world-v1", name=INDEX, workspace=ws, device="cpu")
    return ws, build.queries


def submission(rows):
    import pandas as pd

    def name(p):
        return "/".join(Path(p).parts[-3:])

    df = pd.DataFrame(rows)[["query_id", "path", "identity", "group", "method"]]
    df["path"] = [name(p) for p in df["path"]]
    files = [("queries", ("queries.csv", df.to_csv(index=False).encode(), "text/csv"))]
    files += [("images", (name(r["path"]), Path(r["path"]).read_bytes(), "image/png")) for r in rows]
    return files


def start_server(ws: Path, root: Path, workers: int, token: str):
    import httpx

    (root / "tokens").write_text(f"{token} bench\n")
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO), FPR_API_TOKENS_FILE=str(root / "tokens"), FPR_QUIET="1",
               FPR_MAX_QUEUED_PER_TOKEN="1000")
    log = open(root / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "fpr", "--workspace", str(ws), "serve", "--port", str(port),
                             "--workers", str(workers), "--device", "cpu"], env=env, stdout=subprocess.DEVNULL,
                            stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {(root / 'server.log').read_text()[-2000:]}")
        try:
            if httpx.get(url + "/v1/health", timeout=2).json()["workers_ready"] >= workers:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not become ready in 120 s")


def wait_done(client, run: str, timeout: float, interval: float = 0.05) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(f"/v1/runs/{run}").json()
        if body.get("status") in ("done", "failed"):
            return body
        time.sleep(interval)
    raise SystemExit(f"run {run} not done in {timeout:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--submissions", type=int, default=5, help="100-image submissions (each way)")
    ap.add_argument("--images", type=int, default=100)
    ap.add_argument("--small-runs", type=int, default=12, help="4-image runs for runs/minute (each way)")
    ap.add_argument("--rpm-rounds", type=int, default=3, help="rounds of the runs/minute pair")
    ap.add_argument("--gets", type=int, default=200)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--size", type=int, default=64, help="world image size")
    ap.add_argument("--timeout", type=float, default=300, help="per-run time limit in seconds")
    args = ap.parse_args()
    print(f"before: {T.machine()}")

    import httpx
    import pandas as pd

    from fpr import api

    os.environ.setdefault("FPR_QUIET", "1")
    root = Path(tempfile.mkdtemp(prefix="fpr-bench-serve-"))
    os.environ["FPR_CACHE_DIR"] = str(root / "cache")  # one embedding cache, inherited by the server
    ws, queries = prepare(root, args.size)
    big = queries[:args.images]
    if len(big) < args.images:
        raise SystemExit(f"the world has only {len(big)} queries")
    token = "bench-token-0123456789"
    proc, url = start_server(ws, root, args.workers, token)
    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=args.timeout)
    rows = []
    try:
        # Embeddings are cached by content hash, so every repeat (HTTP and API alike) after the first reuses
        # them: one warm-up each way, then the timed repeats.
        client.post("/v1/runs", data={"index": INDEX, "run": "warm-http"}, files=submission(big))
        wait_done(client, "warm-http", args.timeout)
        api.run_query(INDEX, pd.DataFrame(big), run="warm-api", workspace=ws, device="cpu")

        post_s: list[float] = []
        big_k = iter(range(10 ** 6))

        def big_http():
            k = next(big_k)
            files = submission(big)
            t = time.perf_counter()
            r = client.post("/v1/runs", data={"index": INDEX, "run": f"big-http-{k}"}, files=files)
            post_s.append(time.perf_counter() - t)
            assert r.status_code == 202, r.text
            assert wait_done(client, f"big-http-{k}", args.timeout)["status"] == "done"

        big_a = iter(range(10 ** 6))
        t_big = T.interleaved({"http": big_http, "api": lambda: api.run_query(
            INDEX, pd.DataFrame(big), run=f"big-api-{next(big_a)}", workspace=ws, device="cpu")}, args.submissions)
        rows.append((f"{args.images}-image submission, POST only", post_s, None))
        rows.append((f"{args.images}-image submission, POST until done", t_big["http"], t_big["api"]))

        small = [queries[(4 * i) % (len(queries) - 4):][:4] for i in range(args.small_runs)]
        rpm_round = iter(range(10 ** 6))

        def small_http():
            rr = next(rpm_round)
            done: list = []

            def one(i):
                with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                                  timeout=args.timeout) as c:
                    c.post("/v1/runs", data={"index": INDEX, "run": f"small-http-{rr}-{i}"},
                           files=submission(small[i]))
                    done.append(wait_done(c, f"small-http-{rr}-{i}", args.timeout, interval=0.25)["status"])

            threads = [threading.Thread(target=one, args=(i,)) for i in range(args.small_runs)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(args.timeout)
            assert done.count("done") == args.small_runs, done

        api_round = iter(range(10 ** 6))

        def small_api():
            rr = next(api_round)
            for i in range(args.small_runs):
                api.run_query(INDEX, pd.DataFrame(small[i]), run=f"small-api-{rr}-{i}", workspace=ws, device="cpu")

        t_small = T.interleaved({"http": small_http, "api": small_api}, args.rpm_rounds)

        t_get = T.interleaved({"http": lambda: client.get("/v1/runs/big-http-0").raise_for_status(),
                               "api": lambda: api.report("big-http-0", workspace=ws).to_dict()}, args.gets)
        rows.append(("GET /v1/runs/{run} (done, with report)", t_get["http"], t_get["api"]))
    finally:
        client.close()
        proc.terminate()
        proc.wait(20)

    print(f"fpr serve on loopback, {args.workers} worker(s), CPU, fpr-world-v1, {args.size}px images; "
          f"{T.machine()} (after)")
    print("milliseconds, median [min - max] over interleaved rounds (order rotated each round)\n")
    print("| measure | rounds | http ms | anchor: api ms | http / api per round |")
    print("|---|---|---|---|---|")
    for name, h, a in rows:
        anchor = f"{T.spread(a).fmt('.0f', 1e3)} | {T.ratios(h, a).fmt('.2f')}" if a else "- | -"
        print(f"| {name} | {len(h)} | {T.spread(h).fmt('.0f', 1e3)} | {anchor} |")
    http_rpm = [args.small_runs / t * 60 for t in t_small["http"]]
    api_rpm = [args.small_runs / t * 60 for t in t_small["api"]]
    print(f"\nruns/minute ({args.small_runs} 4-image runs, {args.rpm_rounds} rounds): http "
          f"{T.spread(http_rpm).fmt('.1f')} (all submitted at once), anchor api {T.spread(api_rpm).fmt('.1f')} "
          f"(one after another), http/api per round {T.ratios(http_rpm, api_rpm).fmt('.2f')}")


if __name__ == "__main__":
    main()
