"""Start-up: ``fpr --version``, ``fpr --help`` and ``fpr runs`` vs ``python -c pass`` (wall time, median of N).

Baseline in the same run: the same commands with the code of ``--baseline`` (e.g. main before
lazy imports), when given.

    python benchmarks/bench_startup.py [--rounds 5] [--baseline /work/main]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], env: dict, rounds: int, cwd: Path = ROOT) -> tuple[float, float]:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
        times.append(time.perf_counter() - t)
    return statistics.median(times), max(times) - min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline", default=None)
    args = ap.parse_args()
    ws = Path(tempfile.mkdtemp(prefix="fpr-start-")) / "ws"
    base_env = {**os.environ, "FPR_QUIET": "1"}
    bare, spread = timed([sys.executable, "-c", "pass"], base_env, args.rounds)
    print(f"python -c pass: {bare:.3f} s (spread {spread:.3f}); median of {args.rounds}")
    codes = [("this branch", ROOT)] + ([("baseline", Path(args.baseline))] if args.baseline else [])
    for label, code in codes:
        env = {**base_env, "PYTHONPATH": str(code)}
        for cmd in (["--version"], ["--help"], ["--workspace", str(ws), "runs"]):
            t, s = timed([sys.executable, "-m", "fpr", *cmd], env, args.rounds, code)  # cwd: first on sys.path
            print(f"[{label}] fpr {' '.join(cmd[-1:] if cmd[0] == '--workspace' else cmd)}: {t:.3f} s "
                  f"(spread {s:.3f}), {t / bare:.1f}x python -c pass, {t - bare:.3f} s over it", flush=True)


if __name__ == "__main__":
    main()
