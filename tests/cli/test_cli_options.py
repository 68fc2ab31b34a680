"""The command line itself: every option has help; the global options work after the sub-command too."""
from __future__ import annotations

import json

import click
from click.testing import CliRunner

from fpr.cli.main import cli, hoist_global_options
from fpr.errors import NotFoundError


def _commands(cmd: click.Command, path: tuple[str, ...] = ("fpr",)):
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, (*path, name))


def test_every_option_of_every_command_has_help():
    missing = [f"{' '.join(path)} {p.opts[-1]}" for path, cmd in _commands(cli) for p in cmd.params
               if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip()
               and not {"--help", "--version"} & set(p.opts)]
    assert missing == []  # was 45, e.g. fpr query --scope, --device, --batch-size
    assert len(list(_commands(cli))) > 30  # the walk reaches the sub-commands of groups


def test_global_options_move_to_the_front_and_nothing_after_a_double_dash():
    assert hoist_global_options(["runs", "-q", "--workspace", "W", "--format", "json"]) == \
        ["-q", "--workspace", "W", "runs", "--format", "json"]
    assert hoist_global_options(["sql", "--workspace=W", "--debug", "SELECT 1", "--", "-q"]) == \
        ["--workspace=W", "--debug", "sql", "SELECT 1", "--", "-q"]
    assert hoist_global_options(["--quiet", "demo"]) == ["--quiet", "demo"]


def test_q_debug_and_workspace_after_the_subcommand(tmp_path):
    ws = tmp_path / "ws"
    runner = CliRunner()
    res = runner.invoke(cli, ["runs", "--format", "json", "--workspace", str(ws), "-q"], obj={})
    # --workspace after the sub-command is taken (was: no such option): the error names that folder
    assert res.exit_code == 2 and f"no fpr workspace here ({ws.resolve()})" in res.stderr, res.output
    from fpr.store.workspace import Workspace

    with Workspace.open(tmp_path / "empty").write():  # an empty workspace lists no runs
        pass
    res = runner.invoke(cli, ["runs", "--format", "json", "--workspace", str(tmp_path / "empty"), "-q"], obj={})
    assert res.exit_code == 0 and json.loads(res.stdout) == [], res.output
    # --debug after the sub-command: the traceback (the exception itself), not the one line
    res = runner.invoke(cli, ["report", "--run", "nope", "--workspace", str(ws), "--debug"], obj={})
    assert isinstance(res.exception, NotFoundError) and str(ws) in str(res.exception)  # --workspace taken too
    res = runner.invoke(cli, ["report", "--run", "nope", "--workspace", str(ws)], obj={})
    assert res.exit_code == 2 and res.stderr.startswith("fpr: error: no fpr workspace here yet")
    assert len(res.stderr.strip().splitlines()) == 1
