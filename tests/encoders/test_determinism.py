"""Embedding determinism: on a CPU in fp32 an image's embedding does not depend on its batch-mates.

Each image is embedded alone and inside batches of other sizes and compositions (shuffled
orders, duplicated neighbours, different batch sizes); every vector must be bit-identical.
Covered: the built-in encoders fpr-world-v1 and pixels-16, and a tiny random timm CNN (timm's test_resnet).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fpr.encoders import embed as E
from fpr.encoders.preprocess import Preprocessing
from fpr.encoders.registry import EncoderSpec, load_encoder, register, unregister
from fpr.encoders.weights import WeightsSource
from fpr.images import load_rgb
from tests.conftest import write_image

TEST_RESNET_DIM = 96  # timm's tiny "test_resnet": a random-initialised ResNet with BatchNorm


@pytest.fixture(scope="module")
def timm_cnn():
    import timm

    def build(_):
        torch.manual_seed(0)
        return timm.create_model("test_resnet", pretrained=False, num_classes=0)

    spec = EncoderSpec(id="test-timm-test_resnet", family="test", dim=TEST_RESNET_DIM,
                       preprocessing=Preprocessing(name="squash32-imagenet", size=32),
                       weights=WeightsSource(kind="none"), build=build)
    register(spec, replace=True)
    yield spec.id
    unregister(spec.id)


@pytest.fixture
def images(tmp_path):
    return [str(write_image(tmp_path / f"i{k}.png", seed=100 + k, size=40 + 3 * k)) for k in range(5)]


@pytest.mark.parametrize("encoder_id", ["fpr-world-v1", "pixels-16", "test-timm-test_resnet"])
def test_embedding_does_not_depend_on_the_batch(encoder_id, images, timm_cnn):
    enc = load_encoder(encoder_id, device="cpu")
    assert (enc.device_class, enc.precision) == ("cpu", "fp32")
    alone = np.stack([E.embed_paths(enc, [p], cache=None, workers=0).vectors[0] for p in images])
    rng = np.random.default_rng(0)
    for batch_size in (2, 5):
        order = rng.permutation(len(images))
        got = E.embed_paths(enc, [images[i] for i in order], cache=None, batch_size=batch_size, workers=0).vectors
        assert got.tobytes() == alone[order].tobytes(), (encoder_id, batch_size)
    # the same image among copies of one other image, and at every position of a batch
    for pos in (0, 3):
        mates = [images[0]] * 3
        mates.insert(pos, images[4])
        got = E.embed_pil(enc, [load_rgb(p) for p in mates], batch_size=4)
        assert got[pos].tobytes() == alone[4].tobytes()


def test_embed_batch_equals_one_image_at_a_time():
    """On a CPU a batched forward pass may differ in the last bits (kernels block by batch size);
    embed_batch runs every image in a micro-batch of one shape, so a batch equals its images one by one."""
    enc = load_encoder("fpr-world-v1", device="cpu")
    torch.manual_seed(0)
    x = torch.randn(9, 3, enc.preprocessing.output_size, enc.preprocessing.output_size)
    assert enc.embed_batch(x).tobytes() == np.concatenate([enc.embed_batch(x[i:i + 1]) for i in range(9)]).tobytes()


def _timm_spec(name: str, size: int) -> EncoderSpec:
    import timm

    def build(_):
        torch.manual_seed(0)
        return timm.create_model(name, pretrained=False, num_classes=0)

    dim = timm.create_model(name, pretrained=False, num_classes=0).num_features
    return EncoderSpec(id=f"test-timm-{name}", family="test", dim=dim,
                       preprocessing=Preprocessing(name=f"squash{size}-imagenet", size=size),
                       weights=WeightsSource(kind="none"), build=build)


@pytest.mark.parametrize("name,size", [("test_efficientnet", 64), ("test_vit", 32)])
def test_embedding_does_not_depend_on_thread_count_position_or_batch_size(name, size):
    """Every forward pass is one micro-batch shape on one thread (fpr.encoders.cpu_forward): the
    process's thread count (1, 2, 3, 4: counts that do and do not divide the batch), the image's position
    and the batch it arrives in change no bit. Networks with depthwise convolutions (EfficientNet)
    and attention (ViT) are the ones whose multi-threaded batched kernels differ by position."""
    spec = _timm_spec(name, size)
    register(spec, replace=True)
    try:
        enc = load_encoder(spec.id, device="cpu")
        torch.manual_seed(1)
        x = torch.randn(70, 3, size, size)
        threads_before = torch.get_num_threads()
        runs = []
        try:
            for threads in (1, 2, 3, 4):
                torch.set_num_threads(threads)
                runs.append(enc.embed_batch(x))
                rolled = enc.embed_batch(torch.roll(x, 7, 0))
                assert np.roll(rolled, -7, 0).tobytes() == runs[-1].tobytes(), (name, threads)
        finally:
            torch.set_num_threads(threads_before)
        assert torch.get_num_threads() == threads_before
        assert all(r.tobytes() == runs[0].tobytes() for r in runs), name
        pieces = np.concatenate([enc.embed_batch(x[s:s + 9]) for s in range(0, 70, 9)])
        assert pieces.tobytes() == runs[0].tobytes()
    finally:
        unregister(spec.id)


def test_cpu_forward_is_part_of_the_cache_key(monkeypatch):
    from fpr.encoders.cpu_forward import CPU_FORWARD
    from fpr.encoders.registry import embedding_key, get_spec

    enc = load_encoder("pixels-16", device="cpu")
    spec = get_spec("pixels-16")
    assert enc.cache_key == embedding_key(spec, enc.weights, device="cpu", precision="fp32")
    assert CPU_FORWARD == "microbatch32-1thread-nhwc"
    import fpr.encoders.registry as R

    key = enc.cache_key
    monkeypatch.setattr(R, "CPU_FORWARD", "microbatch32-1thread")  # the previous protocol: another key
    assert embedding_key(spec, enc.weights, device="cpu", precision="fp32") != key
    # the CUDA key has no CPU forward protocol in it, the CPU one does: they never collide
    assert embedding_key(spec, enc.weights, device="cuda", precision="fp32") != enc.cache_key


def test_each_forward_pass_is_one_padded_channels_last_micro_batch_on_one_thread():
    """What the network sees under the protocol, recorded from inside it: 70 rows at 3 threads are
    three passes of exactly (32, 3, 8, 8), channels-last, one torch thread each, on pool threads;
    the output rows equal the same network called directly on those padded channels-last passes."""
    import threading

    from fpr.encoders.cpu_forward import CPU_MICROBATCH, forward_microbatched

    torch.manual_seed(2)
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3), torch.nn.ReLU(), torch.nn.Flatten())
    seen = []

    def model(x):
        seen.append((tuple(x.shape), x.is_contiguous(memory_format=torch.channels_last), torch.get_num_threads(),
                     threading.current_thread().name))
        return conv(x)

    x = torch.randn(70, 3, 8, 8)
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        got = forward_microbatched(model, x)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
    assert sorted(s[:3] for s in seen) == [((CPU_MICROBATCH, 3, 8, 8), True, 1)] * 3
    assert all(s[3].startswith("fpr-forward") for s in seen)
    padded = torch.cat([x, torch.zeros(26, 3, 8, 8)])
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            want = torch.cat([conv(padded[s:s + 32].contiguous(memory_format=torch.channels_last))
                              for s in (0, 32, 64)])[:70]
    finally:
        torch.set_num_threads(before)
    assert got.numpy().tobytes() == want.numpy().tobytes()


_OTHER_PROCESS = """
import sys, numpy as np, torch
torch.set_num_threads(int(sys.argv[1]))
from fpr.encoders import embed as E
from fpr.encoders.registry import load_encoder
paths = sys.argv[3:]
vecs = E.embed_paths(load_encoder("fpr-world-v3", device="cpu"), paths, cache=None).vectors
np.save(sys.argv[2], vecs)
"""


@pytest.mark.slow
def test_pipeline_bits_are_the_same_across_threads_paths_and_processes(tmp_path):
    """The built-in encoder through ``embed_paths``: the fused CPU pipeline (threads that decode and
    embed a micro-batch each) at 2 and 3 threads, the one-process path at 1 thread, the DataLoader path
    (workers=0), ``embed_batch`` on the decoded pixels, and fresh processes at 1 and 3 threads on the
    reversed order all give the same bytes for every image."""
    import os
    import subprocess
    import sys

    paths = [str(write_image(tmp_path / f"w{k}.png", seed=300 + k, size=50 + k % 9)) for k in range(45)]
    enc = load_encoder("fpr-world-v3", device="cpu")
    ref = E.embed_paths(enc, paths, cache=None, workers=0).vectors
    pixels = torch.stack([enc.preprocessing.pixels(load_rgb(p)) for p in paths])
    assert enc.embed_batch(pixels).tobytes() == ref.tobytes()
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            for order in (np.arange(45), np.arange(45)[::-1]):
                got = E.embed_paths(enc, [paths[i] for i in order], cache=None).vectors
                assert got.tobytes() == ref[order].tobytes(), (threads, order[0])
    finally:
        torch.set_num_threads(before)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root, "FPR_QUIET": "1"}
    for threads in (1, 3):
        out = tmp_path / f"p{threads}.npy"
        subprocess.run([sys.executable, "-c", _OTHER_PROCESS, str(threads), str(out), *paths[::-1]],
                       check=True, env=env, timeout=300)
        assert np.load(out).tobytes() == ref[::-1].tobytes(), threads


def test_a_consumer_that_stops_early_cancels_the_micro_batches_not_started():
    """map_single_threaded is a generator holding the process's thread setting: closing it after the
    first result runs no more than the tasks already started, and restores the thread count."""
    import time

    from fpr.encoders.cpu_forward import map_single_threaded

    ran = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        gen = map_single_threaded(lambda i: time.sleep(0.01) or ran.append(i) or i, list(range(200)))  # 1 s in all
        assert next(gen) == 0
        gen.close()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert len(ran) < 200
