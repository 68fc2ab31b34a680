"""Start-up: the CLI and the read-only commands never import torch, timm or open_clip; ``--version`` and
``--help`` import neither NumPy nor pandas, pyarrow or DuckDB; ``fpr runs`` reads the store without
pandas, pyarrow or the evaluation pipeline (issue #22 item 5; timings: benchmarks/bench_startup.py)."""
from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import fpr
from fpr.cli.main import cli
from tests.conftest import run_cli, write_image

HEAVY = ("torch", "timm", "open_clip", "torchvision")
DATA = ("numpy", "pandas", "pyarrow", "duckdb")
PIPELINE = ("fpr.eval.pipeline", "fpr.engines.ray", "fpr.workflows.runs", "faiss")
ROOT = Path(__file__).resolve().parents[2]
# Runs the CLI as `python -m fpr ...` does, then reports which of the watched modules were imported.
PROBE = ("import atexit, sys, runpy\n"
         "atexit.register(lambda: sys.stderr.write('HEAVY=' + ','.join(m for m in %r if m in sys.modules) + '\\n'))\n"
         "sys.argv = ['fpr'] + sys.argv[1:]\n"
         "runpy.run_module('fpr', run_name='__main__')\n")


def _imported(watch: tuple[str, ...], *args) -> tuple[str, subprocess.CompletedProcess]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = subprocess.run([sys.executable, "-c", PROBE % (watch,), *args], capture_output=True, text=True, env=env,
                         cwd=ROOT)
    line = [x for x in res.stderr.splitlines() if x.startswith("HEAVY=")]
    assert line, res.stderr
    return line[-1][len("HEAVY="):], res


def _heavy(*args) -> tuple[str, subprocess.CompletedProcess]:
    return _imported(HEAVY, *args)


