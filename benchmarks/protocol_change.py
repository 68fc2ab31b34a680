"""What the CPU protocol change (``microbatch32-1thread`` -> ``microbatch32-1thread-nhwc``) does to
the numbers fpr reports from the demo worlds.

Both protocols run here on the same decoded pixels: the previous one (zero-padded NCHW micro-batches
of 32 on one thread, re-implemented below in four lines) and the current one
(:func:`fpr.encoders.cpu_forward.forward_microbatched`). For each world seed of ``fpr demo``
(full size) and each CPU encoder the demo uses, it prints the largest change of a normalised
embedding value and of a cosine similarity; the number of rows of the all-pairs cosine matrix whose
order (stable argsort, descending) changes at all (near-tied pairs, e.g. copies, swap places); and,
for the queries ranked against the gallery images (relevant: the same identity), the number of
queries whose ranked relevance sequence changes, the largest change of a query's AP (computed
independently here: mean precision at each relevant hit) and of the mAP. A query whose relevance
sequence is unchanged keeps its AP and top-1 bit for bit.

    python benchmarks/protocol_change.py [--seeds 0,1,2]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("FPR_QUIET", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from fpr.workflows.demo import FULL  # noqa: E402
from fpr.encoders.cpu_forward import CPU_FORWARD, CPU_MICROBATCH, forward_microbatched  # noqa: E402
from fpr.encoders.registry import load_encoder  # noqa: E402
from fpr.galleries.world import World, WorldConfig  # noqa: E402
from fpr.images import load_rgb  # noqa: E402


def previous_protocol(model, x: torch.Tensor) -> torch.Tensor:
    """microbatch32-1thread: zero-padded NCHW micro-batches of 32, one thread, one after another."""
    out = []
    for s in range(0, len(x), CPU_MICROBATCH):
        part = x[s:s + CPU_MICROBATCH]
        pad = torch.cat([part, part.new_zeros((CPU_MICROBATCH - len(part), *part.shape[1:]))])
        out.append(model(pad)[:len(part)])
    return torch.cat(out)


def rows_ranked_differently(a: np.ndarray, b: np.ndarray) -> int:
    sa, sb = a @ a.T, b @ b.T
    return int(sum(not np.array_equal(np.argsort(-sa[i], kind="stable"), np.argsort(-sb[i], kind="stable"))
                   for i in range(len(a))))


def relevance_sequences(q: np.ndarray, g: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """(queries, gallery) booleans: relevance in ranked order (descending cosine, stable)."""
    order = np.argsort(-(q @ g.T), axis=1, kind="stable")
    return np.take_along_axis(rel, order, axis=1)


def average_precision(seq: np.ndarray) -> np.ndarray:
    hits = np.cumsum(seq, axis=1)
    prec = hits / np.arange(1, seq.shape[1] + 1)
    return (prec * seq).sum(axis=1) / np.maximum(seq.sum(axis=1), 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--encoders", default="fpr-world-v3,fpr-general-v1")
    args = ap.parse_args()
    print("command: python benchmarks/protocol_change.py " + " ".join(sys.argv[1:]))
    print(f"previous microbatch32-1thread vs current {CPU_FORWARD}")
    print("| seed | encoder | images | max abs change (normalised) | max cosine change | all-pairs rows reordered "
          "| queries whose ranked relevance changes | max AP change | mAP change |")
    print("|---|---|---|---|---|---|---|---|---|", flush=True)
    for seed in (int(s) for s in args.seeds.split(",")):
        with tempfile.TemporaryDirectory(prefix="fpr-protocol-") as tmp:
            build = World(WorldConfig(seed=seed, **FULL)).write(tmp)
            gallery = [r for r in build.records if r.role == "gallery"]
            paths = [r.path for r in build.records] + [q["path"] for q in build.queries]
            g_rows = [i for i, r in enumerate(build.records) if r.role == "gallery"]
            q_rows = list(range(len(build.records), len(paths)))
            rel = np.array([[q["identity"] == r.identity for r in gallery] for q in build.queries])
            for enc_id in args.encoders.split(","):
                enc = load_encoder(enc_id, device="cpu")
                x = torch.stack([enc.preprocessing(load_rgb(p)) for p in paths])
                threads = torch.get_num_threads()
                torch.set_num_threads(1)
                try:
                    with torch.inference_mode():
                        old = torch.nn.functional.normalize(previous_protocol(enc.model, x).float(), dim=1).numpy()
                finally:
                    torch.set_num_threads(threads)
                with torch.inference_mode():
                    new = torch.nn.functional.normalize(forward_microbatched(enc.model, x).float(), dim=1).numpy()
                new_direct = enc.embed_batch(x)
                assert new_direct.tobytes() == new.tobytes(), "embed_batch is not the protocol"
                cos = np.abs(old @ old.T - new @ new.T).max()
                seq_old = relevance_sequences(old[q_rows], old[g_rows], rel)
                seq_new = relevance_sequences(new[q_rows], new[g_rows], rel)
                changed = int((seq_old != seq_new).any(axis=1).sum())
                ap_old, ap_new = average_precision(seq_old), average_precision(seq_new)
                print(f"| {seed} | {enc_id} | {len(paths)} | {np.abs(old - new).max():.2e} | {cos:.2e} | "
                      f"{rows_ranked_differently(old, new)} of {len(paths)} | {changed} of {len(q_rows)} | "
                      f"{np.abs(ap_old - ap_new).max():.2e} | {abs(ap_old.mean() - ap_new.mean()):.2e} |", flush=True)


if __name__ == "__main__":
    main()
