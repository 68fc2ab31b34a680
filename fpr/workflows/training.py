"""Training workflows: pick the data a trainer reads and train an encoder validated by the pipeline's oracle mAP."""
from __future__ import annotations

from pathlib import Path

from fpr.errors import InputError
from fpr.eval import pipeline
from fpr.galleries.manifest import read_manifest
from fpr.galleries.records import ImageRecord
from fpr.workflows.galleries import gallery_items


def training_source(source: str = "world", *, gallery: str | None = None, workspace: str | Path | None = None,
                    identities: int = 400, per_identity: int = 4, render_size: int = 96, seed: int = 0,
                    val_fraction: float = 0.2, twins: float = 0.0, labels: str = "identity"):
    """The data a trainer reads: a stored gallery, the built-in world, or a manifest file.

    ``labels``: ``identity`` (a specialist) or, on the world only, a comma list of attributes
    (``species,background,facing``: a general-purpose stand-in that never sees identity labels)."""
    from fpr.galleries import training

    label_names = training.parse_labels(labels)
    if label_names != ("identity",) and (gallery or source != "world"):
        raise InputError(f"--labels {labels} needs --source world (attribute labels come from the world's renderer)",
                         hint="manifests and galleries train on identity labels: drop --labels")

    if gallery:
        records = [ImageRecord(it.path, it.identity, it.group, it.role, it.content_hash)
                   for it in gallery_items(gallery, workspace=workspace)]
        return training.RecordsSource(records, name=f"gallery:{gallery}", seed=seed, val_fraction=val_fraction)
    if source == "world":
        if identities < 2 or per_identity < 1:
            raise InputError("--identities must be >= 2 and --per-identity >= 1")
        if label_names != ("identity",):
            return training.WorldAttributesSource(labels=label_names, identities=identities,
                                                  per_identity=per_identity, render_size=render_size, seed=seed,
                                                  twins=twins)
        return training.WorldSource(identities=identities, per_identity=per_identity, render_size=render_size,
                                    seed=seed, twins=twins)
    path = Path(source)
    if not path.exists():
        raise InputError("training source not found", where=str(path),
                         hint="pass --source world or a manifest file (path,identity,group)")
    return training.RecordsSource(read_manifest(path), name=f"manifest:{path.name}", seed=seed,
                                  val_fraction=val_fraction)


def train_encoder(source, config, *, encoder_id: str, out: str | Path | None = None, flat: bool = False,
                  overwrite: bool = False, command: str | None = None, description: str | None = None,
                  blend: tuple[str, float] | tuple[str, float, float] | None = None):
    """Train a specialized encoder on ``source`` (see :func:`training_source`), validating every epoch
    with the oracle mAP of the evaluation pipeline; returns a ``TrainResult``."""
    from fpr.encoders import train as tr

    from fpr.encoders.blend import BlendSpec

    return tr.train(source, config, encoder_id=encoder_id, out=out, flat=flat, overwrite=overwrite,
                    command=command, description=description, evaluate=pipeline.leave_one_out_map,
                    blend=BlendSpec(*blend) if blend else None)