def test_importing_the_cli_imports_no_model_library():
    code = ("import sys; import fpr.cli.main, fpr.api; "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == ""


def test_read_only_commands_import_no_model_library(tmp_path, tiny_tree):
    ws = tmp_path / "ws"
    runner = CliRunner()
    for args in (["gallery", "import", "--name", "g", "--folder", str(tiny_tree), "--references", "1"],
                 ["index", "build", "--gallery", "g", "--encoder", "pixels-16"]):
        assert runner.invoke(cli, ["--workspace", str(ws), *args], obj={}).exit_code == 0
    p = write_image(tmp_path / "q.png", seed=3)
    pd.DataFrame([{"path": str(p), "identity": "cats-0", "group": "cats", "method": "m"}]).to_csv(
        tmp_path / "q.csv", index=False)
    res = runner.invoke(cli, ["--workspace", str(ws), "query", "--index", "g-pixels-16", "--queries",
                              str(tmp_path / "q.csv"), "--run", "r1"], obj={})
    assert res.exit_code == 0, res.output
    w = ["--workspace", str(ws)]
    for args in (["--help"], ["--version"], [*w, "runs"], [*w, "report", "--run", "r1"], [*w, "sql", "select 1 as x"],
                 [*w, "export", "--run", "r1", "--out", str(tmp_path / "r1.csv")]):
        heavy, proc = _heavy(*args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert heavy == "", (args, heavy)
    assert (tmp_path / "r1.csv").exists()


def test_version_and_help_import_no_data_library():
    """``--version`` and ``--help`` need click only: no NumPy, pandas, pyarrow or DuckDB (each of them
    costs more than the whole command should)."""
    for args in (["--version"], ["--help"], ["-h"]):
        mods, proc = _imported(HEAVY + DATA, *args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert mods == "", (args, mods)
    out, _ = _imported((), "--version")
    assert _.stdout.strip() == "fpr, version " + fpr.__version__


def test_the_printed_version_is_the_installed_one():
    # --version prints fpr.__version__ (no metadata scan at start-up); the installed metadata must agree
    assert fpr.__version__ == importlib.metadata.version("fpr")


def _one_run(tmp_path: Path, tree: Path, queries: list[dict]) -> Path:
    """A workspace with gallery g, index g-pixels-16 and run r1 of ``queries`` (path = a seed)."""
    ws = tmp_path / "ws"
    run_cli(ws, "gallery", "import", "--name", "g", "--folder", str(tree), "--references", "1")
    run_cli(ws, "index", "build", "--gallery", "g", "--encoder", "pixels-16")
    rows = [{**q, "path": str(write_image(tmp_path / f"q{q['path']}.png", seed=q["path"]))} for q in queries]
    pd.DataFrame(rows).to_csv(tmp_path / "q.csv", index=False)
    run_cli(ws, "query", "--index", "g-pixels-16", "--queries", str(tmp_path / "q.csv"), "--run", "r1")
    return ws


def test_runs_reads_the_store_without_pandas_or_the_pipeline(tmp_path, tiny_tree):
    ws = _one_run(tmp_path, tiny_tree, [{"path": 3, "identity": "cats-0", "group": "cats", "method": "m"}])
    for fmt in ("table", "json"):
        mods, proc = _imported(HEAVY + DATA + PIPELINE, "--workspace", str(ws), "runs", "--format", fmt)
        assert proc.returncode == 0, proc.stderr
        assert mods == "duckdb", mods  # the store itself, nothing else of the list
    rows = json.loads(proc.stdout)
    assert [(r["run_id"], r["index"], r["encoder"], r["scope"], r["n_queries"], r["n_evaluated"], r["n_skipped"])
            for r in rows] == [("r1", "g-pixels-16", "pixels-16", "group", 1, 1, 0)]
    assert isinstance(rows[0]["created_at"], str) and rows[0]["created_at"][:2] == "20"


def test_report_computes_each_interval_once(tmp_path, tiny_tree, monkeypatch):
    """`fpr report` bootstraps each (metric, method, group) interval once (it used to summarise every run
    when loading it, then again over the merged runs), and prints the intervals `fpr query` stored."""
    from fpr.metrics import summary

    queries = [{"path": s, "identity": f"{g}-{s % 3}", "group": g, "method": m}
               for s, (g, m) in enumerate([(g, m) for g in ("cats", "dogs") for m in ("a", "b")] * 3)]
    ws = _one_run(tmp_path, tiny_tree, queries)
    keys: list[tuple] = []
    real = summary.bootstrap_ci

    def counting(values, *, key=(), **kw):
        keys.append(key)
        return real(values, key=key, **kw)

    monkeypatch.setattr(summary, "bootstrap_ci", counting)
    monkeypatch.setattr(summary, "MIN_QUERIES_FOR_INTERVAL", 1)  # these rows are small: count every interval
    res = run_cli(ws, "report", "--run", "r1", "--format", "json")
    # 2 methods x (2 groups + overall) rows, each with mAP and Sim intervals, each bootstrapped once (the stream
    # is keyed by the metric and the row's set of queries)
    assert len(keys) == len(set(keys)) == 2 * 3 * len(summary.interval_metrics())
    assert {k[0] for k in keys} == set(summary.interval_metrics())
    rows = {(r["method"], r["group"]): r for r in json.loads(res.output)["runs"][0]["summary"]}
    monkeypatch.setattr(summary, "bootstrap_ci", real)
    for r in fpr.load_run("r1", workspace=str(ws)).summary_records():
        mine = rows[(r["method"], r["group"])]
        assert {k: mine[k] for k in ("map", "map_lo", "map_hi", "sim_lo", "sim_hi")} == \
            {k: r[k] for k in ("map", "map_lo", "map_hi", "sim_lo", "sim_hi")}


def test_listing_commands_import_no_torch(tmp_path):
    """`fpr scorers list`/`show` and `fpr encoders list` read catalogs (tests/workflows/test_scorer_catalog.py,
    test_encoder_catalog.py), not their modules, most of which import torch (issue #33 item 5)."""
    from fpr.store.workspace import Workspace

    with Workspace.open(tmp_path / "ws").write():
        pass
    ws = ["--workspace", str(tmp_path / "ws")]
    for args in (["scorers", "list"], ["scorers", "show", "copy-paste"], ["encoders", "list"], ["--help"],
                 [*ws, "runs"]):
        heavy, proc = _heavy(*args)
        assert proc.returncode == 0 and heavy == "", (args, heavy, proc.stderr)
    listed, _ = _heavy("scorers", "list", "--format", "json")
    assert {r["name"] for r in json.loads(_.stdout)} == set(__import__("fpr.scorers").scorers.BUILTIN)


@pytest.mark.slow
def test_a_mistyped_name_file_or_run_is_refused_before_torch_loads(tmp_path, tiny_tree):
    """Names, files, existing runs and options are checked before torch or a model loads (issue #33 item 5:
    typos took 16-43 s to be refused); each is one line, exit 2, and torch is never imported."""
    ws = _one_run(tmp_path, tiny_tree, [{"path": 3, "identity": "cats-0", "group": "cats", "method": "m"}])
    q = str(tmp_path / "q.csv")
    w = ["--workspace", str(ws)]
    cases = {("query", "--index", "g-pixels-16", "--queries", q, "--run", "r2", "--encoder", "pixles-16"):
             "unknown encoder 'pixles-16'; did you mean 'pixels-16'? valid encoders: ",
             ("query", "--index", "g-pixels-16", "--queries", q, "--run", "r2", "--scorers", "copy-pste"):
             "unknown scorer 'copy-pste'; did you mean 'copy-paste'? valid scorers: cigeval, clip-t, ",
             ("index", "build", "--gallery", "g", "--encoder", "pixles-16"): "unknown encoder 'pixles-16'",
             ("index", "build", "--gallery", "gg", "--encoder", "pixels-16"): "no gallery named 'gg'",
             ("index", "build", "--gallery", "g", "--encoder", "pixels-16", "--device", "gpu"): "unknown device 'gpu'",
             ("query", "--index", "g-pixels-16", "--queries", str(tmp_path / "nope.csv"), "--run", "r2"):
             "queries file not found",
             ("query", "--index", "g-pixels-16", "--queries", q, "--run", "r1"): "run 'r1' already exists",
             ("query", "--index", "g-pixels-1", "--queries", q, "--run", "r2"): "no index named 'g-pixels-1'",
             # fpr evaluate imported torch to name its encoder (found by the #33 audit)
             ("evaluate", str(tmp_path), str(tiny_tree), "--encoder", "pixles-16"): "unknown encoder 'pixles-16'",
             ("evaluate", str(tmp_path), str(tiny_tree), "--encoder", "pixels-16", "--device", "gpu"):
             "unknown device 'gpu'",
             # a built-in encoder's missing weights were found only after torch loaded (4 s; #33 audit)
             ("index", "build", "--gallery", "g", "--encoder", "miewid-msv2"):
             "weights for encoder 'miewid-msv2' are missing",
             ("evaluate", str(tmp_path), str(tiny_tree), "--encoder", "miewid-msv2"):
             "weights for encoder 'miewid-msv2' are missing"}
    for args, message in cases.items():
        heavy, proc = _heavy(*w, *args)
        assert proc.returncode == 2, (args, proc.stderr)
        line = [x for x in proc.stderr.splitlines() if not x.startswith("HEAVY=")]
        assert len(line) == 1 and line[0].startswith("fpr: error: ") and message in line[0], (args, line)
        assert heavy == "", (args, heavy)
