"""``fpr reproduce``: the paper's tables from the official presets, in one command."""
from __future__ import annotations

import shlex
import sys

import click

from fpr import api
from fpr.cli.main import cli
from fpr.render.cells import dumps


@cli.command("reproduce")
@click.option("--tables", default="1,2,5-14", show_default=True, help="The paper's tables to run.")
@click.option("--data-root", default=".", show_default=True, type=click.Path(file_okay=False),
              help="Folder holding wildlifereid-10k/, CUB_200_2011/ and Stanford-Cars/ (those present run).")
@click.option("--queries-dir", default=None, type=click.Path(file_okay=False),
              help="Generated-images files wildlife.csv, cub.csv, cars.csv (default: DATA_ROOT/generated).")
@click.option("--encoder", "encoders", multiple=True, metavar="ROLE=ID",
              help="Replace an encoder (roles clip, dino, miewid, bioclip, cars; cars has no default: your trained "
                   "Stanford Cars encoder). Repeatable.")
@click.option("--out", default=None, type=click.Path(file_okay=False),
              help="Write tables.json, tables.txt and tables.tex (with provenance) into this folder.")
@click.option("--json", "as_json", is_flag=True, help="Print the tables and provenance as JSON.")
@click.pass_context
def reproduce_cmd(ctx, tables, data_root, queries_dir, encoders, out, as_json) -> None:
    """Run every table of the paper whose dataset folder, generated images and weights are present; each other
    table is skipped with one line saying what is missing."""
    from fpr.workflows.reproduce import render_text

    res = api.reproduce(tables, data_root=data_root, queries_dir=queries_dir, out=out, encoders=list(encoders),
                        workspace=ctx.obj["workspace"],
                        command=shlex.join(["fpr", *sys.argv[1:]]))
    click.echo(dumps(res.as_json()) if as_json else render_text(res))
