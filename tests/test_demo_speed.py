"""The demo's faster paths give the same result: the verdict seeds evaluated in a background process and the
primary world rendered in a process pool equal everything in one process (a tiny world, two verdict seeds)."""
from __future__ import annotations

import json
import re
from contextlib import contextmanager

import pytest

from fpr.workflows import demo
from fpr.galleries import world as W

TINY = dict(identities=2, gallery=2, references=1, queries=1)
RUN_ID = re.compile(r"\brun-\d{8}-\d{6}-[0-9a-f]+")


def _neutral(res: demo.DemoResult, ws) -> str:
    """The result's JSON with what differs between two runs of it made neutral: timings, run ids (by order of
    appearance) and the workspace folder."""
    doc = res.as_json()
    doc.pop("timings")
    text = json.dumps(doc, sort_keys=True).replace(str(ws), "<ws>")
    ids: dict[str, str] = {}
    return RUN_ID.sub(lambda m: ids.setdefault(m.group(0), f"run-{len(ids)}"), text)


@pytest.mark.slow
def test_demo_with_background_worlds_equals_the_demo_in_one_process(tmp_path, monkeypatch):
    if not W.fork_safe():
        pytest.skip("this process cannot fork (not the main thread, or a Ray runtime is running)")
    seen = []
    real = demo._background_seeds

    @contextmanager
    def spy(*args):
        with real(*args) as pending:
            seen.append(sorted(pending))
            yield pending

    monkeypatch.setattr(demo, "_background_seeds", spy)
    forked = demo.run_demo(workspace=tmp_path / "a", quick=True, config=TINY, claim_seeds=2, copy_paste=False)
    assert seen == [[("easy", 1)]]  # (world, seed): seed 1 of the demo's world was evaluated in the background process
    monkeypatch.setattr(W, "fork_safe", lambda: False)  # no pool, no background process: the old path
    inline = demo.run_demo(workspace=tmp_path / "b", quick=True, config=TINY, claim_seeds=2, copy_paste=False)
    assert sorted(forked.general_runs) == [0, 1] and forked.claims is not None
    assert _neutral(forked, tmp_path / "a") == _neutral(inline, tmp_path / "b")


def _slow_seed(*args) -> None:
    """A verdict seed that takes a minute (module level: the pool sends it by name)."""
    import time

    time.sleep(60)


def test_a_failing_demo_stops_its_background_seeds_at_once(tmp_path, monkeypatch):
    """An error in the primary seed is raised without waiting for the verdict seeds (which would take their
    whole run): the background process is stopped."""
    import time

    from fpr.errors import InputError

    if not W.fork_safe():
        pytest.skip("this process cannot fork (not the main thread, or a Ray runtime is running)")

    def fail(*args, **kwargs):
        raise InputError("stop here")

    monkeypatch.setattr(demo, "_run_demo", fail)
    monkeypatch.setattr(demo, "_claims_seed", _slow_seed)
    t0 = time.perf_counter()
    with pytest.raises(InputError, match="stop here"):
        demo.run_demo(workspace=tmp_path / "ws", quick=True, config=TINY, claim_seeds=3, copy_paste=False)
    assert time.perf_counter() - t0 < 30


@pytest.mark.slow
def test_background_seeds_run_after_torchs_thread_pool_has_run(tmp_path):
    """A demo in a process whose torch already ran a parallel op (a second demo in one session, a test run):
    the forked background seed must not wait forever on the parent's OpenMP pool. In a fresh interpreter,
    under a time limit, so that a hang fails here instead of stopping the suite."""
    import os
    import subprocess
    import sys

    if not W.fork_safe():
        pytest.skip("this process cannot fork (not the main thread, or a Ray runtime is running)")
    script = (
        "import torch\n"
        "torch.set_num_threads(2)\n"
        "x = torch.randn(1500, 1500); (x @ x).sum().item(); torch.randn(4_000_000).add_(1)\n"
        "from fpr.workflows import demo\n"
        f"res = demo.run_demo(workspace={str(tmp_path / 'ws')!r}, quick=True, config={TINY!r}, claim_seeds=2,\n"
        "                     copy_paste=False)\n"
        "print('seeds', sorted(res.general_runs))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "seeds [0, 1]" in out.stdout


@pytest.mark.slow
def test_a_demo_on_a_warm_world_cache_renders_nothing_and_equals_the_rendered_demo(tmp_path, monkeypatch):
    """The second demo of a config takes every world (the primary and the verdict seed in the background
    process) from the world cache: nothing is rendered, and the result is the first demo's and that of a demo
    without the cache."""
    from fpr.files import cache_root

    kwargs = {"quick": True, "config": TINY, "claim_seeds": 2, "copy_paste": True}
    off = demo.run_demo(workspace=tmp_path / "off", world_cache=False, **kwargs)
    assert not (cache_root() / "worlds").exists()
    cold = demo.run_demo(workspace=tmp_path / "cold", **kwargs)
    assert len(list((cache_root() / "worlds").iterdir())) == 2  # the primary world and verdict seed 1

    def refuse(self, job):
        raise AssertionError(f"rendered {job.path}: the world cache should have served it")

    monkeypatch.setattr(W.World, "render_job", refuse)  # inherited by the forked background process
    warm = demo.run_demo(workspace=tmp_path / "warm", **kwargs)
    assert _neutral(off, tmp_path / "off") == _neutral(cold, tmp_path / "cold") == _neutral(warm, tmp_path / "warm")


def test_no_world_cache_flag_reaches_the_demo(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from fpr.cli.main import cli

    seen = {}

    def fake(**kwargs):
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr(demo, "run_demo", fake)
    for flags, want in (([], True), (["--no-world-cache"], False)):
        r = CliRunner().invoke(cli, ["--workspace", str(tmp_path / "ws"), "demo", "--quick", *flags], obj={})
        assert r.exit_code == 0, r.output
        assert seen["world_cache"] is want
