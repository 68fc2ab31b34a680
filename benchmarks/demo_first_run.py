"""A newcomer's first ``fpr demo`` (issue #37 item 3): both caches empty, this tree against an anchor commit, same
numbers.

    PYTHONPATH=. python benchmarks/demo_first_run.py --anchor 3080516 [--rounds 3] [--only default|full]
    PYTHONPATH=. python benchmarks/demo_first_run.py --report          # writes benchmarks/results/demo_first_run.md

Each round runs every case once, the order of the two demos rotated round by round; a case is one
``python -m fpr --workspace <fresh> demo --format json [flags]`` as a subprocess:

* ``first``: empty ``FPR_CACHE_DIR`` and ``NUMBA_CACHE_DIR`` (fresh folders): worlds rendered, images
  embedded, copy-paste matched and every numba kernel compiled, as on a new machine;
* ``second``: again, with the first run's two caches (a new workspace);
* ``after kernels`` (the default demo only): a fresh ``NUMBA_CACHE_DIR`` filled by ``python -m
  fpr.workflows.kernels`` (``make demo``'s install step, timed on its own as ``kernels step``), then the
  demo with an empty ``FPR_CACHE_DIR``;
* ``anchor first``: the anchor's equivalent command (the same demo under its old flags: ``--quick`` for
  this tree's default, no flag for ``--full``), both caches empty: the before figure, in the same round.

Same numbers: every run's JSON must equal the anchor's of the same demo after run ids (by order of
appearance), the workspace folder and ``timings`` are made neutral (:func:`demo_speed.normalize_json`); a
difference stops the benchmark with the first differing line. Each run's wall seconds, CPU seconds (user + sys
of it and every process it waited for) and the 1-minute load before and after go to
benchmarks/results/demo_first_run.jsonl; ``--report`` prints per case the median [min, max].
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from demo_speed import _children_cpu, export, first_difference, normalize_json  # noqa: E402

ROOT = HERE.parent
RESULTS = HERE / "results"
ROUNDS = RESULTS / "demo_first_run.jsonl"
REPORT = RESULTS / "demo_first_run.md"
# this tree's flags -> the anchor's flags for the same demo (the anchor's default was the full demo)
DEMOS = {"default": ([], ["--quick"]), "full": (["--full"], [])}


def _run(tree: Path, args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall s, CPU s, stdout) of ``python -m ARGS`` in ``tree``; exits on failure."""
    t0, cpu0 = time.perf_counter(), _children_cpu()
    r = subprocess.run([sys.executable, "-m", *args], cwd=tree, capture_output=True, text=True, check=False,
                       env={**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1", **env})
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    if r.returncode != 0:
        sys.exit(f"python -m {' '.join(args)} failed in {tree}: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return wall, cpu, r.stdout


def _record(rec: dict) -> None:
    with ROUNDS.open("a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps(rec), flush=True)


def one_demo(trees: dict[str, Path], demo: str, tmp: Path, meta: dict) -> None:
    """The cases of one demo, in order; each JSON checked against the anchor's first run."""
    flags, anchor_flags = DEMOS[demo]
    fresh = lambda tag: tmp / f"{tag}-{time.monotonic_ns()}"  # noqa: E731
    caches = {"FPR_CACHE_DIR": str(fresh("fpr")), "NUMBA_CACHE_DIR": str(fresh("numba"))}
    anchor_caches = {"FPR_CACHE_DIR": str(fresh("fpr")), "NUMBA_CACHE_DIR": str(fresh("numba"))}
    kernels = {"FPR_CACHE_DIR": str(fresh("fpr")), "NUMBA_CACHE_DIR": str(fresh("numba"))}
    cases = [("anchor first", "anchor", anchor_flags, anchor_caches), ("first", "tree", flags, caches),
             ("second", "tree", flags, caches)]
    if demo == "default":
        cases.append(("after kernels", "tree", flags, kernels))
    reference = None
    for case, side, case_flags, env in cases:
        if case == "after kernels":
            load0 = os.getloadavg()[0]
            wall, cpu, _ = _run(trees["tree"], ["fpr.workflows.kernels"], env)
            _record({**meta, "demo": demo, "case": "kernels step", "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                     "load": [round(load0, 2), round(os.getloadavg()[0], 2)]})
        ws = fresh("ws")
        load0 = os.getloadavg()[0]
        wall, cpu, out = _run(trees[side], ["fpr", "--workspace", str(ws), "demo", "--format", "json", *case_flags],
                              env)
        text = normalize_json(out, ws)
        if reference is None:
            reference = text
        else:
            diff = first_difference(reference, text)
            if diff:
                sys.exit(f"{demo} demo, {case}: its JSON differs from the anchor's: {diff}")
        _record({**meta, "demo": demo, "case": case, "flags": " ".join(case_flags), "wall_s": round(wall, 2),
                 "cpu_s": round(cpu, 2), "load": [round(load0, 2), round(os.getloadavg()[0], 2)],
                 "phases": json.loads(out).get("timings", {}), "same_as_anchor": True})


def measure(anchor: str, rounds: int, demos: list[str]) -> None:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=False, capture_output=True,
                          text=True).stdout.strip() or "?"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "anchor").mkdir()
        trees = {"anchor": export(anchor, tmp / "anchor"), "tree": ROOT}
        for r in range(rounds):
            meta = {"anchor": anchor, "tree": head, "round": r, "cores": os.cpu_count(),
                    "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            for demo in (demos if r % 2 == 0 else demos[::-1]):
                one_demo(trees, demo, tmp, meta)


def _stat(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}, {max(values):.1f}]"


def report() -> None:
    recs = [json.loads(line) for line in ROUNDS.read_text().splitlines()]
    lines = ["# A first `fpr demo`: both caches empty, this tree against its anchor", "",
             "Written by `benchmarks/demo_first_run.py --report` from `benchmarks/results/demo_first_run.jsonl`. Wall "
             "and CPU (user + sys of the demo and every process it waited for) seconds, median [min, max] over the "
             "rounds; load: the 1-minute load average before and after each run, min-max. first: FPR_CACHE_DIR and "
             "NUMBA_CACHE_DIR empty; second: with the first run's caches; after kernels: numba's cache filled by "
             "`python -m fpr.workflows.kernels` (make demo's install step: the kernels step row), FPR_CACHE_DIR "
             "empty; anchor first: the anchor's command for the same demo (`--quick` for the default, no flag for "
             "`--full`), both caches empty. Every run's JSON equalled the anchor's after run ids, folders and "
             "timings were made neutral.", "",
             "| demo | case | rounds | wall s | cpu s | load | anchor / tree |", "|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for r in recs:
        groups.setdefault((r["anchor"], r["demo"], r["case"]), []).append(r)
    for (anchor, demo, case), rs in groups.items():
        loads = [x for r in rs for x in r["load"]]
        ratio = "-"
        base = groups.get((anchor, demo, "anchor first"))
        if case == "first" and base:
            pairs = {r["round"]: r["wall_s"] for r in base}
            rat = [pairs[r["round"]] / r["wall_s"] for r in rs if r["round"] in pairs]
            ratio = f"{statistics.median(rat):.2f} [{min(rat):.2f}, {max(rat):.2f}]" if rat else "-"
        lines.append(f"| {demo} (anchor {anchor}) | {case} | {len(rs)} | {_stat([r['wall_s'] for r in rs])} | "
                     f"{_stat([r['cpu_s'] for r in rs])} | {min(loads):.1f}-{max(loads):.1f} | {ratio} |")
    REPORT.write_text("\n".join(lines) + "\n")
    print(REPORT.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--anchor", help="the commit to compare with (git archive)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=sorted(DEMOS), default=None)
    ap.add_argument("--report", action="store_true")
    a = ap.parse_args()
    if a.report:
        report()
        return
    if not a.anchor:
        ap.error("--anchor COMMIT (or --report)")
    measure(a.anchor, a.rounds, [a.only] if a.only else list(DEMOS))


if __name__ == "__main__":
    main()
