"""``fpr index ...``: build and list FAISS indices."""
from __future__ import annotations

import click

from fpr import api
from fpr.cli.main import (batch_size_option, cli, device_option, format_option, table_width, weights_option,
                          width_options, workers_option)
from fpr.render.cells import dumps, render_rows


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
@format_option()
@click.pass_context
def build_cmd(ctx, gallery, encoder, name, weights, device, batch_size, workers, overwrite, background, index_type,
              fmt) -> None:
    """Embed a gallery and write its index and card."""
    info = api.build_index(gallery, encoder, name=name, workspace=ctx.obj["workspace"], weights=weights,
                           device=device, batch_size=batch_size, workers=workers, overwrite=overwrite,
                           background=background, index_type=index_type)
    click.echo(dumps(info.as_row()) if fmt == "json" else render_rows([info.as_row()], fmt))


@index.command("list")
@width_options()
@format_option()
@click.pass_context
def list_cmd(ctx, width, wide, fmt) -> None:
    """List stored indices (the table folds to the terminal; --wide or --format csv: whole)."""
    click.echo(render_rows(api.list_indices(workspace=ctx.obj["workspace"]), fmt, width=table_width(width, wide)))


@index.command("delete")
@click.argument("name")
@click.option("--force", is_flag=True, help="Delete even if runs used it (they stay).")
@click.pass_context
def delete_cmd(ctx, name, force) -> None:
    """Delete an index and its files (refused while runs use it, unless --force)."""
    out = api.delete_index(name, workspace=ctx.obj["workspace"], force=force)
    click.echo(f"deleted index {name}" + (f" (runs that used it: {', '.join(out['runs'])})" if out["runs"] else ""))
