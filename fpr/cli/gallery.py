"""``fpr gallery ...``: import, curate, list and show galleries."""
from __future__ import annotations

import click

from fpr import api
from fpr.cli.main import cli, format_option, table_width, width_options
from fpr.defaults import SAMPLINGS
from fpr.render.cells import dumps, render_rows


@cli.group()
def gallery() -> None:
    """Identity-labelled real images: references and galleries."""


def curation_options(f):
    f = click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed.")(f)
    f = click.option("--encoder", default=None, help="Encoder for k-means sampling.")(f)
    f = click.option("--sampling", type=click.Choice(SAMPLINGS), default="random", show_default=True,
                     help="How --per-identity images are drawn: at random, or nearest each k-means centroid "
                          "(needs --encoder).")(f)
    f = click.option("--identities-per-group", type=click.IntRange(min=1), default=None, help="N identities per group (default all).")(f)
    f = click.option("--per-identity", "gallery_per_identity", type=click.IntRange(min=1), default=None,
                     help="M gallery images per identity (default all).")(f)
    f = click.option("--of-interest", type=click.Path(dir_okay=False), default=None,
                     help="With --impostors: a table naming the identities of interest (identity[, group] columns, "
                          "e.g. your queries CSV); default every identity.")(f)
    f = click.option("--impostor-encoder", default=None,
                     help="Encoder whose nearest impostors --impostors keeps (e.g. fpr-world-v3); the gallery's "
                          "difficulty under it is printed.")(f)
    f = click.option("--impostors", type=click.IntRange(min=1), default=None,
                     help="Keep, per identity of interest, its K nearest impostor identities (highest centroid "
                          "cosine under --impostor-encoder): a gallery as hard as that encoder finds it.")(f)
    f = click.option("--references", "references_per_identity", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Reference images per identity taken from images without a role.")(f)
    return f


def _spec(kw: dict) -> api.GallerySpec:
    if kw["of_interest"] and kw["impostors"] is None:
        raise click.UsageError("--of-interest names the identities whose impostors --impostors K keeps: pass "
                               "--impostors too")
    if kw["impostors"] is not None and not kw["impostor_encoder"]:
        raise click.UsageError("--impostors needs --impostor-encoder (the encoder the impostors are nearest under)")
    return api.GallerySpec(references_per_identity=kw["references_per_identity"],
                       gallery_per_identity=kw["gallery_per_identity"],
                       identities_per_group=kw["identities_per_group"], sampling=kw["sampling"], seed=kw["seed"],
                       impostors=kw["impostors"], impostor_encoder=kw["impostor_encoder"],
                       of_interest=api.identities_of_interest(kw["of_interest"]) if kw["of_interest"] else ())


def _print_info(info: api.GalleryInfo, fmt: str, workspace=None) -> None:
    """The gallery's row; with nearest impostors, its difficulty under their encoder (an index is built)."""
    difficulty = None
    if info.spec.get("impostors"):
        difficulty = api.indexed_difficulty(info.name, info.spec["impostor_encoder"], workspace=workspace)
    if fmt == "json":
        click.echo(dumps({**info.as_row(), "report": info.report, "spec": info.spec,
                          **({"difficulty": difficulty.as_json()} if difficulty else {})}))
    else:
        click.echo(render_rows([info.as_row()], fmt))
        if difficulty is not None:
            click.echo(difficulty.line() + f" (index {difficulty.index})")


@gallery.command("import")
@click.option("--name", required=True, help="Gallery name.")
@click.option("--manifest", type=click.Path(dir_okay=False), help="CSV/Parquet: path,identity,group[,role].")
@click.option("--folder", type=click.Path(file_okay=False), help="Folder tree group/identity/*.jpg.")
@curation_options
@click.option("--overwrite", is_flag=True, help="Replace a gallery of the same name.")
@format_option()
@click.pass_context
def import_cmd(ctx, name, manifest, folder, overwrite, fmt, **kw) -> None:
    """Import images from a manifest or a folder tree, de-duplicate, curate and store them."""
    records = api.galleries_from_source(manifest, folder)
    source = f"manifest:{manifest}" if manifest else f"folder:{folder}"
    info = api.import_gallery(name, records, _spec(kw), workspace=ctx.obj["workspace"], encoder=kw["encoder"],
                              source=source, overwrite=overwrite)
    _print_info(info, fmt, ctx.obj["workspace"])


@gallery.command("curate")
@click.option("--from", "source", required=True, help="Stored gallery to sample from.")
@click.option("--name", required=True, help="Name of the new gallery.")
@curation_options
@click.option("--overwrite", is_flag=True, help="Replace a stored gallery with the same name.")
@format_option()
@click.pass_context
def curate_cmd(ctx, source, name, overwrite, fmt, **kw) -> None:
    """Derive a gallery from a stored one: N identities per group, M images per identity."""
    info = api.curate_gallery(source, name, _spec(kw), workspace=ctx.obj["workspace"], encoder=kw["encoder"],
                              overwrite=overwrite)
    _print_info(info, fmt, ctx.obj["workspace"])


@gallery.command("list")
@width_options()
@format_option()
@click.pass_context
def list_cmd(ctx, width, wide, fmt) -> None:
    """List stored galleries."""
    api.require_workspace(ctx.obj["workspace"])
    click.echo(render_rows(api.list_galleries(workspace=ctx.obj["workspace"]), fmt, width=table_width(width, wide)))


@gallery.command("show")
@click.argument("name")
@format_option()
@click.pass_context
def show_cmd(ctx, name, fmt) -> None:
    """Identities x images (reference, gallery) per group."""
    click.echo(render_rows(api.show_gallery(name, workspace=ctx.obj["workspace"]), fmt))


@gallery.command("delete")
@click.argument("name")
@click.option("--force", is_flag=True, help="Delete even if indices or runs use it (they stay).")
@click.pass_context
def delete_cmd(ctx, name, force) -> None:
    """Delete a stored gallery (refused while indices or runs use it, unless --force)."""
    api.delete_gallery(name, workspace=ctx.obj["workspace"], force=force)
    click.echo(f"deleted gallery {name}")
