"""``fpr serve`` from the CLI: lazy import, one-line errors (no extra, open host without tokens, an unusable lock)."""
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


def _never_listen(monkeypatch) -> None:
    """The refusals below come before the server listens: if one did not, fail at once instead of serving."""
    import uvicorn

    def run(*a, **kw):
        raise AssertionError("the server started")

    monkeypatch.setattr(uvicorn, "run", run)


def _serve_output(tmp_path, monkeypatch):
    monkeypatch.delenv("FPR_API_TOKENS_FILE", raising=False)
    _never_listen(monkeypatch)
    return CliRunner().invoke(cli, ["--workspace", str(tmp_path / "ws"), "serve", "--port", "1"], obj={})


def test_serve_lock_path_that_is_a_folder_is_one_line(monkeypatch, tmp_path):
    """Issue #35 item 6: a lock path that is a folder ended in 'internal error'."""
    (tmp_path / "ws" / "serve" / "server.lock").mkdir(parents=True)
    r = _serve_output(tmp_path, monkeypatch)
    assert r.exit_code == 2, r.output
    lock = tmp_path / "ws" / "serve" / "server.lock"
    assert r.output.strip() == (f"fpr: error: cannot open the server lock: it is a folder ({lock}); remove or fix "
                                "what is at that path, or serve a --workspace this user can write")


def test_serve_lock_whose_folder_is_a_file_is_one_line(monkeypatch, tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "serve").write_text("not a folder")
    r = _serve_output(tmp_path, monkeypatch)
    assert r.exit_code == 2, r.output
    assert r.output.startswith("fpr: error: cannot open the server lock: a file stands where a folder of its path "
                               f"should be ({tmp_path / 'ws' / 'serve' / 'server.lock'}); ")
    assert len(r.output.strip().splitlines()) == 1


def test_serve_lock_that_cannot_be_written_is_one_line(monkeypatch, tmp_path):
    """A lock file this user may not open for writing (a read-only workspace): simulated, since tests may run
    as root, who may write anything."""
    import os

    real_open = os.open

    def refuse(path, flags, *a, **kw):
        if str(path).endswith("server.lock"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(os, "open", refuse)
    r = _serve_output(tmp_path, monkeypatch)
    assert r.exit_code == 2, r.output
    assert r.output.startswith("fpr: error: cannot open the server lock: permission denied (")
    assert len(r.output.strip().splitlines()) == 1


def test_serve_refuses_a_malformed_token_file_at_start_naming_the_line(monkeypatch, tmp_path):
    """Issue #35 item 7: 'tok alice scope=read # admin' was accepted (as name 'alice scope=read # admin', scope
    'submit'); now the server does not start and says which line breaks the grammar."""
    tokens = tmp_path / "tokens"
    tokens.write_text("# team\ntok-ops-0123456789 ops scope=admin\n\ntok-bob-0123456789 bob scope=read # admin\n")
    monkeypatch.setenv("FPR_API_TOKENS_FILE", str(tokens))
    _never_listen(monkeypatch)
    r = CliRunner().invoke(cli, ["--workspace", str(tmp_path / "ws"), "serve", "--port", "1"], obj={})
    assert r.exit_code == 2, r.output
    assert r.output.startswith(f"fpr: error: token file line 4: a comment must be a whole line starting with #, not "
                               f"follow the fields ({tokens}); each line is 'token [name] [scope=read|submit|admin]'")
    assert len(r.output.strip().splitlines()) == 1 and "tok-bob" not in r.output
