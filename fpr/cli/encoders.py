"""``fpr encoders ...``: list encoders and their weights, fetch weights, import downloaded weights.

``list`` never loads a model (a trained encoder whose card is unusable is listed
as ``broken`` with the reason); ``fetch`` is the only command that uses the network
(and refuses when ``FPR_OFFLINE``/``HF_HUB_OFFLINE`` is set); ``import`` copies a
file or a Hugging Face snapshot folder into the weights folder, converting pickled
checkpoints to safetensors, after proving the stored copy loads with a strict key match.
"""
from __future__ import annotations

import click

from fpr import api
from fpr.cli.main import cli, format_option, table_width, width_options
from fpr.render.cells import dumps, render_rows

TABLE_COLUMNS = ("id", "dim", "input", "status", "verified", "where", "checksum")


def _short(row: dict) -> dict:
    return {c: row.get(c) for c in TABLE_COLUMNS}  # the table shows checksums short (render.cells)


@cli.group()
def encoders() -> None:
    """Encoders: what is registered, where its weights are, getting weights offline-first."""


@encoders.command("list")
@width_options()
@format_option()
def list_cmd(width: int | None, wide: bool, fmt: str) -> None:
    """Registered encoders with dimension, input size and weights status (available/missing, where, checksum).

    ``verified``: the weights file's SHA-256 equals the published one (verified), differs (mismatch: usable,
    e.g. fine-tuned, but not the published weights), or no published value is registered (unverified).
    """
    rows = api.list_encoders()
    if fmt == "table":
        click.echo(render_rows([_short(r) for r in rows], fmt, TABLE_COLUMNS, width=table_width(width, wide)))
    else:
        click.echo(render_rows(rows, fmt))


@encoders.command("fetch")
@click.argument("encoder_id")
@click.option("--overwrite", is_flag=True, help="Download again even if the weights folder has them.")
@format_option()
def fetch_cmd(encoder_id: str, overwrite: bool, fmt: str) -> None:
    """Download an encoder's weights from the Hugging Face Hub into the weights folder (needs a network)."""
    _print_row(api.fetch_weights(encoder_id, overwrite=overwrite), fmt)


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
    _print_row(api.import_weights(encoder_id, path, overwrite=overwrite), fmt)


def _print_row(row: dict, fmt: str) -> None:
    if fmt == "json":
        click.echo(dumps(row))
    elif fmt == "table":
        click.echo(render_rows([_short(row)], fmt, TABLE_COLUMNS))
    else:
        click.echo(render_rows([row], fmt))
