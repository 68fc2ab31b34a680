"""``score_blocks`` (what ``fpr query`` runs) at scale: the recheck path vs the full exact path (#22 item 3).

Q queries x G gallery items x dim D (synthetic clustered unit vectors, ``_synthetic.clustered``: G/20
identities, a flat FAISS index, scope all, k = 10), one fresh subprocess per run, the two paths
alternated round by round (``FPR_EXACT_PATH=recheck`` / ``full``). The full path (every score of the
block exact, then the metric engine and the top-k) costs minutes at 20k x 200k on this machine, so it
may run on the first ``--full-q`` queries only (same data: the queries are generated for Q and cut);
both runs hash the top-k rows, scores, relevance and every metric column of those queries, which
must be the same bits. Printed per path: wall seconds of ``score_blocks`` and the process's peak RSS
while scoring (VmHWM, reset after the data is built, so it is data + scoring), median [min - max].
The floor beside it: the float32 product alone (``np.matmul`` into one block buffer) over the same
blocks, and its GFLOP/s. The recheck counts give the share of elements whose exact score was computed.

    python benchmarks/bench_recheck.py [--q 20000 --g 200000 --dim 128 --full-q 2000 --rounds 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _timing import load  # noqa: E402  (the load format every benchmark prints)

RUN = r"""
import gc, hashlib, sys, time
import numpy as np
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/benchmarks"]
from _synthetic import clustered
from fpr.eval import scoring
from fpr.eval import recheck

def vm(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024

q_total, q, g, d, floor = (int(x) for x in sys.argv[2:7])
qv, v, gi, labels, qdf = clustered(q_total, g, d, g // 20)
del v  # the index holds the gallery (scored in place)
codes = labels.codes(qdf)
gi.norms()
gc.collect()
with open("/proc/self/clear_refs", "w") as f:  # reset the peak: VmHWM from here is data + scoring
    f.write("5")
rss0 = vm("VmRSS")
stats = recheck.RecheckStats()
t = time.perf_counter()
out = scoring.score_blocks(qv, np.arange(q), codes, "all", gi, 10, stats=stats)
secs = time.perf_counter() - t
peak = vm("VmHWM")
n = int(sys.argv[7])
h = hashlib.sha256()
for a in (out.top_rows[:n], out.top_scores[:n], out.top_relevant[:n], *(out.values[c][:n] for c in sorted(out.values))):
    h.update(np.ascontiguousarray(a).tobytes())
floor_s = float("nan")
if floor:  # the float32 product alone over the same blocks (the recheck path's first step)
    gal = recheck.RecheckedGallery(gi.vectors(), gi.norms())
    step = recheck.auto_block(g)
    t = time.perf_counter()
    for s in range(0, q, step):
        gal.proposals(np.ascontiguousarray(qv[s:s + step]))
    floor_s = time.perf_counter() - t
share = stats.rechecked / max(stats.elements, 1)
print(f"{secs:.3f} {rss0:.0f} {peak:.0f} {h.hexdigest()[:16]} {np.nanmean(out.values['ap']):.6f} {floor_s:.3f} "
      f"{share:.3e} {stats.relevant} {stats.band} {stats.topk} {stats.passed_filter / max(stats.elements, 1):.3e}")
"""


def run(path: str, args, q: int, floor: bool) -> list[str]:
    env = {**os.environ, "FPR_QUIET": "1", "FPR_EXACT_PATH": path}
    res = subprocess.run([sys.executable, "-c", RUN, str(ROOT), str(args.q), str(q), str(args.g), str(args.dim),
                          "1" if floor else "0", str(args.full_q)], capture_output=True, text=True, env=env, cwd=ROOT)
    if res.returncode:
        sys.exit(f"bench_recheck: the {path} run failed: {res.stderr.strip().splitlines()[-1]}")
    return res.stdout.split()


def spread(xs: list[float], fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))} - {fmt.format(max(xs))}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--q", type=int, default=20000)
    ap.add_argument("--g", type=int, default=200000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--full-q", type=int, default=None, help="queries the full path scores (default: all Q)")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    args.full_q = min(args.q, args.full_q or args.q)
    print(f"load average before: {load()}; {os.cpu_count()} cores; {args.q} x {args.g} x dim {args.dim}, "
          f"full path on the first {args.full_q} queries")
    runs = [("recheck", args.q), ("full", args.full_q)]
    res: dict[str, list[list[str]]] = {p: [] for p, _ in runs}
    for r in range(args.rounds):
        for path, q in (runs if r % 2 == 0 else runs[::-1]):
            res[path].append(run(path, args, q, floor=path == "recheck" and r == 0))
            x = res[path][-1]
            print(f"  round {r + 1} {path:8s} {float(x[0]):7.1f} s on {q} queries, peak RSS {x[2]} MiB "
                  f"(data {x[1]} MiB); load {load()}", flush=True)
    print(f"score_blocks, flat index, scope all, k=10; {args.rounds} round(s), median [min - max]:")
    for path, q in runs:
        rows = res[path]
        secs = [float(x[0]) for x in rows]
        print(f"  {path:8s} {spread(secs)} s for {q} queries ({spread([s / q * 1e3 for s in secs], '{:.2f}')} ms "
              f"per query), peak RSS {spread([float(x[2]) for x in rows], '{:.0f}')} MiB (data {rows[0][1]} MiB); "
              f"digest of the first {args.full_q} queries {rows[0][3]}")
    rc = res["recheck"][0]
    per_q = [float(a[0]) / args.q / (float(b[0]) / args.full_q) for a, b in zip(res["recheck"], res["full"])]
    print(f"  recheck/full time per query, per round: {spread(per_q, '{:.3f}')}; same bits: "
          f"{len({x[3] for rows in res.values() for x in rows}) == 1}; mAP (recheck, all queries) {rc[4]}")
    gflop = 2.0 * args.q * args.g * args.dim / 1e9
    print(f"  floor: the float32 product alone over the same blocks {float(rc[5]):.1f} s ({gflop / float(rc[5]):.0f} "
          f"GFLOP/s); rechecked share {float(rc[6]):.2e} (relevant {rc[7]}, band {rc[8]}, top-k {rc[9]}); "
          f"proposals past the one-comparison filter {float(rc[10]):.2e}")
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
