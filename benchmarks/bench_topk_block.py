"""Top-k from the block's scores vs a second FAISS pass (#22 item 3, first half).

``score_blocks`` (the path ``fpr query`` uses) on Q queries x G gallery items (synthetic clustered
unit vectors, a flat FAISS index, scope all, k = 10), in a fresh subprocess per run: this tree against
an anchor tree (the previous commit, whose flat-index top-k was a FAISS search re-scored with the
block's scores), alternated A B A B. Printed per tree: wall seconds of ``score_blocks`` and peak RSS,
median [min - max] over the rounds; the ratio is taken round by round; and a digest of the stored
top-k rows, top-k scores and AP, which must be the same for both trees. The floor printed beside is
the exact scores alone (``fpr.index.exact.exact_scores`` over the same blocks, no metrics, no top-k),
measured in this tree's subprocess. The load average is printed before and after.

    git archive HEAD~1 | tar -x -C /tmp/fpr-anchor
    python benchmarks/bench_topk_block.py --anchor /tmp/fpr-anchor [--q 20000 --g 200000 --dim 128 --rounds 1]

``--step-rounds N`` first times the top-k step alone, in this tree, on four blocks of the size
``score_blocks`` picks for G: from the block's scores vs the FAISS search + re-score (the previous
path, kept for GPUs), interleaved, checked equal; ``--rounds 0`` skips the end-to-end runs.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RUN = """
import hashlib, resource, sys, time
import numpy as np
sys.path[:0] = [sys.argv[1], sys.argv[7]]
from _synthetic import clustered
from fpr.eval import scoring
from fpr.index import exact
q, g, d, ids, floor = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1"
qv, v, gi, labels, qdf = clustered(q, g, d, ids)
codes = labels.codes(qdf)
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
out = scoring.score_blocks(qv, np.arange(q), codes, "all", gi, 10)
secs = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
h = hashlib.sha256()
for a in (out.top_rows, out.top_scores, out.top_relevant, out.values["ap"]):
    h.update(np.ascontiguousarray(a).tobytes())
floor_s = float("nan")
if floor:  # the exact scores alone over the same blocks (what any top-k needs first)
    step = scoring.auto_block(g)
    norms = gi.norms()
    t = time.perf_counter()
    for s in range(0, q, step):
        exact.exact_scores(np.ascontiguousarray(qv[s:s + step]), v, vector_norms=norms,
                           work_bytes=scoring.SCORE_WORK_BYTES)
    floor_s = time.perf_counter() - t
