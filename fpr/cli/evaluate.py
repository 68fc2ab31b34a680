"""``fpr evaluate GENERATIONS GALLERY``: two folders in, the report out; ``fpr examples DIR``: example folders to
try it on (a verb of its own rather than more
``fpr query`` options: query's contract is an index and a queries table, this one's is two folders, as
clean-fid's ``compute_fid(dir1, dir2)``)."""
from __future__ import annotations

import click

from fpr import api, progress
from fpr.cli.main import (batch_size_option, cli, device_option, parse_options, scope_option, scorer_option,
                          table_width, width_options, workers_option)
from fpr.cli.query import REPORT_FORMATS, print_paper


@cli.command("evaluate")
@click.argument("generations", type=click.Path(file_okay=False))
@click.argument("gallery", type=click.Path(file_okay=False))
@click.option("--encoder", required=True,
              help="Encoder id (fpr encoders list). Offline: fpr-world-v3, fpr-general-v2; miewid-msv2, "
                   "bioclip-2, CLIP and DINOv2 need their weights (docs/real-data.md).")
@click.option("--oracle", is_flag=True, help="Also query with the gallery's reference images (method 'oracle').")
@click.option("--references", type=click.IntRange(min=0), default=1, show_default=True,
              help="Reference images per identity taken from the gallery folder (Sim and --oracle use them).")
@click.option("--per-identity", type=click.IntRange(min=1), default=None,
              help="Gallery images kept per identity (default all).")
@click.option("--scorers", default="", help="Comma-separated auxiliary scorers, e.g. clip-t,copy-paste.")
@scorer_option()
@scope_option()
@click.option("--run", default=None, help="Run id (default: eval-<digest of the generations and the index>).")
@click.option("--overwrite", is_flag=True, help="Replace a stored run with the same id.")
@click.option("--skip-missing-identities", is_flag=True, help="Skip (and report) queries with no relevant item.")
@click.option("--skip-unreadable", is_flag=True, help="Skip (and report) unreadable query images.")
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@device_option()
@batch_size_option()
@workers_option()
@width_options()
@click.option("--format", "fmt", type=click.Choice(REPORT_FORMATS), default="table", show_default=True,
              help="Output format on stdout, as fpr report.")
@click.pass_context
def evaluate_cmd(ctx, generations, gallery, encoder, oracle, references, per_identity, scorers, scorer_options,
                 scope, run, overwrite, skip_missing_identities, skip_unreadable, seed, device, batch_size, workers,
                 width, wide, fmt) -> None:
    """Evaluate GENERATIONS (<method>/<group>/<identity>/<image>, or <method>/<identity>/<image> for a
    gallery of one group) against the GALLERY folder (<group>/<identity>/<image>) and print the report as
    fpr report does. The gallery, its index and the run are stored under names made from their content:
    the same folders again reuse them (and say so); a changed file builds anew."""
    ws = ctx.obj["workspace"]
    out = api.evaluate_folders(generations, gallery, encoder, workspace=ws, references=references,
                               per_identity=per_identity, oracle=oracle, scorers=scorers, scope=scope, run=run,
                               overwrite=overwrite, skip_missing_identities=skip_missing_identities,
                               skip_unreadable=skip_unreadable, seed=seed, device=device, batch_size=batch_size,
                               workers=workers, scorer_options=parse_options(scorer_options))
    for line in out.notes():
        progress.log(line)
    print_paper([out.result.run_id], ws, fmt, table_width(width, wide) if fmt == "table" else None)


@cli.command("examples")
@click.argument("folder", type=click.Path(file_okay=False), default=".")
@click.option("--overwrite", is_flag=True, help="Replace example files already in FOLDER.")
def examples_cmd(folder, overwrite) -> None:
    """Write the example inputs the README and docs use into FOLDER (default: here), from the built-in world
    (offline): data/animals/<group>/<identity>/ (a gallery folder), generations/<method>/<group>/<identity>/
    (what fpr evaluate reads), generated.csv and textual-inversion.csv (the same kind of images as queries
    tables), queries.csv with a.png and b.png."""
    out = api.write_examples(folder, overwrite=overwrite)
    click.echo(f"{out.root}: {out.n_gallery_images} gallery images (data/animals), {out.n_generations} "
               f"generations (generations/), generated.csv, textual-inversion.csv, queries.csv, a.png, b.png")
