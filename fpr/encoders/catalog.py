"""The encoder ids fpr knows, found without importing torch or any encoder module.

A name is checked here before a model library loads (a typo is refused in well under a second, not after
torch and the encoder have loaded): the built-in table (id -> the module whose import registers it), the
encoders registered so far, the entry points of ``fpr.encoders`` and the trained encoders' card folders in
the weights folder (``<weights_dir>/<id>/fpr-encoder.json``); so are the device, batch size and workers
options. :mod:`fpr.encoders.registry` holds the specs.
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from fpr.encoders.weights import WeightsSource, resolve_weights, verify_weights, weights_dir
from fpr.errors import InputError, NotFoundError, choices_hint
from fpr.registry import Registry

# Each built-in encoder's id and the module whose import registers it (tests/test_layering.py checks the
# table against what each module registers), plus the modules that register encoders found on disk
# (trained checkpoints). Each must import cheaply (heavy libraries such as open_clip are imported inside
# the build functions).
BUILTIN = {"pixels-16": "fpr.encoders.baselines",
           **{i: "fpr.encoders.world" for i in ("fpr-world-v1", "fpr-world-v2", "fpr-world-v3", "fpr-general-v1",
                                                 "fpr-general-v2")},
           "clip-vit-b-32": "fpr.encoders.clip", "dinov2-vitb14": "fpr.encoders.dinov2",
           "bioclip-2": "fpr.encoders.bioclip", "miewid-msv2": "fpr.encoders.miewid"}
DISCOVERING_MODULES = ("fpr.encoders.world", "fpr.encoders.trained")
CARD_NAME = "fpr-encoder.json"  # a trained encoder's card, in the weights folder's <id>/

# the specs' registry (fpr.encoders.registry sets its item type: the spec class needs torch's types)
ENCODERS: Registry = Registry("encoder", "fpr.encoders", BUILTIN, name_of=lambda s: s.id,
                              more_modules=DISCOVERING_MODULES)


def trained_ids() -> list[str]:
    """The folders of the weights folder holding a trained encoder's card (usable or broken)."""
    root = weights_dir()
    return sorted(p.parent.name for p in root.glob(f"*/{CARD_NAME}")) if root.is_dir() else []


def known_ids() -> list[str]:
    """Every encoder id fpr could load, without loading any."""
    return sorted({*ENCODERS.known_names(), *trained_ids()})


def check_encoder_id(encoder_id: str) -> str:
    """``encoder_id`` if fpr knows it; else one line listing the known ids (nothing imported)."""
    known = known_ids()
    if encoder_id not in known:
        raise NotFoundError(f"unknown encoder '{encoder_id}'",
                            hint=choices_hint(known, "encoders", given=encoder_id) + "; 'fpr encoders list' shows them")
    return encoder_id


def require_builtin_weights(encoder_id: str) -> None:
    """A built-in encoder whose weights are not on this machine, refused from the catalog before torch loads
    (it took 4 s and torch's import to say so); trained, plugin and toy encoders are checked when they load."""
    entry = stored_catalog().get(encoder_id)
    if entry is not None and builtin_only():
        resolve_weights(encoder_id, weights_source(entry["weights"]), required=True)


# The built-in encoders' declarations `fpr encoders list` shows (family, dimension, input size, protocol name,
# description, text tower, weights source), read instead of importing their modules (which import torch).
# Written from the specs by fpr.workflows.encoders.write_catalog; tests/workflows/test_encoder_catalog.py checks it.
CATALOG_FILE = Path(__file__).resolve().parent / "catalog.json"


def stored_catalog() -> dict[str, dict]:
    return json.loads(CATALOG_FILE.read_text(encoding="utf-8"))


def weights_source(fields: dict) -> WeightsSource:
    """A :class:`WeightsSource` from its JSON form (lists back to tuples)."""
    return WeightsSource(**{k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v
                            for k, v in fields.items()})


def catalog_entry(entry: dict, source: WeightsSource) -> dict:
    """One encoder's catalog entry: its shown fields and its weights source as JSON."""
    return {**entry, "weights": json.loads(json.dumps(dataclasses.asdict(source)))}


def builtin_only() -> bool:
    """Whether the encoders fpr knows are the built-in ones only (no trained card, plugin or toy): then the
    catalog lists them all without importing a module."""
    return set(ENCODERS.known_names()) == set(BUILTIN) and not trained_ids()


def describe_entry(encoder_id: str, entry: dict, source: WeightsSource) -> dict:
    """One row of ``fpr encoders list`` from an encoder's shown fields and weights source: honest status (the
    weights looked up on disk now), never raising."""
    resolved = resolve_weights(encoder_id, source, required=False)
    status = "available" if resolved.found else ("incomplete" if resolved.where == "incomplete" else "missing")
    verification = verify_weights(encoder_id, source, resolved)
    return {"id": encoder_id, "family": entry["family"], "dim": entry["dim"], "input": entry["input"],
            "preprocessing": entry["preprocessing"], "status": status,
            "weights": str(resolved.path) if resolved.path else None,
            "found_in": resolved.where if resolved.found else None,
            "checksum": resolved.checksum if resolved.found else None,
            "verified": verification.status, "verification": verification.detail or None, "text": entry["text"],
            "description": entry["description"],
            "reason": _incomplete_reason(encoder_id, source) if status == "incomplete" else None}


def _incomplete_reason(encoder_id: str, source: WeightsSource) -> str:
    folder = weights_dir() / (source.folder_name or encoder_id)
    missing = [n for n in source.extra_files if not (folder / n).is_file()]
    return f"the weights folder {folder} lacks {', '.join(missing)}"


VALID_DEVICES = ("auto", "cpu", "cuda", "cuda:N", "mps")
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda|cuda:\d+|mps)$")


def check_device(device: str) -> str:
    """``device`` if it is one fpr knows (auto, cpu, cuda, cuda:N, mps), else one InputError listing them."""
    if not isinstance(device, str) or not _DEVICE_RE.match(device):
        raise InputError(f"unknown device '{device}'", hint=choices_hint(VALID_DEVICES, "devices"))
    return device


def check_batch_size(batch_size: int) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"batch size must be a whole number >= 1, got {batch_size!r}", hint="e.g. --batch-size 32")
    return batch_size


def check_workers(workers: int | None) -> int | None:
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 0):
        raise InputError(f"workers must be a whole number >= 0, got {workers!r}",
                         hint="--workers 0 decodes in the main process")
    return workers


__all__ = ["BUILTIN", "CARD_NAME", "CATALOG_FILE", "DISCOVERING_MODULES", "ENCODERS", "VALID_DEVICES", "builtin_only",
           "catalog_entry", "check_batch_size", "check_device", "check_encoder_id", "check_workers", "describe_entry",
           "known_ids", "stored_catalog", "trained_ids", "weights_source"]