print(f"{secs:.3f} {rss0:.0f} {peak:.0f} {h.hexdigest()[:16]} {np.nanmean(out.values['ap']):.6f} {floor_s:.3f}")
"""


STEP = """
import os, statistics, sys, time
import numpy as np
sys.path[:0] = [sys.argv[1], sys.argv[5]]
from _synthetic import clustered
from fpr.eval import scoring
g, d, rounds = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
step = scoring.auto_block(g)
qv, v, gi, labels, qdf = clustered(4 * step, g, d, g // 20)
blocks = [np.ascontiguousarray(qv[s:s + step]) for s in range(0, 4 * step, step)]
src = scoring._ScoreSource(gi, g)
scoring.faiss_search_for_flat = lambda: False
from_block = src.part(None)
scoring.faiss_search_for_flat = lambda: True
faiss_pass = src.part(None)  # the previous path: FAISS search of k + margin, re-scored, checked
scores = [from_block.scores(b) for b in blocks]
t = {"block": [], "faiss": []}
for r in range(rounds):
    for name in (("block", "faiss") if r % 2 == 0 else ("faiss", "block")):
        part = from_block if name == "block" else faiss_pass
        t0 = time.perf_counter()
        got = [part.top_k(b, s, 10) for b, s in zip(blocks, scores)]
        t[name].append((time.perf_counter() - t0) / len(blocks))
        if name == "block":
            ref = got
        else:
            assert all((a[0] == b[0]).all() and (a[1] == b[1]).all() for a, b in zip(ref, got)), "top-k differ"
t0 = time.perf_counter()
for b in blocks:
    from_block.scores(b)
t_scores = (time.perf_counter() - t0) / len(blocks)
med = {k: statistics.median(x) for k, x in t.items()}
ratio = [a / b for a, b in zip(t["block"], t["faiss"])]
print(f"top-k step alone, {step}-query blocks x {g} gallery x dim {d}, k=10, {rounds} interleaved rounds of "
      f"{len(blocks)} blocks, seconds per block median [min - max]:")
for k, label in (("block", "from the block's scores"), ("faiss", "FAISS search + re-score")):
    print(f"  {label:26s} {med[k]:.4f} [{min(t[k]):.4f} - {max(t[k]):.4f}]")
print(f"  from-block / FAISS per round: {statistics.median(ratio):.3f} [{min(ratio):.3f} - {max(ratio):.3f}]; "
      f"same top-k: True; the block's exact scores themselves: {t_scores:.4f} s per block")
"""


def run_step(args) -> None:
    env = {**os.environ, "FPR_QUIET": "1"}
    res = subprocess.run([sys.executable, "-c", STEP, str(ROOT), str(args.g), str(args.dim), str(args.step_rounds),
                          str(ROOT / "benchmarks")], capture_output=True, text=True, env=env, cwd=ROOT)
    if res.returncode:
        sys.exit(f"bench_topk_block: the top-k step run failed: {res.stderr.strip().splitlines()[-1]}")
    print(res.stdout, end="", flush=True)


def run(code: Path, args, floor: bool) -> tuple[float, float, float, str, str, float]:
    env = {**os.environ, "FPR_QUIET": "1"}
    res = subprocess.run([sys.executable, "-c", RUN, str(code), str(args.q), str(args.g), str(args.dim),
                          str(args.g // 20), "1" if floor else "0", str(ROOT / "benchmarks")], capture_output=True, text=True, env=env, cwd=code)
    if res.returncode:
        sys.exit(f"bench_topk_block: the run with {code} failed: {res.stderr.strip().splitlines()[-1]}")
    secs, rss0, peak, digest, m, floor_s = res.stdout.split()
    return float(secs), float(rss0), float(peak), digest, m, float(floor_s)


def spread(xs: list[float], fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))} - {fmt.format(max(xs))}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anchor", default=None, help="a tree of the code to compare with (e.g. the previous commit)")
    ap.add_argument("--q", type=int, default=20000)
    ap.add_argument("--g", type=int, default=200000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--step-rounds", type=int, default=0,
                    help="also (or, with --rounds 0, only) time the top-k step alone on G-item blocks, this tree")
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores")
    if args.step_rounds:
        run_step(args)
    if not args.rounds:
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    if not args.anchor:
        sys.exit("bench_topk_block: --anchor TREE is needed for the end-to-end runs (or pass --rounds 0)")
    trees = [("this tree", ROOT), ("anchor", Path(args.anchor).resolve())]
    res: dict[str, list] = {label: [] for label, _ in trees}
    for r in range(args.rounds):
        for label, code in (trees if r % 2 == 0 else trees[::-1]):
            res[label].append(run(code, args, floor=label == "this tree" and r == 0))
            print(f"  round {r + 1} {label}: {res[label][-1][0]:.1f} s, peak RSS {res[label][-1][2]:.0f} MiB",
                  flush=True)
    print(f"score_blocks, {args.q} queries x {args.g} gallery x dim {args.dim}, flat index, scope all, k=10; "
          f"{args.rounds} round(s):")
    for label, _ in trees:
        rows = res[label]
        print(f"  {label:10s} {spread([x[0] for x in rows])} s, peak RSS {spread([x[2] for x in rows], '{:.0f}')} MiB "
              f"(data before scoring {rows[0][1]:.0f} MiB); top-k/AP digest {rows[0][3]}, mAP {rows[0][4]}")
    ratio = [a[0] / b[0] for a, b in zip(res["this tree"], res["anchor"])]
    print(f"  this/anchor time per round: {spread(ratio, '{:.3f}')}; same top-k and AP bits: "
          f"{len({x[3] for rows in res.values() for x in rows}) == 1}")
    print(f"  floor: the exact scores alone over the same blocks: {res['this tree'][0][5]:.1f} s")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
