"""The embedding cache at scale, with concurrent writers and writers killed mid-write."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from fpr.encoders.cache import EmbeddingCache

ROOT = Path(__file__).resolve().parents[2]
WRITER = """
import sys, numpy as np
from fpr.encoders.cache import EmbeddingCache
root, start, n, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
c = EmbeddingCache("k", 4, root=root)
for s in range(start, start + n, batch):
    ids = np.arange(s, min(s + batch, start + n))
    c.add([f"h{i}" for i in ids], np.stack([np.full(4, i, np.float32) / 7 for i in ids]))
print("done", flush=True)
"""


def _vec(i: int) -> bytes:
    return (np.full(4, i, np.float32) / 7).tobytes()


def test_a_few_hundred_thousand_vectors_bit_for_bit(tmp_path):
    n = 300_000
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((n, 4)).astype(np.float32)
    cache = EmbeddingCache("k", 4, root=tmp_path)
    for s in range(0, n, 50_000):
        cache.add([f"{i:064x}" for i in range(s, s + 50_000)], vecs[s:s + 50_000])
    assert len(cache) == n
    probe = rng.choice(n, 64, replace=False)
    got = EmbeddingCache("k", 4, root=tmp_path).get_many([f"{i:064x}" for i in probe] + ["absent"])
    assert len(got) == 64
    assert all(got[f"{i:064x}"].tobytes() == vecs[i].tobytes() for i in probe)
    # re-adding (another writer's duplicate) keeps the first vector
    cache.add([f"{probe[0]:064x}"], np.zeros((1, 4), np.float32))
    assert cache.get_many([f"{probe[0]:064x}"])[f"{probe[0]:064x}"].tobytes() == vecs[probe[0]].tobytes()


def test_concurrent_writers_and_a_killed_writer(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = lambda *a: subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), *map(str, a)],  # noqa: E731
                                      env=env, stdout=subprocess.PIPE, text=True)
    # two writers with overlapping ranges, and one killed with SIGKILL while it writes
    a, b, victim = run(0, 3000, 100), run(2000, 3000, 100), run(10_000, 200_000, 50)
    deadline = time.time() + 30
    while time.time() < deadline and len(EmbeddingCache("k", 4, root=tmp_path)) < 10_100:
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert a.communicate(timeout=120)[0].strip() == "done" and b.communicate(timeout=120)[0].strip() == "done"
    cache = EmbeddingCache("k", 4, root=tmp_path)
    got = cache.get_many([f"h{i}" for i in range(5000)])
    assert len(got) == 5000 and all(got[f"h{i}"].tobytes() == _vec(i) for i in range(5000))
    # what the killed writer committed is whole batches of correct vectors, and the cache still takes writes
    n_victim = len(cache) - 5000
    assert 0 < n_victim < 200_000 and n_victim % 50 == 0
    got = cache.get_many([f"h{i}" for i in range(10_000, 10_000 + n_victim)])
    assert len(got) == n_victim and all(v.tobytes() == _vec(int(h[1:])) for h, v in got.items())
    cache.add(["new"], np.ones((1, 4), np.float32))
    assert len(EmbeddingCache("k", 4, root=tmp_path)) == 5000 + n_victim + 1
