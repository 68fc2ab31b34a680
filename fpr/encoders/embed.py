"""The one embedding path: files -> decoded RGB -> protocol -> batched model -> L2-normalised float32.

Images are hashed first; only hashes missing from the cache are decoded (in
DataLoader worker processes) and run through the model. Duplicated content is
embedded once. Output rows follow the input order exactly.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np
import torch
from PIL import Image

from fpr import progress, settings
from fpr.defaults import EMBED_BATCH_SIZE
from fpr.encoders.cache import EmbeddingCache
from fpr.encoders.cpu_forward import map_single_threaded, microbatches
from fpr.encoders.registry import Encoder, check_batch_size, check_workers
from fpr.errors import InputError, choices_hint
from fpr.images import content_hash, decode_rgb, read_bytes

EMBED_STATS = {"images_embedded": 0}  # process-wide counter; tests read it to prove work is not repeated


@dataclass
class EmbedResult:
    vectors: np.ndarray  # (N, dim) float32; rows of failed images are NaN
    hashes: list[str | None]
    failed: dict[int, str] = field(default_factory=dict)  # input row -> one-line reason
    n_from_cache: int = 0
    n_computed: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> np.ndarray:
        mask = np.ones(len(self.hashes), dtype=bool)
        mask[list(self.failed)] = False
        return mask


class _DecodeDataset(torch.utils.data.Dataset):
    """Decode + protocol per image. ``data[i]``: the file's bytes when the hashing pass kept them
    (each file is then read once), else None (read here). ``pixels``: return the protocol's uint8
    pixels (H, W, 3), normalised later on the model's device, instead of the float tensor."""

    def __init__(self, paths: Sequence[str], preprocess, data: Sequence[bytes | None] | None = None, *,
                 pixels: bool = False):
        self.paths = list(paths)
        self.preprocess = preprocess
        self.data = list(data) if data is not None else [None] * len(self.paths)
        self.pixels = pixels

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        path = self.paths[i]
        try:
            raw = self.data[i]
            img = decode_rgb(raw if raw is not None else read_bytes(path), where=str(path))
            return i, self.preprocess.pixels(img) if self.pixels else self.preprocess(img), ""
        except InputError as exc:
            size = self.preprocess.output_size
            blank = torch.zeros(size, size, 3, dtype=torch.uint8) if self.pixels else torch.zeros(3, size, size)
            return i, blank, exc.one_line()


def _collate(items):
    idx = [it[0] for it in items]
    batch = torch.stack([it[1] for it in items])
    errs = [it[2] for it in items]
    return idx, batch, errs


def default_workers(n_items: int) -> int:
    if n_items < 64:
        return 0  # worker start-up costs more than it saves
    return max(0, min(4, (os.cpu_count() or 1)))


KEEP_BYTES = int(settings.get("FPR_EMBED_KEEP_MB") * 2 ** 20)


def _worker_init(_worker_id: int) -> None:
    """Decode workers run one thread each: per-image resizing/normalisation on torch's intra-op
    pool costs several times more than single-threaded, and the workers already run in parallel."""
    torch.set_num_threads(1)


HASH_CHUNK = 256  # files hashed per round of the reading threads (bounds the bytes held at once)


def _read_and_hash(path: str | Path) -> tuple[bytes | None, str | None, str]:
    try:
        data = read_bytes(path)
        return data, content_hash(data), ""
    except InputError as exc:
        return None, None, exc.one_line()


def _hash_all(paths: Sequence[str | Path], keep: dict[int, bytes] | None = None,
              given: Mapping[str, bytes] | None = None) -> tuple[list[str | None], dict[int, str]]:
    """Content hashes (None + a reason for unreadable files). With ``keep``, the bytes read are kept
    (up to ``KEEP_BYTES`` in all) so the decoder does not read the files a second time.

    Files are read and hashed by a few threads (file reads and SHA-256 release the GIL), in rounds
    of :data:`HASH_CHUNK` so that at most one round's bytes beyond the kept ones are held. ``given``: the
    bytes of some paths (images held in memory), used instead of reading them."""
    hashes: list[str | None] = []
    failed: dict[int, str] = {}
    kept = 0
    n_threads = min(4, os.cpu_count() or 1) if len(paths) >= 16 else 1
    pool = ThreadPoolExecutor(n_threads, thread_name_prefix="fpr-hash") if n_threads > 1 else None
    given = given or {}

    def read(path: str | Path) -> tuple[bytes | None, str | None, str]:
        data = given.get(str(path))
        return (data, content_hash(data), "") if data is not None else _read_and_hash(path)

    try:
        for start in range(0, len(paths), HASH_CHUNK):
            part = paths[start:start + HASH_CHUNK]
            done = pool.map(read, part) if pool is not None else map(read, part)
            for i, (data, digest, err) in enumerate(done, start):
                hashes.append(digest)
                if digest is None:
                    failed[i] = err
                elif keep is not None and (kept + len(data) <= KEEP_BYTES or str(paths[i]) in given):
                    keep[i] = data
                    kept += len(data)
    finally:
        if pool is not None:
            pool.shutdown()
    return hashes, failed


