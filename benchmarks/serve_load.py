"""The service under load and under a fuzzer, measured from outside (issue #35 "Done when" figures).

``load``: 16 clients (one token each) for ``--seconds`` against one ``fpr serve`` (2 workers, the world of
``tests/serve/conftest.py``): each client submits a 4-image run (one of three fixed sets), polls it until done
and fetches its per-query table, again and again until the time is up. Printed: requests, errors (a status
other than the expected one, a transport error, a run that failed), runs completed, how many of them equal the
``fpr query`` CLI run of the same set (every per-query column the tests compare), p50/p95 client latency of
every request, the load average before and after.

``fuzz``: schemathesis against the same server with ``--max-examples`` per operation and phase; with
``--stateful-hook`` its submissions carry a real archive (as ``tests/serve/test_runs.py``'s stateful test).
Printed from the server's request log: cases, responses by status class, the 5xx (must be none), submissions
accepted and refused by status, GET /v1/runs/{run} answered 200.

    python benchmarks/serve_load.py load --seconds 60 --clients 16
    python benchmarks/serve_load.py fuzz --max-examples 100 [--phases examples,coverage,fuzzing,stateful]
"""
from __future__ import annotations

import argparse
import collections
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.serve.conftest import (INDEX, TOKENS, launch_server, prepare_workspace, queries_csv,  # noqa: E402
                                  submission, wait_ready)

COMPARED = ["status", "ap", "first_hit_rank", "last_hit_rank", "n_relevant", "n_scope", "cmc1", "cmc5", "cmc10",
            "inp", "sim", "n_references"]


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cli_runs(ws: Path, sets: list[list[dict]], tmp: Path) -> dict:
    """Each set run once through the CLI (``fpr query``); its per-query table by query id."""
    import pandas as pd

    from fpr import api

    out = {}
    for k, rows in enumerate(sets):
        table = tmp / f"cli-set-{k}.csv"
        table.write_bytes(pd.DataFrame(rows)[["query_id", "path", "identity", "group", "method"]]
                          .to_csv(index=False).encode())
        subprocess.run([sys.executable, "-m", "fpr", "--workspace", str(ws), "query", "--index", INDEX,
                        "--queries", str(table), "--run", f"cli-set-{k}", "--device", "cpu"], check=True,
                       env=dict(os.environ, PYTHONPATH=str(REPO), FPR_QUIET="1"), stdout=subprocess.DEVNULL)
        out[k] = api.report(f"cli-set-{k}", workspace=ws).per_query.set_index("query_id")
    return out


def _equal(got, exp) -> bool:
    import numpy as np

    got = got.set_index("query_id").loc[exp.index]
    for col in COMPARED:
        if exp[col].dtype.kind == "f" or col == "sim":
            if not np.allclose(got[col].to_numpy(float), exp[col].to_numpy(float), rtol=0, atol=1e-6,
                               equal_nan=True):
                return False
        elif got[col].tolist() != exp[col].tolist():
            return False
    return True


