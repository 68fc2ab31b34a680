"""Encoder workflows: list registered encoders with their weights status, fetch or import weights (proved to load
before stored).
"""
from __future__ import annotations

from pathlib import Path

from fpr import progress
from fpr.errors import InputError


def _encoder_row(encoder_id: str, entry: dict, source) -> dict:
    """``describe`` plus ``where``: the weights path when found, else the places looked in."""
    from fpr.encoders import weights as W
    from fpr.encoders.catalog import describe_entry

    row = describe_entry(encoder_id, entry, source)
    if source.kind == "none":
        where = "(no weights)"
    elif row["status"] == "available":
        where = f"{row['found_in']}: {row['weights']}"
    else:
        where = "looked in " + "; ".join(W.candidate_locations(encoder_id, source))
    if row["status"] == "incomplete":
        where = row["reason"]
    row["where"] = where
    row["source"] = source.repo or source.kind
    return row


def _spec_row(spec) -> dict:
    from fpr.encoders.registry import spec_entry

    return _encoder_row(spec.id, spec_entry(spec), spec.weights)


def list_encoders() -> list[dict]:
    """Every registered encoder (and every broken trained card) with its weights status; loads no model. When
    only the built-in encoders exist, their catalog describes them and no encoder module (nor torch) is
    imported."""
    from fpr.encoders import catalog

    if catalog.builtin_only():
        stored = catalog.stored_catalog()
        return sorted((_encoder_row(i, e, catalog.weights_source(e["weights"])) for i, e in stored.items()),
                      key=lambda r: r["id"])
    from fpr.encoders.registry import all_specs, broken_encoders, describe_broken

    rows = [_spec_row(spec) for spec in all_specs().values()]
    for b in broken_encoders().values():
        rows.append({**describe_broken(b), "where": f"{b.where}: {b.reason}", "source": "local"})
    return sorted(rows, key=lambda r: r["id"])


def encoder_catalog() -> dict[str, dict]:
    """The built-in encoders' catalog entries from their specs (imports every encoder module)."""
    from fpr.encoders.catalog import BUILTIN, catalog_entry
    from fpr.encoders.registry import get_spec, spec_entry

    return {i: catalog_entry(spec_entry(get_spec(i)), get_spec(i).weights) for i in sorted(BUILTIN)}


def write_catalog() -> Path:
    """Rewrite ``fpr/encoders/catalog.json`` from the specs: ``python -c 'from fpr.workflows.encoders import
    write_catalog; write_catalog()'`` after changing a built-in encoder's declaration."""
    import json

    from fpr.encoders.catalog import CATALOG_FILE
    from fpr.files import atomic_write_text

    return atomic_write_text(CATALOG_FILE, json.dumps(encoder_catalog(), indent=1, ensure_ascii=False) + "\n")


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
    return _spec_row(spec)


def import_weights(encoder_id: str, path: str | Path, *, overwrite: bool = False) -> dict:
    """Copy downloaded weights (a file or a snapshot folder) into the weights folder; pickled checkpoints
    become safetensors, and nothing is stored unless the staged copy loads (strict key match)."""
    from fpr.encoders import weights as W

    spec = _weights_spec(encoder_id)
    resolved = W.resolve_weights(spec.id, spec.weights, explicit=str(path))
    dest = W.import_files(spec.id, spec.weights, resolved, overwrite=overwrite,
                          verify=lambda staged: _verify_loads(spec, staged))
    progress.log(f"imported into {dest}")
    return _spec_row(spec)