def embed_paths(encoder: Encoder, paths: Sequence[str | Path], *, batch_size: int = EMBED_BATCH_SIZE,
                workers: int | None = None, cache: EmbeddingCache | None | bool = True,
                on_error: str = "raise", desc: str = "embedding", normalize: bool = True,
                amp_dtype: torch.dtype | None = None, data: Mapping[str, bytes] | None = None) -> EmbedResult:
    """Embed image files in order. ``on_error``: ``raise`` (first bad file) or ``skip`` (NaN row, reported).

    ``normalize=False`` returns the encoder's raw (un-normalised) features; they never touch the
    embedding cache, which holds normalised vectors only. ``amp_dtype``: see :meth:`Encoder.embed_batch`.
    ``batch_size`` >= 1 and ``workers`` >= 0 decode processes (None: on a CPU device, threads of this
    process that each decode and embed a micro-batch; elsewhere chosen by the number of images); other values are
    one InputError, the same one the CLI prints. ``data``: path -> the image's encoded bytes, for images held
    in memory (``fpr.Evaluator``): decoded, hashed and cached exactly as a file with those bytes.
    """
    check_batch_size(batch_size)
    check_workers(workers)
    if on_error not in ("raise", "skip"):
        raise InputError(f"on_error must be 'raise' or 'skip', not {on_error!r}", hint=choices_hint(["raise", "skip"]))
    start = time.perf_counter()
    paths = [str(p) for p in paths]
    if not normalize or amp_dtype is not None:
        cache = None  # the cache holds normalised vectors of the default autocast type only
    if cache is True:
        cache = cache_for(encoder)
    kept: dict[int, bytes] = {}
    hashes, failed = _hash_all(paths, kept, data)
    _raise_if(failed, on_error, len(paths))
    out = np.full((len(paths), encoder.spec.dim), np.nan, dtype=np.float32)
    known = [h for h in hashes if h is not None]
    if cache is False:
        cache = None
    hits = cache.get_many(known) if cache is not None else {}
    todo: dict[str, int] = {}  # hash -> first row to decode
    for i, h in enumerate(hashes):
        if h is None:
            continue
        if h in hits:
            out[i] = hits[h]
        elif h not in todo:
            todo[h] = i
    n_from_cache = sum(1 for h in hashes if h is not None and h in hits)
    data = [kept.get(i) for i in todo.values()]
    kept.clear()  # cached images' bytes are not needed
    fresh = _embed_rows(encoder, [paths[i] for i in todo.values()], list(todo), batch_size, workers, cache,
                        desc, normalize=normalize, amp_dtype=amp_dtype, data=data)
    del data
    for i, h in enumerate(hashes):
        if h is None or h not in fresh:
            continue
        vec, err = fresh[h]
        if err:
            failed[i] = err
        else:
            out[i] = vec
    _raise_if(failed, on_error, len(paths))
    return EmbedResult(out, hashes, failed, n_from_cache, len(todo), time.perf_counter() - start)


def _raise_if(failed: dict[int, str], on_error: str, n: int) -> None:
    if failed and on_error == "raise":
        first = failed[min(failed)]
        more = f" (and {len(failed) - 1} more unreadable)" if len(failed) > 1 else ""
        raise InputError(first + more)


CHUNK = 8  # images per decode task on a CPU device: the first batch is ready after a few decodes, not a whole batch