def load(args, server, ws: Path, queries: list[dict], tmp: Path) -> None:
    import pandas as pd

    sets = [queries[i * 4:(i + 1) * 4] for i in range(3)]
    t = time.monotonic()
    expected = cli_runs(ws, sets, tmp)
    print(f"CLI runs of the 3 sets: {time.monotonic() - t:.1f} s")
    lat: list[float] = []
    errors: list[str] = []
    done: list[tuple[int, bool]] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + args.seconds

    def call(c, method: str, url: str, ok: int, **kw):
        t0 = time.perf_counter()
        try:
            r = c.request(method, url, **kw)
        except Exception as exc:  # counted as an error, the client goes on
            with lock:
                errors.append(f"{method} {url}: {type(exc).__name__}")
            return None
        with lock:
            lat.append((time.perf_counter() - t0) * 1000)
            if r.status_code != ok:
                errors.append(f"{method} {url}: {r.status_code} {r.text[:120]}")
        return r if r.status_code == ok else None

    def client(i: int) -> None:
        n = 0
        with server.client(f"c{i:02d}") as c:
            while time.monotonic() < stop_at:
                k, run = (i + n) % 3, f"load-{i:02d}-{n}"
                n += 1
                if call(c, "POST", "/v1/runs", 202, data={"index": INDEX, "run": run},
                        files=submission(sets[k])) is None:
                    continue
                body = {}
                while body.get("status") not in ("done", "failed"):
                    time.sleep(0.5)
                    r = call(c, "GET", f"/v1/runs/{run}", 200)
                    body = r.json() if r is not None else body
                if body["status"] == "failed":
                    with lock:
                        errors.append(f"run {run} failed: {body.get('error')}")
                    continue
                r = call(c, "GET", f"/v1/runs/{run}/queries", 200, params={"format": "parquet"})
                if r is not None:
                    same = _equal(pd.read_parquet(io.BytesIO(r.content)), expected[k])
                    with lock:
                        done.append((k, same))

    print(f"load before: {_load()}")
    load_start = len(server.log.read_text().splitlines())
    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.monotonic() - t0
    import numpy as np

    p = np.percentile(lat, [50, 95]) if lat else [float("nan")] * 2
    print(f"{args.clients} clients, {args.seconds} s of submissions ({wall:.1f} s until the last run was read): "
          f"{len(lat) + sum('Error' in e for e in errors)} requests, {len(errors)} errors, {len(done)} runs "
          f"completed, {sum(s for _, s in done)} equal to the CLI run of the same set; latency p50 {p[0]:.0f} ms, "
          f"p95 {p[1]:.0f} ms, max {max(lat):.0f} ms; load after: {_load()}")
    for e in errors[:20]:
        print("  error:", e)
    start = load_start  # the server's own time per request (its log), without the client's queueing
    ms = [json.loads(ln)["ms"] for ln in server.log.read_text().splitlines()[start:]
          if ln.startswith("{") and '"event": "request"' in ln]
    by_kind = {}
    for ln in server.log.read_text().splitlines()[start:]:
        if ln.startswith("{") and '"event": "request"' in ln:
            r = json.loads(ln)
            by_kind.setdefault(f"{r['method']} {re.sub(r'^/v1/runs/[^/]+', '/v1/runs/{run}', r['path'])}",
                               []).append(r["ms"])
    print(f"server log: {len(ms)} requests, server ms p50 {np.percentile(ms, 50):.0f}, p95 {np.percentile(ms, 95):.0f}")
    for kind, v in sorted(by_kind.items()):
        print(f"  {kind}: {len(v)} requests, server ms p50 {np.percentile(v, 50):.0f}, p95 {np.percentile(v, 95):.0f}")


HOOKS = """
import schemathesis

ARCHIVE = open({archive!r}, "rb").read()


@schemathesis.hook
def before_call(context, case, kwargs):
    if case.method.upper() == "POST" and case.path == "/v1/runs":
        scope = case.body.get("scope") if isinstance(case.body, dict) else None
        case.body = {{"index": {index!r}, "archive": ARCHIVE, **({{"scope": scope}} if scope else {{}})}}
"""


def _hook(queries: list[dict], tmp: Path) -> dict:
    """The environment that makes schemathesis' submissions carry a real 2-image archive (HOOKS)."""
    import zipfile

    from tests.serve.conftest import upload_name

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("queries.csv", queries_csv(queries[:2]))
        for r in queries[:2]:
            zf.writestr(upload_name(r["path"]), Path(r["path"]).read_bytes())
    (tmp / "archive.zip").write_bytes(buf.getvalue())
    (tmp / "load_hooks.py").write_text(HOOKS.format(archive=str(tmp / "archive.zip"), index=INDEX))
    return {"SCHEMATHESIS_HOOKS": "load_hooks", "PYTHONPATH": str(tmp)}


