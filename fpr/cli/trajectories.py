"""``fpr export-trajectories``: a run's CIGEval trajectories as agent-tuning JSONL, filtered against human scores."""
from __future__ import annotations

import click

from fpr.cli.main import cli


@cli.command("export-trajectories")
@click.option("--run", required=True, help="Stored run scored with --scorers cigeval.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="JSONL file to write.")
@click.option("--imagenhub", type=click.Path(file_okay=False), default=None,
              help="ImagenHub human-ratings folder: human score = mean SC of the sample's raters.")
@click.option("--human", multiple=True, type=click.Path(dir_okay=False),
              help="Ratings file(s) query_id,rating[,rater] on 0-1 (instead of --imagenhub).")
@click.option("--max-deviation", type=float, default=0.3, show_default=True,
              help="Keep a sample only when |score/10 - human| is at most this (CIGEval: 0.3).")
@click.option("--images", "images_dir", type=click.Path(file_okay=False), default=None,
              help="Also write the images tools made (Highlight) here as PNG, rebuilt as the judge saw them.")
@click.option("--image-size", type=click.IntRange(min=16), default=None,
              help="Size the run's tools worked at (default: from the run's provenance).")
@click.pass_context
def export_trajectories_cmd(ctx, run, out, imagenhub, human, max_deviation, images_dir, image_size) -> None:
    """Observation/thought/action turns per question (loss on thoughts and actions only), one JSON line each."""
    from fpr import api

    r = api.export_trajectories(run, out, workspace=ctx.obj["workspace"], imagenhub=imagenhub,
                                human=list(human) or None, max_deviation=max_deviation, images_dir=images_dir,
                                image_size=image_size)
    if r.filtered:
        click.echo(f"{r.kept} of {r.samples} scored samples within {max_deviation:g} of the human score "
                   f"({r.unmatched} without one); {r.lines} question trajectories -> {r.out}")
    else:
        click.echo(f"{r.kept} scored samples, no human scores (unfiltered); {r.lines} question trajectories -> {r.out}")