def loader_plan(batch_size: int, n_workers: int, device_type: str) -> dict:
    """How the decode workers feed the model: images per worker task (``chunk``), tasks queued per worker
    (``prefetch_factor``), ``pin_memory``, and whether batches travel as uint8 ``pixels``.

    On CUDA a task is a whole batch of uint8 pixels (a quarter of the float bytes), pinned by the
    loader so the copy to the GPU does not block; the GPU normalises it (:meth:`Preprocessing.normalize`).
    On a CPU the workers normalise (the main process's cores run the model) and decode small chunks
    that the main process joins into batches of ``batch_size``: the model starts after the first few
    images instead of after a whole batch decoded by one worker, and each worker keeps about two
    batches decoded ahead.
    """
    cuda = device_type == "cuda"
    chunk = batch_size if cuda or n_workers == 0 else max(1, min(batch_size, CHUNK))
    prefetch = max(2, -(-2 * batch_size // chunk)) if n_workers else None
    return {"chunk": chunk, "prefetch_factor": prefetch, "pin_memory": cuda, "pixels": cuda}


def _rebatch(chunks, batch_size: int):
    """Join the loader's (rows, tensor, errors) chunks into batches of exactly ``batch_size`` rows
    (the last one shorter), in order."""
    rows: list[int] = []
    errs: list[str] = []
    parts: list[torch.Tensor] = []
    for idx, x, e in chunks:
        rows += idx
        errs += e
        parts.append(x)
        while len(rows) >= batch_size:
            x = parts[0] if len(parts) == 1 else torch.cat(parts)
            yield rows[:batch_size], x[:batch_size], errs[:batch_size]
            rows, errs = rows[batch_size:], errs[batch_size:]
            parts = [x[batch_size:]] if rows else []
    if rows:
        yield rows, parts[0] if len(parts) == 1 else torch.cat(parts), errs


def _fused_cpu(encoder: Encoder, dataset: _DecodeDataset, normalize: bool
               ) -> Iterator[tuple[list[int], np.ndarray, list[str]]]:
    """(rows, vectors, errors) per micro-batch, in order, for a model on the CPU: each task decodes one
    micro-batch of images and runs the protocol's forward pass on them, on one thread
    (:func:`fpr.encoders.cpu_forward.map_single_threaded`), as many tasks at once as torch had threads.

    Why fused: the forward pass of one micro-batch uses one core, so a thread's decoding overlaps
    the other threads' forward passes and costs its CPU time once, with no barrier between a
    decoding phase and a forward phase (the previous pipeline decoded a batch on all cores, then ran
    it, and at a batch of 32 ran one micro-batch: one core). PIL's decoding and resizing and torch's
    operations release the GIL; no process is started. The vectors are bit-identical to
    :meth:`Encoder.embed_batch` on the same pixels (``tests/encoders/test_determinism.py``)."""

    def task(rows: range) -> tuple[list[int], np.ndarray, list[str]]:
        idx, pixels, errs = _collate([dataset[i] for i in rows])
        return idx, encoder.embed_microbatch(pixels, normalize=normalize), errs

    yield from map_single_threaded(task, microbatches(len(dataset)))


@dataclass
class Decoded:
    """Files hashed, decoded and put through a protocol, ready for :func:`embed_decoded`.

    The first half of :func:`embed_paths`, for engines that decode in other processes than
    the one holding the model (the Ray engine decodes in tasks and embeds in actors)."""

    hashes: list[str | None]
    pixels: np.ndarray  # (N, 3, S, S) float32: the protocol's output; zeros for failed rows
    failed: dict[int, str] = field(default_factory=dict)  # input row -> one-line reason


def decode_paths(preprocess, paths: Sequence[str | Path]) -> Decoded:
    """Hash, decode and preprocess files in order, with the same reader and decoder as :func:`embed_paths`."""
    paths = [str(p) for p in paths]
    kept: dict[int, bytes] = {}
    hashes, failed = _hash_all(paths, kept)
    ds = _DecodeDataset(paths, preprocess, [kept.get(i) for i in range(len(paths))])
    size = preprocess.output_size
    pixels = np.zeros((len(paths), 3, size, size), dtype=np.float32)
    for i in range(len(paths)):
        if hashes[i] is None:
            continue
        _, tensor, err = ds[i]
        if err:
            failed[i] = err
        else:
            pixels[i] = tensor.numpy()
    return Decoded(hashes, pixels, failed)


def embed_decoded(encoder: Encoder, decoded: Decoded, *, batch_size: int = EMBED_BATCH_SIZE,
                  cache: EmbeddingCache | None = None) -> EmbedResult:
    """Embed decoded images (see :func:`decode_paths`) in order; like :func:`embed_paths` with
    ``on_error="skip"``: cached hashes are looked up, duplicated content is embedded once, new
    vectors are added to ``cache``."""
    check_batch_size(batch_size)
    start = time.perf_counter()
    hashes, failed = list(decoded.hashes), dict(decoded.failed)
    out = np.full((len(hashes), encoder.spec.dim), np.nan, dtype=np.float32)
    known = [h for i, h in enumerate(hashes) if h is not None and i not in failed]
    hits = cache.get_many(known) if cache is not None else {}
    todo: dict[str, int] = {}
    for i, h in enumerate(hashes):
        if h is None or i in failed:
            continue
        if h in hits:
            out[i] = hits[h]
        elif h not in todo:
            todo[h] = i
    rows = list(todo.values())
    for s in range(0, len(rows), batch_size):
        part = rows[s:s + batch_size]
        vecs = encoder.embed_batch(torch.from_numpy(decoded.pixels[part]))
        EMBED_STATS["images_embedded"] += len(part)
        if cache is not None:
            cache.add([hashes[i] for i in part], vecs)
        out[part] = vecs
    for i, h in enumerate(hashes):
        if h is not None and i not in failed and h in todo:
            out[i] = out[todo[h]]
    n_cached = sum(1 for i, h in enumerate(hashes) if h is not None and i not in failed and h in hits)
    return EmbedResult(out, hashes, failed, n_cached, len(todo), time.perf_counter() - start)


def raise_if_failed(failed: dict[int, str], on_error: str) -> None:
    """``on_error="raise"``: the first failure as one InputError (the message :func:`embed_paths` raises)."""
    _raise_if(failed, on_error, len(failed))


def _embed_rows(encoder: Encoder, paths: list[str], hashes: list[str], batch_size: int, workers: int | None,
                cache: EmbeddingCache | None, desc: str, *, normalize: bool = True,
                amp_dtype: torch.dtype | None = None, data: Sequence[bytes | None] | None = None
                ) -> dict[str, tuple[np.ndarray | None, str]]:
    """``workers``: decode processes beside the model; None picks: on a CPU device, threads of this
    process that each decode and embed one micro-batch (:func:`_fused_cpu`), elsewhere
    :func:`default_workers`."""
    results: dict[str, tuple[np.ndarray | None, str]] = {}
    if not paths:
        return results
    if workers is None and encoder.device.type == "cpu" and torch.get_num_threads() > 1 and len(paths) > 1:
        embedded = _fused_cpu(encoder, _DecodeDataset(paths, encoder.preprocessing, data, pixels=True), normalize)
    else:
        n_workers = default_workers(len(paths)) if workers is None else workers
        plan = loader_plan(batch_size, n_workers, encoder.device.type)
        loader = torch.utils.data.DataLoader(
            _DecodeDataset(paths, encoder.preprocessing, data, pixels=plan["pixels"]), batch_size=plan["chunk"],
            shuffle=False, num_workers=n_workers, collate_fn=_collate, pin_memory=plan["pin_memory"],
            prefetch_factor=plan["prefetch_factor"], persistent_workers=False,
            worker_init_fn=_worker_init if n_workers else None)
        batches = loader if plan["chunk"] == batch_size else _rebatch(loader, batch_size)
        embedded = ((idx, encoder.embed_batch(batch) if normalize and amp_dtype is None else
                     encoder.embed_batch(batch, normalize=normalize, amp_dtype=amp_dtype), errs)
                    for idx, batch, errs in batches)
    with progress.bar(total=len(paths), desc=desc, unit="img") as pbar:
        for idx, vecs, errs in embedded:
            EMBED_STATS["images_embedded"] += len(idx)
            good_h, good_v = [], []
            for j, i in enumerate(idx):
                if errs[j]:
                    results[hashes[i]] = (None, errs[j])
                else:
                    results[hashes[i]] = (vecs[j], "")
                    good_h.append(hashes[i])
                    good_v.append(vecs[j])
            if cache is not None and good_h:
                cache.add(good_h, np.stack(good_v))
            pbar.update(len(idx))
    return results


def cache_for(encoder: Encoder, root: str | Path | None = None) -> EmbeddingCache:
    meta = {k: v for k, v in encoder.provenance.items() if k != "embedding_key"}
    return EmbeddingCache(encoder.cache_key, encoder.spec.dim, root=root, meta=meta)


def embed_pil(encoder: Encoder, images: Sequence[Image.Image], *, batch_size: int = EMBED_BATCH_SIZE) -> np.ndarray:
    """Embed in-memory images (no cache: they have no file bytes to hash)."""
    out = []
    for s in range(0, len(images), batch_size):
        batch = torch.stack([encoder.preprocessing(im.convert("RGB")) for im in images[s:s + batch_size]])
        out.append(encoder.embed_batch(batch))
        EMBED_STATS["images_embedded"] += len(batch)
    return np.concatenate(out) if out else np.zeros((0, encoder.spec.dim), np.float32)
