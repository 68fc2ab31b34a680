"""The CUDA paths, run where a GPU is present (skipped elsewhere; the CPU suite covers their plumbing).

Values, not shapes: the device's normalisation is compared bit for bit with the CPU's,
its embeddings with the CPU's fp32 ones by cosine, a FAISS GPU search with the CPU
index's ranking, and one training step on the GPU with a reload on the CPU.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fpr.encoders import embed as E
from fpr.encoders.preprocess import Preprocessing
from fpr.encoders.registry import load_encoder
from tests.conftest import write_image

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture
def images(tmp_path):
    return [str(write_image(tmp_path / f"img{i}.png", seed=i, size=40 + i % 9)) for i in range(48)]


def test_device_normalisation_is_bit_identical_to_the_cpus():
    pre = Preprocessing(name="squash64-imagenet", size=64)
    pixels = torch.randint(0, 256, (5, 64, 64, 3), dtype=torch.uint8)
    cpu = pre.normalize(pixels)
    gpu = pre.normalize(pixels.cuda()).cpu()
    assert gpu.dtype == torch.float32 and torch.equal(cpu, gpu)


def test_uint8_and_float_batches_give_the_same_cuda_embeddings(images):
    enc = load_encoder("fpr-world-v2", device="cuda")
    decoded = [E.decode_rgb(E.read_bytes(p)) for p in images[:16]]
    floats = torch.stack([enc.preprocessing(im) for im in decoded])
    pixels = torch.stack([enc.preprocessing.pixels(im) for im in decoded])
    assert enc.embed_batch(pixels).tobytes() == enc.embed_batch(floats).tobytes()


def test_cuda_embeddings_agree_with_cpu_fp32(images):
    gpu = load_encoder("fpr-world-v2", device="cuda")
    cpu = load_encoder("fpr-world-v2", device="cpu")
    assert gpu.precision in ("bf16", "fp16") and cpu.precision == "fp32"
    a = E.embed_paths(gpu, images, cache=False, batch_size=16).vectors
    b = E.embed_paths(cpu, images, cache=False, batch_size=16).vectors
    cos = np.sum(a.astype(np.float64) * b, axis=1)
    # bf16 autocast keeps about 3 significant digits per activation; the vectors stay within a degree or two
    assert cos.min() > 0.995, cos.min()
    # and the ranking of the images against each other is the CPU's for the nearest neighbour
    sa, sb = a @ a.T, b @ b.T
    np.fill_diagonal(sa, -2)
    np.fill_diagonal(sb, -2)
    assert (sa.argmax(1) == sb.argmax(1)).mean() >= 0.9


def test_cuda_keys_the_cache_apart_from_the_cpu(images):
    gpu = load_encoder("fpr-world-v2", device="cuda")
    cpu = load_encoder("fpr-world-v2", device="cpu")
    assert gpu.cache_key != cpu.cache_key
    first = E.embed_paths(gpu, images[:8], batch_size=4)
    again = E.embed_paths(gpu, images[:8], batch_size=4)
    assert first.n_from_cache == 0 and again.n_from_cache == 8
    assert again.vectors.tobytes() == first.vectors.tobytes()


def test_faiss_gpu_search_ranks_like_the_cpu_index():
    faiss = pytest.importorskip("faiss")
    if not (hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0):
        pytest.skip("FAISS here has no GPU support (faiss-cpu)")
    from fpr.index.faiss_index import _to_gpu

    rng = np.random.default_rng(0)
    xb = rng.normal(size=(2000, 64)).astype(np.float32)
    xb /= np.linalg.norm(xb, axis=1, keepdims=True)
    xq = xb[:50] + 0.01 * rng.normal(size=(50, 64)).astype(np.float32)
    index = faiss.IndexFlatIP(64)
    index.add(xb)
    d_cpu, i_cpu = index.search(xq, 10)
    d_gpu, i_gpu = _to_gpu(index).search(xq, 10)
    assert (i_gpu[:, 0] == np.arange(50)).all() and (i_cpu[:, 0] == i_gpu[:, 0]).all()
    np.testing.assert_allclose(d_gpu, d_cpu, atol=1e-4)


def test_a_training_step_on_cuda_reloads_on_the_cpu():
    from fpr import api
    from fpr.encoders import registry
    from fpr.encoders import train as tr
    from fpr.encoders.trained import load_card, load_network
    from fpr.galleries.world import render_identity

    config = tr.TrainConfig(arch="fpr-cnn-grid", size=48, dim=32, epochs=1, batch_size=16, steps_per_epoch=3,
                            device="cuda", workers=0)
    src = api.training_source("world", identities=4, per_identity=4, render_size=64, seed=0)
    res = api.train_encoder(src, config, encoder_id="cuda-smoke", command="test")
    assert res.card["device"].startswith("cuda") and len(res.history) == 1
    enc = registry.load_encoder("cuda-smoke", device="cpu")
    imgs = [render_identity("zebra", 1_000_001 + i, "rt", size=64) for i in range(4)]
    batch = torch.stack([enc.preprocessing(im) for im in imgs])
    net = load_network(load_card(res.card_path), res.weights_path)
    want = torch.nn.functional.normalize(net(batch), dim=1).detach().numpy()
    np.testing.assert_allclose(enc.embed_batch(batch), want, atol=1e-5)
