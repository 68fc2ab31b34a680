"""Damaged or unusable workspaces fail in one clear line, exit 2 (3 for busy), and lose nothing."""
from __future__ import annotations

from click.testing import CliRunner

from fpr.cli.main import cli


def _run(ws, *args):
    return CliRunner().invoke(cli, ["--workspace", str(ws), *args])


def _one_line(res, code=2):
    assert res.exit_code == code, res.output
    assert res.stderr.startswith("fpr: error: ") and res.stderr.count("\n") == 1, res.stderr
    assert "Traceback" not in res.output and "internal error" not in res.output
    return res.stderr


def test_empty_database_file_is_damaged_not_busy(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "fpr.duckdb").write_bytes(b"")
    msg = _one_line(_run(ws, "runs"))
    assert "damaged" in msg and "empty (0 bytes)" in msg and "busy" not in msg
    assert (ws / "fpr.duckdb").read_bytes() == b""


def test_garbage_database_file_is_damaged(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    junk = bytes(range(256)) * 64
    (ws / "fpr.duckdb").write_bytes(junk)
    for args in (["runs"], ["report", "--run", "x"], ["gallery", "list"]):
        msg = _one_line(_run(ws, *args))
        assert "damaged or not a DuckDB file" in msg
    assert (ws / "fpr.duckdb").read_bytes() == junk


def test_workspace_path_that_is_a_file(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    res = _run(f, "runs")  # click's own check of --workspace
    assert res.exit_code == 2 and "is a file" in res.stderr and "Traceback" not in res.output
    import pytest

    from fpr import api
    from fpr.errors import InputError

    with pytest.raises(InputError, match="not a folder"):
        api.list_runs(workspace=f)


def test_missing_workspace_for_reading(tmp_path):
    assert "no fpr workspace here yet" in _one_line(_run(tmp_path / "nope", "report", "--run", "r"))


def test_workspace_under_a_file_cannot_be_created(tmp_path, tiny_tree):
    f = tmp_path / "afile"
    f.write_text("x")
    msg = _one_line(_run(f / "ws", "gallery", "import", "--name", "g", "--folder", str(tiny_tree)))
    assert "cannot create the workspace folder" in msg or "not writable" in msg
