"""Why the CPU protocol ran at 0.57 of the model's batched forward, and what channels-last buys.

One encoder network on ready random batches of 32, timed in rotating order in each of ``--rounds``
rounds (median and min-max of the wall time per image; ``cpu`` = process CPU time per image):

- ``2t``: one batch of 32 on torch's default threads (the anchor of bench_embed_pipeline.py);
- ``1t``: one batch of 32 on one thread (what ``embed_batch`` on 32 images ran: one micro-batch);
- ``1t x cores``: ``cores`` batches of 32 at once, one thread each (fpr.encoders.cpu_forward);
- the same three with the batch in channels-last layout (``-nhwc``, the protocol since
  ``microbatch32-1thread-nhwc``).

    python benchmarks/bench_cpu_forward.py [--only fpr-world-v3,bench-resnet18] [--rounds 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("FPR_QUIET", "1")

import torch  # noqa: E402

from bench_ablate import register_resnet18  # noqa: E402
from fpr.encoders.registry import load_encoder  # noqa: E402


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def variants(model, x: torch.Tensor, cores: int) -> dict:
    """name -> (callable, images per call)."""
    xs = [x.clone() for _ in range(cores)]
    pool = ThreadPoolExecutor(cores)
    default = torch.get_num_threads()

    def one(z: torch.Tensor, threads: int) -> None:
        torch.set_num_threads(threads)
        with torch.inference_mode():
            model(z)

    def concurrent(zs: list[torch.Tensor]) -> None:
        torch.set_num_threads(1)  # threads started now run their operations on one thread

        def run(z: torch.Tensor) -> None:
            with torch.inference_mode():
                model(z)
        list(pool.map(run, zs))

    out = {}
    for tag, conv in (("", lambda t: t), ("-nhwc", lambda t: t.contiguous(memory_format=torch.channels_last))):
        xc, xsc = conv(x), [conv(z) for z in xs]
        out[f"2t{tag}"] = (lambda xc=xc: one(xc, default), len(x))
        out[f"1t{tag}"] = (lambda xc=xc: one(xc, 1), len(x))
        out[f"1t x {cores}{tag}"] = (lambda xsc=xsc: concurrent(xsc), cores * len(x))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="fpr-world-v3,bench-resnet18")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=0, help="calls per timing (default: about 0.3 s of work)")
    args = ap.parse_args()
    register_resnet18()
    cores = os.cpu_count() or 1
    default = torch.get_num_threads()
    print("command: python benchmarks/bench_cpu_forward.py " + " ".join(sys.argv[1:]))
    print(f"cores {cores}, torch threads {default}, {args.rounds} rounds; load at start {load()}")
    cols = ["encoder", "variant", "ms/img", "range", "cpu ms/img", "2t/variant", "load"]
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols), flush=True)
    for enc_id in args.only.split(","):
        enc = load_encoder(enc_id, device="cpu")
        size = enc.preprocessing.output_size
        torch.manual_seed(0)
        x = torch.randn(32, 3, size, size)
        runs = variants(enc.model, x, cores)
        for f, _ in runs.values():  # warm-up (oneDNN primitive creation)
            f()
        reps = args.reps or max(1, round(0.3 / max(1e-4, _once(runs["2t"][0]))))
        wall: dict[str, list[float]] = {k: [] for k in runs}
        cpu: dict[str, list[float]] = {k: [] for k in runs}
        before = load()
        names = list(runs)
        for r in range(args.rounds):
            for k in names[r % len(names):] + names[:r % len(names)]:
                f, n = runs[k]
                c, t = time.process_time(), time.perf_counter()
                for _ in range(reps):
                    f()
                wall[k].append((time.perf_counter() - t) / reps / n * 1e3)
                cpu[k].append((time.process_time() - c) / reps / n * 1e3)
        torch.set_num_threads(default)
        after = load()
        for k in names:
            ratios = [a / b for a, b in zip(wall["2t"], wall[k])]
            print(f"| {enc_id} | {k} | {statistics.median(wall[k]):.3f} | {min(wall[k]):.3f}-{max(wall[k]):.3f} | "
                  f"{statistics.median(cpu[k]):.3f} | {statistics.median(ratios):.2f} | {before} -> {after} |",
                  flush=True)


def _once(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
