"""Q x G memory of the streamed evaluation.

1. Peak RSS of ``fpr query --scope all`` (a subprocess; ru_maxrss from wait4) with 500 and
   with 5,000 queries against the same 20,000-item gallery (``pixels-16`` encoder, 16 px noise
   images, warm embedding cache so the numbers are about scoring): the ratio 5000/500 should
   stay <= 1.3. Baseline in the same run: the same commands with the code of ``--baseline``
   (a checkout of main before streaming), when given.
2. One run of 20,000 queries x 200,000 gallery items through the Python API
   (:func:`fpr.eval.pipeline.score_blocks` with a flat FAISS index of synthetic vectors):
   peak RSS and time, in a subprocess.

    python benchmarks/bench_scale_memory.py [--gallery 20000] [--baseline /work/main] [--big-g 200000]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def write_images(folder: Path, n: int, seed: int, tree: bool, n_ids: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        ident = i % n_ids
        arr = rng.integers(0, 256, size=(16, 16, 3), dtype=np.uint8)
        p = folder / ("grp" if tree else "") / (f"id{ident}" if tree else "") / f"{seed}-{i}.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(arr).save(p)
        rows.append({"path": str(p), "identity": f"id{ident}", "group": "grp", "method": "m"})
    return rows


def run_peak(cmd: list[str], env: dict, cwd: Path) -> tuple[float, float, int]:
    """(peak RSS MiB, seconds, exit code) of a subprocess."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode()
    code = os.waitstatus_to_exitcode(status)
    if code:
        print(err[-2000:], file=sys.stderr)
    return usage.ru_maxrss / 1024, time.perf_counter() - t, code


def fpr_cmd(code_root: Path, ws: Path, *args) -> tuple[list[str], dict]:
    env = {**os.environ, "PYTHONPATH": str(code_root), "FPR_QUIET": "1", "OMP_NUM_THREADS": "2"}
    return [sys.executable, "-m", "fpr", "--workspace", str(ws), *args], env


def query_memory(args) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="fpr-mem-"))
    t = time.perf_counter()
    write_images(tmp / "gallery", args.gallery, 0, True, args.gallery // 10)
    qrows = write_images(tmp / "queries", 5000, 1, False, args.gallery // 10)
    pd.DataFrame(qrows[:500]).to_csv(tmp / "q500.csv", index=False)
    pd.DataFrame(qrows).to_csv(tmp / "q5000.csv", index=False)
    print(f"wrote {args.gallery} gallery + 5000 query images in {time.perf_counter() - t:.0f} s", flush=True)
    codes = [("this branch", ROOT)] + ([("baseline", Path(args.baseline))] if args.baseline else [])
    if args.only_baseline:
        codes = codes[1:]
    for label, code in codes:  # run from the code's own folder: `python -m` puts the cwd first on sys.path
        ws = tmp / f"ws-{label.replace(' ', '-')}"
        env_cache = {"FPR_CACHE_DIR": str(tmp / f"cache-{label.replace(' ', '-')}")}
        for step in (["gallery", "import", "--name", "g", "--folder", str(tmp / "gallery"), "--references", "0"],
                     ["index", "build", "--gallery", "g", "--encoder", "pixels-16"]):
            cmd, env = fpr_cmd(code, ws, *step)
            t = time.perf_counter()
            subprocess.run(cmd, env={**env, **env_cache}, check=True, stdout=subprocess.DEVNULL, cwd=code)
            print(f"[{label}] {step[0]} {step[1]}: {time.perf_counter() - t:.0f} s", flush=True)
        # warm the cache for the queries so the measured runs are about scoring
        cmd, env = fpr_cmd(code, ws, "query", "--index", "g-pixels-16", "--queries", str(tmp / "q5000.csv"),
                           "--scope", "all", "--run", "warm")
        subprocess.run(cmd, env={**env, **env_cache}, check=True, stdout=subprocess.DEVNULL, cwd=code)
        peaks = {}
        for n in (500, 5000):
            cmd, env = fpr_cmd(code, ws, "query", "--index", "g-pixels-16", "--queries", str(tmp / f"q{n}.csv"),
                               "--scope", "all", "--run", f"r{n}", "--overwrite")
            peaks[n], secs, rc = run_peak(cmd, {**env, **env_cache}, code)
            print(f"[{label}] fpr query --scope all, {n} queries x {args.gallery} gallery: peak RSS {peaks[n]:.0f} MiB, "
                  f"{secs:.1f} s, exit {rc}", flush=True)
        print(f"[{label}] peak RSS ratio 5000/500 queries: {peaks[5000] / peaks[500]:.2f}", flush=True)


BIG = """
import sys, time, resource
import numpy as np
sys.path[:0] = [sys.argv[1], sys.argv[6]]
from _synthetic import clustered
from fpr.eval import scoring
q, g, d, ids = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
qv, v, gi, labels, qdf = clustered(q, g, d, ids)
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
out = scoring.score_blocks(qv, np.arange(q), labels.codes(qdf), "all", gi, 10)
secs = time.perf_counter() - t
print(f"{secs:.1f} {rss0:.0f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} "
      f"{np.nanmean(out.values['ap']):.4f}")
"""


def big_run(args) -> None:
    q, g, d = args.big_q, args.big_g, args.big_dim
    res = subprocess.run([sys.executable, "-c", BIG, str(ROOT), str(q), str(g), str(d), str(g // 20),
                          str(ROOT / "benchmarks")],
                         capture_output=True, text=True, env={**os.environ, "FPR_QUIET": "1"})
    if res.returncode:
        print(res.stderr[-3000:])
        return
    secs, rss_data, rss_peak, m = res.stdout.split()
    dense = q * g * 19 / 2 ** 30
    print(f"Python API, {q} queries x {g} gallery items (dim {d}, synthetic, scope all): {float(secs):.1f} s scoring, "
          f"peak RSS {rss_peak} MiB (data alone {rss_data} MiB; the Q x G arrays of the in-memory path would need "
          f"~{dense:.0f} GiB), mAP {m}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gallery", type=int, default=20000)
    ap.add_argument("--baseline", default=None, help="a checkout of the pre-streaming code (e.g. /work/main)")
    ap.add_argument("--big-q", type=int, default=20000)
    ap.add_argument("--big-g", type=int, default=200000)
    ap.add_argument("--big-dim", type=int, default=64)
    ap.add_argument("--skip-cli", action="store_true")
    ap.add_argument("--only-baseline", action="store_true")
    ap.add_argument("--skip-big", action="store_true")
    args = ap.parse_args()
    if not args.skip_cli:
        query_memory(args)
    if not args.skip_big:
        big_run(args)


if __name__ == "__main__":
    main()