def fuzz(args, server, ws: Path, queries: list[dict], tmp: Path) -> None:
    """The plain pass (``--phases``), then with ``--stateful-hook`` the stateful phase with real archives."""
    passes = [] if args.phases == "none" else [("plain", args.phases, {})]
    if args.stateful_hook:
        passes.append(("hooked", "stateful", _hook(queries, tmp)))
    for label, phases, hook_env in passes:
        print(f"--- {label} pass: phases {phases}, --max-examples {args.max_examples}, seed {args.seed}")
        har = tmp / f"{label}.har"
        _fuzz_pass(args, server, tmp, phases, dict(os.environ, **hook_env), har)
        if args.har_dir and har.exists():
            Path(args.har_dir).mkdir(parents=True, exist_ok=True)
            shutil.copy(har, Path(args.har_dir) / har.name)


def _fuzz_pass(args, server, tmp: Path, phases: str, env: dict, har_path: Path) -> None:
    st = shutil.which("st", path=os.path.dirname(sys.executable)) or shutil.which("schemathesis")
    start = len(server.log.read_text().splitlines())
    cmd = [st, "run", f"{server.url}/openapi.json", "--checks", "not_a_server_error", "--phases", phases,
           "--max-examples", str(args.max_examples), "--seed", str(args.seed), "-H",
           f"Authorization: Bearer {TOKENS[args.user]}", "--request-timeout", "30", "--generation-database",
           "none", "--no-color", "--report", "har", "--report-har-path", str(har_path)]
    print("load before:", _load())
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=tmp, env=env)
    print(f"schemathesis exit {out.returncode} in {time.monotonic() - t0:.0f} s; load after: {_load()}")
    print("\n".join(ln for ln in out.stdout.splitlines()[-30:] if ln.strip()))
    reqs = [json.loads(ln) for ln in server.log.read_text().splitlines()[start:]
            if ln.startswith("{") and '"event": "request"' in ln]
    classes = collections.Counter(f"{r['status'] // 100}xx" if r["status"] else "none" for r in reqs)
    posts = collections.Counter(r["status"] for r in reqs if r["method"] == "POST" and r["path"] == "/v1/runs")
    reads = sum(1 for r in reqs if r["method"] == "GET" and re.fullmatch(r"/v1/runs/[^/]+", r["path"])
                and r["status"] == 200)
    print(f"server log: {len(reqs)} requests, by class {dict(sorted(classes.items()))}; POST /v1/runs by status "
          f"{dict(sorted(posts.items()))}; GET /v1/runs/{{run}} 200: {reads}")
    print("5xx:", [(r["method"], r["path"], r["status"]) for r in reqs if (r["status"] or 0) >= 500][:20])
    if har_path.exists():  # why submissions were refused: the answers' one-line errors
        refused = collections.Counter()
        for e in json.loads(har_path.read_text())["log"]["entries"]:
            req, res = e["request"], e["response"]
            if req["method"] == "POST" and req["url"].endswith("/v1/runs") and res["status"] != 202:
                try:
                    msg = json.loads(res["content"].get("text") or "{}").get("error", "")
                except ValueError:
                    msg = (res["content"].get("text") or "")[:60]
                refused[f"{res['status']} " + re.sub(r"'[^']*'", "'...'", msg)[:100]] += 1
        print("POST /v1/runs refusals by message:")
        for msg, n in refused.most_common(20):
            print(f"  {n:5d}  {msg}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("load", "fuzz"))
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-examples", type=int, default=100)
    ap.add_argument("--phases", default="examples,coverage,fuzzing,stateful", help="'none': only the hooked pass")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--har-dir", help="keep schemathesis' HAR files here")
    ap.add_argument("--user", default="bob")
    ap.add_argument("--stateful-hook", action="store_true", help="real archives in submissions (a hook)")
    ap.add_argument("--queued-per-token", default="3")
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fpr-serve-load-") as d:
        tmp = Path(d)
        server = launch_server(tmp / "ws", tmp, workers=args.workers,
                               extra_env={"FPR_MAX_QUEUED_PER_TOKEN": args.queued_per_token})
        try:
            ws, queries = prepare_workspace(tmp)
            wait_ready(server, workers=args.workers, timeout=300)
            print(f"{os.cpu_count()} cores; python {sys.version.split()[0]}; commit "
                  f"{subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True, cwd=REPO).stdout.strip()}")
            (load if args.what == "load" else fuzz)(args, server, ws, queries, tmp)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
