"""Scores, AP and top-k are byte-identical whichever OpenBLAS kernel numpy runs.

The same scoring script runs in subprocesses with OpenBLAS forced to other kernels (and cache
sizes) than the machine's own; the exact scores (fpr.index.exact) hash the same, while the old
float32 ``q @ v.T`` path does not, which shows the kernels really differ.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fpr

pytestmark = pytest.mark.determinism

SCRIPT = r"""
import hashlib, json
import numpy as np
import pandas as pd
from threadpoolctl import threadpool_info
from fpr.eval import pipeline as P
from fpr.index import faiss_index as F
from fpr.index.exact import ScoreStats, exact_scores

def digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()

rng = np.random.default_rng(7)
g, q, d = 400, 37, 128
v = rng.normal(size=(g, d)).astype(np.float32)
v /= np.linalg.norm(v, axis=1, keepdims=True)
qv = (v[:q] + 0.3 * rng.normal(size=(q, d)).astype(np.float32)).astype(np.float32)
groups = np.array([f"g{j % 3}" for j in range(g)], object)
idents = np.array([f"i{j % 40}" for j in range(g)], object)
labels = P.GalleryLabels(np.arange(g), groups, idents, np.zeros((0, d), np.float32), np.array([], object),
                         np.array([], object), [], [f"p{j}" for j in range(g)])
qdf = pd.DataFrame({"group": groups[:q], "identity": idents[:q]})
card = F.IndexCard(name="ix", gallery="g", gallery_fingerprint="f", encoder="e", weights_checksum="w",
                   preprocessing="{}", dim=d, n_items=0, n_references=0)
gi = F.build(v, labels.item_ids, np.zeros((0, d), np.float32), np.zeros(0, np.int64), card)
stats = ScoreStats()
out = {"arch": [i.get("architecture") for i in threadpool_info() if i.get("internal_api") == "openblas"],
       "scores": digest(exact_scores(qv, v, stats=stats)), "float32_blas": digest(qv @ v.T)}
for scope in ("all", "group"):
    for block in (3, None):
        s = P.score_blocks(qv, np.arange(q), labels.codes(qdf), scope, gi, 10, block=block)
        out[f"{scope}-{block}"] = digest(s.values["ap"], s.values["first_hit_rank"], s.values["top_margin"], s.top_rows,
                                          s.top_scores)
from fpr.eval import recheck as RC
RC.PATH = "full"  # the previous path, every score exact: the recheck path (default above) must equal it
for scope in ("all", "group"):
    s = P.score_blocks(qv, np.arange(q), labels.codes(qdf), scope, gi, 10)
    out[f"full-{scope}"] = digest(s.values["ap"], s.values["first_hit_rank"], s.values["top_margin"], s.top_rows,
                                          s.top_scores)
RC.PATH = "auto"
out["loo_map"] = json.dumps(P.leave_one_out_map(v, idents, groups), sort_keys=True)
out["fallbacks"] = stats.fallbacks
print(json.dumps(out))
"""

KERNELS = {"own": {}, "haswell-l2-512": {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "512"},
           "prescott": {"OPENBLAS_CORETYPE": "Prescott"}}


def _cpu_has_avx2() -> bool:
    cpuinfo = Path("/proc/cpuinfo")
    return cpuinfo.is_file() and " avx2" in cpuinfo.read_text()


@pytest.mark.skipif(not _cpu_has_avx2(), reason="forcing OpenBLAS's Haswell kernel needs an AVX2 CPU (Linux)")
def test_scores_ap_and_top_k_are_byte_identical_across_blas_kernels():
    root = str(Path(fpr.__file__).resolve().parent.parent)
    base = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
    base["PYTHONPATH"] = os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])
    procs = {name: subprocess.Popen([sys.executable, "-c", SCRIPT], env={**base, **extra}, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
             for name, extra in KERNELS.items()}
    got = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{name}: {stderr[-2000:]}"
        got[name] = json.loads(stdout.strip().splitlines()[-1])
    if not all(r["arch"] for r in got.values()):
        pytest.skip("numpy does not use OpenBLAS here")
    # every OpenBLAS loaded (numpy's, FAISS's) runs the forced kernel
    assert set(got["haswell-l2-512"]["arch"]) == {"Haswell"}
    assert "Haswell" not in got["prescott"]["arch"]
    # the old float32 path changes with the kernel: the runs really used different kernels
    assert got["haswell-l2-512"]["float32_blas"] != got["prescott"]["float32_blas"]
    for name, r in got.items():  # float32 proposals rechecked == every score exact, on every kernel
        assert r["all-None"] == r["full-all"] and r["group-None"] == r["full-group"], name
    keys = [k for k in got["own"] if k not in ("arch", "float32_blas")]
    for name in ("haswell-l2-512", "prescott"):
        assert {k: got[name][k] for k in keys} == {k: got["own"][k] for k in keys}, name
