"""fpr/compiled.py: a read-only install with no writable cache folder still scores exactly (issue #35, item 3).

numba caches a compiled kernel in ``NUMBA_CACHE_DIR``, the ``__pycache__`` beside its source or the user's
cache folder; with none writable it refused the kernel at import (``internal error: cannot cache function
'round_checked'``). Each case runs in a fresh process on a copy of the package whose every ``__pycache__`` is
a regular file (as unwritable to root as a read-only mount) with both cache folders below a regular file.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

PACKAGE = Path(__file__).resolve().parents[1] / "fpr"
SCRIPT = """
import json
import numpy as np
from fpr.index.exact import exact_scores
from fpr.metrics.ranking import retrieval_metrics
from fpr.eval import _recheck_kernels  # decorated at import: refused there on the base commit
from fpr.compiled import cacheable

scores = exact_scores(np.array([[1, 2], [3, 4]], np.float32), np.array([[1, 0], [0, 1], [1, 1]], np.float32),
                      engine="numba")
ap = retrieval_metrics(np.array([[0.9, 0.8, 0.1]]), np.array([[False, True, True]])).ap
print(json.dumps({"scores": scores.tolist(), "ap": ap.tolist(), "cacheable": cacheable()}))
"""
# exact scores are the integer dot products; AP: relevant items at ranks 2 and 3 -> (1/2 + 2/3) / 2
WANT = {"scores": [[1.0, 2.0, 3.0], [3.0, 4.0, 7.0]], "ap": [(1 / 2 + 2 / 3) / 2]}


def _install(root: Path) -> Path:
    """A copy of the package in which no ``__pycache__`` can be created (each is a regular file)."""
    site = root / "site"
    shutil.copytree(PACKAGE, site / "fpr", ignore=shutil.ignore_patterns("__pycache__"))
    for folder in [site / "fpr", *(p for p in (site / "fpr").rglob("*") if p.is_dir())]:
        (folder / "__pycache__").write_text("not a folder\n")
    return site


def _run(site: Path, numba_cache: Path, user_cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site), "NUMBA_CACHE_DIR": str(numba_cache),
           "XDG_CACHE_HOME": str(user_cache), "FPR_SCORES_ENGINE": "numba", "FPR_METRICS_ENGINE": "numba",
           "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=site,
                          timeout=600)


def _values(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-800:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["scores"] == WANT["scores"] and got["ap"] == pytest.approx(WANT["ap"], abs=1e-15)
    return got


@pytest.fixture
def blocker(tmp_path) -> Path:
    """A regular file: no folder can be made below it, not even by root."""
    path = tmp_path / "a-file"
    path.write_text("caches cannot be made below a file\n")
    return path


@pytest.mark.slow
def test_a_read_only_install_without_a_cache_folder_compiles_in_memory_said_once(tmp_path, blocker):
    proc = _run(_install(tmp_path), blocker / "numba", blocker / "xdg")
    _values(proc)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    said = [ln for ln in lines if "numba kernel cache" in ln]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["cacheable"] is False  # nothing is compiled ahead
    assert len(said) == 1 and "compiling the kernels in memory" in said[0] and "NUMBA_CACHE_DIR" in said[0], lines
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


@pytest.mark.slow
def test_a_writable_numba_cache_dir_is_used_and_nothing_is_said(tmp_path, blocker):
    proc = _run(_install(tmp_path), tmp_path / "numba-cache", blocker / "xdg")
    assert _values(proc)["cacheable"] is True
    assert "numba kernel cache" not in proc.stderr
    kept = {p.name.split(".")[0] for p in (tmp_path / "numba-cache").rglob("*.nbi")}
    assert {"_exact_kernels", "_kernels"} <= kept  # the kernels that ran are kept between runs


def _wait_for(release) -> None:
    """A child compiling ahead, as the test drives it: done when released (module level: forked by reference)."""
    release.wait(60)


def test_wait_ahead_waits_for_its_own_child_once_and_a_forked_process_for_no_one(monkeypatch):
    """The set's first use in the process that started the child waits for the child's end (then loads the
    set from numba's cache); a process forked from it (the demo's verdict seeds, copy-paste's workers) inherits
    the table but waits for no one; a set is waited for once."""
    import multiprocessing as mp

    from fpr import compiled

    ctx = mp.get_context("fork")
    release = ctx.Event()
    child = ctx.Process(target=_wait_for, args=(release,), daemon=True)
    child.start()
    try:
        compiled.compile_ahead("test-set", child)
        with monkeypatch.context() as m:
            m.setattr(compiled.os, "getpid", lambda: -1)  # another process than the child's parent
            compiled.wait_ahead("test-set")
        assert child.exitcode is None and child.is_alive()  # not waited for, and the set forgotten
        compiled.wait_ahead("test-set")
        assert child.is_alive()
        compiled.compile_ahead("test-set", child)
        release.set()
        compiled.wait_ahead("test-set")
        assert child.exitcode == 0  # joined: the wait returned when the child had ended
        compiled.compile_ahead("other-set", child)
        compiled.forget_ahead(["other-set"])
        compiled.wait_ahead("other-set")  # forgotten: nothing to wait for
    finally:
        release.set()
        child.join(60)


def test_cacheable_here_where_numba_can_write():
    from fpr import compiled

    assert compiled.cacheable() is True  # the test environment's numba cache (beside the sources, or its dir)
