"""``fpr serve`` from the CLI: lazy import, one-line error without the extra, refusal to bind in the open."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

from click.testing import CliRunner

from fpr.cli.main import cli
from tests.serve.conftest import REPO


def test_importing_the_cli_does_not_import_fastapi():
    import fpr.cli.main  # noqa: F401  (registers every command module, fpr.cli.serve included)

    heavy = ("fastapi", "uvicorn", "starlette", "python_multipart")
    if not any(m in sys.modules for m in heavy):  # nothing else in this process imported them: check here
        assert "fpr.cli.serve" in sys.modules
        return
    code = "import sys, fpr.cli.main; print(any(m.split('.')[0] in ('fastapi', 'uvicorn', 'starlette') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_serve_without_the_extra_names_the_install(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fastapi" else real(name, *a))
    r = CliRunner().invoke(cli, ["--workspace", str(tmp_path), "serve"], obj={})
    assert r.exit_code == 2
    assert r.output.strip() == "fpr: error: 'fpr serve' needs fastapi; pip install 'fpr[serve]'"


def test_serve_refuses_open_host_without_tokens(monkeypatch, tmp_path):
    monkeypatch.delenv("FPR_API_TOKENS_FILE", raising=False)
    r = CliRunner().invoke(cli, ["--workspace", str(tmp_path), "serve", "--host", "0.0.0.0"], obj={})
    assert r.exit_code == 2
    assert "refusing to listen on 0.0.0.0 without tokens" in r.output
    assert len(r.output.strip().splitlines()) == 1
