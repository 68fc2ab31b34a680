"""``fpr index ...``: build and list FAISS indices."""
from __future__ import annotations

import click

from fpr import api
from fpr.cli.main import (batch_size_option, cli, device_option, format_option, table_width, weights_option,
                          width_options, workers_option)
from fpr.render.cells import dumps, render_rows, wrap_text


@cli.group()
def index() -> None:
    """Inner-product FAISS indices over gallery embeddings (flat, or flat + IVF/HNSW for top-k)."""


@index.command("build")
@click.option("--gallery", required=True, help="Stored gallery to index (fpr gallery list).")
@click.option("--encoder", required=True, help="Encoder id ('fpr encoders list').")
@click.option("--name", default=None, help="Index name (default <gallery>-<encoder>).")
@weights_option()
@device_option()
@batch_size_option()
@workers_option()
@click.option("--overwrite", is_flag=True, help="Replace an index with the same name (a new version).")
@click.option("--background", default="keep", show_default=True, metavar="keep|remove[:SEGMENTER]",
              help="Background removal before embedding (grabcut by default); queries against the index get the "
                   "same step.")
@click.option("--type", "index_type", type=click.Choice(["flat", "ivf", "hnsw"]), default="flat", show_default=True,
              help="Search index for top-k lookups: flat (exact) or approximate ivf/hnsw for large galleries "
                   "(recall@10 against flat is measured into the card; AP stays exact).")
@click.option("--no-difficulty", is_flag=True,
              help="Skip the gallery's difficulty (the oracle: its reference images as queries, mAP and AP = 1 "
                   "share, as fpr query --oracle computes them).")
@format_option()
@click.pass_context
def build_cmd(ctx, gallery, encoder, name, weights, device, batch_size, workers, overwrite, background, index_type,
              no_difficulty, fmt) -> None:
    """Embed a gallery and write its index and card; print the gallery's difficulty for the encoder."""
    info = api.build_index(gallery, encoder, name=name, workspace=ctx.obj["workspace"], weights=weights,
                           device=device, batch_size=batch_size, workers=workers, overwrite=overwrite,
                           background=background, index_type=index_type)
    difficulty = None
    if not no_difficulty and info.n_references:
        difficulty = api.gallery_difficulty(info.name, workspace=ctx.obj["workspace"], device=device,
                                            batch_size=batch_size, workers=workers)
    if fmt == "json":
        click.echo(dumps({**info.as_row(), **({"difficulty": difficulty.as_json()} if difficulty else {})}))
        return
    click.echo(render_rows([info.as_row()], fmt))
    if difficulty is not None and fmt == "table":
        click.echo(wrap_text(difficulty.line()))


@index.command("list")
@width_options()
@format_option()
@click.pass_context
def list_cmd(ctx, width, wide, fmt) -> None:
    """List stored indices (the table folds to the terminal; --wide or --format csv: whole)."""
    api.require_workspace(ctx.obj["workspace"])
    click.echo(render_rows(api.list_indices(workspace=ctx.obj["workspace"]), fmt, width=table_width(width, wide)))


@index.command("delete")
@click.argument("name")
@click.option("--force", is_flag=True, help="Delete even if runs used it (they stay).")
@click.pass_context
def delete_cmd(ctx, name, force) -> None:
    """Delete an index and its files (refused while runs use it, unless --force)."""
    out = api.delete_index(name, workspace=ctx.obj["workspace"], force=force)
    click.echo(f"deleted index {name}" + (f" (runs that used it: {', '.join(out['runs'])})" if out["runs"] else ""))
