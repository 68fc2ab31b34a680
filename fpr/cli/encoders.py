"""``fpr encoders ...``: list encoders and their weights, fetch weights, import downloaded weights.

``list`` never loads a model (a trained encoder whose card is unusable is listed
as ``broken`` with the reason); ``fetch`` is the only command that uses the network
(and refuses when ``FPR_OFFLINE``/``HF_HUB_OFFLINE`` is set); ``import`` copies a
file or a Hugging Face snapshot folder into the weights folder, converting pickled
checkpoints to safetensors, after proving the stored copy loads with a strict key match.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import click

from fpr import progress
from fpr.cli.main import cli, format_option
from fpr.cli.output import dumps, render_rows
from fpr.encoders import weights as W

if TYPE_CHECKING:
    from fpr.encoders.registry import EncoderSpec


# The registry imports torch: loaded on first use so `fpr --help` and friends start without it.
def all_specs():
    from fpr.encoders.registry import all_specs as specs

    return specs()


def describe(spec):
    from fpr.encoders.registry import describe as desc

    return desc(spec)


def get_spec(encoder_id):
    from fpr.encoders.registry import get_spec as get

    return get(encoder_id)


def broken_encoders():
    from fpr.encoders.registry import broken_encoders as broken

    return broken()


def describe_broken(*args, **kwargs):
    from fpr.encoders.registry import describe_broken as desc

    return desc(*args, **kwargs)
from fpr.errors import InputError

TABLE_COLUMNS = ("id", "dim", "input", "status", "where", "checksum")


def encoder_row(spec: EncoderSpec) -> dict:
    """``describe`` plus ``where``: the weights path when found, else the places looked in."""
    row = describe(spec)
    if spec.weights.kind == "none":
        where = "(no weights)"
    elif row["status"] == "available":
        where = f"{row['found_in']}: {row['weights']}"
    else:
        where = "looked in " + "; ".join(W.candidate_locations(spec.id, spec.weights))
    if row["status"] == "incomplete":
        where = row["reason"]
    row["where"] = where
    row["source"] = spec.weights.repo or spec.weights.kind
    return row


def broken_row(broken) -> dict:
    row = describe_broken(broken)
    row["where"] = f"{broken.where}: {broken.reason}"
    row["source"] = "local"
    return row


def _short(row: dict) -> dict:
    out = {c: row.get(c) for c in TABLE_COLUMNS}
    if out["checksum"] and out["checksum"] not in ("none", "missing"):
        out["checksum"] = out["checksum"][:19]  # sha256: + 12 hex
    return out


@cli.group()
def encoders() -> None:
    """Encoders: what is registered, where its weights are, getting weights offline-first."""


@encoders.command("list")
@format_option()
def list_cmd(fmt: str) -> None:
    """Registered encoders with dimension, input size and weights status (available/missing, where, checksum)."""
    rows = [encoder_row(spec) for spec in all_specs().values()]
    rows += [broken_row(b) for b in broken_encoders().values()]
    rows.sort(key=lambda r: r["id"])
    if fmt == "table":
        click.echo(render_rows([_short(r) for r in rows], fmt, TABLE_COLUMNS))
    else:
        click.echo(render_rows(rows, fmt))


def _verify(spec: EncoderSpec, resolved: W.ResolvedWeights) -> None:
    progress.log(f"checking that {resolved.path} loads as '{spec.id}' (strict)")
    model = spec.build(resolved)
    del model


def _need_weights(spec: EncoderSpec) -> None:
    if spec.weights.kind == "none":
        raise InputError(f"encoder '{spec.id}' has no weights (it is a fixed function)")
    if spec.weights.kind == "package":
        raise InputError(f"encoder '{spec.id}' ships its weights inside fpr; nothing to fetch or import")


@encoders.command("fetch")
@click.argument("encoder_id")
@click.option("--overwrite", is_flag=True, help="Download again even if the weights folder has them.")
@format_option()
def fetch_cmd(encoder_id: str, overwrite: bool, fmt: str) -> None:
    """Download an encoder's weights from the Hugging Face Hub into the weights folder (needs a network)."""
    spec = get_spec(encoder_id)
    _need_weights(spec)
    progress.log(f"fetching {spec.weights.repo} into {W.weights_dir() / (spec.weights.folder_name or spec.id)}")
    W.fetch_weights(spec.id, spec.weights, overwrite=overwrite)
    _verify(spec, W.resolve_weights(spec.id, spec.weights))
    _print_row(spec, fmt)


@encoders.command("import")
@click.argument("encoder_id")
@click.argument("path", type=click.Path(exists=False))
@click.option("--overwrite", is_flag=True, help="Replace weights already in the weights folder.")
@format_option()
def import_cmd(encoder_id: str, path: str, overwrite: bool, fmt: str) -> None:
    """Copy downloaded weights (a file, or a Hugging Face snapshot folder) into the weights folder.

    Pickled checkpoints (.pth/.bin/.pt/.ckpt) are converted to safetensors. The staged copy is
    loaded first (strict key match); nothing is stored unless it loads.
    """
    spec = get_spec(encoder_id)
    _need_weights(spec)
    resolved = W.resolve_weights(spec.id, spec.weights, explicit=path)
    dest = W.import_files(spec.id, spec.weights, resolved, overwrite=overwrite,
                          verify=lambda staged: _verify(spec, staged))
    progress.log(f"imported into {dest}")
    _print_row(spec, fmt)


def _print_row(spec: EncoderSpec, fmt: str) -> None:
    row = encoder_row(spec)
    if fmt == "json":
        click.echo(dumps(row))
    elif fmt == "table":
        click.echo(render_rows([_short(row)], fmt, TABLE_COLUMNS))
    else:
        click.echo(render_rows([row], fmt))
