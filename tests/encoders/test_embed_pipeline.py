"""The embedding pipeline's plumbing: threaded hashing, chunked decoding re-joined into batches, the
loader plan per device (pinned memory on CUDA), non-blocking copies; and the vectors stay bit-identical."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch
from PIL import Image

from fpr.encoders import embed as E
from fpr.encoders.preprocess import IMAGENET_MEAN, IMAGENET_STD, OPENAI_MEAN, OPENAI_STD, Preprocessing
from fpr.encoders.registry import load_encoder
from tests.conftest import write_image


@pytest.fixture
def images(tmp_path):
    return [str(write_image(tmp_path / f"img{i}.png", seed=i, size=30 + i % 7)) for i in range(37)]


def test_hashing_in_threads_reads_each_file_once_and_keeps_order(images, tmp_path, monkeypatch):
    bad = tmp_path / "empty.png"
    bad.write_bytes(b"")
    paths = images[:20] + [str(bad), str(tmp_path / "missing.png")] + images[20:]
    reads = []
    real = E.read_bytes
    monkeypatch.setattr(E, "read_bytes", lambda p: reads.append(str(p)) or real(p))
    monkeypatch.setattr(E, "HASH_CHUNK", 8)  # several rounds of the thread pool
    kept: dict[int, bytes] = {}
    hashes, failed = E._hash_all(paths, kept)
    assert sorted(reads) == sorted(paths)
    want = [hashlib.sha256(open(p, "rb").read()).hexdigest() if i not in (20, 21) else None
            for i, p in enumerate(paths)]
    assert hashes == want
    assert sorted(failed) == [20, 21] and "empty" in failed[20] and "not found" in failed[21]
    assert sorted(kept) == [i for i in range(len(paths)) if i not in (20, 21)]
    assert all(kept[i] == open(paths[i], "rb").read() for i in kept)


def test_kept_bytes_stop_at_the_budget_in_input_order(images, monkeypatch):
    sizes = [len(open(p, "rb").read()) for p in images]
    monkeypatch.setattr(E, "KEEP_BYTES", sum(sizes[:5]))
    kept: dict[int, bytes] = {}
    E._hash_all(images, kept)
    # the first five fill the budget exactly; a later file joins only if it still fits (none does)
    assert sorted(kept) == [0, 1, 2, 3, 4]


def _chunks(sizes, start=0):
    rows = start
    for k, n in enumerate(sizes):
        idx = list(range(rows, rows + n))
        yield idx, torch.arange(rows, rows + n, dtype=torch.float32).view(n, 1), [f"e{i}" if i % 5 == 0 else ""
                                                                                 for i in idx]
        rows += n


@pytest.mark.parametrize("sizes,batch,want", [
    ([8, 8, 8, 8, 3], 32, [32, 3]),
    ([8, 8, 8], 5, [5, 5, 5, 5, 4]),
    ([3, 3, 3], 32, [9]),
    ([1, 1, 1], 1, [1, 1, 1]),
    ([8, 2], 10, [10]),
])
def test_rebatch_joins_chunks_into_exact_batches_in_order(sizes, batch, want):
    got = list(E._rebatch(_chunks(sizes), batch))
    assert [len(idx) for idx, _, _ in got] == want
    rows = [i for idx, _, _ in got for i in idx]
    assert rows == list(range(sum(sizes)))
    for idx, x, errs in got:
        assert x[:, 0].tolist() == [float(i) for i in idx]  # each tensor row is its own image
        assert errs == [f"e{i}" if i % 5 == 0 else "" for i in idx]


def test_loader_plan_per_device():
    cpu = {"pin_memory": False, "pixels": False}
    assert E.loader_plan(32, 2, "cpu") == dict(cpu, chunk=8, prefetch_factor=8)
    assert E.loader_plan(5, 2, "cpu") == dict(cpu, chunk=5, prefetch_factor=2)
    assert E.loader_plan(32, 0, "cpu") == dict(cpu, chunk=32, prefetch_factor=None)
    assert E.loader_plan(32, 2, "cuda") == {"chunk": 32, "prefetch_factor": 2, "pin_memory": True, "pixels": True}


class _FakeCudaEncoder:
    """Looks like an encoder on CUDA to the pipeline, computes on the CPU: checks the loader arguments."""

    def __init__(self, real):
        self.real = real
        self.device = torch.device("cuda")
        self.preprocessing = real.preprocessing
        self.batches = []

    def embed_batch(self, batch, **kw):
        self.batches.append((len(batch), batch.dtype, tuple(batch.shape[1:])))
        return self.real.embed_batch(batch, **kw)


@pytest.mark.parametrize("workers", [0, 2])
def test_cuda_device_gets_pinned_whole_batches_of_uint8_pixels(images, workers, monkeypatch):
    enc = load_encoder("pixels-16", device="cpu")
    fake = _FakeCudaEncoder(enc)
    seen = {}
    real_loader = torch.utils.data.DataLoader

    def spy(*args, **kw):
        seen.update(kw)
        return real_loader(*args, **dict(kw, pin_memory=False))  # no GPU here to pin for

    monkeypatch.setattr(torch.utils.data, "DataLoader", spy)
    got = E._embed_rows(fake, images[:10], [f"h{i}" for i in range(10)], 4, workers, None, "t")
    assert seen["pin_memory"] is True and seen["batch_size"] == 4
    assert fake.batches == [(n, torch.uint8, (64, 64, 3)) for n in (4, 4, 2)]  # normalised on the device
    want = enc.embed_batch(torch.stack([enc.preprocessing(E.decode_rgb(E.read_bytes(p))) for p in images[:10]]))
    assert np.stack([got[f"h{i}"][0] for i in range(10)]).tobytes() == want.tobytes()


def test_embed_batch_copies_without_blocking(monkeypatch):
    enc = load_encoder("pixels-16", device="cpu")
    calls = []

    class Batch:
        def __init__(self, t):
            self.t = t

        def to(self, device, **kw):
            calls.append((torch.device(device).type, kw))
            return self.t

    x = torch.zeros(2, 3, 64, 64)
    enc.embed_batch(Batch(x))
    assert calls == [("cpu", {"non_blocking": True})]


@pytest.mark.parametrize("encoder_id", ["fpr-world-v2", "pixels-16"])
def test_workers_and_chunks_give_the_same_bits_as_the_main_process(encoder_id, images):
    enc = load_encoder(encoder_id, device="cpu")
    alone = E.embed_paths(enc, images, cache=None, workers=0, batch_size=32).vectors
    for batch_size in (7, 32):
        got = E.embed_paths(enc, images, cache=None, workers=2, batch_size=batch_size).vectors
        assert got.tobytes() == alone.tobytes(), batch_size


@pytest.mark.parametrize("mean,std", [(IMAGENET_MEAN, IMAGENET_STD), (OPENAI_MEAN, OPENAI_STD), ((0.5,) * 3, (0.5,) * 3)])
def test_normalized_pixels_equal_the_float_protocol_for_every_value(mean, std):
    p = Preprocessing(name="t", size=16, mean=mean, std=std)
    every = torch.arange(256, dtype=torch.uint8).view(1, 16, 16, 1).repeat(1, 1, 1, 3)
    every[..., 1] = every[..., 1].flip(1)  # channels see the values in different places
    got = p.normalize(every)[0]
    ramp = Image.fromarray(every[0].numpy())
    assert got.numpy().tobytes() == p.to_tensor(ramp).numpy().tobytes()
    # and an independent formula: torchvision's ToTensor + Normalize
    from torchvision import transforms as T

    ref = T.Normalize(mean, std)(T.ToTensor()(ramp))
    assert got.numpy().tobytes() == ref.numpy().tobytes()


def test_embed_batch_takes_uint8_pixels_bit_for_bit(images):
    enc = load_encoder("fpr-world-v2", device="cpu")
    ims = [E.decode_rgb(E.read_bytes(p)) for p in images[:6]]
    floats = torch.stack([enc.preprocessing(im) for im in ims])
    pixels = torch.stack([enc.preprocessing.pixels(im) for im in ims])
    assert pixels.dtype == torch.uint8 and pixels.shape == (6, 64, 64, 3)
    assert enc.embed_batch(pixels).tobytes() == enc.embed_batch(floats).tobytes()


def test_cpu_default_decodes_and_embeds_micro_batches_in_threads(images, tmp_path, monkeypatch):
    """workers=None on a CPU with several torch threads: no processes; each micro-batch of 32 is decoded
    and embedded by one thread of a pool, every torch operation there on one thread; the same bits as
    the main process's DataLoader path, failures in place, rows in order."""
    import threading

    enc = load_encoder("fpr-world-v2", device="cpu")
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    paths = images[:9] + [str(bad)] + images[9:] + images[:30]  # 67 rows, 37 distinct images: micro-batches of 32 and 5
    alone = E.embed_paths(enc, paths, cache=None, workers=0, batch_size=32, on_error="skip")
    threads_before = torch.get_num_threads()
    torch.set_num_threads(2)
    monkeypatch.setattr(torch.utils.data, "DataLoader", lambda *a, **k: pytest.fail("no decode processes"))
    seen: list[tuple[str, int]] = []  # (thread, torch threads) at each decode
    real = E._DecodeDataset.__getitem__
    monkeypatch.setattr(E._DecodeDataset, "__getitem__", lambda self, i: seen.append(
        (threading.current_thread().name, torch.get_num_threads())) or real(self, i))
    try:
        for batch_size in (4, 32):
            got = E.embed_paths(enc, paths, cache=None, batch_size=batch_size, on_error="skip")
            ok = ~np.isnan(alone.vectors[:, 0])
            assert np.array_equal(np.isnan(got.vectors[:, 0]), ~ok)
            assert got.vectors[ok].tobytes() == alone.vectors[ok].tobytes()
            assert list(got.failed) == [9] and got.failed == alone.failed
        assert torch.get_num_threads() == 2  # restored after the pipeline
    finally:
        torch.set_num_threads(threads_before)
    names = {name for name, _ in seen}
    assert len(names) == 2 and all(n.startswith("fpr-forward") for n in names), names
    assert {t for _, t in seen} == {1}


def test_decode_paths_gives_the_embed_paths_pixels_and_a_reason_for_a_missing_file(tmp_path):
    """The Ray engine's first half (decode in tasks, embed in actors) equals ``embed_paths``' own decoding."""
    pre = Preprocessing(name="t", size=16)
    good = write_image(tmp_path / "a.png", seed=3)
    dec = E.decode_paths(pre, [good, tmp_path / "missing.png"])
    assert dec.hashes[0] == hashlib.sha256(good.read_bytes()).hexdigest() and dec.hashes[1] is None
    assert set(dec.failed) == {1} and dec.failed[1]  # a one-line reason for the missing file
    with Image.open(good) as im:
        np.testing.assert_array_equal(dec.pixels[0], pre(im.convert("RGB")).numpy())
    assert not dec.pixels[1].any()
