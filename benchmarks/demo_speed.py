"""``fpr demo`` as a whole command, this tree against an anchor commit, interleaved across calls; same output.

    PYTHONPATH=. python benchmarks/demo_speed.py --anchor 0c30eec [--runs 1] [--flags=--no-copy-paste]
                                                 [--cache shared|cold|warm]
    PYTHONPATH=. python benchmarks/demo_speed.py --report                                  # writes the table

The anchor is the commit exported with ``git archive`` into a folder kept in the temporary directory, warmed
up once with ``fpr demo --quick`` on both sides (so both have their compiled kernels cached). Each call runs
``--runs`` demos, ``python -m fpr --workspace <fresh> demo --format json [flags]``, the side alternating
ABBA over all calls (anchor, tree, tree, anchor, ...), so that one call stays within a few minutes on a
loaded machine and a drift of the load does not favour one side. A run records its wall time and the
1-minute load average before and after in benchmarks/results/demo_speed.jsonl. ``--report`` renders
benchmarks/results/demo_speed.md: per command the median and range of each side over consecutive
anchor/tree pairs, of the paired ratio, and of the load.

Caches (``--cache``): ``shared`` runs under this process's ``FPR_CACHE_DIR`` (default ``~/.cache/fpr``, whatever
it holds); ``cold`` gives every run a fresh empty ``FPR_CACHE_DIR`` (embeddings, worlds: a first run on a new
machine; only the compiled kernels beside the sources are warm); ``warm`` gives each side its own
``FPR_CACHE_DIR`` in the temporary directory, filled by one untimed run of the same flags before its first timed
run (a second run).

Same output: each run's JSON must equal the first run's of those flags (either side) after the run-dependent
strings are made neutral (run ids by their order of appearance, the workspace folder, ``timings``), and so
must the printed table of the first two runs (run ids, folder and the total seconds made neutral). A
difference stops the benchmark with the first differing line. The neutral outputs are kept in the
temporary directory between calls.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ROUNDS = RESULTS / "demo_speed.jsonl"
REPORT = RESULTS / "demo_speed.md"
OUTPUTS = Path(tempfile.gettempdir()) / "fpr-demo-speed-outputs"  # per anchor: neutral outputs, compared across calls
RUN_ID = re.compile(r"\brun-\d{8}-\d{6}-[0-9a-f]+")


def export(commit: str, dest: Path) -> Path:
    """The anchor's tree (tracked files at ``commit``) in ``dest``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def run_demo(tree: Path, ws: Path, fmt: str, flags: list[str], cache: Path | None = None) -> tuple[float, str]:
    """One ``fpr demo`` from ``tree`` in workspace ``ws`` (``cache``: its FPR_CACHE_DIR, else this process's):
    (wall seconds, stdout); exits on failure."""
    cmd = [sys.executable, "-m", "fpr", "--workspace", str(ws), "demo", "--format", fmt, *flags]
    env = {**os.environ, "PYTHONPATH": str(tree), **({"FPR_CACHE_DIR": str(cache)} if cache else {})}
    t0, cpu0 = time.perf_counter(), _children_cpu()
    r = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    LAST_CPU[0] = round(_children_cpu() - cpu0, 2)
    if r.returncode != 0:
        sys.exit(f"fpr demo failed in {tree}: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return wall, r.stdout


LAST_CPU = [0.0]  # CPU seconds (user + sys) of the last demo and every process it waited for


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def normalize(text: str, ws: Path) -> str:
    """Run ids by order of appearance, the workspace folder and the printed total seconds made neutral."""
    ids: dict[str, str] = {}
    text = RUN_ID.sub(lambda m: ids.setdefault(m.group(0), f"run-{len(ids)}"), text)
    text = text.replace(str(ws), "<ws>")
    return re.sub(r"; \d+ s\)", "; <total> s)", text)


def normalize_json(text: str, ws: Path) -> str:
    doc = json.loads(text)
    doc.pop("timings", None)
    return normalize(json.dumps(doc, indent=1, sort_keys=True), ws)


def first_difference(a: str, b: str) -> str | None:
    for k, (x, y) in enumerate(zip(a.splitlines(), b.splitlines())):
        if x != y:
            return f"line {k + 1}: anchor {x!r} vs this tree {y!r}"
    return None if len(a.splitlines()) == len(b.splitlines()) else "different number of lines"


def cache_dir(mode: str, side: str, anchor: str, flags: list[str], tmp: Path) -> Path | None:
    """The FPR_CACHE_DIR of one run of ``side`` under ``--cache mode`` (None: this process's)."""
    if mode == "cold":
        return tmp / f"cache-{side}-{time.monotonic_ns()}"
    if mode == "warm":
        return Path(tempfile.gettempdir()) / f"fpr-demo-speed-cache-{anchor}-{side}{'-'.join([''] + [f.strip('-') for f in flags])}"
    return None


def one_run(trees: dict[str, Path], side: str, flags: list[str], tmp: Path, check_table: bool,
            cache: Path | None = None, anchor: str = "") -> dict:
    """One timed ``fpr demo --format json`` of ``side``; its neutral output is kept for the other side's check."""
    if cache is not None and cache.name.startswith("fpr-demo-speed-cache-") and not (cache / ".warm").exists():
        run_demo(trees[side], tmp / f"fill-{side}", "json", flags, cache)  # untimed: fills this side's caches
        (cache / ".warm").touch()
    rec: dict = {"flags": " ".join(flags), "side": side, "load": [round(os.getloadavg()[0], 2)]}
    ws = tmp / f"ws-{side}"
    wall, out = run_demo(trees[side], ws, "json", flags, cache)
    rec["wall_s"], rec["cpu_s"] = round(wall, 2), LAST_CPU[0]
    rec["load"].append(round(os.getloadavg()[0], 2))
    rec["phases"] = json.loads(out).get("timings", {})  # the demo's own phase seconds (render_s, query_s, ...)
    outputs = {"json": normalize_json(out, ws)}
    if check_table:
        ws = tmp / f"ws-{side}-table"
        outputs["table"] = normalize(run_demo(trees[side], ws, "table", flags, cache)[1], ws)
    for kind, text in outputs.items():
        kept = OUTPUTS / anchor / f"{kind}{'-'.join([''] + [f.strip('-') for f in flags])}.txt"
        if kept.exists():  # the other side's (or this side's earlier) output: they must be equal
            diff = first_difference(kept.read_text(), text)
            if diff:
                sys.exit(f"fpr demo --format {kind} differs from the stored output: {diff}")
            rec[f"same_{kind}"] = True
        else:
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_text(text)
    return rec


def measure(anchor: str, runs: int, flags: list[str], check_table: bool, cache: str = "shared") -> None:
    """``runs`` demos, alternating sides across calls (anchor, tree, tree, anchor, anchor, ...: ABBA pairs)."""
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "fpr"], check=True,
                                capture_output=True, text=True).stdout.strip())
    # kept between calls: its compiled kernels (numba's cache beside the sources) must be warm like this tree's
    anchor_dir = Path(tempfile.gettempdir()) / f"fpr-demo-speed-anchor-{anchor}"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        trees = {"anchor": anchor_dir, "tree": ROOT}
        if not (anchor_dir / ".exported").exists():
            anchor_dir.mkdir(exist_ok=True)
            export(anchor, anchor_dir)
            (anchor_dir / ".exported").touch()
        if not (anchor_dir / ".warm").exists():
            for side in trees:  # warm-up, not timed: compiles and caches both sides' kernels
                run_demo(trees[side], tmp / f"warm-{side}", "json", ["--quick"])
            (anchor_dir / ".warm").touch()
        done = [json.loads(line) for line in ROUNDS.read_text().splitlines()] if ROUNDS.exists() else []
        n = sum(1 for r in done if r["flags"] == " ".join(flags) and r["anchor"] == anchor
                and r.get("cache", "shared") == cache)
        for k in range(n, n + runs):
            side = ("anchor", "tree", "tree", "anchor")[k % 4]
            rec = one_run(trees, side, flags, tmp, check_table and k < 2, cache_dir(cache, side, anchor, flags, tmp),
                          anchor)
            rec.update({"anchor": anchor, "tree": head + ("+dirty" if dirty else ""), "cores": os.cpu_count(),
                        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cache": cache})
            with ROUNDS.open("a") as f:
                f.write(json.dumps(rec) + "\n")
            print(json.dumps(rec))


def parts(rounds: int) -> list[str]:
    """Interleaved in this process, against the code each replaced: the leopard pattern (the dense
    pixels x rosettes search, kept in the tests as the reference) and a world written by one process vs
    two (wall and CPU seconds of this process and its children)."""
    sys.path.insert(0, str(ROOT))
    import shutil

    from fpr.galleries.world import World, WorldConfig
    from fpr.galleries.world import patterns as P
    from fpr.keys import keyed_rng
    from tests.galleries.test_world_speed import _spots_dense

    seeds = range(20_000_000, 20_000_030)
    P._spots(keyed_rng("pattern", "leopard", 0))  # first-call set-up (block tables) out of the timing
    dense, blocked = [], []
    for _ in range(rounds):
        for fn, out in ((_spots_dense, dense), (P._spots, blocked)):
            t = time.perf_counter()
            for seed in seeds:
                fn(keyed_rng("pattern", "leopard", seed))
            out.append((time.perf_counter() - t) / len(seeds) * 1e3)
    rows = [f"| leopard pattern `_spots`, ms per pattern (30 drift seeds) | dense {_stat(dense)} | "
            f"blocked {_stat(blocked)} | "
            f"{_stat([a / b for a, b in zip(dense, blocked)], '{:.2f}')} |"]
    from fpr.workflows.demo import FULL

    cfg = WorldConfig(seed=0, **FULL)  # the full demo's primary world
    walls: dict[int, list[float]] = {1: [], 2: []}
    cpus: dict[int, list[float]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for workers in ((1, 2) if r % 2 == 0 else (2, 1)):
                P._labels_cached.cache_clear()
                P.texture_rgba.cache_clear()
                P.base_labels.cache_clear()
                root = Path(tmp) / f"w{workers}"
                shutil.rmtree(root, ignore_errors=True)
                t, c0 = time.perf_counter(), _self_and_children_cpu()
                n = World(cfg).write(root, workers=workers).n_images
                walls[workers].append(time.perf_counter() - t)
                cpus[workers].append(_self_and_children_cpu() - c0)
    rows.append(f"| World.write, the demo's world ({n} images), wall s | 1 process {_stat(walls[1], '{:.2f}')} | "
                f"2 processes {_stat(walls[2], '{:.2f}')} | {_stat([a / b for a, b in zip(walls[1], walls[2])], '{:.2f}')} |")
    rows.append(f"| World.write, the demo's world ({n} images), CPU s | 1 process {_stat(cpus[1], '{:.2f}')} | "
                f"2 processes {_stat(cpus[2], '{:.2f}')} | {_stat([a / b for a, b in zip(cpus[1], cpus[2])], '{:.2f}')} |")
    return rows


def _self_and_children_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime + _children_cpu()


def _stat(values: list[float], fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}, {fmt.format(max(values))}]"


def pairs(recs: list[dict]) -> list[tuple[dict, dict]]:
    """Consecutive runs of the two sides (same flags and anchor), in the order they ran: (anchor, tree)."""
    out = []
    for a, b in zip(recs, recs[1:]):
        if (a["flags"] == b["flags"] and a["anchor"] == b["anchor"] and a.get("cache") == b.get("cache")
                and {a["side"], b["side"]} == {"anchor", "tree"}):
            out.append((a, b) if a["side"] == "anchor" else (b, a))
    return out


def _same(recs: list[dict]) -> str:
    """What every run after the first was checked against: its JSON always, the table where asked."""
    return "json" + ("+table" if any(r.get("same_table") for r in recs) else "")


def _cpu(recs: list[dict]) -> str:
    values = [r["cpu_s"] for r in recs if "cpu_s" in r]
    return _stat(values) if values else "-"


def report() -> None:
    recs = [json.loads(line) for line in ROUNDS.read_text().splitlines()]
    lines = ["# `fpr demo`: this tree against its anchor, whole command, interleaved", "",
             "Written by `benchmarks/demo_speed.py --report` from `benchmarks/results/demo_speed.jsonl` (every run "
             "kept). Wall seconds of `python -m fpr --workspace <fresh> demo --format json [flags]`, one run per "
             "call, the sides alternating ABBA; median [min, max]. ratio = anchor / this tree over each pair of "
             "consecutive runs (above 1: faster). load = the 1-minute load average before and after each run. "
             "Every run's JSON equalled the first run's of its flags (either side) after run ids, folders and timings "
             "were made neutral; 'same' says what was compared (json; table: the printed table too).", "",
             "cpu s = user + sys seconds of the demo and every process it waited for (its render and copy-paste "
             "pools, the background verdict seeds): the work, which the load barely changes; on an idle machine the "
             "wall time approaches cpu s / cores where the work runs in parallel. cache: the FPR_CACHE_DIR of each "
             "run (shared: the benchmark's own, whatever it held; cold: a fresh empty one per run; warm: one per "
             "side, filled by an untimed run before; `--cache`).", "",
             "| command | cache | anchor | this tree | pairs | anchor s | this tree s | ratio | anchor cpu s "
             "| this tree cpu s | load | cores | same |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    runs: dict[tuple, list[dict]] = {}
    for r in recs:
        runs.setdefault((r["flags"], r["anchor"], r.get("cache", "shared")), []).append(r)
    for (flags, anchor, cache), rs in runs.items():
        by_tree: dict[str, list[tuple[dict, dict]]] = {}
        for a, b in pairs(rs):
            by_tree.setdefault(b["tree"], []).append((a, b))
        for tree, ps in by_tree.items():
            loads = [x for pair in ps for r in pair for x in r["load"]]
            lines.append(f"| {f'fpr demo {flags}'.strip()} | {cache} | {anchor} | {tree} | {len(ps)} | "
                         f"{_stat([a['wall_s'] for a, _ in ps])} | {_stat([b['wall_s'] for _, b in ps])} | "
                         f"{_stat([a['wall_s'] / b['wall_s'] for a, b in ps], '{:.2f}')} | "
                         f"{_cpu([a for a, _ in ps])} | {_cpu([b for _, b in ps])} | "
                         f"{min(loads):.1f}-{max(loads):.1f} | {rs[0]['cores']} | {_same(rs)} |")
    REPORT.write_text("\n".join(lines) + "\n" + notes())
    print(REPORT.read_text())


def notes() -> str:
    """The report's text below its table (written by hand in demo_speed.md, kept by ``--report``): from its
    first section heading on."""
    text = REPORT.read_text() if REPORT.exists() else ""
    at = text.find("\n## ")
    return text[at:] if at >= 0 else ""



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--anchor", default="0c30eec", help="commit to compare against (default: before the demo work)")
    ap.add_argument("--runs", type=int, default=1, help="demos this call (the sides alternate ABBA across calls)")
    ap.add_argument("--flags", default="",
                    help="fpr demo's own flags, given as --flags=--quick or --flags='--quick --no-copy-paste'")
    ap.add_argument("--no-table", action="store_true", help="skip the printed-table comparison")
    ap.add_argument("--cache", choices=("shared", "cold", "warm"), default="shared",
                    help="each run's FPR_CACHE_DIR: this process's (shared), a fresh empty one (cold), or one per "
                         "side filled by an untimed run first (warm)")
    ap.add_argument("--report", action="store_true", help="only render demo_speed.md from the stored rounds")
    ap.add_argument("--parts", type=int, default=0, metavar="ROUNDS",
                    help="time the replaced parts (pattern, world writing) in ROUNDS interleaved rounds; stored in "
                         "benchmarks/results/demo_speed_parts.md")
    args = ap.parse_args()
    if args.parts:
        load0 = os.getloadavg()[0]
        rows = parts(args.parts)
        text = ("| part | before | after | ratio before / after |\n|---|---|---|---|\n" + "\n".join(rows)
                + f"\n\n{args.parts} interleaved rounds, median [min, max]; 1-minute load {load0:.1f} before, "
                  f"{os.getloadavg()[0]:.1f} after; {os.cpu_count()} cores; "
                  f"`PYTHONPATH=. python benchmarks/demo_speed.py --parts {args.parts}`.\n")
        (RESULTS / "demo_speed_parts.md").write_text(text)
        print(text)
    elif args.report:
        report()
    else:
        measure(args.anchor, args.runs, args.flags.split(), not args.no_table, args.cache)


if __name__ == "__main__":
    main()
