"""The DB++ column on the demo world, request counts cold vs warm, and what each fault looks like to a user.

Runs ``fpr demo --quick`` into a temporary workspace, starts the loopback test
judge (``tests/scorers/judges/server.py``: a real HTTP server speaking the OpenAI
chat-completions protocol; its "concept judge" compares the reference and the
query pixel by pixel, so it is a stand-in for GPT-4o, not a model), then:

1. ``fpr score --run RUN --scorers dreambench-concept`` (cold: every answer requested),
   the same again with ``--overwrite`` (warm: every answer from ``<workspace>/judge-cache``),
   and ``fpr report --run RUN --format json``: the ``dreambench-concept.score`` column next to mAP (the
   printed table lists the judge's columns among those not shown);
2. ``fpr query ... --scorers dreambench-concept --scorer-option dreambench-concept.mode=choice``:
   the judge picks among the 4 nearest gallery identities, next to the retrieval's own top-1;
3. a failure table: each scripted fault, one query, and what ``fpr`` stores/prints.

Not a speed benchmark: what it measures are request counts (cold: one per query, warm: none) and
values. The two wall times (whole ``fpr score`` commands, one run each, process start included) are
context only; the judge is a local stand-in, so no remote latency or physical limit applies. The load
average is printed before and after.

    PYTHONPATH=. python benchmarks/bench_judges.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing as T  # noqa: E402

from tests.scorers.judges.server import API_KEY, MODELS, Fault, JudgeServer  # noqa: E402


def fpr(ws: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FPR_QUIET": "1"}
    r = subprocess.run([sys.executable, "-m", "fpr", "--workspace", str(ws), *args], capture_output=True, text=True,
                       env=env)
    if check and r.returncode != 0:
        raise SystemExit(f"fpr {' '.join(args)} failed: {r.stderr.strip()}")
    return r


def main() -> None:
    print(f"before: {T.machine()}\n")
    tmp = Path(tempfile.mkdtemp(prefix="fpr-judges-"))
    ws = tmp / "ws"
    os.environ["FPR_CACHE_DIR"] = str(tmp / "cache")
    os.environ["FPR_OFFLINE"] = "1"
    demo = json.loads(fpr(ws, "demo", "--quick", "--format", "json").stdout)
    run = demo["run"]
    n_queries = sum(r["n_queries"] for r in demo["summary"] if r["group"] == "*")
    with JudgeServer() as server:
        os.environ.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=API_KEY, FPR_JUDGE_MODEL=MODELS[0])
        print(f"## demo world (quick): run {run}, {n_queries} queries, judge {MODELS[0]} at {server.base_url}\n")
        t = time.perf_counter()
        fpr(ws, "score", "--run", run, "--scorers", "dreambench-concept")
        cold_s, cold_n = time.perf_counter() - t, server.count()
        server.reset()
        t = time.perf_counter()
        fpr(ws, "score", "--run", run, "--scorers", "dreambench-concept", "--overwrite")
        warm_s, warm_n = time.perf_counter() - t, server.count()
        report = fpr(ws, "report", "--run", run, "--format", "json")
        rows = json.loads(report.stdout)["runs"][0]["summary"]  # the fpr.run-results/1 document: one run here
        print("| method | group | n | mAP | dreambench-concept | DB++ missing | answers cached |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            if r["group"] != "*":
                continue
            print(f"| {r['method']} | {r['group']} | {r['n_queries']} | {r['map']:.3f} | "
                  f"{r['dreambench-concept.score']:.3f} | {r['dreambench-concept.missing']:.0f} | "
                  f"{r['dreambench-concept.cached']:.0%} |")
        print("\n`fpr report --run RUN` (table, as printed):\n")
        print("```")
        print(fpr(ws, "report", "--run", run).stdout.rstrip())
        print("```\n")
        print("| pass | requests to the endpoint | wall s (incl. process start) |")
        print("|---|---|---|")
        print(f"| cold `fpr score` | {cold_n} | {cold_s:.1f} |")
        print(f"| warm `fpr score --overwrite` | {warm_n} | {warm_s:.1f} |\n")

        server.reset()
        queries = Path(demo["images"]) / "queries.csv"
        out = json.loads(fpr(ws, "query", "--index", demo["index"], "--queries", str(queries), "--run", "choice",
                             "--scorers", "dreambench-concept", "--scorer-option", "dreambench-concept.mode=choice",
                             "--format", "json").stdout)
        print(f"multiple choice among the 4 nearest gallery identities ({server.count()} requests):\n")
        print("| method | mAP | cmc@1 | judge correct | retrieval top-1 identity | truth offered |")
        print("|---|---|---|---|---|---|")
        for r in out["summary"]:
            if r["group"] == "*":
                print(f"| {r['method']} | {r['map']:.3f} | {r['cmc@1']:.3f} | "
                      f"{r['dreambench-concept.choice_correct']:.3f} | {r['dreambench-concept.retrieval_correct']:.3f}"
                      f" | {r['dreambench-concept.choice_in_options']:.3f} |")
        print()
        failure_table(tmp, server)
    print(f"\nafter: load average {T.load()}")


FAULTS = [
    ("429 once, then success", Fault(status=429, times=1)),
    ("429 on every try", Fault(status=429)),
    ("500 on every try", Fault(status=500)),
    ("502 HTML error page", Fault(status=502, body="<html><h1>502 Bad Gateway</h1></html>",
                                  content_type="text/html")),
    ("no reply in time", Fault(delay=3.0)),
    ("truncated JSON body", Fault(body='{"choices": [{"message": {"content": "Sco')),
    ("HTML page with status 200", Fault(body="<html>maintenance</html>", content_type="text/html")),
    ("refusal field", Fault(refusal="I can't help with that.")),
    ("refusing sentence", Fault(content="I'm sorry, but I can't evaluate people.")),
    ("no 'Score:' line", Fault(content="Looks the same to me.")),
    ("score out of range", Fault(content="Great.\nScore: 9")),
    ("image too large (413)", Fault(status=413)),
]


def failure_table(tmp: Path, server: JudgeServer) -> None:
    from fpr.errors import FprError
    from fpr.scorers import QueryBatch, run_scorers
    from PIL import Image

    img = tmp / "q.png"
    Image.new("RGB", (32, 32), (90, 90, 90)).save(img)
    opts = {"dreambench-prompt.timeout": "1", "dreambench-prompt.max_retries": "2"}
    print("| fault (per query) | value | note (the reason stored with the NaN) | requests | cached on rerun |")
    print("|---|---|---|---|---|")
    for k, (label, fault) in enumerate(FAULTS):
        marker = f"FAULT-{k}-"
        server.faults.clear()
        server.faults[marker] = fault
        server.reset()
        batch = QueryBatch(["q"], [str(img)], ["i"], ["g"], [f"a dog {marker}"], [[]], options=opts,
                           workspace=tmp / "faults")
        df = run_scorers(["dreambench-prompt"], batch)
        row = df[df.metric == "score"].iloc[0]
        n = server.count()
        server.reset()
        again = run_scorers(["dreambench-prompt"], batch)
        cached = int(again[again.metric == "cached"]["value"].iloc[0])
        print(f"| {label} | {row['value']:.2f} | {row['note'] or ''} | {n} | {'yes' if cached else 'no'} |")
    server.faults.clear()
    print("\n| fault (whole run) | what the user sees (stderr, exit 2) |")
    print("|---|---|")
    cases = [("wrong key (401)", {"OPENAI_API_KEY": "nope"}), ("unknown model (404)", {"FPR_JUDGE_MODEL": "gpt-9"}),
             ("endpoint down", {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}),
             ("FPR_OFFLINE=1, remote endpoint", {"OPENAI_BASE_URL": "https://api.example.com/v1"}),
             ("no model given", {"FPR_JUDGE_MODEL": ""})]
    for label, env in cases:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            run_scorers(["dreambench-prompt"], QueryBatch(["q"], [str(img)], ["i"], ["g"], ["x"], [[]],
                                                          options={"dreambench-prompt.max_retries": "0"},
                                                          workspace=tmp / "faults"))
            line = "(no error)"
        except FprError as exc:
            line = f"fpr: error: {exc.one_line()}"
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        print(f"| {label} | `{line}` |")


if __name__ == "__main__":
    main()
