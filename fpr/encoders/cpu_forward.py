"""How a network runs on a CPU so that an image's embedding never depends on its batch.

CPU kernels (oneDNN convolutions, MKL/OpenBLAS GEMMs) choose their blocking from the
tensor shapes and the number of threads; a different batch size, or the same batch split
over another number of threads, changes the last bits of an image's features (measured:
an EfficientNetV2 at 224 px in a batch of 32 on 3 threads gives different bits to the
rows that fall on a thread boundary, while 1 and 2 threads agree). So the network only ever
sees one shape, ``(CPU_MICROBATCH, 3, S, S)``, run on one thread: a short tail is padded
with zeros (padding rows are dropped), and the cores are used by running several
micro-batches at once, one per thread. Whatever the batch size asked for, the thread
count of the process, the load on the machine or the image's batch-mates and position,
the same image gives the same bits (``tests/encoders/test_determinism.py``).

Why not one image per forward pass (the protocol before ``microbatch32-1thread``): a
batch of one runs the tiny world CNN at about 0.4 of its batched speed, and two
intra-op threads per single image collapse under load (a thread waits at every
operation's end for a descheduled peer). One thread per micro-batch has no such barrier.

:data:`CPU_FORWARD` names this protocol; it is part of every CPU embedding-cache key, so
vectors computed under another protocol are never mixed with these.
"""
from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator

import torch

CPU_MICROBATCH = 32
CPU_FORWARD = f"microbatch{CPU_MICROBATCH}-1thread"

_THREADS_LOCK = threading.Lock()


@contextlib.contextmanager
def single_threaded_ops() -> Iterator[int]:
    """torch's intra-op threads set to 1 for the block; yields the count it had (the cores to use).

    The setting is process-wide, so concurrent callers share one lock-protected change."""
    with _THREADS_LOCK:
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield before
        finally:
            torch.set_num_threads(before)


def _padded(x: torch.Tensor) -> torch.Tensor:
    short = CPU_MICROBATCH - len(x)
    return x if short == 0 else torch.cat([x, x.new_zeros((short, *x.shape[1:]))])


def forward_microbatched(model: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``model`` over the rows of ``x`` in zero-padded micro-batches of :data:`CPU_MICROBATCH`, one
    thread each, as many at once as torch had intra-op threads. Rows come back in order."""
    parts = [x[s:s + CPU_MICROBATCH] for s in range(0, len(x), CPU_MICROBATCH)]

    def run(part: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():  # thread-local: the pool's threads need their own
            return model(_padded(part))[:len(part)]

    with single_threaded_ops() as cores:
        if len(parts) == 1 or cores == 1:
            outs = [run(p) for p in parts]
        else:
            with ThreadPoolExecutor(min(cores, len(parts)), thread_name_prefix="fpr-forward") as pool:
                outs = list(pool.map(run, parts))
    return torch.cat(outs)
