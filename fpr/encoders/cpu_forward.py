"""How a network runs on a CPU so that an image's embedding never depends on its batch.

CPU kernels (oneDNN convolutions, MKL/OpenBLAS GEMMs) choose their blocking from the
tensor shapes, the memory layout and the number of threads; a different batch size, or the
same batch split over another number of threads, changes the last bits of an image's features
(measured: an EfficientNetV2 at 224 px in a batch of 32 on 3 threads gives different bits to
the rows that fall on a thread boundary, while 1 and 2 threads agree). So the network only ever
sees one shape, ``(CPU_MICROBATCH, 3, S, S)`` in channels-last layout, run on one thread: a
short tail is padded with zeros (padding rows are dropped), and the cores are used by running
several micro-batches at once, one per thread. Whatever the batch size asked for, the thread
count of the process, the load on the machine or the image's batch-mates and position, the
same image gives the same bits (``tests/encoders/test_determinism.py``).

Why channels-last (``-nhwc``, since the protocol ``microbatch32-1thread``): oneDNN runs a
convolution on an NCHW tensor by reordering it to a blocked layout and back at every layer; on
an NHWC tensor it does not. Measured on this repository's 2-core machine kind, one thread, a
micro-batch of 32: a fifth to a third less CPU time for the built-in world CNN at 64 px and for
resnet18 at 224 px (``benchmarks/bench_cpu_forward.py``, ``benchmarks/results/embed_pipeline.md``).
It changes the last bits (about 2e-7 of a normalised embedding), hence the new protocol name.
Only the input's layout changes: the model's weights stay as loaded (measured bit-identical to
converting them too, for both networks), so the network object a caller holds is untouched.

Why not one image per forward pass (the protocol before ``microbatch32-1thread``): a batch of
one runs the tiny world CNN at about 0.4 of its batched speed, and two intra-op threads per
single image collapse under load (a thread waits at every operation's end for a descheduled
peer). One thread per micro-batch has no such barrier.

:data:`CPU_FORWARD` names this protocol; it is part of every CPU embedding-cache key, so
vectors computed under another protocol are never mixed with these.
"""
from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, Sequence, TypeVar

import torch

CPU_MICROBATCH = 32
CPU_FORWARD = f"microbatch{CPU_MICROBATCH}-1thread-nhwc"

_THREADS_LOCK = threading.Lock()
T = TypeVar("T")
R = TypeVar("R")


@contextlib.contextmanager
def single_threaded_ops() -> Iterator[int]:
    """torch's intra-op threads set to 1 for the block; yields the count it had (the cores to use).

    The setting is process-wide, so concurrent callers share one lock-protected change. Threads
    started inside the block run their torch operations on one thread too (torch reads the
    process-wide count when a thread first runs an operation)."""
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


def forward_part(model: Callable[[torch.Tensor], torch.Tensor], part: torch.Tensor) -> torch.Tensor:
    """``model`` on one micro-batch (at most :data:`CPU_MICROBATCH` rows), on the calling thread.

    The protocol's one forward pass: zero-padded to :data:`CPU_MICROBATCH` rows, images in
    channels-last layout. Call it inside :func:`single_threaded_ops` (directly or from a thread of
    :func:`map_single_threaded`), so that the pass runs on one thread."""
    if len(part) > CPU_MICROBATCH:
        raise ValueError(f"a micro-batch has at most {CPU_MICROBATCH} rows, got {len(part)}")
    x = _padded(part)
    if x.ndim == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():  # thread-local: pool threads need their own
        return model(x)[:len(part)]


def map_single_threaded(fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
    """``fn`` over ``items`` in order, on as many threads as torch had intra-op threads, every torch
    operation inside on one thread. A generator: the thread setting is restored when it finishes
    (or is closed). ``fn`` may decode images too: PIL and torch release the GIL, so one thread's
    decoding overlaps another's forward pass instead of waiting for it."""
    with single_threaded_ops() as cores:
        if len(items) <= 1 or cores == 1:
            yield from map(fn, items)
            return
        pool = ThreadPoolExecutor(min(cores, len(items)), thread_name_prefix="fpr-forward")
        try:
            yield from pool.map(fn, items)
        finally:  # a consumer that stops early (an error, a closed generator) cancels the tasks not started
            pool.shutdown(wait=True, cancel_futures=True)


def microbatches(n: int) -> list[range]:
    """Row ranges of the micro-batches that cover ``n`` rows in order."""
    return [range(s, min(s + CPU_MICROBATCH, n)) for s in range(0, n, CPU_MICROBATCH)]


def forward_microbatched(model: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``model`` over the rows of ``x`` in micro-batches (:func:`forward_part`), one thread each, as
    many at once as torch had intra-op threads. Rows come back in order."""
    parts: Iterable[torch.Tensor] = [x[r.start:r.stop] for r in microbatches(len(x))]
    return torch.cat(list(map_single_threaded(lambda p: forward_part(model, p), list(parts))))
