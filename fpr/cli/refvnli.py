"""``fpr refvnli data``: RefVNLI training triplets (reference crop, prompt, target) with sp and ta labels."""
from __future__ import annotations

import click

from fpr.cli.main import cli, format_option
from fpr.render.cells import dumps, render_rows


@cli.group("refvnli")
def refvnli_group() -> None:
    """RefVNLI: training data and training for the (reference, prompt, target) judge."""


@refvnli_group.command("data")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Output folder (images + manifest).")
@click.option("--source", default="world", show_default=True,
              help="'world' (training identities of the built-in world), a folder (<identity>/*.png or "
                   "<scene>/<entity>/*.png) or a frames manifest (CSV/Parquet: "
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
    from fpr.scorers.refvnli.data import Settings
    from fpr.workflows.refvnli import WorldFrames, build_refvnli_data

    world = WorldFrames(species=tuple(s.strip() for s in species.split(",") if s.strip()), sets=sets, scenes=scenes,
                        frames=frames, size=size, seed=seed)
    settings = Settings(seed=seed, patches=patches, patch_fraction=patch_fraction, corruptions=not no_corruptions)
    res = build_refvnli_data(out, source=source, world=world, settings=settings, manifest_format=manifest_format,
                             overwrite=overwrite)
    row = res.as_row()
    click.echo(dumps(row) if fmt == "json" else render_rows([row], fmt))


@refvnli_group.command("train")
@click.option("--data", required=True, type=click.Path(file_okay=False),
              help="A folder written by `fpr refvnli data` (its triplets are the training set).")
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Checkpoint folder to write (model.safetensors + fpr-refvnli.json).")
@click.option("--val-data", type=click.Path(file_okay=False), default=None,
              help="Another `fpr refvnli data` folder (e.g. another --seed): SP/TA AUROC logged every epoch.")
@click.option("--epochs", type=click.IntRange(min=1), default=25, show_default=True, help="Passes over the triplets.")
@click.option("--batch-size", type=click.IntRange(min=2), default=240, show_default=True,
              help="Triplets per step (whole groups of connected images: a world set is 60).")
@click.option("--lr", type=click.FloatRange(min=0.0, min_open=True), default=2e-3, show_default=True,
              help="Learning rate (AdamW).")
@click.option("--clip-weight", type=click.FloatRange(min=0.0), default=1.0, show_default=True,
              help="Weight of the dual-encoder (CLIP-T analogue) loss.")
@click.option("--full-reference", type=click.FloatRange(min=0.0, max=1.0), default=0.5, show_default=True,
              help="Share of triplets whose reference is the whole frame instead of the subject crop.")
@click.option("--reference-scene", is_flag=True,
              help="Variant: the reference's scene vector also feeds the head (learns scene matching as identity).")
@click.option("--identity-encoder", default="fpr-world-v3", show_default=True,
              help="Frozen identity tower (an fpr encoder id).")
@click.option("--seed", type=int, default=0, show_default=True, help="Initialisation and batch-order seed.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="PyTorch CPU threads (default: PyTorch's; 1 on a crowded machine).")
@click.option("--id", "model_id", default=None, help="Model id in the card (default: the folder's name).")
@click.option("--overwrite", is_flag=True, help="Replace a model already in --out.")
@format_option()
def refvnli_train_cmd(data, out, val_data, epochs, batch_size, lr, clip_weight, full_reference, reference_scene,
                      identity_encoder,
                      seed, device, threads, model_id, overwrite, fmt) -> None:
    """Train a RefVNLI-recipe model (one pass per triplet: textual alignment and subject preservation)."""
    from fpr.encoders.train import command_line
    from fpr.scorers.refvnli.model import NetConfig
    from fpr.workflows.refvnli_train import TrainSettings, train_refvnli

    settings = TrainSettings(epochs=epochs, batch_size=batch_size, lr=lr, clip_weight=clip_weight,
                             full_reference=full_reference, seed=seed, device=device, threads=threads)
    res = train_refvnli(data, out, settings=settings, net_config=NetConfig(identity_encoder=identity_encoder,
                                                                         reference_scene=reference_scene),
                        val_data=val_data, model_id=model_id or "", command=command_line(), overwrite=overwrite)
    row = res.as_row()
    click.echo(dumps(row) if fmt == "json" else render_rows([row], fmt))
