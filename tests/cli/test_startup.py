"""Start-up: the CLI and the read-only commands never import torch, timm or open_clip."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
from click.testing import CliRunner

from fpr.cli.main import cli
from tests.conftest import write_image

HEAVY = ("torch", "timm", "open_clip", "torchvision")
ROOT = Path(__file__).resolve().parents[2]
# Runs the CLI as `python -m fpr ...` does, then reports which heavy modules were imported.
PROBE = ("import atexit, sys, runpy\n"
         "atexit.register(lambda: sys.stderr.write('HEAVY=' + ','.join(m for m in %r if m in sys.modules) + '\\n'))\n"
         "sys.argv = ['fpr'] + sys.argv[1:]\n"
         "runpy.run_module('fpr', run_name='__main__')\n") % (HEAVY,)


def _heavy(*args) -> tuple[str, subprocess.CompletedProcess]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, cwd=ROOT)
    line = [x for x in res.stderr.splitlines() if x.startswith("HEAVY=")]
    assert line, res.stderr
    return line[-1][len("HEAVY="):], res


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
