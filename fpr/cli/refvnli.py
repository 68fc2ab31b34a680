"""``fpr refvnli data``: RefVNLI training triplets (reference crop, prompt, target) with sp and ta labels."""
from __future__ import annotations

import click

from fpr.cli.main import cli, format_option
from fpr.render.cells import dumps, render_rows


@cli.group("refvnli")
def refvnli_group() -> None:
    """RefVNLI: training data for the (reference, prompt, target) judge."""


@refvnli_group.command("data")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Output folder (images + manifest).")
@click.option("--source", default="world", show_default=True,
              help="'world' (training identities of the built-in world) or a frames manifest (CSV/Parquet: "
                   "path,entity,subject,scene,set,details, mask or box[,noun]).")
@click.option("--species", default="zebra,leopard,giraffe", show_default=True, help="World only: species.")
@click.option("--sets", type=click.IntRange(min=1), default=2, show_default=True,
              help="World only: sets per species (each: --scenes identities x --frames frames).")
@click.option("--scenes", type=click.IntRange(min=2), default=2, show_default=True, help="World only: scenes per set.")
@click.option("--frames", type=click.IntRange(min=2), default=2, show_default=True, help="World only: frames per scene.")
@click.option("--size", type=click.IntRange(min=64, max=256), default=96, show_default=True,
              help="World only: image side in pixels.")
@click.option("--patches", type=click.IntRange(min=1), default=5, show_default=True,
              help="Inpainted versions per frame; the highest-MSE one is kept (the paper: 5).")
@click.option("--patch-fraction", type=click.FloatRange(min=0.0, max=1.0, min_open=True), default=0.3,
              show_default=True, help="Patch side as a share of the subject box's shorter side.")
@click.option("--no-corruptions", is_flag=True, help="Leave out the corruption pairs.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every random choice (same seed, same files).")
@click.option("--manifest-format", type=click.Choice(["parquet", "csv"]), default="parquet", show_default=True,
              help="Format of the triplets manifest.")
@click.option("--overwrite", is_flag=True, help="Replace a non-empty output folder.")
@format_option()
def refvnli_data_cmd(out, source, species, sets, scenes, frames, size, patches, patch_fraction, no_corruptions, seed,
                     manifest_format, overwrite, fmt) -> None:
    """Build labelled triplets by RefVNLI's rules (scene pairs, crops, corruptions, three prompts per pair)."""
    from fpr.scorers.refvnli_data import Settings
    from fpr.workflows.refvnli import WorldFrames, build_refvnli_data

    world = WorldFrames(species=tuple(s.strip() for s in species.split(",") if s.strip()), sets=sets, scenes=scenes,
                        frames=frames, size=size, seed=seed)
    settings = Settings(seed=seed, patches=patches, patch_fraction=patch_fraction, corruptions=not no_corruptions)
    res = build_refvnli_data(out, source=source, world=world, settings=settings, manifest_format=manifest_format,
                             overwrite=overwrite)
    row = res.as_row()
    click.echo(dumps(row) if fmt == "json" else render_rows([row], fmt))
