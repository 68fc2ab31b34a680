"""Encoder workflows: list registered encoders with their weights status, fetch or import weights (proved to load
before stored).
"""
from __future__ import annotations

from pathlib import Path

from fpr import progress
from fpr.errors import InputError


def _encoder_row(spec) -> dict:
    """``describe`` plus ``where``: the weights path when found, else the places looked in."""
    from fpr.encoders import weights as W
    from fpr.encoders.registry import describe

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


def list_encoders() -> list[dict]:
    """Every registered encoder (and every broken trained card) with its weights status; loads no model."""
    from fpr.encoders.registry import all_specs, broken_encoders, describe_broken

    rows = [_encoder_row(spec) for spec in all_specs().values()]
    for b in broken_encoders().values():
        rows.append({**describe_broken(b), "where": f"{b.where}: {b.reason}", "source": "local"})
    return sorted(rows, key=lambda r: r["id"])


def _weights_spec(encoder_id: str):
    from fpr.encoders.registry import get_spec

    spec = get_spec(encoder_id)
    if spec.weights.kind == "none":
        raise InputError(f"encoder '{spec.id}' has no weights (it is a fixed function)")
    if spec.weights.kind == "package":
        raise InputError(f"encoder '{spec.id}' ships its weights inside fpr; nothing to fetch or import")
    return spec


def _verify_loads(spec, resolved) -> None:
    progress.log(f"checking that {resolved.path} loads as '{spec.id}' (strict)")
    spec.build(resolved)


def fetch_weights(encoder_id: str, *, overwrite: bool = False) -> dict:
    """Download an encoder's weights into the weights folder (needs a network), then prove they load."""
    from fpr.encoders import weights as W

    spec = _weights_spec(encoder_id)
    progress.log(f"fetching {spec.weights.repo} into {W.weights_dir() / (spec.weights.folder_name or spec.id)}")
    W.fetch_weights(spec.id, spec.weights, overwrite=overwrite)
    _verify_loads(spec, W.resolve_weights(spec.id, spec.weights))
    return _encoder_row(spec)


def import_weights(encoder_id: str, path: str | Path, *, overwrite: bool = False) -> dict:
    """Copy downloaded weights (a file or a snapshot folder) into the weights folder; pickled checkpoints
    become safetensors, and nothing is stored unless the staged copy loads (strict key match)."""
    from fpr.encoders import weights as W

    spec = _weights_spec(encoder_id)
    resolved = W.resolve_weights(spec.id, spec.weights, explicit=str(path))
    dest = W.import_files(spec.id, spec.weights, resolved, overwrite=overwrite,
                          verify=lambda staged: _verify_loads(spec, staged))
    progress.log(f"imported into {dest}")
    return _encoder_row(spec)

