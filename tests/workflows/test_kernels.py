"""fpr/workflows/kernels.py: numba's kernels compiled ahead of their first use (issue #37 item 3): where it cannot
cache nothing is forked and one line says so; ``python -m fpr.workflows.kernels`` leaves every kernel a run uses
in numba's cache, so a run after it compiles nothing."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fpr import compiled
from fpr.workflows import kernels

pytest.importorskip("numba")
ROOT = Path(__file__).resolve().parents[2]


def test_where_numba_cannot_cache_nothing_is_forked_and_one_line_says_so(monkeypatch, capsys):
    monkeypatch.setattr(compiled, "cacheable", lambda: False)
    before = set(mp.active_children())
    with kernels.compiling_ahead([kernels.COPY_PASTE]) as ahead:
        assert ahead is False and set(mp.active_children()) == before
        assert kernels.COPY_PASTE not in compiled._AHEAD  # its first use compiles here, as without this
    assert kernels.main([]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("fpr: numba cannot cache compiled kernels here") and \
        "each run compiles them in memory" in err[0]


def test_compiling_ahead_registers_its_process_and_leaving_forgets_and_ends_it(monkeypatch):
    """The forked process is the one the set's first use waits for; leaving the body (the demo ended, or
    failed) forgets the set and ends the process, whether it finished or not."""
    monkeypatch.setattr(kernels, "_ahead", _idle)  # the test drives the child: no compile
    with kernels.compiling_ahead([kernels.COPY_PASTE]) as ahead:
        assert ahead is True
        owner, process = compiled._AHEAD[kernels.COPY_PASTE]
        assert owner == os.getpid() and process.is_alive()
    assert kernels.COPY_PASTE not in compiled._AHEAD and process.exitcode is not None


def _idle(sets) -> None:
    import time

    time.sleep(60)  # a compile that outlasts the body: ended when the body is left


SCRIPT = """
import json, sys
from numba.core import event

compiled = []

class Listener(event.Listener):
    def on_start(self, ev):
        compiled.append(ev.data["dispatcher"].py_func.__qualname__)

    def on_end(self, ev):
        pass

event.register("numba:compile", Listener())
from fpr.workflows import demo
res = demo.run_demo(workspace=sys.argv[1], config=dict(identities=2, gallery=2, references=1, queries=1))
assert res.validity["copy_paste_flag_rate"]  # copy-paste ran, its matching in this process (a small batch)
print(json.dumps(compiled))
"""


@pytest.mark.slow  # every kernel compiled into an empty numba cache, then a small demo: ~40 s on 2 idle cores
def test_after_the_install_step_a_demo_compiles_no_kernel(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
           "PYTHONDONTWRITEBYTECODE": "1"}
    step = subprocess.run([sys.executable, "-m", "fpr.workflows.kernels"], capture_output=True, text=True, env=env,
                          timeout=900, check=False)
    assert step.returncode == 0, step.stderr[-2000:]
    lines = step.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fpr: numba kernels compiled into its cache (metrics, copy-paste;")
    kept = {p.name.split("-")[0] for p in (tmp_path / "numba").rglob("*.nbi")}
    assert {"align.refine_loops", "kernels._textured", "_recheck_kernels.block_rows", "_kernels.walk"} <= kept, kept
    # a small demo (the metric engine, the exact recheck, copy-paste) with the cache the step left
    env["FPR_CACHE_DIR"] = str(tmp_path / "fpr-cache")
    again = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "ws")], capture_output=True, text=True,
                           env=env, timeout=900, check=False)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout.splitlines()[-1]) == []  # every kernel loaded from the cache, none compiled
