"""What the paper world's verdicts cost the full demo: ``run_demo`` with both worlds' verdicts against the easy
world's only, alternated in one workspace after a warm-up run (world and embedding caches warm).

    PYTHONPATH=. python benchmarks/demo_two_worlds_speed.py --workspace /tmp/demo-ws --rounds 2

Prints each run's wall seconds and the load average after it; results in benchmarks/results/demo_two_worlds.md.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workspace", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    from fpr.workflows.demo import run_demo

    plan = [("both (warm-up)", None)] + [r for _ in range(args.rounds) for r in (("easy only", ("easy",)),
                                                                                  ("both", None))]
    for label, worlds in plan:
        t = time.perf_counter()
        run_demo(workspace=args.workspace, verdict_worlds=worlds)
        print(f"{label}: {time.perf_counter() - t:.1f} s, load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
