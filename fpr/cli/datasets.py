"""``fpr gallery build --preset ...``: the paper's galleries from the real datasets."""
from __future__ import annotations

import click

from fpr import api
from fpr.cli.gallery import _print_info, gallery
from fpr.cli.main import format_option
from fpr.defaults import PRESET_NAMES, SAMPLINGS


@gallery.command("build")
@click.option("--preset", required=True, type=click.Choice(PRESET_NAMES),
              help="cub-paper (CUB-200-2011), cars-paper (Stanford Cars), wildlife-paper (WildlifeReID-10k); "
                   "*-official: the selections of the paper's released code (docs/real-data.md).")
@click.option("--root", required=True, type=click.Path(), help="The dataset folder (its official layout).")
@click.option("--name", default=None, help="Gallery name (default: the preset's name).")
@click.option("--seed", type=int, default=None,
              help="Sampling seed (references and gallery); default 0, or the released seed for *-official.")
@click.option("--sampling", type=click.Choice(SAMPLINGS), default="random", show_default=True,
              help="How gallery images are picked; kmeans needs --encoder.")
@click.option("--encoder", default=None, help="Encoder for k-means sampling (e.g. miewid-msv2).")
@click.option("--overwrite", is_flag=True, help="Replace a gallery of the same name.")
@format_option()
@click.pass_context
def build_cmd(ctx, preset: str, root: str, name: str | None, seed: int | None, sampling: str, encoder: str | None,
              overwrite: bool, fmt: str) -> None:
    """Build the paper's gallery for a dataset: groups, identities, references vs gallery, seeded."""
    info = api.build_preset_gallery(preset, root, name=name, seed=seed, sampling=sampling, encoder=encoder,
                                    workspace=ctx.obj["workspace"], overwrite=overwrite)
    _print_info(info, fmt)
