"""``fpr encoders train``: train a specialized encoder on identity-labelled images."""
from __future__ import annotations

import click

from fpr import api
from fpr.cli.encoders import encoders
from fpr.cli.main import format_option
from fpr.render.cells import dumps, render_rows


@encoders.command("train")
@click.option("--source", "source", default="world", show_default=True,
              help="'world' (the built-in world, rendered afresh every epoch) or a gallery manifest "
                   "(CSV/Parquet: path,identity,group).")
@click.option("--gallery", default=None, help="Train on a gallery stored in the workspace instead of --source.")
@click.option("--id", "encoder_id", required=True, help="Encoder id to create (e.g. effnetv2-cars).")
@click.option("--arch", default="fpr-cnn-grid", show_default=True,
              help="fpr-cnn-grid, fpr-cnn-s, fpr-cnn, or any timm model name (e.g. efficientnetv2_rw_m).")
@click.option("--size", type=click.IntRange(min=1), default=64, show_default=True, help="Network input side in pixels.")
@click.option("--dim", type=click.IntRange(min=1), default=128, show_default=True, help="Embedding dimension.")
@click.option("--epochs", type=click.IntRange(min=1), default=20, show_default=True, help="Passes over the training images.")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True, help="Images per training batch.")
@click.option("--lr", type=float, default=3e-3, show_default=True, help="Peak learning rate.")
@click.option("--margin", type=float, default=0.1, show_default=True,
              help="Additive cosine margin (0 = plain normalised softmax).")
@click.option("--scale", type=float, default=24.0, show_default=True, help="Cosine-classifier scale.")
@click.option("--pretrained", is_flag=True, help="Start a timm model from its ImageNet weights (may download).")
@click.option("--identities", type=click.IntRange(min=1), default=400, show_default=True,
              help="World only: training identities per species.")
@click.option("--per-identity", type=click.IntRange(min=1), default=4, show_default=True,
              help="World only: images rendered per identity and epoch.")
@click.option("--render-size", type=click.IntRange(min=1), default=96, show_default=True, help="World only: rendered image side.")
@click.option("--twins", type=float, default=0.0, show_default=True,
              help="World only: give every identity a twin class with this share of its markings redrawn "
                   "(0 = none; fpr-world-v3 uses 0.25).")
@click.option("--labels", default="identity", show_default=True,
              help="World only: 'identity' (a specialist) or a comma list of species, background, facing, pose: "
                   "classes are those attributes, never identity (a general-purpose stand-in; fpr-general-v1, v2).")
@click.option("--blend", "blend_partner", default=None,
              help="After training, mix in a share of this encoder's embedding (e.g. fpr-world-v3), calibrated on "
                   "the validation images to --blend-target: fpr-general-v1's and v2's recipe (docs/world.md).")
@click.option("--blend-target", type=float, default=None,
              help="Oracle mAP on the validation images that --blend calibrates the share to (e.g. 0.45).")
@click.option("--blend-layout", type=float, default=0.0, show_default=True,
              help="With --blend: a declared share of the pixels-16 layout embedding (scene instance, pose, framing) "
                   "in the blend, fixed before the identity share is calibrated: fpr-general-v2's recipe.")
@click.option("--val-fraction", type=float, default=0.2, show_default=True,
              help="Manifest/gallery only: share of identities held out for validation.")
@click.option("--steps-per-epoch", type=click.IntRange(min=1), default=None, help="Cap on batches per epoch (smoke tests).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the split, the initialisation and the batches.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda.")
@click.option("--workers", type=click.IntRange(min=0), default=None, help="Data loader processes (default: 1 when 2+ CPUs).")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="PyTorch CPU threads (default: one per CPU not used by a loader worker).")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Output folder (default: the weights folder's <id>/, where the registry discovers it).")
@click.option("--flat", is_flag=True, help="Write <out>/<id>.safetensors + <out>/<id>.json (the shipped layout).")
@click.option("--overwrite", is_flag=True, help="Replace an existing encoder with the same id.")
@format_option()
@click.pass_context
def train_cmd(ctx, source, gallery, encoder_id, arch, size, dim, epochs, batch_size, lr, margin, scale, pretrained,
              identities, per_identity, render_size, twins, labels, blend_partner, blend_target, blend_layout, val_fraction, steps_per_epoch, seed,
              device, workers, threads,
              out, flat, overwrite, fmt) -> None:
    """Train an encoder; validate by oracle mAP on held-out identities each epoch; register it by id."""
    from fpr.encoders import train as tr

    config = tr.TrainConfig(arch=arch, size=size, dim=dim, epochs=epochs, batch_size=batch_size, lr=lr,
                            margin=margin, scale=scale, seed=seed, device=device, workers=workers,
                            threads=threads, steps_per_epoch=steps_per_epoch, pretrained=pretrained)
    config.check()  # bad arch etc. fail before any data is read
    if (blend_partner is None) != (blend_target is None):
        raise click.UsageError("--blend and --blend-target go together (e.g. --blend fpr-world-v3 --blend-target 0.45)")
    if blend_layout and blend_partner is None:
        raise click.UsageError("--blend-layout needs --blend and --blend-target (e.g. --blend fpr-world-v3 "
                               "--blend-target 0.4 --blend-layout 0.2)")
    src = api.training_source(source, gallery=gallery, workspace=ctx.obj["workspace"], identities=identities,
                              per_identity=per_identity, render_size=render_size, seed=seed,
                              val_fraction=val_fraction, twins=twins, labels=labels)
    res = api.train_encoder(src, config, encoder_id=encoder_id, out=out, flat=flat, overwrite=overwrite,
                            command=tr.command_line(),
                            blend=(blend_partner, blend_target, blend_layout) if blend_partner else None)
    row = res.as_row()
    click.echo(dumps(row) if fmt == "json" else render_rows([row], fmt))
