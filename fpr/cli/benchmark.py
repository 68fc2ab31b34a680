"""``fpr benchmark ...``: sealed benchmarks on the server's workspace (the service's routes call the same
functions): register, submit, leaderboard, history, withdraw, verify a submission's hash."""
from __future__ import annotations

import json
from pathlib import Path

import click

from fpr import api
from fpr.cli.main import cli, device_option, format_option, scope_option
from fpr.errors import InputError
from fpr.render.cells import dumps, render_rows
from fpr.render.leaderboard import table_rows


@cli.group()
def benchmark() -> None:
    """Sealed-gallery benchmarks: submissions scored on the server, ranked on a leaderboard (docs/serve.md)."""


@benchmark.command("register")
@click.argument("name")
@click.option("--index", required=True, help="The index (gallery + encoder) submissions are scored against.")
@scope_option()
@click.option("--scorers", default="", help="Comma-separated auxiliary scorers for every submission, e.g. copy-paste.")
@click.option("--by", default="operator", show_default=True, help="Who registers it (kept with the benchmark).")
@click.option("--overwrite", is_flag=True, help="Replace a benchmark of that name (its submissions stay).")
@format_option()
@click.pass_context
def register_cmd(ctx, name, index, scope, scorers, by, overwrite, fmt) -> None:
    """Register INDEX as the sealed benchmark NAME."""
    row = api.register_benchmark(name, index, scope=scope, scorers=scorers, by=by, workspace=ctx.obj["workspace"],
                                 overwrite=overwrite)
    click.echo(dumps(row) if fmt == "json" else render_rows([row], fmt))


@benchmark.command("list")
@format_option()
@click.pass_context
def list_cmd(ctx, fmt) -> None:
    """List sealed benchmarks."""
    rows = api.list_benchmarks(workspace=ctx.obj["workspace"])
    click.echo(dumps(rows) if fmt == "json" else render_rows(rows, fmt))


@benchmark.command("submit")
@click.argument("name")
@click.option("--queries", required=True, type=click.Path(exists=True, dir_okay=False),
              help="path,identity,group[,prompt,reference_paths,query_id]; paths relative to --images.")
@click.option("--images", default=None, type=click.Path(exists=True, file_okay=False),
              help="Folder of the generated images (default: the queries table's folder); every image is hashed.")
@click.option("--method", required=True, help="The method card's name.")
@click.option("--description", required=True, help="The method card's one-line description.")
@click.option("--link", default="", help="The method card's http(s) link.")
@click.option("--params", default="", help="The method card's settings as a JSON object.")
@click.option("--by", default="local", show_default=True, help="The submitter's name.")
@device_option()
@format_option()
@click.pass_context
def submit_cmd(ctx, name, queries, images, method, description, link, params, by, device, fmt) -> None:
    """Score generations on the sealed benchmark NAME and add them to its leaderboard."""
    card = api.check_card({"method": method, "description": description, "link": link, "params": params})
    row = api.submit_to_benchmark(name, queries, card=card, images_root=images, submitter=by,
                                  workspace=ctx.obj["workspace"], device=device)
    click.echo(dumps(row) if fmt == "json" else render_rows(table_rows([row], copy_paste=True), fmt))


@benchmark.command("leaderboard")
@click.argument("name")
@format_option()
@click.pass_context
def leaderboard_cmd(ctx, name, fmt) -> None:
    """The ranked methods of NAME (withdrawn rows: 'fpr benchmark history')."""
    board = api.leaderboard(name, workspace=ctx.obj["workspace"])
    if fmt == "json":
        click.echo(dumps(board))
        return
    copy_paste = "copy-paste" in (board["benchmark"]["scorers"] or [])
    click.echo(render_rows(table_rows(board["rows"], copy_paste=copy_paste), fmt) if board["rows"]
               else f"benchmark '{name}' has no submissions yet")


@benchmark.command("history")
@click.argument("name")
@format_option()
@click.pass_context
def history_cmd(ctx, name, fmt) -> None:
    """Every submission of NAME, withdrawn ones with who, when and why."""
    rows = api.submission_history(name, workspace=ctx.obj["workspace"])
    keys = ("submission_id", "method", "map", "submitter", "created_at", "withdrawn_by", "withdrawn_at",
            "withdrawn_reason")
    click.echo(dumps(rows) if fmt == "json" else render_rows([{k: r.get(k) for k in keys} for r in rows], fmt))


@benchmark.command("withdraw")
@click.argument("submission")
@click.option("--reason", required=True, help="Why (kept in the history).")
@click.option("--by", default="operator", show_default=True, help="Who withdraws it.")
@click.pass_context
def withdraw_cmd(ctx, submission, reason, by) -> None:
    """Hide SUBMISSION from the leaderboard (it stays in the history)."""
    row = api.withdraw_submission(submission, reason=reason, by=by, workspace=ctx.obj["workspace"])
    click.echo(f"withdrew {row['submission_id']} ({row['method']}) at {row['withdrawn_at']} by {row['withdrawn_by']}")


@benchmark.command("verify")
@click.argument("submission")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.option("--row", "row_file", default=None, type=click.Path(exists=True, dir_okay=False),
              help="The submission's published row (the JSON of GET /v1/submissions/ID) instead of the workspace's.")
@format_option()
@click.pass_context
def verify_cmd(ctx, submission, folder, row_file, fmt) -> None:
    """Recompute SUBMISSION's hash from the images in FOLDER; exit 1 when it differs."""
    row: str | dict = submission
    if row_file:
        try:
            row = json.loads(Path(row_file).read_text(encoding="utf-8"))
        except ValueError as exc:
            raise InputError(f"--row is not JSON ({str(exc).splitlines()[0][:80]})", where=row_file) from None
        if not isinstance(row, dict) or row.get("submission_id") != submission:
            raise InputError(f"--row is not the row of submission '{submission}'", where=row_file)
    out = api.verify_submission(row, folder, workspace=ctx.obj["workspace"])
    if fmt == "json":
        click.echo(dumps(out))
    else:
        verdict = "matches" if out["match"] else "DIFFERS"
        click.echo(f"submission {submission}: hash of {out['n_images']} images {verdict} ({out['computed']})")
        for path in out.get("differing", []):
            click.echo(f"  differs: {path}")
    ctx.exit(0 if out["match"] else 1)
